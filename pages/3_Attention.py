"""Attention: every head at once, one head large, one token across heads, heads labelled by what they do, and
two models side by side (BERT beside GPT) for the same text."""

import numpy as np
import streamlit as st

from bert_core.data.treebank import UD_EWT_HOME, UD_EWT_LABEL, UD_EWT_MB, UD_EWT_NAME, fetch_treebank, local_treebank
from bert_core.errors import BertCoreError
from bert_core.inspect import figures, lesson_figures, syntax_heads
from bert_core.inspect.safe_text import markdown
from bert_core.inspect.inspection import AttentionResult, attention_maps, head_summaries, hide_special_tokens
from bert_core.app import app_drawing, app_models, app_sidebar, app_tab, app_widgets, page_copy

WORDS = page_copy.WORDS["attention"]

TABS = ("Model view", "Head view", "Token view", "What heads do", "Time-lapse", "Side by side", "B → A over pairs")
TIME_LAPSE_ZMAX = 1.0  # one colour scale for every step of the time-lapse
# Each widget's first value, and how a link's text reads as one (the sentence follows the model: main).
WIDGETS = {"att_b": ("", str), "att_hide": (False, lambda v: str(v).lower() in ("1", "true")), "att_layer": (1, int),
           "att_head": (1, int), "att_measure": ("[CLS]", str), "att_token": (1, int), "att_pair_layer": (1, int),
           "att_pair_head": ("mean", str), "att_tab": (TABS[0], str)}

def _syntax(active, treebank):
    """The heads that follow syntax: measured once per model when asked for (What heads do), else None."""
    if treebank is None or not st.session_state.get("att_syntax"):
        return None
    try:
        with st.spinner("Reading the treebank's sentences through the model…"):
            return syntax_heads.treebank_syntax_heads(active.model, active.tokenizer, str(treebank))
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        return None


def _model_view(result, labels) -> None:
    """Every head at once."""
    app_drawing.plotly(figures.model_view_figure(result, labels), "attention-model-view", key="att_model")
    st.caption(WORDS["heatmap_caption"])


def _head_view(active, result, labels, treebank) -> None:
    """One head large; the picker names the heads that follow syntax once they are measured."""
    cfg, syntax = active.config, _syntax(active, treebank)
    h1, h2 = st.columns(2)
    h1.selectbox("Layer", list(range(1, cfg.num_hidden_layers + 1)), key="att_layer")
    follows = [syntax_heads.head_label(syntax, st.session_state["att_layer"] - 1, h) if syntax else ""
               for h in range(cfg.num_attention_heads)]
    h2.selectbox("Head", list(range(1, cfg.num_attention_heads + 1)), key="att_head",
                 format_func=lambda h: f"{h} · follows {follows[h - 1]}" if follows[h - 1] else str(h))
    layer, head = st.session_state["att_layer"] - 1, st.session_state["att_head"] - 1
    app_drawing.plotly(figures.head_view_figure(result, layer, head, labels[layer * cfg.num_attention_heads + head]),
                       f"attention-L{layer + 1}-H{head + 1}", key="att_head_view")


def _token_view(result) -> None:
    """One token across every head: where it looks, or who looks at it."""
    t1, t2 = st.columns([3, 1])
    app_widgets.kept_choice(t1.selectbox, "Token", range(len(result.tokens)), "att_token",
                            min(1, len(result.tokens) - 1), format_func=lambda i: f"{i}: {result.tokens[i]}")
    direction = t2.radio("Direction", ["from", "to"], horizontal=True,
                         format_func={"from": "where it looks", "to": "who looks at it"}.get)
    app_drawing.plotly(figures.token_view_figure(result, st.session_state["att_token"], direction),
                       "attention-token-view", key="att_token_view")


def _what_heads_do(active, full, summaries, treebank) -> None:
    """Each head's measures and label, and the heads that follow syntax."""
    syntax = _syntax(active, treebank)
    n_tokens = len(full.tokens)
    st.markdown(WORDS["head_measures_intro"].format(n_tokens=n_tokens, most_bits=np.log2(n_tokens)))
    st.selectbox("Colour by", list(figures.HEAD_MEASURES), key="att_measure")
    app_drawing.plotly(figures.head_summary_figure(summaries, st.session_state["att_measure"]), "attention-heads",
                       key="att_summary")
    st.dataframe([{"layer": s.layer + 1, "head": s.head + 1, "label": s.label, "[CLS]": round(s.to_cls, 3),
                   "[SEP]": round(s.to_sep, 3), "previous": round(s.to_previous, 3), "next": round(s.to_next, 3),
                   "self": round(s.to_self, 3), "entropy (bits)": round(s.entropy, 2),
                   "evenness (0-1)": round(s.normalized_entropy, 2)} for s in summaries],
                 hide_index=True, width="stretch")
    st.markdown(WORDS["syntax_heads_intro"])
    if treebank is None:
        app_widgets.fetch_box(UD_EWT_LABEL, UD_EWT_MB, "att_fetch_ud",
                              lambda progress: fetch_treebank(progress=progress), UD_EWT_NAME, home=UD_EWT_HOME)
    st.toggle("Find the heads that follow syntax (seconds, once per model)", key="att_syntax",
              disabled=treebank is None)
    if syntax is not None:
        app_drawing.plotly(syntax_heads.syntax_heads_figure(syntax), "attention-syntax-heads", key="att_syntax_fig")
        st.dataframe(syntax_heads.relation_rows(syntax), hide_index=True, width="stretch", height=260)
        skipped = f"; {syntax.skipped} sentences over {syntax_heads.MAX_PIECES} pieces left out" if syntax.skipped \
            else ""
        st.caption(WORDS["syntax_heads_caption"].format(words=syntax.words, sentences=syntax.sentences,
                                                        treebank=UD_EWT_LABEL, seconds=syntax.seconds,
                                                        skipped=skipped))


def _time_lapse(active, full) -> None:
    """The probe sentence's attention at each snapshot of this session's run."""
    job = app_tab.current_job()
    probes = job.trainer.probes if job is not None and job.trainer is not None else None
    snaps = [s for s in (probes.snapshots() if probes is not None else []) if s.attention is not None]
    if active.source != app_models.SOURCE_SESSION or not snaps:
        st.info(WORDS["timelapse_needs_run"])
    else:
        steps = [s.step for s in snaps]
        step = st.select_slider("Training step", steps, value=steps[-1], key="att_step")
        snap = snaps[steps.index(step)]
        tokens = list(snap.attention_tokens)
        specials = [t in ("[CLS]", "[SEP]", "[PAD]") for t in tokens]
        snap_result = AttentionResult(tokens=tokens, attentions=np.asarray(snap.attention, dtype=np.float32),
                                      token_type_ids=[0] * len(tokens), special_mask=specials, causal=full.causal)
        snap_labels = [s.label for s in head_summaries(snap_result)]
        if st.session_state["att_hide"]:
            snap_result = hide_special_tokens(snap_result)
        st.caption(WORDS["timelapse_step_caption"].format(sentence=markdown(probes.attention_sentence), step=step))
        app_drawing.plotly(figures.model_view_figure(snap_result, snap_labels, zmax=TIME_LAPSE_ZMAX),
                           f"attention-step{step}", key="att_time")


def _side_by_side(active, result) -> None:
    """A second model's attention for the same text (BERT beside its GPT twin)."""
    cfg = active.config
    others = app_tab.other_models(active)   # e.g. this tab's run with NSP off, the GPT twin
    if not others:
        st.info(WORDS["compare_needs_checkpoint"])
    else:
        p1, p2, p3 = st.columns([2, 1, 1])
        app_widgets.kept_choice(p1.selectbox, "Beside this model", others, "att_other")
        try:
            other_model, other_tokenizer, _ = app_models.load_folder_cached(others[st.session_state["att_other"]])
            other = attention_maps(other_model, other_tokenizer, st.session_state["att_a"],
                                   st.session_state["att_b"] or None)
            if st.session_state["att_hide"]:
                other = hide_special_tokens(other)
        except BertCoreError as exc:
            app_drawing.show_error(exc)
        else:
            layers = max(cfg.num_hidden_layers, other_model.config.num_hidden_layers)
            heads = max(cfg.num_attention_heads, other_model.config.num_attention_heads)
            app_widgets.kept_choice(p2.selectbox, "Layer", range(1, layers + 1), "att_pair_layer")
            app_widgets.kept_choice(p3.selectbox, "Head", ["mean", *map(str, range(1, heads + 1))], "att_pair_head",
                                    format_func=lambda h: "mean of the layer's heads" if h == "mean" else h)
            head = st.session_state["att_pair_head"]
            this = active.path.name if active.path is not None else active.source
            app_drawing.plotly(figures.side_by_side_figure(
                [(this, result), (st.session_state["att_other"], other)], st.session_state["att_pair_layer"] - 1,
                None if head == "mean" else int(head) - 1), "attention-side-by-side", key="att_pair")
            st.caption(WORDS["compare_tokenizers_caption"])


def _b_to_a(active) -> None:
    """Sentence B's attention on sentence A, for pairs that follow and random ones."""
    job = app_tab.current_job()
    trainer = job.trainer if job is not None else None   # a race's has no tokenizer or data of its own
    if trainer is not None and trainer.tokenizer is active.tokenizer and trainer.data is not None:
        data, data_name = job.trainer.data, f"this session's training corpus ({job.spec.corpus_label})"
    else:
        data, data_name = app_models.toy_pretraining_data(active), "the toy grammar corpus"
    try:
        pairs = app_models.pair_attention(active, f"{id(data)}:{data_name}", data.build_instances(0))
    except BertCoreError as exc:
        app_drawing.show_error(exc)
    else:
        app_drawing.plotly(lesson_figures.pair_attention_figure(pairs), "attention-b-to-a", key="att_nsp")
        diff = pairs.difference
        layer, head = np.unravel_index(int(np.nanargmax(np.abs(diff))), diff.shape)
        st.caption(WORDS["b_to_a_caption"].format(count=pairs.pairs_follow + pairs.pairs_random, data_name=data_name,
                                                  uniform=pairs.uniform, layer=layer + 1, head=head + 1,
                                                  follows=pairs.follows[layer, head], random=pairs.random[layer, head]))


def main() -> None:
    active = app_sidebar.open_page("Attention")
    st.markdown(WORDS["head_view_intro"])
    if active is None:
        st.stop()

    # The default sentence: a toy story for a model that has read only the toy grammar, else a plain English sentence
    # whose every word is one piece of its vocabulary; it follows the model until the student types another.
    app_widgets.follow_default("att_a", app_models.model_probes(active).attention_sentence)
    for key, (default, cast) in WIDGETS.items():
        app_widgets.init_widget(key, default, cast)
    app_widgets.persist_keys("att_a", *WIDGETS, "att_other", "att_syntax")

    c1, c2 = st.columns(2)
    c1.text_area("Sentence A", key="att_a", height=80)
    c2.text_area("Sentence B (optional)", key="att_b", height=80)
    st.checkbox("Hide [CLS] and [SEP], renormalising each row over the other tokens", key="att_hide")

    cfg = active.config
    st.session_state["att_layer"] = min(max(int(st.session_state["att_layer"]), 1), cfg.num_hidden_layers)
    st.session_state["att_head"] = min(max(int(st.session_state["att_head"]), 1), cfg.num_attention_heads)

    try:
        result = attention_maps(active.model, active.tokenizer, st.session_state["att_a"],
                                st.session_state["att_b"] or None)
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        st.stop()
    if result.truncated:
        st.warning(f"The text is longer than the model's {cfg.max_position_embeddings} positions: it was truncated.")
    full = result
    if st.session_state["att_hide"]:
        try:
            result = hide_special_tokens(result)
        except BertCoreError as exc:
            app_drawing.show_error(exc)
            st.stop()
    summaries = head_summaries(full)
    labels = [s.label for s in summaries]
    if full.causal:
        st.info(WORDS["causal_triangle_note"])
    # Lazy tabs: only the open one runs. A class watching a run gets a new weight copy every few seconds, and the
    # B → A tab's 128 pairs through every head (or the syntax measure) on each kept every viewer waiting.
    if st.session_state["att_tab"] not in TABS:   # a mistyped ?att_tab=
        st.session_state["att_tab"] = TABS[0]
    tabs = st.tabs(TABS, key="att_tab", on_change="rerun")
    treebank = local_treebank()
    views = [lambda: _model_view(result, labels), lambda: _head_view(active, result, labels, treebank),
             lambda: _token_view(result), lambda: _what_heads_do(active, full, summaries, treebank),
             lambda: _time_lapse(active, full), lambda: _side_by_side(active, result), lambda: _b_to_a(active)]
    for tab, view in zip(tabs, views):
        if tab.open:
            with tab:
                view()
    app_widgets.sync_query("att_a", "att_b", "att_hide", "att_layer", "att_head", "att_measure", "att_token",
                           "att_tab")


main()
