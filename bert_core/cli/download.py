"""`python -m bert_core download`: fetch corpora and fine-tuning tasks into the cache ahead of time (a Docker
image does this at build time, so a Space offers them at once)."""

from __future__ import annotations

import sys

from bert_core.cli.console import one_line
from bert_core.data.downloads import SOURCES, fetch_corpus_text
from bert_core.data.task_downloads import TASKS, fetch_task_csv
from bert_core.data.treebank import UD_EWT_NAME, fetch_treebank
from bert_core.errors import BertCoreError, is_disk_full
from bert_core.model.files import disk_full_words
from bert_core.paths import cache_dir

NAMES = (*TASKS, UD_EWT_NAME, *SOURCES)


def add_parser(sub):
    p = sub.add_parser("download", help="fetch corpora, fine-tuning tasks and the treebank into the cache",
                       description="Download, verify and cache the named corpora, fine-tuning tasks and treebank "
                                   "(once; later runs read the cache, or the shared data folder when it is there). "
                                   "Every name is tried, one line each (its cached file, or an error: line); the "
                                   f"exit status is 1 when any failed. Names: {', '.join(NAMES)}.")
    p.add_argument("names", nargs="+", choices=NAMES, metavar="NAME", help=f"one or more of {', '.join(NAMES)}")
    return p


def _progress(name: str):
    def report(done: int, total: int | None) -> None:
        size = f" of {total / 1e6:.1f} MB" if total else ""
        print(f"\r{name}: {done / 1e6:.1f} MB{size}", end="", file=sys.stderr, flush=True)
    return report


def _fetch(name: str):
    if name in TASKS:
        return fetch_task_csv(name, progress=_progress(name))
    if name == UD_EWT_NAME:   # the treebank the Attention page finds the heads that follow syntax with
        return fetch_treebank(progress=_progress(name))
    return fetch_corpus_text(name, progress=_progress(name))[1]


def run(args) -> int:
    """Try every name, so that one unreachable host does not keep the others from the cache."""
    failed = 0
    for name in dict.fromkeys(args.names):
        try:
            where = _fetch(name)
        except (BertCoreError, OSError) as exc:
            failed += 1
            why = one_line(exc)
            if is_disk_full(exc):   # the user's disk, said as every command says it
                why = disk_full_words((exc.filename if isinstance(exc, OSError) else None) or cache_dir(), exc)
            elif isinstance(exc, OSError) and exc.strerror:   # the machine's answer, as main() words it
                why = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
            print(file=sys.stderr)
            print(f"error: {name}: {why}", file=sys.stderr, flush=True)
            continue
        print(file=sys.stderr)
        print(f"{name}: {where}", flush=True)
    return 1 if failed else 0
