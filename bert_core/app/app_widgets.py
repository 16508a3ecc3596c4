"""Widget state of the explorer's pages: a widget's value seeded once from the URL (so a shared link opens the same
view) or its default, kept across page switches, written back into the URL, and following a default that changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from bert_core.inspect.computation_figures import token_labels
from bert_core.inspect.figures import DEFAULT_SMOOTHING
from bert_core.app.url_settings import LinkValueError, Within, one_of, url_value
from bert_core.data import task_downloads
from bert_core.errors import BertCoreError
from bert_core.serve.app_storage import public_mode
from bert_core.training.setting import Setting, as_bool

SMOOTHING = Within(0.0, 0.99)   # the smoothing slider's range (figures.ema's weight)


def persist_keys(*keys: str) -> None:
    """Keep widget values across page switches. Streamlit drops a widget's state at the end of any script run that
    does not draw the widget, so every page's run (through `sidebar`) re-saves the keys that any page named here."""
    st.session_state.setdefault("_persisted_keys", set()).update(keys)
    for key in keys:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


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
    Keys carry a page prefix (att_, pred_...) so that one page's parameters never leak into another's."""
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


def kept_choice(draw, label: str, options, key: str, fallback=None, **kw):
    """`draw(label, options, key=key, **kw)` (a selectbox or radio), a kept value its `options` no longer hold
    (another model, sentence or race) replaced first by `fallback`, else by the first option."""
    options = list(options)
    if st.session_state.get(key) not in options:
        st.session_state[key] = options[0] if fallback is None else fallback
    return draw(label, options, key=key, **kw)


def token_picker(key: str, tokens, default: int) -> int:
    """A token of the sentence (counted from 1 on screen), kept in range when the sentence changes; from 0."""
    labels = token_labels(tokens)
    return int(kept_choice(st.selectbox, "Token", range(len(labels)), key, min(default, len(labels) - 1),
                           format_func=lambda i: labels[i]))


def sync_query(*keys: str) -> None:
    """Write these widgets' current values into the URL query, so the address bar is a shareable link."""
    for key in keys:
        if key not in st.session_state:
            continue
        text = str(st.session_state[key])
        if st.query_params.get(key) != text:
            st.query_params[key] = text


def smoothing_slider(key: str, help: str, view: Any = None) -> float:
    """The "Smoothing of the training curves" slider (figures.ema's weight), seeded from the URL or the default.
    When `view` (a run, and whether it still trains) changes, it returns to the default, so a value set for a live
    run (0 shows its raw steps) does not draw the finished run's curves as blocks of spikes (issue #64)."""
    init_widget(key, DEFAULT_SMOOTHING, SMOOTHING)
    marker = f"_view_of_{key}"
    if view is not None:
        if st.session_state.get(marker) not in (None, view):
            st.session_state[key] = DEFAULT_SMOOTHING
        st.session_state[marker] = view
    return st.slider("Smoothing of the training curves", *SMOOTHING, step=0.01, key=key, help=help)


def setting_cast(setting: Setting):
    """How a setting's URL parameter is read: a number held to the page's range (the widget's own, `Within`), a
    choice among the options the page offers, a switch from its words."""
    if setting.kind is bool:
        return as_bool
    if choices := _options(setting):
        return one_of(choices, f"no {setting.legend()} of that name")
    return Within(*setting.page_range())


def _options(setting: Setting) -> tuple:
    """The choices a page offers for a setting: its widget's options (or those it words), else the setting's."""
    shown = setting.widget
    return shown.options or tuple(option for option, _ in shown.words) or setting.choices or ()


def seed_setting(setting: Setting, default, follow: bool = True) -> None:
    """Seed a setting's widget from the URL (read by `setting_cast`), else `default`; with `follow`, a default that
    changes (another corpus or size) replaces a value the user has not changed (`follow_default`)."""
    (follow_default if follow else init_widget)(setting.widget.key, default, setting_cast(setting))


def setting_widget(setting: Setting, where: Any = st, disabled: bool = False, **words: Any) -> Any:
    """Draw a setting's widget as its description says (bert_core.training.setting.Widget): its label, help, the
    page's range, step and format, or its options in words; "{word}" in the label or help is filled in from
    `words`. Returns the widget's value. Seed it first (`seed_setting`)."""
    shown = setting.widget
    label, help = shown.label.format(**words), shown.help and shown.help.format(**words)
    common = {"key": shown.key, "help": help, "disabled": disabled}
    if setting.kind is bool:
        return where.checkbox(label, **common)
    if choices := _options(setting):
        named = dict(shown.words)
        return where.selectbox(label, list(choices), format_func=named.get if named else str, **common)
    draw = where.slider if shown.slider else where.number_input
    return draw(label, *setting.page_range(), step=shown.step, format=shown.format, **common)


def setting_widgets(settings, group: str, where: Any = st, disabled=lambda setting: False, **words: Any) -> None:
    """Draw the widgets of a page's `group` (`Widget.group`), in the order of their descriptions."""
    for setting in settings:
        if setting.widget is not None and setting.widget.group == group:
            setting_widget(setting, where, disabled(setting), **words)


def fetch_box(label: str, approx_mb: float, key: str, fetch: Callable, download: str, instead: str = "",
              home: str | None = None) -> None:
    """A public file a view needs that is not on this server yet (a task, a treebank): what it is and a *Fetch it*
    button. `fetch(progress)` downloads it once for every visitor, with a progress bar; then the page reruns. A
    failure is said on the page with what to do `instead`; the download's own message (it names the cache folder)
    and the `python -m bert_core download` name only off a public server."""
    where = f" from [its public home]({home})" if home else ""
    st.info(f"**{label}** is not on this server yet. It is fetched once (about {approx_mb:g} MB{where}) and kept for "
            "every visitor.", icon=":material/download:")
    if not st.button("Fetch it", key=key, icon=":material/download:"):
        return
    bar = st.progress(0.0, text="Connecting…")

    def report(done: int, total: int | None) -> None:
        bar.progress(min(done / total, 1.0) if total else 0.0,
                     text=f"{done / 1e6:.1f} MB" + (f" of {total / 1e6:.1f} MB" if total else ""))
    try:
        fetch(report)
    except (BertCoreError, OSError) as exc:
        bar.empty()
        admin = (f" On a machine that is online, `python -m bert_core download {download}` puts it in the cache."
                 f"\n\nDetails: {exc}")
        st.error(f"Could not fetch {label} from its public home: this server may be offline, or the site down."
                 + (f" {instead}" if instead else "") + ("" if public_mode() else admin))
        return
    st.rerun()


def fetch_task_box(name: str, key: str, instead: str = "") -> None:
    """`fetch_box` for the fine-tuning task `name` (task_downloads.TASKS)."""
    task = task_downloads.TASKS[name]
    fetch_box(task.label, task.approx_mb, key, lambda progress: task_downloads.fetch_task_csv(name, progress=progress),
              name, instead, task.home)
