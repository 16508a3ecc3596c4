"""The knobs of a pretraining run (TrainConfig), checked when made: stored in trainer_state.json, so a run can be
resumed and reported. Each field a user sets is described on the field itself (bert_core.training.setting)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from bert_core.data.objectives import MASK_RATE, OBJECTIVES, objective_has_nsp
from bert_core.errors import BertCoreError
from bert_core.model.config import MAX_BATCH, MAX_SEED, MAX_SEQ_LEN
from bert_core.training.recipes import DEFAULT_PRESET, GROW_FRACTIONS, GROW_FROM, recipe_for
from bert_core.training.setting import (
    ALWAYS,
    CHANGES,
    FRACTION,
    LENGTHENS,
    NEVER,
    NON_NEGATIVE,
    POSITIVE,
    RATE,
    STAYS,
    KnobFace,
    Limits,
    Widget,
    as_bool,
    as_float,
    described,
    is_finite_number,
    is_whole_number,
    flipped,
    on_off,
    settings_of,
)

SCHEDULES = ("linear", "cosine", "time", "constant", "wsd")
# "wsd" (warmup-stable-decay; Hu et al. 2024, MiniCPM): the peak rate until this share of the run is left, then a
# linear decay to zero. A run can be lengthened (--resume --steps N) while it is still stable, so it suits a long
# run whose useful length is found as it goes.
WSD_DECAY_FRACTION = 0.2
PRECISIONS = ("bf16", "fp16", "fp32")
# torch.compile of the training step (bert_core.training.compiled_step), by torch.compile's names for its modes:
# "default" fuses kernels, "reduce-overhead" adds CUDA graphs on a GPU.
COMPILE_MODES = ("off", "default", "reduce-overhead")


def parse_change(text: str) -> tuple:
    """`--change STEP:lr=VALUE` as the (step, setting, value) TrainConfig.changes holds; refused in words."""
    step, colon, rest = str(text).partition(":")
    key, equals, value = rest.partition("=")
    if not colon or not equals:
        raise BertCoreError(f"expected STEP:SETTING=VALUE, e.g. 120:lr=3e-4, got {text!r}")
    if not step.strip().isdigit():
        raise BertCoreError(f"the step must be a whole number >= 0, got {step!r}")
    name = next((s.name for s in LIVE.values() if s.option == "--" + key.strip()), None)
    if name is None:
        raise BertCoreError(f"{key.strip()!r} cannot change while a run trains; use "
                            f"{', '.join(change_key(n) for n in LIVE)}")
    try:
        number = LIVE[name].kind(value.strip())
    except ValueError:
        raise BertCoreError(f"{key.strip()} must be a number, got {value!r}") from None
    if (why := LIVE[name].refusal(number)) is not None:
        raise BertCoreError(why)
    return int(step), name, number


@dataclass(frozen=True)
class TrainConfig:
    """Every knob of a pretraining run; stored in trainer_state.json so a run can be resumed and reported."""

    # Each described field is a run setting: its `train` option, its Train-page widget, what --resume does with it,
    # whether the command that repeats a page run writes it, and whether it is a comparison knob
    # (bert_core.training.setting; docs/settings.md). "{name}" in a help is the default recipe's value. The page
    # draws its widgets in field order; their ranges are the page's (a shared CPU server), within the limits.
    max_steps: int | None = described(
        1000, flag="--steps", help="number of optimizer steps (on --resume: the new total)", kind=int,
        limits=Limits(1, 2**40), cli_at=22, one_of="length", label="steps", on_resume=LENGTHENS, command=ALWAYS,
        command_at=4, widget=Widget("train_steps", "Steps", range=(1, 1_000_000), group="training"))
    time_budget_s: float | None = described(
        None, flag="--time-budget", help="train for this many seconds (on --resume: this many more)", kind=float,
        limits=POSITIVE, metavar="SECONDS", cli_at=23, one_of="length", label="time budget (s)",
        on_resume=LENGTHENS, command_at=5)
    batch_size: int = described(
        32, help="sequences per step per process (default: the size's recipe; {batch_size} for {preset})",
        kind=int, limits=Limits(1, MAX_BATCH), cli_at=11, label="batch", on_resume=STAYS, command=ALWAYS,
        command_at=1, widget=Widget("train_batch", "Batch size", range=(1, 512), group="training"))
    learning_rate: float = described(
        1e-3, flag="--lr", help="peak learning rate (default: the size's recipe, which shrinks with width and depth; "
                                "{learning_rate:g} for {preset})",
        kind=float, limits=POSITIVE, cli_at=16, label="learning rate", on_resume=CHANGES, command=ALWAYS,
        command_at=2, live=True, widget=Widget("train_lr", "Peak learning rate", range=(1e-6, 1.0), format="%.5f",
                                    group="training"),
        knob=KnobFace(lambda v: f"{v:g}", as_float(0, None, "the learning rate"),
                      lambda current: (float(f"{current / 3:.1g}"), float(f"{current * 3:.1g}")), at=6))
    warmup_ratio: float = described(
        0.1, flag="--warmup", help="warmup as a fraction of the run (default {warmup_ratio:g})", kind=float,
        limits=RATE, cli_at=17, label="warmup", on_resume=CHANGES, command_at=3)
    # "time": progress is elapsed/budget, so the rate reaches zero exactly when the budget runs out.
    schedule: str = described(
        "linear", help="learning-rate schedule (default linear; 'time' when only --time-budget is given; on --resume "
                       "the run's own; wsd: warmup, the peak rate, then a linear decay over the last fifth, so a long "
                       "run can be lengthened)",
        kind=str, choices=SCHEDULES, cli_at=19, on_resume=CHANGES, command_at=6)
    weight_decay: float = described(0.01, help="default {weight_decay:g}", kind=float, limits=NON_NEGATIVE, cli_at=20,
                                    on_resume=CHANGES, command_at=7)
    adam_eps: float = 1e-6
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    max_grad_norm: float = described(1.0, help="gradient clipping (0 = off; default {max_grad_norm:g})", kind=float,
                                     limits=NON_NEGATIVE, cli_at=21, on_resume=CHANGES, command_at=8)
    grad_accum: int = described(1, help="micro-batches per optimizer step (default 1)", kind=int,
                                limits=Limits(1, MAX_BATCH), cli_at=15, on_resume=CHANGES, command_at=9)
    max_seq_length: int = described(
        128, flag="--seq-len", help="maximum sequence length (default: the size's recipe; {max_seq_length} for "
                                    "{preset})",
        kind=int, limits=Limits(16, MAX_SEQ_LEN), cli_at=10, label="sequence length", on_resume=STAYS,
        command=ALWAYS, command_at=10,
        widget=Widget("train_seq", "Max sequence length", range=(16, 512), step=16, group="training"))
    # Short sequences first (BERT's paper did it for speed, at 128 then 512 tokens): a small model's attention starts
    # near uniform, and in a short sequence a neighbour is a large share of it ("The unigram plateau" in
    # docs/benchmarks.md). The phase is the first `short_seq_fraction` of the run's steps or time, whichever is further.
    short_seq_length: int = described(
        0, flag="--short-seq-len",
        help="train the first --short-seq-fraction of the run on sequences of N tokens, as many tokens a step as the "
             "rest (a deviation from BERT's paper: it leaves the unigram plateau sooner; 0 = off; default: the "
             "size's recipe, {short_seq_length} for {preset}; off when not shorter than --seq-len)",
        kind=int, limits=Limits(0, MAX_SEQ_LEN), metavar="N", cli_at=12, on_resume=STAYS, command_at=20,
        widget=Widget("train_short_seq", "Short sequences first: length (0 = off)", range=(0, 512), step=16,
                      group="training",
                      help="Train the first part of the run on sequences this short, as many tokens a step (a "
                           "deviation from BERT's paper). In a short sequence a neighbouring word is a large share "
                           "of what attention averages over, so a small model stops predicting only the most "
                           "frequent token sooner. The held-out evaluation stays at the full length."))
    short_seq_fraction: float = described(
        0.0, help="the share of the run (steps or time budget) at --short-seq-len (default: the size's recipe; "
                  "{short_seq_fraction:g} for {preset})",
        kind=float, limits=RATE, metavar="F", cli_at=13, on_resume=STAYS, command_at=21,
        widget=Widget("train_short_frac", "Share of the steps at the short length", range=(0.0, 0.95), step=0.05,
                      slider=True, group="training"))
    short_seq_batch_size: int = described(
        0, help="sequences per step in the short phase (0 = as many tokens a step as the rest; default: the size's "
                "recipe, {short_seq_batch_size} for {preset})",
        kind=int, limits=Limits(0, MAX_BATCH), metavar="N", cli_at=14, on_resume=STAYS, command_at=22,
        widget=Widget("train_short_batch", "Short phase: sequences a step (0 = as many tokens a step as the rest)",
                      range=(0, 512), group="training",
                      help="Larger sizes take small batches of short sequences first: a model leaves the plateau "
                           "after a number of updates, and on a CPU a small batch is a cheap update."))
    # Start small, then grow: the seed trains at the width rule's rate for its width (recipes.seed_learning_rate);
    # grown (bert_core.model.growth), the model trains on at `learning_rate` after a fresh warmup ("Every size
    # learns" in docs/benchmarks.md).
    grow_fraction: float = described(
        0.0, help="start small, then grow: train the first F of the run (steps or time) as a model of "
                  "--grow-from-layers x --grow-from-hidden, then grow it to the run's size (Net2Net width, repeated "
                  "layers) and train on (a deviation from BERT's paper; 0 = the run's size from the first step; "
                  "default: the size's recipe: on a CPU "
                  + ", ".join(f"{name} {share:g}" for name, share in GROW_FRACTIONS.items())
                  + f" from {GROW_FROM[1]} x {GROW_FROM[0]}, else 0)",
        kind=float, limits=RATE, metavar="F", cli_at=35, on_resume=STAYS, command_at=23,
        widget=Widget("train_grow", f"Start small, then grow: share of the steps as {GROW_FROM[1]} layers x "
                                    f"{GROW_FROM[0]} (0 = off)", range=(0.0, 0.99), step=0.01, slider=True,
                      group="training",
                      help="Train a narrow, shallow model first and then grow it to the size chosen: its units copied "
                           "(Net2Net, the same function) and its layers repeated (a deviation from BERT's paper). On "
                           f"a CPU a {GROW_FROM[1]} x {GROW_FROM[0]} step is about eight times cheaper than a mini's, "
                           "so the small model makes the many updates it takes to leave the 'most frequent token' "
                           "plateau, and the grown model starts where it got to. The loss chart marks the step it "
                           "grew at."))
    grow_from_hidden: int = described(
        0, help="hidden size of the model a growing run starts as (a divisor of the run's; heads keep their size); "
                "only for a run that grows (--grow-fraction, or a recipe that grows)",
        kind=int, limits=Limits(0, 2**15), metavar="N", cli_at=36, on_resume=STAYS, command_at=24)
    grow_from_layers: int = described(
        0, help="layers of the model a growing run starts as (a divisor of the run's); only for a run that grows",
        kind=int, limits=Limits(0, 512), metavar="N", cli_at=37, on_resume=STAYS, command_at=25)
    # The page draws these below its choice of objective, which turns the masked LM's own off for a GPT.
    mask_rate: float = described(
        MASK_RATE, help="default: the size's recipe; {mask_rate:g} for {preset}", kind=float, limits=FRACTION,
        cli_at=24, label="mask rate", on_resume=STAYS, command=ALWAYS, command_at=11,
        widget=Widget("train_mask", "Mask rate", range=(0.01, 0.5), slider=True, group="objective"),
        knob=KnobFace(lambda v: f"{v:g}", as_float(0, 1, "the mask rate"),
                      lambda current: tuple(v for v in (MASK_RATE, 0.4) if v != current), at=2,
                      mlm_only=True))
    nsp: bool = described(
        True, help="next-sentence prediction beside MLM (--no-nsp: MLM only; default {nsp})", kind=bool, cli_at=25,
        label="NSP", on_resume=STAYS, command=ALWAYS, command_at=12,
        widget=Widget("train_nsp", "Next-sentence prediction", group="objective"),
        knob=KnobFace(on_off("on", "off"), as_bool, flipped, at=1, mlm_only=True))
    objective: str = described(
        "mlm", help="mlm: BERT's masked LM (+ NSP); clm: GPT's next token on every position, with causal attention, "
                    "no NSP and nothing masked; the checkpoint loads in transformers as BertLMHeadModel (default mlm)",
        kind=str, choices=OBJECTIVES, cli_at=26, on_resume=STAYS, command_at=26)
    seed: int = described(
        0, help=f"0 to {MAX_SEED} (default {{seed}})", kind=int, limits=Limits(0, MAX_SEED), cli_at=38,
        label="seed", on_resume=STAYS, command=ALWAYS, command_at=13,
        widget=Widget("train_seed", "Seed", range=(0, 2**31 - 1), group="objective"))
    eval_every: int = described(
        0, help="steps between held-out evaluations (0 = start/end)", kind=int, limits=Limits(0), cli_at=39,
        on_resume=CHANGES, command_at=14,
        widget=Widget("train_eval_every", "Held-out evaluation every N steps (0 = start and end)",
                      range=(0, 100_000), group="objective"))
    eval_batches: int = described(
        20, help="held-out batches per evaluation (default {eval_batches})", kind=int, limits=Limits(1, 10**6),
        cli_at=40, app=20, on_resume=STAYS, command_at=15)
    # steps between probe snapshots; 0 = none (the Train page's; `train` takes no probes)
    probe_every: int = described(0, kind=int, limits=Limits(0), command=NEVER, widget=Widget(
        "train_probe_every", "Probe snapshot every N steps (0 = none)", range=(0, 100_000), group="objective"))
    checkpoint_every_s: float = described(
        0.0, flag="--checkpoint-every", help="seconds between checkpoints (default 600; 0 = only at the end)",
        kind=float, limits=NON_NEGATIVE, metavar="SECONDS", cli_at=43, on_resume=CHANGES, command=NEVER)
    device: str = described("auto", help="auto | cpu | cuda (default auto)", kind=str, cli_at=44, app="cpu",
                            on_resume=CHANGES, command=ALWAYS, command_at=17)
    # A CPU without bfloat16 instructions emulates it, slower than fp32, so it trains in fp32 (training.distributed).
    precision: str = described(
        "bf16", help="mixed precision: bf16 (default; on a CUDA GPU, and on a CPU with bfloat16 instructions), fp16 "
                     "with a loss scaler (a CUDA GPU), or fp32; other CPUs always train in fp32",
        kind=str, choices=PRECISIONS, cli_at=18, on_resume=CHANGES, command=NEVER)
    # Off by default: compiling needs a C compiler on a CPU (Triton on a GPU) and takes seconds to a minute at the
    # first steps; it becomes CUDA's default only where measured to pay (docs/benchmarks.md, "The GPU at its limit").
    compile: str = described(
        "off", help="torch.compile the encoder for the training steps: off (default), default (fused kernels) or "
                    "reduce-overhead (also CUDA graphs on a GPU); the first steps then compile",
        kind=str, choices=COMPILE_MODES, metavar="MODE", cli_at=46, on_resume=CHANGES, command=NEVER)
    # Per-step events kept in `history` (and trainer_state.json): past this many, every 2nd, then every 4th...
    # step is kept, evenly over the whole run, plus the newest. 0 keeps every step. The shipped model's 28k-step
    # history was 13 MB of JSON in its checkpoint folder; thinned to 4,096 it is 1.7 MB.
    history_limit: int = described(
        4096, help="per-step records kept in trainer_state.json; beyond it every 2nd, 4th... step, evenly "
                   "(default {history_limit}; 0 keeps all)",
        kind=int, limits=Limits(0), cli_at=41, on_resume=CHANGES, command_at=16)
    # Masking switches for one-knob comparisons (bert_core.training.comparison).
    whole_word_masking: bool = described(
        False, help="mask all the WordPieces of a chosen word together (Google's 2019 variant; default off)",
        kind=bool, cli_at=27, label="whole-word masking", on_resume=STAYS, command_at=18,
        knob=KnobFace(on_off("on", "off"), as_bool, flipped, at=4, mlm_only=True))
    mask_only: bool = described(
        False, help="every chosen token becomes [MASK], no 10%% random / 10%% kept (a deviation from the paper's "
                    "80/10/10, to compare against it; default off)",
        kind=bool, cli_at=28, label="masking", on_resume=STAYS, command_at=19,
        knob=KnobFace(on_off("[MASK] only", "80/10/10"), as_bool, flipped, at=3, mlm_only=True))
    # Settings changed while the run trains (the Train page's *Change while it trains*, `--change`): (step, setting,
    # value) in step order; from update step + 1 on, the setting is the value (`at`). A change of the peak learning
    # rate scales the schedule from there: the warmup and decay go on by their shape, to the new peak.
    changes: tuple = described(
        (), flag="--change", kind=parse_change, repeat=True, metavar="STEP:lr=VALUE", cli_at=17.5, on_resume=CHANGES,
        command_at=27,
        help="from update STEP + 1 on, train at peak learning rate VALUE (the schedule's warmup and decay go on, "
             "scaled to the new peak), as the Train page's 'Change while it trains' does; repeat for several; on "
             "--resume: more changes, from the saved step on")

    def __post_init__(self):
        if isinstance(self.changes, (list, tuple)):   # JSON gives lists; a config keeps them in step order
            object.__setattr__(self, "changes", tuple(sorted(
                (tuple(c) if isinstance(c, (list, tuple)) else c for c in self.changes),
                key=lambda c: c[0] if isinstance(c, tuple) and c and is_finite_number(c[0]) else 0)))
        _check(self)

    def at(self, step: int) -> "TrainConfig":
        """The config in effect for the update after `step` completed ones: each change made by then applied (this
        config itself when there is none)."""
        now = {name: value for when, name, value in self.changes if when <= step}
        return self.replace(**now) if now else self

    def changed(self, step: int, name: str, value) -> "TrainConfig":
        """This config with setting `name` at `value` from update `step` + 1 on (a second change at the same step
        replaces the first). Refused, in words a page shows, when the setting cannot change while a run trains,
        the value is out of its limits, or it is the value in effect already."""
        described = LIVE.get(name)
        if described is None:
            raise BertCoreError(f"{name.replace('_', ' ')} cannot change while a run trains (only "
                                f"{', '.join(s.legend() for s in LIVE.values())} can)")
        kept = tuple(c for c in self.changes if (c[0], c[1]) != (step, name))
        before = getattr(self.replace(changes=kept).at(step), name)
        if value == before:
            raise BertCoreError(f"the {described.legend()} is {before:g} already")
        return self.replace(changes=kept + ((step, name, value),))

    def replace(self, **changes) -> "TrainConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-able form, as stored in trainer_state.json (the changes as lists, as JSON reads them back)."""
        return {**dataclasses.asdict(self), "changes": [list(change) for change in self.changes]}

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        """Inverse of to_dict; unknown keys (from newer versions) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        d = dict(d)
        if "precision" not in d and d.get("bf16") is False:  # written before `precision` replaced `bf16`
            d["precision"] = "fp32"
        return cls(**{k: v for k, v in d.items() if k in names})


def typed_change(name: str, text) -> float:
    """A new value of a live setting as a visitor typed it on the Train page: a number within the page's range for
    it (its widget's); refused in words the page shows."""
    described = LIVE[name]
    typed = str(text or "").strip()
    if not typed:
        raise BertCoreError(f"type the new {described.legend()}, a number such as 0.0003")
    try:
        value = described.kind(typed)
    except ValueError:
        raise BertCoreError(f"the {described.legend()} must be a number such as 0.0003, got {typed[:40]!r}") from None
    low, high = described.page_range()
    if not (is_finite_number(value) and low <= value <= high):
        raise BertCoreError(f"the {described.legend()} must be between {low:g} and {high:g}, got {typed[:40]}")
    return value


def change_key(name: str) -> str:
    """A live setting as a change names it: its flag's word ('learning_rate' -> 'lr')."""
    return LIVE[name].option.removeprefix("--")


def change_text(change: tuple) -> str:
    """A change as `--change` takes it, its value exact: (120, 'learning_rate', 0.0003) -> '120:lr=0.0003'."""
    step, name, value = change
    return f"{step}:{change_key(name)}={value!r}"


def change_labels(config: TrainConfig) -> list[tuple[int, str]]:
    """Each change of a run as its charts mark it: (step, 'lr 0.001 → 0.0003 at step 120')."""
    current = {name: getattr(config, name) for name in LIVE}
    labels = []
    for step, name, value in config.changes:
        labels.append((step, f"{change_key(name)} {current[name]:g} → {value:g} at step {step}"))
        current[name] = value
    return labels


def _check_changes(changes) -> str | None:
    """Why a config's changes cannot be (a hand-edited trainer_state.json), or None."""
    seen = set()
    for change in changes:
        if not (isinstance(change, tuple) and len(change) == 3 and is_whole_number(change[0]) and change[0] >= 0
                and change[1] in LIVE):
            return f"changes must be (step, setting, value) with a step >= 0 and a setting that may change " \
                   f"({', '.join(LIVE)}), got {change!r}"[:300]
        if (why := LIVE[change[1]].refusal(change[2])) is not None:
            return f"a change at step {change[0]}: {why}"
        if change[:2] in seen:
            return f"two changes of {change_key(change[1])} at step {change[0]}: give one"
        seen.add(change[:2])
    return None


def _check(config: TrainConfig) -> None:
    """Refuse a config that cannot train, naming the field and the value: each described setting by its description,
    then what holds between settings."""
    def need(ok: bool, message: str):
        if not ok:
            raise BertCoreError(message)

    need(isinstance(config.changes, tuple) and (why := _check_changes(config.changes)) is None,
         why if isinstance(config.changes, tuple) else f"changes must be a list, got {config.changes!r}")
    for setting in TRAIN_SETTINGS:
        value = getattr(config, setting.name)
        if value is not None or setting.name not in _OPTIONAL:   # the run's length: steps or seconds
            need((why := setting.refusal(value)) is None, why)
    need(config.max_steps is not None or config.time_budget_s is not None,
         "give a number of steps (max_steps) or a time budget (time_budget_s)")
    need(config.schedule != "time" or config.time_budget_s is not None,
         "the 'time' schedule needs a time budget (time_budget_s)")
    need(config.short_seq_length == 0 or 16 <= config.short_seq_length <= config.max_seq_length,
         f"short_seq_length must be 0 (off) or between 16 and max_seq_length ({config.max_seq_length}), got "
         f"{config.short_seq_length}")
    need(config.grow_fraction == 0 or (config.grow_from_hidden >= 8 and config.grow_from_layers >= 1),
         "a run that grows (grow_fraction > 0) needs the size it starts from: grow_from_hidden (at least 8) "
         "and grow_from_layers")
    need(all(is_finite_number(v) for v in (config.adam_eps, config.adam_beta1, config.adam_beta2))
         and config.adam_eps > 0 and 0 <= config.adam_beta1 < 1 and 0 <= config.adam_beta2 < 1,
         "adam_eps must be positive and adam_beta1 / adam_beta2 in [0, 1)")
    need(config.history_limit == 0 or config.history_limit >= 2,
         f"history_limit must be 0 (keep all) or at least 2, got {config.history_limit}")
    # CUDA graphs replay into the same memory: a second micro-batch's gradients would land where the first's are
    # still being added up.
    need(config.compile != "reduce-overhead" or config.grad_accum == 1,
         "compile reduce-overhead (CUDA graphs) takes one micro-batch an update: use grad_accum 1, or compile default")
    need(objective_has_nsp(config.objective) or not config.nsp,
         f"the {config.objective} objective has no next-sentence prediction: set nsp off")


# The run settings TrainConfig describes, in field order (bert_core.training.run_settings adds the run's own).
TRAIN_SETTINGS = settings_of(TrainConfig)
_OPTIONAL = {f.name for f in dataclasses.fields(TrainConfig) if "None" in str(f.type)}
# The settings that may change while a run trains (`live` in their descriptions), by name.
LIVE = {s.name: s for s in TRAIN_SETTINGS if s.live}
# Each field's default, by name: what a spec that leaves a setting out trains with.
TRAIN_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


def default_recipe(preset: str | None = None, device: str = "cpu", hidden_size: int | None = None,
                   num_hidden_layers: int | None = None) -> dict:
    """The pretraining recipe for a size on a kind of machine (bert_core.training.recipes, measured in
    docs/benchmarks.md): model preset, dropout, initializer_range, and a TrainConfig (what `train` uses when nothing
    is given)."""
    r = recipe_for(preset or DEFAULT_PRESET, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                   device=device)
    return {
        "preset": r.preset,
        "dropout": r.dropout,
        "initializer_range": r.initializer_range,
        "recipe": r,
        "train_config": TrainConfig(**r.train_config_fields()),
    }
