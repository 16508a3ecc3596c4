"""A Train-page run's settings as one validated spec (`TrainSpec`), made in one place from the page's widgets, and the
way it goes down to the run: a `RunPlan` for bert_core.training.run_builder, in the server or in a child process.

The page keeps the widgets; here are the settings they start from (the lesson: bert_core.training.lesson_settings),
the spec they make, and the files a run needs (an uploaded or pasted corpus, the weights a run starts from) written
to the run's scratch folder. Pages reach these through bert_core.serve.jobs.

Torch-free at import: the server imports it through jobs before any model is shown (tests/test_layers.py), so the
run builder, which loads torch, is imported in the functions that build.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from bert_core.data.corpora import corpus_from_bytes, corpus_from_text
from bert_core.data.objectives import objective_settings
from bert_core.errors import BertCoreError
from bert_core.inspect.probes import (
    ENGLISH_PROBES,
    ProbeStore,
    heldout_probes,
    probes_for_corpus,
    probes_from_documents,
)
from bert_core.model.config import BertConfig
from bert_core.serve import app_storage
from bert_core.serve.model_sources import load_folder
from bert_core.serve.run_protocols import TRAIN_PAGE
from bert_core.training.comparison import one_change, train_command
from bert_core.training.lesson_settings import lesson_settings
from bert_core.training.recipes import GROW_FROM
from bert_core.training.run_settings import SETTINGS, SIZE_FIELDS, TRAIN_FIELDS, app_values, page_settings
from bert_core.training.train_config import TrainConfig


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


def page_corpus(values: Mapping, folder_key: str) -> tuple[str, str]:
    """(load_corpus spec, label) of the corpus chosen in `values`; an upload or paste is checked, then written to
    the run's scratch folder `folder_key`."""
    choice = values["train_corpus"]
    if choice not in ("upload", "paste"):
        return choice, choice
    if choice == "upload":
        file = values.get("train_upload")
        if file is None:
            raise BertCoreError("choose a text file to upload first")
        data, label = file.getvalue(), file.name
        corpus_from_bytes(data, name=label)
        text = data.decode("utf-8-sig")
    else:
        text, label = values.get("train_paste", ""), "pasted text"
        corpus_from_text(text, name=label)
    # The child process reads the corpus from a file in the run's scratch folder (removed when the run is dropped;
    # a queued run may start after its tab has closed).
    path = app_storage.write_session_file(folder_key, "corpus.txt", text.encode("utf-8"))
    return str(path), label


def preview_corpus(values: Mapping) -> tuple[str, str]:
    """(spec, label) that the command preview names the chosen corpus by: an upload or paste is not on the server
    before Start, so it is named as the file to save it in."""
    choice = values["train_corpus"]
    if choice == "upload":
        file = values.get("train_upload")
        return "", file.name if file is not None else "your text"
    return ("", "pasted text") if choice == "paste" else (choice, choice)


def corpus_text(values: Mapping) -> str | None:
    """The uploaded or pasted text chosen in `values`, as the probe editor reads it ("" when there is none yet);
    None for a named corpus."""
    choice = values["train_corpus"]
    if choice == "paste":
        return values.get("train_paste") or ""
    if choice == "upload":
        file = values.get("train_upload")
        return file.getvalue().decode("utf-8-sig", errors="replace") if file is not None else ""
    return None


def default_probes(corpus: str, seed: int, text: str | None):
    """Probes from the held-out part of the chosen corpus as a run with this seed splits it (None: not readable
    here before training, e.g. a corpus that is not downloaded yet)."""
    try:
        if text is not None:
            return heldout_probes(corpus_from_text(text, name=corpus), seed)
        return probes_for_corpus(corpus, seed)
    except BertCoreError:
        return None


def page_spec(values: Mapping, corpus: tuple[str, str], init_from: str | None = None) -> TrainSpec:
    """The Train page's settings (`values`: its session state, by widget key) as the validated spec of a run on
    `corpus` ((spec, label), from `page_corpus`), starting from the weights in `init_from` when given."""
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
    if sentences:
        ProbeStore(sentences, attention)  # a line without [MASK] is a message now, not a failed run
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
    """The Train page's widget values that show a run's objective, NSP, mask rate, learning rate, size and corpus:
    the settings a one-knob change can make (bert_core.training.comparison.KNOBS). After *Start with this change*
    the page shows the new run's settings and the command line that repeats it, not the run it changed."""
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


def save_start_weights(job, folder_key: str) -> str:
    """Save a run's model into a new run's scratch folder `folder_key` as the weights it starts from; returns that
    folder, the new spec's `init_from`."""
    folder = app_storage.session_scratch(folder_key) / "start-weights"
    job.save(folder)
    app_storage.enforce_scratch_cap(keep=folder.parent)  # the new run's folder counts in the cap
    return str(folder)


def spec_with_change(spec: TrainSpec, knob: str, value, folder_key: str) -> TrainSpec:
    """A copy of a run's spec with one knob changed (bert_core.training.comparison.one_change), validated, its files
    carried into the new run's scratch folder `folder_key`."""
    new = one_change(app_storage.carry_run_files(spec, folder_key), knob, value)
    validate_spec(new)
    return new


# ---------------------------------------------------------------------------------------------- down to the run


def _run_builder():
    """bert_core.training.run_builder, which every step down to the run goes through."""
    # Imported here, once a run is built: it loads torch, and the server imports this module without it (TORCH_FREE).
    from bert_core.training import run_builder

    return run_builder


def run_plan(spec: TrainSpec, start=None, tokenizer=None, commands: tuple[str, ...] = ()):
    """The spec as a plan for the run builder (bert_core.training.run_builder.RunPlan): its one corpus, its config,
    the model's preset and overrides, and where it starts."""
    return _run_builder().RunPlan(
        corpora=(spec.corpus,), corpus_labels=(spec.corpus_label,), config=spec.train_config(), preset=spec.preset,
        model_overrides=dict(spec.model_overrides), vocab_size=spec.vocab_size,
        heldout_fraction=spec.heldout_fraction, tokenizer=tokenizer, start=start, commands=commands)


def _warm_start(folder: str, max_seq_length: int):
    """The model of an earlier run (or any checkpoint folder) to start from, as loaded: the page keeps its dropout;
    a run longer than the one it trained at starts its untrained positions as copies (`positions_to_copy`)."""
    model, tokenizer, state = load_folder(folder)
    if model.config.max_position_embeddings < max_seq_length:
        raise BertCoreError(f"the starting model has {model.config.max_position_embeddings} positions, "
                            f"fewer than the sequence length {max_seq_length}")
    run_builder = _run_builder()
    return run_builder.WarmStart(model, tokenizer, state or {}, label="the model of an earlier run in this session",
                                 copy_positions_from=run_builder.positions_to_copy(state, max_seq_length))


def _probes(spec: TrainSpec, seed: int, heldout: dict):
    """The run's probe store (None when the spec turns probes off) and what trainer_state.json records of it: the
    spec's own sentences, else sentences drawn from the held-out text."""
    try:
        drawn = probes_from_documents([d for c in heldout.values() for d in c.documents], seed=seed,
                                      source=f"held-out part of {spec.corpus_label}")
    except BertCoreError:  # held-out text without a sentence to mask (a tiny paste): English sentences
        drawn = ENGLISH_PROBES
    sentences = tuple(spec.probe_sentences) or drawn.sentences
    attention = spec.attention_probe or drawn.attention_sentence
    record = {"sentences": list(sentences), "attention_sentence": attention, "pair": list(drawn.pair),
              "source": drawn.source if not spec.probe_sentences else "the Train page's probe sentences"}
    return (ProbeStore(sentences, attention) if spec.probes else None), record


def spec_from_dict(record: dict) -> TrainSpec:
    """A TrainSpec read back from its JSON record (bert_core.serve.run_records); unknown keys are ignored."""
    known = {f.name for f in fields(TrainSpec)}
    values = {k: v for k, v in dict(record).items() if k in known}
    values["probe_sentences"] = tuple(values.get("probe_sentences") or ())
    return TrainSpec(**values)


def build_trainer(spec: TrainSpec, callbacks=(), checkpoint_dir: str | None = None, checkpoint_every_s: float = 0.0):
    """Load the corpus, train a tokenizer, build data, model and Trainer for a page's run, through the run builder
    that `python -m bert_core train` uses too (bert_core.training.run_builder).

    `checkpoint_dir`: the server's own safety net (bert_core.serve.run_records): a checkpoint there before the first
    update, every `checkpoint_every_s` seconds and at every stop, so that a restarted server finds the run. A
    checkpoint that cannot be written there (a full disk) is logged and the run goes on."""
    try:  # the command that repeats this run (bert_core.training.comparison), as `train` records its own
        commands = (train_command(spec),)
    except BertCoreError as exc:
        commands = (f"streamlit app (no equivalent command: {exc})",)
    plan = run_plan(spec, commands=commands)
    if spec.init_from:
        plan = replace(plan, start=_warm_start(spec.init_from, plan.config.max_seq_length))
    probes_for = functools.partial(_probes, spec, plan.config.seed)
    built = _run_builder().build_run(plan, callbacks=callbacks, probes_for=probes_for, checkpoint_dir=checkpoint_dir)
    trainer = built.trainer
    if checkpoint_dir is not None:
        trainer.config = trainer.config.replace(checkpoint_every_s=checkpoint_every_s)
        trainer.checkpoint_failures_fatal = False
    return trainer


def training_data_for(spec: TrainSpec, tokenizer):
    """The training part of a spec's corpus as `PretrainingData` with a given tokenizer (what the run learns from)."""
    return _run_builder().load_data(run_plan(spec, tokenizer=tokenizer)).train
