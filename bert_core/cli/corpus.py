"""`python -m bert_core corpus build | check`: build a pretraining corpus of token shards from public collections
(the optional package bert_core.corpus), and check a shard folder whole (docs/corpus.md)."""

from __future__ import annotations

import hashlib
import json
import sys

from bert_core.cli.arguments import float_arg, int_arg, path_arg
from bert_core.data.shards import DEFAULT_WEIGHTS, BuildSettings, open_index, shard_tokens
from bert_core.errors import BertCoreError
from bert_core.model.tokenization import BertTokenizer
from bert_core.paths import CHECKPOINTS_DIR

DEFAULT_TOKENIZER = CHECKPOINTS_DIR / "bert-mini-english"


def _weight(text: str) -> tuple[str, float]:
    kind, sep, value = text.partition("=")
    try:
        w = float(value)
    except ValueError:
        w = -1.0
    if not sep or kind not in DEFAULT_WEIGHTS or not 0 <= w <= 100:
        raise BertCoreError(f"--weight takes KIND=W with KIND one of {', '.join(DEFAULT_WEIGHTS)} and W in "
                            f"[0, 100], got {text!r}")
    return kind, w


def add_parser(sub):
    p = sub.add_parser("corpus", help="build a pretraining corpus of token shards from public collections",
                       description="Build a cleaned, deduplicated, decontaminated corpus of uint16 token shards "
                                   "from folders or bare git directories (docs/corpus.md), or check one.")
    csub = p.add_subparsers(dest="corpus_command", metavar="ACTION", parser_class=type(p))
    b = csub.add_parser("build", help="build a corpus folder from SOURCE folders or git directories",
                        description="Each SOURCE is a folder or a bare git directory of Gutenberg books, the "
                                    "Reuters JSON, 20 Newsgroups, BBC topic folders, NLTK's corpora or plain text, "
                                    "detected from its files; write KIND:PATH to name the kind.")
    b.add_argument("sources", nargs="+", metavar="SOURCE")
    b.add_argument("--out", type=path_arg, required=True, help="the corpus folder to create (must be new or empty)")
    b.add_argument("--overwrite", action="store_true", help="replace --out once the new corpus is complete")
    b.add_argument("--tokenizer", type=path_arg, default=DEFAULT_TOKENIZER,
                   help="a folder holding tokenizer.json or vocab.txt (default: the shipped bert-mini-english)")
    b.add_argument("--against", action="append", default=[], metavar="FILE",
                   help="more evaluation text to decontaminate against: a file, or GIT_DIR::PATH (repeat)")
    b.add_argument("--no-default-references", action="store_true",
                   help="decontaminate only against --against, not the everyday set, WikiText-2's test split "
                        "(downloaded once) and the shared folder's files")
    b.add_argument("--seed", type=int_arg(0, 2**31 - 1), default=0)
    b.add_argument("--author-cap-words", type=int_arg(1), default=BuildSettings.author_cap_words,
                   help="most words kept per Gutenberg author (default %(default)s)")
    b.add_argument("--heldout-fraction", type=float_arg(0.0, 0.5), default=BuildSettings.heldout_fraction,
                   help="share of each source's words held out, by whole documents or paragraph sections (default "
                        "%(default)s; a warning when a source cannot make it)")
    b.add_argument("--weight", action="append", default=[], metavar="KIND=W",
                   help="times a source kind's windows are read per epoch (defaults: "
                        + ", ".join(f"{k}={v:g}" for k, v in DEFAULT_WEIGHTS.items()) + ")")
    b.add_argument("--shard-tokens", type=int_arg(1024), default=BuildSettings.shard_tokens,
                   help="most token ids per shard (default %(default)s: 16 MB raw)")
    b.add_argument("--compress", action="store_true", help="write xz-compressed shards (to carry to a GPU machine)")
    b.add_argument("--json", action="store_true", help="print the report as JSON")
    c = csub.add_parser("check", help="check every shard of a corpus folder against its recorded sha256")
    c.add_argument("folder", type=path_arg)
    p.set_defaults(corpus_parser=p)
    return p


def run(args) -> int:
    """Carry out `python -m bert_core corpus ...`."""
    if args.corpus_command == "build":
        return _build(args)
    if args.corpus_command == "check":
        return _check(args)
    args.corpus_parser.print_help(sys.stderr)
    return 2


def _build(args) -> int:
    # The pipeline is an optional package off the core path: only a build imports it.
    from bert_core.corpus.build import build_corpus

    weights = dict(DEFAULT_WEIGHTS)
    weights.update(_weight(w) for w in args.weight)
    settings = BuildSettings(seed=args.seed, author_cap_words=args.author_cap_words,
                             heldout_fraction=args.heldout_fraction, shard_tokens=args.shard_tokens,
                             compress=args.compress, weights=weights)
    tokenizer = BertTokenizer.load(args.tokenizer)
    report = build_corpus([str(s) for s in args.sources], args.out, tokenizer, settings,
                          references=[] if args.no_default_references else None, against=args.against,
                          overwrite=args.overwrite, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    for warning in report["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
        return 0
    for name, s in report["sources"].items():
        dropped = sum(d["words"] for d in s["dropped"].values())
        print(f"{name}: {s['words_read']:,} words read, {dropped:,} dropped, {s['words_kept']:,} kept in "
              f"{s['documents_kept']:,} documents ({s['heldout_documents']} held out); weight {s['weight']:g}, "
              f"{100 * s['share_of_mix']:.1f}% of the mix")
    t = report["tokens"]
    print(f"{args.out}: {t['train']:,} training and {t['heldout']:,} held-out tokens; report in "
          f"{args.out / 'report.json'}")
    return 0


def _check(args) -> int:
    index = open_index(args.folder)
    for s in index["shards"]:
        data = shard_tokens(args.folder, s)
        if hashlib.sha256(data.tobytes()).hexdigest() != s["sha256"]:
            raise BertCoreError(f"shard {s['file']} differs from the one built (sha256); copy it again or rebuild")
    print(f"{args.folder}: {len(index['shards'])} shards whole, {index['tokens']['train']:,} training and "
          f"{index['tokens']['heldout']:,} held-out tokens")
    return 0
