"""Pretraining loop (MLM + NSP) that can be watched, stopped, resumed exactly and run under torchrun."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bert_core.data.pretraining_data import OBJECTIVES
from bert_core.errors import BertCoreError
from bert_core.model.bert import IGNORE_INDEX, is_causal
from bert_core.model.config import MAX_SEED
from bert_core.training.evaluation import autocast_for
from bert_core.training.mlm_stats import MlmStats, batch_stats
from bert_core.training.run_loop import RunLoop

log = logging.getLogger(__name__)

SCHEDULES = ("linear", "cosine", "time", "constant")
PRECISIONS = ("bf16", "fp16", "fp32")
# Consecutive fp16 updates the loss scaler may skip (an overflow halves its scale) before the run counts as diverged.
MAX_SKIPPED_UPDATES = 20
STATES = ("idle", "running", "stopped", "finished", "failed")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class TrainConfig:
    """Every knob of a pretraining run; stored in trainer_state.json so a run can be resumed and reported."""

    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_ratio: float = 0.1
    max_steps: int | None = 1000
    time_budget_s: float | None = None
    # "linear"/"cosine": warmup then decay over max_steps (or over the time budget when there is no step count);
    # "time": progress is elapsed/budget, so the rate reaches zero exactly when the budget runs out.
    schedule: str = "linear"
    weight_decay: float = 0.01
    adam_eps: float = 1e-6
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    max_grad_norm: float = 1.0  # 0 disables clipping (the norm is still reported)
    # Each batch is split into this many micro-batches whose gradients add up: less memory, the same update.
    grad_accum: int = 1
    max_seq_length: int = 128
    # Short sequences first, a deviation from BERT's paper (which trained 90% of its steps at 128 tokens and the
    # rest at 512, for speed): for the first `short_seq_fraction` of the run (of its steps or its time budget,
    # whichever is further), sequences of `short_seq_length` tokens, `short_seq_batch_size` of them a step (0: as
    # many tokens a step as the long phase). A small model's attention starts near uniform; in a short sequence a
    # neighbour is a large share of it, so the model leaves the unigram plateau sooner ("The unigram plateau" in
    # docs/benchmarks.md). 0 = off: every step at max_seq_length.
    short_seq_length: int = 0
    short_seq_fraction: float = 0.0
    short_seq_batch_size: int = 0
    mask_rate: float = 0.15
    nsp: bool = True
    # "mlm": BERT's masked LM (+ NSP when nsp); "clm": GPT's next token on every position, a causal model (no NSP,
    # nothing masked, mask_rate unused).
    objective: str = "mlm"
    seed: int = 0
    eval_every: int = 0  # steps between held-out evaluations; 0 = only before the first and after the last step
    eval_batches: int = 20
    probe_every: int = 0  # steps between probe snapshots; 0 = none
    checkpoint_every_s: float = 0.0  # seconds between checkpoints when the trainer has a checkpoint_dir; 0 = end only
    device: str = "auto"
    # Mixed precision on a CUDA GPU: "bf16" autocasts to bfloat16, "fp16" to float16 with a loss scaler (a GPU
    # without bfloat16), "fp32" none. On a CPU every run is fp32: there bfloat16 autocast was slower than fp32 and
    # float16 has no fast path, so the setting falls back (and says so in the CLI's log).
    precision: str = "bf16"
    # Per-step events kept in `history` (and trainer_state.json): past this many, every 2nd, then every 4th...
    # step is kept, evenly over the whole run, plus the newest. 0 keeps every step. The shipped model's 28k-step
    # history was 13 MB of JSON in its checkpoint folder; thinned to 4,096 it is 1.7 MB.
    history_limit: int = 4096
    # Masking switches for one-knob comparisons (bert_core.training.comparison). Whole-word masking is the paper's later
    # variant (Google's 2019 release): a word's pieces are masked together. mask_only is a deviation from the
    # paper: every chosen token becomes [MASK] (no 10% random, no 10% kept), to show what 80/10/10 buys.
    whole_word_masking: bool = False
    mask_only: bool = False

    def __post_init__(self):
        def need(ok: bool, message: str):
            if not ok:
                raise BertCoreError(message)

        # Types first: a config read back from a hand-edited trainer_state.json may hold "32" or 1e999.
        for name, low in (("batch_size", 1), ("grad_accum", 1), ("max_seq_length", 8), ("eval_every", 0),
                          ("short_seq_length", 0), ("short_seq_batch_size", 0),
                          ("eval_batches", 1), ("probe_every", 0), ("history_limit", 0), ("seed", 0)):
            value = getattr(self, name)
            need(_is_int(value) and value >= low, f"{name} must be a whole number of at least {low}, got {value!r}")
        need(self.seed <= MAX_SEED, f"seed must be between 0 and {MAX_SEED} (2**32 - 1), got {self.seed}")
        need(self.max_steps is None or (_is_int(self.max_steps) and self.max_steps >= 1),
             f"max_steps must be at least 1, got {self.max_steps!r}")
        for name in ("learning_rate", "weight_decay", "max_grad_norm", "checkpoint_every_s", "adam_eps",
                     "warmup_ratio", "mask_rate", "adam_beta1", "adam_beta2", "short_seq_fraction"):
            value = getattr(self, name)
            need(_is_finite(value), f"{name} must be a finite number, got {value!r}")
        need(self.time_budget_s is None or _is_finite(self.time_budget_s),
             f"time_budget_s must be a finite number of seconds, got {self.time_budget_s!r}")
        need(self.learning_rate > 0, f"learning_rate must be positive, got {self.learning_rate}")
        need(0 <= self.warmup_ratio < 1, f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        need(
            self.time_budget_s is None or self.time_budget_s > 0,
            f"time_budget_s must be positive, got {self.time_budget_s}",
        )
        need(
            self.max_steps is not None or self.time_budget_s is not None,
            "give a number of steps (max_steps) or a time budget (time_budget_s)",
        )
        need(self.schedule in SCHEDULES, f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        need(
            self.schedule != "time" or self.time_budget_s is not None,
            "the 'time' schedule needs a time budget (time_budget_s)",
        )
        need(0 < self.mask_rate < 1, f"mask_rate must be in (0, 1), got {self.mask_rate}")
        need(0 <= self.short_seq_fraction < 1, f"short_seq_fraction must be in [0, 1), got {self.short_seq_fraction}")
        need(self.short_seq_length == 0 or 16 <= self.short_seq_length <= self.max_seq_length,
             f"short_seq_length must be 0 (off) or between 16 and max_seq_length ({self.max_seq_length}), got "
             f"{self.short_seq_length}")
        need(self.max_grad_norm >= 0, f"max_grad_norm must be >= 0, got {self.max_grad_norm}")
        need(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        need(self.checkpoint_every_s >= 0, f"checkpoint_every_s must be >= 0 (0 = only at the end), got "
                                           f"{self.checkpoint_every_s}")
        need(self.adam_eps > 0 and 0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1,
             "adam_eps must be positive and adam_beta1 / adam_beta2 in [0, 1)")
        need(self.history_limit == 0 or self.history_limit >= 2,
             f"history_limit must be 0 (keep all) or at least 2, got {self.history_limit}")
        need(isinstance(self.nsp, bool), "nsp must be true or false")
        need(self.precision in PRECISIONS, f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        need(isinstance(self.whole_word_masking, bool) and isinstance(self.mask_only, bool),
             "whole_word_masking and mask_only must be true or false")
        need(isinstance(self.device, str), f"device must be a name (auto, cpu, cuda), got {self.device!r}")
        need(self.objective in OBJECTIVES, f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        need(self.objective != "clm" or not self.nsp,
             "the next-token objective (clm) has no next-sentence prediction: set nsp off")

    def replace(self, **changes) -> "TrainConfig":
        """Return a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-able form, as stored in trainer_state.json."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        """Inverse of to_dict; unknown keys (from newer versions) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        d = dict(d)
        if "precision" not in d and d.get("bf16") is False:  # written before `precision` replaced `bf16`
            d["precision"] = "fp32"
        return cls(**{k: v for k, v in d.items() if k in names})


def _damaged(path, why: str) -> BertCoreError:
    return BertCoreError(f"{path} is damaged: {why}; restore it from a backup, or start a new run from these weights "
                         "with --init-from (the folder was left as it was)")


def check_trainer_state(state, path) -> TrainConfig:
    """Check a trainer_state.json read back from disk: the types and ranges of everything a resume uses, so that a
    damaged or hand-edited file is refused by name before anything is built or written. Returns its TrainConfig."""
    if not isinstance(state, dict):
        raise _damaged(path, "it does not hold a JSON object")
    for key in ("step", "tokens_seen"):
        value = state.get(key, 0)
        if not _is_int(value) or value < 0:
            raise _damaged(path, f'"{key}" must be a whole number >= 0, not {value!r}')
    elapsed = state.get("elapsed_s", 0.0)
    if not _is_finite(elapsed) or elapsed < 0:
        raise _damaged(path, f'"elapsed_s" must be a number of seconds >= 0, not {elapsed!r}')
    if not isinstance(state.get("train_config"), dict):
        raise _damaged(path, '"train_config" is missing or not an object')
    try:
        config = TrainConfig.from_dict(state["train_config"])
    except (BertCoreError, TypeError) as e:
        raise _damaged(path, f'"train_config": {e}') from e
    for key, event_class in (("history", StepEvent), ("evals", EvalEvent)):
        events = state.get(key, [])
        if not isinstance(events, list):
            raise _damaged(path, f'"{key}" must be a list')
        for entry in events:
            try:
                event = event_class(**entry)
            except TypeError as e:
                raise _damaged(path, f'an entry of "{key}" does not fit ({e})') from e
            values = dataclasses.asdict(event)
            if not _is_int(values.pop("step")) or not all(v is None or _is_finite(v) for v in values.values()):
                raise _damaged(path, f'an entry of "{key}" holds a value that is not a number: {entry}'[:300])
    for key in ("baselines", "metadata"):
        if not isinstance(state.get(key, {}), dict):
            raise _damaged(path, f'"{key}" must be an object')
    for key in ("data_state", "short_data_state"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            raise _damaged(path, f'"{key}" must be an object')
    rng = state.get("rng")
    if rng is not None:
        saved = rng.get("torch") if isinstance(rng, dict) else None
        if not (isinstance(saved, list) and len(saved) == torch.get_rng_state().numel()
                and all(_is_int(b) and 0 <= b < 256 for b in saved)):
            raise _damaged(path, '"rng" does not hold a torch generator state')
    meta = state.get("metadata", {})
    corpora = meta.get("corpora")
    if corpora is not None and not (isinstance(corpora, list) and corpora and all(isinstance(c, str) for c in corpora)):
        raise _damaged(path, '"metadata.corpora" must be a list of corpus names')
    held = meta.get("heldout")
    if held is not None:
        ok = (isinstance(held, dict) and _is_finite(held.get("fraction")) and 0 < held["fraction"] < 1
              and _is_int(held.get("seed")) and isinstance(held.get("corpora", []), list)
              and all(isinstance(c, dict) for c in held.get("corpora", [])))
        if not ok:
            raise _damaged(path, '"metadata.heldout" must record the held-out split (seed, fraction, corpora)')
    return config


def default_recipe(preset: str | None = None, device: str = "cpu", hidden_size: int | None = None,
                   num_hidden_layers: int | None = None) -> dict:
    """The pretraining recipe for a size on a kind of machine (bert_core.training.recipes, measured in docs/benchmarks.md):
    model preset, dropout, initializer_range, and a TrainConfig (what `train` uses when nothing is given)."""
    from bert_core.training.recipes import DEFAULT_PRESET, recipe_for

    r = recipe_for(preset or DEFAULT_PRESET, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                   device=device)
    return {
        "preset": r.preset,
        "dropout": r.dropout,
        "initializer_range": r.initializer_range,
        "recipe": r,
        "train_config": TrainConfig(**r.train_config_fields()),
    }


def lr_multiplier(config: TrainConfig, step: int, elapsed_s: float = 0.0) -> float:
    """Fraction of the peak learning rate for the update that follows `step` completed updates.

    Step-based schedules use update number step+1 for warmup (so the first update is not wasted at lr 0) and
    never reach exactly zero; time-based progress reaches zero when elapsed_s equals the budget.
    """
    if config.schedule == "constant":
        return 1.0
    by_time = config.schedule == "time" or config.max_steps is None
    if by_time:
        p = min(max(elapsed_s / config.time_budget_s, 0.0), 1.0)
        warm = config.warmup_ratio
        if warm > 0 and p < warm:
            return max(p / warm, 1e-3)  # a tiny floor: at p == 0 the first update would otherwise do nothing
        q = (p - warm) / (1.0 - warm)
    else:
        total = config.max_steps
        warm_steps = int(round(config.warmup_ratio * total))
        if step < warm_steps:
            return (step + 1) / warm_steps
        q = (step - warm_steps) / max(total - warm_steps, 1)
    q = min(max(q, 0.0), 1.0)
    if config.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * q))
    return 1.0 - q


@dataclass
class StepEvent:
    """What one optimizer update did, averaged over the global batch (all ranks, all accumulation steps)."""

    step: int
    tokens_seen: int
    lr: float
    loss: float
    mlm_loss: float
    nsp_loss: float | None
    mlm_acc: float | None
    mlm_acc_masked: float | None  # tokens replaced by [MASK]
    mlm_acc_random: float | None  # tokens replaced by a random token
    mlm_acc_kept: float | None  # tokens left unchanged but still predicted
    nsp_acc: float | None
    tokens_per_s: float
    grad_norm: float
    elapsed_s: float


@dataclass
class EvalEvent:
    """A held-out evaluation at a given step (step 0 is the untrained model)."""

    step: int
    mlm_loss: float
    mlm_acc: float
    perplexity: float
    nsp_acc: float | None


# ---------------------------------------------------------------------------------------------- distributed


@dataclass(frozen=True)
class DistInfo:
    """This process's place in a torchrun job (rank 0 of 1 when not distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str = "auto") -> DistInfo:
    """Join the torchrun process group when WORLD_SIZE > 1 (nccl on GPU, gloo on CPU); a no-op otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo()
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and device in ("auto", "cuda")
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank)


def current_dist() -> DistInfo:
    """The DistInfo of the initialised process group, or the single-process default."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    return DistInfo()


def shutdown_distributed() -> None:
    """Leave the process group if one was joined."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def resolve_device(name: str, dist_info: DistInfo | None = None) -> torch.device:
    """'auto' -> CUDA when present (this rank's GPU under torchrun), else CPU; other names as given."""
    dist_info = dist_info or DistInfo()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise BertCoreError("device 'cuda' was asked for but no CUDA GPU is visible; use --device cpu or auto")
        return torch.device("cuda", dist_info.local_rank if dist_info.world_size > 1 else torch.cuda.current_device())
    try:
        return torch.device(name)
    except RuntimeError as e:
        raise BertCoreError(f"unknown device {name!r}: use auto, cpu or cuda") from e


# ---------------------------------------------------------------------------------------------- trainer


def split_rows(batch, parts: int) -> list:
    """Cut a Batch into up to `parts` consecutive row ranges, each trimmed to its own longest sequence."""
    n = len(batch.input_ids)
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    out = []
    for start, stop in zip(bounds, bounds[1:]):
        if stop > start:
            out.append(take_rows(batch, start, stop))
    return out


def take_rows(batch, start: int, stop: int):
    """Rows start:stop of a Batch, with padding columns beyond their longest sequence dropped."""
    width = int(batch.attention_mask[start:stop].sum(1).max()) if stop > start else 0
    changes = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if isinstance(value, torch.Tensor):
            value = value[start:stop]
            if value.dim() == 2:
                value = value[:, :width]
        elif isinstance(value, list):
            value = value[start:stop]
        changes[f.name] = value
    return dataclasses.replace(batch, **changes)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model


class Trainer(RunLoop):
    """Runs BertForPreTraining updates one at a time; observable and stoppable from another thread (run_loop).

    Another thread may read `history`, `evals`, `state`, `progress`, `probes` and `error` at any time and call
    `stop()`; `run()` may be called again after a stop to continue from where it stopped.
    """

    step_event_type = StepEvent

    def __init__(
        self,
        model,
        tokenizer,
        data,
        config: TrainConfig,
        eval_data=None,
        callbacks: Sequence[Callable[[Any], None]] = (),
        probes=None,
        checkpoint_dir=None,
        metadata: dict | None = None,
    ):
        from bert_core.model.bert import adamw

        super().__init__(callbacks)
        self.config = config
        self.tokenizer = tokenizer
        self.data = data
        self.eval_data = eval_data
        self.probes = probes
        self.checkpoint_dir = checkpoint_dir
        # Free-form facts recorded in trainer_state.json (held-out split, command line, corpora...).
        self.metadata: dict = dict(metadata or {})
        self.dist = current_dist()
        self.device = resolve_device(config.device, self.dist)

        want, kind = ("causal" if config.objective == "clm" else "bidirectional"), \
            ("causal" if is_causal(model) else "bidirectional")
        if want != kind:
            raise BertCoreError(f"the {config.objective} objective trains a {want} model, and this one is {kind}")
        self.model = model.to(self.device)
        self.model.train()
        self._ddp = None
        if self.dist.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self._ddp = DistributedDataParallel(self.model, device_ids=ids)
        self.optimizer = adamw(self.model, config.learning_rate, config.weight_decay,
                               betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps)
        # float16's range is narrow: its gradients are scaled up for the backward pass and back down before the
        # update, and an update whose gradients overflowed is skipped (the scale then halves). Not checkpointed:
        # a resumed fp16 run starts again from the default scale, which it finds within a few steps.
        self._scaler = (torch.amp.GradScaler("cuda") if self.device.type == "cuda" and config.precision == "fp16"
                        else None)
        self._skipped_updates = 0

        self.tokens_seen = 0
        self.baselines: dict = {}
        self.last_checkpoint_step: int | None = None  # the step of the newest checkpoint in checkpoint_dir
        self._eval_batches = None
        self._last_checkpoint = time.monotonic()
        # Dropout draws from torch's global generator; the trainer keeps its own copy of that state so that a
        # stop/resume (even through a checkpoint) replays exactly the same dropout masks.
        gen = torch.Generator().manual_seed(config.seed * 1_000_003 + self.dist.rank)
        self._rng_state: dict = {"torch": gen.get_state()}
        if torch.cuda.is_available():
            self._rng_state["cuda"] = None  # seeded on first run from the config seed
        self._data_iter = None
        # The data of the short-sequence phase (TrainConfig.short_seq_length), made from `data` when first needed.
        self.short_data = None
        self._short_iter = None
        self._ranks_checked = False

    @property
    def is_main(self) -> bool:
        return self.dist.is_main

    @property
    def history_limit(self) -> int:
        return self.config.history_limit

    # ------------------------------------------------------------------ the loop's hooks (run_loop.RunLoop.run)

    @contextlib.contextmanager
    def _run_context(self):
        # The run's own RNG state goes into torch's global generator for the run, and the caller's comes back after.
        outer_rng = torch.get_rng_state()
        outer_cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        self._install_rng()
        try:
            yield
        finally:
            self._capture_rng()
            torch.set_rng_state(outer_rng)
            if outer_cuda is not None:
                torch.cuda.set_rng_state_all(outer_cuda)

    def _before_loop(self) -> None:
        if self._data_iter is None:
            self._data_iter = iter(self.data)
        if self.step == 0 and not self._evals:
            self._prepare_baselines()
            self._evaluate()
            self._snapshot_probes()
        if self.checkpoint_dir is not None and self.last_checkpoint_step is None:
            # A checkpoint before the first update (of a new run, or of a resumed one saving elsewhere): should
            # the loss turn NaN before the first timed save, there is a good state to resume from.
            self._checkpoint()

    def _after_step(self) -> None:
        cfg = self.config
        if cfg.eval_every and self.step % cfg.eval_every == 0 and not self._done():
            self._evaluate()
        if cfg.probe_every and self.step % cfg.probe_every == 0:
            self._snapshot_probes()
        if (
            self.checkpoint_dir is not None
            and cfg.checkpoint_every_s
            and time.monotonic() - self._last_checkpoint >= cfg.checkpoint_every_s
        ):
            self._checkpoint()

    def _after_loop(self, final: str) -> None:
        if final == "finished":
            if not self._evals or self._evals[-1].step != self.step:
                self._evaluate()
            if self.probes is not None and self.config.probe_every and self.step % self.config.probe_every:
                self._snapshot_probes()
        if self.checkpoint_dir is not None and self.error is None:
            self._checkpoint()

    def _after_divergence(self) -> str:
        kept = (f" ({self.checkpoint_dir}, step {self.last_checkpoint_step})"
                if self.checkpoint_dir is not None and self.last_checkpoint_step is not None else "")
        return f"lower it and resume from the last checkpoint{kept}."

    def _install_rng(self):
        torch.set_rng_state(self._rng_state["torch"])
        if torch.cuda.is_available():
            cuda_state = self._rng_state.get("cuda")
            if cuda_state is None:
                torch.cuda.manual_seed_all(self.config.seed * 1_000_003 + self.dist.rank)
            else:
                torch.cuda.set_rng_state_all(cuda_state)

    def _capture_rng(self):
        self._rng_state = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            self._rng_state["cuda"] = torch.cuda.get_rng_state_all()

    def _autocast(self):
        return autocast_for(self.device, self.config.precision)

    def _train_step(self) -> StepEvent | None:
        """One optimizer update over grad_accum micro-batches; returns None (and sets error) on a non-finite loss."""
        cfg = self.config
        t0 = time.perf_counter()
        batch = self._next_batch()
        if self.dist.world_size > 1 and getattr(self.data, "world_size", 1) == 1:
            # The data yields the global batch (the same on every rank): this rank trains on its slice of rows,
            # so N processes with batch b do exactly what one process with batch N*b does.
            if not self._ranks_checked:
                self._check_ranks_agree(batch)
            bounds = [round(i * len(batch) / self.dist.world_size) for i in range(self.dist.world_size + 1)]
            batch = take_rows(batch, bounds[self.dist.rank], bounds[self.dist.rank + 1])
        batches = split_rows(batch, cfg.grad_accum)
        # The loss is a mean over every masked token (and every sequence) of the *global* batch, so that
        # accumulation and data parallelism give the same gradient as one big batch. DDP averages gradients
        # over ranks, hence the world_size factor.
        counts = torch.tensor(
            [float(sum(int((b.mlm_labels != IGNORE_INDEX).sum()) for b in batches)),
             float(sum(len(b.input_ids) for b in batches))],
            dtype=torch.float64,
        )
        counts = self._all_reduce(counts)
        n_masked_global, n_seq_global = max(counts[0].item(), 1.0), max(counts[1].item(), 1.0)
        world = self.dist.world_size
        forward = self._ddp if self._ddp is not None else self.model
        # One vector of sums on the device (mlm_stats.MlmStats), read back once per step: no host sync per
        # micro-batch on a GPU.
        totals = torch.zeros(MlmStats.size(), dtype=torch.float64, device=self.device)
        for i, batch in enumerate(batches):
            batch = batch.to(self.device)
            sync = self._ddp is None or i == len(batches) - 1
            ctx = contextlib.nullcontext() if sync else self._ddp.no_sync()
            with ctx:
                with self._autocast():
                    out = forward(**batch.model_inputs(), full_mlm_logits=False)
                logits = out.mlm_logits.float()
                # The model's mean back to a sum over this micro-batch's masked tokens (sparse logits: no grad).
                mlm_sum = out.mlm_loss * int((batch.mlm_labels != IGNORE_INDEX).sum())
                nsp_logits = out.nsp_logits.float() if out.nsp_logits is not None else None  # None: a causal LM
                if cfg.nsp:
                    nsp_sum = F.cross_entropy(nsp_logits, batch.next_sentence_label, reduction="sum")
                    loss = (mlm_sum / n_masked_global + nsp_sum / n_seq_global) * world
                else:
                    nsp_sum = None
                    loss = mlm_sum / n_masked_global * world
                    if nsp_logits is not None:
                        # Touch the NSP head so DDP sees every parameter take part (its gradient is zero).
                        loss = loss + 0.0 * nsp_logits.sum()
                (self._scaler.scale(loss) if self._scaler is not None else loss).backward()
            totals += batch_stats(logits, batch.mlm_labels, batch.decisions, mlm_sum, nsp_logits,
                                  batch.next_sentence_label if cfg.nsp else None, nsp_sum, batch.attention_mask)
        stats = MlmStats.from_tensor(self._all_reduce(totals))
        params = [p for p in self.model.parameters() if p.grad is not None]
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
        if self._scaler is not None:
            self._scaler.unscale_(self.optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        mlm_loss = stats.mlm_loss
        nsp_loss = stats.nsp_loss if cfg.nsp else None
        loss_value = mlm_loss + (nsp_loss or 0.0)
        if (self._scaler is not None and math.isfinite(loss_value) and not math.isfinite(grad_norm)
                and self._skipped_updates < MAX_SKIPPED_UPDATES):
            # An fp16 overflow, not a divergence: the scaler skips this update and halves its scale; the next
            # batch is tried, and the step count does not move.
            self._scaler.step(self.optimizer)
            self._scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            self._skipped_updates += 1
            return self._train_step()
        if not self._update_is_finite(loss_value, grad_norm):
            return None
        self._skipped_updates = 0
        lr = cfg.learning_rate * lr_multiplier(cfg, self.step, self._elapsed_now())
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self._scaler is not None:
            self._scaler.step(self.optimizer)
            self._scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        tokens = int(stats.tokens)
        self.tokens_seen += tokens
        dt = time.perf_counter() - t0
        by_decision = stats.acc_by_decision()
        return StepEvent(
            step=self.step,
            tokens_seen=self.tokens_seen,
            lr=lr,
            loss=loss_value,
            mlm_loss=mlm_loss,
            nsp_loss=nsp_loss,
            mlm_acc=stats.mlm_acc,
            mlm_acc_masked=by_decision["masked"],
            mlm_acc_random=by_decision["random"],
            mlm_acc_kept=by_decision["kept"],
            nsp_acc=stats.nsp_acc if cfg.nsp else None,
            tokens_per_s=tokens / dt if dt > 0 else 0.0,
            grad_norm=grad_norm,
            elapsed_s=self._elapsed_now(),
        )

    def in_short_phase(self) -> bool:
        """Whether the next update belongs to the short-sequence phase (TrainConfig.short_seq_length)."""
        cfg = self.config
        # Once a long batch has been taken the phase is over for good: a resume that extends the budget (and so
        # lowers the fraction done) must not go back to short sequences.
        long_started = getattr(self.data, "epoch", 0) > 0 or getattr(self.data, "position", 0) > 0
        return (0 < cfg.short_seq_length < cfg.max_seq_length and self._fraction_done() < cfg.short_seq_fraction
                and not long_started)

    def _short_data(self):
        if self.short_data is None:
            cfg = self.config
            if not hasattr(self.data, "resized"):
                raise BertCoreError("short_seq_length needs data that can be cut to another length (PretrainingData)")
            # The data yields the global batch; keep its ratio to the per-process batch (the world size).
            per_process = cfg.short_seq_batch_size or max(
                1, cfg.batch_size * cfg.max_seq_length // cfg.short_seq_length)
            self.short_data = self.data.resized(cfg.short_seq_length,
                                                per_process * max(self.data.batch_size // cfg.batch_size, 1))
        return self.short_data

    def _next_batch(self):
        if self.in_short_phase():
            if self._short_iter is None:
                self._short_iter = iter(self._short_data())
            return next(self._short_iter)
        return next(self._data_iter)

    def _check_ranks_agree(self, batch) -> None:
        """Every rank must read the same global batch; a different corpus, tokenizer or seed would silently
        train each rank on other data, so compare a fingerprint of the first batch across ranks."""
        import torch.distributed as dist

        weights = torch.arange(1, batch.input_ids.numel() + 1, dtype=torch.float64)
        fingerprint = float((batch.input_ids.flatten().to(torch.float64) * weights).sum())
        both = torch.tensor([fingerprint, -fingerprint], dtype=torch.float64)
        both = both.to(self.device) if self.device.type == "cuda" else both
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
        if float(both[0]) != fingerprint or float(-both[1]) != fingerprint:
            raise BertCoreError(
                "the processes of this distributed run read different training batches: give every rank the same "
                "corpus files, tokenizer and seed"
            )
        self._ranks_checked = True

    def _all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.dist.world_size == 1:
            return t
        import torch.distributed as dist

        # nccl reduces only GPU tensors; gloo only CPU ones.
        moved = t.to(self.device) if self.device.type == "cuda" else t.cpu()
        dist.all_reduce(moved)
        return moved

    # ------------------------------------------------------------------ evaluation, probes, checkpoints

    def heldout_batches(self) -> list:
        """The fixed held-out batches (same masks at every evaluation), built once on first use."""
        if self._eval_batches is None:
            if self.eval_data is None:
                self._eval_batches = []
            elif isinstance(self.eval_data, (list, tuple)):
                self._eval_batches = list(self.eval_data)
            else:
                self._eval_batches = self.eval_data.eval_batches(self.config.eval_batches, seed=self.config.seed)
        return self._eval_batches

    def _prepare_baselines(self):
        from bert_core.training.evaluation import unigram_baseline_for

        batches = self.heldout_batches()
        if batches and not self.baselines:
            self.baselines = unigram_baseline_for(self.data, batches)

    def _evaluate(self):
        from bert_core.training.evaluation import evaluate

        batches = self.heldout_batches()
        if not batches:
            return
        result = evaluate(_unwrap(self.model), batches, device=self.device, precision=self.config.precision)
        self.model.train()
        event = EvalEvent(
            step=self.step,
            mlm_loss=result.mlm_loss,
            mlm_acc=result.mlm_acc,
            perplexity=result.perplexity,
            nsp_acc=result.nsp_acc if self.config.nsp else None,
        )
        if self.step == 0 and "untrained" not in self.baselines:
            self.baselines["untrained"] = dataclasses.asdict(event)
        self._publish(event)

    def _snapshot_probes(self):
        if self.probes is None or not self.is_main:
            return
        snap = self.probes.snapshot(_unwrap(self.model), self.tokenizer, self.step)
        self.model.train()
        for callback in self.callbacks:
            callback(snap)

    def _checkpoint(self):
        if self.is_main:
            self.save(self.checkpoint_dir)
        self._last_checkpoint = time.monotonic()
        self.last_checkpoint_step = self.step

    def state_dict(self) -> dict:
        """Everything but tensors needed to continue this run exactly (the content of trainer_state.json)."""
        from bert_core.model.checkpoint import rng_state_to_json

        with self._step_lock:
            rng = self._rng_state
            if self._state == "running":
                rng = {"torch": torch.get_rng_state()}
                if torch.cuda.is_available():
                    rng["cuda"] = torch.cuda.get_rng_state_all()
            with self._lock:
                return {
                    "format": 1,
                    "step": self.step,
                    "tokens_seen": self.tokens_seen,
                    "elapsed_s": self._elapsed_now(),
                    "state": self._state,
                    "train_config": self.config.to_dict(),
                    "history": [dataclasses.asdict(e) for e in self._history],
                    "evals": [dataclasses.asdict(e) for e in self._evals],
                    "baselines": self.baselines,
                    "data_state": self.data.state_dict() if hasattr(self.data, "state_dict") else None,
                    "short_data_state": self.short_data.state_dict() if self.short_data is not None else None,
                    "rng": rng_state_to_json(rng),
                    "world_size": self.dist.world_size,
                    "metadata": self.metadata,
                }

    def save(self, folder) -> None:
        """Write a checkpoint folder atomically (model, tokenizer, trainer state, optimizer); rank 0 only."""
        from bert_core.model.checkpoint import save_checkpoint

        if not self.is_main:
            return
        with self._step_lock:
            save_checkpoint(
                folder,
                _unwrap(self.model),
                tokenizer=self.tokenizer,
                trainer_state=self.state_dict(),
                optimizer=self.optimizer,
            )

    def load_state_dict(self, state: dict) -> None:
        """Restore counters, history, RNG and data position from a trainer_state.json dict."""
        from bert_core.model.checkpoint import rng_state_from_json

        with self._step_lock, self._lock:
            self.step = int(state["step"])
            self.tokens_seen = int(state.get("tokens_seen", 0))
            self.elapsed_s = float(state.get("elapsed_s", 0.0))
            self._history = [StepEvent(**e) for e in state.get("history", [])]
            self._evals = [EvalEvent(**e) for e in state.get("evals", [])]
            self.baselines = dict(state.get("baselines", {}))
            self.metadata = {**state.get("metadata", {}), **self.metadata}
            if state.get("rng"):
                rng = rng_state_from_json(state["rng"])
                if state.get("world_size", 1) == self.dist.world_size or self.dist.world_size == 1:
                    self._rng_state = rng
            if state.get("data_state") is not None and hasattr(self.data, "load_state_dict"):
                self.data.load_state_dict(state["data_state"])
                self._data_iter = None
            if state.get("short_data_state") is not None:
                self._short_data().load_state_dict(state["short_data_state"])
                self._short_iter = None
            prior = state.get("state", "stopped")
            self._state = "stopped" if prior in ("running", "finished", "failed") else prior
            if self._state == "idle" and self.step > 0:
                self._state = "stopped"

    @classmethod
    def resume(
        cls,
        folder,
        data,
        eval_data=None,
        callbacks: Iterable[Callable[[Any], None]] = (),
        probes=None,
        checkpoint_dir=None,
        config_overrides: dict | None = None,
        metadata: dict | None = None,
    ) -> "Trainer":
        """Rebuild a trainer from a checkpoint folder: weights, optimizer, RNG, history and data position.

        `data` must be built from the same corpus and tokenizer as the original run (its position is restored).
        `config_overrides` may extend the run (e.g. a larger max_steps or time budget).
        """
        from bert_core.model.checkpoint import TRAINER_STATE, load_checkpoint, load_optimizer_state

        ckpt = load_checkpoint(folder)
        if ckpt.trainer_state is None:
            raise BertCoreError(f"{folder} has no trainer_state.json, so training cannot resume from it")
        state_file = Path(folder) / TRAINER_STATE
        config = check_trainer_state(ckpt.trainer_state, state_file)
        if config_overrides:
            config = config.replace(**config_overrides)
        trainer = cls(
            ckpt.model,
            ckpt.tokenizer,
            data,
            config,
            eval_data=eval_data,
            callbacks=list(callbacks),
            probes=probes,
            checkpoint_dir=checkpoint_dir,
            metadata=metadata,
        )
        load_optimizer_state(trainer.optimizer, folder)
        try:
            trainer.load_state_dict(ckpt.trainer_state)
        except BertCoreError:
            raise
        except (KeyError, TypeError, ValueError, RuntimeError, OverflowError) as e:
            raise _damaged(state_file, f"{type(e).__name__}: {e}") from e
        same = checkpoint_dir is not None and Path(checkpoint_dir).resolve() == Path(folder).resolve()
        trainer.last_checkpoint_step = trainer.step if same else None
        return trainer


def extended_config(trainer, more_steps: int):
    """The config that lets a finished run (a Trainer or its mirror) go on: `more_steps` more steps, or a minute
    more of a spent time budget; None when the run is not at its end."""
    cfg = trainer.config
    if cfg.max_steps is not None and trainer.step >= cfg.max_steps:
        return cfg.replace(max_steps=trainer.step + int(more_steps))
    if cfg.max_steps is None and cfg.time_budget_s is not None and trainer.progress.fraction >= 1:
        return cfg.replace(time_budget_s=cfg.time_budget_s + 60.0)
    return None
