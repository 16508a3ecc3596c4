"""A Train-page run as the server hosts it: its files in its scratch folder (an uploaded or pasted corpus, its start
weights), its probes, and its spec (bert_core.training.train_spec) down to a `RunPlan` for training.run_builder.
Pages reach these through bert_core.serve.jobs. Torch-free at import: the run builder is imported where it builds.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace

from bert_core.data.corpora import corpus_from_bytes, corpus_from_text
from bert_core.errors import BertCoreError
from bert_core.inspect.probes import (
    ENGLISH_PROBES,
    ProbeStore,
    heldout_probes,
    probes_for_corpus,
    probes_from_documents,
)
from bert_core.inspect.word_class_timelapse import has_word_classes
from bert_core.serve import app_storage
from bert_core.serve.model_sources import load_folder
from bert_core.training.comparison import one_change, train_command, with_changes
from bert_core.training.train_spec import TrainSpec, validate_spec


def page_corpus(values: Mapping, folder_key: str) -> tuple[str, str]:
    """(load_corpus spec, label) of the chosen corpus; an upload or paste is checked, then written to the run's
    scratch folder `folder_key`."""
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


def corpus_text(values: Mapping) -> str | None:
    """The chosen upload's or paste's text for the probe editor ("" when none yet); None for a named corpus."""
    choice, file = values["train_corpus"], values.get("train_upload")
    if choice == "upload":
        return file.getvalue().decode("utf-8-sig", errors="replace") if file is not None else ""
    return (values.get("train_paste") or "") if choice == "paste" else None


def preview_corpus(values: Mapping) -> tuple[str, str]:
    """(spec, label) the command preview names the corpus by (an upload or paste by the file to save it in)."""
    choice, file = values["train_corpus"], values.get("train_upload")
    if choice == "upload":
        return "", file.name if file is not None else "your text"
    return ("", "pasted text") if choice == "paste" else (choice, choice)


def default_probes(corpus: str, seed: int, text: str | None):
    """Probes from the corpus's held-out part as this seed splits it (None: not readable here before training)."""
    try:
        if text is not None:
            return heldout_probes(corpus_from_text(text, name=corpus), seed)
        return probes_for_corpus(corpus, seed)
    except BertCoreError:
        return None


def save_start_weights(job, folder_key: str) -> str:
    """Save a run's model as a new run's start weights in its scratch folder; returns the new spec's `init_from`."""
    folder = app_storage.session_scratch(folder_key) / "start-weights"
    job.save(folder)
    app_storage.enforce_scratch_cap(keep=folder.parent)  # the new run's folder counts in the cap
    return str(folder)


def spec_with_change(spec: TrainSpec, knob: str, value, folder_key: str) -> TrainSpec:
    """A run's spec with one knob changed (comparison.one_change), validated, its files carried to `folder_key`."""
    new = one_change(app_storage.carry_run_files(spec, folder_key), knob, value)
    validate_spec(new)
    return new


# ---------------------------------------------------------------------------------------------- down to the run


def _run_builder():
    # Imported here, once a run is built: it loads torch, and the server imports this module without it (TORCH_FREE).
    from bert_core.training import run_builder

    return run_builder


def run_plan(spec: TrainSpec, start=None, tokenizer=None, commands: tuple[str, ...] = ()):
    return _run_builder().RunPlan(
        corpora=(spec.corpus,), corpus_labels=(spec.corpus_label,), config=spec.train_config(), preset=spec.preset,
        model_overrides=dict(spec.model_overrides), vocab_size=spec.vocab_size,
        heldout_fraction=spec.heldout_fraction, tokenizer=tokenizer, start=start, commands=commands)


def _warm_start(folder: str, max_seq_length: int):
    """A checkpoint to start from, its dropout kept; positions beyond its trained length start as copies."""
    model, tokenizer, state = load_folder(folder)
    if model.config.max_position_embeddings < max_seq_length:
        raise BertCoreError(f"the starting model has {model.config.max_position_embeddings} positions, "
                            f"fewer than the sequence length {max_seq_length}")
    run_builder = _run_builder()
    return run_builder.WarmStart(model, tokenizer, state or {}, label="the model of an earlier run in this session",
                                 copy_positions_from=run_builder.positions_to_copy(state, max_seq_length))


def _probes(spec: TrainSpec, seed: int, heldout: dict):
    """The run's probe store (None: probes off) and its record: the spec's sentences, else drawn from held-out text."""
    try:
        drawn = probes_from_documents([d for c in heldout.values() for d in c.documents], seed=seed,
                                      source=f"held-out part of {spec.corpus_label}")
    except BertCoreError:  # held-out text without a sentence to mask (a tiny paste): English sentences
        drawn = ENGLISH_PROBES
    sentences = tuple(spec.probe_sentences) or drawn.sentences
    attention = spec.attention_probe or drawn.attention_sentence
    record = {"sentences": list(sentences), "attention_sentence": attention, "pair": list(drawn.pair),
              "source": drawn.source if not spec.probe_sentences else "the Train page's probe sentences"}
    store = ProbeStore(sentences, attention, word_classes=has_word_classes(spec.corpus)) if spec.probes else None
    return store, record


def build_trainer(spec: TrainSpec, callbacks=(), checkpoint_dir: str | None = None, checkpoint_every_s: float = 0.0):
    """A page run's Trainer, through the run builder `python -m bert_core train` uses. `checkpoint_dir`: the server's
    safety net (run_records), written before the first update, every `checkpoint_every_s` and at every stop; a write
    that fails there (a full disk) is logged and the run goes on."""
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


def change_setting(trainer, spec: TrainSpec | None, name: str, value):
    """A page run's setting changed while it trains (Trainer.change): from its next update on, kept in its config,
    and in the command its record holds (build_trainer's), so that the command repeats the run as it went. Returns
    the run's new config."""
    config = trainer.change(name, value)
    if isinstance(spec, TrainSpec):
        try:
            trainer.metadata["commands"] = [train_command(with_changes(spec, config))]
        except BertCoreError:
            pass   # a run the command line cannot repeat keeps its record's words for why
    return config


def training_data_for(spec: TrainSpec, tokenizer):
    """The training part of a spec's corpus as `PretrainingData` with `tokenizer`."""
    return _run_builder().load_data(run_plan(spec, tokenizer=tokenizer)).train
