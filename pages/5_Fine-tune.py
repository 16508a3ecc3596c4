"""Fine-tune the active model to classify text, and the same architecture from scratch with the same budget; or
race it against a second checkpoint (BERT against GPT) and a bag-of-words baseline."""

from functools import partial

import pandas as pd
import streamlit as st

from bert_core.data.classification_data import csv_columns, load_classification_csv, split_train_val, toy_topic_task
from bert_core.errors import BertCoreError
from bert_core.inspect import finetune_figures
from bert_core.paths import shared_data_dir
from bert_core.serve import app_state, jobs, model_sources
from bert_core.training.finetune import build_comparison, comparison_config, result_probabilities

st.set_page_config(page_title="Fine-tune · BERT explorer", page_icon="🎯", layout="wide")
active = app_state.sidebar()
st.title("Fine-tune: does pretraining pay?")
st.markdown(
    "BERT's promise is *pretrain once, fine-tune cheaply*. Here the active model gets a classifier on its "
    "[CLS] vector and is trained on a small labelled set. Then **the same architecture from scratch** (random "
    "weights, same tokenizer) gets the same data and the same time budget. Their validation accuracy curves are "
    "drawn on one chart. **The race:** add a second pretrained model (e.g. the GPT-style checkpoint beside the "
    "BERT) and the bag-of-words line a student who knows some ML will ask about.")
if active is not None and active.config.attention == "causal":
    st.caption("The active model is GPT-style (causal): its classifier reads the last token (the final [SEP]), as "
               "GPT-1 did, because under causal attention [CLS] sees only itself.")

SHARED = shared_data_dir()
DATASETS = {"toy": "Toy story topics (built-in, 10 classes)"}
SHARED_FILES = {"ag_news": ("ag_news/news.csv", "AG News topics (4 classes)"),
                "polarity": ("sentence_polarity/polarity.csv", "Movie-review polarity (2 classes)")}
for key, (rel, label) in SHARED_FILES.items():
    if SHARED is not None and (SHARED / rel).is_file():
        DATASETS[key] = label
DATASETS["upload"] = "Upload a CSV"
SIZES = {"toy": (200, 500), "ag_news": (2000, 500), "polarity": (2000, 500), "upload": (2000, 500)}

defaults = dict(data="toy", train=200, val=500, seed=0, budget=30, lr=1e-3, batch=32, maxlen=64)
casts = dict(train=int, val=int, seed=int, budget=int, lr=float, batch=int, maxlen=int)
for name, value in defaults.items():
    app_state.init_widget(f"ft_{name}", value, casts.get(name, str))
app_state.persist_keys(*(f"ft_{n}" for n in defaults), "ft_text_cols", "ft_label_col", "ft_drop_empty", "ft_pair",
                       "ft_second", "ft_baseline")
if st.session_state["ft_data"] not in DATASETS:
    st.session_state["ft_data"] = "toy"


@st.cache_data(max_entries=8, show_spinner="Reading the data…")
def _load_shared(rel: str, text_columns, label_column, drop_empty: bool):
    return load_classification_csv(SHARED / rel, text_columns, label_column, drop_empty=drop_empty)


@st.cache_data(max_entries=4, show_spinner="Reading the CSV…")
def _load_upload(data: bytes, name: str, text_columns, label_column, drop_empty: bool, as_pair: bool):
    return load_classification_csv(data, text_columns, label_column, drop_empty=drop_empty, as_pair=as_pair,
                                   name=name)


@st.cache_data(max_entries=4)
def _toy(seed: int):
    return toy_topic_task(seed)


def _on_data_change():
    train, val = SIZES[st.session_state["ft_data"]]
    st.session_state["ft_train"], st.session_state["ft_val"] = train, val


sid = app_state.finetune_key()   # in the URL while a fine-tuning exists: a reload finds it again
registry = app_state.FINETUNE_REGISTRY
job = registry.get(sid)
busy = job is not None and job.busy

with st.expander("Data and settings", expanded=not (job is not None and job.trainer is not None)):
    c1, c2, c3 = st.columns(3)
    with c1:
        st.markdown("**Labelled data**")
        choice = st.radio("Task", list(DATASETS), format_func=DATASETS.get, key="ft_data", on_change=_on_data_change)
        upload = None
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
                except BertCoreError as exc:
                    app_state.show_error(exc)
        if choice != "toy":
            st.checkbox("Drop rows with an empty text or label", key="ft_drop_empty")
    with c2:
        st.markdown("**Split**")
        st.number_input("Training examples", 10, 100_000, step=100, key="ft_train")
        st.number_input("Validation examples", 10, 20_000, step=100, key="ft_val")
        st.number_input("Seed (split, head, batches)", 0, 2**31 - 1, key="ft_seed")
    with c3:
        st.markdown("**Budget (each model)**")
        st.number_input("Training seconds per model", 1, 600, step=5, key="ft_budget")
        st.number_input("Peak learning rate", 1e-6, 1e-1, format="%.5f", key="ft_lr",
                        help="1e-3 suits the tiny shipped model; BERT-base wants about 2e-5 to 5e-5")
        st.number_input("Batch size", 1, 256, key="ft_batch")
        st.number_input("Max length (tokens)", 16, 512, step=16, key="ft_maxlen")
    st.markdown("**The race** (optional)")
    r1, r2 = st.columns(2)
    OTHERS = model_sources.checkpoints_beside_default(exclude=active.path if active is not None else None)
    if st.session_state.get("ft_second") not in OTHERS:
        st.session_state["ft_second"] = None
    r1.selectbox("Also fine-tune from", [None, *OTHERS], key="ft_second",
                 format_func=lambda n: "(no second model)" if n is None else n, placeholder="(no second model)",
                 help="A checkpoint beside the shipped one, e.g. the GPT-style model: same data, budget and seed. "
                      "A GPT-style model's classifier reads the last token, not [CLS], which under causal attention "
                      "sees only itself.")
    r2.checkbox("Bag-of-words baseline: TF-IDF + logistic regression", key="ft_baseline",
                help="Fitted on the same training split in seconds (scikit-learn), word order ignored: the line "
                     "to beat.")

app_state.sync_query(*(f"ft_{n}" for n in defaults))


def _data():
    """The chosen labelled data (cached), or raises BertCoreError with what to fix."""
    s = st.session_state
    choice = s["ft_data"]
    if choice == "toy":
        return _toy(0)
    if choice in SHARED_FILES:
        # Label names as the loader gives them: polarity's 0/1 as negative/positive (documented in the shared data's
        # README), AG News's from its classes.txt; an uploaded CSV keeps its own labels.
        return _load_shared(SHARED_FILES[choice][0], None, None, bool(s.get("ft_drop_empty")))
    file = s.get("ft_upload")
    if file is None:
        raise BertCoreError("choose a CSV file to upload first")
    cols = tuple(s.get("ft_text_cols") or ()) or None
    return _load_upload(file.getvalue(), file.name, cols, s.get("ft_label_col"), bool(s.get("ft_drop_empty")),
                        bool(s.get("ft_pair")))


data = None
try:
    data = _data()
except BertCoreError as exc:
    app_state.show_error(exc)

if data is not None:
    counts = ", ".join(f"{n} {c:,}" for n, c in zip(data.label_names, data.label_counts()))
    st.caption(f"**{data.source}**: {len(data):,} examples, {data.num_labels} labels ({counts}); text from "
               f"{' + '.join(data.text_columns)}, label from {data.label_column}.")
    for note in data.notes:
        st.caption(f"ℹ️ {note}")
    with st.expander("A few examples"):
        st.dataframe(pd.DataFrame({"label": [data.label_names[y] for y in data.labels[:8]],
                                   "text": [data.example_text(i) for i in range(min(8, len(data)))]}),
                     hide_index=True, width="stretch")


b1, b2, b3 = st.columns(3)
notice = st.empty()  # what a pressed button is doing, shown before the work starts
try:
    if active is None:
        st.info("Pick a model in the sidebar first: fine-tuning starts from the active model's weights.")
    racing = bool(st.session_state.get("ft_second") or st.session_state.get("ft_baseline"))
    start_help = ("Fine-tune the active model, then train the same architecture from scratch, same budget" +
                  ("; the race's second model and baseline too" if racing else ""))
    if b1.button("Run the race" if racing else "Fine-tune both", icon=":material/play_arrow:", type="primary",
                 disabled=busy or data is None or active is None, help=start_help):
        s = st.session_state
        settings = {k: s[f"ft_{k}"] for k in ("train", "val", "seed", "budget", "lr", "batch", "maxlen")}
        split_train_val(data, settings["train"], settings["val"], seed=settings["seed"])  # size errors, now
        comparison_config(settings)  # and config errors, before any process starts
        others = []
        if s.get("ft_second"):
            second, second_tokenizer, _ = app_state.load_folder_cached(OTHERS[s["ft_second"]])
            others.append((f"from {s['ft_second']}", second, second_tokenizer))
        notice.info("Starting: a training process is loading PyTorch and receiving a copy of the model and the "
                    "data (a few seconds)…", icon=":material/hourglass_top:")
        if job is not None:
            registry.discard(sid)
        new_job = jobs.finetune_job(sid, partial(build_comparison, data, active.model, active.tokenizer,
                                                 settings, others, bool(s.get("ft_baseline"))))
        registry.start(new_job)
        st.rerun()
    if b2.button("Stop", icon=":material/stop:", disabled=not busy):
        notice.info("Stopping: the model in training ends after the step it is on…", icon=":material/hourglass_top:")
        job.stop(wait=10)
        st.rerun()
    if b3.button("Reset", icon=":material/restart_alt:", disabled=job is None):
        registry.discard(sid)
        st.rerun()
except BertCoreError as exc:
    app_state.show_error(exc)


def _live() -> None:
    job = registry.get(sid)
    if job is None:
        return
    if job.error:
        st.error(f"Fine-tuning failed: {job.error}")
    comparison = job.trainer
    if comparison is None:
        st.info("Preparing: splitting the data and copying the model…", icon=":material/hourglass_top:")
        return
    prog = comparison.progress
    current = next((t.name for t in comparison.tuners if t.state == "running"), None)
    st.progress(min(max(prog.fraction, 0.0), 1.0),
                text=f"{job.phase}" + (f": training {current}" if current else "") +
                     f" · time left {jobs.format_duration(prog.eta_s)}")
    runs = {t.name: t.evals for t in comparison.tuners}
    counts = comparison.train_data.label_counts()
    chance = max(comparison.val_data.label_counts()) / max(len(comparison.val_data), 1)
    cols = st.columns(len(comparison.tuners))
    for col, tuner in zip(cols, comparison.tuners):
        ev = tuner.evals
        col.metric(f"{finetune_figures.RUN_LABELS.get(tuner.name, tuner.name)}: validation accuracy",
                   f"{ev[-1].accuracy:.1%}" if ev else "–", help=f"{tuner.step:,} steps so far")
    app_state.plotly(finetune_figures.accuracy_curves_figure(runs, chance=chance), "finetune-accuracy",
                     key="ft_curves")
    st.caption(f"{len(comparison.train_data):,} training examples ({', '.join(map(str, counts))} per label), "
               f"{len(comparison.val_data):,} validation; the dashed line is always guessing the largest class.")
    if busy and not job.busy:
        st.rerun()  # drawn while running (the only time this polls) and now ended: redraw so the results appear


st.divider()
st.fragment(_live, run_every=app_state.poll_seconds() if busy else None)()

if job is not None and job.trainer is not None and not busy:
    results = job.trainer.results
    if results:
        st.subheader("Results")
        st.dataframe(pd.DataFrame([{
            "run": finetune_figures.RUN_LABELS.get(r.name, r.name), "accuracy": f"{r.accuracy:.1%}",
            "macro-F1": f"{r.macro_f1:.1%}", "steps": r.steps, "training seconds": round(r.train_seconds, 1),
            "state": r.state} for r in results.values()]), hide_index=True, width="stretch")
        if "tfidf" in results:
            st.caption(f"The bag-of-words line was fitted on the same training split in "
                       f"{results['tfidf'].train_seconds:.1f} s and scored on the same validation rows; it ignores "
                       "word order and had no pretraining. A tiny model fine-tuned for seconds does not always beat "
                       "it: that is an honest result, not a bug.")
        cols = st.columns(len(results))
        for col, r in zip(cols, results.values()):
            with col:
                app_state.plotly(finetune_figures.confusion_figure(
                    r.confusion, r.label_names, f"Confusion matrix, {finetune_figures.RUN_LABELS.get(r.name, r.name)}"),
                    f"confusion-{r.name}", key=f"ft_conf_{r.name}")
                st.markdown(f"**Most confident mistakes ({finetune_figures.RUN_LABELS.get(r.name, r.name)})**")
                if r.misclassified:
                    # A static table: every column on screen, long texts wrapped (a data grid scrolls them away).
                    st.table(pd.DataFrame(finetune_figures.mistakes_table(r.misclassified)), hide_index=True)
                else:
                    st.caption("No mistakes on the validation set.")
        st.subheader("Classify a sentence with each")
        val = getattr(job.trainer, "val_data", None) or data
        example = val.example_text(0) if val is not None and len(val) else "a sentence like the task's"
        sentence = st.text_input("Sentence", key="ft_sentence",
                                 placeholder=f"e.g. {finetune_figures.shorten(example)}",
                                 help="Any text; the placeholder is a validation example of this task.")
        if sentence.strip():
            try:
                first = next(iter(results.values()))
                probs = {name: result_probabilities(r, sentence, max_length=job.trainer.config.max_length)
                         for name, r in results.items()}
                rows = [{"model": finetune_figures.RUN_LABELS.get(n, n),
                         "prediction": first.label_names[max(range(len(p)), key=p.__getitem__)],
                         "confidence": f"{max(p):.0%}"} for n, p in probs.items()]
                st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
                app_state.plotly(finetune_figures.class_probabilities_figure(probs, first.label_names),
                                 "finetune-probabilities", key="ft_probs")
            except BertCoreError as exc:
                app_state.show_error(exc)
elif job is None:
    st.info("Choose the data and the budget, then press **Fine-tune both**. Each model trains for the same "
            "number of seconds, one after the other.")
