"""This tab's runs and this browser: which run of the server each page of the tab shows (found from the URL, a share
link or the session, and written back into the URL so that the address bar reopens it), this browser's id kept in a
cookie, and the "My runs" list it keys; and the run panel the Train and Fine-tune pages share, drawn (what is said
of a run before its figures, its Stop and Reset buttons, its share box: the words are run_panel's, each page's in
its `run_panel.PanelWords`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from bert_core.app.app_drawing import script_frame
from bert_core.app.app_state import LESSON_CLASSES, PACE, RUNS
from bert_core.serve.jobs import format_duration
from bert_core.serve.model_sources import checkpoints_beside_default
from bert_core.serve.run_protocols import FINETUNE_PAGE, TRAIN_PAGE, RunJob
from bert_core.serve.runs import OWNER, VIEWER, Run, new_token
from bert_core.serve.server_load import busy_line, server_load
from bert_core.app.run_panel import (
    LINK_PARAMS,
    VISITOR_COOKIE,
    PanelWords,
    cookie_script,
    rows_markdown,
    status_notices,
    valid_visitor,
    visitor_rows,
    waiting,
)
from bert_core.app import page_copy

WORDS = page_copy.WORDS["app_tab"]


def session_id() -> str:
    """This browser session's id (a stable fallback outside a Streamlit run)."""
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "no-session"


# Each page's run in this tab: its URL keys (the owner's id, a share link's), and where the session keeps them.
_TAB_RUN = {page: (*LINK_PARAMS[page], f"{prefix}run_id", f"{prefix}watch_id")
            for page, prefix in ((TRAIN_PAGE, ""), (FINETUNE_PAGE, "ft_"))}
WATCH_PARAM = LINK_PARAMS[TRAIN_PAGE][1]   # a share link's run id: the lesson watches the teacher's run by it


def attach_run(page: str = TRAIN_PAGE) -> None:
    """Find this tab's run of `page` (the Train page's pretraining run, or the Fine-tune page's race) from its URL
    (a reload, a reopened link, a share link) or its session, note this session as watching it, and write its id
    back into the URL so that the address bar always reopens it. A link whose run is not here gets its note where
    this is called (the sidebar for the Train page's run, the Fine-tune page above its settings for a race)."""
    s = st.session_state
    run_param, watch_param, run_key, watch_key = _TAB_RUN[page]
    for param, state_key, lookup in ((run_param, run_key, RUNS.get), (watch_param, watch_key, RUNS.by_view)):
        token = st.query_params.get(param)
        if not token or token == s.get(state_key):
            continue
        found = lookup(token)
        if found is not None and found.spec.page == page:
            s.pop(run_key, None)
            s.pop(watch_key, None)
            s[state_key] = token
        else:
            st.warning(missing_run_note(page, token, found.spec.page if found is not None else None),
                       icon=":material/link_off:")
            del st.query_params[param]
    run, role = current_run(page)
    if run is None:
        s.pop(run_key, None)   # dropped or reset meanwhile
        s.pop(watch_key, None)
        for param in (run_param, watch_param):
            if param in st.query_params:
                del st.query_params[param]
        return
    RUNS.attach(run, session_id(), role, visitor_id())
    param, token = (run_param, run.run_id) if role == OWNER else (watch_param, run.view_id)
    if st.query_params.get(param) != token:
        st.query_params[param] = token


def missing_run_note(page: str, token: str, other_page: str | None = None) -> str:
    """Why the run that a link of `page` names (`token`, its owner's or share id) is not shown: what the server
    knows of it (dropped to keep the store bounded, lost in a restart, a run of another page), or that the link
    names none of its runs: a mistyped or cut link, or one from another server."""
    race = page == FINETUNE_PAGE
    if other_page is not None:
        return (f"This link names a run of the {other_page} page, not {'a race' if race else 'a training run'}: "
                f"open it on the {other_page} page (*My runs* there lists it).")
    if RUNS.was_dropped(token):
        return ("The race of this link is gone: a race's results stay on the server while someone looks at them, "
                f"and go {RUNS.unwatched_s() / 60:g} min after the last look. Run it again here." if race else
                WORDS["run_link_dropped"])
    if RUNS.was_lost(token):
        return ("The run of this link was lost when the server restarted: it had not written its first checkpoint "
                f"yet. Start a new {'race' if race else 'run'} on the {page} page.")
    what = "race" if race else "run"
    return WORDS["unknown_run_link"].format(what=what, page=page)


def note_class_run() -> None:
    """A run this tab started while in a led lesson class (the class link, or leading it) is one of the class's runs:
    the teacher's view lists it by its view id (bert_core.app.lesson_classes)."""
    s = st.session_state
    code = s.get("lesson_class") or s.get("lesson_lead")
    run, role = current_run()
    if code and run is not None and role == OWNER:
        LESSON_CLASSES.add_run(code, run.view_id)


def visitor_id() -> str:
    """This browser's id (the "My runs" list is kept under it): read from its cookie, or a new one that the page
    then stores in the browser (bert_core.app.run_panel)."""
    s = st.session_state
    if "visitor_id" not in s:
        try:
            known = valid_visitor((st.context.cookies or {}).get(VISITOR_COOKIE))
        except Exception:  # noqa: BLE001 - no request to read (a page run on its own): a session-long id
            known = None
        s["visitor_id"], s["_visitor_stored"] = known or new_token(), known is not None
    return s["visitor_id"]


def store_visitor_cookie() -> None:
    """Have the browser keep its id: drawn at each script run of a session whose browser came without it (the
    cookie it sets is read at the next visit; a zero-height frame at the foot of the sidebar)."""
    visitor = visitor_id()
    if not st.session_state.get("_visitor_stored"):
        with st.sidebar:
            script_frame(cookie_script(visitor))


def my_runs_list() -> None:
    """The "My runs" switch of the Train and Fine-tune pages: this browser's runs, newest first, each with its link
    (relative: it resolves beside the page, whatever path the server is under). Drawn only when switched on: folded
    content would still be on the page, where its words ("preparing") mix with the page's own."""
    rows = visitor_rows(RUNS.visited(visitor_id()))
    if not st.toggle("My runs" + (f" · {len(rows)}" if rows else ""), key="my_runs_show",
                     help=WORDS["my_runs_help"]):
        return
    if not rows:
        st.caption("None yet: the runs this browser starts or watches are listed here.")
        return
    st.markdown(rows_markdown(rows))
    st.caption(WORDS["my_runs_caption"])


def reset_note(run: Run) -> str:
    """What the Train page says after *Reset*: the run it forgot, by what it was, and that *My runs* no longer
    lists it (a finished run that vanished without a word looked lost)."""
    trainer = run.trainer
    step = trainer.step if trainer is not None else 0
    what = f"{run.phase} at step {step:,}" if step else run.phase
    return WORDS["run_was_reset"].format(what=what)


def current_run(page: str = TRAIN_PAGE) -> tuple[Run | None, str | None]:
    """(this tab's run of `page`, OWNER or VIEWER), or (None, None)."""
    s = st.session_state
    _, _, run_key, watch_key = _TAB_RUN[page]
    run = RUNS.get(s.get(run_key))
    if run is not None:
        return run, OWNER
    run = RUNS.by_view(s.get(watch_key))
    return (run, VIEWER) if run is not None else (None, None)


def set_current_run(run: Run | None, page: str = TRAIN_PAGE) -> None:
    """Make `run` (started by this tab) the tab's run of `page`, or forget it."""
    run_param, watch_param, run_key, watch_key = _TAB_RUN[page]
    st.session_state.pop(watch_key, None)
    if watch_param in st.query_params:
        del st.query_params[watch_param]
    if run is None:
        st.session_state.pop(run_key, None)
        if run_param in st.query_params:
            del st.query_params[run_param]
    else:
        st.session_state[run_key] = run.run_id
        st.query_params[run_param] = run.run_id   # the URL names the tab's run (else it would reopen the last)
        RUNS.attach(run, session_id(), OWNER, visitor_id())


def other_models(active) -> dict[str, Path]:
    """The models a page may set beside the `active` one: this tab's earlier runs whose checkpoints are in their
    folders ("run 1 of this tab", the Train page's numbering), then the checkpoints beside the shipped one."""
    run, role = current_run()
    found = {}
    for i, r in enumerate(RUNS.family(run) if run is not None and role == OWNER else ()):
        if r is run:
            continue  # the tab's current run is the sidebar's "Model trained in this session"
        folder = r.job.released if r.job is not None else None
        if folder is not None and (Path(folder) / "config.json").is_file():
            found[f"run {i + 1} of this tab"] = Path(folder)
    return {**found, **checkpoints_beside_default(exclude=active.path)}


def start_run(spec, run_id: str, page: str = TRAIN_PAGE, family_of: Run | None = None) -> None:
    """Submit `spec` as this tab's new run of `page` and redraw. The tab's run it follows (`family_of`) is retired:
    the tab moves on, an idle run's process ends, its curves stay listed."""
    if family_of is not None:
        RUNS.retire(family_of.run_id)
    set_current_run(RUNS.submit(spec, session_id(), run_id=run_id, family_of=family_of), page)
    st.rerun()


def current_job() -> RunJob | None:
    """The training job of this tab's run (its own or one it watches), once the run has started."""
    run, _ = current_run()
    return run.job if run is not None else None


_SAY = {"info": st.info, "warning": st.warning, "error": st.error}


def progress_bar(run: Run, said: str, left: bool = True) -> None:
    """A training `run`'s progress: `said`, then (with `left`) its time left at its pace on this server now
    (server_load.Pace), and where it trains."""
    progress = run.trainer.progress
    seconds = PACE.seconds_left(run.run_id, progress.fraction, progress.eta_s)
    st.progress(min(max(progress.fraction, 0.0), 1.0), text=said
                + (f" · time left {format_duration(seconds)}" if left else "")
                + (f" · on {RUNS.device_of(run)}" if run.device else ""))


def busy_caption(run: Run | None, noun: str = "run", place: tuple[int, float] | None = None) -> None:
    """While `run` is queued, preparing or training: one line saying how busy the server is and what this wait is
    expected to take (server_load.busy_line; `place`: its queue place, when the caller has it already)."""
    if run is None or not run.active:
        return
    if place is None and run.queued:
        place = RUNS.queue_position(run)
    st.caption(busy_line(server_load(RUNS), run, PACE, place, noun))


def run_status(run: Run, words: PanelWords, viewer: bool) -> bool:
    """Say how `run` stands before its figures (run_panel.status_notices), with the queue's policy while it waits.
    True when it is queued with nothing more to draw."""
    place = RUNS.queue_position(run) if run.phase == "queued" else None
    for notice in status_notices(run, words, viewer, place):
        _SAY[notice.level](notice.text, icon=notice.icon)
    busy_caption(run, words.noun, place)
    if place is not None:
        st.caption(RUNS.policy())
    return waiting(run)


def stop_button(column, run: Run | None, busy: bool, viewer: bool, notice, words: PanelWords) -> None:
    """Stop: the run ends after the step it is on (a queued one is cancelled); `notice` says so meanwhile."""
    if column.button("Stop", icon=":material/stop:", disabled=viewer or not busy, help=words.stop_help):
        notice.info(words.stopping, icon=":material/hourglass_top:")
        RUNS.stop(run.run_id, wait=10)
        st.rerun()


def reset_button(column, run: Run | None, viewer: bool, words: PanelWords,
                 after: Callable[[Run], None] | None = None) -> None:
    """Reset: the tab forgets its run (it leaves *My runs*, its link stops working); `after(run)` tidies the
    page's own state before the redraw."""
    if column.button("Reset", icon=":material/restart_alt:", disabled=viewer or run is None, help=words.reset_help):
        RUNS.discard(run.run_id)
        set_current_run(None, words.page)
        if after is not None:
            after(run)
        st.rerun()


def share_box(run: Run | None, viewer: bool, words: PanelWords) -> None:
    """The link a class opens to watch the run (its owner's only: a viewer has no link to give)."""
    if run is None or viewer:
        return
    with st.expander(words.share_title, icon=":material/share:"):
        st.code(words.share_link(st.context.url or "", run.view_id), language=None)
        st.caption(words.share_caption)
