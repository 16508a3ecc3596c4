"""Home page of the BERT explorer: what BERT is, its architecture, and the walkthrough order.

It draws its text and figure before anything loads PyTorch or a checkpoint (the sizes come from config.json), so
the page shows within seconds of `streamlit run app.py`; the sidebar then loads the active model.
"""

import streamlit as st

from bert_core.paths import REPO_ROOT
from bert_core.app import app_drawing, app_models, app_sidebar, page_copy

WORDS = page_copy.WORDS["home"]

WALKTHROUGH = {  # page -> (its link, what it teaches): a short link and a line under it that wraps (a long link
    # label is cut at the column's edge on a projector's 1280 x 720)
    "pages/1_Tokens_and_masking.py": ("1. Tokens & masking", "what the model is shown"),
    "pages/2_Train.py": ("2. Train", "pretrain a tiny BERT live"),
    "pages/3_Attention.py": ("3. Attention", "what each head looks at"),
    "pages/4_Predictions.py": ("4. Predictions", "fill in [MASK]s, judge sentence pairs"),
    "pages/7_How_BERT_computes.py": ("5. How BERT computes", "one token through a head, each layer's guess"),
    "pages/5_Fine-tune.py": ("6. Fine-tune", "teach it to classify text"),
    "pages/6_Export.py": ("7. Export", "curves, configuration, figures"),
}


def _start_lesson() -> None:
    """The lesson from its first step (a callback: before the page switch reads it)."""
    st.session_state["lesson_at"] = "tokens"

st.set_page_config(page_title="BERT explorer", layout="wide")
app_drawing.navigation()
st.title("BERT explorer")
st.markdown(WORDS["intro"])

lesson, where = st.columns([1, 3], vertical_alignment="center")
if lesson.button("Start the lesson", type="primary", icon=":material/school:", key="home_lesson",
                 on_click=_start_lesson):
    st.query_params.clear()
    st.switch_page("pages/0_Lesson.py")
where.markdown("Ten short steps, from tokens to fine-tuning, each with the live model, a figure and a question.")
left, right = st.columns([3, 2])
with right:
    st.subheader("Walkthrough")
    for page, label, icon in app_drawing.NAVIGATION:
        if page in WALKTHROUGH and (REPO_ROOT / page).is_file():
            st.page_link(page, label=WALKTHROUGH[page][0], icon=icon)
            st.caption(WALKTHROUGH[page][1])
with left:
    figure = st.empty()
# plotly and pandas: after the text is on screen
from bert_core.inspect.figures import architecture_figure  # noqa: E402

config = app_models.quick_config()
with figure.container():
    app_drawing.plotly(architecture_figure(config), "bert-architecture")

active = app_sidebar.sidebar(navigation_drawn=True)  # loads PyTorch and the model: after the page is on screen
if active is not None and active.config != config:
    with figure.container():
        app_drawing.plotly(architecture_figure(active.config), "bert-architecture")
with right:
    st.subheader("The active model")
    if active is None:
        st.info("No model is active yet. Pick one in the sidebar, or train one on the Train page.")
    else:
        st.markdown(active.description)
    st.caption(WORDS["model_choice_caption"])
