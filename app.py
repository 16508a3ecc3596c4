"""Home page of the BERT explorer: what BERT is, its architecture, and the walkthrough order."""

from pathlib import Path

import streamlit as st

from bert_core import app_state
from bert_core.figures import architecture_figure

ROOT = Path(__file__).parent
WALKTHROUGH = [
    ("pages/1_Tokens_and_masking.py", "1. Tokens & masking: what the model is shown", ":material/text_fields:"),
    ("pages/2_Train.py", "2. Train: pretrain a tiny BERT live", ":material/model_training:"),
    ("pages/3_Attention.py", "3. Attention: what each head looks at", ":material/visibility:"),
    ("pages/4_Predictions.py", "4. Predictions: fill in [MASK]s, judge sentence pairs", ":material/target:"),
    ("pages/5_Fine-tune.py", "5. Fine-tune: teach it to classify text", ":material/label:"),
    ("pages/6_Export.py", "6. Export: curves, configuration, figures", ":material/download:"),
]

st.set_page_config(page_title="BERT explorer", layout="wide")
active = app_state.sidebar()

st.title("BERT explorer")
st.markdown(
    "**BERT** (Devlin et al., 2018) is a stack of Transformer encoder layers that reads a whole sentence pair "
    "at once, every token attending to every other. It learns English from raw text with two self-made "
    "exercises: **masked-language modelling** (hide 15% of the word pieces and guess them back) and "
    "**next-sentence prediction** (does sentence B really follow sentence A?). The vectors it learns this way "
    "are then fine-tuned for tasks such as classifying text.\n\n"
    "Here you can train a tiny BERT live on this computer's CPU and watch it learn: its masking, its loss, its "
    "attention heads and its guesses."
)

left, right = st.columns([3, 2])
with left:
    app_state.plotly(architecture_figure(active.config if active else None), "bert-architecture")
with right:
    st.subheader("Walkthrough")
    for page, label, icon in WALKTHROUGH:
        if (ROOT / page).is_file():  # the fine-tuning page may be absent in a trimmed install
            st.page_link(page, label=label, icon=icon)
    st.subheader("The active model")
    if active is None:
        st.info("No model is active yet. Pick one in the sidebar, or train one on the Train page.")
    else:
        st.markdown(active.description)
    st.caption("Choose the model in the sidebar once; every page uses it. The architecture picture shows its "
               "sizes (letters when no model is loaded).")
