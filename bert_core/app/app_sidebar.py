"""The sidebar every page draws first: the page list, the model picker (which model the pages look at, in the URL
as `?model=`), and the notes under it; drawing it also binds the tab to its run, notes a led class's run, keeps the
browser's id and starts the scratch janitor."""

from __future__ import annotations

import functools
import logging

import streamlit as st

from bert_core.errors import BertCoreError
from bert_core.app.app_drawing import navigation, show_error
from bert_core.app.app_models import (
    SOURCE_CODES,
    SOURCE_FOLDER,
    SOURCE_SAVED,
    SOURCE_SESSION,
    SOURCE_SHIPPED,
    SOURCE_UPLOAD,
    load_model,
    model_sources,
)
from bert_core.app.app_state import scratch_alive
from bert_core.serve.app_storage import list_runs, start_janitor, upload_cap_bytes
from bert_core.app.app_tab import attach_run, current_run, note_class_run, store_visitor_cookie
from bert_core.app.app_widgets import init_widget, kept_choice, persist_keys
from bert_core.serve.job_base import use_training_threads
from bert_core.serve.model_sources import ActiveModel, shipped_checkpoints
from bert_core.serve.runs import OWNER, VIEWER
from bert_core.app.url_settings import one_of

log = logging.getLogger("bert_core.app")


_configure_torch = functools.cache(use_training_threads)   # torch's threads, once per server process


def sidebar(navigation_drawn: bool = False) -> ActiveModel | None:
    """Draw the sidebar: the page list and the model picker (every page calls this). Returns the active model,
    or None with a note."""
    persist_keys(*st.session_state.get("_persisted_keys", ()))   # every page's (see persist_keys), before any widget
    if not navigation_drawn:
        navigation()
    _configure_torch()
    start_janitor(scratch_alive)
    with st.sidebar:
        attach_run()   # a note on a link whose run is not here goes under the page list
    note_class_run()
    store_visitor_cookie()

    persist_keys("model_source", "model_folder", "model_saved", "model_shipped")
    sources = model_sources()
    # The model choice travels in the URL (`?model=session`), so a shared link opens the same model; a share link
    # of a run opens that run's model.
    watching = current_run()[1] == VIEWER
    init_widget("model_source", SOURCE_SESSION if watching else SOURCE_SHIPPED,
                one_of([c for c, name in SOURCE_CODES.items() if name in sources],
                       "no model source of that name on this server", to=SOURCE_CODES), param="model")
    with st.sidebar:
        st.markdown("### Active model")
        source = kept_choice(st.radio, "Which model do the pages look at?", sources, "model_source", SOURCE_SHIPPED)
        code = next(c for c, name in SOURCE_CODES.items() if name == source)
        if st.query_params.get("model") != code:
            st.query_params["model"] = code
        active = _load_sidebar_model(source, _sidebar_model_choice(source))
        _sidebar_notes(active)
    return active


def open_page(name: str, title: str | None = None, **config) -> ActiveModel | None:
    """A page's start: its browser tab's title, the sidebar (returns the active model, or None) and its heading."""
    st.set_page_config(page_title=f"{name} · BERT explorer", layout="wide", **config)
    active = sidebar()
    st.title(title or name)
    return active


def _sidebar_model_choice(source: str):
    """Draw the sidebar's input for a model of `source`'s kind; returns what `_load_sidebar_model` loads: a shipped
    checkpoint's folder, a server folder's path, a saved run's name, an upload, or None (this session's model)."""
    if source == SOURCE_SHIPPED:
        # Which shipped checkpoint, when there are several (the BERT and its GPT-style twin); `?ckpt=NAME`.
        folders = shipped_checkpoints()
        names = list(folders)
        shipped = None
        if len(names) > 1:
            init_widget("model_shipped", names[0], one_of(names, "no shipped checkpoint of that name"),
                        param="ckpt")
            shipped = kept_choice(st.selectbox, "Checkpoint", names, "model_shipped")
            if shipped != names[0]:
                st.query_params["ckpt"] = shipped
            else:
                st.query_params.pop("ckpt", None)
        return folders.get(shipped)
    st.query_params.pop("ckpt", None)
    if source == SOURCE_FOLDER:
        return st.text_input("Checkpoint folder on the server", key="model_folder",
                             placeholder="/path/to/checkpoint (config.json + model.safetensors)")
    if source == SOURCE_SAVED:
        names = [r.name for r in list_runs()]
        return kept_choice(st.selectbox, "Saved run", names, "model_saved") if names else None
    if source == SOURCE_UPLOAD:
        return st.file_uploader(f"A zipped checkpoint folder (up to {upload_cap_bytes() // 2**20} MB)",
                                type=["zip"], key="model_upload")
    return None


def _load_sidebar_model(source: str, choice) -> ActiveModel | None:
    """Load the model the sidebar picked (`choice` from `_sidebar_model_choice`); a failure or a note is shown
    under the picker, never a traceback. Returns the model, or None."""
    try:
        active, note = load_model(source, choice)
    except BertCoreError as exc:
        active, note = None, None
        show_error(exc)
    except Exception as exc:  # noqa: BLE001 - a checkpoint we cannot read is a message, never a traceback
        log.exception("loading the model failed")
        active, note = None, None
        show_error(f"could not load this model: {type(exc).__name__}: {exc}")
    if note:
        st.info(note)
    return active


def _sidebar_notes(active: ActiveModel | None) -> None:
    """Under the picker: the active model's size, and whether this tab's run trains in the background."""
    if active is not None:
        cfg = active.config
        st.caption(f"{active.source}: {cfg.num_hidden_layers} layers × {cfg.num_attention_heads} heads, "
                   f"hidden {cfg.hidden_size}, vocab {cfg.vocab_size:,}"
                   + (f", step {active.step:,}" if active.step is not None else ""))
    run, role = current_run()
    if run is not None and run.active:
        # Drawn outside the live fragment, so it would go stale: no step count here.
        st.caption(("A training run of this tab is going on in the background (see the Train page)"
                    if role == OWNER else "You are watching a shared training run (see the Train page)")
                   + (": *Model trained in this session* is its model as it trains, and its final model once it "
                      "ends." if active is not None and active.source == SOURCE_SESSION else "."))
