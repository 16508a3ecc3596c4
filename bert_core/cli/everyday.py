"""`python -m bert_core everyday`: a checkpoint's top-1 and top-5 on the everyday-English blanks, per topic, and its
minimal pairs right (bert_core.inspect.everyday_measure on bert_core.data.everyday_set)."""

from __future__ import annotations

import json

from bert_core.cli.arguments import path_arg
from bert_core.cli.console import percent
from bert_core.data.everyday_set import BLANKS_FILE, PAIRS_FILE, load_blanks, load_everyday_pairs
from bert_core.inspect.everyday_measure import TOP_K, everyday_report
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT


def add_parser(sub):
    p = sub.add_parser("everyday", help="top-1/top-5 on plain everyday sentences with one blank, and minimal pairs",
                       description="Measure a checkpoint on the project's everyday-English set (written for it, kept "
                                   "out of training): top-1 and top-5 on fill-in-the-blank sentences, overall and per "
                                   "topic (a BERT only: a GPT cannot fill a blank with words after it), and the "
                                   "minimal pairs it gets right, scored as `score` scores them.")
    p.add_argument("--checkpoint", type=path_arg, default=None, help="checkpoint folder (default: the shipped model)")
    p.add_argument("--blanks", type=path_arg, default=BLANKS_FILE, metavar="TSV",
                   help="your own blanks: topic<TAB>sentence with one [MASK]<TAB>right, words (default: the set's)")
    p.add_argument("--pairs", type=path_arg, default=PAIRS_FILE, metavar="TSV",
                   help="your own minimal pairs: kind<TAB>good sentence<TAB>bad sentence (default: the set's)")
    p.add_argument("--each", action="store_true", help="also print every sentence with the model's guesses")
    p.add_argument("--json", action="store_true", help="print one JSON object (every sentence under 'items')")
    return p


def _row(name: str, t: dict) -> str:
    return f"{name:<22} {percent(t['top1_share']):>8} {percent(t['top5_share']):>8} {t['sentences']:>10}"


def _print_blanks(b: dict, each: bool) -> None:
    print(f"{'blanks':<22} {'top-1':>8} {'top-5':>8} {'sentences':>10}")
    print(_row("all", b))
    if b["out_of_vocabulary"]:
        print(_row("within the vocabulary", b["within_vocabulary"]) + f"   ({b['out_of_vocabulary']} sentences "
              "have no right word that is one piece of this vocabulary: counted as misses in 'all')")
    for topic, t in b["by_topic"].items():
        print(_row(topic, t))
    if each:
        for item in b["items"]:
            mark = f"top-{item['rank']}" if item["rank"] else "miss " if item["in_vocabulary"] else "(oov)"
            print(f"{mark:<6} {item['text']}  guesses: {', '.join(item['guesses'])}  "
                  f"right: {', '.join(item['answers'])}")


def run(args) -> int:
    """Carry out `python -m bert_core everyday`: the blanks' table, then the pairs."""
    blanks, pairs = load_blanks(args.blanks), load_everyday_pairs(args.pairs)  # a bad file fails before the model
    ckpt = load_checkpoint(args.checkpoint or DEFAULT_CHECKPOINT, require_tokenizer=True)
    report = {"checkpoint": str(ckpt.folder), "blanks_file": str(args.blanks), "pairs_file": str(args.pairs),
              "top_k": TOP_K, **everyday_report(ckpt.model, ckpt.tokenizer, blanks, pairs)}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{ckpt.folder} ({report['model'].upper()}): {len(blanks)} blanks, {len(pairs)} minimal pairs")
    if report["blanks"] is None:
        print(f"blanks: not measured. {report['blanks_skipped']}")
    else:
        _print_blanks(report["blanks"], args.each)
    p = report["pairs"]
    print(f"minimal pairs ({p['method']}): {p['right']} of {p['pairs']} right ({percent(p['accuracy'])})"
          + "".join(f"; {k} {v['right']}/{v['pairs']}" for k, v in p["by_kind"].items()))
    return 0
