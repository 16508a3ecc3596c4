"""Tokens & masking: what one pretraining example looks like to the model, and how its tokens get masked."""

import streamlit as st

from bert_core.data.pretraining_data import MASK_RATE
from bert_core.errors import BertCoreError
from bert_core.inspect import figures, lesson_figures
from bert_core.inspect.inspection import encode_input, guesses_for_instance, mask_example, masking_stats
from bert_core.inspect.safe_text import markdown
from bert_core.app import app_drawing, app_models, app_sidebar, app_tab, app_widgets, page_copy
from bert_core.app.url_settings import Within, one_of

WORDS = page_copy.WORDS["tokens"]

# The numbers' ranges: their widgets', and what a link's value is held to.
PAIRS, SEEDS, RATES = Within(0, 1_000_000), Within(0, 2**31 - 1), Within(0.05, 0.5)
KEYS = ("tm_mode", "tm_pair_seed", "tm_a", "tm_b", "tm_seed", "tm_rate")


def _corpus_data(active):
    """Pretraining data to draw pairs from: this session's training corpus when it uses this tokenizer, else toy."""
    job = app_tab.current_job()
    if job is not None and job.trainer is not None and job.trainer.tokenizer is active.tokenizer:
        label = markdown(job.spec.corpus_label) if job.spec else ""   # an uploaded file's name: shown as written
        return job.trainer.data, f"this session's training corpus ({label})"
    return app_models.toy_pretraining_data(active), "the toy grammar corpus (200 documents)"


@st.cache_resource(max_entries=8, show_spinner=False)
def _instances(key: str, _data, seed: int):
    return _data.build_instances(seed)


def _init_widgets() -> None:
    app_widgets.init_widget("tm_mode", "draw", one_of(("draw", "type"), "no such choice"))
    app_widgets.init_widget("tm_pair_seed", 0, PAIRS)
    app_widgets.init_widget("tm_a", "the cat sat on the mat .")
    app_widgets.init_widget("tm_b", "it was tired after the long day .")
    app_widgets.init_widget("tm_seed", 0, SEEDS)
    app_widgets.init_widget("tm_rate", MASK_RATE, RATES)
    app_widgets.persist_keys(*KEYS)


def _pair(active, data, data_name: str) -> tuple[list[int], list[int]]:
    """The pair to mask, drawn from the corpus or typed: its ids and segments."""
    st.radio("Sentence pair", ["draw", "type"], key="tm_mode", horizontal=True,
             format_func={"draw": "draw one from the corpus", "type": "type my own"}.get)
    if st.session_state["tm_mode"] == "draw":
        st.number_input("Pair number (each number draws another pair)", *PAIRS, key="tm_pair_seed")
        instances = _instances(f"{id(data)}:{data_name}", data, int(st.session_state["tm_pair_seed"]) // 50)
        instance = instances[int(st.session_state["tm_pair_seed"]) % min(50, len(instances))]
        label = "1: B is random" if instance.is_random_next else "0: B follows A"
        a_doc, a_first, a_end = instance.a_span
        b_doc, b_first, b_end = instance.b_span
        st.markdown(WORDS["drawn_pair_caption"].format(data_name=data_name, label=label, note=instance.note,
                                                       a_doc=a_doc, a_first=a_first, a_last=a_end - 1,
                                                       b_doc=b_doc, b_first=b_first, b_last=b_end - 1))
        return instance.input_ids, instance.token_type_ids
    c1, c2 = st.columns(2)
    c1.text_area("Sentence A", key="tm_a", height=70)
    c2.text_area("Sentence B (optional)", key="tm_b", height=70)
    try:
        enc = encode_input(active.tokenizer, st.session_state["tm_a"], st.session_state["tm_b"] or None,
                           max_length=active.config.max_position_embeddings)
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        st.stop()
    if enc.truncated:
        st.warning(f"Longer than the model's {enc.max_length} positions: {enc.dropped_tokens} word pieces cut.")
    st.caption("A pair you typed has no NSP label: the label says whether the corpus had B right after A.")
    return enc.input_ids, enc.token_type_ids


def _masked_pair(active, input_ids, token_type_ids, seed: int, rate: float) -> None:
    """The pair's masking, the model's guess at each chosen position, and the token table."""
    tok = active.tokenizer
    rows = mask_example(tok, input_ids, token_type_ids, seed=seed, mask_rate=rate)
    app_drawing.plotly(figures.masking_figure(rows), "masking", key="tm_masking")
    st.caption(WORDS["mask_colours_legend"])
    if not active.causal:
        guesses = guesses_for_instance(active.model, tok, input_ids, token_type_ids, seed=seed, mask_rate=rate)
        app_drawing.plotly(lesson_figures.guesses_figure(guesses), "masked-guesses", key="tm_guesses")
        st.caption(WORDS["guesses_right_caption"].format(right=sum(g.right for g in guesses), chosen=len(guesses)))
    else:
        st.caption(WORDS["gpt_cannot_guess_masks"])
    with st.expander("Token table: ids, segments, positions"):
        st.dataframe([{"position": r.position, "token": r.token, "id": r.token_id,
                       "segment": "AB"[min(r.segment, 1)], "decision": r.decision, "model sees": r.shown}
                      for r in rows], hide_index=True, width="stretch")


def _accuracy(active, key: str, instances, seed: int, rate: float) -> None:
    """The active model's right guesses by decision over the batch's first pairs, and what they say."""
    accuracy = app_models.decision_accuracy(active, key, instances, seed, rate)
    app_drawing.plotly(lesson_figures.decision_accuracy_bars(
        accuracy, f"The active model's right guesses by decision, {sum(a.count for a in accuracy.values()):,} "
                  "chosen tokens"), "accuracy-by-decision", key="tm_accuracy")
    kept, masked = accuracy["kept"].accuracy, accuracy["[MASK]"].accuracy
    st.caption(f"Over the first {app_models.DECISION_POOL} of those pairs with the same masking: kept tokens "
               f"{kept:.0%} right, [MASK]ed ones {masked:.0%}, random ones {accuracy['random'].accuracy:.0%}. "
               + ("Kept tokens are the easy ones: the answer is in the input. "
                  if kept > masked + 0.2 else
                  WORDS["kept_tokens_not_easier"])
               + ("A random token is the hardest: the input shows a wrong word."
                  if accuracy["random"].accuracy == min(a.accuracy for a in accuracy.values()) else
                  "A random token shows a wrong word: the model must learn not to trust it."))


def _large_batch(active, data, data_name: str, seed: int, rate: float) -> None:
    st.subheader("Over a large batch")
    key = f"{id(data)}:{data_name}"
    pool = [x.input_ids for x in _instances(key, data, seed)[:512]]
    stats = masking_stats(active.tokenizer, pool, seed=seed, mask_rate=rate)
    app_drawing.plotly(figures.decision_counts_figure(stats), "masking-counts", key="tm_counts")
    st.caption(WORDS["batch_masking_caption"].format(
        pairs=stats["instances"], data_name=data_name, chosen=stats["chosen"], candidates=stats["candidates"],
        chosen_share=stats["chosen_share"], masked_share=stats["masked_share"], random_share=stats["random_share"],
        kept_share=stats["kept_share"]))
    if not active.causal:
        _accuracy(active, key, _instances(key, data, seed), seed, rate)


def main() -> None:
    active = app_sidebar.open_page("Tokens & masking")
    st.markdown(WORDS["input_and_masking_intro"])
    if active is None:
        st.stop()
    _init_widgets()
    try:
        data, data_name = _corpus_data(active)
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        st.stop()
    input_ids, token_type_ids = _pair(active, data, data_name)
    m1, m2 = st.columns(2)
    m1.number_input("Masking seed (same seed, same masks)", *SEEDS, key="tm_seed")
    m2.slider("Mask rate", *RATES, step=0.01, key="tm_rate")
    seed, rate = int(st.session_state["tm_seed"]), float(st.session_state["tm_rate"])
    _masked_pair(active, input_ids, token_type_ids, seed, rate)
    _large_batch(active, data, data_name, seed, rate)
    app_widgets.sync_query(*KEYS)


main()
