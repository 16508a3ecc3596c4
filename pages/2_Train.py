"""Train a tiny BERT live: pick a corpus, sizes and settings, start, and watch the curves and probes move."""

from typing import Any, NamedTuple

import streamlit as st

from bert_core.errors import BertCoreError
from bert_core.data.task_downloads import local_task_csv
from bert_core.inspect import computation_figures, figures, lesson, tricks, word_class_figures, word_maps
from bert_core.inspect import word_class_timelapse as wct
from bert_core.inspect.safe_text import markdown, markdown_rows
from bert_core.model.config import PRESETS, feed_forward_width
from bert_core.app import app_drawing, app_models, app_sidebar, app_state, app_tab, app_widgets, page_copy, run_panel
from bert_core.app.live_change import change_box, drawn_before_training
from bert_core.app.url_settings import one_of
from bert_core.serve import app_storage, jobs, runs
from bert_core.training import comparison, lesson_settings, plateau, recipes

WORDS = page_copy.WORDS["train"]

app_sidebar.open_page("Train", "Train a tiny BERT")
app_state.warm_launcher()

SETTINGS = jobs.PAGE_SETTINGS   # each widget's label, range, step, help and order: its setting's description


def _seed_widgets() -> None:
    """Each widget's value, once: from the URL (held to the widget's range), else where the lesson starts it for the
    chosen corpus and size; a value the user has not changed follows a changed corpus or size (the size is settled
    first, since the rest follow it: bert_core.training.lesson_settings)."""
    # After "Start with this change", the settings show the new run's (set here, before the widgets are drawn).
    for key, value in st.session_state.pop("train_show_settings", {}).items():
        st.session_state[key] = value
    for setting, value, follows in jobs.widget_defaults(st.session_state):
        app_widgets.seed_setting(setting, value, follows)
    # The smoothing is a view setting, not a training one, read from the URL before it goes (the slider is drawn
    # only beside a run).
    app_widgets.persist_keys(*jobs.WIDGETS, "train_paste", "train_probes", "train_att_probe", "train_smoothing",
                             "train_objective", "train_map_word")
    app_widgets.init_widget("train_smoothing", figures.DEFAULT_SMOOTHING, app_widgets.SMOOTHING)
    app_widgets.init_widget("train_objective", "mlm", one_of(jobs.OBJECTIVE_LABELS, "no such objective"))
    app_widgets.init_widget("train_map_word", word_maps.TIMELAPSE_WORDS[0])


@st.cache_data(max_entries=16, show_spinner="Drawing probe sentences from the held-out text…")
def _default_probes(corpus: str, seed: int, text: str | None):
    """`jobs.default_probes`, kept per corpus, seed and text: drawing them reads and splits the corpus."""
    return jobs.default_probes(corpus, seed, text)


def _probe_editor() -> None:
    """The probe sentences, drawn from the held-out part of the chosen corpus and editable before Start."""
    s = st.session_state
    text = jobs.corpus_text(s)
    drawn = _default_probes(s["train_corpus"], int(s["train_seed"]), text) if text != "" else None
    app_widgets.follow_default("train_probes", "\n".join(drawn.sentences) if drawn else "")
    app_widgets.follow_default("train_att_probe", drawn.attention_sentence if drawn else "")
    st.markdown("**Probe sentences**")
    p1, p2 = st.columns([3, 2])
    p1.text_area("Sentences the model fills in while it trains (one per line, each with [MASK])",
                 key="train_probes", height=120,
                 help=WORDS["probe_sentences_help"])
    p2.text_input("Sentence for the attention time-lapse", key="train_att_probe")
    where = f"the {markdown(drawn.source)}" if drawn else "the held-out part of the corpus, when the run starts"
    p2.caption(WORDS["probe_sentences_caption"].format(where=where))


def _settings(expanded: bool) -> None:
    """The run's settings in three columns, each widget drawn from its setting's description."""
    with st.expander("Settings", expanded=expanded):
        c1, c2, c3 = st.columns(3)
        with c1:
            st.markdown("**Corpus**")
            corpus = app_widgets.setting_widget(SETTINGS["corpus"])
            if corpus == "upload":
                st.file_uploader("A UTF-8 text file (.txt), up to 50 MB", type=["txt", "md", "text"],
                                 key="train_upload")
            elif corpus == "paste":
                st.text_area("Paste a few paragraphs (blank lines separate documents)", key="train_paste",
                             height=150)
            elif corpus != "toy":
                st.caption("Read from the local data folder when present, else downloaded once (checksum-verified).")
            app_widgets.setting_widget(SETTINGS["vocab_size"])
        with c2:
            st.markdown("**Model**")
            preset = app_widgets.setting_widget(SETTINGS["preset"])
            if preset == "custom":
                app_widgets.setting_widgets(SETTINGS.values(), "size")
            else:
                sizes = PRESETS[preset]
                st.caption(f"{sizes['num_hidden_layers']} layers, hidden {sizes['hidden_size']}, "
                           f"{sizes['num_attention_heads']} heads, feed-forward "
                           f"{feed_forward_width(sizes['hidden_size'])}")
            if speed := recipes.speed_note(preset):   # before Start: a bigger size is slower a step, by measurement
                st.caption(speed)
            with st.popover("What each size reaches", icon=":material/speed:"):
                st.markdown(recipes.ladder_note())
                st.table(recipes.ladder_rows(), hide_index=True)
            app_widgets.setting_widgets(SETTINGS.values(), "model")
        with c3:
            st.markdown("**Training**")
            app_widgets.setting_widgets(SETTINGS.values(), "training")
            gpt = st.radio("Objective", list(jobs.OBJECTIVE_LABELS), format_func=jobs.OBJECTIVE_LABELS.get,
                           key="train_objective", help=jobs.OBJECTIVE_HELP) == "clm"
            app_widgets.setting_widgets(SETTINGS.values(), "objective",
                                        disabled=lambda setting: gpt and setting.name in comparison.MLM_ONLY)
        # Computed from the fields' own values (issue #64: a line describing another recipe than the one on screen).
        values = {name: st.session_state[key] for key, name in jobs.WIDGETS.items()}
        st.caption(lesson_settings.settings_caption(values, st.session_state["train_objective"]))
        _probe_editor()
    app_widgets.sync_query(*jobs.WIDGETS, "train_objective")


def _command_preview() -> None:
    """The settings above as the equivalent `python -m bert_core train` command (st.code has a copy button):
    the same data, initial weights and updates, so the same held-out figures (tests/test_comparison.py)."""
    choice = st.session_state["train_corpus"]
    with st.expander("The same run from the command line"):
        try:
            spec = jobs.page_spec(st.session_state, jobs.preview_corpus(st.session_state))
            command = comparison.train_command(spec)
        except BertCoreError as exc:
            st.caption(f"The equivalent command line appears once the settings are valid: {exc}")
            return
        st.caption(WORDS["cli_command_caption"])
        st.code(command, language="bash", wrap_lines=True)
        if choice in ("upload", "paste"):
            st.caption(f"Save your text as `{comparison.corpus_argument(spec)}` there first.")


class Tab(NamedTuple):
    """This tab's run as the page reads it once a script run: its run (from its URL: a reload finds it again), the
    tab's role in it, and what the buttons may do with it."""

    run: Any
    role: str | None
    job: Any
    viewer: bool          # watching someone's shared run: it can look, never steer
    active: bool          # queued, preparing or training
    phase: str | None
    has_model: bool       # False once a dead process took its weights with it
    weights_only: bool    # nothing left to resume: train on from its weights


def _tab() -> Tab:
    run, role = app_tab.current_run()
    job = run.job if run is not None else None
    active = run is not None and run.active
    phase = run.phase if run is not None else None
    has_model = job is not None and job.model_available
    return Tab(run, role, job, role == runs.VIEWER, active, phase, has_model,
               has_model and not active and (phase == "finished" or run.released))


def _start(tab: Tab, notice, init_from_run=None) -> None:
    run_id = runs.new_token()
    folder_key = runs.scratch_key(run_id)
    init_from = None
    if init_from_run is not None:
        notice.info("Saving this run's model and starting a new run from it…", icon=":material/hourglass_top:")
        init_from = jobs.save_start_weights(init_from_run, folder_key)
    spec = jobs.page_spec(st.session_state, jobs.page_corpus(st.session_state, folder_key), init_from)
    notice.info(WORDS["run_starting"], icon=":material/hourglass_top:")
    st.session_state.pop("train_zip", None)  # the previous run's download is not this run's
    owner = tab.run is not None and tab.role == runs.OWNER
    app_tab.start_run(spec, run_id, family_of=tab.run if owner else None)


def _forget(run) -> None:
    """After Reset: the run's download goes, and the page says what was forgot once it redraws (the run vanishes
    from My runs, and nobody should wonder where it went)."""
    st.session_state.pop("train_zip", None)
    st.session_state["train_reset_note"] = app_tab.reset_note(run)


def _buttons(tab: Tab) -> None:
    """Start, Stop, Resume, Reset, Prepare download and Step once, and training on from a finished run's weights."""
    run, job, viewer, active, phase = tab.run, tab.job, tab.viewer, tab.active, tab.phase
    b1, b2, b3, b4, b5, b6 = st.columns([1, 1, 1.1, 1, 1.5, 1.2])   # Step once last: the tests count buttons by place
    notice = st.empty()  # what a pressed button is doing, shown before the work starts
    if viewer:
        st.info(WORDS["watching_shared_run"], icon=":material/groups:")
    cannot_step = viewer or phase != "stopped" or tab.weights_only or not tab.has_model
    try:
        if b1.button("Start", icon=":material/play_arrow:", disabled=active and not viewer, type="primary",
                     help="Start a new run with these settings (it waits in the queue when the server is full)"):
            _start(tab, notice)
        app_tab.stop_button(b2, run, active, viewer, notice, run_panel.TRAIN_WORDS)
        if b3.button("Resume", icon=":material/resume:", disabled=cannot_step,
                     help=WORDS["resume_help"]):
            app_state.RUNS.resume(run.run_id)
            st.rerun()
        if b6.button("Step once", icon=":material/skip_next:", disabled=cannot_step,
                     help=WORDS["step_once_help"]):
            notice.info("Taking one step…", icon=":material/hourglass_top:")
            st.session_state["train_step_record"] = (run.run_id, job.step_once())
            notice.empty()
        app_tab.reset_button(b4, run, viewer, run_panel.TRAIN_WORDS, after=_forget)
        if b5.button("Prepare download", icon=":material/folder_zip:", disabled=not tab.has_model,
                     help="Save the checkpoint folder and offer it as a zip"):
            notice.info("Saving the checkpoint…", icon=":material/hourglass_top:")
            try:
                st.session_state["train_zip"] = (job.created, job.kept_step, job.zip_bytes())
            finally:
                notice.empty()
        if tab.weights_only and not viewer:
            with st.container(border=True):
                what = (WORDS["weights_only_finished"].format(steps=job.trainer.step) if phase == "finished" else
                        WORDS["weights_only_process_ended"].format(step=job.kept_step))
                st.markdown(WORDS["train_on_from_weights"].format(what=what))
                if st.button(f"Train on from these weights ({int(st.session_state['train_steps']):,} more steps)",
                             icon=":material/fast_forward:", key="train_continue"):
                    _start(tab, notice, init_from_run=job)
    except BertCoreError as exc:
        app_drawing.show_error(exc)


def _after_buttons(tab: Tab) -> None:
    """What a button left to say, the step just taken, the tab's runs, sharing, and saving the run on the server."""
    if reset_note := st.session_state.pop("train_reset_note", None):
        st.info(reset_note, icon=":material/restart_alt:")
    stepped = st.session_state.get("train_step_record")
    if stepped is not None and tab.run is not None and stepped[0] == tab.run.run_id and tab.phase == "stopped":
        with st.container(border=True):
            st.markdown("**Step once**: the update just taken")
            app_drawing.show_step_record(stepped[1], "train_step")
    app_tab.my_runs_list()
    app_tab.share_box(tab.run, tab.viewer, run_panel.TRAIN_WORDS)
    if tab.has_model and not tab.viewer:
        with st.expander("Save this run on the server"):
            st.text_input("Name", key="train_save_name", max_chars=60, placeholder="e.g. nano-toy-no-nsp",
                          help=WORDS["run_name_help"])
            if st.button("Save", icon=":material/save:"):
                try:
                    path = app_storage.save_run(tab.job.save, st.session_state.get("train_save_name", ""),
                                                owner=app_tab.session_id())
                    where = "" if app_storage.public_mode() else f" (`{path}`)"
                    st.success(f"Saved as **{markdown(path.name)}**{where}. Pick *{app_models.SOURCE_SAVED}* in the "
                               "sidebar to open it later, or download it as a zip.")
                except BertCoreError as exc:
                    app_drawing.show_error(exc)
        zipped = st.session_state.get("train_zip")
        if zipped is not None and zipped[0] == tab.job.created:  # never an earlier run's checkpoint
            _, step, data = zipped
            st.download_button(f"Download checkpoint (step {step}, {len(data) / 1e6:.1f} MB zip)", data,
                               file_name=f"bert-checkpoint-step{step}.zip", mime="application/zip",
                               icon=":material/download:")


def _status(viewer: bool, active: bool) -> None:
    """Progress and the latest numbers, redrawn every poll (cheap), and the page redrawn when the run ends."""
    run, _ = app_tab.current_run()
    if run is None:
        st.info(WORDS["run_start_hint"])
        st.caption(app_state.RUNS.where())
        return
    if app_tab.run_status(run, run_panel.TRAIN_WORDS, viewer):   # note, lost record, queue, failure
        return
    job = run.job
    if job is not None and job.trainer is not None and not job.model_available and not run.active:
        st.warning(job.lost_message(), icon=":material/report:")
    elif run.phase == "failed" and job is not None and job.kept_step is not None and job.trainer is not None:
        st.info(WORDS["failed_run_model_kept"].format(step=job.kept_step))
    if run.release_failed and job is not None and job.model_available:
        st.warning(run.release_failed, icon=":material/hard_drive:")
    silent = job.silent_s() if job is not None else 0.0
    if silent > runs.SILENT_S:
        st.warning(f"**No sign of life from the training process for {silent:.0f} s.** The server ends it as stalled "
                   f"after {app_state.RUNS.stall_s():.0f} s and gives its slot to the next run; *Stop* ends it now.",
                   icon=":material/hourglass_disabled:")
    trainer = job.trainer if job is not None else None
    if trainer is None:
        if run.phase in ("cancelled", "failed", "stopped"):
            return
        st.info(WORDS["run_preparing"], icon=":material/hourglass_top:")
        return
    if active and run.active and drawn_before_training(run):
        st.rerun()   # the page was drawn while the run prepared: draw it whole once, its change box with it
    prog = trainer.progress
    history, evals = trainer.history, trainer.evals
    app_tab.progress_bar(run, f"{run.phase}: step {prog.step:,} of {trainer.config.max_steps or '∞'} · elapsed "
                         f"{jobs.format_duration(prog.elapsed_s)}", left=run.active)
    last = history[-1] if history else None
    m = st.columns(5)
    m[0].metric("Loss", f"{last.loss:.3f}" if last else "–")
    task = figures.task_name(trainer.config.objective == "clm")   # a GPT's figures are next-token ones
    m[1].metric(f"{task[0].upper()}{task[1:]} accuracy", f"{last.mlm_acc:.1%}" if last and last.mlm_acc is not None
                else "–")
    m[2].metric(f"Held-out {task} acc.", f"{evals[-1].mlm_acc:.1%}" if evals else "–")
    m[3].metric("Tokens / s", f"{last.tokens_per_s:,.0f}" if last else "–")
    m[4].metric("Learning rate", f"{last.lr:.2e}" if last else "–")
    stuck = plateau.plateau_warning(history, trainer.baselines, prog.fraction,
                                    causal=trainer.config.objective == "clm")
    if stuck:
        st.warning(f"**Still on the unigram plateau.** {stuck[0].upper()}{stuck[1:]}", icon=":material/trending_flat:")
    if run.phase in ("finished", "stopped") and not run.active and job.model_available:
        st.success(WORDS["run_ended_pick_model"].format(phase=run.phase, step=trainer.step))
    if active and not run.active:
        # The page was drawn while the run was going (this fragment polls only then) and it has ended: redraw the
        # whole page so that the buttons, the save box and the charts follow, however short the run was.
        st.rerun()


def _charts(active: bool) -> None:
    """The training curves and the probe sentences: redrawn less often than the numbers above, because a
    browser redrawing four charts costs the training as much CPU as the training itself on a 2-core machine."""
    job = app_tab.current_job()
    trainer = job.trainer if job is not None else None
    if trainer is None:
        return
    run, _ = app_tab.current_run()
    smoothing = app_widgets.smoothing_slider(
        "train_smoothing", view=(run.run_id, run.active),
        help=WORDS["smoothing_help"])
    if active:
        st.caption(f"The charts redraw every {app_state.chart_poll_seconds():g} s while the run goes on.")
    charts = figures.LIVE_CHARTS.figures(trainer, smoothing)   # built once for everyone watching this run
    c1, c2 = st.columns(2)
    for column, names in ((c1, ("loss", "accuracy-by-decision")), (c2, ("accuracy", "learning-rate"))):
        with column:
            for name in names:
                if name in charts:   # a GPT's run has no masking decisions to split by
                    app_drawing.plotly(charts[name], name, key=f"live_{name}")
    causal = trainer.config.objective == "clm"
    if causal:
        st.caption(jobs.NEXT_TOKEN_NOTE)
    elif (said := lesson.notice_decisions(trainer.history)) is not None:
        c1.caption(said)
    store = trainer.probes
    snaps = store.snapshots() if store is not None else []
    if snaps and causal:
        st.caption(WORDS["gpt_snapshot_note"])
    elif snaps:
        st.subheader(f"Probe sentences (snapshot at step {snaps[-1].step:,})")
        st.caption(WORDS["held_out_guesses_caption"])
        previous = snaps[-2] if len(snaps) > 1 else None
        rows = []
        for i, sentence in enumerate(store.sentences):
            for j, cands in enumerate(snaps[-1].predictions[i]):
                before = previous.predictions[i][j] if previous else []
                rows.append({
                    "sentence": sentence,
                    "now": ", ".join(f"{t} {p:.1%}" for t, p in cands[:3]),
                    f"before (step {previous.step})" if previous else "before": ", ".join(
                        f"{t} {p:.1%}" for t, p in before[:3]),
                })
        st.table(markdown_rows(rows), hide_index=True)   # a visitor's corpus or typed probes, shown as written


def _word_map_timelapse() -> None:
    """The How BERT computes page's word map at each probe snapshot of this run: a word's senses separating (or
    not) as the model trains. The maps were made at the snapshots (the weights are not kept); this only draws."""
    job = app_tab.current_job()
    store = job.trainer.probes if job is not None and job.trainer is not None else None
    snaps = store.snapshots() if store is not None else []
    if not snaps:
        return
    st.subheader("One word's senses, snapshot by snapshot")
    word = app_widgets.kept_choice(st.radio, "Word", word_maps.TIMELAPSE_WORDS, "train_map_word", horizontal=True)
    timeline = word_maps.word_map_timelapse(snaps, word)
    if not timeline:
        st.caption(WORDS["word_map_missing"].format(word=word))
        return
    steps = [step for step, _ in timeline]
    # The slider follows the newest snapshot until the user moves it back to an older one.
    if st.session_state.get("train_map_step") in (None, st.session_state.get("train_map_newest")) \
            or st.session_state["train_map_step"] not in steps:
        st.session_state["train_map_step"] = steps[-1]
    st.session_state["train_map_newest"] = steps[-1]
    step = st.select_slider("Training step", steps, key="train_map_step") if len(steps) > 1 else steps[0]
    st.caption(WORDS["word_map_timelapse_caption"])
    # Built once for everyone watching this run, at each snapshot (figures.SHARED_FIGURES): a class redraws them
    # every poll.
    shown = (word, step, steps[-1])
    word_map = figures.SHARED_FIGURES.get(store, ("map", *shown), lambda: figures.laid_out(
        computation_figures.word_map_figure(timeline[steps.index(step)][1], step=step)))
    separation = figures.SHARED_FIGURES.get(store, ("separation", *shown), lambda: figures.laid_out(
        computation_figures.separation_timeline_figure(word, *word_maps.separation_by_step(timeline), step=step)))
    app_drawing.plotly(word_map, "word-map-timelapse", key="train_map")
    app_drawing.plotly(separation, "word-map-separation", key="train_map_separation")
    st.caption(WORDS["separation_caption"])


def _word_class_timelapse() -> None:
    """What each layer knows at each probe snapshot of this run: the part-of-speech probe (as How BERT computes
    fits it) made in the run at each snapshot, drawn against the step."""
    job = app_tab.current_job()
    trainer = job.trainer if job is not None else None
    snaps = trainer.probes.snapshots() if trainer is not None and trainer.probes is not None else []
    if not snaps:
        return
    st.subheader("What each layer knows, snapshot by snapshot")
    timeline = wct.word_class_timeline(snaps)
    if timeline is None and wct.toy_run(trainer.metadata):
        st.caption(WORDS["toy_run_has_no_probes"])
        return
    if timeline is None:
        if local_task_csv("conll2000") is not None:
            st.caption(WORDS["probes_not_yet"])
            return
        st.markdown(WORDS["word_classes_intro"])
        app_widgets.fetch_task_box("conll2000", "train_fetch_conll")
        return
    steps, accuracy, random_model, majority = timeline
    st.markdown(wct.reading(steps, accuracy, random_model))
    fig = figures.SHARED_FIGURES.get(trainer.probes, ("word classes", tuple(steps)), lambda: figures.laid_out(
        word_class_figures.word_class_timeline_figure(steps, accuracy, random_model, majority)))
    app_drawing.plotly(fig, "word-classes-timelapse", key="train_word_classes")
    last = next(s.word_classes for s in reversed(snaps) if s.word_classes is not None)
    st.caption(WORDS["snapshot_probe_caption"].format(fit=wct.SNAPSHOT_FIT, test_words=last.test_words,
                                                      test=wct.SNAPSHOT_TEST, seconds=last.seconds))


def _compare(active: bool) -> None:
    """This tab's runs, one after another: overlay two to four of them (the legend names the knobs that differ),
    and start a copy of the current run with one knob changed."""
    run, role = app_tab.current_run()
    if run is None or role != runs.OWNER:
        return
    family = [r for r in app_state.RUNS.family(run) if r.trainer is not None]   # a LiveView each: its curves
    st.subheader("Compare runs, one knob at a time")
    every = app_state.RUNS.family(run)
    names = {r.run_id: f"run {i + 1}" for i, r in enumerate(every)}
    if len(every) >= 2:
        st.table(comparison.run_list_rows(every, [names[r.run_id] for r in every]), hide_index=True)
    if len(family) >= 2:
        # Keyed by the tab's current run (and whether it has curves yet): a new run starts a new choice, so the
        # overlay never keeps an older reference that differs from the new run in several knobs (issue #64).
        chosen = st.multiselect("Runs to overlay (the first is the reference)", [r.run_id for r in family],
                                default=comparison.overlay_default([r.run_id for r in family], run.run_id),
                                format_func=names.get, max_selections=figures.MAX_OVERLAID_RUNS,
                                key=f"train_overlay_{run.run_id[:12]}_{any(r is run for r in family)}")
        picked = [r for r in family if r.run_id in chosen]
        if len(picked) >= 2:
            app_drawing.plotly(figures.overlay_figure([r.spec for r in picked], [r.trainer.history for r in picked],
                                                      [r.trainer.evals for r in picked],
                                                      [names[r.run_id] for r in picked],
                                                      smoothing=st.session_state.get("train_smoothing", 0.0)),
                           "compare-runs")
    else:
        st.caption(WORDS["my_runs_overlay_hint"])
    with st.expander("What each change bought when we measured it", icon=":material/science:"):
        st.table(tricks.trick_rows(jobs.default_spec(), every, [names[r.run_id] for r in every]), hide_index=True)
        st.caption(WORDS["one_change_table_caption"])
    changes = comparison.suggested_changes(run.spec)
    if not changes:
        return
    c1, c2 = st.columns([3, 1])
    pick = c1.selectbox("Try one change to this run's settings", range(len(changes)),
                        format_func=lambda i: changes[i].label, key="train_one_change")
    c2.markdown("&nbsp;")
    if c2.button("Start with this change", icon=":material/science:", disabled=active, key="train_one_change_go"):
        try:
            change = changes[pick]
            run_id = runs.new_token()
            spec = jobs.spec_with_change(run.spec, change.knob, change.after, runs.scratch_key(run_id))
            st.session_state["train_show_settings"] = jobs.page_values_of(spec)
            app_tab.start_run(spec, run_id, family_of=run)
        except BertCoreError as exc:
            app_drawing.show_error(exc)
    if active:
        st.caption("A new run can start once this one has ended (or been stopped).")


def main() -> None:
    _seed_widgets()
    tab = _tab()
    _settings(expanded=tab.run is None)
    _command_preview()
    _buttons(tab)
    change_box(tab.run, tab.viewer, tab.active)
    _after_buttons(tab)
    st.divider()
    poll = app_state.poll_seconds() if tab.active else None
    charts_poll = app_state.chart_poll_seconds() if tab.active else None
    st.fragment(_status, run_every=poll)(tab.viewer, tab.active)
    st.fragment(_charts, run_every=charts_poll)(tab.active)
    st.fragment(_word_map_timelapse, run_every=charts_poll)()
    st.fragment(_word_class_timelapse, run_every=charts_poll)()
    if tab.active:
        # A smoothing set while a run trains is for its live view: the URL keeps only an ended run's (written after
        # the charts, which return it to the default when the run ends), so that a reload of the finished run does
        # not draw its curves unsmoothed (issue #64).
        st.query_params.pop("train_smoothing", None)
    else:
        app_widgets.sync_query("train_smoothing")
    _compare(tab.active)


main()
