"""`python -m bert_core COMMAND`: the command-line face of bert_core, its parser and its one way to fail.

User mistakes print one line `error: ...` and exit with status 2; progress goes to stderr, results to stdout
(as JSON with --json).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys

from bert_core.cli import bench, corpus, download, finetune, from_checkpoint, reading, train
from bert_core.cli.console import one_line
from bert_core.errors import BertCoreError, is_disk_full
from bert_core.model.files import disk_full_words
from bert_core.training.allocator import TRAINING_COMMANDS, keep_freed_memory


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
    commands = ((train.add_parser, train.run), (reading.add_eval, reading.run_eval),
                (reading.add_fill_mask, reading.run_fill_mask), (bench.add_parser, bench.run),
                (finetune.add_parser, finetune.run), (from_checkpoint.add_heldout, from_checkpoint.run_heldout),
                (reading.add_generate, reading.run_generate), (from_checkpoint.add_grow, from_checkpoint.run_grow),
                (download.add_parser, download.run), (reading.add_score, reading.run_score),
                (reading.add_everyday, reading.run_everyday), (corpus.add_parser, corpus.run),
                (from_checkpoint.add_export, from_checkpoint.run_export))
    for add, run in commands:   # in the order --help lists them
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
    """What a command that met a full disk was writing: the file named, else its --out or --resume, else None."""
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
