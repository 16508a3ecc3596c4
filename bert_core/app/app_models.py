"""The models the sidebar's picker offers, each loaded as an `ActiveModel` or explained by a note: a shipped
checkpoint, this tab's run's model as it trains, a saved run, an uploaded zip, a server folder (not in public mode).
Checkpoints load through Streamlit's resource cache; what the lesson and the inspection pages compute from the active
model (the toy corpus's pairs in its tokenizer, its right guesses by masking decision, its sentence-B-to-A attention,
the examples its pages open on) is kept in Streamlit's caches, keyed by the model and its step."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable

import streamlit as st

from bert_core.data.corpora import generate_toy_corpus
from bert_core.errors import BertCoreError
from bert_core.inspect.plain_examples import PageExamples, from_probes, stored_examples
from bert_core.inspect.plain_examples import examples_note as note_for
from bert_core.inspect.probes import ENGLISH_PROBES, probes_key, recorded_probes
from bert_core.inspect.safe_text import markdown
from bert_core.model.config import BertConfig
from bert_core.serve.job_base import SNAPSHOT_EVERY_S
from bert_core.serve.app_storage import public_mode, saved_run_folder, unpack_uploaded_checkpoint
from bert_core.app.app_tab import current_job, current_run, session_id
from bert_core.app.app_widgets import query_default
from bert_core.serve.model_sources import (
    ActiveModel,
    default_checkpoint,
    describe_checkpoint,
    folder_stamp,
    load_folder,
    shipped_checkpoints,
)
from bert_core.serve.runs import VIEWER
from bert_core.app import page_copy

WORDS = page_copy.WORDS["app_models"]


SOURCE_SHIPPED = "Shipped checkpoint"
SOURCE_SESSION = "Model trained in this session"
SOURCE_SAVED = "A saved run"
SOURCE_UPLOAD = "Upload a checkpoint (zip)"
SOURCE_FOLDER = "Checkpoint folder"   # a server path: local use only, off in public mode
SOURCES = (SOURCE_SHIPPED, SOURCE_SESSION, SOURCE_SAVED, SOURCE_UPLOAD, SOURCE_FOLDER)
SOURCE_CODES = {"shipped": SOURCE_SHIPPED, "session": SOURCE_SESSION, "saved": SOURCE_SAVED,
                "upload": SOURCE_UPLOAD, "folder": SOURCE_FOLDER}   # the URL's ?model=...


def model_sources() -> tuple[str, ...]:
    """The sidebar's choices: every source on the user's own machine; no server path in public mode."""
    return tuple(s for s in SOURCES if s != SOURCE_FOLDER) if public_mode() else SOURCES


def lazy_cache(cache: Callable, **options) -> Callable:
    """A decorator: the function cached by Streamlit's `cache` (st.cache_data or st.cache_resource, with `options`),
    made at its first call, so that importing the module where no Streamlit runtime runs (a test, a benchmark) makes
    no cache and logs no warning."""
    def wrap(fn: Callable) -> Callable:
        made: list[Callable] = []

        @functools.wraps(fn)
        def call(*args):
            if not made:
                made.append(cache(**options)(fn))
            return made[0](*args)

        return call

    return wrap


@lazy_cache(st.cache_resource, max_entries=4, show_spinner="Loading the checkpoint…")
def _load(path: str, stamp: float):
    return load_folder(path)


def load_folder_cached(folder: str | Path) -> tuple[Any, Any, dict | None]:
    """`load_folder` through `st.cache_resource`, keyed by path and modification time (a re-saved folder reloads)."""
    path = Path(str(folder).strip()).expanduser()
    if not path.is_dir():
        return load_folder(path)  # raises the right message
    return _load(str(path.resolve()), folder_stamp(path))


def _shipped_model(path: Path | None = None):
    path = path or default_checkpoint()
    if not path.is_dir():
        where = path.name if public_mode() else path   # a visitor of a public server learns none of its folders
        return None, WORDS["shipped_checkpoint_missing"].format(where=where)
    return _active(SOURCE_SHIPPED, path, path, path.name)


def _active(source: str, folder, label: Path, name=None, grown: Path | None = None):
    """(the checkpoint in `folder` as the picker's model of `source`, known as `label`; None): `name` is what its
    description calls it (else `label`); a folder `grow` wrote has its rate in `grown`'s growth.json."""
    model, tok, state = load_folder_cached(folder)
    rate = None
    if grown is not None and state is None:
        from bert_core.model.growth import grown_pretraining_rate   # torch: not at the top (TORCH_FREE)

        rate = grown_pretraining_rate(grown)
    return ActiveModel(model, tok, source, label, describe_checkpoint(name or label, model, state), state,
                       (state or {}).get("step"), rate), None


def shipped_model(name: str) -> ActiveModel | None:
    """The shipped checkpoint `name` (a folder of checkpoints/, never a path), or None when it is not here."""
    path = shipped_checkpoints().get(name)
    return _shipped_model(path)[0] if path is not None else None


def waiting_model_note(phase: str | None) -> str:
    """What the sidebar's *Model trained in this session* says before the tab's run has a model: a run that is
    queued or preparing (loading its corpus, training its tokenizer) is named as such, with what it will offer,
    never as "no model has been trained" (issue #64)."""
    offer = WORDS["session_model_offer"]
    if phase == "queued":
        return f"**This tab's run is waiting for a slot** (see the Train page). {offer}"
    if phase == "preparing":
        return WORDS["tab_run_preparing"].format(offer=offer)
    if phase in ("cancelled", "failed", "stopped"):
        return (f"This tab's run {'was cancelled' if phase == 'cancelled' else phase} before its first step, so it "
                "has no model: start a new one on the **Train** page.")
    return "No model has been trained in this session yet: start one on the **Train** page."


def _session_model():
    job = current_job()
    if job is None or job.trainer is None:
        run, _ = current_run()
        return None, waiting_model_note(run.phase if run is not None else None)
    model = job.model_snapshot()
    trainer = job.trainer
    if model is None:   # its process ended before its weights reached a folder, and no copy was taken
        return None, job.lost_message()
    # A copy taken earlier is labelled with its own step: a run whose process died later is not at that step.
    step = job.snapshot_step if job.snapshot_step is not None else trainer.step
    # Its whole training config, as a checkpoint's trainer_state holds it: the Fine-tune page's rate follows its
    # peak rate, and anything that writes this state writes a true config, not a part of one.
    state = {"metadata": trainer.metadata, "step": step, "train_config": trainer.config.to_dict()}
    spec = job.spec
    whose = "A shared run (watched through its link)" if current_run()[1] == VIEWER else "Trained in this session"
    if step == trainer.step:
        older = ""
    elif job.busy:   # a copy shared by everyone looking at the run while it trains (job_base.SNAPSHOT_EVERY_S)
        older = WORDS["older_weights_shared"].format(step=step, every_s=SNAPSHOT_EVERY_S, now=trainer.step)
    else:
        older = WORDS["older_weights_lost"].format(step=step, reached=trainer.step)
    desc = (f"{whose} on {markdown(spec.corpus_label) if spec else 'a corpus'}: step {step:,}"
            f" ({job.phase}{older}); {model.config.num_hidden_layers} layers, hidden size "
            f"{model.config.hidden_size}, {model.config.num_attention_heads} heads.")
    return ActiveModel(model, trainer.tokenizer, SOURCE_SESSION, None, desc, state, step), None


def _folder_model(folder: str):
    if public_mode():  # a stale URL or session value must not reopen a server path on a public server
        return None, "Opening a folder by its server path is off on this public server: upload a zip instead."
    if not folder.strip():
        return None, "Type the path of a checkpoint folder (ours or a Hugging Face BERT folder)."
    path = Path(folder).expanduser()
    return _active(SOURCE_FOLDER, folder, path, grown=path)


def _saved_model(name: str | None):
    if not name:
        return None, "No run has been saved on this server yet: train one and press **Save** on the Train page."
    return _active(SOURCE_SAVED, saved_run_folder(name), Path(name))


def _uploaded_model(upload):
    if upload is None:
        return None, WORDS["upload_help"]

    # Every rerun of every page passes through here: unpack (and hash) a given upload once, not at each rerun.
    known = st.session_state.get("_model_upload_folder")
    if known and known[0] == upload.file_id and Path(known[1]).is_dir():
        path = Path(known[1])
    else:
        path = unpack_uploaded_checkpoint(session_id(), upload.getvalue())
        st.session_state["_model_upload_folder"] = (upload.file_id, str(path))
    try:
        return _active(SOURCE_UPLOAD, path, Path(upload.name), grown=path)
    except BertCoreError as exc:   # name the file inside the zip, not the server's scratch folder it went to
        message = str(exc)
        for where in (str(path.resolve()), str(path)):
            message = message.replace(where + os.sep, "the zip's ").replace(where, "the zip")
        raise BertCoreError(message) from None


def quick_config():
    """The active model's sizes (a BertConfig) read from its config.json, without torch or the weights, for the
    home page's first drawing; None when the sidebar's choice has no folder yet (then the sidebar loads it)."""
    source = st.session_state.get("model_source") or SOURCE_CODES.get(query_default("model", "shipped"))
    try:
        if source == SOURCE_SHIPPED:   # by name among the shipped folders, never a path built from the name
            name = st.session_state.get("model_shipped") or query_default("ckpt", "")
            return BertConfig.load(shipped_checkpoints().get(name, default_checkpoint()))
        if source == SOURCE_SESSION:
            job = current_job()
            return job.trainer.model_config
    except Exception:  # noqa: BLE001 - only a first drawing: the sidebar reports what is wrong
        return None
    return None


def load_model(source: str, choice) -> tuple[ActiveModel | None, str | None]:
    """(the model of `source` for the picker's `choice`, a note to show under the picker), one of them None. A
    `choice` is a shipped checkpoint's folder, a server folder's path, a saved run's name or an upload (None: this
    tab's run's model). Raises BertCoreError for a checkpoint that cannot be read."""
    if source == SOURCE_SESSION:
        return _session_model()
    return {SOURCE_SHIPPED: _shipped_model, SOURCE_SAVED: _saved_model, SOURCE_UPLOAD: _uploaded_model,
            SOURCE_FOLDER: _folder_model}[source](choice)


@lazy_cache(st.cache_resource, max_entries=4, show_spinner="Tokenising the toy corpus…")
def _toy_pairs(key: str, _tokenizer, seq_len: int):
    # Imported here, not at the top: pretraining_data loads torch, and the server imports this module without it
    # (TORCH_FREE); a cached computation runs only once a page asks for it.
    from bert_core.data.pretraining_data import PretrainingData

    return PretrainingData(generate_toy_corpus(num_documents=200, seed=0), _tokenizer, max_seq_length=seq_len)


def toy_pretraining_data(active: ActiveModel):
    """Sentence pairs of the toy grammar corpus (200 documents) in the active model's tokenizer, up to 128 tokens:
    what the Tokens & masking page and the lesson draw pairs from when no run of this tab gives its own."""
    tok = active.tokenizer
    seq_len = min(128, active.config.max_position_embeddings, tok.model_max_length)
    return _toy_pairs(f"{active.source}:{active.path}:{id(tok)}", tok, seq_len)


@lazy_cache(st.cache_data, max_entries=32, show_spinner="Asking the model for every chosen token…")
def _accuracy(key: str, _model, _tokenizer, _pairs, seed: int, rate: float):
    from bert_core.inspect.inspection import accuracy_by_decision   # torch: not at the top (TORCH_FREE)

    return accuracy_by_decision(_model, _tokenizer, _pairs, seed=seed, mask_rate=rate)


DECISION_POOL = 256   # pairs the accuracy by decision is counted over: about 1,500 chosen tokens, 2-3 s on 2 cores


def _key(active: ActiveModel) -> str:
    return f"{active.source}:{active.path}:{id(active.model)}:{active.step}"


def decision_accuracy(active: ActiveModel, pairs_name: str, instances, seed: int, rate: float):
    """The active model's right guesses by masking decision over the first DECISION_POOL of `instances` masked with
    `seed` and `rate` (inspection.accuracy_by_decision)."""
    pairs = [(x.input_ids, x.token_type_ids) for x in instances[:DECISION_POOL]]
    return _accuracy(f"{_key(active)}:{pairs_name}:{len(pairs)}", active.model, active.tokenizer, pairs, int(seed),
                     float(rate))


@lazy_cache(st.cache_data, max_entries=16, show_spinner="Reading sentence pairs through every head…")
def _pairs(key: str, _model, _tokenizer, _instances):
    from bert_core.inspect.inspection import b_to_a_attention   # torch: not at the top (TORCH_FREE)

    return b_to_a_attention(_model, _tokenizer, _instances)


PAIR_POOL = 128   # pairs the Attention page summarises: a second or two on 2 cores for the shipped model


def pair_attention(active: ActiveModel, pairs_name: str, instances):
    """The active model's sentence-B-to-A attention over the first PAIR_POOL of `instances`."""
    chosen = list(instances[:PAIR_POOL])
    return _pairs(f"{_key(active)}:{pairs_name}:{len(chosen)}", active.model, active.tokenizer, chosen)


@lazy_cache(st.cache_data, max_entries=16, show_spinner="Reading sentences from the model's held-out text…")
def _probes(key: str, allow_paths: bool, _metadata):
    return recorded_probes(_metadata, allow_paths)


@lazy_cache(st.cache_data, max_entries=16, show_spinner="Finding plain sentences this model gets right…")
def _plain(key: str, folder: str | None, _model, _tokenizer):
    # Imported here, not at the top: asking the model loads torch (TORCH_FREE); a shipped checkpoint's choice is
    # stored, so only another model is asked (a few forward passes, once).
    from bert_core.inspect.example_choice import choose_examples

    return stored_examples(folder) or choose_examples(_model, _tokenizer)


def model_probes(active: ActiveModel | None) -> PageExamples:
    """The examples the inspection pages and the lesson open on for the active model: for a model that has read
    only the toy grammar, sentences from its own held-out toy stories (the probes its run recorded, or drawn again);
    for any other model plain English sentences that it gets right, with a first try it misses
    (plain_examples.choose_examples; stored for a shipped checkpoint)."""
    if active is None:
        return from_probes(ENGLISH_PROBES)
    if active.toy_only:
        meta = (active.trainer_state or {}).get("metadata") or {}
        return from_probes(_probes(probes_key(meta), not public_mode(), meta) or ENGLISH_PROBES)
    # Only a shipped folder is read for its stored choice: another source's path may be a name, not a folder.
    folder = str(active.path) if active.source == SOURCE_SHIPPED and active.path is not None else None
    return _plain(_key(active), folder, active.model, active.tokenizer)


def examples_note(active: ActiveModel, examples: PageExamples) -> str:
    """The plain line beside an English model's default example (plain_examples.examples_note): what it read, a
    sentence it gets wrong and its guesses there, and that the default is one it gets right; "" for a toy model."""
    weights = sum(p.numel() for p in active.model.parameters())
    return note_for(examples, active.corpora, weights, active.causal)
