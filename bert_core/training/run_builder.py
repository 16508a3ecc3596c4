"""One builder of a pretraining run, for `python -m bert_core train` and the app's Train page alike (each makes a
`RunPlan` from its flags or its spec), so the same settings and seed give the same masks, batches and initial
weights: the data (with a tokenizer trained on its training part), the model and the Trainer, not started.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bert_core.data.corpora import HELDOUT_FRACTION, shard_folder, shard_heldout_corpora
from bert_core.data.downloads import SOURCES
from bert_core.data.pretraining_data import build_datasets
from bert_core.data.shards import DEFAULT_SHARD_SHARE, MixedHeldOut, MixedStream, ShardStream, check_share, open_index
from bert_core.errors import BertCoreError
from bert_core.model.bert import pretraining_model
from bert_core.model.config import BertConfig
from bert_core.model.growth import copy_trained_positions
from bert_core.model.tokenization import BertTokenizer
from bert_core.training.recipes import DEFAULT_PRESET
from bert_core.training.trainer import Trainer
from bert_core.training.train_config import TrainConfig


@dataclass(frozen=True)
class WarmStart:
    """A model to start from (`train --init-from`, the page's 'train on from these weights'): its weights, size and
    tokenizer, with a new optimizer, schedule and data order."""

    model: Any
    tokenizer: Any
    trainer_state: dict | None
    label: str                      # where it came from, as trainer_state.json records it
    # BertConfig fields the new run changes (the CLI's --dropout); none: the model goes on exactly as loaded.
    config_changes: dict = field(default_factory=dict)
    # The length the model trained at, when the run is longer and starts its untrained positions as copies of the
    # trained ones (`growth.copy_trained_positions`; `train --copy-positions`); 0: the positions stay as loaded.
    copy_positions_from: int = 0
    # The rate behind the weights where no trainer state records it: a folder `grow` wrote (its growth.json).
    pretraining_rate: float | None = None


def trained_length(trainer_state: dict | None) -> int | None:
    """The sequence length a checkpoint's last run trained at, from its trainer_state.json (None when unrecorded)."""
    length = ((trainer_state or {}).get("train_config") or {}).get("max_seq_length")
    return length if isinstance(length, int) and length > 0 else None


def _positive_rate(rate) -> float | None:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        return None
    return float(rate)


def pretraining_rate_of(trainer_state) -> float | None:
    """The highest peak learning rate a checkpoint made here was pretrained at: its last run's (train_config), or,
    where that run continued another checkpoint (`--init-from`), the rate that checkpoint recorded
    (metadata.init_from.pretraining_rate) if higher. None where the state is absent or holds no positive number.

    Why the highest: the fine-tuning rule (finetune.finetune_learning_rate) scales the rate the weights trained at,
    and a continuation at a lower rate (the mini's 256-token phase at 5e-4, after three at 1e-3) refines weights that
    learnt at the higher one. Fine-tuned at half the earlier phases' rate, that mini read the toy stories at 67.5%
    (seed 0, 8,000 steps); at their rate, 94.3% (docs/benchmarks.md, "BERT's second length on a GPU")."""
    if not isinstance(trainer_state, dict):
        return None
    train_config = trainer_state.get("train_config")
    own = _positive_rate(train_config.get("learning_rate") if isinstance(train_config, dict) else None)
    if own is None:
        return None
    metadata = trainer_state.get("metadata")
    start = metadata.get("init_from") if isinstance(metadata, dict) else None
    before = _positive_rate(start.get("pretraining_rate") if isinstance(start, dict) else None)
    return max(own, before or own)


def positions_to_copy(trainer_state: dict | None, seq_len: int) -> int:
    """The default of a warm start at `seq_len`: the trained length when the run is longer (its other positions start
    as copies), else 0."""
    trained = trained_length(trainer_state)
    return trained if trained is not None and seq_len > trained else 0


@dataclass(frozen=True)
class RunPlan:
    """Everything a new pretraining run is built from."""

    corpora: tuple[str, ...]        # load_corpus specs (a name or a text file), each split into train and held out
    config: TrainConfig
    preset: str = DEFAULT_PRESET
    model_overrides: dict = field(default_factory=dict)   # BertConfig fields beyond the preset's (sizes, dropout...)
    vocab_size: int = 8000          # the WordPiece vocabulary to train on the training part
    heldout_fraction: float = HELDOUT_FRACTION
    shard_share: float | None = None   # a shard folder beside text corpora: the shards' share of the batches
    tokenizer: Any = None           # use this tokenizer instead of training one (a warm start brings its own)
    start: WarmStart | None = None
    corpus_labels: tuple[str, ...] | None = None   # the corpora as trainer_state.json names them (default: the specs)
    commands: tuple[str, ...] = ()  # the command lines that repeat this run, recorded beside it


@dataclass(frozen=True)
class RunData:
    """A plan's data: training and held-out batches, each corpus's held-out part, the tokenizer, the split's record."""

    train: Any
    eval: Any
    heldout: dict
    tokenizer: Any
    record: dict


@dataclass(frozen=True)
class BuiltRun:
    """A run ready to start: its Trainer, and the held-out part of each corpus (for per-corpus figures)."""

    trainer: Trainer
    heldout: dict
    record: dict


def model_config(plan: RunPlan, vocab_size: int) -> BertConfig:
    """The BertConfig of a new model for `plan`: the preset with its overrides, positions for the sequence length,
    and causal attention for the next-token objective."""
    overrides = {"vocab_size": vocab_size, "max_position_embeddings": max(512, plan.config.max_seq_length),
                 **plan.model_overrides}
    if plan.config.objective == "clm":  # GPT in BERT's house: the same encoder, attending only leftwards
        overrides["attention"] = "causal"
    return BertConfig.preset(plan.preset, **overrides)


def load_data(plan: RunPlan, world_size: int = 1) -> RunData:
    """Load the plan's corpora, hold out a seeded fraction of each (by document), and make the batches; without a
    tokenizer (given, or the warm start's) one is trained on the training part only, so held-out text stays unseen."""
    cfg = plan.config
    tokenizer = plan.start.tokenizer if plan.start is not None else plan.tokenizer
    folders = [shard_folder(spec) for spec in plan.corpora]
    shards = [f for f in folders if f is not None]
    if len(shards) > 1:
        raise BertCoreError("give one shard folder (`corpus build` mixes sources at the weights it states)")
    if plan.shard_share is not None and (not shards or len(folders) == 1):
        raise BertCoreError("--shard-share mixes a shard folder with text corpora: give both (`--corpus shards:DIR "
                            "--corpus brown ...`), or leave it out")
    if shards and len(folders) == 1:
        return load_shard_data(plan, shards[0], tokenizer, world_size)
    if shards:
        return load_mixed_data(plan, shards[0], tokenizer, world_size)
    train, heldout_batches, heldout, tokenizer, record = build_datasets(
        list(plan.corpora), tokenizer, cfg.max_seq_length, cfg.batch_size, cfg.mask_rate, cfg.nsp, cfg.seed,
        plan.heldout_fraction, world_size, train_tokenizer=plan.vocab_size,
        whole_word_masking=cfg.whole_word_masking, mask_only=cfg.mask_only, objective=cfg.objective)
    return RunData(train, heldout_batches, heldout, tokenizer, record)


def load_shard_data(plan: RunPlan, folder, tokenizer, world_size: int = 1) -> RunData:
    """A plan's data from a shard folder (`corpus build`): streams over its train and held-out shards, whose
    document-level split the build made; the tokenizer is the shards' own, and a given one must be the same."""
    cfg = plan.config
    index = open_index(folder)
    if tokenizer is not None:
        mine = BertTokenizer.load(folder / "tokenizer")
        if mine.tokenizer.get_vocab(with_added_tokens=True) != tokenizer.tokenizer.get_vocab(with_added_tokens=True):
            raise BertCoreError(f"the shards in {folder} were made with another vocabulary than the model's; build "
                                "them with its tokenizer (`corpus build --tokenizer DIR`)")
    else:
        tokenizer = BertTokenizer.load(folder / "tokenizer")
    common = dict(seq_len=cfg.max_seq_length, seed=cfg.seed, mask_rate=cfg.mask_rate, tokenizer=tokenizer,
                  nsp=cfg.nsp, objective=cfg.objective, whole_word_masking=cfg.whole_word_masking,
                  mask_only=cfg.mask_only)
    train = ShardStream(folder, "train", batch_size=cfg.batch_size * world_size, **common)
    heldout_batches = ShardStream(folder, "heldout", batch_size=cfg.batch_size, weights={}, **common)
    built = index.get("settings", {})
    record = {"seed": int(built.get("seed", 0)),
              "fraction": float(built.get("heldout_fraction", plan.heldout_fraction)),
              "method": "the documents `corpus build` held out of each source (its index.json and heldout/)",
              "shards": str(folder), "corpora": [{"spec": spec} for spec in plan.corpora]}
    # Each source's held-out documents, for its own figures in metrics.json.
    return RunData(train, heldout_batches, shard_heldout_corpora(folder), tokenizer, record)


def load_mixed_data(plan: RunPlan, folder, tokenizer, world_size: int = 1) -> RunData:
    """A shard folder and text corpora in one run (bert_core.data.shards.MixedStream): each batch from the shards with
    probability plan.shard_share (default DEFAULT_SHARD_SHARE), else from the text corpora, each held out as
    alone; the tokenizer must be the shards' (a warm start's or --tokenizer), the text split as `load_data` does."""
    share = DEFAULT_SHARD_SHARE if plan.shard_share is None else check_share(plan.shard_share)
    texts = tuple(spec for spec in plan.corpora if shard_folder(spec) is None)
    if tokenizer is None:
        tokenizer = BertTokenizer.load(Path(folder) / "tokenizer")
    text = load_data(dataclasses.replace(plan, corpora=texts, shard_share=None, tokenizer=tokenizer), world_size)
    sharded = load_shard_data(dataclasses.replace(plan, corpora=(f"shards:{folder}",), shard_share=None), folder,
                              tokenizer, world_size)
    # The text corpora's held-out documents must not be in the shards, as a warm start's must not (train.py).
    check_shards_exclude("this run holds out", text.record, folder)
    record = {**text.record, "shards": str(folder), "shard_share": share, "shard_split": sharded.record,
              "method": f"{text.record['method']}; the shards' own split ({sharded.record['method']})"}
    return RunData(MixedStream(sharded.train, text.train, share, plan.config.seed),
                   MixedHeldOut(sharded.eval, text.eval, share), {**sharded.heldout, **text.heldout},
                   text.tokenizer, record)


# Corpora generated here from a seed (the toy grammar): no public collection holds them, so shards need no check.
GENERATED_CORPORA = ("toy",)


def check_shards_exclude(who: str, before: dict | None, shards) -> None:
    """Shards beside held-out text: every corpus whose documents are held out (by a warm start's model, or by this
    run's own text corpora mixed in) must be among the texts the shards were decontaminated against (`corpus build
    --against`), or the run could train on that held-out text. `who` begins the message ("this run holds out")."""
    if not before:
        return
    report_path = Path(shards) / "report.json"
    try:
        refs = json.loads(report_path.read_text())["references"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BertCoreError(f"{report_path} cannot be read ({e}); it says what the shards were checked against") from e
    checked = {Path(str(r.get("where", "")).split("::")[-1]).name for r in refs}

    def file_name(spec: str) -> str:
        named = SOURCES.get(spec)
        return Path(named.shared_copy or named.filename).name if named is not None else Path(spec).name

    def same_shards(spec: str) -> bool:   # a model trained on these very shards: the build's split holds for both
        folder = shard_folder(spec)
        return folder is not None and Path(folder).resolve() == Path(shards).resolve()

    missing = [c.get("spec", "?") for c in before.get("corpora", [])
               if c.get("spec") not in GENERATED_CORPORA and not same_shards(c.get("spec", "?"))
               and file_name(c.get("spec", "?")) not in checked]
    if missing:
        raise BertCoreError(f"{who} documents of {', '.join(missing)}, but the shards in {shards} were not checked "
                            "against them; rebuild the shards with `corpus build --against FILE` for each, so that "
                            "the held-out text stays unseen")


def grow_target(plan: RunPlan, tokenizer) -> BertConfig | None:
    """The size a run that starts small grows to (TrainConfig.grow_fraction): the plan's model; None when it
    does not grow."""
    if not plan.config.grow_fraction:
        return None
    if plan.start is not None:
        raise BertCoreError("a run from a trained model's weights does not start small: set grow_fraction to 0")
    return model_config(plan, tokenizer.vocab_size)


def build_model(plan: RunPlan, tokenizer) -> torch.nn.Module:
    """The model a run starts from: new weights drawn from the seed (of the small size first, for a run that grows),
    or the warm start's weights."""
    torch.manual_seed(plan.config.seed)  # the same initial weights on every rank and every rerun
    start = plan.start
    if start is None:
        config = model_config(plan, tokenizer.vocab_size)
        if plan.config.grow_fraction:
            config = config.growth_start(plan.config.grow_from_hidden, plan.config.grow_from_layers)
        return pretraining_model(config)
    if not start.config_changes:
        model = start.model.train()
    else:
        model = pretraining_model(start.model.config.replace(**start.config_changes))
        model.load_state_dict(start.model.state_dict())
    if start.copy_positions_from:
        copy_trained_positions(model, start.copy_positions_from)
    return model


def run_metadata(plan: RunPlan, data: RunData, extra: dict | None = None) -> dict:
    """What trainer_state.json records about where a run came from: corpora, held-out split, commands, `extra`
    facts, and the run behind a warm start."""
    metadata = {
        "corpora": list(plan.corpus_labels or plan.corpora),
        "preset": plan.preset,
        "heldout": data.record,
        "commands": list(plan.commands),
        "unigram_counts": data.train.token_counts.tolist(),
        **(extra or {}),
    }
    if plan.start is not None:
        state = plan.start.trainer_state or {}
        before = state.get("metadata", {})
        # The run that made the starting weights, so metrics.json names every command behind the model.
        metadata["commands"] = (before.get("commands") or []) + metadata["commands"]
        metadata["init_from"] = {"folder": plan.start.label, "step": state.get("step"),
                                 "preset": before.get("preset"), "corpora": before.get("corpora")}
        rate = pretraining_rate_of(state) or plan.start.pretraining_rate
        if rate is not None:   # the fine-tuning rule reads the highest rate behind the weights (pretraining_rate_of)
            metadata["init_from"]["pretraining_rate"] = rate
        if plan.start.copy_positions_from:
            metadata["init_from"]["positions_copied_from"] = plan.start.copy_positions_from
        metadata["preset"] = before.get("preset", plan.preset)
    return metadata


def build_run(plan: RunPlan, callbacks: Sequence[Callable[[Any], None]] = (), checkpoint_dir=None,
              world_size: int = 1, probes_for: Callable[[dict], tuple[Any, dict]] | None = None) -> BuiltRun:
    """Data, model and Trainer for a new run. `probes_for(heldout by corpus)` returns the run's probe store (or None)
    and what to record about its sentences; the app draws them from the held-out text, the CLI has none."""
    data = load_data(plan, world_size)
    model = build_model(plan, data.tokenizer)
    probes, probe_record = probes_for(data.heldout) if probes_for is not None else (None, None)
    metadata = run_metadata(plan, data, {"probes": probe_record} if probe_record is not None else None)
    trainer = Trainer(model, data.tokenizer, data.train, plan.config, eval_data=data.eval, callbacks=callbacks,
                      probes=probes, checkpoint_dir=checkpoint_dir, metadata=metadata,
                      grow_to=grow_target(plan, data.tokenizer))
    return BuiltRun(trainer, data.heldout, data.record)


def resume_run(folder, state: dict, config: TrainConfig, changes: dict, tokenizer,
               callbacks: Sequence[Callable[[Any], None]] = (), checkpoint_dir=None, world_size: int = 1) -> BuiltRun:
    """A saved run continued where it stopped: its corpora and held-out split made again as they were (from `state`,
    its trainer_state.json), then `Trainer.resume` with the `changes` to its config."""
    meta = state["metadata"]
    plan = RunPlan(corpora=tuple(meta["corpora"]), config=config, heldout_fraction=meta["heldout"]["fraction"],
                   shard_share=meta["heldout"].get("shard_share"), tokenizer=tokenizer)
    data = load_data(plan, world_size)
    trainer = Trainer.resume(folder, data.train, eval_data=data.eval, callbacks=callbacks,
                             checkpoint_dir=checkpoint_dir, config_overrides=changes or None)
    return BuiltRun(trainer, data.heldout, data.record)
