"""`python -m bert_core heldout`: write the documents a checkpoint held out, and re-score it on them
(bert_core.training.heldout)."""

from __future__ import annotations

from bert_core.cli.arguments import path_arg
from bert_core.errors import BertCoreError
from bert_core.model.files import check_output_file
from bert_core.training.heldout import heldout_split_record, select_corpora, update_metrics, write_heldout_text


def add_parser(sub):
    p = sub.add_parser("heldout", help="write a checkpoint's held-out text to a file (to re-run its evaluation)",
                       description="Rebuild the documents that `train` held out (the split recorded in the "
                                   "checkpoint's metrics.json) and write them as plain text for `eval --text-file`.")
    p.add_argument("--checkpoint", type=path_arg, required=True, help="checkpoint folder written by `train`")
    p.add_argument("--out", type=path_arg, help="text file to write (a new file, or an existing one with --overwrite)")
    p.add_argument("--corpus", action="append", metavar="SPEC",
                   help="only this corpus's held-out documents (its --corpus as `train` was given it, or its name; "
                        "repeat for more), e.g. to score Brown alone")
    p.add_argument("--overwrite", action="store_true", help="replace the file --out if it exists")
    p.add_argument("--update-metrics", action="store_true",
                   help="also evaluate the checkpoint on it and store the figures and commands under \"eval\" "
                        "in its metrics.json")
    return p


def run(args) -> int:
    """Carry out `python -m bert_core heldout`: write the held-out text and/or store its evaluation."""
    if args.out is None and not args.update_metrics:
        raise BertCoreError("give --out FILE (and/or --update-metrics)")
    if args.out is not None:
        check_output_file(args.out, overwrite=args.overwrite)
    # A folder without a split, or a --corpus it did not hold out, is refused before any evaluation.
    select_corpora(heldout_split_record(args.checkpoint), args.corpus)
    if args.corpus and args.out is None:
        raise BertCoreError("--corpus chooses what --out holds: give --out FILE")
    if args.update_metrics:
        r = update_metrics(args.checkpoint)
        if r["objective"] == "clm":
            print(f"metrics.json eval: next-token accuracy {100 * r['next_token_accuracy']:.2f}% on "
                  f"{r['predicted_tokens']} predicted tokens, next-token perplexity {r['perplexity']:.1f}")
        else:
            print(f"metrics.json eval: masked-token accuracy {100 * r['masked_token_accuracy']:.2f}% on "
                  f"{r['masked_tokens']} masked tokens, perplexity {r['perplexity']:.1f}, "
                  f"NSP {100 * r['nsp_accuracy']:.2f}%")
    if args.out is None:
        return 0
    info = write_heldout_text(args.checkpoint, args.out, corpora=args.corpus)
    print(f"wrote {info['documents']} held-out documents ({info['sentences']} sentences) of "
          f"{', '.join(info['corpora'])} to {info['path']}")
    return 0
