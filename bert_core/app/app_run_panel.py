"""The run panel the Train and Fine-tune pages share, drawn: what is said of a run before its figures, its Stop and
Reset buttons, and its share box. The words and decisions are run_panel's (tested without Streamlit); each page
passes its own `run_panel.PanelWords`."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from bert_core.app.app_runs import PACE, RUNS
from bert_core.app.app_tab import set_current_run
from bert_core.app.run_panel import PanelWords, status_notices, waiting
from bert_core.serve.runs import Run
from bert_core.serve.server_load import busy_line, server_load

_SAY = {"info": st.info, "warning": st.warning, "error": st.error}


def time_left(run: Run) -> float | None:
    """Seconds until a training `run` ends, at its pace on this server now (server_load.Pace)."""
    progress = run.trainer.progress
    return PACE.seconds_left(run.run_id, progress.fraction, progress.eta_s)


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
