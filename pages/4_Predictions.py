"""Predictions: the model's top-k words for each [MASK], next-sentence probability, and the unigram baseline."""

import streamlit as st

from bert_core import app_state, figures
from bert_core.errors import BertCoreError
from bert_core.inspection import (context_before, encode_input, group_word_pieces, predict_masks, predict_nsp,
                                  text_with_word_masked, unigram_top_k, word_text)

st.set_page_config(page_title="Predictions · BERT explorer", layout="wide")
active = app_state.sidebar()
st.title("Predictions")
if active is None:
    st.stop()

# Default sentences from the active model's own held-out text (a toy story for a model trained on toy), following
# the model until the student types their own.
examples = app_state.model_probes(active)
app_state.follow_default("pred_text", examples.sentences[0])
app_state.init_widget("pred_k", 5, int)
app_state.follow_default("nsp_a", examples.pair[0])
app_state.follow_default("nsp_b", examples.pair[1])
app_state.persist_keys("pred_text", "pred_k", "nsp_a", "nsp_b")

st.subheader("Fill in the blanks")
st.text_area("Text with one or more [MASK]", key="pred_text", height=80)
st.slider("Candidates per mask (k)", 1, 20, key="pred_k")
tok = active.tokenizer
max_len = active.config.max_position_embeddings


def _mask_word(words: list[list[str]], pick: int) -> None:
    # A callback: it runs before the text box is drawn again, so it may change its value.
    st.session_state["pred_text"] = text_with_word_masked(words, pick)


with st.expander("…or pick a word to mask"):
    try:
        words = group_word_pieces(encode_input(tok, st.session_state["pred_text"], max_length=max_len).tokens[1:-1])
    except BertCoreError:
        words = []
    choices = [i for i, w in enumerate(words) if w != ["[MASK]"]]
    if choices:
        pick = st.selectbox("Word to hide", choices, key="pred_pick",
                            format_func=lambda i: f"{i + 1}: {word_text(words[i])}")
        st.button("Mask it", on_click=_mask_word, args=(words, pick))
    else:
        st.caption("Type some text first.")

counts = active.unigram_counts()
baseline = unigram_top_k(counts, tok, st.session_state["pred_k"]) if counts else None
try:
    encoded = encode_input(tok, st.session_state["pred_text"], max_length=max_len)
    if encoded.truncated:
        st.warning(f"The text is longer than the model's {max_len} positions: {encoded.dropped_tokens} word "
                   "pieces at the end were cut off.")
    preds = predict_masks(active.model, tok, encoded, st.session_state["pred_k"])
except BertCoreError as exc:
    app_state.show_error(exc)
    preds = []
if preds and baseline is None:
    st.caption("No unigram counts are recorded for this model (e.g. a Hugging Face download), so no baseline.")
cols = st.columns(min(len(preds), 3) or 1)
for n, pred in enumerate(preds):
    context = context_before(encoded.tokens, pred.position)
    with cols[n % len(cols)]:
        app_state.plotly(figures.topk_figure(pred.candidates, f"[MASK] {n + 1}: …{context}", baseline),
                         f"mask-{n + 1}", key=f"pred_fig_{n}")

st.subheader("Does sentence B follow sentence A?")
n1, n2 = st.columns(2)
n1.text_input("Sentence A", key="nsp_a")
n2.text_input("Sentence B", key="nsp_b")
try:
    p = predict_nsp(active.model, tok, st.session_state["nsp_a"], st.session_state["nsp_b"])
    st.metric("P(B follows A)", f"{p:.1%}",
              help="The NSP head's probability for class 0 (B is the real next sentence). Chance is 50%: "
                   "pretraining draws B at random half the time.")
    st.progress(p)
except BertCoreError as exc:
    app_state.show_error(exc)

st.subheader("How the guesses changed during training")
job = app_state.current_job()
probes = job.trainer.probes if job is not None and job.trainer is not None else None
snaps = probes.snapshots() if probes is not None else []
if active.source != app_state.SOURCE_SESSION or not snaps:
    st.info("Probe sentences are filled in at snapshots while a model trains in this session. Train one on the "
            "Train page and pick *Model trained in this session* to see its guesses evolve.")
else:
    sentence = st.selectbox("Probe sentence", list(range(len(probes.sentences))),
                            format_func=lambda i: probes.sentences[i], key="pred_probe")
    history = [(s.step, s.predictions[sentence][0]) for s in snaps if s.predictions and s.predictions[sentence]]
    app_state.plotly(figures.topk_history_figure(history, f"“{probes.sentences[sentence]}”"), "probe-history",
                     key="pred_history")
    st.caption(f"The candidates that were ever among the model's top 3 at a snapshot (special tokens left out), "
               f"at most {figures.HISTORY_CANDIDATES}; a gap means the word was outside that snapshot's top "
               f"{probes.top_k}.")

app_state.sync_query("pred_text", "pred_k", "nsp_a", "nsp_b")
