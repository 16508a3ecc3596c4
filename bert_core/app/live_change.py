"""The Train page's *Change while it trains*: its owner changes a setting of the tab's run (the peak learning rate)
from the run's next update on; the changes made so far, and the command that repeats the run with them
(TrainConfig.changes). The value typed is checked (training.train_config.typed_change) and a refusal is a message."""

from __future__ import annotations

import streamlit as st

from bert_core.app.app_drawing import show_error
from bert_core.app.app_state import RUNS
from bert_core.errors import BertCoreError
from bert_core.training import comparison
from bert_core.training.train_config import LIVE, TrainConfig, change_labels, typed_change


DRAWN_WITH = "_live_change_drawn_with"   # the run whose trainer the page's last full draw knew (else None)


def change_box(run, viewer: bool, active: bool) -> None:
    """The box under the buttons: while the tab's own run trains, a setting to change and its new value; once it
    has changes, their list and the command that repeats them. A viewer of a shared run sees nothing to steer."""
    trainer = run.job.trainer if run is not None and run.job is not None else None
    st.session_state[DRAWN_WITH] = run.run_id if trainer is not None else None
    # A pretraining run's config (a stand-in run of the tests has none).
    if trainer is None or viewer or not isinstance(trainer.config, TrainConfig) \
            or not (active or trainer.config.changes):
        return
    with st.expander("Change while it trains", expanded=active, icon=":material/tune:"):
        if active:
            _change_form(run, trainer)
        config = trainer.config
        if not config.changes:
            return
        st.markdown("Changed so far (the charts mark each at its step):\n"
                    + "\n".join(f"- {label}" for _, label in change_labels(config)))
        try:
            command = comparison.train_command(comparison.with_changes(run.spec, config))
        except BertCoreError as exc:
            st.caption(f"No equivalent command line: {exc}")
            return
        st.caption("The same run, its changes included, from the command line (`--change STEP:lr=VALUE` from update "
                   "STEP + 1 on); `--resume` of its checkpoint goes on with them too:")
        st.code(command, language="bash", wrap_lines=True)


def drawn_before_training(run) -> bool:
    """Whether the page was last drawn while `run` had no trainer yet (queued or preparing): only the polling
    fragments have run since, so the box is missing until the whole page is drawn again (once)."""
    trainer = run.job.trainer if run.job is not None else None
    return trainer is not None and st.session_state.get(DRAWN_WITH) != run.run_id


def _change_form(run, trainer) -> None:
    st.caption("Change the **peak learning rate** of this run from its next update on, and watch the curves answer. "
               "The schedule keeps its shape: its warmup and decay go on, scaled to the new peak.")
    c1, c2, c3 = st.columns([1.4, 1.6, 1.2])
    name = c1.selectbox("Setting", list(LIVE), format_func=lambda n: LIVE[n].widget.label, key="train_live_setting")
    now = getattr(trainer.config.at(trainer.step), name)
    c2.text_input(f"New value (now {now:g})", key="train_live_value", placeholder=f"{now / 3:.1g}",
                  help=f"A number between {LIVE[name].page_range()[0]:g} and {LIVE[name].page_range()[1]:g}.")
    c3.markdown("&nbsp;")
    if c3.button("Change at the next step", icon=":material/tune:", key="train_live_apply"):
        try:
            value = typed_change(name, st.session_state.get("train_live_value"))
            before = trainer.config.changes
            config = RUNS.change(run.run_id, name, value)
            made = [label for change, (_, label) in zip(config.changes, change_labels(config)) if change not in before]
            st.success(f"{made[-1] if made else 'Changed'}: the run trains at it from its next update on.")
        except BertCoreError as exc:
            show_error(exc)
