"""Widget state of the explorer's pages: a widget's value seeded once from the URL (so a shared link opens the same
view) or its default, kept across page switches, written back into the URL, and following a default that changes.
Streamlit-facing (bert_core.serve.app_state re-exports it for the pages)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from bert_core.inspect.figures import DEFAULT_SMOOTHING
from bert_core.serve.url_settings import LinkValueError, Within, url_value

SMOOTHING = Within(0.0, 0.99)   # the smoothing slider's range (figures.ema's weight)


def persist_keys(*keys: str) -> None:
    """Keep widget values across page switches. Streamlit drops a widget's state at the end of any script run that
    does not draw the widget, so every page's run (through `sidebar`) re-saves the keys that any page named here."""
    st.session_state.setdefault("_persisted_keys", set()).update(keys)
    for key in keys:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def persist_every_page_keys() -> None:
    """Re-save the keys every page has named (see `persist_keys`); first thing in `sidebar`, before any widget."""
    persist_keys(*st.session_state.get("_persisted_keys", ()))


def query_default(name: str, default, cast=str):
    """A page setting from the URL query (so a shared link opens the same view), else `default`. The one place a
    link's values are read: a number with a range (`cast` a `Within`) is held to it; one that cannot be read (junk,
    NaN, an infinity, a choice the page does not offer) keeps `default`, and a short note says that the link's
    value was not used, and why."""
    raw = st.query_params.get(name)
    if raw is None:
        return default
    try:
        return url_value(raw, cast)
    except LinkValueError as exc:
        # A toast: the reading happens before the page draws, and on pages that draw it after their sidebar.
        st.toast(f"The link's `{name}` was not used ({exc}): the page shows its default.",
                 icon=":material/link_off:")
        return default


def init_widget(key: str, default, cast=str, param: str | None = None) -> None:
    """Seed a widget's session value once: from the URL query parameter `param` (default: the key), else `default`.

    Keys carry a page prefix (att_, pred_...) so that one page's parameters never leak into another's.
    """
    if key not in st.session_state:
        st.session_state[key] = query_default(param or key, default, cast)


def follow_default(key: str, default, cast=str) -> None:
    """Seed a widget like `init_widget`, and when its default changes (another model, corpus or seed) replace the
    value too, unless the user has changed it: what they typed stays, an untouched default follows."""
    marker = f"_default_of_{key}"
    init_widget(key, default, cast)
    previous = st.session_state.get(marker)
    if previous is not None and previous != default and st.session_state[key] == previous:
        st.session_state[key] = default
    st.session_state[marker] = default


def sync_query(*keys: str) -> None:
    """Write these widgets' current values into the URL query, so the address bar is a shareable link."""
    for key in keys:
        if key not in st.session_state:
            continue
        text = str(st.session_state[key])
        if st.query_params.get(key) != text:
            st.query_params[key] = text


def smoothing_slider(key: str, help: str, view: Any = None) -> float:
    """The "Smoothing of the training curves" slider (figures.ema's weight), seeded from the URL (held to its
    range) or the default; returns its value. `view` names what the curves show (a run
    and whether it still trains): when it changes, the slider returns to the default, so a value set for a live run
    (0 shows its raw steps) does not draw the finished run's curves as blocks of spikes (issue #64)."""
    init_widget(key, DEFAULT_SMOOTHING, SMOOTHING)
    marker = f"_view_of_{key}"
    if view is not None:
        if st.session_state.get(marker) not in (None, view):
            st.session_state[key] = DEFAULT_SMOOTHING
        st.session_state[marker] = view
    return st.slider("Smoothing of the training curves", *SMOOTHING, step=0.01, key=key, help=help)
