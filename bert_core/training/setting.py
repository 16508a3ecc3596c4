"""One run setting's description (`Setting`), written once where the setting lives: on its TrainConfig field
(`dataclasses.field(metadata={"setting": ...})`, made by `described`) or, for the run's own settings (corpus, size,
dropout...), in bert_core.training.run_settings. The `train` options, the Train page's widget map, the command that
repeats a page run, the settings a --resume may change and the comparison knobs are all made from these
descriptions (docs/settings.md). Torch-free; the config imports it, so it imports nothing of the project but its errors.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

from bert_core.errors import BertCoreError


@dataclass(frozen=True)
class Limits:
    """The values a number may take, as `train` and the config check them: from `low` to `high` (None: no top),
    open at either end when asked ((0, 1) for a fraction, [0, 1) for a rate)."""

    low: float
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, value) -> bool:
        return (value > self.low if self.low_open else value >= self.low) and (
            self.high is None or (value < self.high if self.high_open else value <= self.high))

    def words(self, whole: bool) -> str:
        """The limits as a message says them: 'at least 1', 'between 16 and 8192', 'in (0, 1)'."""
        if whole:
            low = int(self.low)
            return f"at least {low}" if self.high is None else f"between {low} and {int(self.high)}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open or self.high is None else "]"
        return f"in {left}{self.low:g}, {'inf' if self.high is None else f'{self.high:g}'}{right}"


def is_whole_number(value) -> bool:
    """Whether `value` is an int and not a bool (JSON true would pass isinstance(value, int))."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value) -> bool:
    """Whether `value` is a finite int or float and not a bool (a hand-edited file may hold 1e999 or "32")."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


FRACTION = Limits(0, 1, low_open=True, high_open=True)   # (0, 1): the mask rate, the held-out fraction
RATE = Limits(0, 1, high_open=True)                      # [0, 1): dropout, warmup
POSITIVE = Limits(0, low_open=True)
NON_NEGATIVE = Limits(0)

# What a --resume does with a setting given again.
CHANGES = "changes"          # the new value goes on from the saved step (a rate, the schedule, housekeeping)
LENGTHENS = "lengthens"      # the run's length: --steps is the new total, --time-budget more seconds
STAYS = "stays"              # it shapes the data or the model: it may be repeated, not changed
NEW_RUN_ONLY = "new run"     # it only starts a new run (the tokenizer, the weights, the sizes): leave it out

# Whether the command that repeats a page run (bert_core.training.comparison.train_command) writes a setting.
ALWAYS = "always"            # always: the CLI's default differs from the page's
IF_CHANGED = "if changed"    # when it differs from the CLI's recipe for the size
NEVER = "never"              # never: it does not change what a run learns (how often it saves, its precision)


def as_bool(value) -> bool:
    """A knob's on/off value as given: a bool, or its words ("on", "false", "1"...)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise BertCoreError(f"expected on or off, got {value!r}")


def as_float(low: float, high: float | None, what: str) -> Callable[[Any], float]:
    """A knob's number as given, strictly between `low` and `high` (None: no top)."""
    def parse(value) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise BertCoreError(f"{what} must be a number, got {value!r}") from None
        if not (low < number and (high is None or number < high)):
            raise BertCoreError(f"{what} must be above {low:g}{f' and below {high:g}' if high else ''}, got {value!r}")
        return number

    return parse


def on_off(yes: str, no: str) -> Callable[[Any], str]:
    """How a knob shows a switch: `yes` when on, `no` when off."""
    return lambda value: yes if value else no


def flipped(current) -> tuple:
    """A switch's one suggested change: the other way."""
    return (not current,)


@dataclass(frozen=True)
class KnobFace:
    """How a comparison knob shows, reads and suggests values of its setting ('mask rate 0.15 → 0.4')."""

    show: Callable[[Any], str]
    parse: Callable[[Any], Any]
    suggestions: Callable[[Any], tuple] = lambda current: ()
    at: int = 0              # its place among the knobs (bert_core.training.comparison.KNOBS)
    mlm_only: bool = False   # BERT's masked LM's only: with causal attention nothing is masked and there is no NSP


@dataclass(frozen=True)
class Widget:
    """How a page shows a setting (bert_core.app.app_widgets.setting_widget draws it): its `key` (also its URL
    parameter), `label` and `help` as the page words them ("{word}" in either is filled in by the page), and for a
    number its `step`, `format` and the page's `range` where it is narrower than the setting's limits (a shared CPU
    server: the Train page's layers 1 to 12 of the 1 to 512 `train` takes) or closed where they are open. A choice
    shows `options` (default: the setting's choices) worded by `words`. `group`: where the page draws it; a page
    draws a group's widgets in the order of their descriptions, which is also its address bar's order."""

    key: str
    label: str
    help: str | None = None
    range: tuple | None = None
    step: float | None = None
    format: str | None = None
    slider: bool = False
    options: tuple | None = None
    words: tuple = ()        # (option, its words) pairs, for a choice shown in words
    group: str = ""


@dataclass(frozen=True)
class Setting:
    """Everything said about one run setting, in one place.

    The `train` option: `flag` (default: the name in dashes), `help` (None: no option; "{name}" in it is the
    default recipe's value of that setting, filled in by bert_core.cli.train_options), the value's `kind` (int,
    float, str, "path", bool: a --x/--no-x switch, "switch": --x alone, "list": repeated) and its `limits` or
    `choices`, the `metavar` when not the flag's name, `cli_at` (where `train --help` lists it) and `one_of` (a
    group of options that exclude each other). A page: its `widget`, drawn in the order of the descriptions; `app`
    is the value the app always uses for a setting without a widget.
    `label`: the setting in a legend or a run list. `on_resume`: what --resume does with it. `command`: whether
    the command that repeats a page run writes it (`command_at`: where). `knob`: a comparison knob's face.
    `live`: it may change while the run trains (`train --change STEP:FLAG=VALUE`, the Train page's *Change while it
    trains*; TrainConfig.changes). `repeat`: the option may be given several times (its values make a list).
    """

    name: str = ""           # filled in from the field's name by `settings_of`
    help: str | None = None
    flag: str | None = None
    kind: Any = None
    limits: Limits | None = None
    choices: tuple | None = None
    metavar: str | None = None
    cli_at: int = 10**6
    one_of: str | None = None
    widget: Widget | None = None
    app: Any = None
    label: str | None = None
    on_resume: str | None = None
    command: str = IF_CHANGED
    command_at: int = 10**6
    knob: KnobFace | None = None
    live: bool = False
    repeat: bool = False

    @property
    def option(self) -> str | None:
        """The `train` flag that sets it ('learning_rate' -> '--lr'), or None when `train` has no option for it."""
        if self.help is None:
            return None
        return self.flag or "--" + self.name.replace("_", "-")

    def page_range(self) -> tuple | None:
        """The values a page's number widget offers, from low to high: its widget's range, else the setting's limits
        when they are closed and have a top."""
        if self.widget is not None and self.widget.range is not None:
            return self.widget.range
        lim = self.limits
        if lim is None or lim.high is None or lim.low_open or lim.high_open:
            return None
        return (self.kind(lim.low), self.kind(lim.high))

    def refusal(self, value) -> str | None:
        """Why a config refuses `value` for this setting (its kind, limits or choices), or None: a config read back
        from a hand-edited trainer_state.json may hold "32", 1e999 or true where a number belongs."""
        if self.choices is not None:
            ok, want = value in self.choices, f"one of {', '.join(map(str, self.choices))}"
        elif self.kind is bool:
            ok, want = isinstance(value, bool), "true or false"
        elif self.kind is str:
            ok, want = isinstance(value, str), "a name"
        elif self.kind in (int, float):
            whole = self.kind is int
            lim = self.limits or Limits(-math.inf)
            ok = (is_whole_number(value) if whole else is_finite_number(value)) and lim.holds(value)
            want = f"a {'whole' if whole else 'finite'} number {lim.words(whole)}"
        else:
            return None
        return None if ok else f"{self.name} must be {want}, got {value!r}"

    def legend(self) -> str:
        """The setting as a legend names it: its label, else its name in words."""
        return self.label or self.name.replace("_", " ")


def described(default, **description):
    """A dataclass field with a default and its setting's description (`Setting`'s arguments but the name)."""
    return dataclasses.field(default=default, metadata={"setting": Setting(**description)})


def settings_of(config_class) -> tuple[Setting, ...]:
    """The described fields of a dataclass, in field order, each named by its field."""
    return tuple(dataclasses.replace(f.metadata["setting"], name=f.name) for f in dataclasses.fields(config_class)
                 if "setting" in f.metadata)
