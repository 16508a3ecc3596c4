"""How BERT computes: one token through one attention head step by step, each layer's guess, heads switched off,
the embeddings, and a grammar check; all on the active model (BERT or its GPT twin)."""

import streamlit as st

from bert_core.errors import BertCoreError
from bert_core.inspect import computation_figures as cf
from bert_core.inspect.attention_steps import (attention_steps, encode_for_steps, heads_off_effect, logit_lens,
                                               with_temperature)
from bert_core.inspect.embeddings import (SENSE_SENTENCES, cached_token_pool, contextual_neighbours, embedding_parts,
                                          heldout_pool, nearest_neighbours)
from bert_core.inspect import feed_forward as ff
from bert_core.inspect.feed_forward import cached_unit_pool, feed_forward_steps, unit_firing, what_each_step_does
from bert_core.inspect.grammar import NEXT_TOKEN, compare_pair
from bert_core.inspect import head_weights as hw
from bert_core.inspect import whole_pass as wpass
from bert_core.inspect.inspection import is_causal
from bert_core.inspect.layer_probes import conll_layer_probes, verdict
from bert_core.inspect.built_in_text import MINIMAL_PAIRS
from bert_core.inspect.finetune_figures import RUN_LABELS
from bert_core.inspect.safe_text import markdown
from bert_core.inspect.salience import salience_panel_data
from bert_core.inspect.word_map_vectors import word_map
from bert_core.app import app_drawing, app_models, app_sidebar, app_tab, app_widgets, page_copy
from bert_core.app.url_settings import Within
from bert_core.inspect.finetune_kinds import KIND_PAGES
from bert_core.serve.finetune_runs import FINETUNE_PAGE
from bert_core.data.task_downloads import local_task_csv

WORDS = page_copy.WORDS["how_bert_computes"]

OWN_SENTENCES = "your own sentences"
TEMPERATURES = Within(0.1, 5.0)   # the slider's range, and what a link's value is held to
KEYS = ("hbc_a", "hbc_b", "hbc_layer", "hbc_head", "hbc_token", "hbc_temperature", "hbc_lens", "hbc_word",
        "hbc_neighbour", "hbc_pair_a", "hbc_pair_b")
WHY_TITLE = "Why a fine-tuned model decided"
PASS_TITLE = "The whole pass"
TABS = ("Inside attention", "Each layer's guess", "Embeddings", "Grammar check", PASS_TITLE)
# The tab each block of the whole pass opens, and the heading in it to scroll to ("": the tabs themselves).
OPENS = {wpass.EMBEDDINGS: ("Embeddings", ""), wpass.ATTENTION: ("Inside attention", ""),
         wpass.FEED_FORWARD: ("Inside attention", "The feed-forward block"), wpass.HEAD: ("Each layer's guess", "")}


def _init_widgets(active, examples, causal: bool) -> None:
    cfg = active.config
    for key, cast, default in (("hbc_b", str, ""), ("hbc_layer", int, 1), ("hbc_head", int, 1), ("hbc_token", int, 2),
                               ("hbc_temperature", TEMPERATURES, 1.0), ("hbc_word", str, "bank"),
                               ("hbc_neighbour", str, "king")):
        app_widgets.init_widget(key, default, cast)
    for key, default in (("hbc_a", examples.attention_sentence), ("hbc_pair_a", examples.grammar_pair[0]),
                         ("hbc_lens", examples.prompt if causal else examples.sentences[0]),
                         ("hbc_pass", examples.prompt if causal else examples.sentences[0]),
                         ("hbc_pair_b", examples.grammar_pair[1])):   # the model's own, until someone types
        app_widgets.follow_default(key, default)
    app_widgets.persist_keys(*KEYS, "hbc_off", "hbc_emb_token", "hbc_own", "hbc_all_pairs", "hbc_pass_block",
                             "hbc_unit", "hbc_matrix", "hbc_key", "hbc_probes", "hbc_builtin", "hbc_tab")
    # A URL or another model may hold a layer or head this model lacks: clamp to what it has.
    st.session_state["hbc_layer"] = min(max(int(st.session_state["hbc_layer"]), 1), cfg.num_hidden_layers)
    st.session_state["hbc_head"] = min(max(int(st.session_state["hbc_head"]), 1), cfg.num_attention_heads)


def _open_block(key: str, text: str, position: int) -> None:
    """A callback (it runs before the widgets are drawn, so it may set them): the tab that explains the block, its
    layer picked, on the same text and token as the picture."""
    kind, layer = wpass.opened_block(key)
    s = st.session_state
    s["hbc_tab"], s["_hbc_scroll"] = OPENS[kind]
    s["_hbc_opened"] = s.get("_hbc_opened", 0) + 1
    if layer is not None:
        s["hbc_layer"] = layer + 1
    if kind == wpass.HEAD:
        s["hbc_lens"] = text
    else:   # `[CLS] text [SEP]` there: the same pieces up to the followed token
        s["hbc_a"], s["hbc_b"], s["hbc_token"], s["hbc_emb_token"] = text, "", position + 1, position


def _clicked_block(text: str, position: int) -> None:
    points = st.session_state["hbc_pass_fig"].selection.points
    if points and points[0].get("customdata"):
        _open_block(points[0]["customdata"], text, position)


def _whole_pass_tab(active, causal: bool) -> None:
    st.text_input(WORDS["causal_text_label"] if causal else "Text with a [MASK]", key="hbc_pass")
    try:
        wp = wpass.whole_pass(active.model, active.tokenizer, st.session_state["hbc_pass"])
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        return
    where = (st.session_state["hbc_pass"], wp.position)
    app_drawing.plotly(wpass.whole_pass_figure(wp), "whole-pass", key="hbc_pass_fig",
                       on_select=lambda: _clicked_block(*where))
    st.caption(wpass.caption(wp))
    blocks = {b.key: b.name for b in wpass.blocks(wp)}
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    key = app_widgets.kept_choice(c1.selectbox, "Or pick a block", list(blocks), "hbc_pass_block",
                                  format_func=blocks.get)
    c2.button("Open its view", key="hbc_pass_open", on_click=_open_block, args=(key, *where),
              icon=":material/open_in_new:")


def _finished_race():
    """This tab's fine-tuning race (the Fine-tune page's) once it has ended with fine-tuned models: (its run id,
    the race's trainer, its models by name), or (None, None, {})."""
    race, _ = app_tab.current_run(FINETUNE_PAGE)
    trainer = race.job.trainer if race is not None and race.job is not None and not race.active else None
    results = (trainer.results or {}) if trainer is not None else {}
    tuned = {n: r for n, r in results.items() if r.model is not None and r.tokenizer is not None}
    return (race.run_id, trainer, tuned) if tuned else (None, None, {})


def _why_fine_tuned(run_id: str, race, tuned: dict) -> None:
    """The salience panel for one of the race's fine-tuned models and an input typed here (the Fine-tune page has
    its own, beside "try your own sentence"); drawn on request: integrated gradients take about a second."""
    its = KIND_PAGES[race.task_kind]
    st.markdown(f"Your fine-tuning race on the **Fine-tune** page ({its.label.lower()}): which tokens made a "
                "fine-tuned model's answer, and which attention heads it leans on.")
    fields = its.try_fields(race.val_data)
    # Kept when the user leaves the page and comes back, like the page's other widgets.
    app_widgets.persist_keys("hbc_why_model", "hbc_why_on", *(f"hbc_why_{f.key}" for f in fields))
    name = app_widgets.kept_choice(st.selectbox, "Model to explain", tuned, "hbc_why_model",
                                   format_func=lambda n: RUN_LABELS.get(n, n))
    for f in fields:   # the Fine-tune page's inputs, under keys of this page's own
        options, key = dict(f.options), f"hbc_why_{f.key}"
        # A kept value and a widget's own default may not meet (Streamlit warns): the default seeds the value once,
        # and a kept number outside this race's range goes back to it.
        default = options.pop("value", None)
        kept = st.session_state.get(key)
        if kept is None or (f.widget == "number_input" and not options.get("min_value", kept) <= kept
                            <= options.get("max_value", kept)):
            if default is not None:
                st.session_state[key] = default
        getattr(st, f.widget)(f.label, key=key, **options)
    explained = its.explained({f.key: st.session_state.get(f"hbc_why_{f.key}") for f in fields}, race.val_data)
    if explained is None:
        st.caption("Type an input above.")
        return
    if not st.toggle("Explain (about a second)", key="hbc_why_on"):
        return
    app_drawing.salience_panel("hbc", salience_panel_data, run_id, name, tuned[name], its.name, explained,
                               race.config.max_length)


def _attention_tab(active, causal: bool) -> None:
    """One token through one head, the head's weights as matrices, then the layer's feed-forward block."""
    steps = _inside_attention(active.model, active.tokenizer, active.config, causal)
    if steps is not None:
        _weights_as_matrices(active.model, steps)
        _feed_forward(active, steps)


def _inside_attention(model, tok, cfg, causal: bool):
    c1, c2 = st.columns(2)
    c1.text_area("Sentence A", key="hbc_a", height=80)
    c2.text_area("Sentence B (optional)", key="hbc_b", height=80)
    try:
        _, _, tokens = encode_for_steps(model, tok, st.session_state["hbc_a"], st.session_state["hbc_b"] or None)
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        return
    st.session_state["hbc_token"] = min(max(int(st.session_state["hbc_token"]), 1), len(tokens))
    p1, p2, p3, p4 = st.columns(4)
    p1.selectbox("Layer", list(range(1, cfg.num_hidden_layers + 1)), key="hbc_layer")
    p2.selectbox("Head", list(range(1, cfg.num_attention_heads + 1)), key="hbc_head")
    p3.selectbox("Query token", list(range(1, len(tokens) + 1)), key="hbc_token",
                 format_func=lambda i: f"{i} {tokens[i - 1]}")
    p4.slider("Temperature (a what-if)", *TEMPERATURES, step=0.1, key="hbc_temperature",
              help=WORDS["what_if_temperature_help"])
    layer, head, query = (int(st.session_state[k]) - 1 for k in ("hbc_layer", "hbc_head", "hbc_token"))
    try:
        steps = attention_steps(model, tok, st.session_state["hbc_a"], layer, head, query,
                                st.session_state["hbc_b"] or None)
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        return
    temperature = float(st.session_state["hbc_temperature"])
    st.markdown(WORDS["query_key_value_intro"].format(number=query + 1, token=markdown(tokens[query]),
                                                      layer=layer + 1, head=head + 1, size=steps.head_dim))
    app_drawing.plotly(cf.vectors_figure(steps), "attention-vectors", key="hbc_vectors")
    what_if = with_temperature(steps, temperature) if temperature != 1.0 else None
    if causal:
        st.caption(WORDS["causal_mask_caption"])
    app_drawing.plotly(cf.scores_figure(steps, temperature, what_if), "attention-scores", key="hbc_scores")
    if what_if is not None:
        st.info(WORDS["what_if_note"].format(temperature=temperature))
    gap = float(abs(steps.probs - steps.model_probs).max())
    st.caption(f"Step 3 is exactly row {query + 1} of layer {layer + 1}, head {head + 1} on the Attention "
               f"page (largest difference from the model's own weights: {gap:.1e}).")
    app_drawing.plotly(cf.context_figure(steps), "attention-context", key="hbc_context")
    st.caption(WORDS["joined_heads_caption"])
    return steps


def _feed_forward(active, steps) -> None:
    st.subheader("The feed-forward block")
    ffn = feed_forward_steps(active.model, steps)
    st.markdown("  \n".join(what_each_step_does(ffn)))
    app_drawing.plotly(ff.feed_forward_figure(ffn), "feed-forward", key="hbc_ffn")
    units = active.config.intermediate_size
    app_widgets.follow_default("hbc_unit", ffn.most_active + 1, int)   # the most active until a unit is picked
    st.session_state["hbc_unit"] = min(max(int(st.session_state["hbc_unit"]), 1), units)
    st.number_input(f"Unit (1 to {units}; first the one most active for this token)", 1, units, key="hbc_unit")
    unit = int(st.session_state["hbc_unit"]) - 1
    app_drawing.plotly(ff.gelu_figure(ffn, unit), "feed-forward-activation", key="hbc_gelu")
    sentences, source = heldout_pool((active.trainer_state or {}).get("metadata"))
    with st.spinner("Reading the pool's sentences through the model (once per model and layer)…"):
        pool = cached_unit_pool(active.model, active.tokenizer, sentences, source, steps.layer)
    app_drawing.plotly(ff.unit_firing_figure(unit_firing(pool, unit)), "feed-forward-unit", key="hbc_unit_fig")


def _weights_as_matrices(model, steps) -> None:
    st.subheader("The weights as matrices")
    st.markdown(WORDS["projections_intro"])
    c1, c2 = st.columns(2)
    name = app_widgets.kept_choice(c1.radio, "Matrix", list(hw.PROJECTIONS), "hbc_matrix", horizontal=True,
                                   format_func=lambda n: f"{hw.PROJECTIONS[n][0]} ({n})")
    labels = cf.token_labels(steps.tokens)
    key = app_widgets.kept_choice(c2.selectbox, "Key token (for W_K and W_V)", range(len(labels)), "hbc_key",
                                  int(steps.probs.argmax()), format_func=lambda i: labels[i],
                                  disabled=name == "query")
    token = steps.query if name == "query" else int(key)
    app_drawing.plotly(hw.projection_figure(hw.head_projection(model, steps, name, token)), "weights-as-matrices",
                       key="hbc_matrix_fig")
    app_drawing.plotly(hw.products_figure(steps), "query-key-products", key="hbc_products")
    st.caption(WORDS["neuron_view_caption"])


def _layers_tab(active, examples, causal: bool) -> None:
    """Each layer's guess (heads switched off too), then what each layer knows."""
    _lens_tab(active, examples, causal)
    _layer_probes(active)


def _lens_tab(active, examples, causal: bool) -> None:
    label = "The start of a text (the model guesses the next token)" if causal else "Text with a [MASK]"
    st.text_input(label, key="hbc_lens")
    note = app_models.examples_note(active, examples)
    if note:
        st.caption(note)
    try:
        lens = logit_lens(active.model, active.tokenizer, st.session_state["hbc_lens"])
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        return
    st.markdown("The model's own prediction head, applied to the hidden state after each layer: what the "
                "answer looks like so far. The last row is the model's real answer"
                + ("." if causal else ", the Predictions page's."))
    app_drawing.plotly(cf.lens_figure(lens), "logit-lens", key="hbc_lens_fig")
    app_drawing.plotly(cf.lens_lines_figure(lens), "logit-lens-lines", key="hbc_lens_lines")
    _heads_off(active)


def _layer_probes(active) -> None:
    st.subheader("What each layer knows")
    st.markdown(WORDS["layer_probes_intro"])
    path = local_task_csv("conll2000")
    if path is None:
        app_widgets.fetch_task_box("conll2000", "hbc_fetch_conll")
        return
    if not st.toggle("Fit the probes (seconds, once per model)", key="hbc_probes"):
        return
    try:
        with st.spinner("Reading 300 sentences through the model and a random one of its shape…"):
            probes = conll_layer_probes(active.model, active.tokenizer, str(path))
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        return
    st.markdown(verdict(probes))
    app_drawing.plotly(cf.layer_probes_figure(probes), "layer-probes", key="hbc_probes_fig")
    st.caption(WORDS["probe_method_caption"].format(
        fit_words=probes.fit_words, fit_sentences=probes.fit_sentences, test_words=probes.test_words,
        test_sentences=probes.test_sentences, fit_s=probes.seconds_fit, read_s=probes.seconds_states))


def _heads_off(active) -> None:
    cfg = active.config
    st.subheader("Switch heads off")
    options = [f"layer {layer}, head {head}" for layer in range(1, cfg.num_hidden_layers + 1)
               for head in range(1, cfg.num_attention_heads + 1)]
    st.session_state["hbc_off"] = [o for o in st.session_state.get("hbc_off", []) if o in options]
    st.multiselect("Heads to switch off (their output set to zero)", options, key="hbc_off")
    chosen = [options.index(o) for o in st.session_state.get("hbc_off", []) if o in options]
    heads = [divmod(i, cfg.num_attention_heads) for i in chosen]
    if not heads:
        st.caption("Pick one or more heads to see how the guess changes without them.")
        return
    # The lens read this text.
    effect = heads_off_effect(active.model, active.tokenizer, st.session_state["hbc_lens"], heads)
    m1, m2 = st.columns(2)
    m1.metric(f"P({markdown(effect.answer)}) with every head", f"{effect.answer_before:.1%}")
    m2.metric("with those heads off", f"{effect.answer_after:.1%}",
              delta=f"{(effect.answer_after - effect.answer_before) * 100:+.1f} points")
    app_drawing.plotly(cf.heads_off_figure(effect), "heads-off", key="hbc_heads_off")


def _embedding_parts(active) -> None:
    model, tok = active.model, active.tokenizer
    try:
        parts = embedding_parts(model, tok, st.session_state["hbc_a"], st.session_state["hbc_b"] or None)
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        return
    token = app_widgets.token_picker("hbc_emb_token", parts.tokens, 1)
    app_drawing.plotly(cf.embedding_parts_figure(parts, token), "embedding-parts", key="hbc_parts")
    app_drawing.plotly(cf.embedding_norms_figure(parts), "embedding-norms", key="hbc_norms")
    st.subheader("Neighbours in context, layer by layer")
    sentences, source = heldout_pool((active.trainer_state or {}).get("metadata"))
    with st.spinner("Reading the pool's sentences through the model (once per model)…"):
        pool = cached_token_pool(model, tok, sentences, source)
    near_in_context = contextual_neighbours(model, tok, st.session_state["hbc_a"], token, pool, k=5)
    app_drawing.plotly(cf.contextual_neighbours_figure(near_in_context), "contextual-neighbours",
                       key="hbc_context_near")
    st.caption(WORDS["neighbours_caption"].format(sentences=len(pool.sentences), tokens=len(pool.tokens),
                                                  source=source))


def _word_map(model, tok) -> None:
    st.subheader("One word in many sentences, layer by layer")
    app_widgets.kept_choice(st.radio, "Word", [*SENSE_SENTENCES, OWN_SENTENCES], "hbc_word", horizontal=True)
    if st.session_state["hbc_word"] == OWN_SENTENCES:
        st.text_area("A word on the first line, then sentences that use it, one a line", key="hbc_own", height=140)
        lines = [x.strip() for x in st.session_state.get("hbc_own", "").splitlines() if x.strip()]
        word, sentences, senses = (lines[0] if lines else ""), lines[1:], None
    else:
        word = st.session_state["hbc_word"]
        sentences = [s for _, s in SENSE_SENTENCES[word]]
        senses = [g for g, _ in SENSE_SENTENCES[word]]
    try:
        wmap = word_map(model, tok, word, sentences, senses)
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        return
    app_drawing.plotly(cf.word_map_figure(wmap), "word-map", key="hbc_map")
    st.caption(WORDS["word_senses_caption"])
    if wmap.skipped:
        st.caption(f"Left out ({len(wmap.skipped)}), the word not found: "
                   + "; ".join(map(markdown, wmap.skipped[:5])))


def _embeddings_tab(active) -> None:
    st.markdown(WORDS["embeddings_intro"])
    _embedding_parts(active)
    st.subheader("Nearest neighbours in the embedding table")
    st.text_input("A word", key="hbc_neighbour")
    try:
        near = nearest_neighbours(active.model, active.tokenizer, st.session_state["hbc_neighbour"], k=10)
    except BertCoreError as exc:
        app_drawing.show_error(exc)
    else:
        app_drawing.plotly(cf.neighbours_figure(st.session_state["hbc_neighbour"].strip(), near), "neighbours",
                           key="hbc_near")
    _word_map(active.model, active.tokenizer)


def _use_pair(index: int) -> None:
    # A callback: it runs before the text boxes are drawn again, so it may set their values.
    st.session_state["hbc_pair_a"] = MINIMAL_PAIRS[index].good
    st.session_state["hbc_pair_b"] = MINIMAL_PAIRS[index].bad


def _grammar_tab(model, tok, causal: bool) -> None:
    method = (WORDS["gpt_score_method"] if causal else WORDS["bert_score_method"])
    st.markdown(WORDS["grammar_scores_intro"].format(method=method))
    pick = st.selectbox("A built-in pair (good sentence first)", list(range(len(MINIMAL_PAIRS))), key="hbc_builtin",
                        format_func=lambda i: f"{MINIMAL_PAIRS[i].category}: {MINIMAL_PAIRS[i].rule}")
    st.button("Use this pair", on_click=_use_pair, args=(pick,))
    g1, g2 = st.columns(2)
    g1.text_input("Sentence A", key="hbc_pair_a")
    g2.text_input("Sentence B", key="hbc_pair_b")
    try:
        comparison = compare_pair(model, tok, st.session_state["hbc_pair_a"], st.session_state["hbc_pair_b"])
    except BertCoreError as exc:
        app_drawing.show_error(exc)
    else:
        s1, s2, s3 = st.columns(3)
        s1.metric("Score of A", f"{comparison.a.score:.2f}")
        s2.metric("Score of B", f"{comparison.b.score:.2f}")
        verdict = "neither" if comparison.preferred == "tie" else comparison.preferred.upper()
        s3.metric("Prefers", verdict, help=WORDS["verdict_help"])
        app_drawing.plotly(cf.shares_figure(comparison), "grammar-shares", key="hbc_shares")
        app_drawing.plotly(cf.sentence_tokens_figure(comparison), "grammar-tokens", key="hbc_tokens")
        if comparison.a.method == NEXT_TOKEN:
            st.caption("A piece both sentences share can still differ in score: what comes before it differs.")
        else:
            st.caption("A piece both sentences share can still differ in score: the words around it differ.")
    _all_pairs(model, tok)


def _all_pairs(model, tok) -> None:
    st.checkbox(f"Score all {len(MINIMAL_PAIRS)} built-in pairs", key="hbc_all_pairs",
                help=WORDS["grammar_toy_run_help"])
    if not st.session_state.get("hbc_all_pairs"):
        return
    rows = []
    try:
        for p in MINIMAL_PAIRS:
            c = compare_pair(model, tok, p.good, p.bad)
            rows.append({"category": p.category, "good": p.good, "bad": p.bad,
                         "good preferred": c.preferred == "a", "difference (nats)": round(c.difference, 3)})
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        return
    right = sum(r["good preferred"] for r in rows)
    st.markdown(f"The model prefers the good sentence in **{right} of {len(rows)}** pairs (chance: half).")
    app_drawing.plotly(cf.pairs_summary_figure(rows), "grammar-pairs", key="hbc_pairs_fig")
    st.dataframe(rows, hide_index=True, width="stretch")


def main() -> None:
    active = app_sidebar.open_page("How BERT computes")
    st.markdown(WORDS["tour_intro"])
    if active is None:
        st.stop()
    model, tok = active.model, active.tokenizer
    causal = is_causal(model)
    examples = app_models.model_probes(active)
    _init_widgets(active, examples, causal)
    race_id, race, tuned = _finished_race()
    # Keyed and stateful, so that a block of the whole pass (or a link's ?hbc_tab=) can open its tab; lazy, so that
    # only the open tab runs: together they read the text through the model a dozen times.
    names = [*TABS, *([WHY_TITLE] if tuned else [])]
    app_widgets.init_widget("hbc_tab", names[0])
    if st.session_state["hbc_tab"] not in names:
        st.session_state["hbc_tab"] = names[0]
    views = [lambda: _attention_tab(active, causal), lambda: _layers_tab(active, examples, causal),
             lambda: _embeddings_tab(active), lambda: _grammar_tab(model, tok, causal),
             lambda: _whole_pass_tab(active, causal), lambda: _why_fine_tuned(race_id, race, tuned)]
    for tab, view in zip(st.tabs(names, key="hbc_tab", on_change="rerun"), views):
        if tab.open:
            with tab:
                view()
    app_widgets.sync_query(*KEYS, "hbc_tab")
    if "_hbc_scroll" in st.session_state:   # a block was just opened: bring its view into sight
        app_drawing.script_frame(wpass.scroll_script(st.session_state.pop("_hbc_scroll"),
                                                     st.session_state["_hbc_opened"]))


main()
