"""The lesson: twelve steps through the explorer in the order of its pages, each with a short explanation, one
control, a figure, a "What to notice" line computed from the model in use, and a question. The step is in the URL
(`?step=masking`), so a reload or a shared link opens the same step. Text and notices: bert_core.inspect.lesson."""

from dataclasses import dataclass
from typing import Any

import streamlit as st

from bert_core.data.pretraining_data import MASK_RATE
from bert_core.errors import BertCoreError
from bert_core.inspect import computation_figures, figures, lesson, lesson_figures
from bert_core.inspect.attention_steps import attention_steps, encode_for_steps, with_temperature
from bert_core.inspect.embeddings import embedding_parts, heldout_pool, nearest_neighbours
from bert_core.inspect import feed_forward as ff
from bert_core.inspect.layer_probes import conll_layer_probes
from bert_core.inspect.inspection import (
    attention_maps,
    fill_mask,
    group_word_pieces,
    guesses_for_instance,
    head_summaries,
    mask_example,
    masking_stats,
    unigram_top_k,
    word_text,
)
from bert_core.inspect.safe_text import markdown
from bert_core.inspect.training_step import take_one_step
from bert_core.app import app_drawing, app_models, app_sidebar, app_state, app_tab, app_widgets, class_view, page_copy
from bert_core.app import lesson_classes
from bert_core.app.url_settings import Within
from bert_core.data.task_downloads import local_task_csv
from bert_core.serve import jobs, runs
from bert_core.serve.finetune_runs import FINETUNE_PAGE

WORDS = page_copy.WORDS["lesson"]

STEPS = lesson.STEPS
CLASSES = app_state.LESSON_CLASSES
s = st.session_state


@dataclass
class Lesson:
    """What every part of the page reads: the class this tab leads (`lead_code`) or follows (`follow_code`, its
    state `klass`, this browser's `seat`), the step on screen, and the model its figures come from."""

    lead_code: str | None
    follow_code: str | None
    klass: Any
    following: bool
    index: int = 0
    seat: str | None = None
    active: Any = None
    model_name: str | None = None   # the model of this step's figures, in words: the lesson's end names it
    class_model: tuple[str, str] | None = None   # the model the class looks at, as its record names it

    @property
    def step(self):
        return STEPS[self.index]


def _class_of_links() -> tuple[Lesson, bool, bool]:
    """The class this tab leads or follows, from its links and its session; with whether a teacher's link opened no
    class, and whether a class link named none."""
    # A teacher's link (?teach=TOKEN) leads its class and opens the teacher's view; a students' code there opens
    # nothing.
    teach_param = st.query_params.get("teach")
    lead_code = CLASSES.code_for_teacher(teach_param) if teach_param else None
    bad_teacher_link = bool(teach_param) and lead_code is None
    if lead_code is not None and s.get("lesson_lead") != lead_code:
        # Opened afresh (a reload, another device): the page goes to the step the class is on.
        s["lesson_lead"], s["lesson_teach"] = lead_code, teach_param
        st.query_params["step"] = CLASSES.step(lead_code)
    elif lead_code is None and not bad_teacher_link and CLASSES.step(s.get("lesson_lead")) is not None:
        lead_code = s["lesson_lead"]   # back from another page, whose link to the lesson has no token
        st.query_params["teach"] = s["lesson_teach"]
    # A student who opened the class link (?follow=CODE) follows the teacher's step, model and run unless they
    # switch it off; the code stays with the session, so the way back from another page keeps the class.
    follow_link = st.query_params.get("follow")
    follow_code = None if lead_code is not None else \
        (lesson_classes.class_code(follow_link) or follow_link or s.get("lesson_class"))   # "k7p-3qx": K7P3QX
    klass = CLASSES.state(follow_code)
    class_ended = bool(follow_code) and klass is None
    if klass is not None:
        s["lesson_class"] = follow_code
        if st.query_params.get("follow") != follow_code:
            st.query_params["follow"] = follow_code
    else:
        s.pop("lesson_class", None)
    app_widgets.init_widget("lesson_follow_on", True, lambda v: str(v).lower() in ("1", "true"))
    following = klass is not None and s["lesson_follow_on"]
    return Lesson(lead_code, follow_code, klass, following), bad_teacher_link, class_ended


def _follow_model(state) -> None:
    """Before the sidebar draws its picker: the teacher's model becomes this page's, and the teacher's run (their
    model, or their live run) this tab's watched run, as its share link would make it."""
    if state.model is not None and state.model[0] == "shipped":
        s["model_source"] = app_models.SOURCE_SHIPPED
        s["model_shipped"] = state.model[1]
    elif state.model is not None:
        s["model_source"] = app_models.SOURCE_SESSION
    watch = state.model[1] if state.model is not None and state.model[0] == "run" else state.run
    run, _ = app_tab.current_run()
    if watch and (run is None or run.view_id != watch) and app_state.RUNS.by_view(watch) is not None:
        st.query_params[app_tab.WATCH_PARAM] = watch


def _open_step(p: Lesson) -> None:
    """The step on screen: the class's when following, else the URL's, else the one this browser was on."""
    if p.following:
        st.query_params["step"] = p.klass.step
        _follow_model(p.klass)
    # Without a step in the URL (the sidebar's *Lesson*, or the way back from another page), the step this browser
    # was on.
    p.index = lesson.step_index(st.query_params.get("step") or s.get("lesson_at"))
    s["lesson_at"] = p.step.key
    if p.lead_code is not None:
        CLASSES.set_step(p.lead_code, p.step.key)
    if p.klass is not None:
        p.seat = lesson_classes.seat_of(p.follow_code, app_tab.visitor_id())
        CLASSES.seen(p.follow_code, p.seat, p.step.key, p.following)


def _go(to: int, lead_code: str | None) -> None:
    """Next/Back: the step goes into the URL before the rerun draws it (a callback runs before the script)."""
    st.query_params["step"] = STEPS[to].key
    if lead_code is not None:
        app_state.LESSON_CLASSES.set_step(lead_code, STEPS[to].key)
    run, role = app_tab.current_run()
    if STEPS[to].key in ("layers", "attention", "attends", "feed-forward", "predictions", "masking", "fine-tune") \
            and run is not None \
            and role == runs.OWNER and run.phase == "finished":
        # After the live run, the next steps look at the model it trained (the sidebar's choice, changeable), and
        # the race fine-tunes it.
        st.session_state["model_source"] = app_models.SOURCE_SESSION


def _is_gpt(run) -> bool:
    return run is not None and run.spec.train.get("objective") == "clm"


def _model_ref(model) -> tuple[str, str] | None:
    """What the class record says of the teacher's model: a shipped checkpoint's name or their run's view id;
    None for one students cannot open (an upload, a saved run, a server folder)."""
    source = s.get("model_source")
    if model is None:
        return None
    if source == app_models.SOURCE_SHIPPED and model.path is not None:
        return ("shipped", model.path.name)
    run, _ = app_tab.current_run()
    if source == app_models.SOURCE_SESSION and run is not None:
        return ("run", run.view_id)
    return None


def _scroll_to_top(key: str) -> None:
    """A new step (Next, Back, the teacher's move, a link) opens at its top: Streamlit keeps the page's scroll
    position across reruns, so the press of Next at the foot of one step left the next one scrolled down, its
    title and notice off the screen. A zero-height frame in the sidebar scrolls the main area up, once: drawn on
    this run only, with a number of its own, so that the browser runs it afresh for each step opened."""
    if s.get("_lesson_drawn_step") != key:
        s["_lesson_drawn_step"], s["_lesson_opened"] = key, s.get("_lesson_opened", 0) + 1
        with st.sidebar:
            app_drawing.script_frame(lesson.to_top_script(s["_lesson_opened"]))


def _tell_the_class(p: Lesson) -> None:
    """A teacher's page records the model, the live run and the race the class looks at; a student's reads it."""
    if p.lead_code is not None:
        p.class_model = _model_ref(p.active)
        CLASSES.set_model(p.lead_code, p.class_model)
        lesson_run, _ = app_tab.current_run()
        # The teacher's live run, which the students watch at step 5: the default BERT run, never a GPT of the
        # Train page.
        CLASSES.set_run(p.lead_code, None if lesson_run is None or _is_gpt(lesson_run) else lesson_run.view_id)
        race, _ = app_tab.current_run(FINETUNE_PAGE)
        CLASSES.set_race(p.lead_code, race.view_id if race is not None else None)
    elif p.following:
        p.class_model = p.klass.model


def _header(p: Lesson, bad_teacher_link: bool, class_ended: bool) -> None:
    st.title("The lesson: how BERT learns")
    st.progress((p.index + 1) / len(STEPS), text=f"Step {p.index + 1} of {len(STEPS)}: **{p.step.title}**")
    if bad_teacher_link:
        st.warning(WORDS["unknown_teacher_link"])
    if class_ended and CLASSES.ended(p.follow_code):
        st.caption("The teacher's class of this link has ended on this server.")
    elif class_ended:
        st.warning(WORDS["unknown_class_link"], icon=":material/link_off:")
    if p.klass is not None:
        st.toggle("Follow the teacher", key="lesson_follow_on", help=WORDS["follow_teacher_help"])
        _follow(p)


@st.fragment(run_every=app_state.poll_seconds())
def _follow(p: Lesson) -> None:
    now = CLASSES.state(p.follow_code)
    if now is None:
        st.caption("The teacher's class has ended on this server.")
        return
    on = bool(s.get("lesson_follow_on"))
    CLASSES.seen(p.follow_code, p.seat, p.step.key, on)
    at = lesson.step_index(now.step)
    st.caption(f"The teacher is on step {at + 1}: {STEPS[at].title}.")
    if on and (now.step != p.step.key or now.version != p.klass.version):
        st.query_params["step"] = now.step
        st.rerun(scope="app")   # the teacher moved, or changed the model, the run, the step taken, a split shown
    elif (p.step.key in now.shown) != (p.step.key in p.klass.shown):
        st.rerun(scope="app")
    race = app_state.RUNS.by_view(s.get("_lesson_race_pending"))
    if race is not None and not race.active:
        st.rerun(scope="app")   # the teacher's race has finished: the last step reports it


def _model_in_use(p: Lesson) -> None:
    active = p.active
    if active is not None:
        p.model_name = active.short_name
        if p.class_model is not None and p.class_model[0] == "run" and active.path is None:
            p.model_name = lesson.class_run_name(active.step)   # the same words on the teacher's and students' pages
    if active is not None and p.step.key not in ("bert-or-gpt", "step", "run"):   # those show their own model
        whose = "the teacher's" if p.following and p.klass.model is not None else "the sidebar's"
        st.caption(lesson.model_in_use(p.model_name, active.tokenizer.vocab_size, active.causal, whose))
    if p.following and p.klass.model is None:
        st.caption(WORDS["teacher_model_unavailable"])


def _sentence(label: str, key: str) -> str | None:
    """A sentence box; None (and a word saying so) while it is empty."""
    text = st.text_input(label, key=key)
    if not text.strip():
        st.warning("Type a sentence.")
        return None
    return text


def _tokens(p: Lesson) -> str | None:
    active = p.active
    app_widgets.init_widget("lesson_text", "The children were playing happily in the garden.")
    text = st.text_input("A sentence", key="lesson_text")
    pieces = active.tokenizer.tokenize(text)
    if not pieces:
        st.warning("Type a sentence with at least one word.")
        return None
    words = group_word_pieces(pieces)
    ids = active.tokenizer.encode_pair(text, max_length=active.config.max_position_embeddings)["input_ids"]
    tokens = active.tokenizer.convert_ids_to_tokens(ids)
    app_drawing.plotly(lesson_figures.tokens_figure(tokens, [0] * len(tokens)), "lesson-tokens",
                       key="lesson_tokens_fig")
    return lesson.notice_tokens([word_text(w) for w in words], words, active.tokenizer.vocab_size)


def _masking(p: Lesson) -> str | None:
    active = p.active
    seeds = Within(0, 2**31 - 1)   # the widget's range, and what a link's value is held to
    app_widgets.init_widget("lesson_seed", 0, seeds)
    seed = int(st.number_input("Masking seed (same seed, same masks)", *seeds, key="lesson_seed"))
    instances = app_models.toy_pretraining_data(active).build_instances(0)
    pair = instances[seed % len(instances)]
    rows = mask_example(active.tokenizer, pair.input_ids, pair.token_type_ids, seed=seed)
    app_drawing.plotly(figures.masking_figure(rows), "lesson-masking", key="lesson_masking_fig")
    stats = masking_stats(active.tokenizer, [x.input_ids for x in instances[:app_models.DECISION_POOL]], seed=seed)
    if active.causal:
        st.caption(WORDS["gpt_has_no_masked_guesses"])
        return lesson.notice_masking(stats, None)
    guesses = guesses_for_instance(active.model, active.tokenizer, pair.input_ids, pair.token_type_ids, seed=seed)
    app_drawing.plotly(lesson_figures.guesses_figure(guesses), "lesson-guesses", key="lesson_guesses_fig")
    accuracy = app_models.decision_accuracy(active, "toy:0", instances, seed, MASK_RATE)
    app_drawing.plotly(lesson_figures.decision_accuracy_bars(
        accuracy, f"Right guesses by decision, {stats['instances']} toy pairs"), "lesson-accuracy",
        key="lesson_accuracy_fig")
    return lesson.notice_masking(stats, accuracy)


def _one_step(p: Lesson) -> str | None:
    if p.following:   # the teacher's update, as the teacher's page shows it: one model steps for the whole class
        if p.klass.step_record is None:
            st.caption("The teacher takes the steps on their screen: each update appears here as they press.")
            return None
        record, vocab_size = p.klass.step_record
        app_drawing.show_step_record(record, "lesson_step")
        return lesson.notice_step(record, vocab_size)
    c1, c2 = st.columns([1, 3])
    if c1.button("Take one step", icon=":material/skip_next:", type="primary", key="lesson_step_go"):
        try:
            if s.get("lesson_trainer") is None:
                with st.spinner("Building a fresh nano BERT and its toy data…"):
                    s["lesson_trainer"] = jobs.build_trainer(jobs.default_spec())
            s["lesson_step_record"] = take_one_step(s["lesson_trainer"])
            if p.lead_code is not None:
                CLASSES.set_step_record(p.lead_code, (s["lesson_step_record"],
                                                      s["lesson_trainer"].tokenizer.vocab_size))
        except BertCoreError as exc:
            app_drawing.show_error(exc)
    if c2.button("Start over from a fresh model", key="lesson_step_reset"):
        s.pop("lesson_trainer", None)
        s.pop("lesson_step_record", None)
        if p.lead_code is not None:
            CLASSES.set_step_record(p.lead_code, None)
    record = s.get("lesson_step_record")
    if record is None:
        st.caption(WORDS["default_run_caption"])
        return None
    app_drawing.show_step_record(record, "lesson_step")
    return lesson.notice_step(record, s["lesson_trainer"].tokenizer.vocab_size)


def _live_run(p: Lesson) -> str | None:
    if p.following:   # the teacher's run, watched through its view id: nobody in the class starts one of their own
        run = app_state.RUNS.by_view(p.klass.run)
        if run is None:
            st.info(WORDS["waiting_for_teacher_run"], icon=":material/hourglass_top:")
            return None
        app_state.RUNS.attach(run, app_tab.session_id(), runs.VIEWER, app_tab.visitor_id())
        st.caption("The teacher's run, watched here as its share link shows it: the teacher starts and stops it.")
        _watch(run, can_stop=False)
        return "shown"
    run, role = app_tab.current_run()
    gpt = _is_gpt(run)
    if gpt:   # this step is about the default BERT run: a GPT run of the Train page is not it
        st.info(WORDS["your_run_is_gpt"], icon=":material/swap_horiz:")
    if run is None or role != runs.OWNER or gpt:
        if st.button("Start the default run", icon=":material/play_arrow:", type="primary", key="lesson_run_go"):
            try:
                app_tab.start_run(jobs.default_spec(), runs.new_token())
            except BertCoreError as exc:
                app_drawing.show_error(exc)
        st.caption("The Train page's defaults; the Train page shows the same run with all its charts.")
        return None
    _watch(run, can_stop=True)
    return "shown"


def _watch(run, can_stop: bool) -> None:
    """The live run's loss against the unigram line and its notice, redrawn while it trains."""
    link, stop = st.columns([3, 1])
    with link:
        app_drawing.page_link("pages/2_Train.py", WORDS["train_page_link"], ":material/open_in_new:")
    if can_stop and run.active and stop.button("Stop", icon=":material/stop:", key="lesson_run_stop",
                                               help="Stop the run here (the Train page can resume it)"):
        app_state.RUNS.stop(run.run_id, wait=10)
        st.rerun()

    @st.fragment(run_every=app_state.poll_seconds() if run.active else None)
    def live() -> None:
        trainer = run.trainer
        causal = trainer is not None and trainer.config.objective == "clm"   # as the Train page reads it
        baseline = figures.unigram_baseline_values(trainer.baselines).get("loss") if trainer is not None else None
        text = lesson.notice_run(trainer.evals, baseline, causal) if trainer is not None else None
        # The notice first, where the other steps have theirs: on screen when the step opens, above the chart.
        if text:
            st.info(f"**What to notice.** {markdown(text)}", icon=":material/visibility:")
            s.setdefault("lesson_seen", {})["run"] = lesson.Seen("the default run's nano BERT, as it trained", text)
        else:
            st.caption("*What to notice* appears here at the run's first held-out evaluation.")
        st.caption(f"Run {run.phase}" + (f": step {trainer.step:,}" if trainer is not None else ""))
        app_tab.busy_caption(run)
        if trainer is None:
            return
        app_drawing.plotly(figures.loss_figure(trainer.history, trainer.evals, trainer.baselines, smoothing=0.9,
                                               causal=causal), "lesson-run-loss", key="lesson_run_loss")
        nsp = lesson.notice_nsp(trainer.evals, trainer.history, trainer.config.nsp and not causal)
        if nsp:
            st.caption(nsp)
        if not run.active and s.get("_lesson_run_drawn_active"):
            s["_lesson_run_drawn_active"] = False
            st.rerun()   # the run ended while this polled: redraw the page once, so the fragment stops polling
        s["_lesson_run_drawn_active"] = run.active

    live()


def _attention(p: Lesson) -> str | None:
    active = p.active
    # The model's own sentence follows the model (the teacher's, for a class) until someone types another.
    app_widgets.follow_default("lesson_att_text", app_models.model_probes(active).attention_sentence)
    text = _sentence("Sentence", "lesson_att_text")
    if text is None:
        return None
    result = attention_maps(active.model, active.tokenizer, text)
    summaries = head_summaries(result)
    labels = [x.label for x in summaries]
    app_drawing.plotly(figures.model_view_figure(result, labels), "lesson-attention", key="lesson_att_fig")
    with st.expander("Does sentence B look back at sentence A? (the next-sentence signal, over 128 toy pairs)"):
        pairs = app_models.pair_attention(active, "toy:0", app_models.toy_pretraining_data(active).build_instances(0))
        app_drawing.plotly(lesson_figures.pair_attention_figure(pairs), "lesson-b-to-a", key="lesson_pairs_fig")
        st.caption(WORDS["b_to_a_even_share"].format(uniform=pairs.uniform))
    return lesson.notice_attention(summaries)


def _embedding(p: Lesson) -> str | None:
    active = p.active
    app_widgets.init_widget("lesson_emb_text", lesson.EMBEDDING_SENTENCE)
    text = _sentence("A sentence", "lesson_emb_text")
    if text is None:
        return None
    parts = embedding_parts(active.model, active.tokenizer, text)
    token = app_widgets.token_picker("lesson_emb_token", parts.tokens, 1)
    app_drawing.plotly(computation_figures.embedding_parts_figure(parts, token), "lesson-embedding",
                       key="lesson_emb_fig")
    word = parts.tokens[token]
    near = [] if word.startswith("[") else nearest_neighbours(active.model, active.tokenizer, word, k=4)
    return lesson.notice_embedding(parts, token, near)


def _attends(p: Lesson) -> str | None:
    active, config = p.active, p.active.config
    app_widgets.follow_default("lesson_attends_text", app_models.model_probes(active).attention_sentence)
    text = _sentence("Sentence", "lesson_attends_text")
    if text is None:
        return None
    # The last layer's first head at first (the Attention page's last row); the boxes count from 1.
    c1, c2, c3 = st.columns([1, 1, 2])
    layer = _counted_from_1(c1, "Layer", "lesson_attends_layer", config.num_hidden_layers, config.num_hidden_layers)
    head = _counted_from_1(c2, "Head", "lesson_attends_head", config.num_attention_heads, 1)
    first = attention_steps(active.model, active.tokenizer, text, layer, head, 0)
    with c3:
        query = app_widgets.token_picker("lesson_attends_token", first.tokens, 2)
    steps = attention_steps(active.model, active.tokenizer, text, layer, head, query)
    app_drawing.plotly(lesson_figures.attends_scores_figure(steps), "lesson-attends", key="lesson_attends_fig")
    app_drawing.plotly(lesson_figures.values_figure(steps), "lesson-attends-values", key="lesson_attends_values")
    return lesson.notice_attends(steps, with_temperature(steps, 1 / steps.head_dim ** 0.5))


def _feed_forward(p: Lesson) -> str | None:
    active, config = p.active, p.active.config
    app_widgets.follow_default("lesson_ffn_text", app_models.model_probes(active).attention_sentence)
    text = _sentence("Sentence", "lesson_ffn_text")
    if text is None:
        return None
    c1, c2 = st.columns([1, 3])
    layer = _counted_from_1(c1, "Layer", "lesson_ffn_layer", config.num_hidden_layers, config.num_hidden_layers)
    with c2:
        token = app_widgets.token_picker("lesson_ffn_token", encode_for_steps(active.model, active.tokenizer, text)[2],
                                         2)
    # The block's input is the attention block's output, the same for every head: the first head's steps carry it.
    ffn = ff.feed_forward_steps(active.model, attention_steps(active.model, active.tokenizer, text, layer, 0, token))
    app_drawing.plotly(ff.feed_forward_figure(ffn), "lesson-feed-forward", key="lesson_ffn_fig")
    app_drawing.plotly(ff.gelu_figure(ffn, ffn.most_active), "lesson-feed-forward-activation",
                       key="lesson_ffn_gelu")
    sentences, source = heldout_pool((active.trainer_state or {}).get("metadata"))
    with st.spinner("Reading the held-out text through the model (once per model and layer)…"):
        units = ff.cached_unit_pool(active.model, active.tokenizer, sentences, source, layer)
    firing = ff.unit_firing(units, ffn.most_active)
    app_drawing.plotly(ff.unit_firing_figure(firing), "lesson-feed-forward-unit", key="lesson_ffn_unit")
    return lesson.notice_feed_forward(ffn, firing, len(units.pool.tokens))


def _layers(p: Lesson) -> str | None:
    path = local_task_csv("conll2000")
    if path is None:
        st.markdown("This step reads sentences of CoNLL-2000 (Wall Street Journal), tagged by word class.")
        app_widgets.fetch_task_box("conll2000", "lesson_fetch_conll")
        return None
    with st.spinner("Reading 300 sentences through the model and a random one of its shape (once per model)…"):
        probes = conll_layer_probes(p.active.model, p.active.tokenizer, str(path))
    app_drawing.plotly(computation_figures.layer_probes_figure(probes), "lesson-layer-probes",
                       key="lesson_probes_fig")
    st.caption(WORDS["probe_timing_caption"].format(fit_s=probes.seconds_fit, read_s=probes.seconds_states))
    return lesson.notice_layer_probes(probes)


def _counted_from_1(column, label: str, key: str, most: int, default: int) -> int:
    """A layer or head box, counted from 1 as every figure and notice counts them, held to the model's range (a
    model with fewer layers, or a 0 from an old link); returns the index from 0."""
    app_widgets.init_widget(key, default, int)
    s[key] = min(max(int(s[key]), 1), most)
    return int(column.number_input(label, 1, most, key=key)) - 1


def _guesses(model, text: str, title: str, name: str, key: str):
    """A model's top 5 for the first [MASK] of `text`, drawn beside its unigram guesses: (guesses, unigram), or
    None (the error said) for a text it cannot read."""
    try:
        candidates = fill_mask(model.model, model.tokenizer, text, top_k=5)[0].candidates
    except BertCoreError as exc:
        app_drawing.show_error(exc)
        return None
    counts = model.unigram_counts()
    baseline = unigram_top_k(counts, model.tokenizer, 5) if counts else None
    app_drawing.plotly(figures.topk_figure(candidates, title, baseline), name, key=key)
    return candidates, baseline or []


def _predictions(p: Lesson) -> str | None:
    active = p.active
    if active.causal:
        st.info(WORDS["gpt_fills_no_blanks"])
        return None
    app_widgets.follow_default("lesson_pred_text", app_models.model_probes(active).sentences[0])
    text = st.text_input("Text with [MASK]", key="lesson_pred_text")
    guessed = _guesses(active, text, "Guesses for the first [MASK]", "lesson-predictions", "lesson_pred_fig")
    if guessed is None:
        return None
    if active.path is None or active.path.name not in ("bert-tiny-english", "bert-mini-english"):
        _side_trip(p)
    return lesson.notice_predictions(*guessed)


def _side_trip(p: Lesson) -> None:
    """Real English on the shipped model, drawn here: the sidebar's model, the other steps and the race stay the
    lesson's (a side trip that switched the sidebar once left the race fine-tuning the shipped model)."""
    name = lesson.SHIPPED_ENGLISH
    if not st.toggle(f"Side trip: try your own sentences on the shipped English model, {name}",
                     key="lesson_pred_english",
                     help=WORDS["real_english_model_help"].format(name=name)):
        return
    shipped = app_models.shipped_model(name)
    if shipped is None:
        st.info(f"{name} is not in this install.")
        return
    app_widgets.follow_default("lesson_pred_english_text", app_models.model_probes(shipped).sentences[0])
    text = st.text_input(f"Text with [MASK], for {name}", key="lesson_pred_english_text")
    guessed = _guesses(shipped, text, f"{name}'s guesses for the first [MASK]", "lesson-predictions-shipped",
                       "lesson_pred_english_fig")
    if guessed is None:
        return
    said = lesson.notice_predictions(*guessed)
    st.caption(f"On {name}: {markdown(said)} The lesson's model is still {markdown(p.model_name)}.")
    s.setdefault("lesson_seen", {})["predictions" + lesson.SIDE_TRIP] = lesson.Seen(name, said)


def _bert_or_gpt(p: Lesson) -> str | None:
    bert, gpt = app_models.shipped_model("bert-tiny-english"), app_models.shipped_model("gpt-tiny-english")
    if bert is None or gpt is None:
        st.info("This step compares the two shipped checkpoints, which are not in this install.")
        return None
    app_widgets.init_widget("lesson_gpt_text", lesson.BERT_OR_GPT_SENTENCE)
    text = st.text_input("Sentence", key="lesson_gpt_text")
    c1, c2 = st.columns(2)
    layer = _counted_from_1(c1, "Layer", "lesson_gpt_layer", bert.config.num_hidden_layers, 1)
    head = _counted_from_1(c2, "Head", "lesson_gpt_head", bert.config.num_attention_heads, 1)
    if not text.strip():
        st.warning("Type a sentence.")
        return None
    a = attention_maps(bert.model, bert.tokenizer, text)
    b = attention_maps(gpt.model, gpt.tokenizer, text)
    app_drawing.plotly(figures.side_by_side_figure([("BERT", a), ("GPT", b)], layer, head), "lesson-bert-gpt",
                       key="lesson_gpt_fig")
    return lesson.notice_bert_or_gpt(a.attentions[layer, head, 0].tolist(), b.attentions[layer, head, 0].tolist(),
                                     b.attentions[layer, head, -1].tolist(), a.tokens, b.tokens)


def _to_race(key: str) -> None:
    """Set the Fine-tune page to the lesson's race and remember the way back (a callback, before the switch)."""
    for name, value in lesson.LESSON_RACE.items():
        s[f"ft_{name}"] = value
    s["_ft_data_settings"] = dict(lesson.LESSON_RACE_DATA_SETTINGS)
    s["ft_from_lesson"] = key


def _race(p: Lesson):
    """The race this step reports: the teacher's for a class that follows, else this tab's (once the Fine-tune
    page has run one)."""
    return app_state.RUNS.by_view(p.klass.race) if p.following else app_tab.current_run(FINETUNE_PAGE)[0]


def _finetune(p: Lesson) -> str | None:
    if not p.following and st.button(
            "Run the lesson's race", icon=":material/label:", type="primary", key="lesson_race_go",
            on_click=_to_race, args=(p.step.key,), help=WORDS["open_race_help"]):
        st.switch_page("pages/5_Fine-tune.py")
    run = _race(p)
    done = run is not None and not run.active and run.job is not None
    if p.following:   # the teacher's race, its figures read here: the class does not run thirty races
        if run is not None:
            app_state.RUNS.attach(run, app_tab.session_id(), runs.VIEWER, app_tab.visitor_id())
        s["_lesson_race_pending"] = p.klass.race if run is not None and not done else None   # redrawn once it ends
    # An ended race's results (none when it failed before its models were built).
    results = run.job.trainer.results if done and run.job.trainer is not None else None
    app_tab.busy_caption(run, "race")
    text = lesson.notice_finetune(results, _raced(run))
    if text is None and p.following:
        st.caption(WORDS["teacher_runs_race"])
    elif text is None:
        st.caption(WORDS["run_race_hint"])
    return text


def _raced(run) -> str:
    """The model a race fine-tuned, as the Fine-tune page recorded it when the race started."""
    return run.spec.model_label if run is not None else ""


def _seen_model(p: Lesson) -> str:
    """The model this step's notice came from, in words, for the lesson's end."""
    if p.step.key == "step":
        return "a fresh nano BERT, the Train page's default"
    if p.step.key == "bert-or-gpt":
        return f"{lesson.SHIPPED_ENGLISH} and gpt-tiny-english"
    if p.step.key == "fine-tune":
        return _raced(_race(p)) or p.model_name or "the sidebar's model"
    return p.model_name or "the sidebar's model"


BODIES = {"tokens": _tokens, "embedding": _embedding, "masking": _masking, "step": _one_step, "run": _live_run,
          "layers": _layers, "attention": _attention, "attends": _attends, "feed-forward": _feed_forward,
          "predictions": _predictions, "bert-or-gpt": _bert_or_gpt, "fine-tune": _finetune}


def _notice(p: Lesson) -> None:
    """The step's body, its "What to notice" above it."""
    notice_box = st.container()
    notice = None
    s.pop("_lesson_race_pending", None)   # set again by the last step while the teacher's race runs
    try:
        if p.active is None and p.step.key not in ("step", "run", "bert-or-gpt", "fine-tune"):
            st.info("This step looks at a model: pick one in the sidebar (the shipped one works offline).")
        else:
            notice = BODIES[p.step.key](p)
    except BertCoreError as exc:
        app_drawing.show_error(exc)
    if notice == "shown":
        pass   # drawn inside the live view, where it follows the run
    elif notice:
        notice_box.info(f"**What to notice.** {markdown(notice)}", icon=":material/visibility:")
        s.setdefault("lesson_seen", {})[p.step.key] = lesson.Seen(_seen_model(p), notice)
    else:
        notice_box.caption("*What to notice* appears here once the step has something to show.")


def _question(p: Lesson) -> None:
    st.divider()
    q = p.step.question
    choice = st.radio(q.text, range(len(q.choices)), format_func=lambda i: q.choices[i], index=None,
                      key=f"lesson_q_{p.step.key}")
    feedback = lesson.answer_feedback(q, choice)
    if feedback is not None:
        (st.success if feedback[0] else st.warning)(feedback[1])
    if p.klass is not None:
        if choice is not None:   # counted in the class by the seat's hash only; a student sees their own answer only
            CLASSES.answer(p.follow_code, p.seat, p.step.key, int(choice))
        split = CLASSES.shown_split(p.follow_code, p.step.key, len(q.choices))   # None until the teacher shows it
        if split is not None:
            st.info("**The class's answers**, shown by the teacher:\n\n" + lesson.answer_split(q, split),
                    icon=":material/groups:")


def _foot(p: Lesson) -> None:
    """Back and Next, the way to the step's page, and after the last step what the lesson showed."""
    last = len(STEPS) - 1
    back, mid, nxt = st.columns([1, 3, 1])
    back.button("Back", icon=":material/arrow_back:", disabled=p.index == 0 or p.following, on_click=_go,
                args=(max(0, p.index - 1), p.lead_code), key="lesson_back")
    nxt.button("Next", icon=":material/arrow_forward:", disabled=p.index == last or p.following, type="primary",
               on_click=_go, args=(min(last, p.index + 1), p.lead_code), key="lesson_next")
    with mid:
        app_drawing.page_link(p.step.page, "Explore this further on its page", ":material/open_in_new:")
    if st.query_params.get("step") != p.step.key:
        st.query_params["step"] = p.step.key
    if p.index == last:
        st.divider()
        st.subheader("What this lesson showed")
        st.markdown(lesson.notice_summary(s.get("lesson_seen", {})))
        st.markdown(lesson.NEXT_STEPS)


@st.fragment(run_every=app_state.poll_seconds())
def _teacher_view(p: Lesson) -> None:
    """The class as the teacher sees it, redrawn as students arrive and answer: counts only, never a name."""
    q = p.step.question
    report = CLASSES.report(s.get("lesson_teach"), choices=len(q.choices))
    if report is None:
        st.caption("This class has ended on this server.")
        return
    st.markdown(f"**{report.following}** student(s) following you. Students with the lesson open, by step: "
                + class_view.step_counts(report.on_step, [(x.key, x.title) for x in STEPS]))
    st.markdown(f"**This step's question:** {sum(report.answers)} answer(s) so far.")
    left, right = st.columns(2)
    if left.toggle("Reveal the answers here", key=f"lesson_reveal_{p.step.key}",
                   help="The split of the class's answers to this step's question, on your page only."):
        st.markdown(lesson.answer_split(q, report.answers))
    if right.button("Hide the split on the students' pages" if report.shown else
                    "Show the split on the students' pages", key="lesson_show_split"):
        CLASSES.show_split(p.lead_code, p.step.key, not report.shown)
        st.rerun(scope="fragment")
    st.markdown("**The class's runs** (started from the lesson's links)")
    if "_lesson_default_spec" not in s:
        s["_lesson_default_spec"] = jobs.default_spec()
    rows = class_view.run_rows(report.runs, app_state.RUNS.by_view, s["_lesson_default_spec"])
    if rows:
        st.dataframe(rows, hide_index=True, width="stretch")   # click a column's name to sort by it
    else:
        st.caption("None yet: the runs your students start from the lesson (and yours) appear here.")


def _join() -> None:
    join, go = st.columns([3, 1], vertical_alignment="bottom")
    typed = join.text_input("Join a class: the code your teacher shows", key="lesson_join_code", max_chars=12,
                            placeholder="e.g. K7P3QX")
    if go.button("Join", key="lesson_join_go", icon=":material/group_add:") and typed:
        code = lesson_classes.class_code(typed)
        if code is None:
            st.error(WORDS["bad_class_code"].format(length=lesson_classes.CODE_LENGTH))
        else:
            st.query_params["follow"] = code   # the class link's own way in: a wrong code says so there
            st.rerun()


def _teach(p: Lesson) -> None:
    lead_code = p.lead_code
    if lead_code is None:
        st.caption(WORDS["lead_class_caption"])
        if st.button("Lead a class", key="lesson_lead_go"):
            code, teacher = CLASSES.lead(p.step.key)
            s["lesson_lead"], s["lesson_teach"] = code, teacher
            st.query_params["teach"] = teacher
            st.rerun()
        return
    links = lesson_classes.class_links(st.context.url, lead_code, s["lesson_teach"], lesson_classes.public_url(),
                                       lesson_classes.network_address())
    st.markdown(WORDS["leading_class_banner"].format(lead_code=lead_code))
    qr, link = st.columns([1, 2], vertical_alignment="center")
    qr.image(lesson_classes.class_qr_png(links.students), caption=f"Class code {lead_code}", width=200)
    link.code(links.students, language=None)
    if links.note:
        st.warning(links.note)
    st.markdown(WORDS["teacher_link_label"])
    st.code(links.teacher, language=None)
    if st.button("Stop leading", key="lesson_lead_stop"):
        CLASSES.close(lead_code)
        s.pop("lesson_lead", None)
        s.pop("lesson_teach", None)
        st.query_params.pop("teach", None)
        st.rerun()


def main() -> None:
    st.set_page_config(page_title="Lesson · BERT explorer", layout="wide")
    p, bad_teacher_link, class_ended = _class_of_links()
    _open_step(p)
    p.active = app_sidebar.sidebar()
    app_state.warm_launcher()
    _scroll_to_top(p.step.key)
    _tell_the_class(p)
    _header(p, bad_teacher_link, class_ended)
    st.markdown(p.step.text)
    _model_in_use(p)
    _notice(p)
    _question(p)
    _foot(p)
    if p.klass is not None:
        return
    if p.lead_code is None:
        _join()
    with st.expander("Teach with this lesson", icon=":material/groups:", expanded=p.lead_code is not None):
        _teach(p)
    if p.lead_code is not None:
        with st.expander("Your class: the teacher's view", icon=":material/insights:", expanded=True):
            _teacher_view(p)


main()
