"""The options of `python -m bert_core train`, as users type them. Each stores its value under the name of the setting
it sets (bert_core.training.run_settings: `--lr` is `learning_rate`), so the options become a TrainConfig, a model's
sizes and a recipe's values without a map between names. The defaults shown are those of the default size's recipe
(bert_core.cli.train_recipe); every option is None unless given, so that the recipe and --resume know what was."""

from __future__ import annotations

import argparse

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
from bert_core.cli.train_recipe import train_defaults
from bert_core.data.objectives import OBJECTIVES
from bert_core.model.config import PRESETS
from bert_core.training.recipes import GROW_FRACTIONS, GROW_FROM
from bert_core.training.run_settings import setting
from bert_core.training.train_config import PRECISIONS, SCHEDULES


def _option(p, flag_text: str, **kwargs) -> None:
    """Add an option that stores its value under the setting it sets; --help names its value as the flag does."""
    if "choices" not in kwargs and "action" not in kwargs:
        kwargs.setdefault("metavar", flag_text.removeprefix("--").replace("-", "_").upper())
    p.add_argument(flag_text, dest=setting(flag_text), **kwargs)


def add_train_options(p: argparse.ArgumentParser) -> None:
    """Add every option of `train` to its parser, in the order --help lists them."""
    d = train_defaults()
    _run_options(p, d)
    _batch_options(p, d)
    _schedule_options(p, d)
    _objective_options(p, d)
    _model_options(p, d)
    _housekeeping_options(p, d)


def _run_options(p, d: dict) -> None:
    """What to train on, where to write it, and what to start from."""
    _option(p, "--corpus", action="append", required=False, metavar="SPEC",
            help="toy | tinyshakespeare | wikitext-2 | brown | a text file; repeat for several (default toy)")
    _option(p, "--out", type=path_arg, help="checkpoint folder to write (required unless --resume); a new or "
                                            "empty folder, or an existing checkpoint with --overwrite")
    _option(p, "--overwrite", action="store_true", help="replace the checkpoint already in --out")
    _option(p, "--resume", type=path_arg, metavar="DIR", help="continue the run saved in DIR (same corpora)")
    _option(p, "--preset", choices=list(PRESETS),
            help=f"model size (default {d['preset']}); the recipe for the size sets the defaults marked "
                 "'the size's recipe' (bert_core.training.recipes; shown when the run starts)")
    _option(p, "--vocab-size", type=int_arg(100, 2**20),
            help=f"WordPiece vocabulary size to train (default {d['vocab_size']})")
    _option(p, "--tokenizer", type=path_arg, help="use the tokenizer in this folder instead of training one")
    _option(p, "--init-from", type=path_arg, metavar="DIR",
            help="start from the weights, size and tokenizer of this checkpoint (a new run: new data order, "
                 "optimizer and schedule), e.g. to continue at a longer --seq-len as BERT's paper did")
    _option(p, "--copy-positions", action=argparse.BooleanOptionalAction, default=None,
            help="with --init-from and a --seq-len longer than the checkpoint trained at: start the positions it "
                 "never trained as copies of those it did, repeated in order (Longformer's start, a deviation "
                 "from BERT's paper, which learnt them from their initial values; default on when the checkpoint "
                 "records its length)")


def _batch_options(p, d: dict) -> None:
    """The sequences of a step: their length and number, and the short phase first."""
    _option(p, "--seq-len", type=int_arg(16, MAX_SEQ_LEN),
            help=f"maximum sequence length (default: the size's recipe; {d['max_seq_length']} for {d['preset']})")
    _option(p, "--batch-size", type=int_arg(1, MAX_BATCH),
            help=f"sequences per step per process (default: the size's recipe; {d['batch_size']} for "
                 f"{d['preset']})")
    _option(p, "--short-seq-len", type=int_arg(0, MAX_SEQ_LEN), metavar="N",
            help="train the first --short-seq-fraction of the run on sequences of N tokens, as many tokens a "
                 "step as the rest (a deviation from BERT's paper: it leaves the unigram plateau sooner; "
                 f"0 = off; default: the size's recipe, {d['short_seq_length']} for {d['preset']}; off when "
                 "not shorter than --seq-len)")
    _option(p, "--short-seq-fraction", type=FRACTION, metavar="F",
            help=f"the share of the run (steps or time budget) at --short-seq-len "
                 f"(default: the size's recipe; {d['short_seq_fraction']:g} for {d['preset']})")
    _option(p, "--short-seq-batch-size", type=int_arg(0, MAX_BATCH), metavar="N",
            help="sequences per step in the short phase (0 = as many tokens a step as the rest; default: the "
                 f"size's recipe, {d['short_seq_batch_size']} for {d['preset']})")
    _option(p, "--grad-accum", type=int_arg(1, MAX_BATCH), help="micro-batches per optimizer step (default 1)")


def _schedule_options(p, d: dict) -> None:
    """The optimizer, its learning-rate schedule, and how long the run lasts."""
    _option(p, "--lr", type=POSITIVE, help=f"peak learning rate (default: the size's recipe, which shrinks "
                                            f"with width and depth; {d['learning_rate']:g} for {d['preset']})")
    _option(p, "--warmup", type=RATE, help=f"warmup as a fraction of the run (default {d['warmup_ratio']:g})")
    _option(p, "--precision", choices=PRECISIONS,
            help="mixed precision: bf16 (default; on a CUDA GPU, and on a CPU with bfloat16 instructions), fp16 "
                 "with a loss scaler (a CUDA GPU), or fp32; other CPUs always train in fp32")
    _option(p, "--schedule", choices=SCHEDULES,
            help="learning-rate schedule (default linear; 'time' when only --time-budget is given; on --resume "
                 "the run's own; wsd: warmup, the peak rate, then a linear decay over the last fifth, so a long run "
                 "can be lengthened)")
    _option(p, "--weight-decay", type=NON_NEGATIVE, help=f"default {d['weight_decay']:g}")
    _option(p, "--max-grad-norm", type=NON_NEGATIVE,
            help=f"gradient clipping (0 = off; default {d['max_grad_norm']:g})")
    g = p.add_mutually_exclusive_group()
    _option(g, "--steps", type=int_arg(1, 2**40), help="number of optimizer steps (on --resume: the new total)")
    _option(g, "--time-budget", type=POSITIVE, metavar="SECONDS",
            help="train for this many seconds (on --resume: this many more)")


def _objective_options(p, d: dict) -> None:
    """What the model learns to predict, and how tokens are masked."""
    _option(p, "--mask-rate", type=FRACTION, help=f"default: the size's recipe; {d['mask_rate']:g} for "
                                                  f"{d['preset']}")
    _option(p, "--nsp", action=argparse.BooleanOptionalAction, default=None,
            help="next-sentence prediction beside MLM (--no-nsp: MLM only; default "
                 f"{'on' if d['nsp'] else 'off'})")
    _option(p, "--objective", choices=OBJECTIVES,
            help="mlm: BERT's masked LM (+ NSP); clm: GPT's next token on every position, with causal "
                 "attention, no NSP and nothing masked; the checkpoint loads in transformers as "
                 "BertLMHeadModel (default mlm)")
    _option(p, "--whole-word-masking", action=argparse.BooleanOptionalAction, default=None,
            help="mask all the WordPieces of a chosen word together (Google's 2019 variant; default off)")
    _option(p, "--mask-only", action=argparse.BooleanOptionalAction, default=None,
            help="every chosen token becomes [MASK], no 10%% random / 10%% kept (a deviation from the paper's "
                 "80/10/10, to compare against it; default off)")


def _model_options(p, d: dict) -> None:
    """The model's size, dropout and initial weights."""
    _option(p, "--layers", type=int_arg(1, 512), help="number of layers (default: the preset's)")
    _option(p, "--hidden-size", type=int_arg(8, 2**15), help="hidden size (default: the preset's)")
    _option(p, "--heads", type=int_arg(1, 2**12), help="attention heads (default: the preset's)")
    _option(p, "--intermediate-size", type=int_arg(8, 2**17),
            help="feed-forward size (default: 4 x the hidden size)")
    _option(p, "--dropout", type=RATE,
            help=f"hidden and attention dropout (default {d['dropout']:g}; the BERT paper uses 0.1, which "
                 "only slows a model that is far from overfitting)")
    _option(p, "--initializer-range", type=POSITIVE, metavar="STD",
            help=f"std of the initial weights (default: the size's recipe, 0.1 x sqrt(64 / hidden size); "
                 f"{d['initializer_range']:g} for {d['preset']}; BERT's 0.02 keeps a small model on the "
                 "unigram plateau for long)")
    _option(p, "--grow-fraction", type=RATE, metavar="F",
            help="start small, then grow: train the first F of the run (steps or time) as a model of "
                 "--grow-from-layers x --grow-from-hidden, then grow it to the run's size (Net2Net width, "
                 "repeated layers) and train on (a deviation from BERT's paper; 0 = the run's size from the first "
                 "step; default: the size's recipe: on a CPU "
                 + ", ".join(f"{name} {share:g}" for name, share in GROW_FRACTIONS.items())
                 + f" from {GROW_FROM[1]} x {GROW_FROM[0]}, else 0)")
    _option(p, "--grow-from-hidden", type=int_arg(0, 2**15), metavar="N",
            help="hidden size of the model a growing run starts as (a divisor of the run's; heads keep their size); "
                 "only for a run that grows (--grow-fraction, or a recipe that grows)")
    _option(p, "--grow-from-layers", type=int_arg(0, 512), metavar="N",
            help="layers of the model a growing run starts as (a divisor of the run's); only for a run that grows")


def _housekeeping_options(p, d: dict) -> None:
    """The seed, evaluations, records and checkpoints, and where the run goes."""
    _option(p, "--seed", type=SEED, help=f"0 to {MAX_SEED} (default {d['seed']})")
    _option(p, "--eval-every", type=int_arg(0), help="steps between held-out evaluations (0 = start/end)")
    _option(p, "--eval-batches", type=int_arg(1, 10**6),
            help=f"held-out batches per evaluation (default {d['eval_batches']})")
    _option(p, "--history-limit", type=int_arg(0),
            help=f"per-step records kept in trainer_state.json; beyond it every 2nd, 4th... step, evenly "
                 f"(default {d['history_limit']}; 0 keeps all)")
    _option(p, "--heldout-fraction", type=FRACTION, help=f"default {d['heldout_fraction']:g}")
    _option(p, "--checkpoint-every", type=NON_NEGATIVE, metavar="SECONDS",
            help="seconds between checkpoints (default 600; 0 = only at the end)")
    _option(p, "--device", help="auto | cpu | cuda (default auto)")
    _option(p, "--json", action="store_true", help="print the final metrics as JSON on stdout")
