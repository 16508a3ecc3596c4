"""The knobs of a pretraining run (TrainConfig), checked when made: stored in trainer_state.json, so a run can be
resumed and reported."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from bert_core.data.objectives import OBJECTIVES, objective_has_nsp
from bert_core.errors import BertCoreError
from bert_core.model.config import MAX_SEED

SCHEDULES = ("linear", "cosine", "time", "constant", "wsd")
# "wsd" (warmup-stable-decay; Hu et al. 2024, MiniCPM): the peak rate until this share of the run is left, then a
# linear decay to zero. A run can be lengthened (--resume --steps N) while it is still stable, so it suits a long
# run whose useful length is found as it goes.
WSD_DECAY_FRACTION = 0.2
PRECISIONS = ("bf16", "fp16", "fp32")


def is_whole_number(value) -> bool:
    """Whether `value` is an int and not a bool (JSON true would pass isinstance(value, int))."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value) -> bool:
    """Whether `value` is a finite int or float and not a bool (a hand-edited file may hold 1e999 or "32")."""
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
    # "time": progress is elapsed/budget, so the rate reaches zero exactly when the budget runs out;
    # "wsd": warmup, the peak rate, then a linear decay over the last WSD_DECAY_FRACTION of the run.
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
    # Start small, then grow: a deviation from BERT's paper (which trained one size from the first step), for the
    # large sizes on a CPU. For the first `grow_fraction` of the run (of its steps or time, as above) the model is
    # `grow_from_layers` x `grow_from_hidden` (heads of the full model's size, fewer of them), at the width rule's
    # rate for that width (bert_core.training.recipes.seed_learning_rate); then it is grown to the run's size
    # (bert_core.model.growth: Net2Net copies for width, which compute the same function, and its layers repeated
    # for depth) and trains on at `learning_rate` after a fresh warmup. A small model makes many more updates a
    # second, and a model leaves the unigram plateau after enough updates ("Every size learns" in
    # docs/benchmarks.md). 0 = off: the run's size from the first step.
    grow_fraction: float = 0.0
    grow_from_hidden: int = 0
    grow_from_layers: int = 0
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
    # Mixed precision (training.precision): "bf16" autocasts to bfloat16 on a CUDA GPU and on a CPU with bfloat16
    # instructions (elsewhere a CPU emulates it, slower than fp32, so the run is fp32), "fp16" to float16 with a
    # loss scaler on a GPU without bfloat16 (a CPU has no fast float16: fp32), "fp32" none. The CLI's log says which.
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
                          ("grow_from_hidden", 0), ("grow_from_layers", 0),
                          ("eval_batches", 1), ("probe_every", 0), ("history_limit", 0), ("seed", 0)):
            value = getattr(self, name)
            need(is_whole_number(value) and value >= low,
                 f"{name} must be a whole number of at least {low}, got {value!r}")
        need(self.seed <= MAX_SEED, f"seed must be between 0 and {MAX_SEED} (2**32 - 1), got {self.seed}")
        need(self.max_steps is None or (is_whole_number(self.max_steps) and self.max_steps >= 1),
             f"max_steps must be at least 1, got {self.max_steps!r}")
        for name in ("learning_rate", "weight_decay", "max_grad_norm", "checkpoint_every_s", "adam_eps",
                     "warmup_ratio", "mask_rate", "adam_beta1", "adam_beta2", "short_seq_fraction",
                     "grow_fraction"):
            value = getattr(self, name)
            need(is_finite_number(value), f"{name} must be a finite number, got {value!r}")
        need(self.time_budget_s is None or is_finite_number(self.time_budget_s),
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
        need(0 <= self.grow_fraction < 1, f"grow_fraction must be in [0, 1), got {self.grow_fraction}")
        need(self.grow_fraction == 0 or (self.grow_from_hidden >= 8 and self.grow_from_layers >= 1),
             "a run that grows (grow_fraction > 0) needs the size it starts from: grow_from_hidden (at least 8) "
             "and grow_from_layers")
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
        need(objective_has_nsp(self.objective) or not self.nsp,
             f"the {self.objective} objective has no next-sentence prediction: set nsp off")

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
