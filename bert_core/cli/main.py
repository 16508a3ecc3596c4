"""`python -m bert_core train | eval | fill-mask | bench | finetune | heldout`: the command-line face of bert_core.

User mistakes print one line `error: ...` and exit with status 2; progress goes to stderr, results to stdout
(as JSON with --json).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from bert_core.cli import bench, finetune, generate, heldout
from bert_core.cli.arguments import (
    FRACTION,
    MAX_BATCH,
    MAX_SEED,
    MAX_SEQ_LEN,
    NON_NEGATIVE,
    POSITIVE,
    RATE,
    SEED,
    int_arg,
    path_arg,
)
from bert_core.data.pretraining_data import objective_has_nsp
from bert_core.errors import BertCoreError
from bert_core.training.allocator import TRAINING_COMMANDS, keep_freed_memory


class ProgressBar:
    """A one-line progress bar on stderr; on a non-terminal (a log file) it prints a line every `log_every_s`."""

    def __init__(self, stream=None, width: int = 30, log_every_s: float = 30.0):
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.log_every_s = log_every_s
        self._last = 0.0
        self._shown = False

    def update(self, fraction: float, text: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < (0.2 if self.tty else self.log_every_s):
            return
        self._last = now
        fraction = min(max(fraction, 0.0), 1.0)
        filled = int(round(fraction * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"[{bar}] {100 * fraction:5.1f}% {text}"
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(100))
            self._shown = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


# ---------------------------------------------------------------------------------------------- train


# On --resume, these options may change how the run goes on (they are None unless given, so that only what the
# user typed overrides the saved config); the others shape the data or the model and must stay as they were.
RESUMABLE = {"lr": "learning_rate", "warmup": "warmup_ratio", "schedule": "schedule", "weight_decay": "weight_decay",
             "max_grad_norm": "max_grad_norm", "grad_accum": "grad_accum", "eval_every": "eval_every",
             "history_limit": "history_limit", "checkpoint_every": "checkpoint_every_s", "device": "device",
             "precision": "precision"}


# The `train` options whose default is the size's recipe (bert_core.training.recipes), with the recipe field each takes.
RECIPE_OPTIONS = {"lr": "learning_rate", "batch_size": "batch_size", "seq_len": "max_seq_length",
                  "short_seq_len": "short_seq_length", "short_seq_fraction": "short_seq_fraction",
                  "short_seq_batch_size": "short_seq_batch_size", "mask_rate": "mask_rate", "warmup": "warmup_ratio",
                  "dropout": "dropout", "initializer_range": "initializer_range"}


def _train_defaults(preset: str | None = None, device: str = "cpu", hidden_size: int | None = None,
                    layers: int | None = None) -> dict:
    """The value each `train` option takes when it is not given on a new run: the recipe for the model's size on
    this kind of machine (bert_core.training.recipes), and the fixed defaults of the rest."""
    from bert_core.data.pretraining_data import HELDOUT_FRACTION
    from bert_core.training.trainer import default_recipe

    recipe = default_recipe(preset, device, hidden_size=hidden_size, num_hidden_layers=layers)
    d = recipe["train_config"]
    fixed = {"preset": recipe["preset"], "vocab_size": 8000, "grad_accum": d.grad_accum, "schedule": None,
             "weight_decay": d.weight_decay, "max_grad_norm": d.max_grad_norm, "nsp": d.nsp, "seed": d.seed,
             "eval_every": 0, "eval_batches": d.eval_batches, "history_limit": d.history_limit,
             "heldout_fraction": HELDOUT_FRACTION, "checkpoint_every": 600.0, "device": "auto",
             "whole_word_masking": d.whole_word_masking, "mask_only": d.mask_only, "precision": d.precision}
    return {**fixed, **{name: getattr(recipe["recipe"], field) for name, field in RECIPE_OPTIONS.items()}}


def _recipe_device(name: str | None) -> str:
    """The kind of machine whose recipe a run takes: cuda when it will train on a CUDA GPU, else cpu."""
    import torch

    return "cuda" if (name or "auto") in ("auto", "cuda") and torch.cuda.is_available() else "cpu"


def _recipe_line(args, defaults: dict, given: list[str]) -> str:
    """What the run takes from its size's recipe, as the log's one line (and what the user's flags replaced)."""
    line = f"recipe for {defaults['preset']} on {_recipe_device(args.device)}: {_defaults_text(defaults)}"
    if given:
        line += "; your " + ", ".join("--" + name.replace("_", "-") for name in given) + " replaced the recipe's"
    return line


def _defaults_text(d: dict) -> str:
    """The recipe's values in `train`'s option names, as the log shows them."""
    from bert_core.training.recipes import short_phase_rows

    short = ""
    if d["short_seq_len"] and d["short_seq_fraction"]:
        rows = short_phase_rows(d["batch_size"], d["seq_len"], d["short_seq_len"], d["short_seq_batch_size"])
        short = f", the first {d['short_seq_fraction']:.0%} at {rows} x {d['short_seq_len']}"
    return (f"--lr {d['lr']:g}, --initializer-range {d['initializer_range']:g}, batch {d['batch_size']} x "
            f"{d['seq_len']}{short}, --mask-rate {d['mask_rate']:g}, --dropout {d['dropout']:g}")


def _recipe_size(args) -> tuple[str | None, int | None, int | None]:
    """(preset, hidden size, layers) whose recipe a new run takes: --init-from's model, or the size asked for."""
    from bert_core.model.config import PRESETS, BertConfig
    from bert_core.training.recipes import preset_for_size

    if args.init_from is not None:
        try:
            config = BertConfig.load(args.init_from)
        except BertCoreError:  # not a checkpoint: load_checkpoint says why, in its own words, a moment later
            return args.preset, None, None
        return preset_for_size(config.hidden_size, config.num_hidden_layers), config.hidden_size, \
            config.num_hidden_layers
    preset = args.preset
    if preset is None and (args.hidden_size is not None or args.layers is not None):
        preset = preset_for_size(args.hidden_size or PRESETS["nano"]["hidden_size"],
                                 args.layers or PRESETS["nano"]["num_hidden_layers"])
    return preset, args.hidden_size, args.layers


def _add_train(sub) -> None:
    from bert_core.data.pretraining_data import HELDOUT_FRACTION, OBJECTIVES
    from bert_core.model.config import PRESETS
    from bert_core.training.trainer import PRECISIONS, SCHEDULES

    d = _train_defaults()
    p = sub.add_parser(
        "train",
        help="pretrain a BERT (MLM + NSP), or a GPT-style causal model (--objective clm), on corpora",
        description="Pretrain a BERT with masked-language modelling and next-sentence prediction. "
        f"{int(HELDOUT_FRACTION * 100)}%% of each corpus's documents (seeded) are held out for evaluation. "
        "Runs unchanged under torchrun --nproc_per_node=N (DistributedDataParallel). On --resume, the learning-rate "
        "schedule, optimizer and housekeeping options given override the saved ones; the data and model stay.",
    )
    p.add_argument("--corpus", action="append", required=False, metavar="SPEC",
                   help="toy | tinyshakespeare | wikitext-2 | brown | a text file; repeat for several (default toy)")
    p.add_argument("--out", type=path_arg, help="checkpoint folder to write (required unless --resume); a new or "
                                                "empty folder, or an existing checkpoint with --overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace the checkpoint already in --out")
    p.add_argument("--resume", type=path_arg, metavar="DIR", help="continue the run saved in DIR (same corpora)")
    p.add_argument("--preset", choices=list(PRESETS),
                   help=f"model size (default {d['preset']}); the recipe for the size sets the defaults marked "
                        "'the size's recipe' (bert_core.training.recipes; shown when the run starts)")
    p.add_argument("--vocab-size", type=int_arg(100, 2**20),
                   help=f"WordPiece vocabulary size to train (default {d['vocab_size']})")
    p.add_argument("--tokenizer", type=path_arg, help="use the tokenizer in this folder instead of training one")
    p.add_argument("--init-from", type=path_arg, metavar="DIR",
                   help="start from the weights, size and tokenizer of this checkpoint (a new run: new data order, "
                        "optimizer and schedule), e.g. to continue at a longer --seq-len as BERT's paper did")
    p.add_argument("--seq-len", type=int_arg(16, MAX_SEQ_LEN),
                   help=f"maximum sequence length (default: the size's recipe; {d['seq_len']} for {d['preset']})")
    p.add_argument("--batch-size", type=int_arg(1, MAX_BATCH),
                   help=f"sequences per step per process (default: the size's recipe; {d['batch_size']} for "
                        f"{d['preset']})")
    p.add_argument("--short-seq-len", type=int_arg(0, MAX_SEQ_LEN), metavar="N",
                   help="train the first --short-seq-fraction of the run on sequences of N tokens, as many tokens a "
                        "step as the rest (a deviation from BERT's paper: it leaves the unigram plateau sooner; "
                        f"0 = off; default: the size's recipe, {d['short_seq_len']} for {d['preset']}; off when "
                        "not shorter than --seq-len)")
    p.add_argument("--short-seq-fraction", type=FRACTION, metavar="F",
                   help=f"the share of the run (steps or time budget) at --short-seq-len "
                        f"(default: the size's recipe; {d['short_seq_fraction']:g} for {d['preset']})")
    p.add_argument("--short-seq-batch-size", type=int_arg(0, MAX_BATCH), metavar="N",
                   help="sequences per step in the short phase (0 = as many tokens a step as the rest; default: the "
                        f"size's recipe, {d['short_seq_batch_size']} for {d['preset']})")
    p.add_argument("--grad-accum", type=int_arg(1, MAX_BATCH), help="micro-batches per optimizer step (default 1)")
    p.add_argument("--lr", type=POSITIVE, help=f"peak learning rate (default: the size's recipe, which shrinks "
                                                f"with width and depth; {d['lr']:g} for {d['preset']})")
    p.add_argument("--warmup", type=RATE, help=f"warmup as a fraction of the run (default {d['warmup']:g})")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="mixed precision on a CUDA GPU: bf16 (default), fp16 with a loss scaler, or fp32; a CPU "
                        "always trains in fp32")
    p.add_argument("--schedule", choices=SCHEDULES,
                   help="learning-rate schedule (default linear; 'time' when only --time-budget is given)")
    p.add_argument("--weight-decay", type=NON_NEGATIVE, help=f"default {d['weight_decay']:g}")
    p.add_argument("--max-grad-norm", type=NON_NEGATIVE,
                   help=f"gradient clipping (0 = off; default {d['max_grad_norm']:g})")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int_arg(1, 2**40), help="number of optimizer steps (on --resume: the new total)")
    g.add_argument("--time-budget", type=POSITIVE, metavar="SECONDS",
                   help="train for this many seconds (on --resume: this many more)")
    p.add_argument("--mask-rate", type=FRACTION, help=f"default: the size's recipe; {d['mask_rate']:g} for "
                                                      f"{d['preset']}")
    p.add_argument("--nsp", action=argparse.BooleanOptionalAction, default=None,
                   help="next-sentence prediction beside MLM (--no-nsp: MLM only; default "
                        f"{'on' if d['nsp'] else 'off'})")
    p.add_argument("--objective", choices=OBJECTIVES,
                   help="mlm: BERT's masked LM (+ NSP); clm: GPT's next token on every position, with causal "
                        "attention, no NSP and nothing masked; the checkpoint loads in transformers as "
                        "BertLMHeadModel (default mlm)")
    p.add_argument("--whole-word-masking", action=argparse.BooleanOptionalAction, default=None,
                   help="mask all the WordPieces of a chosen word together (Google's 2019 variant; default off)")
    p.add_argument("--mask-only", action=argparse.BooleanOptionalAction, default=None,
                   help="every chosen token becomes [MASK], no 10%% random / 10%% kept (a deviation from the paper's "
                        "80/10/10, to compare against it; default off)")
    p.add_argument("--layers", type=int_arg(1, 512), help="number of layers (default: the preset's)")
    p.add_argument("--hidden-size", type=int_arg(8, 2**15), help="hidden size (default: the preset's)")
    p.add_argument("--heads", type=int_arg(1, 2**12), help="attention heads (default: the preset's)")
    p.add_argument("--intermediate-size", type=int_arg(8, 2**17),
                   help="feed-forward size (default: 4 x the hidden size)")
    p.add_argument("--dropout", type=RATE,
                   help=f"hidden and attention dropout (default {d['dropout']:g}; the BERT paper uses 0.1, which "
                        "only slows a model that is far from overfitting)")
    p.add_argument("--initializer-range", type=POSITIVE, metavar="STD",
                   help=f"std of the initial weights (default: the size's recipe, 0.1 x sqrt(64 / hidden size); "
                        f"{d['initializer_range']:g} for {d['preset']}; BERT's 0.02 keeps a small model on the "
                        "unigram plateau for long)")
    p.add_argument("--seed", type=SEED, help=f"0 to {MAX_SEED} (default {d['seed']})")
    p.add_argument("--eval-every", type=int_arg(0), help="steps between held-out evaluations (0 = start/end)")
    p.add_argument("--eval-batches", type=int_arg(1, 10**6),
                   help=f"held-out batches per evaluation (default {d['eval_batches']})")
    p.add_argument("--history-limit", type=int_arg(0),
                   help=f"per-step records kept in trainer_state.json; beyond it every 2nd, 4th... step, evenly "
                        f"(default {d['history_limit']}; 0 keeps all)")
    p.add_argument("--heldout-fraction", type=FRACTION, help=f"default {d['heldout_fraction']:g}")
    p.add_argument("--checkpoint-every", type=NON_NEGATIVE, metavar="SECONDS",
                   help="seconds between checkpoints (default 600; 0 = only at the end)")
    p.add_argument("--device", help="auto | cpu | cuda (default auto)")
    p.add_argument("--json", action="store_true", help="print the final metrics as JSON on stdout")
    p.set_defaults(func=cmd_train)


def _machine() -> dict:
    import torch

    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _command_line(args) -> str:
    prefix = "torchrun ... -m bert_core" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "python -m bert_core"
    return prefix + " " + shlex.join(args.argv)


def _acc_name(config) -> str:
    return "next-token acc" if config.objective == "clm" else "mlm acc"


def _progress_callback(trainer_ref, bar: ProgressBar, warnings: list):
    from bert_core.training.plateau import plateau_warning
    from bert_core.training.trainer import EvalEvent, StepEvent

    def callback(event):
        trainer = trainer_ref[0]
        if isinstance(event, StepEvent):
            prog = trainer.progress
            acc = _pct(event.mlm_acc)
            bar.update(prog.fraction, f"step {event.step} loss {event.loss:.3f} {_acc_name(trainer.config)} {acc} "
                                      f"{event.tokens_per_s:,.0f} tok/s eta {_fmt_seconds(prog.eta_s)}")
            if not warnings and event.step % 25 == 0:  # said once, in the log and in metrics.json
                warning = plateau_warning(trainer.history, trainer.baselines, prog.fraction,
                                          causal=trainer.config.objective == "clm")
                if warning:
                    warnings.append(warning)
                    bar.stream.write(("\n" if bar.tty else "") + f"warning: {warning}\n")
        elif isinstance(event, EvalEvent):
            bar.update(trainer.progress.fraction, f"eval step {event.step}: held-out {_acc_name(trainer.config)} "
                                                  f"{_pct(event.mlm_acc)} ppl {event.perplexity:.1f} "
                                                  f"nsp {_pct(event.nsp_acc)}", force=True)
            if bar.tty:
                bar.stream.write("\n")

    return callback


def _same_folder(a, b) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


# The model-size options of `train` and the BertConfig field each sets (the preset's value when not given).
MODEL_SIZE_OPTIONS = {"layers": "num_hidden_layers", "hidden_size": "hidden_size", "heads": "num_attention_heads",
                      "intermediate_size": "intermediate_size"}


def _resume_plan(args):
    """Load and check the run to resume: (checkpoint, its state, the TrainConfig to go on with, the changes the
    command line asked for). Options that shape the data or the model may be repeated but not changed."""
    from bert_core.model.checkpoint import TRAINER_STATE, load_checkpoint
    from bert_core.training.trainer import check_trainer_state

    ckpt = load_checkpoint(args.resume, require_tokenizer=True)
    if ckpt.trainer_state is None:
        raise BertCoreError(f"{args.resume} has no {TRAINER_STATE}, so training cannot resume from it; start a new run "
                            f"from its weights with --init-from {args.resume}")
    state = ckpt.trainer_state
    config = check_trainer_state(state, Path(args.resume) / TRAINER_STATE)
    meta = state.get("metadata", {})
    if not meta.get("corpora") or not meta.get("heldout"):
        raise BertCoreError(f"{args.resume} was not written by `train`, so its corpora are unknown; start a new run "
                            f"from its weights with --init-from {args.resume}")
    saved = {"corpus": meta["corpora"], "seq_len": config.max_seq_length, "batch_size": config.batch_size,
             "mask_rate": config.mask_rate, "nsp": config.nsp, "seed": config.seed, "objective": config.objective,
             "eval_batches": config.eval_batches, "heldout_fraction": meta["heldout"]["fraction"],
             "whole_word_masking": config.whole_word_masking, "mask_only": config.mask_only,
             "preset": meta.get("preset"), "dropout": ckpt.model.config.hidden_dropout_prob,
             "initializer_range": ckpt.model.config.initializer_range,
             "short_seq_len": config.short_seq_length, "short_seq_fraction": config.short_seq_fraction,
             "short_seq_batch_size": config.short_seq_batch_size}
    for name, value in saved.items():
        given = getattr(args, name)
        if given is not None and value is not None and given != value:
            raise BertCoreError(f"--{name.replace('_', '-')} cannot change on --resume (the run has {value!r}; the "
                                "data and the model depend on it): leave it out, or start a new run from these "
                                f"weights with --init-from {args.resume} --out NEW_FOLDER")
    for name in ("vocab_size", "tokenizer", "init_from", *MODEL_SIZE_OPTIONS):
        if getattr(args, name) is not None:
            raise BertCoreError(f"--{name.replace('_', '-')} only shapes a new run; --resume takes the tokenizer and "
                                f"weights from {args.resume}: leave it out")
    changes = {field: getattr(args, name) for name, field in RESUMABLE.items() if getattr(args, name) is not None}
    if args.steps is not None:
        changes.update(max_steps=args.steps, time_budget_s=None)
        if config.schedule == "time" and args.schedule is None:
            changes["schedule"] = "linear"
    if args.time_budget is not None:
        # A time budget on resume means "this many more seconds".
        changes.update(time_budget_s=args.time_budget + float(state.get("elapsed_s", 0.0)), max_steps=None)
        if args.schedule is None:
            changes["schedule"] = "time"
    return ckpt, state, config.replace(**changes), changes


def _check_training_size(model_config, config) -> None:
    """Refuse, before any data is read, a model and batch whose training would not fit in memory (on CPU, where
    weights, gradients, AdamW state and activations all live in this machine's memory)."""
    from bert_core.training.trainer import resolve_device

    if resolve_device(config.device).type == "cpu":
        model_config.check_memory(training=True, batch_size=math.ceil(config.batch_size / config.grad_accum),
                                  seq_len=config.max_seq_length)


def _check_enough_text(trainer) -> None:
    """Build the first epoch's examples and the held-out batches now (the trainer reuses both), so that a corpus
    too small to train on is refused before the output folder is touched."""
    _ = trainer.data.batches_per_epoch
    if not trainer.heldout_batches():
        raise BertCoreError("the held-out part of the corpus is too short to make one evaluation batch: give more text "
                            "(at least a few dozen sentences; a useful model needs thousands) or a larger "
                            "--heldout-fraction")


def cmd_train(args) -> int:
    import torch

    from bert_core.data.pretraining_data import build_datasets
    from bert_core.model.bert import is_causal, pretraining_model
    from bert_core.model.checkpoint import check_output_folder, load_checkpoint
    from bert_core.model.config import BertConfig
    from bert_core.model.tokenization import DEFAULT_MODEL_MAX_LENGTH
    from bert_core.training.trainer import (
        TrainConfig,
        Trainer,
        check_trainer_state,
        init_distributed,
        shutdown_distributed,
    )

    if args.out is None and args.resume is None:
        raise BertCoreError("give --out DIR (where to write the checkpoint) or --resume DIR")
    recipe_line = None
    # Everything is checked (options, output folder, checkpoints, corpora, sizes) before anything is written.
    if args.resume is not None:
        ckpt, state, config, changes = _resume_plan(args)
        out = args.out if args.out is not None else args.resume
        # Saving replaces the whole folder, so a resume folder holding the user's own files is refused too.
        check_output_folder(out, overwrite=args.overwrite or _same_folder(out, args.resume))
        _check_training_size(ckpt.model.config, config)
        resume_tokenizer = ckpt.tokenizer
        del ckpt  # Trainer.resume loads it again; the memory is better free meanwhile
    else:
        if args.steps is None and args.time_budget is None:
            raise BertCoreError("give --steps N or --time-budget SECONDS")
        args.objective = args.objective or "mlm"
        if not objective_has_nsp(args.objective):  # before the defaults: NSP is on by default for BERT only
            if args.nsp:
                raise BertCoreError(f"--nsp: the {args.objective} objective has no next-sentence prediction; "
                                    "leave --nsp out")
            args.nsp = False
        preset, hidden, layers = _recipe_size(args)
        defaults = _train_defaults(preset, _recipe_device(args.device), hidden, layers)
        given = [name for name in RECIPE_OPTIONS if getattr(args, name) is not None]
        for name, value in defaults.items():
            if getattr(args, name) is None:
                setattr(args, name, value)
                if name == "short_seq_len" and value >= args.seq_len:
                    args.short_seq_len = 0  # the default short phase is no shorter than a --seq-len given
        recipe_line = _recipe_line(args, defaults, given)
        out = check_output_folder(args.out, overwrite=args.overwrite)
        schedule = args.schedule or ("time" if args.steps is None else "linear")
        config = TrainConfig(
            batch_size=args.batch_size, learning_rate=args.lr, warmup_ratio=args.warmup,
            max_steps=args.steps, time_budget_s=args.time_budget, schedule=schedule,
            weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm, grad_accum=args.grad_accum,
            max_seq_length=args.seq_len, mask_rate=args.mask_rate, nsp=args.nsp, seed=args.seed,
            objective=args.objective,
            short_seq_length=args.short_seq_len, short_seq_fraction=args.short_seq_fraction,
            short_seq_batch_size=args.short_seq_batch_size,
            eval_every=args.eval_every, eval_batches=args.eval_batches,
            checkpoint_every_s=args.checkpoint_every, device=args.device, history_limit=args.history_limit,
            whole_word_masking=args.whole_word_masking, mask_only=args.mask_only, precision=args.precision,
        )
        size = {"max_position_embeddings": max(512, args.seq_len), "hidden_dropout_prob": args.dropout,
                "attention_probs_dropout_prob": args.dropout}
        if args.initializer_range is not None:
            size["initializer_range"] = args.initializer_range
        if args.objective == "clm":
            size["attention"] = "causal"
        size.update({field: getattr(args, name) for name, field in MODEL_SIZE_OPTIONS.items()
                     if getattr(args, name) is not None})
        if args.init_from is not None and any(getattr(args, name) is not None for name in MODEL_SIZE_OPTIONS):
            raise BertCoreError("--init-from takes the model's size from its checkpoint: leave out --layers, "
                                "--hidden-size, --heads and --intermediate-size")
        # The vocabulary asked for is an upper bound of the one trained, so this check cannot pass a model too big.
        _check_training_size(BertConfig.preset(args.preset, vocab_size=args.vocab_size, **size), config)
        tokenizer = start = None
        if args.tokenizer is not None:
            from bert_core.model.tokenization import BertTokenizer

            tokenizer = BertTokenizer.load(args.tokenizer)
        if args.init_from is not None:
            start = load_checkpoint(args.init_from, require_tokenizer=True)
            if start.trainer_state is not None:
                from bert_core.model.checkpoint import TRAINER_STATE

                check_trainer_state(start.trainer_state, Path(args.init_from) / TRAINER_STATE)
            tokenizer = start.tokenizer
            if is_causal(start.model) != (args.objective == "clm"):
                kind = "causal (next-token)" if is_causal(start.model) else "bidirectional (masked-LM)"
                raise BertCoreError(f"--init-from {args.init_from} is a {kind} model; it cannot start an "
                                    f"--objective {args.objective} run")
            if start.model.config.max_position_embeddings < args.seq_len:
                raise BertCoreError(f"{args.init_from} has {start.model.config.max_position_embeddings} positions, "
                                    f"fewer than --seq-len {args.seq_len}")
            _check_training_size(start.model.config, config)
        limit = tokenizer.model_max_length if tokenizer is not None else DEFAULT_MODEL_MAX_LENGTH
        if args.seq_len > limit:
            raise BertCoreError(f"--seq-len {args.seq_len} is longer than the tokenizer's {limit} tokens; use at most "
                                f"{limit}")
    dist_info = init_distributed(config.device)
    try:
        bar = ProgressBar()
        trainer_ref: list = [None]
        warnings: list[str] = []
        callbacks = [_progress_callback(trainer_ref, bar, warnings)] if dist_info.is_main else []
        started = time.time()
        if args.resume is not None:
            meta = state["metadata"]
            if dist_info.is_main:
                print(f"loading {', '.join(meta['corpora'])} ...", file=sys.stderr)
            train_data, eval_data, heldout, _, _ = build_datasets(
                meta["corpora"], resume_tokenizer, config.max_seq_length, config.batch_size,
                config.mask_rate, config.nsp, config.seed, meta["heldout"]["fraction"], dist_info.world_size,
                whole_word_masking=config.whole_word_masking, mask_only=config.mask_only,
                objective=config.objective)
            trainer = Trainer.resume(args.resume, train_data, eval_data=eval_data, callbacks=callbacks,
                                     checkpoint_dir=out, config_overrides=changes or None)
            trainer.metadata.setdefault("commands", []).append(_command_line(args))
            if changes:
                # What this resume changed, beside the command that changed it.
                trainer.metadata.setdefault("resumed_with", []).append({"step": trainer.step, "changes": changes})
        else:
            specs = args.corpus or ["toy"]
            if dist_info.is_main:
                print(f"loading {', '.join(specs)} ...", file=sys.stderr)
            train_data, eval_data, heldout, tokenizer, record = build_datasets(
                specs, tokenizer, args.seq_len, args.batch_size, args.mask_rate, args.nsp, args.seed,
                args.heldout_fraction, dist_info.world_size, train_tokenizer=args.vocab_size,
                whole_word_masking=config.whole_word_masking, mask_only=config.mask_only,
                objective=config.objective)
            model_config = BertConfig.preset(args.preset, vocab_size=tokenizer.vocab_size, **size)
            if start is not None:
                drop = {k: v for k, v in size.items() if k.endswith("dropout_prob")}
                model_config = start.model.config.replace(**drop)
            torch.manual_seed(args.seed)  # the same initial weights on every rank and every rerun
            model = pretraining_model(model_config)
            if start is not None:
                model.load_state_dict(start.model.state_dict())
            metadata = {
                "corpora": specs,
                "preset": args.preset,
                "heldout": record,
                "commands": [_command_line(args)],
                "unigram_counts": train_data.token_counts.tolist(),
            }
            if start is not None:
                _check_same_heldout(args.init_from, (start.trainer_state or {}).get("metadata", {}).get("heldout"),
                                    record)
                # The run that made the starting weights, so metrics.json names every command behind the model.
                before = (start.trainer_state or {}).get("metadata", {})
                metadata["commands"] = before.get("commands", []) + metadata["commands"]
                metadata["init_from"] = {"folder": str(args.init_from), "step": (start.trainer_state or {}).get("step"),
                                         "preset": before.get("preset"), "corpora": before.get("corpora")}
                metadata["preset"] = before.get("preset", args.preset)
            trainer = Trainer(model, tokenizer, train_data, config, eval_data=eval_data, callbacks=callbacks,
                              checkpoint_dir=out, metadata=metadata)
        _check_enough_text(trainer)
        trainer_ref[0] = trainer
        if dist_info.is_main:
            n_params = sum(p.numel() for p in trainer.model.parameters())
            print(f"training {n_params / 1e6:.2f}M parameters on {trainer.device} "
                  f"(world size {dist_info.world_size}), writing {out}", file=sys.stderr)
            if recipe_line:
                print(recipe_line, file=sys.stderr)
            if trainer.device.type != "cuda" and args.precision in ("bf16", "fp16") and "--precision" in args.argv:
                print(f"note: --precision {args.precision} applies on a CUDA GPU; on {trainer.device.type} the run "
                      "is fp32", file=sys.stderr)
        trainer.run()
        bar.close()
        if trainer.state == "failed":
            advice = ""
            if trainer.diverged and trainer.last_checkpoint_step is not None:
                lower = trainer.config.learning_rate / 10
                advice = f" For example: python -m bert_core train --resume {shlex.quote(str(out))} --lr {lower:g}"
            print(f"error: {_one_line(trainer.error)}{advice}", file=sys.stderr)
            return 1
        if not dist_info.is_main:
            return 0
        metrics = final_metrics(trainer, heldout, time.time() - started)
        if warnings:
            metrics["warnings"] = warnings
        if trainer.state == "finished":
            from bert_core.training.heldout import reproducible_eval

            # The figures a reader can reproduce with `heldout` + `eval` (the commands are recorded beside them).
            metrics["eval"] = reproducible_eval(out)
        _write_metrics(Path(out), metrics)
        if args.json:
            print(json.dumps(metrics, indent=1))
        else:
            print(_metrics_text(metrics))
        return 0
    finally:
        shutdown_distributed()


def _check_same_heldout(folder, before: dict | None, now: dict) -> None:
    """A warm start must hold out the same documents of every corpus the start model trained on, or its held-out
    figures would include trained-on text. Corpora may be added or left out: each corpus is split on its own
    (`split_heldout` with the run's seed), so a new corpus does not move another's held-out documents."""
    if not before:
        return
    held_now = {c.get("spec"): c.get("heldout_document_indices") for c in now.get("corpora", [])}
    moved = [c.get("spec", "?") for c in before.get("corpora", [])
             if c.get("spec") in held_now and held_now[c.get("spec")] != c.get("heldout_document_indices")]
    if moved or (before.get("seed"), before.get("fraction")) != (now.get("seed"), now.get("fraction")):
        specs = ", ".join(c.get("spec", "?") for c in before.get("corpora", []))
        raise BertCoreError(f"{folder} was trained with another held-out split (corpora {specs}, seed "
                            f"{before.get('seed')}, fraction {before.get('fraction')}); use the same --seed and "
                            "--heldout-fraction (corpora may be added) so that its held-out text stays unseen")


def _baselines(trainer) -> dict:
    """The trainer's baselines; after --init-from its step-0 evaluation is the starting checkpoint, so it is
    recorded as "start" (with where it came from), not as "untrained"."""
    baselines = dict(trainer.baselines)
    source = trainer.metadata.get("init_from")
    if source and "untrained" in baselines:
        baselines["start"] = {**baselines.pop("untrained"), "model": source}
    return baselines


def final_metrics(trainer, heldout_by_corpus: dict, wall_s: float) -> dict:
    """metrics.json: held-out figures (overall and per corpus) beside the baselines, time, machine, command."""
    from bert_core.data.pretraining_data import PretrainingData
    from bert_core.training.evaluation import evaluate, unigram_baseline_for
    from bert_core.training.trainer import _unwrap

    cfg = trainer.config
    final = trainer.evals[-1] if trainer.evals else None
    per_corpus = {}
    for name, corpus in heldout_by_corpus.items():
        try:
            data = PretrainingData(corpus, trainer.tokenizer, max_seq_length=cfg.max_seq_length,
                                   batch_size=cfg.batch_size, mask_rate=cfg.mask_rate, seed=cfg.seed, nsp=cfg.nsp,
                                   whole_word_masking=cfg.whole_word_masking, mask_only=cfg.mask_only,
                                   objective=cfg.objective)
            batches = data.eval_batches(cfg.eval_batches, seed=cfg.seed)
            result = evaluate(_unwrap(trainer.model), batches, device=trainer.device)
            per_corpus[name] = {**result.to_dict(), "baselines": unigram_baseline_for(trainer.data, batches)}
        except BertCoreError as e:
            per_corpus[name] = {"error": str(e)}
    if cfg.objective == "clm":  # the same head and sums, but every position predicts the token after it
        heldout = {"objective": "clm", "next_token_accuracy": final.mlm_acc if final else None,
                   "next_token_loss": final.mlm_loss if final else None}
    else:
        heldout = {"masked_token_accuracy": final.mlm_acc if final else None,
                   "mlm_loss": final.mlm_loss if final else None}
    return {
        "heldout": {
            **heldout,
            "perplexity": final.perplexity if final else None,
            "nsp_accuracy": final.nsp_acc if final else None,
            "step": final.step if final else None,
        },
        "baselines": _baselines(trainer),
        "per_corpus": per_corpus,
        "heldout_split": trainer.metadata.get("heldout"),
        "steps": trainer.step,
        "tokens_seen": trainer.tokens_seen,
        "training_time_s": trainer.elapsed_s,
        "wall_time_s": wall_s,
        "world_size": trainer.dist.world_size,
        "device": str(trainer.device),
        "machine": _machine(),
        "train_config": cfg.to_dict(),
        "commands": trainer.metadata.get("commands", []),
    }


def _write_metrics(folder: Path, metrics: dict) -> None:
    from bert_core.model.checkpoint import write_json_atomic

    write_json_atomic(folder / "metrics.json", metrics)


def _metrics_text(m: dict) -> str:
    h, b = m["heldout"], m["baselines"]
    causal = h.get("objective") == "clm"
    what, ppl = ("next-token", "next-token perplexity") if causal else ("masked-token", "MLM perplexity")
    uni = b.get("unigram", {})
    label = "start" if "start" in b else "untrained"
    first = b.get(label, {})
    rows = [
        f"held-out after {m['steps']} steps ({_fmt_seconds(m['training_time_s'])}):",
        f"  {what + ' accuracy':<21} {_pct(h[what.replace('-', '_') + '_accuracy'])}   (unigram baseline "
        f"{_pct(uni.get('accuracy'))}, {label} {_pct(first.get('mlm_acc'))})",
        f"  {ppl:<21} {h['perplexity']:.1f}   (unigram {uni.get('perplexity', float('nan')):.1f}, "
        f"{label} {first.get('perplexity', float('nan')):.1f})" if h["perplexity"] is not None else "",
        f"  NSP accuracy          {_pct(h['nsp_accuracy'])}   (chance 50%)" if not causal else "",
    ]
    return "\n".join(r for r in rows if r)


# ---------------------------------------------------------------------------------------------- eval


def _add_eval(sub) -> None:
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
    p.add_argument("--mask-rate", type=FRACTION, default=0.15)
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_eval)


def cmd_eval(args) -> int:
    from bert_core.training.heldout import evaluate_text_file

    r = evaluate_text_file(args.checkpoint, args.text_file, seed=args.seed, batches=args.batches,
                           batch_size=args.batch_size, seq_len=args.seq_len, mask_rate=args.mask_rate,
                           device=args.device)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    u = r["unigram_baseline"]
    if r.get("objective") == "clm":
        print(f"{r['text_file']}: {r['predicted_tokens']} next-token predictions in {r['sequences']} sequences "
              "(a causal model: each position predicts the token after it, seeing only the tokens before)")
        print(f"next-token accuracy   {_pct(r['next_token_accuracy'])}   unigram baseline {_pct(u.get('accuracy'))}")
        print(f"next-token perplexity {r['perplexity']:.1f}   unigram baseline {u.get('perplexity', float('nan')):.1f}")
        return 0
    print(f"{r['text_file']}: {r['masked_tokens']} masked tokens in {r['sequences']} sequences (seed {r['seed']})")
    print(f"masked-token accuracy {_pct(r['masked_token_accuracy'])}   unigram baseline {_pct(u.get('accuracy'))}")
    print(f"MLM perplexity        {r['perplexity']:.1f}   unigram baseline {u.get('perplexity', float('nan')):.1f}")
    print(f"NSP accuracy          {_pct(r['nsp_accuracy'])}   chance 50%")
    return 0


# ---------------------------------------------------------------------------------------------- fill-mask


def _add_fill_mask(sub) -> None:
    p = sub.add_parser("fill-mask", help="top-k predictions for each [MASK] in a text",
                       description="Print the checkpoint's top-k candidates for every [MASK] in TEXT.")
    p.add_argument("--checkpoint", type=path_arg, default=None, help="checkpoint folder (default: the shipped model)")
    p.add_argument("text", help='text with one or more [MASK], e.g. "the cat sat on the [MASK] ."')
    p.add_argument("--top-k", type=int_arg(1, 10**6), default=5, help="candidates per [MASK] (default 5)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fill_mask)


def cmd_fill_mask(args) -> int:
    from bert_core.inspect.inspection import fill_mask
    from bert_core.model.checkpoint import load_checkpoint
    from bert_core.paths import DEFAULT_CHECKPOINT

    folder = args.checkpoint or DEFAULT_CHECKPOINT
    ckpt = load_checkpoint(folder, require_tokenizer=True)
    predictions = fill_mask(ckpt.model, ckpt.tokenizer, args.text, top_k=args.top_k)
    if args.json:
        print(json.dumps([{"position": p.position, "candidates": [{"token": t, "prob": pr} for t, pr in p.candidates]}
                          for p in predictions], indent=1))
        return 0
    for i, p in enumerate(predictions, 1):
        cands = "  ".join(f"{t} {pr:.3f}" for t, pr in p.candidates)
        print(f"[MASK] {i} (token {p.position}): {cands}")
    return 0


def _add_command(sub, module) -> None:
    """Register the subcommand a module of this wing defines (its add_parser and run)."""
    module.add_parser(sub).set_defaults(func=lambda args: module.run(args))


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's usage + error, but on one line that starts with "error:"
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argparse tree of `python -m bert_core`."""
    parser = _Parser(prog="python -m bert_core", description="BERT from scratch: pretrain, evaluate, inspect.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_train(sub)
    _add_eval(sub)
    _add_fill_mask(sub)
    _add_command(sub, bench)
    _add_command(sub, finetune)
    _add_command(sub, heldout)
    _add_command(sub, generate)
    return parser


# Commands whose process trains and then exits keep freed memory for reuse (see bert_core.training.allocator). `bench`
# applies it itself, with a flag to compare without it.
_KEEPS_FREED_MEMORY = set(TRAINING_COMMANDS) - {"bench"}


DEBUG_ENV = "BERT_CORE_DEBUG"  # set to 1 for full tracebacks instead of one `error:` line


def _one_line(e: BaseException) -> str:
    """An exception's message on one line (some libraries' messages span several)."""
    return " ".join(str(e).split()) or type(e).__name__


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
            print(f"warning: {_one_line(record.getMessage())}", file=sys.stderr)


def _setup_output() -> None:
    # Paths with undecodable bytes must not turn a message into a UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    logger = logging.getLogger("bert_core")
    if not os.environ.get(DEBUG_ENV) and not any(isinstance(h, _WarningsOnly) for h in logger.handlers):
        logger.addHandler(_WarningsOnly())


def main(argv=None) -> int:
    """Entry point: parse, run, and turn every failure into one `error:` line: user errors exit with status 2,
    a failed run with 1, and anything unexpected with 1 as an "internal error" (BERT_CORE_DEBUG=1 shows its trace)."""
    _setup_output()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()  # imports every command's module: a broken installation fails here
        args = parser.parse_args(argv)  # argparse's own errors exit here, as one line (see _Parser)
        args.argv = argv  # recorded in trainer_state.json / metrics.json as the exact command
        if getattr(args, "func", None) is None:
            parser.print_help(sys.stderr)
            return 2
        if args.command in _KEEPS_FREED_MEMORY:
            keep_freed_memory()
        _check_text_arguments(args)
        return int(args.func(args) or 0)
    except BertCoreError as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("error: out of memory: use a smaller model, batch, sequence length or text", file=sys.stderr)
        return 1
    except OSError as e:  # the machine's answer (permission denied, disk full...) to an operation on a path
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or _one_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - the last resort: a bug, said in one line, never a traceback
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"error: internal error: {type(e).__name__}: {_one_line(e)[:500]}; please report it (run again with "
              f"{DEBUG_ENV}=1 for the traceback)", file=sys.stderr)
        return 1
