"""`python -m bert_core train | eval | fill-mask | bench | finetune | heldout`: the command-line face of bert_core.

User mistakes print one line `error: ...` and exit with status 2; progress goes to stderr, results to stdout
(as JSON with --json).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import sys

from bert_core.cli import (bench, corpus, download, everyday, export, finetune, generate, grow, heldout, score,
                           train)
from bert_core.cli.arguments import FRACTION, SEED, int_arg, path_arg
from bert_core.cli.console import one_line, percent
from bert_core.data.objectives import MASK_RATE
from bert_core.errors import BertCoreError, is_disk_full
from bert_core.inspect.grammar import trained_lm_head
from bert_core.inspect.inspection import fill_mask
from bert_core.model.checkpoint import load_checkpoint
from bert_core.model.config import MAX_BATCH, MAX_SEQ_LEN
from bert_core.model.files import disk_full_words
from bert_core.paths import DEFAULT_CHECKPOINT
from bert_core.training.allocator import TRAINING_COMMANDS, keep_freed_memory
from bert_core.training.heldout import evaluate_text_file


def _add_eval(sub):
    p = sub.add_parser("eval", help="evaluate a checkpoint on a text file (seeded masking)",
                       description="Masked-token accuracy, MLM perplexity and NSP accuracy of a checkpoint on a "
                                   "text file, with seeded masking, beside the unigram baseline.")
    p.add_argument("--checkpoint", type=path_arg, required=True, help="checkpoint folder")
    p.add_argument("--text-file", type=path_arg, required=True, help="plain text to evaluate on")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the masking and NSP pairs")
    p.add_argument("--batches", type=int_arg(1, 10**6), default=50, help="maximum number of batches to evaluate")
    p.add_argument("--batch-size", type=int_arg(1, MAX_BATCH), default=32)
    p.add_argument("--seq-len", type=int_arg(16, MAX_SEQ_LEN), default=None,
                   help="default: the checkpoint's training length or 128 (at most its positions)")
    p.add_argument("--mask-rate", type=FRACTION, default=MASK_RATE)
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    return p


def cmd_eval(args) -> int:
    r = evaluate_text_file(args.checkpoint, args.text_file, seed=args.seed, batches=args.batches,
                           batch_size=args.batch_size, seq_len=args.seq_len, mask_rate=args.mask_rate,
                           device=args.device)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    u = r["unigram_baseline"]
    unigram = percent(u.get("accuracy"))
    if r.get("objective") == "clm":
        print(f"{r['text_file']}: {r['predicted_tokens']} next-token predictions in {r['sequences']} sequences "
              "(a causal model: each position predicts the token after it, seeing only the tokens before)")
        print(f"next-token accuracy   {percent(r['next_token_accuracy'])}   unigram baseline {unigram}")
        print(f"next-token perplexity {r['perplexity']:.1f}   unigram baseline {u.get('perplexity', float('nan')):.1f}")
        return 0
    print(f"{r['text_file']}: {r['masked_tokens']} masked tokens in {r['sequences']} sequences (seed {r['seed']})")
    print(f"masked-token accuracy {percent(r['masked_token_accuracy'])}   unigram baseline {unigram}")
    print(f"MLM perplexity        {r['perplexity']:.1f}   unigram baseline {u.get('perplexity', float('nan')):.1f}")
    print(f"NSP accuracy          {percent(r['nsp_accuracy'])}   chance 50%")
    return 0



def _add_fill_mask(sub):
    p = sub.add_parser("fill-mask", help="top-k predictions for each [MASK] in a text",
                       description="Print the checkpoint's top-k candidates for every [MASK] in TEXT.")
    p.add_argument("--checkpoint", type=path_arg, default=None, help="checkpoint folder (default: the shipped model)")
    p.add_argument("text", help='text with one or more [MASK], e.g. "the cat sat on the [MASK] ."')
    p.add_argument("--top-k", type=int_arg(1, 10**6), default=5, help="candidates per [MASK] (default 5)")
    p.add_argument("--json", action="store_true")
    return p


def cmd_fill_mask(args) -> int:
    folder = args.checkpoint or DEFAULT_CHECKPOINT
    ckpt = load_checkpoint(folder, require_tokenizer=True)
    trained_lm_head(ckpt.model)
    predictions = fill_mask(ckpt.model, ckpt.tokenizer, args.text, top_k=args.top_k)
    if args.json:
        print(json.dumps([{"position": p.position, "candidates": [{"token": t, "prob": pr} for t, pr in p.candidates]}
                          for p in predictions], indent=1))
        return 0
    for i, p in enumerate(predictions, 1):
        cands = "  ".join(f"{t} {pr:.3f}" for t, pr in p.candidates)
        print(f"[MASK] {i} (token {p.position}): {cands}")
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's usage + error, but on one line that starts with "error:"
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argparse tree of `python -m bert_core`."""
    parser = _Parser(prog="python -m bert_core", description="BERT from scratch: pretrain, evaluate, inspect.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    # What every command's arguments have, set by those it concerns: its function (none: no command given), and
    # what it writes (a full disk's message names it).
    parser.set_defaults(func=None, out=None, resume=None)
    modules = (bench, finetune, heldout, generate, grow, download, score, everyday, corpus, export)
    for add, run in ((train.add_parser, train.run), (_add_eval, cmd_eval), (_add_fill_mask, cmd_fill_mask),
                     *((m.add_parser, m.run) for m in modules)):   # in the order --help lists them
        add(sub).set_defaults(func=run)
    return parser


# Commands whose process trains and then exits keep freed memory for reuse (see bert_core.training.allocator). `bench`
# applies it itself, with a flag to compare without it.
_KEEPS_FREED_MEMORY = set(TRAINING_COMMANDS) - {"bench"}


DEBUG_ENV = "BERT_CORE_DEBUG"  # set to 1 for full tracebacks instead of one `error:` line


def _check_text_arguments(args) -> None:
    """Refuse text that is not UTF-8. On Linux, argv bytes that are not UTF-8 arrive as lone surrogates, which the
    tokenizer cannot take and stdout cannot print; paths (Path values, corpus specs) may hold them legitimately."""
    for name, value in vars(args).items():
        if name in ("argv", "corpus", "func"):
            continue
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, str):
                continue
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as e:
                flag = "TEXT" if name == "text" else "--" + name.replace("_", "-")
                byte = ord(item[e.start]) - 0xDC00 if 0xDC80 <= ord(item[e.start]) <= 0xDCFF else None
                where = f"byte 0x{byte:02x}" if byte is not None else f"character {item[e.start]!r}"
                raise BertCoreError(f"{flag} is not valid UTF-8 ({where} at position {e.start}); give it as UTF-8 "
                                    "text (check the terminal's encoding, e.g. LANG=C.UTF-8)") from None


class _WarningsOnly(logging.Handler):
    """Library warnings as one `warning:` line each on stderr. Errors are left out: the command reports them as
    its one `error:` line, and a logged traceback (Trainer.run's log.exception) would only bury it."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.WARNING <= record.levelno < logging.ERROR:
            print(f"warning: {one_line(record.getMessage())}", file=sys.stderr)


def _setup_output() -> None:
    # Paths with undecodable bytes must not turn a message into a UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):   # not a stand-in a caller put there (a test's StringIO)
            stream.reconfigure(errors="backslashreplace")
    logger = logging.getLogger("bert_core")
    if not os.environ.get(DEBUG_ENV) and not any(isinstance(h, _WarningsOnly) for h in logger.handlers):
        logger.addHandler(_WarningsOnly())


def _written(args, error: BaseException) -> str | None:
    """What a command that met a full disk was writing: the file the system names, else the command's output (its
    --out, or the run it resumes); None when neither is known."""
    named = error.filename if isinstance(error, OSError) else None
    if named is None and args is not None:
        named = args.out or args.resume
    return None if named is None else str(named)


def main(argv=None) -> int:
    """Entry point: parse, run, and turn every failure into one `error:` line: user errors exit with status 2,
    a failed run with 1, and anything unexpected with 1 as an "internal error" (BERT_CORE_DEBUG=1 shows its trace)."""
    _setup_output()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = None
    try:
        parser = build_parser()  # imports every command's module: a broken installation fails here
        args = parser.parse_args(argv)  # argparse's own errors exit here, as one line (see _Parser)
        args.argv = argv  # recorded in trainer_state.json / metrics.json as the exact command
        if args.func is None:
            parser.print_help(sys.stderr)
            return 2
        if args.command in _KEEPS_FREED_MEMORY:
            keep_freed_memory()
        _check_text_arguments(args)
        return int(args.func(args) or 0)
    except BertCoreError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("error: out of memory: use a smaller model, batch, sequence length or text", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - the last resort: a bug, said in one line, never a traceback
        if is_disk_full(e):  # the user's disk, whichever library met it (OSError, SafetensorError...): not a bug
            print(f"error: {one_line(disk_full_words(_written(args, e), e))}; free some space, or choose a folder on "
                  "another disk", file=sys.stderr)
            return 2
        if isinstance(e, OSError):  # the machine's answer (permission denied...) to an operation on a path
            where = f"{e.filename}: " if e.filename else ""
            print(f"error: {where}{e.strerror or one_line(e)}", file=sys.stderr)
            return 2
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"error: internal error: {type(e).__name__}: {one_line(e)[:500]}; please report it (run again with "
              f"{DEBUG_ENV}=1 for the traceback)", file=sys.stderr)
        return 1
