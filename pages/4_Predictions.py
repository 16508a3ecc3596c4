"""Predictions: a BERT's top-k words for each [MASK], next-sentence probability and the unigram baseline; a
GPT-style (causal) model's continuation of a text, token by token."""

import streamlit as st

from bert_core.errors import BertCoreError
from bert_core.inspect import figures, generation
from bert_core.inspect.safe_text import markdown
from bert_core.inspect.inspection import (
    BIDIRECTIONAL_CANNOT_CONTINUE,
    CAUSAL_CANNOT_FILL,
    context_before,
    encode_input,
    group_word_pieces,
    is_causal,
    predict_masks,
    predict_nsp,
    text_with_word_masked,
    unigram_top_k,
    word_text,
)
from bert_core.app import app_drawing, app_models, app_sidebar, app_tab, app_widgets, page_copy
from bert_core.app.url_settings import Within

WORDS = page_copy.WORDS["predictions"]

# The numbers' ranges: their widgets', and what a link's value is held to.
TEMPERATURES, TOP_KS, SEEDS, LENGTHS = (Within(0.1, 2.0), Within(0, 1000),
                                        Within(0, 2**31 - 1), Within(1, 60))
CANDIDATES = Within(1, 20)
GEN_KEYS = ("gen_prompt", "gen_strategy", "gen_temperature", "gen_top_k", "gen_seed", "gen_tokens")


def _generation_widgets(examples, note: str) -> None:
    app_widgets.follow_default("gen_prompt", examples.prompt)
    app_widgets.init_widget("gen_strategy", "greedy")
    app_widgets.init_widget("gen_temperature", 1.0, TEMPERATURES)
    app_widgets.init_widget("gen_top_k", 0, TOP_KS)
    app_widgets.init_widget("gen_seed", 0, SEEDS)
    app_widgets.init_widget("gen_tokens", 20, LENGTHS)
    app_widgets.persist_keys(*GEN_KEYS)
    st.text_area("The start of a text", key="gen_prompt", height=80)
    if note:
        st.caption(note)
    g1, g2, g3, g4 = st.columns(4)
    g1.radio("Decoding", list(generation.STRATEGIES), key="gen_strategy", horizontal=True,
             format_func={"greedy": "greedy (most likely)", "sample": "sampled"}.get)
    sampled = st.session_state["gen_strategy"] == "sample"
    g2.slider("Temperature", *TEMPERATURES, step=0.1, key="gen_temperature", disabled=not sampled,
              help=WORDS["sampling_temperature_help"])
    g3.number_input("Top-k (0 = all tokens)", *TOP_KS, key="gen_top_k", disabled=not sampled)
    g4.number_input("Seed", *SEEDS, key="gen_seed", disabled=not sampled,
                    help="The same seed draws the same text.")
    st.slider("New tokens", *LENGTHS, key="gen_tokens")


def _continue_text(active, examples, note: str) -> None:
    """A GPT-style model's page: its continuation of a text, token by token."""
    st.info(CAUSAL_CANNOT_FILL)
    st.subheader("Continue the text")
    _generation_widgets(examples, note)
    state = st.session_state
    try:
        out = generation.generate(active.model, active.tokenizer, state["gen_prompt"],
                                  max_new_tokens=int(state["gen_tokens"]), strategy=state["gen_strategy"],
                                  temperature=float(state["gen_temperature"]), top_k=int(state["gen_top_k"]),
                                  seed=int(state["gen_seed"]))
    except BertCoreError as exc:
        app_drawing.show_error(exc)
    else:
        if out.truncated_prompt:
            st.warning(WORDS["prompt_cut"].format(left_out=out.truncated_prompt))
        st.markdown(f"{markdown(state['gen_prompt'].strip())} **{markdown(out.text)}**")
        st.caption(WORDS["generation_caption"].format(stopped=out.stopped))
        st.dataframe(generation.step_rows(out), hide_index=True, width="stretch")
    app_widgets.sync_query(*GEN_KEYS)


def _mask_word(words: list[list[str]], pick: int) -> None:
    # A callback: it runs before the text box is drawn again, so it may change its value.
    st.session_state["pred_text"] = text_with_word_masked(words, pick)


def _word_picker(tok, max_len: int) -> None:
    with st.expander("…or pick a word to mask"):
        try:
            words = group_word_pieces(encode_input(tok, st.session_state["pred_text"],
                                                   max_length=max_len).tokens[1:-1])
        except BertCoreError:
            words = []
        choices = [i for i, w in enumerate(words) if w != ["[MASK]"]]
        if choices:
            pick = st.selectbox("Word to hide", choices, key="pred_pick",
                                format_func=lambda i: f"{i + 1}: {word_text(words[i])}")
            st.button("Mask it", on_click=_mask_word, args=(words, pick))
        else:
            st.caption("Type some text first.")


def _fill_in(active, note: str) -> list:
    """The text's [MASK]s filled by the model, beside the unigram baseline; returns the predictions."""
    st.subheader("Fill in the blanks")
    st.text_area("Text with one or more [MASK]", key="pred_text", height=80)
    if note:
        st.caption(note)
    st.slider("Candidates per mask (k)", *CANDIDATES, key="pred_k")
    tok, max_len = active.tokenizer, active.config.max_position_embeddings
    _word_picker(tok, max_len)
    counts = active.unigram_counts()
    baseline = unigram_top_k(counts, tok, st.session_state["pred_k"]) if counts else None
    try:
        encoded = encode_input(tok, st.session_state["pred_text"], max_length=max_len)
        if encoded.truncated:
            st.warning(WORDS["text_cut"].format(max_len=max_len, dropped=encoded.dropped_tokens))
        preds = predict_masks(active.model, tok, encoded, st.session_state["pred_k"])
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        preds = []
    if preds and baseline is None:
        st.caption("No unigram counts are recorded for this model (e.g. a Hugging Face download), so no baseline.")
    cols = st.columns(min(len(preds), 3) or 1)
    for n, pred in enumerate(preds):
        context = context_before(encoded.tokens, pred.position)
        with cols[n % len(cols)]:
            app_drawing.plotly(figures.topk_figure(pred.candidates, f"[MASK] {n + 1}: …{context}", baseline),
                               f"mask-{n + 1}", key=f"pred_fig_{n}")
    return preds


def _other_model(active, preds: list) -> None:
    with st.expander("The same text with another model (e.g. an earlier run of this tab, NSP off)"):
        others = app_tab.other_models(active)
        if not others:
            st.caption(WORDS["compare_needs_model"])
            return
        if not preds:   # the text's fault is said once, above: the other model reads the same text
            st.caption("Once the text above has a [MASK] the model can fill, the other model fills it here too.")
            return
        app_widgets.kept_choice(st.selectbox, "Beside this model", others, "pred_other")
        try:
            other_model, other_tok, _ = app_models.load_folder_cached(others[st.session_state["pred_other"]])
            if is_causal(other_model):
                st.info(CAUSAL_CANNOT_FILL)
                return
            other_encoded = encode_input(other_tok, st.session_state["pred_text"],
                                         max_length=other_model.config.max_position_embeddings)
            other_preds = predict_masks(other_model, other_tok, other_encoded, st.session_state["pred_k"])
            other_cols = st.columns(min(len(other_preds), 3) or 1)
            for n, pred in enumerate(other_preds):
                with other_cols[n % len(other_cols)]:
                    app_drawing.plotly(figures.topk_figure(
                        pred.candidates, f"{st.session_state['pred_other']}: [MASK] {n + 1}"),
                        f"mask-{n + 1}-other", key=f"pred_other_fig_{n}")
            st.caption("Each model reads the text with its own tokenizer; its unigram line is left out here.")
        except BertCoreError as exc:
            app_drawing.show_error(exc)


def _next_sentence(active) -> None:
    st.subheader("Does sentence B follow sentence A?")
    n1, n2 = st.columns(2)
    n1.text_input("Sentence A", key="nsp_a")
    n2.text_input("Sentence B", key="nsp_b")
    try:
        p = predict_nsp(active.model, active.tokenizer, st.session_state["nsp_a"], st.session_state["nsp_b"])
        st.metric("P(B follows A)", f"{p:.1%}", help=WORDS["nsp_help"])
        st.progress(p)
    except BertCoreError as exc:
        app_drawing.show_error(exc)


def _probe_history(active) -> None:
    st.subheader("How the guesses changed during training")
    job = app_tab.current_job()
    probes = job.trainer.probes if job is not None and job.trainer is not None else None
    snaps = probes.snapshots() if probes is not None else []
    if active.source != app_models.SOURCE_SESSION or not snaps:
        st.info(WORDS["history_needs_run"])
        return
    sentence = st.selectbox("Probe sentence", list(range(len(probes.sentences))),
                            format_func=lambda i: probes.sentences[i], key="pred_probe")
    history = [(s.step, s.predictions[sentence][0]) for s in snaps if s.predictions and s.predictions[sentence]]
    app_drawing.plotly(figures.topk_history_figure(history, f"“{probes.sentences[sentence]}”"), "probe-history",
                       key="pred_history")
    st.caption(WORDS["history_caption"].format(most=figures.HISTORY_CANDIDATES, top_k=probes.top_k))


def main() -> None:
    active = app_sidebar.open_page("Predictions")
    if active is None:
        st.stop()
    # Default sentences: a toy story for a model that has read only the toy grammar, else plain English the model
    # gets right; they follow the model until the student types their own. The note says what it gets wrong.
    examples = app_models.model_probes(active)
    note = app_models.examples_note(active, examples)
    if is_causal(active.model):
        _continue_text(active, examples, note)
        st.stop()
    st.info(BIDIRECTIONAL_CANNOT_CONTINUE)
    app_widgets.follow_default("pred_text", examples.sentences[0])
    app_widgets.init_widget("pred_k", 5, CANDIDATES)
    app_widgets.follow_default("nsp_a", examples.pair[0])
    app_widgets.follow_default("nsp_b", examples.pair[1])
    app_widgets.persist_keys("pred_text", "pred_k", "nsp_a", "nsp_b")
    preds = _fill_in(active, note)
    _other_model(active, preds)
    _next_sentence(active)
    _probe_history(active)
    app_widgets.sync_query("pred_text", "pred_k", "nsp_a", "nsp_b")


main()
