"""`train`'s options as the run to build, checked before anything is written: a new run's `RunPlan`
(bert_core.training.run_builder), or the saved run that --resume continues with the changes its options ask for."""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_core.errors import BertCoreError
from bert_core.model.bert import is_causal
from bert_core.model.checkpoint import load_checkpoint
from bert_core.model.files import TRAINER_STATE
from bert_core.model.growth import grown_pretraining_rate
from bert_core.model.tokenization import DEFAULT_MODEL_MAX_LENGTH, BertTokenizer
from bert_core.training.run_builder import RunPlan, WarmStart, model_config, positions_to_copy, trained_length
from bert_core.training.run_settings import SIZE_FIELDS, flag, on_resume
from bert_core.training.setting import CHANGES, NEW_RUN_ONLY, STAYS
from bert_core.training.distributed import resolve_device
from bert_core.training.train_config import LIVE, TRAIN_SETTINGS, TrainConfig, change_text
from bert_core.training.trainer_checkpoint import check_trainer_state

# On --resume, these options may change how the run goes on (they are None unless given, so that only what the
# user typed overrides the saved config): the settings described so (`on_resume`, bert_core.training.setting). The
# others shape the data or the model and must stay as they were (STAYS), or only start a new run (NEW_RUN_ONLY).
RESUMABLE = on_resume(CHANGES)


@dataclass(frozen=True)
class ResumePlan:
    """A saved run to continue: its trainer_state.json, the config to go on with and the changes that make it, its
    tokenizer and model config (not its weights: Trainer.resume loads them again, better free meanwhile)."""

    state: dict
    config: TrainConfig
    changes: dict
    tokenizer: Any
    model_config: Any


def command_line(args) -> str:
    """The command as typed, recorded in trainer_state.json and metrics.json."""
    prefix = "torchrun ... -m bert_core" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "python -m bert_core"
    return prefix + " " + shlex.join(args.argv)


def check_training_size(model_config_, config: TrainConfig) -> None:
    """Refuse, before any data is read, a model and batch whose training would not fit in memory (on CPU, where
    weights, gradients, AdamW state and activations all live in this machine's memory)."""
    if resolve_device(config.device).type == "cpu":
        model_config_.check_memory(training=True, batch_size=math.ceil(config.batch_size / config.grad_accum),
                                   seq_len=config.max_seq_length)


def train_config(args) -> TrainConfig:
    """A new run's TrainConfig: the options' values (named by its fields); the schedule by --steps or time."""
    given = {s.name: getattr(args, s.name) for s in TRAIN_SETTINGS if s.option}
    given["schedule"] = args.schedule or ("time" if args.max_steps is None else "linear")
    return TrainConfig(**given)


def model_overrides(args) -> dict:
    """The BertConfig fields a new run's options set beyond the preset's: dropout, initial std, sizes given."""
    overrides = {"hidden_dropout_prob": args.dropout, "attention_probs_dropout_prob": args.dropout,
                 "initializer_range": args.initializer_range}
    overrides.update({name: getattr(args, name) for name in SIZE_FIELDS if getattr(args, name) is not None})
    return overrides


def warm_start(args, config: TrainConfig) -> WarmStart:
    """The checkpoint --init-from names, checked against the run (the same kind of model, enough positions, memory
    to train it); it goes on with the run's --dropout."""
    start = load_checkpoint(args.init_from, require_tokenizer=True)
    if start.trainer_state is not None:
        check_trainer_state(start.trainer_state, Path(args.init_from) / TRAINER_STATE)
    if is_causal(start.model) != (args.objective == "clm"):
        kind = "causal (next-token)" if is_causal(start.model) else "bidirectional (masked-LM)"
        raise BertCoreError(f"--init-from {args.init_from} is a {kind} model; it cannot start an "
                            f"--objective {args.objective} run")
    if start.model.config.max_position_embeddings < args.max_seq_length:
        raise BertCoreError(f"{args.init_from} has {start.model.config.max_position_embeddings} positions, "
                            f"fewer than --seq-len {args.max_seq_length}")
    check_training_size(start.model.config, config)
    dropout = {"hidden_dropout_prob": args.dropout, "attention_probs_dropout_prob": args.dropout}
    grown_rate = grown_pretraining_rate(args.init_from) if start.trainer_state is None else None
    return WarmStart(start.model, start.tokenizer, start.trainer_state, label=str(args.init_from),
                     config_changes=dropout, copy_positions_from=_positions_to_copy(args, start.trainer_state),
                     pretraining_rate=grown_rate)


def _positions_to_copy(args, trainer_state: dict | None) -> int:
    """The length whose trained positions start the longer run's others (--copy-positions), or 0 for none."""
    if args.copy_positions is False:
        return 0
    trained = trained_length(trainer_state)
    if args.copy_positions and trained is None:
        raise BertCoreError(f"{args.init_from} records no training length ({TRAINER_STATE} from `train`), so the "
                            "positions it trained are unknown: leave out --copy-positions")
    if args.copy_positions and args.max_seq_length <= trained:
        raise BertCoreError(f"--copy-positions starts the positions a longer run adds, but {args.init_from} trained "
                            f"at {trained} tokens and --seq-len is {args.max_seq_length}: leave it out")
    return positions_to_copy(trainer_state, args.max_seq_length)


def new_run_plan(args) -> RunPlan:
    """A new run's plan from its options (the recipe's filled in), its start checkpoint and tokenizer checked."""
    if args.init_from is None and args.copy_positions is not None:
        raise BertCoreError("--copy-positions starts the untrained positions of an --init-from checkpoint: give "
                            "--init-from, or leave it out")
    if args.init_from is not None and args.grow_fraction:
        raise BertCoreError("--init-from starts from a trained model of its own size; --grow-fraction grows a new "
                            "one: leave it out (or 0)")
    config = train_config(args)
    plan = RunPlan(corpora=tuple(args.corpus or ["toy"]), config=config, preset=args.preset,
                   model_overrides=model_overrides(args), vocab_size=args.vocab_size,
                   heldout_fraction=args.heldout_fraction, shard_share=args.shard_share,
                   commands=(command_line(args),))
    if args.init_from is not None and any(getattr(args, name) is not None for name in SIZE_FIELDS):
        raise BertCoreError("--init-from takes the model's size from its checkpoint: leave out --layers, "
                            "--hidden-size, --heads and --intermediate-size")
    # The vocabulary asked for is an upper bound of the one trained, so this check cannot pass a model too big.
    check_training_size(model_config(plan, args.vocab_size), config)
    if config.grow_fraction:   # the size it starts as must divide into the run's (before anything is written)
        model_config(plan, args.vocab_size).growth_start(config.grow_from_hidden, config.grow_from_layers)
    tokenizer = BertTokenizer.load(args.tokenizer) if args.tokenizer is not None else None
    start = warm_start(args, config) if args.init_from is not None else None
    if start is not None:
        tokenizer = start.tokenizer
    limit = tokenizer.model_max_length if tokenizer is not None else DEFAULT_MODEL_MAX_LENGTH
    if args.max_seq_length > limit:
        raise BertCoreError(f"--seq-len {args.max_seq_length} is longer than the tokenizer's {limit} tokens; use at "
                            f"most {limit}")
    return dataclasses.replace(plan, tokenizer=tokenizer, start=start)


def _saved_settings(state: dict, config: TrainConfig, model_config_) -> dict:
    """The settings of a saved run that shape its data or its model (STAYS), by setting name."""
    meta = state.get("metadata", {})
    own = {"corpus": meta["corpora"], "heldout_fraction": meta["heldout"]["fraction"], "preset": meta.get("preset"),
           "shard_share": meta["heldout"].get("shard_share"),
           "dropout": model_config_.hidden_dropout_prob, "initializer_range": model_config_.initializer_range}
    return {name: own[name] if name in own else getattr(config, name) for name in on_resume(STAYS)}


def _resume_changes(args, state: dict, config: TrainConfig) -> dict:
    """The config changes the options of a --resume ask for. The saved schedule stays unless --schedule is given: a
    wsd, cosine or linear run goes on by its own shape over the new length (each has a form by time and by steps),
    and only a run counted by time ("time") becomes "linear" when given --steps."""
    changes = {name: getattr(args, name) for name in RESUMABLE if getattr(args, name) is not None}
    step = int(state.get("step", 0))
    if "changes" in changes:   # more changes, after those the run made (which --resume keeps, to go on exactly)
        early = [c for c in changes["changes"] if c[0] < step]
        if early:
            raise BertCoreError(f"--change {change_text(early[0])} is before step {step}, where the saved run "
                                "stands: a change on --resume goes on from there")
        changes["changes"] = config.changes + tuple(changes["changes"])
    for name in LIVE:
        # A setting the run changed as it trained: its changes stay in effect, so the new value is one more change,
        # at the saved step (the same as `--change STEP:...`); a run without changes takes it as before.
        if name in changes and any(c[1] == name for c in config.changes):
            changes["changes"] = (*changes.get("changes", config.changes), (step, name, changes.pop(name)))
    if args.max_steps is not None:
        changes.update(max_steps=args.max_steps, time_budget_s=None)
        if config.schedule == "time" and args.schedule is None:
            changes["schedule"] = "linear"
    if args.time_budget_s is not None:
        # A time budget on resume means "this many more seconds".
        changes.update(time_budget_s=args.time_budget_s + float(state.get("elapsed_s", 0.0)), max_steps=None)
    return changes


def resume_plan(args) -> ResumePlan:
    """The run to resume, checked: options that shape the data or the model may be repeated, not changed."""
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
    for name, value in _saved_settings(state, config, ckpt.model.config).items():
        given = getattr(args, name)
        if given is not None and value is not None and given != value:
            raise BertCoreError(f"{flag(name)} cannot change on --resume (the run has {value!r}; the "
                                "data and the model depend on it): leave it out, or start a new run from these "
                                f"weights with --init-from {args.resume} --out NEW_FOLDER")
    for name in on_resume(NEW_RUN_ONLY):
        if getattr(args, name) is not None:
            raise BertCoreError(f"{flag(name)} only shapes a new run; --resume takes the tokenizer and "
                                f"weights from {args.resume}: leave it out")
    changes = _resume_changes(args, state, config)
    return ResumePlan(state, config.replace(**changes), changes, ckpt.tokenizer, ckpt.model.config)


def check_same_heldout(folder, before: dict | None, now: dict) -> None:
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


def check_enough_text(trainer) -> None:
    """Refuse a corpus too small to train on before the output folder is touched (the trainer reuses what this
    builds: the first epoch's examples and the held-out batches)."""
    _ = trainer.data.batches_per_epoch
    if not trainer.heldout_batches():
        raise BertCoreError("the held-out part of the corpus is too short to make one evaluation batch: give more text "
                            "(at least a few dozen sentences; a useful model needs thousands) or a larger "
                            "--heldout-fraction")
