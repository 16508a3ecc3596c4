"""Pretraining recipes that scale with the model and the machine, as plain values (no torch import).

`recipe_for(preset, device=...)` gives the settings a real-text run of that size uses when the user sets nothing:
the CLI's `train` defaults (`training.default_recipe`) and the Train page's real-text settings both come from here,
so the page shows what the CLI uses. An explicit flag or page setting still wins.

Why one recipe cannot serve every size (measured in docs/benchmarks.md, "Every size learns"): the recipe tuned
for `nano` (initial std 0.1, peak rate 2e-3, batch 16) left `mini` and `small` on the unigram plateau, predicting
the most frequent word at every [MASK]. Each setting below follows from the width and depth by a named rule, and
every one is a deviation from the BERT paper (std 0.02, peak rate 1e-4 at batch 256, dropout 0.1, 128 then 512
tokens) chosen for minutes of CPU, not days of TPU:

- INITIAL STD shrinks as 1/sqrt(hidden) from nano's 0.1 (muP's fan-in rule; Yang et al. 2021). At that std every
  head's initial query-key products have the same spread at every width, so attention starts as far from uniform
  in `small` as in `nano`. BERT's 0.02 was chosen for hidden 768, and at 64 to 512 it starts attention so close to
  uniform that a small model stays on the plateau ("The unigram plateau" in docs/benchmarks.md).
- PEAK LEARNING RATE shrinks as 1/sqrt(hidden) from nano's 2e-3, and as 1/sqrt(layers) past four layers: a
  post-LayerNorm BERT grows less stable with both (Turc et al. 2019 fine-tuned their small BERTs at 1e-4 to 5e-4
  with batch 256; Geiping and Goldstein 2022, "Cramming", peaked at 1e-3 for a 16-layer model). On the 2-core
  machine of the issue that asked for this, 2e-3 threw `mini` back onto the plateau and 1e-3 left it (1.21-1.33x
  in 5 minutes); on a slower one, 5 minutes gave `mini` too few steps at any setting tried (docs/benchmarks.md).
- SHORT SEQUENCES FIRST: a short-sequence phase (a deviation from the paper's 128-then-512, for the same reason
  the paper gave: it is cheaper). A model leaves the plateau after a number of updates, each with enough
  [MASK]ed predictions in it: nano and tiny spend half the run at 32 tokens; on a GPU the bigger sizes spend 80%
  of it at half the length (twice the steps) with the same rows a step; on a CPU, where they start small (below),
  the short phase is the first half of the small model's stage.
- START SMALL, THEN GROW (CPU only, mini and larger): for the first GROW_FRACTION of the run the model is 2
  layers x 64 (heads of 64, one of them), trained by the same rules at its own width (peak rate 2e-3, std 0.1);
  then it is grown to the run's size (Net2Net width copies, which compute the same function, and its layers
  repeated: bert_core.model.growth) and trains on at the size's own rate. On two CPU cores a `mini` step costs
  about eight of the seed's, and `mini` from random weights made 724 steps in 5 minutes and stayed on the unigram
  line; the seed leaves it within those minutes, and the grown model starts where it got to (progressive
  growth: Gong et al. 2019; bert2BERT, Chen et al. 2022). A deviation from the paper, which trained one size.
- DROPOUT 0: a model trained for minutes is far from overfitting, and dropout only slows it.
- On a CUDA GPU the batches are 4x larger (CUDA_BATCH_SCALE) and the rates stay: a small model's step leaves a GPU
  mostly idle, so more sequences a step cost little. Measured on an H200 (docs/benchmarks.md, "The preset ladder"):
  in 45 s every size made about 1,500 steps and left the unigram line (mini 2.47x, small 2.42x at [MASK]).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from bert_core.data.objectives import MASK_RATE
from bert_core.errors import BertCoreError
from bert_core.model.config import PRESETS

DEFAULT_PRESET = "nano"

# The anchor: nano (2 layers, hidden 64), measured at the 5-minute budget of a lesson ("Time to quality").
ANCHOR_HIDDEN = 64
ANCHOR_STD = 0.1
ANCHOR_LR = 2e-3
# Depth past which the peak rate shrinks as 1/sqrt(layers): mini, with four, trains at the width rule's 1e-3.
STABLE_LAYERS = 4
CUDA_BATCH_SCALE = 4

# Batch and sequence settings per size: (batch, long length, short length, short batch, short fraction). nano and
# tiny keep the measured default (batch 16 x 128 after half the run at 64 x 32). The larger sizes spend 80% of the
# run at 32 x 64 tokens on a GPU (with CUDA_BATCH_SCALE); on a CPU they start small and take nano's shape
# (GROW_SHAPE). On the 2-core machine mini reached 1.33x the unigram line at [MASK] in
# 5 minutes at 32 x 64 (1,420 steps) against 1.21x at 32 x 128 (709 steps); on this project's slower 2-core VM
# the same shape made 682 steps and stayed at 1.02x, and 32 x 32 (1,261 steps, fewer predictions a step) stayed
# on the line too (docs/benchmarks.md, "Every size learns").
SHAPES = {
    "nano": (16, 128, 32, 0, 0.5),
    "tiny": (16, 128, 32, 0, 0.5),
    "mini": (32, 128, 64, 32, 0.8),
    "small": (32, 128, 64, 32, 0.8),
    "medium": (32, 128, 64, 32, 0.8),
    "base": (32, 128, 64, 32, 0.8),
}


# Start small, then grow (above): the share of the run at the seed size, per size, on a CPU. None on a GPU, where
# every size makes enough steps ("The preset ladder"), nor for nano and tiny, which are the seed's size already.
GROW_FROM = (64, 2)   # (hidden, layers): nano's width and depth, with heads of 64 (every larger preset's head size)
# mini's share was measured (docs/benchmarks.md, "Start small, then grow"): at 0.6 the 5-minute run read 1.37x and
# 1.45x the unigram line at [MASK], at 0.7 2.04x; the larger sizes keep fewer of their slower steps.
GROW_FRACTIONS = {"mini": 0.7, "small": 0.8, "medium": 0.85, "base": 0.9}
GROW_SHAPE = "nano"   # whose batch shape (SHAPES) a run that grows takes


def seed_learning_rate(learning_rate: float, hidden_size: int, num_hidden_layers: int, seed_hidden: int,
                       seed_layers: int) -> float:
    """The peak rate of the seed stage of a run that grows: the run's rate moved by the width and depth rules below
    from the full size to the seed's (2e-3 for a 2 x 64 seed of mini's 1e-3)."""
    width = math.sqrt(hidden_size / seed_hidden)
    depth = math.sqrt(max(num_hidden_layers, STABLE_LAYERS) / max(seed_layers, STABLE_LAYERS))
    return _round(learning_rate * width * depth)


@dataclass(frozen=True)
class Recipe:
    """The settings a real-text pretraining run of one size takes on one kind of machine when none is given."""

    preset: str
    device: str
    initializer_range: float
    learning_rate: float
    batch_size: int
    max_seq_length: int
    short_seq_length: int
    short_seq_batch_size: int
    short_seq_fraction: float
    dropout: float = 0.0
    mask_rate: float = MASK_RATE
    warmup_ratio: float = 0.1
    grow_fraction: float = 0.0      # start small, then grow (0: the size from the first step)
    grow_from_hidden: int = 0
    grow_from_layers: int = 0

    def train_config_fields(self) -> dict:
        """The TrainConfig fields this recipe sets: all but its size, machine, and the model's std and dropout."""
        model = {"preset", "device", "initializer_range", "dropout"}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in model}

    def describe(self, hidden_size: int | None = None, num_hidden_layers: int | None = None) -> str:
        """One line: what this recipe sets, as the CLI logs it and the Train page shows it; a custom size's width
        and depth, when given, replace the preset's in what it grows to."""
        short = ""
        if self.short_seq_length and self.short_seq_fraction:
            rows = short_phase_rows(self.batch_size, self.max_seq_length, self.short_seq_length,
                                    self.short_seq_batch_size)
            short = f"; the first {self.short_seq_fraction:.0%} of the run at {rows} x {self.short_seq_length}"
        grow = ""
        if self.grow_fraction:
            hidden = hidden_size or PRESETS[self.preset]["hidden_size"]
            layers = num_hidden_layers or PRESETS[self.preset]["num_hidden_layers"]
            seed_lr = seed_learning_rate(self.learning_rate, hidden, layers, self.grow_from_hidden,
                                         self.grow_from_layers)
            grow = (f"; starts as {self.grow_from_layers} layers x {self.grow_from_hidden} (peak rate {seed_lr:g}) "
                    f"and grows to {layers} x {hidden} after {self.grow_fraction:.0%} of the run")
        return (f"peak learning rate {self.learning_rate:g}, initial weight std {self.initializer_range:g}, "
                f"batch {self.batch_size} x {self.max_seq_length} tokens{short}, dropout {self.dropout:g}, "
                f"mask rate {self.mask_rate:g}{grow}")


def short_phase_rows(batch_size: int, max_seq_length: int, short_seq_length: int, short_seq_batch_size: int) -> int:
    """Sequences a step in the short phase: its own batch, or (0) as many tokens a step as the long phase."""
    return short_seq_batch_size or batch_size * max_seq_length // short_seq_length


def _round(x: float) -> float:
    """Two significant figures: a recipe's numbers are read by people."""
    return float(f"{x:.2g}")


def recipe_for(preset: str = DEFAULT_PRESET, *, hidden_size: int | None = None, num_hidden_layers: int | None = None,
               device: str = "cpu") -> Recipe:
    """The recipe for a preset, or for a custom width and depth (which then decide the rates; the batch shape is
    the preset's). `device` is "cpu" or "cuda"."""
    if preset not in PRESETS:
        raise BertCoreError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    if device not in ("cpu", "cuda"):
        raise BertCoreError(f"device must be cpu or cuda for a recipe, got {device!r}")
    hidden = hidden_size or PRESETS[preset]["hidden_size"]
    layers = num_hidden_layers or PRESETS[preset]["num_hidden_layers"]
    width = math.sqrt(ANCHOR_HIDDEN / hidden)
    depth = math.sqrt(STABLE_LAYERS / max(layers, STABLE_LAYERS))
    # Growth follows the preset's own shape only: a custom width or depth trains at its size from the start.
    grow = GROW_FRACTIONS.get(preset, 0.0) if device == "cpu" and hidden_size is None and num_hidden_layers is None \
        else 0.0
    # A run that starts small takes the seed's batch shape over the seed's stage (its short phase the first half of
    # that stage, as nano's is of its run): the grown model then trains at the full length. With mini's own shape
    # (80% of the run at 64 tokens) the positions past 64 stayed all but untrained: 1.00x at 5 minutes.
    batch, length, short, short_batch, fraction = SHAPES[GROW_SHAPE if grow else preset]
    if grow:
        fraction = _round(fraction * grow)
    if device == "cuda":
        batch *= CUDA_BATCH_SCALE
        short_batch *= CUDA_BATCH_SCALE
    seed = GROW_FROM if grow else (0, 0)
    return Recipe(preset=preset, device=device, initializer_range=_round(ANCHOR_STD * width),
                  learning_rate=_round(ANCHOR_LR * width * depth), batch_size=batch, max_seq_length=length,
                  short_seq_length=short, short_seq_batch_size=short_batch, short_seq_fraction=fraction,
                  grow_fraction=grow, grow_from_hidden=seed[0], grow_from_layers=seed[1])


def preset_for_size(hidden_size: int, num_hidden_layers: int) -> str:
    """The preset nearest a custom size (by width, then depth), whose batch shape its recipe takes."""
    return min(PRESETS, key=lambda name: (abs(math.log(PRESETS[name]["hidden_size"] / hidden_size)),
                                          abs(PRESETS[name]["num_hidden_layers"] - num_hidden_layers)))


# -- the Train page --------------------------------------------------------------------------------------------
# The toy lesson, measured for nano through the Train page (docs/benchmarks.md, "The default Train run"): past 50%
# held-out accuracy in under 30 s of one core; tiny with the same settings ends at 27-32% (docs/lessons.md, "What does
# each trick buy?"). Toy's 32-token sequences make a neighbour a large share of what attention averages, so the
# narrow 0.02 std suits these two; the larger sizes keep the lesson's shape and take their own rates from the
# width and depth rules above (TOY_OWN_RATES).
TOY_LESSON = {"steps": 2000, "batch_size": 16, "max_seq_length": 32, "learning_rate": 3e-3, "initializer_range": 0.02,
              "short_seq_length": 0, "short_seq_fraction": 0.5, "short_seq_batch_size": 0, "mask_rate": MASK_RATE,
              "dropout": 0.0, "grow_fraction": 0.0}
TOY_OWN_RATES = ("nano", "tiny")
# Real text on the page: steps for about five minutes of one core (the app trains each run on one). nano's 3,000
# were measured so ("Time to quality"); the others keep nano's ratio of page steps to the steps the preset ladder
# made in 5 minutes of two threads (3,000 / 6,845): tiny 3,641, mini 724, small 223 (docs/benchmarks.md, "Every
# size learns"). medium and base, not on the ladder, at a half and a sixth of small's (their layers' arithmetic).
LESSON_STEPS = {"nano": 3000, "tiny": 1600, "mini": 320, "small": 100, "medium": 50, "base": 15}
# The sizes that start small (GROW_FRACTIONS) count their page steps so: (steps, share of them at the start size).
# A page run is counted in steps, not seconds, and a 2 x 64 step is several times cheaper than a grown one, so the
# share of the steps is larger than the share of the time that the CLI's recipe gives the start size (mini: 70% of
# the time). On one core a 2 x 64 step took 0.12 s, a mini step 1.2 s and a small one 3.6 s: mini's 2,400 steps took
# 6.4 minutes and reached 1.36x the unigram line at [MASK]; small with 24 grown steps (0.99) fell to 0.95x, with 48
# (0.98, about 7.5 minutes) it reached 1.28x (docs/benchmarks.md, "Start small, then grow").
PAGE_GROWTH = {"mini": (2400, 0.97), "small": (2400, 0.98), "medium": (2400, 0.99), "base": (2400, 0.99)}
LADDER_FILE = Path(__file__).with_name("preset_ladder.json")


def page_recipe(preset: str, toy: bool, hidden_size: int | None = None, num_hidden_layers: int | None = None) -> dict:
    """The Train page's starting settings for a size: the toy lesson, or the size's real-text recipe on a CPU
    (the app trains on its CPU), with the steps of a lesson."""
    r = recipe_for(preset, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers)
    if toy:
        if preset in TOY_OWN_RATES and hidden_size is None and num_hidden_layers is None:
            return dict(TOY_LESSON)
        rates = {"learning_rate": _round(TOY_LESSON["learning_rate"] * r.learning_rate / ANCHOR_LR),
                 "initializer_range": r.initializer_range}
        return {**TOY_LESSON, **rates}
    page = {**r.train_config_fields(), "initializer_range": r.initializer_range, "dropout": r.dropout,
            "steps": LESSON_STEPS[preset]}
    if r.grow_fraction:
        steps, share = PAGE_GROWTH[preset]
        # The short phase: the first half of the start size's steps, on the page slider's 0.05 grid.
        page.update(steps=steps, grow_fraction=share, short_seq_fraction=math.floor(share / 2 * 20) / 20)
    return page


# Seconds a Train-page step took on one core of the project's 2-core server, on real text at the page's 16 x 128
# tokens a step (a 2 x 64 step is nano's): docs/benchmarks.md, "Start small, then grow" ("On the Train page...").
# The page says them before Start, so that nobody picks mini expecting nano's pace.
PAGE_STEP_S = {"nano": 0.12, "mini": 1.2, "small": 3.6}


def speed_note(preset: str) -> str:
    """One line for the Train page, before Start: how many of nano's steps a second a size makes on a CPU, from the
    measured step times (PAGE_STEP_S); '' for a size without a measurement."""
    if preset not in PAGE_STEP_S:
        return ""
    fast = PAGE_STEP_S["nano"]
    rows = ", ".join(f"{name} {step:g} s" for name, step in PAGE_STEP_S.items())
    ratio = PAGE_STEP_S[preset] / fast
    pace = ("the fastest size" if preset == "nano" else
            f"{preset} makes about {fraction_words(ratio)} of nano's steps a second")
    return (f"On this server's kind of CPU a step takes {rows} (one core a run, 16 x 128 tokens a step, measured: "
            f"docs/benchmarks.md): {pace}.")


def fraction_words(ratio: float) -> str:
    """1/ratio in words a reader takes in at once: 'a tenth', 'a thirtieth', else '1/N'."""
    words = {2: "half", 3: "a third", 4: "a quarter", 10: "a tenth", 30: "a thirtieth"}
    n = round(ratio)
    return words.get(n, f"1/{n}")


@functools.lru_cache(maxsize=1)
def ladder() -> dict:
    """The measured preset ladder (benchmarks/preset_ladder.py writes it): {"machine", "date", "commands",
    "rows": [{"preset", "device", "budget_s", "masked_accuracy", "unigram_accuracy", "steps"}, ...]}; {} if absent."""
    try:
        data = json.loads(LADDER_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and isinstance(data.get("rows"), list) else {}


def ladder_rows(device: str = "cpu") -> list[dict]:
    """One row per size: held-out [MASK] accuracy at each measured budget, as a multiple of the unigram line."""
    by_preset: dict[str, dict] = {}
    for row in ladder().get("rows", []):
        if row.get("device") != device or row.get("preset") not in PRESETS:
            continue
        entry = by_preset.setdefault(row["preset"], {"size": row["preset"]})
        minutes = row["budget_s"] / 60
        label = f"{minutes:g} min" if minutes >= 1 else f"{row['budget_s']:g} s"
        entry[label] = f"{row['masked_accuracy']:.1%} ({row['masked_accuracy'] / row['unigram_accuracy']:.2f}x)"
    return [by_preset[name] for name in PRESETS if name in by_preset]


def ladder_note() -> str:
    """What the ladder table measured, where and how."""
    data = ladder()
    if not data:
        return "No measurements of the sizes are recorded in this copy (benchmarks/preset_ladder.py makes them)."
    cpu = [row for row in data.get("rows", []) if row.get("device") == "cpu"]
    precision = ("; bf16 autocast, as a CPU with bfloat16 instructions trains, a CPU without them makes fewer steps"
                 if cpu and all(row.get("precision") == "bf16" for row in cpu) else "")
    return (f"Held-out accuracy at the [MASK]ed positions, and as a multiple of always guessing the most frequent "
            f"token (1.00x: nothing learned from context), after training each size with its recipe for a fixed "
            f"time on {data.get('corpus', 'real text')} ({data.get('machine', 'a CPU')}, {data.get('date', '')}"
            f"{precision}). "
            "The app trains each run on one core, about half those steps a minute, so a size gets there in about "
            "twice the time. In a fixed budget a bigger model makes fewer steps: on a CPU the smallest sizes "
            "learn most in minutes, so mini and small start as a 2 x 64 model and are grown to their size near the "
            "end (without that they stayed at 1.0x, the unigram plateau, for 15 minutes).")
