"""`python -m bert_core download`: fetch corpora and fine-tuning tasks into the cache ahead of time (a Docker
image does this at build time, so a Space offers them at once)."""

from __future__ import annotations

import sys

from bert_core.data.downloads import SOURCES, fetch_corpus_text
from bert_core.data.task_downloads import TASKS, fetch_task_csv

NAMES = (*TASKS, *SOURCES)


def add_parser(sub):
    p = sub.add_parser("download", help="fetch corpora and fine-tuning tasks into the cache",
                       description="Download, verify and cache the named corpora and fine-tuning tasks (once; "
                                   "later runs read the cache, or the shared data folder when it is there). "
                                   f"Names: {', '.join(NAMES)}.")
    p.add_argument("names", nargs="+", choices=NAMES, metavar="NAME", help=f"one or more of {', '.join(NAMES)}")
    return p


def _progress(name: str):
    def report(done: int, total: int | None) -> None:
        size = f" of {total / 1e6:.1f} MB" if total else ""
        print(f"\r{name}: {done / 1e6:.1f} MB{size}", end="", file=sys.stderr, flush=True)
    return report


def run(args) -> int:
    """Carry out `python -m bert_core download`."""
    for name in dict.fromkeys(args.names):
        if name in TASKS:
            where = fetch_task_csv(name, progress=_progress(name))
        else:
            where = fetch_corpus_text(name, progress=_progress(name))[1]
        print(file=sys.stderr)
        print(f"{name}: {where}")
    return 0
