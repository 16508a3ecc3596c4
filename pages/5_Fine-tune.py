"""Fine-tune the active model on one of the three kinds of task of the BERT paper (a label per sentence, a tag per
word, an answer span in a passage), and the same architecture from scratch with the same budget; or race it
against a second checkpoint (BERT against GPT) and the kind's baselines."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from bert_core.data.classification_data import csv_columns
from bert_core.data.task_downloads import TASKS, local_task_csv
from bert_core.errors import BertCoreError
from bert_core.inspect import finetune_figures, finetune_kinds, lesson
from bert_core.inspect.safe_text import markdown_rows
from bert_core.inspect.salience import salience_panel_data
from bert_core.paths import shared_data_dir
from bert_core.inspect.finetune_kinds import KIND_PAGES, SIZES, UPLOADED
from bert_core.app import app_drawing, app_sidebar, app_state, app_tab, app_widgets, page_copy, run_panel
from bert_core.app.url_settings import one_of
from bert_core.serve import finetune_runs, model_sources, runs
from bert_core.serve.finetune_runs import FINETUNE_PAGE
from bert_core.training import finetune_race
from bert_core.training.finetune import KIND_RATE_SCALE, finetune_learning_rate, load_task, split_task
from bert_core.training.finetune_settings import PAGE_SETTINGS, PAGE_WIDGETS, FinetuneConfig, page_settings
from bert_core.training.finetune_spec import FinetuneSpec, RaceData

WORDS = page_copy.WORDS["finetune"]

INTRO = WORDS["finetune_intro"]
FIRST = next(iter(KIND_PAGES))


@dataclass(frozen=True)
class Choices:
    """What the page offers for the active model: each kind's data (bert_core.inspect.finetune_kinds: its data
    choices, its defaults, what to expect, its figures and its "try your own sentence") and its first choice, and
    the learning rate that suits the model for each kind."""

    active: Any
    datasets: dict
    all_datasets: dict
    default_data: dict
    suggested_lrs: dict
    shipped: str | None   # which shipped checkpoint is active, by its folder (a saved run may share its name)
    toy_model: bool       # it has read only the toy grammar, knows no English: its toy tasks come first


def choices(active) -> Choices:
    datasets = {kind: kp.choices(shared_data_dir()) for kind, kp in KIND_PAGES.items()}
    toy_model = active is not None and active.toy_only
    # The learning rate suits the active model and the kind: the rate it was pretrained at, scaled to its width, or
    # from its size alone when it records none (finetune_learning_rate: 1e-3 for the shipped tiny model; spans half).
    lrs = {k: (finetune_learning_rate(active.config, active.pretraining_rate, kind=k) if active is not None
               else 1e-3 * KIND_RATE_SCALE[k]) for k in KIND_PAGES}
    shipped = next((name for name, folder in model_sources.shipped_checkpoints().items()
                    if active is not None and active.path is not None
                    and Path(active.path).resolve() == folder.resolve()), None)
    # Each kind's first data: a real task where the kind prefers one and it is on this server (a toy task for a toy
    # model).
    default_data = {kind: kp.default_data(datasets[kind], lambda c: local_task_csv(c) is not None,
                                          toy_model=toy_model) for kind, kp in KIND_PAGES.items()}
    return Choices(active, datasets, {k: v for kind in datasets.values() for k, v in kind.items()}, default_data,
                   lrs, shipped, toy_model)


def seed_widgets(page: Choices) -> None:
    """Each widget's first value, from a link (held to the widget's range) or the first kind's defaults; the rate
    follows the active model and the kind; a toy model that just became active gets its kind's toy task."""
    s, data, config = st.session_state, page.default_data[FIRST], FinetuneConfig()
    # By setting: the first data's split, the kind's and the data's budget, the rate; the config's for the rest.
    first = {"train_size": SIZES[data][0], "val_size": SIZES[data][1], "learning_rate": page.suggested_lrs[FIRST],
             **{PAGE_WIDGETS[f"ft_{k}"]: v for k, v in {**KIND_PAGES[FIRST].settings,
                                                        **finetune_kinds.DATA_SETTINGS.get(data, {})}.items()}}
    app_widgets.init_widget("ft_kind", FIRST, one_of(KIND_PAGES, "no such kind of task"))
    app_widgets.init_widget("ft_data", data)
    for setting in PAGE_SETTINGS:
        value = first[setting.name] if setting.name in first else getattr(config, setting.name)
        app_widgets.seed_setting(setting, value, follow=False)
    app_widgets.init_widget("ft_tag_column", "chunk")
    s.setdefault("ft_drills", True)
    app_widgets.persist_keys("ft_kind", "ft_data", *PAGE_WIDGETS, "ft_tag_column", "ft_text_cols", "ft_label_col",
                             "ft_drop_empty", "ft_pair", "ft_second", "ft_baseline", "ft_drills")
    suggested = page.suggested_lrs[s["ft_kind"]]
    if s.get("_ft_suggested_lr", suggested) != suggested:
        s["ft_lr"] = suggested  # an active model of another size, or another kind: the rate that suits
    s["_ft_suggested_lr"] = suggested
    if s["ft_data"] not in page.datasets[s["ft_kind"]]:
        s["ft_data"] = next(iter(page.datasets[s["ft_kind"]]))
    toys = KIND_PAGES[s["ft_kind"]].built_in
    if page.toy_model and not s.get("_ft_toy_model") and toys and s["ft_data"] not in toys:
        # A toy model just became the active one (a student's own run): its kind's toy task in place of English.
        s["ft_data"] = page.default_data[s["ft_kind"]]
        on_data_change()
    s["_ft_toy_model"] = page.toy_model


@st.cache_data(max_entries=8, show_spinner="Reading the data…")
def _load(data: RaceData, upload: bytes | None):
    return load_task(data, upload)


def on_data_change():
    s = st.session_state
    s["ft_train"], s["ft_val"] = SIZES[s["ft_data"]]
    # A dataset's own settings, and the kind's back where the last dataset had its own (a typed budget stays).
    before, now = s.get("_ft_data_settings", {}), finetune_kinds.DATA_SETTINGS.get(s["ft_data"], {})
    for name in set(before) | set(now):
        s[f"ft_{name}"] = now.get(name, KIND_PAGES[s["ft_kind"]].settings[name])
    s["_ft_data_settings"] = now


def on_kind_change(default_data: dict):
    s = st.session_state
    s["ft_data"] = default_data[s["ft_kind"]]
    for name, value in KIND_PAGES[s["ft_kind"]].settings.items():
        s[f"ft_{name}"] = value
    s["_ft_data_settings"] = {}
    on_data_change()


def data_box(page: Choices):
    """The kind of task, its data and how to read it; returns the kind's page (finetune_kinds)."""
    st.radio("Kind of task", list(KIND_PAGES), format_func=lambda k: KIND_PAGES[k].label, key="ft_kind",
             on_change=on_kind_change, args=(page.default_data,), horizontal=True)
    kind = st.session_state["ft_kind"]
    kp = KIND_PAGES[kind]
    choice = st.radio("Data", list(page.datasets[kind]), format_func=page.all_datasets.get, key="ft_data",
                      on_change=on_data_change)
    if page.toy_model and (toy_warning := kp.toy_model_warning(choice)):
        st.warning(toy_warning, icon=":material/warning:")
    if choice == "upload":
        upload = st.file_uploader("A UTF-8 CSV with a header, a text column and a label column (up to 50 MB)",
                                  type=["csv", "txt"], key="ft_upload")
        if upload is not None:
            try:
                columns = csv_columns(upload.getvalue(), upload.name)
                st.multiselect("Text column(s) (two are joined, e.g. title and description)", columns,
                               key="ft_text_cols", max_selections=2)
                st.selectbox("Label column", [None, *columns], key="ft_label_col",
                             format_func=lambda c: "(guess)" if c is None else c)
                st.checkbox("Two text columns as a sentence pair (not joined)", key="ft_pair")
            except BertCoreError:
                pass   # no columns to pick: the file's fault is said once, where the page reads its data (_data)
    if choice == "upload_conll":
        st.file_uploader("A UTF-8 CoNLL file: one `word ... tag` a line, a blank line between sentences (up to "
                         "50 MB)", type=["txt", "conll", "tsv", "iob", "bio"], key="ft_upload_conll",
                         help=WORDS["tag_file_help"])
    if choice == "toy_qa":
        st.checkbox("Drills first, then the stories", key="ft_drills", help=WORDS["drills_help"])
    if choice == "upload_squad":
        st.file_uploader("A SQuAD v1.1 JSON file: passages, questions and answers with their `answer_start` (up "
                         "to 100 MB)", type=["json"], key="ft_upload_squad")
    if kp.tag_columns:
        st.selectbox("Tags", list(kp.tag_columns), key="ft_tag_column", format_func=kp.tag_columns.get)
    if kp.offers_drop_empty(choice):
        st.checkbox("Drop rows with an empty text or label", key="ft_drop_empty")
    return kp


def settings_box(page: Choices, expanded: bool) -> dict:
    """Data and settings: the data, the split and the budget (widgets drawn from the settings' descriptions,
    bert_core.training.finetune_settings), and the race's second model and baseline. Returns the checkpoints a
    second model may come from."""
    with st.expander("Data and settings", expanded=expanded):
        c1, c2, c3 = st.columns(3)
        with c1:
            kp = data_box(page)
        with c2:
            st.markdown("**Split**")
            app_widgets.setting_widgets(PAGE_SETTINGS, "split", unit=kp.unit, val_help=kp.val_help)
        with c3:
            st.markdown("**Budget (each model)**")
            app_widgets.setting_widgets(PAGE_SETTINGS, "budget",
                                        suggested_lr=f"{page.suggested_lrs[st.session_state['ft_kind']]:.2g}")
        st.markdown("**The race** (optional)")
        r1, r2 = st.columns(2)
        others = model_sources.checkpoints_beside_default(exclude=page.active.path if page.active is not None
                                                          else None)
        app_widgets.kept_choice(r1.selectbox, "Also fine-tune from", [None, *others], "ft_second",
                                format_func=lambda n: "(no second model)" if n is None else n,
                                placeholder="(no second model)",
                                help=WORDS["compare_model_help"])
        r2.checkbox(kp.baseline_label, key="ft_baseline", help=kp.baseline_help, disabled=not kp.has_baseline)
    return others


# The uploads by the data choice: the file's widget and what it is.
UPLOADS = {"upload": ("ft_upload", "a CSV file"), "upload_conll": ("ft_upload_conll", "a CoNLL file"),
           "upload_squad": ("ft_upload_squad", "a SQuAD JSON file")}


def _upload(choice: str):
    key, what = UPLOADS[choice]
    file = st.session_state.get(key)
    if file is None:
        raise BertCoreError(f"choose {what} to upload first")
    return file


def _data():
    """The chosen data (cached): labelled sentences, tagged sentences or questions; None while a real task is not on
    this server (its fetch box is shown); raises BertCoreError with what to fix."""
    choice = st.session_state["ft_data"]
    if choice in TASKS and local_task_csv(choice) is None:   # the shared copy, the cache, or the fetch box
        app_widgets.fetch_task_box(choice, "ft_fetch_task",
                                   f"Instead, {KIND_PAGES[TASKS[choice].kind].fetch_instead}.")
        return None
    return _load(race_data(), _upload(choice).getvalue() if choice in UPLOADS else None)


def describe(data, kp, page: Choices) -> None:
    """What to expect of the chosen data, and a few of its examples."""
    view = kp.describe(data, st.session_state["ft_data"], page.shipped)
    for caption in view.captions:
        st.caption(caption)
    for note in data.notes:
        st.caption(f"ℹ️ {note}")
    with st.expander("A few examples"):
        st.dataframe(pd.DataFrame(view.rows), hide_index=True, width="stretch")


def race_data(folder=None) -> RaceData:
    """The chosen data by reference, as the race's training process reads it: an upload is kept as a file in the
    race's `folder` (None: not yet, the page reads its bytes). Label names as the loader gives them: polarity's 0/1
    as negative/positive (documented in the shared data's README), AG News's from its classes.txt."""
    s = st.session_state
    choice = s["ft_data"]
    if choice in finetune_runs.PAGE_TASKS:
        return RaceData(task=finetune_runs.PAGE_TASKS[choice], drills=bool(s.get("ft_drills", True)))
    if choice == "conll2000":
        return RaceData(conll=str(local_task_csv(choice)), name="conll2000/train.txt", tag_column=s["ft_tag_column"])
    if choice in TASKS:
        return RaceData(csv=str(local_task_csv(choice)), drop_empty=bool(s.get("ft_drop_empty")))
    file = _upload(choice)
    kept = "" if folder is None else finetune_runs.keep_upload(folder, file.getvalue(), file.name)
    if choice == "upload_conll":
        return RaceData(conll=kept, name=file.name, tag_column=s["ft_tag_column"])
    if choice == "upload_squad":
        return RaceData(squad=kept, name=file.name)
    return RaceData(csv=kept, name=file.name, text_columns=tuple(s.get("ft_text_cols") or ()) or None,
                    label_column=s.get("ft_label_col"), pair=bool(s.get("ft_pair")),
                    drop_empty=bool(s.get("ft_drop_empty")))


def race_spec(run_id: str, values: dict, page: Choices, others: dict) -> FinetuneSpec:
    """This page's race as plain data: the active model by its folder (one trained in this session is written to
    the race's folder first), the data by reference, the settings under FinetuneConfig's names."""
    s, active = st.session_state, page.active
    folder = app_state.RECORDS.folder_for(run_id)
    checkpoint = (str(active.path) if active.path is not None and Path(active.path).is_dir() else
                  finetune_race.keep_source_model(active.model, active.tokenizer, folder / "source"))
    second = s.get("ft_second")
    return FinetuneSpec(
        kind=s["ft_kind"], data=race_data(folder), checkpoint=checkpoint, settings=page_settings(values),
        compare=((f"from {second}", str(others[second])),) if second else (), baseline=bool(s.get("ft_baseline")),
        train_size=int(values["ft_train"]), val_size=int(values["ft_val"]),
        data_label=UPLOADED.get(s["ft_data"], page.all_datasets[s["ft_data"]]), model_label=active.short_name,
        keep_in=str(app_state.RECORDS.checkpoint_for(run_id)))


def buttons(page: Choices, run, viewer: bool, busy: bool, data, others: dict) -> str:
    """Start (or join the queue), stop, reset and resume; returns the start button's label."""
    b1, b2, b3 = st.columns(3)
    notice = st.empty()  # what a pressed button is doing, shown before the work starts
    if viewer:
        st.info(WORDS["watching_shared_race"], icon=":material/groups:")
    racing = bool(st.session_state.get("ft_second") or st.session_state.get("ft_baseline"))
    start_label = "Run the race" if racing else "Fine-tune both"
    try:
        if page.active is None:
            st.info("Pick a model in the sidebar first: fine-tuning starts from the active model's weights.")
        start_help = ("Fine-tune the active model, then train the same architecture from scratch, same budget" +
                      ("; the race's second model and baseline too" if racing else "") +
                      ". When the server is full it waits in the queue and starts by itself.")
        if b1.button(start_label, icon=":material/play_arrow:", type="primary",
                     disabled=(busy and not viewer) or data is None or page.active is None, help=start_help):
            values = {key: st.session_state[key] for key in PAGE_WIDGETS}
            split_task(data, values["ft_train"], values["ft_val"], values["ft_seed"])  # size errors, now
            FinetuneConfig(**page_settings(values))  # and config errors, before any process starts
            notice.info(WORDS["race_starting"], icon=":material/hourglass_top:")
            if run is not None and not viewer:
                app_state.RUNS.discard(run.run_id)   # a new race replaces this tab's last one (its models held memory)
            run_id = runs.new_token()
            spec = race_spec(run_id, values, page, others)
            app_tab.start_run(spec, run_id, FINETUNE_PAGE)
        app_tab.stop_button(b2, run, busy, viewer, notice, run_panel.FINETUNE_WORDS)
        app_tab.reset_button(b3, run, viewer, run_panel.FINETUNE_WORDS)
        # A race a server restart stopped part-way: its note says what it kept; Resume goes on from there.
        if not viewer and finetune_runs.can_resume(run) and st.button(
                "Resume the race", icon=":material/resume:", type="primary", help=finetune_runs.RESUME_HELP):
            app_state.RUNS.resume(run.run_id)
            st.rerun()
    except BertCoreError as exc:
        app_drawing.show_error(exc)
    return start_label


def live(viewer: bool, busy: bool) -> None:
    """The race as it trains: its progress, each model's latest figure and the validation curves."""
    run, _ = app_tab.current_run(FINETUNE_PAGE)
    if run is None or app_tab.run_status(run, run_panel.FINETUNE_WORDS, viewer):
        return
    job = run.job
    if job is None:
        return
    comparison = job.trainer
    if comparison is None:
        st.info("Preparing: splitting the data and copying the model…", icon=":material/hourglass_top:")
        return
    if not comparison.tuners:   # a race read back after a restart that had ended none of its models
        if not finetune_runs.can_resume(run):   # else its note says what it kept, and Resume is offered
            st.info(WORDS["race_lost"], icon=":material/history:")
        return
    current = next((t.name for t in comparison.tuners if t.state == "running"), None)
    app_tab.progress_bar(run, f"{run.phase}" + (f": training {current}" if current else ""))
    names, primary = comparison.metric_names, comparison.primary
    metric = ("accuracy", "macro_f1")[primary]
    its, steps = KIND_PAGES[comparison.task_kind], comparison.config.max_steps
    st.markdown(f"**Validation {names[primary]}** of each model, so far")
    for col, tuner in zip(st.columns(len(comparison.tuners)), comparison.tuners):   # a long label is cut on a projector
        ev = tuner.evals
        col.metric(finetune_figures.RUN_LABELS.get(tuner.name, tuner.name),
                   f"{getattr(ev[-1], metric):.1%}" if ev else "–",
                   help=f"{tuner.step:,} of {steps:,} steps so far" if steps else f"{tuner.step:,} steps so far")
    staged = next((t for t in comparison.tuners if len(t.stages) > 1), None)
    # Against steps when the budget is steps: the curves a busy server draws are then the quiet one's.
    app_drawing.plotly(finetune_figures.accuracy_curves_figure(
        {t.name: t.evals for t in comparison.tuners}, x="step" if steps else "elapsed_s",
        chance=its.chance(comparison.val_data), metric=metric, metric_label=names[primary],
        stages=staged.stages if staged is not None else ()), "finetune-accuracy", key="ft_curves")
    training = next((t for t in comparison.tuners if t.state == "running" and len(t.stages) > 1), None)
    if training is not None:
        now = training.stages[-1]
        st.caption(f"**{finetune_figures.RUN_LABELS.get(training.name, training.name)}** is on stage {now.index + 1} "
                   f"of {now.count}: {now.name}. The curve is always the held-out stories: it moves little during "
                   "the drills, which teach the reading that the stories then need.")
    st.caption(its.split_caption(comparison.train_data, comparison.val_data))
    if busy and not run.active:
        st.rerun()  # drawn while running (the only time this polls) and now ended: redraw so the results appear


def _results_table(results: dict, names) -> None:
    st.subheader("Results")
    short = [r for r in results.values() if r.cut_short]
    if short:
        st.warning("Cut short by the time cap: " + "; ".join(
            f"**{finetune_figures.RUN_LABELS.get(r.name, r.name)}** made {r.steps:,} of its {r.steps_asked:,} steps"
            for r in short) + ". This server was too slow or too busy for the steps in the cap, so these figures are "
            "those of fewer steps than asked for, and a model cut shorter than the others had less of a chance. "
            "Raise *Time cap per model* (or lower the steps) and run the race again for a fair one.",
            icon=":material/timer_off:")
    st.dataframe(pd.DataFrame([{
        "run": finetune_figures.RUN_LABELS.get(r.name, r.name), names[0]: f"{r.accuracy:.1%}",
        names[1]: f"{r.macro_f1:.1%}", "steps": r.steps, "training seconds": round(r.train_seconds, 1),
        "state": r.state} for r in results.values()]), hide_index=True, width="stretch")


def _draw(blocks) -> None:
    """A kind's figures (finetune_kinds.Block), in order: elements, and columns and expanders of them."""
    for b in blocks:
        if b.what == "columns":
            for column, part in zip(st.columns(list(b.widths) or len(b.parts)), b.parts):
                with column:
                    _draw(part)
        elif b.what == "expander":
            with st.expander(b.body):
                _draw(b.parts)
        elif b.what == "plotly":
            app_drawing.plotly(b.body, b.name, key=b.key)
        elif b.what == "table":   # its cells are Markdown, and hold a visitor's labels and texts
            st.table(pd.DataFrame(markdown_rows(b.body)), **b.options)
        elif b.what == "dataframe":
            st.dataframe(pd.DataFrame(b.body), **b.options)
        else:   # caption, markdown, html
            getattr(st, b.what)(b.body, **b.options)


def _try_your_own(results: dict, comparison, run_id: str) -> None:
    """The kind's "try your own sentence": its inputs, each fine-tuned model's answer, and why (on request)."""
    its = KIND_PAGES[comparison.task_kind]
    st.subheader(its.try_title)
    fields = its.try_fields(comparison.val_data)
    for f in fields:
        getattr(st, f.widget)(f.label, key=f.key, **f.options)
    values = {f.key: st.session_state.get(f.key) for f in fields}
    try:
        _draw(its.try_blocks(results, values, comparison.val_data, comparison.config.max_length))
    except BertCoreError as exc:
        app_drawing.show_error(exc)
    _why(its, results, its.explained(values, comparison.val_data), comparison.config.max_length, run_id)


def _why(its, results: dict, explained, max_length: int, run_id: str) -> None:
    """On request (integrated gradients take about a second): why one fine-tuned model answered as it did."""
    if not st.toggle("Why? Each token's share of the answer, and each attention head's", key="ft_why",
                     help=WORDS["explain_help"]):
        return
    tuned = {n: r for n, r in results.items() if r.model is not None and r.tokenizer is not None}
    if explained is None or not tuned:
        st.caption("Type an input above first.")
        return
    name = app_widgets.kept_choice(st.selectbox, "Model to explain", tuned, "ft_why_model",
                                   format_func=lambda n: finetune_figures.RUN_LABELS.get(n, n))
    app_drawing.salience_panel("ft", salience_panel_data, run_id, name, tuned[name], its.name, explained, max_length)


def main() -> None:
    active = app_sidebar.open_page("Fine-tune", "Fine-tune: does pretraining pay?", page_icon="🎯")
    app_state.warm_launcher()
    st.markdown(INTRO)
    if st.session_state.get("ft_from_lesson"):
        # Arrived from the lesson: the way back to the step it left, with this race reported there.
        app_drawing.page_link("pages/0_Lesson.py", "Back to the lesson (step "
                              f"{lesson.step_index(st.session_state['ft_from_lesson']) + 1}: fine-tuning)",
                              ":material/arrow_back:", step=st.session_state["ft_from_lesson"])
    if active is not None and active.config.attention == "causal":
        st.caption(WORDS["gpt_classifier_note"])
    page = choices(active)
    seed_widgets(page)
    # This tab's race: a run of the server's one queue, found from the URL (`?ft=`, a share link's `?ftwatch=`)
    # after a reload, or from the session.
    app_tab.attach_run(FINETUNE_PAGE)
    run, role = app_tab.current_run(FINETUNE_PAGE)
    viewer = role == runs.VIEWER          # watching someone's shared race: it can look, never steer
    job = run.job if run is not None else None
    busy = run is not None and run.active      # queued, preparing or training
    others = settings_box(page, expanded=not (job is not None and job.trainer is not None))
    kp = KIND_PAGES[st.session_state["ft_kind"]]
    app_widgets.sync_query("ft_kind", "ft_data", *PAGE_WIDGETS, "ft_tag_column")
    app_tab.my_runs_list()   # this browser's races and pretraining runs (one to fine-tune from), with their links
    data = None
    try:
        data = _data()
    except BertCoreError as exc:
        app_drawing.show_error(exc)
    if data is not None:
        describe(data, kp, page)
    start_label = buttons(page, run, viewer, busy, data, others)
    app_tab.share_box(run, viewer, run_panel.FINETUNE_WORDS)
    st.divider()
    # A race of another kind than the settings now show is not drawn under them (the note below says so); a watched
    # race is always drawn: its viewer's settings are their own.
    stale = run is not None and not viewer and run.spec.kind != st.session_state["ft_kind"]
    if not stale:
        st.fragment(live, run_every=app_state.poll_seconds() if busy else None)(viewer, busy)
    if stale:
        st.info(f"Your last race was on {run.spec.task_label}; the settings above are for {kp.label.lower()}. "
                "Press the button to race on them; the last race stays in *My runs*.", icon=":material/swap_horiz:")
    elif job is not None and job.trainer is not None and not busy:
        results = job.trainer.results
        if results:
            comparison = job.trainer
            _results_table(results, comparison.metric_names)
            _draw(KIND_PAGES[comparison.task_kind].result_blocks(results))
            _try_your_own(results, comparison, run.run_id)
    elif run is None:
        st.info(WORDS["race_start_hint"].format(start_label=start_label))
        st.caption(app_state.RUNS.where())


main()
