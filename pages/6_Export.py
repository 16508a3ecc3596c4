"""Export: the loss history as CSV, the configuration as JSON, figures as PNG or SVG, and shareable links."""

import json

import streamlit as st

from bert_core.errors import BertCoreError
from bert_core.inspect import figures
from bert_core.app import app_drawing, app_models, app_sidebar, app_tab, app_widgets, page_copy
from bert_core.app.url_settings import one_of
from bert_core.app.export import (
    checkpoint_saver,
    history_label,
    rows_to_csv,
    run_bundle,
    run_figures,
    run_record,
    shared_data_notes,
)

WORDS = page_copy.WORDS["export_page"]


def _data(active, job, live: bool, record) -> None:
    """The history, evaluations and configuration as files, the run bundle, and the commands that made it."""
    st.subheader("Data")
    c1, c2, c3 = st.columns(3)
    if record.history:
        c1.download_button(f"Loss history ({history_label(record.history)}, CSV)", rows_to_csv(record.history),
                           "loss_history.csv", "text/csv", help=WORDS["history_csv_help"])
    else:
        c1.caption("No training history recorded for this model.")
    if record.evals:
        c2.download_button(f"Held-out evaluations ({len(record.evals)}, CSV)", rows_to_csv(record.evals),
                           "evaluations.csv", "text/csv")
    c3.download_button("Configuration (JSON)", json.dumps(record.config, indent=2), "config.json", "application/json")
    with st.expander("Configuration"):
        st.json(record.config)
    _bundle(active, job, live, record)
    if record.commands:
        st.caption("The commands that made this model, oldest first (the last repeats this run):")
        st.code("\n".join(record.commands), language="bash")
        notes = shared_data_notes(record.commands)
        if notes:
            st.caption("\n\n".join([WORDS["shared_data_files"], *notes]))


def _bundle(active, job, live: bool, record) -> None:
    # One zip with everything: built on request (it saves the checkpoint), kept for this model and step only.
    which = (active.source, str(active.path), active.step)
    if st.button("Prepare run bundle (zip)", icon=":material/folder_zip:", help=WORDS["bundle_help"]):
        try:
            with st.spinner("Saving the checkpoint and the figures…"):
                save = job.save if live else checkpoint_saver(active.model, active.tokenizer, active.trainer_state)
                smoothing = float(st.session_state.get("exp_smoothing", figures.DEFAULT_SMOOTHING))
                st.session_state["exp_bundle"] = (which, run_bundle(save, record, run_figures(record, smoothing)))
        except BertCoreError as exc:
            app_drawing.show_error(exc)
    bundle = st.session_state.get("exp_bundle")
    if bundle is not None and bundle[0] == which:
        st.download_button(f"Download run bundle ({len(bundle[1]) / 1e6:.1f} MB zip)", bundle[1],
                           f"bert-run-step{active.step or 0}.zip", "application/zip", icon=":material/download:")


def _figures(record) -> None:
    st.subheader("Figures")
    app_widgets.init_widget("image_format", "png", one_of(("png", "svg"), "not png or svg"))
    st.radio("Format of the camera button on every chart's toolbar", ["png", "svg"], key="image_format",
             horizontal=True)
    st.markdown(WORDS["chart_images_intro"])
    if record.history:
        smoothing = app_widgets.smoothing_slider("exp_smoothing", help=WORDS["export_smoothing_help"])
        history, evals, baselines = record.history, record.evals, record.baselines
        app_drawing.plotly(figures.loss_figure(history, evals, baselines, smoothing), "loss", key="exp_loss")
        app_drawing.plotly(figures.accuracy_figure(history, evals, baselines, smoothing), "accuracy", key="exp_acc")


def main() -> None:
    active = app_sidebar.open_page("Export")
    job = app_tab.current_job()
    live = active is not None and active.source == app_models.SOURCE_SESSION and job is not None and job.trainer
    record = run_record(active.config if active is not None else None, trainer=job.trainer if live else None,
                        trainer_state=active.trainer_state if active is not None else None)
    if active is None:
        st.info("Pick a model in the sidebar to export its history and configuration.")
    else:
        _data(active, job, live, record)
    _figures(record)
    st.subheader("Share a view")
    st.markdown(WORDS["share_links_intro"])
    app_widgets.sync_query("image_format", "exp_smoothing")


main()
