"""Drawing helpers every page uses: the page list, links, Plotly charts, a user error as a message, one training
update as the lesson and the Train page show it."""

from __future__ import annotations

import streamlit as st
from streamlit.errors import StreamlitPageNotFoundError

from bert_core.errors import BertCoreError
from bert_core.inspect import figures, lesson_figures
from bert_core.inspect.figure_floor import projector_figure
from bert_core.inspect.figures import clear_of_toolbar, plotly_config
from bert_core.inspect.safe_text import markdown, safe_figure
from bert_core.paths import REPO_ROOT


# The sidebar's page list, in teaching order. Streamlit would name the main script's entry after its file ("app");
# .streamlit/config.toml hides that list (client.showSidebarNavigation) and every page draws this one instead.
NAVIGATION = (
    ("app.py", "Home", ":material/home:"),
    ("pages/0_Lesson.py", "Lesson", ":material/school:"),
    ("pages/1_Tokens_and_masking.py", "Tokens & masking", ":material/text_fields:"),
    ("pages/2_Train.py", "Train", ":material/model_training:"),
    ("pages/3_Attention.py", "Attention", ":material/visibility:"),
    ("pages/4_Predictions.py", "Predictions", ":material/target:"),
    ("pages/7_How_BERT_computes.py", "How BERT computes", ":material/calculate:"),   # after what it explains
    ("pages/5_Fine-tune.py", "Fine-tune", ":material/label:"),
    ("pages/6_Export.py", "Export", ":material/download:"),
)


def navigation() -> None:
    """The sidebar's list of pages (Home first), the ones present in this install."""
    with st.sidebar:
        try:
            for page, label, icon in NAVIGATION:
                if (REPO_ROOT / page).is_file():  # the fine-tuning page may be absent in a trimmed install
                    st.page_link(page, label=label, icon=icon)
        except StreamlitPageNotFoundError:
            return  # a page run on its own (AppTest.from_file of one page): there is no app to link to
        st.divider()


def page_link(page: str, label: str, icon: str | None = None, **query: str) -> None:
    """A link to another page of the app, opened with `query` (the lesson at a `step`); nothing when the page is run
    on its own (AppTest.from_file of one page), where there is no app to link to."""
    try:
        st.page_link(page, label=label, icon=icon, query_params=query or None)
    except StreamlitPageNotFoundError:
        pass


EXPORT_WIDTH_PX = 1100   # the width of a downloaded chart, whatever the screen


def plotly(fig, name: str, key: str | None = None, on_select=None) -> None:
    """Show a Plotly figure with the download-as-image toolbar configured (PNG, or SVG via the Export page). Every
    chart of the app is drawn here, so this is where a visitor's text in it is made inert (safe_text.safe_figure:
    a label `<a href=...>` is shown as those characters, never as a link), and its text is made large and dark
    enough for a projector (figure_floor.projector_figure)."""
    fmt = st.session_state.get("image_format", "png")
    config = plotly_config(name)
    config["toImageButtonOptions"]["format"] = fmt
    fig = clear_of_toolbar(projector_figure(safe_figure(fig)))   # first: it may add to the export's height
    # The download is drawn at a fixed width, not the chart's width on this screen: a narrow column (or a phone)
    # would otherwise cut the legend and titles of the exported picture.
    config["toImageButtonOptions"].update(width=EXPORT_WIDTH_PX, height=fig.layout.height or 450)
    # `on_select`: a callback run when a point is clicked (it reads the selection from session state under `key`).
    select = dict(on_select=on_select, selection_mode="points") if on_select is not None else {}
    st.plotly_chart(fig, config=config, key=key, width="stretch", **select)


def script_frame(html: str) -> None:
    """A zero-height frame that runs `html`'s script in the visitor's browser (the visitor cookie, the lesson's
    scroll to a step's top): the one place that knows which Streamlit draws one how."""
    if hasattr(st, "iframe"):   # a feature of Streamlit >= 1.56 (components.v1.html is deprecated there); we allow 1.53
        st.iframe(html, height="content")
    else:   # an older Streamlit: its components module, imported only there
        import streamlit.components.v1 as components

        components.html(html, height=0)


def show_error(exc: Exception | str) -> None:
    """Show a user error as a message on the page (the app never shows a traceback for bad input). The message is
    plain text, as the CLI prints it, and may quote a visitor's file or column name: never Markdown."""
    st.error(markdown(str(exc)))


def salience_panel(chart_prefix: str, panel_data, race_id: str, name: str, result, kind: str, explained,
                   max_length: int) -> None:
    """Why the race's fine-tuned model `name` (its `result`) decided on an input `explained` as (text, text_b, word)
    (`panel_data`: salience.salience_panel_data, which loads torch), computed once per input (kept in the
    session while it stays, so reruns are cheap), drawn as its summary, then each figure with its caption; a user
    error is a message."""
    slot, key, (text, text_b, word) = f"_{chart_prefix}_why", (race_id, name, kind, *explained, max_length), explained
    try:
        if st.session_state.get(slot, (None,))[0] != key:
            with st.spinner("Following the path from the baseline to the input…"):
                st.session_state[slot] = (key, panel_data(
                    result.model, result.tokenizer, kind, text, text_b, word=word, label_names=result.label_names,
                    max_length=max_length))
    except BertCoreError as exc:
        show_error(exc)
        return
    panel = st.session_state[slot][1]
    st.markdown(panel.summary)
    for figure_name, figure, caption in panel.figures:
        plotly(figure, figure_name, key=f"{chart_prefix}_{figure_name}")
        st.caption(caption)


def show_step_record(record, key: str) -> None:
    """What one update did (a bert_core.inspect.training_step.StepRecord), as the lesson and the Train page's
    *Step once* show it: the numbers, the batch's first pair as the model saw it, each part's gradient and the
    weights that moved most."""
    m = st.columns(4)
    m[0].metric("Update", f"{record.step:,}")
    m[1].metric("Next-token loss" if record.causal else "Masked-LM loss", f"{record.mlm_loss:.3f}")
    m[2].metric("Learning rate", f"{record.learning_rate:.2g}")
    m[3].metric("Gradient norm", f"{record.grad_norm:.3g}")
    nsp = "" if record.is_random_next is None else \
        f" (NSP: {'B is random' if record.is_random_next else 'B follows A'})"
    fig = figures.masking_figure(record.example)
    fig.update_layout(title=f"The batch's first sequence of {record.rows}{nsp}")
    plotly(fig, "step-batch", key=f"{key}_batch")
    left, right = st.columns([2, 3])
    with left:
        plotly(lesson_figures.layer_gradient_figure(record.layer_grad_norms, record.step), "step-gradients",
               key=f"{key}_grads")
    with right:
        st.markdown(f"**The {len(record.changes)} weights that moved most**")
        st.dataframe([{"weight": c.name, "change": f"{c.change:+.2e}", "gradient": f"{c.gradient:+.3g}"}
                      for c in record.changes], hide_index=True, width="stretch")
        st.caption("Nearly every weight moves, even those that played no part in this batch: AdamW's weight "
                   "decay shrinks every weight a little, and the output layer shares the word embeddings, so every "
                   "token's embedding gets a gradient.")
