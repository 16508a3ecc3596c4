"""A Train-page run's settings as one validated spec (`TrainSpec`), made in one place from the page's widget values:
the settings each widget starts from (the lesson: bert_core.training.lesson_settings), the spec they make, and the
page values that show a spec. The widgets themselves are drawn from the settings' descriptions
(bert_core.training.run_settings.page_settings). Torch-free; the server hosts these runs (bert_core.serve.train_spec
writes an upload to its scratch folder and builds the run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from bert_core.data.objectives import objective_settings
from bert_core.errors import BertCoreError
from bert_core.model.config import BertConfig
from bert_core.training.lesson_settings import lesson_settings
from bert_core.training.recipes import GROW_FROM
from bert_core.training.run_settings import SETTINGS, SIZE_FIELDS, TRAIN_FIELDS, app_values, page_settings
from bert_core.training.train_config import TrainConfig

TRAIN_PAGE = "Train"   # the page whose runs these are (bert_core.serve.run_protocols.RunSpec.page)


@dataclass
class TrainSpec:
    """Everything the Train page asks for; `build_trainer` turns it into a Trainer."""

    corpus: str = "toy"                 # a load_corpus spec or a path to a text file
    corpus_label: str = "toy"
    vocab_size: int = 2000
    preset: str = "nano"
    model_overrides: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)   # TrainConfig fields
    heldout_fraction: float = 0.1
    probes: bool = True
    # The probe snapshots' [MASK] sentences and the time-lapse's attention sentence; empty/None: drawn from the
    # held-out part of the corpus (bert_core.inspect.probes.heldout_probes), as the Train page shows them before Start.
    probe_sentences: tuple[str, ...] = ()
    attention_probe: str | None = None
    # A checkpoint folder to start from (its weights, size and tokenizer; a new optimizer and schedule), as
    # `train --init-from` does; the model settings of the spec are then ignored.
    init_from: str | None = None

    # Its place among the server's runs (bert_core.serve.run_protocols.RunSpec): a Train-page run, recorded so
    # that a restarted server brings it back; its length is the queue's guess, and it can yield at any step.
    page: ClassVar[str] = TRAIN_PAGE
    recorded: ClassVar[bool] = True
    expected_s: ClassVar[float | None] = None
    longest_part_s: ClassVar[float] = 0.0

    def train_config(self) -> TrainConfig:
        """The run's TrainConfig, checked as it is made: the one place a spec's settings become a config."""
        return TrainConfig(**self.train)


# The Train page's settings, by name, in the order of their descriptions (bert_core.training.run_settings): each
# widget's key is also its URL parameter, so it keeps its short name.
PAGE_SETTINGS = {s.name: s for s in page_settings()}
WIDGETS = {s.widget.key: name for name, s in PAGE_SETTINGS.items()}
_KEY_OF = {name: key for key, name in WIDGETS.items()}
# The TrainConfig fields the page's widgets set; the app fixes the others it sets (their `app`: it trains on its CPU,
# 20 held-out batches an evaluation).
PAGE_TRAIN_FIELDS = tuple(name for name in WIDGETS.values() if name in TRAIN_FIELDS)
APP_TRAIN = app_values()
# Each setting's type, as the lesson gives it (a number typed in a URL is read back as one).
_TYPES = {name: type(value) for name, value in lesson_settings().items()}
CHOSEN_FIRST = ("corpus", "preset")   # every other setting starts from the lesson for these two


def widget_defaults(values: Mapping):
    """(setting, the value its widget starts from, whether it follows a changed default) for each setting the Train
    page shows: first the corpus and size, then the rest from the lesson for the corpus and size that `values` (the
    page's session state) holds by then. A generator, so that the page seeds the first two before the rest are
    read from them."""
    start = lesson_settings()
    for name in CHOSEN_FIRST:
        yield PAGE_SETTINGS[name], start[name], False
    settings = lesson_settings(values["train_corpus"], values["train_preset"], values.get("train_hidden"),
                               values.get("train_layers"))
    for name, setting in PAGE_SETTINGS.items():
        if name not in CHOSEN_FIRST:
            yield setting, settings[name], True


def page_values(corpus: str = "toy", preset: str = "nano", objective: str = "mlm") -> dict[str, Any]:
    """The Train page's values, by widget key, when only the corpus, size and objective are chosen."""
    values: dict[str, Any] = {"train_corpus": corpus, "train_preset": preset, "train_objective": objective}
    for setting, value, _ in widget_defaults(values):
        values.setdefault(setting.widget.key, value)
    return values


def page_spec(values: Mapping, corpus: tuple[str, str], init_from: str | None = None) -> TrainSpec:
    """The Train page's settings (`values`: its session state, by widget key) as the validated spec of a run on
    `corpus` ((spec, label)), starting from the weights in `init_from` when given."""
    def value(name: str):
        return _TYPES[name](values[_KEY_OF[name]])

    preset, overrides = values["train_preset"], {}
    if preset == "custom":
        preset = "nano"
        overrides = {name: value(name) for name in SIZE_FIELDS}
    overrides.update(hidden_dropout_prob=value("dropout"), attention_probs_dropout_prob=value("dropout"),
                     initializer_range=value("initializer_range"))
    train = {**{name: value(name) for name in PAGE_TRAIN_FIELDS}, **APP_TRAIN,
             **objective_settings(values["train_objective"])}
    if init_from is not None:    # trained weights go on at their own size
        train["grow_fraction"] = 0.0
    if train["grow_fraction"]:   # the page grows from the recipes' one starting size
        train.update(grow_from_hidden=GROW_FROM[0], grow_from_layers=GROW_FROM[1])
    sentences = tuple(line.strip() for line in values.get("train_probes", "").splitlines() if line.strip())
    attention = values.get("train_att_probe", "").strip() or None
    check_probe_sentences(sentences)   # a line without [MASK] is a message now, not a failed run
    spec = TrainSpec(corpus=corpus[0], corpus_label=corpus[1], vocab_size=value("vocab_size"), preset=preset,
                     model_overrides=overrides, train=train, probes=value("probe_every") > 0,
                     probe_sentences=sentences, attention_probe=attention, init_from=init_from)
    validate_spec(spec)
    return spec


def default_spec(objective: str = "mlm") -> TrainSpec:
    """The run the Train page starts when nothing is changed (toy, nano, its lesson settings), with `objective`
    ("mlm": BERT, "clm": GPT): what the in-app lesson trains and steps through."""
    return page_spec(page_values(objective=objective), ("toy", "toy"))


PAGE_CORPORA = ("toy", "tinyshakespeare", "wikitext-2")   # the named corpora the Train page's box offers


def page_values_of(spec: TrainSpec) -> dict[str, Any]:
    """The Train page's widget values that show the settings a one-knob change can make (comparison.KNOBS): after
    *Start with this change* the page shows the new run's settings, not the run it changed."""
    train = spec.train
    values = {"train_objective": "clm" if train.get("objective") == "clm" else "mlm"}
    for name in _KEY_OF:   # the knobs that are one config setting shown by a widget
        if name in train and SETTINGS[name].knob is not None:
            values[_KEY_OF[name]] = _TYPES[name](train[name])
    if not spec.model_overrides.keys() & set(SIZE_FIELDS):   # a preset's sizes, not the custom ones
        values["train_preset"] = spec.preset
    if spec.corpus in PAGE_CORPORA:
        values["train_corpus"] = spec.corpus
    return values


def validate_spec(spec: TrainSpec) -> None:
    """Check the model and training settings before any work starts, so a bad config is a message, not a crash."""
    config = spec.train_config()
    model = BertConfig.preset(spec.preset, vocab_size=max(spec.vocab_size, 128), **spec.model_overrides)
    if config.grow_fraction and spec.init_from is None:
        try:
            model.growth_start(config.grow_from_hidden, config.grow_from_layers)
        except BertCoreError as e:
            raise BertCoreError(f"{e}: set 'Start small, then grow' to 0 for this size") from None
    low, high = PAGE_SETTINGS["vocab_size"].page_range()
    if not low <= spec.vocab_size <= high:
        raise BertCoreError(f"vocabulary size {spec.vocab_size} is out of range: use {low:,} to {high:,}")
    if not 0 < spec.heldout_fraction < 1:
        raise BertCoreError("the held-out fraction must be between 0 and 1")


def check_probe_sentences(sentences) -> None:
    """Refuse a probe sentence without a [MASK] to fill (inspect.probes.ProbeStore takes only such)."""
    for sentence in sentences:
        if "[mask]" not in sentence.lower():
            raise BertCoreError(f"probe sentence {sentence!r} has no [MASK]: write [MASK] where a word should go")


def spec_from_dict(record: dict) -> TrainSpec:
    """A TrainSpec read back from its JSON record; unknown keys are ignored."""
    known = {f.name for f in fields(TrainSpec)}
    values = {k: v for k, v in dict(record).items() if k in known}
    values["probe_sentences"] = tuple(values.get("probe_sentences") or ())
    return TrainSpec(**values)
