"""Fine-tune the active model on one of the three kinds of task of the BERT paper (a label per sentence, a tag per
word, an answer span in a passage), and the same architecture from scratch with the same budget; or race it
against a second checkpoint (BERT against GPT) and the kind's baselines."""

from pathlib import Path

import pandas as pd
import streamlit as st

from bert_core.data.answer_spans_data import load_squad, toy_qa_task
from bert_core.data.classification_data import csv_columns, load_classification_csv, toy_order_task, toy_topic_task
from bert_core.data.task_downloads import TASKS, fetch_task_csv, local_task_csv
from bert_core.data.token_tags_data import read_conll
from bert_core.errors import BertCoreError
from bert_core.inspect import finetune_figures, lesson
from bert_core.paths import shared_data_dir
from bert_core.serve import app_state, app_storage, finetune_runs, jobs, model_sources, runs
from bert_core.serve.finetune_runs import FINETUNE_PAGE
from bert_core.training import finetune_race
from bert_core.training.answer_spans import answer_question
from bert_core.training.finetune import (
    KIND_RATE_SCALE,
    TOY_QA_STEPS,
    comparison_config,
    finetune_learning_rate,
    result_probabilities,
    split_task,
)
from bert_core.training.token_tagging import tag_words

st.set_page_config(page_title="Fine-tune · BERT explorer", page_icon="🎯", layout="wide")
active = app_state.sidebar()
app_state.warm_launcher()
st.title("Fine-tune: does pretraining pay?")
st.markdown(
    "BERT's promise is *pretrain once, fine-tune cheaply*. Here the active model gets a small head and is trained "
    "on a small labelled set, in one of the three ways the BERT paper fine-tuned: **a label per sentence** (a "
    "classifier on [CLS]), **a tag per word** (a classifier on every word's first WordPiece: chunks, parts of "
    "speech) or **an answer span** (a start and an end score on every token of a passage). Then **the same "
    "architecture from scratch** (random weights, same tokenizer) gets the same data and the same number of steps, "
    "and their validation curves are drawn on one chart. **The race:** add a second pretrained model (e.g. the "
    "GPT-style checkpoint beside the BERT) and the baselines a student who knows some ML will ask about.")
if st.session_state.get("ft_from_lesson"):
    # Arrived from the lesson: the way back to the step it left, with this race reported there.
    app_state.page_link_with("pages/0_Lesson.py", "Back to the lesson (step "
                             f"{lesson.step_index(st.session_state['ft_from_lesson']) + 1}: fine-tuning)",
                             ":material/arrow_back:", step=st.session_state["ft_from_lesson"])
if active is not None and active.config.attention == "causal":
    st.caption("The active model is GPT-style (causal): its classifier reads the last token (the final [SEP]), as "
               "GPT-1 did, because under causal attention [CLS] sees only itself.")

SHARED = shared_data_dir()
KINDS = {"labels": "A label per sentence", "tags": "A tag per word", "spans": "An answer span"}
DATASETS = {"labels": {"toy_order": "Toy stories: their own word order, or shuffled? (built-in, 2 classes)",
                       "toy": "Toy story topics (built-in, 10 classes)"}, "tags": {}, "spans": {}}
SHARED_FILES = {"ag_news": ("labels", "ag_news/news.csv", "AG News topics (4 classes)"),
                "polarity": ("labels", "sentence_polarity/polarity.csv", "Movie-review polarity (2 classes)"),
                "conll2000": ("tags", "conll2000/train.txt", "CoNLL-2000 chunks (Wall Street Journal sentences)")}
for key, (task_kind, rel, label) in SHARED_FILES.items():
    # The two real sentence tasks are offered everywhere: read from the shared folder or the cache, else fetched
    # from their public homes when first picked (a Docker image fetches them when it is built).
    if key in TASKS or (SHARED is not None and (SHARED / rel).is_file()):
        DATASETS[task_kind][key] = label
DATASETS["labels"]["upload"] = "Upload a CSV"
DATASETS["tags"]["upload_conll"] = "Upload a CoNLL file"
DATASETS["spans"].update(toy_qa="Toy stories: who went where, and what they found (built-in)",
                         upload_squad="Upload a SQuAD v1.1 JSON file")
ALL_DATASETS = {k: v for kind in DATASETS.values() for k, v in kind.items()}
# How a run list names a race's uploaded data (never the file's name or a server path).
UPLOADED = {"upload": "an uploaded CSV", "upload_conll": "an uploaded CoNLL file",
            "upload_squad": "an uploaded SQuAD file"}
# (training, validation) examples: sentences for labels and tags, questions for spans.
SIZES = {"toy_order": (200, 500), "toy": (200, 500), "ag_news": (2000, 500), "polarity": (2000, 500),
         "upload": (2000, 500), "conll2000": (2000, 500), "upload_conll": (2000, 300), "toy_qa": (3000, 500),
         "upload_squad": (2000, 300)}
# What a kind starts from on this page (each measured with the shipped models: docs/benchmarks.md). The budget is in
# steps, so that a busy server gives a class the same figures as a quiet one, only later; `budget` is a time cap in
# seconds a model, which cuts a run short only on a machine too slow or too busy for its steps (the page then says
# so, with the steps it got).
KIND_SETTINGS = {"labels": dict(steps=600, budget=300, maxlen=64), "tags": dict(steps=600, budget=300, maxlen=128),
                 "spans": dict(steps=600, budget=300, maxlen=256)}
# ... and what a dataset changes of it: the lesson's word-order race is decided within 300 steps (a few seconds a
# model); the toy stories need their drills and then the stories, the CLI's 8,000 steps, which take a CPU thread
# longer than its cap (EXPECT_QA_BY_MODEL says what the cap leaves).
DATA_SETTINGS = {"toy_order": dict(lesson.LESSON_RACE_DATA_SETTINGS),
                 "toy_qa": dict(steps=TOY_QA_STEPS, budget=600)}
# The learning rate suits the active model and the kind: the rate it was pretrained at, scaled to its width, or from
# its size alone when it records none (finetune_learning_rate: 1e-3 for the shipped tiny model; answer spans half).
SUGGESTED_LRS = {k: (finetune_learning_rate(active.config, active.pretraining_rate, kind=k)
                     if active is not None else 1e-3 * KIND_RATE_SCALE[k]) for k in KINDS}
# Typed text is tagged or answered in the server's own process, by every fine-tuned model: bounded, so that one
# visitor's pasted book does not hold a shared server (a passage this long is about 10 windows of 256 tokens).
MAX_TYPED_CHARS, MAX_PASSAGE_CHARS = 1_000, 5_000
# What the real tasks gave with this page's defaults and the shipped model (seeds 0-2, one thread a run, bf16 autocast
# on a 2-core Intel VM with bfloat16 instructions, 2026-11-28; in steps, the same on any load of that machine;
# docs/benchmarks.md, "The Fine-tune page's defaults in steps").
EXPECT = {"polarity": "What to expect with this page's defaults (2,000 training sentences, 600 steps a model) and "
                      "the shipped model: pretrained 66-68%, from scratch 62-66%, the bag of words 70-73% (seeds "
                      "0-2). Pretraining is ahead by about 2 points on average, but a seed can tie: try two or three. "
                      "The 2-layer shipped model does not yet beat a bag of words here.",
          "ag_news": "What to expect with this page's defaults (2,000 training rows, 600 steps a model) and the "
                     "shipped model: pretrained 77-79%, from scratch 73-78%, the bag of words 83-85% (seeds 0-2). "
                     "Pretraining pays against the same model from scratch; topic words give a bag of words the lead."}
# The same race with the larger shipped BERT active (2026-11-28, as EXPECT; docs/benchmarks.md, "The Fine-tune page's
# defaults in steps"; the 1,500-step figures: #28's protocol at seeds 0-4 and 20-25, "Eleven splits, and four more
# levers").
EXPECT_BY_MODEL = {"bert-mini-english": {
    "polarity": "What to expect with this page's defaults (600 steps a model) and bert-mini-english: pretrained "
                "71-74%, from scratch 49-60%, the bag of words 70-73% (seeds 0-2; the tiny, pretrained, 66-68%). "
                "Each of its steps takes about three times the tiny's on a CPU. With more steps it passes the bag "
                "of words: 1,500 (`finetune --steps 1500`, 2 minutes on one core with bfloat16 instructions, 7 "
                "elsewhere) gave 77.5% against 75.3% over eleven larger splits.",
    "ag_news": "What to expect with this page's defaults (600 steps a model) and bert-mini-english: pretrained "
               "81.8%, from scratch 53.4%, the bag of words 84.8% (seed 0; the tiny, pretrained, 77-79%). Topic "
               "words keep the bag of words ahead: 1,500 steps (4 minutes on one core with bfloat16 instructions, "
               "13 elsewhere) gave 84.3% against its 86.3% over eleven larger splits."}}
# The built-in sentence tasks, with the model the lesson trains (the Train page's default run; docs/lessons.md, "The
# lesson's race", seeds 0-2, 2026-11-28).
EXPECT_TOY = {
    "toy_order": "What to expect with the lesson's settings (200 training sentences, 300 steps a model) and the Train "
                 "page's default run as the model: pretrained 93-97%, from scratch 58-65%, the bag of words 74-78%. "
                 "Both classes hold the same words, so only knowing how the stories' sentences go tells them apart: "
                 "what masked-word pretraining on the stories taught.",
    "toy": "What to expect with a model pretrained on the toy stories (the Train page's default run): its from-scratch "
           "twin wins here, 96-98% against 74-77% (seed 0), and the bag of words about 74%. A topic is given away by "
           "single words, which a random model's nearly even attention already adds up; pretraining taught the toy "
           "model which slot a noun fills, not which story it belongs to (docs/lessons.md, \"Why not the toy "
           "topics?\"). The word-order task is where its pretraining pays."}
# The toy stories after their drills (docs/benchmarks.md, "The drills as the task's recipe").
EXPECT_QA_DRILLS = (
    "What to expect: the drills come first, in order, each until its last training batches are 95% right or its "
    "share of the budget, and what the drills before it left unused, is spent; the curve is always the held-out "
    "stories, so it stays low through the drills (dotted lines mark where each began) and climbs once the stories "
    "begin. Each drill clicks at its own moment, a different one for each seed. docs/benchmarks.md (\"The drills "
    "as the task's recipe\") gives the figures.")
# ... and what the shipped models reached (2026-11-27, one CPU thread a run, other runs beside them).
EXPECT_QA_BY_MODEL = {
    "bert-mini-english": "With bert-mini-english, `finetune --task toy-qa` (8,000 steps, 18 to 21 minutes a run on "
                         "one thread of a 2-core CPU shared with other runs) read the held-out stories at 94.3 / "
                         "95.5 / 100.0% exact match (seeds 0 / 1 / 2). This page's 600 s on one CPU thread held "
                         "4,954 steps at seed 0: every drill learnt within 329 s, then the stories at 91.9%. An "
                         "H200 shared with pretraining ran the stories at about 57 steps a second "
                         "(docs/benchmarks.md): the whole 8,000 steps fit in 600 s there.",
    "bert-tiny-english": "With bert-tiny-english (2 layers) the drills click at some seeds only and the stories "
                         "stop short of the mini's: `finetune --task toy-qa` (8,000 steps, about 8 minutes on one "
                         "thread) read them at 73.1 / 33.5 / 35.6% (seeds 0 / 1 / 2), and this page's 600 s at "
                         "52.2% (seed 0: every drill learnt, then the stories level near 52% after 2,100 steps): "
                         "choose bert-mini-english in the sidebar to watch them being read."}
# Which shipped checkpoint is active, by its folder (a saved run that a visitor names "bert-mini-english" is not it).
ACTIVE_SHIPPED = next((name for name, folder in model_sources.shipped_checkpoints().items()
                       if active is not None and active.path is not None
                       and Path(active.path).resolve() == folder.resolve()), None)
BASELINE_LABELS = {"labels": "Bag-of-words baseline: TF-IDF + logistic regression",
                   "tags": "Majority-tag baselines: each word's, and each POS tag's, most frequent tag",
                   "spans": "Baseline (none for answer spans)"}
BASELINE_HELP = {"labels": "Fitted on the same training split in seconds (scikit-learn), word order ignored: the "
                           "line to beat.",
                 "tags": "The CoNLL-2000 task's classic baselines, on the same split: 71 and 77 chunk F1 on its "
                         "official test set.",
                 "spans": "Answer spans have no cheap baseline here."}

# A real task is the default wherever one is on this server: the toy topics, which a bag of words solves outright,
# cannot show whether pretraining pays.
DEFAULT_DATA = "polarity" if local_task_csv("polarity") is not None else "toy_order"
defaults = {"kind": "labels", "data": DEFAULT_DATA, "train": SIZES[DEFAULT_DATA][0], "val": SIZES[DEFAULT_DATA][1],
            "seed": 0, **KIND_SETTINGS["labels"], **DATA_SETTINGS.get(DEFAULT_DATA, {}), "lr": SUGGESTED_LRS["labels"],
            "batch": 32, "tag_column": "chunk"}
casts = dict(train=int, val=int, seed=int, steps=int, budget=int, lr=float, batch=int, maxlen=int)
for name, value in defaults.items():
    app_state.init_widget(f"ft_{name}", value, casts.get(name, str))
st.session_state.setdefault("ft_drills", True)
app_state.persist_keys(*(f"ft_{n}" for n in defaults), "ft_text_cols", "ft_label_col", "ft_drop_empty", "ft_pair",
                       "ft_second", "ft_baseline", "ft_drills")
if st.session_state["ft_kind"] not in KINDS:
    st.session_state["ft_kind"] = "labels"
SUGGESTED_LR = SUGGESTED_LRS[st.session_state["ft_kind"]]
if st.session_state.get("_ft_suggested_lr", SUGGESTED_LR) != SUGGESTED_LR:
    st.session_state["ft_lr"] = SUGGESTED_LR  # an active model of another size, or another kind: the rate that suits
st.session_state["_ft_suggested_lr"] = SUGGESTED_LR
if st.session_state["ft_data"] not in DATASETS[st.session_state["ft_kind"]]:
    st.session_state["ft_data"] = next(iter(DATASETS[st.session_state["ft_kind"]]))


@st.cache_data(max_entries=8, show_spinner="Reading the data…")
def _load_shared(path: str, text_columns, label_column, drop_empty: bool):
    return load_classification_csv(path, text_columns, label_column, drop_empty=drop_empty)


def _fetch_box(choice: str) -> None:
    """Offer to fetch a real task that is not on this server yet, with progress; a failure is said on the page."""
    task = TASKS[choice]
    st.info(f"**{task.label}** is not on this server yet. It is fetched once (about {task.approx_mb:g} MB from "
            f"[its public home]({task.home})) and kept for every visitor.", icon=":material/download:")
    if st.button("Fetch it", key="ft_fetch_task", icon=":material/download:"):
        bar = st.progress(0.0, text="Connecting…")

        def report(done: int, total: int | None) -> None:
            bar.progress(min(done / total, 1.0) if total else 0.0, text=f"{done / 1e6:.1f} MB"
                         + (f" of {total / 1e6:.1f} MB" if total else ""))
        try:
            fetch_task_csv(choice, progress=report)
        except (BertCoreError, OSError) as exc:
            bar.empty()
            # The download's own message names the cache folder: a visitor of a public server learns none of it.
            instead = ("upload a CoNLL file (*Upload a CoNLL file*)" if task.kind == "tags" else
                       "pick a built-in toy task, or upload the data as a labelled CSV (*Upload a CSV*)")
            st.error(f"Could not fetch {task.label} from its public home: this server may be offline, or the site "
                     f"down. Instead, {instead}."
                     + ("" if app_storage.public_mode() else f"\n\nDetails: {exc}"))
            return
        st.rerun()


@st.cache_data(max_entries=4, show_spinner="Reading the CSV…")
def _load_upload(data: bytes, name: str, text_columns, label_column, drop_empty: bool, as_pair: bool):
    return load_classification_csv(data, text_columns, label_column, drop_empty=drop_empty, as_pair=as_pair,
                                   name=name)


@st.cache_data(max_entries=4, show_spinner="Reading the tagged sentences…")
def _load_conll(source, name: str, tag_column: str):
    return read_conll(Path(source) if isinstance(source, str) else source, tag_column, name=name)


@st.cache_data(max_entries=4, show_spinner="Reading the questions…")
def _load_squad(data: bytes, name: str):
    return load_squad(data, name=name)


@st.cache_data(max_entries=4)
def _toy(seed: int):
    return toy_topic_task(seed)


@st.cache_data(max_entries=4)
def _toy_order(seed: int):
    return toy_order_task(seed)


@st.cache_data(max_entries=4)
def _toy_qa(seed: int, drills: bool):
    return toy_qa_task(seed, drills=drills)


def _on_data_change():
    s = st.session_state
    s["ft_train"], s["ft_val"] = SIZES[s["ft_data"]]
    # A dataset's own settings, and the kind's back where the last dataset had its own (a typed budget stays).
    before, now = s.get("_ft_data_settings", {}), DATA_SETTINGS.get(s["ft_data"], {})
    for name in set(before) | set(now):
        s[f"ft_{name}"] = now.get(name, KIND_SETTINGS[s["ft_kind"]][name])
    s["_ft_data_settings"] = now


def _on_kind_change():
    s = st.session_state
    s["ft_data"] = DEFAULT_DATA if s["ft_kind"] == "labels" else next(iter(DATASETS[s["ft_kind"]]))
    for name, value in KIND_SETTINGS[s["ft_kind"]].items():
        s[f"ft_{name}"] = value
    s["_ft_data_settings"] = {}
    _on_data_change()


# This tab's race: a run of the server's one queue, found from the URL (`?ft=`, a share link's `?ftwatch=`) after a
# reload, or from the session.
app_state.attach_run(FINETUNE_PAGE)
run, role = app_state.current_run(FINETUNE_PAGE)
viewer = role == app_state.VIEWER          # watching someone's shared race: it can look, never steer
job = run.job if run is not None else None
busy = run is not None and run.active      # queued, preparing or training

with st.expander("Data and settings", expanded=not (job is not None and job.trainer is not None)):
    c1, c2, c3 = st.columns(3)
    with c1:
        st.radio("Kind of task", list(KINDS), format_func=KINDS.get, key="ft_kind", on_change=_on_kind_change,
                 horizontal=True)
        kind = st.session_state["ft_kind"]
        choice = st.radio("Data", list(DATASETS[kind]), format_func=ALL_DATASETS.get, key="ft_data",
                          on_change=_on_data_change)
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
        if choice == "upload_conll":
            st.file_uploader("A UTF-8 CoNLL file: one `word ... tag` a line, a blank line between sentences (up to "
                             "50 MB)", type=["txt", "conll", "tsv", "iob", "bio"], key="ft_upload_conll",
                             help="For example CoNLL-2000's chunks (the choice above fetches them) or CoNLL-2003's "
                                  "named entities; the second column is read as parts of speech, the last as the "
                                  "tags.")
        if choice == "toy_qa":
            st.checkbox("Drills first, then the stories", key="ft_drills",
                        help="One kind of question at a time on one-sentence-a-name passages (what did tom do?, "
                             "where did tom go?, what happened at the barn?, who went to the barn?, what did tom "
                             "find?, who found the red stone?), each until learnt or its share of the budget (and "
                             "what the drills before it left unused) is spent, with its own schedule; then the "
                             "stories for the rest. Validation is on held-out stories only. Without the drills "
                             "the shipped models stay near 30%.")
        if choice == "upload_squad":
            st.file_uploader("A SQuAD v1.1 JSON file: passages, questions and answers with their `answer_start` (up "
                             "to 100 MB)", type=["json"], key="ft_upload_squad")
        if kind == "tags":
            st.selectbox("Tags", ["chunk", "pos"], key="ft_tag_column",
                         format_func={"chunk": "chunks (the last column)",
                                      "pos": "parts of speech (the second column)"}.get)
        if kind == "labels" and choice not in ("toy", "toy_order"):
            st.checkbox("Drop rows with an empty text or label", key="ft_drop_empty")
    with c2:
        st.markdown("**Split**")
        unit = {"labels": "examples", "tags": "sentences", "spans": "questions"}[kind]
        st.number_input(f"Training {unit}", 10, 100_000, step=100, key="ft_train")
        st.number_input(f"Validation {unit}", 10, 20_000, step=100, key="ft_val",
                        help="Answer spans split by passage: no validation passage is ever trained on."
                        if kind == "spans" else None)
        st.number_input("Seed (split, head, batches)", 0, 2**31 - 1, key="ft_seed")
    with c3:
        st.markdown("**Budget (each model)**")
        st.number_input("Training steps per model", 1, 100_000, step=100, key="ft_steps",
                        help="Each model trains this many optimizer steps: the same figures on a busy server as on "
                             "a quiet one, only later.")
        st.number_input("Time cap per model (seconds)", 1, 3_600, step=30, key="ft_budget",
                        help="A model still short of its steps after this long stops there, and the results say "
                             "how many steps it got: a slow or busy machine's figures are those of fewer steps.")
        st.number_input("Peak learning rate", 1e-6, 1e-1, format="%.5f", key="ft_lr",
                        help=f"{SUGGESTED_LR:.2g} suits the active model: the rate it was pretrained at x 128 / "
                             "hidden (1e-3 for the tiny shipped model), or 1e-3 x (128 / hidden)² for a model that "
                             "does not record it (about 3e-5 for BERT-base)")
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
    r2.checkbox(BASELINE_LABELS[kind], key="ft_baseline", help=BASELINE_HELP[kind], disabled=kind == "spans")

app_state.sync_query(*(f"ft_{n}" for n in defaults))
app_state.my_runs_list()   # this browser's races and pretraining runs (one to fine-tune from), with their links


def _upload(key: str, what: str):
    file = st.session_state.get(key)
    if file is None:
        raise BertCoreError(f"choose {what} to upload first")
    return file


def _data():
    """The chosen data (cached): labelled sentences, tagged sentences or questions; raises BertCoreError with
    what to fix."""
    s = st.session_state
    choice = s["ft_data"]
    if choice == "toy":
        return _toy(0)
    if choice == "toy_order":
        return _toy_order(0)
    if choice == "toy_qa":
        return _toy_qa(0, bool(s.get("ft_drills", True)))
    if choice == "conll2000":   # the shared copy, the cache, or the fetch box (as for the CSV tasks below)
        path = local_task_csv(choice)
        if path is None:
            _fetch_box(choice)
            return None
        return _load_conll(str(path), "conll2000/train.txt", s["ft_tag_column"])
    if choice == "upload_conll":
        file = _upload("ft_upload_conll", "a CoNLL file")
        return _load_conll(file.getvalue(), file.name, s["ft_tag_column"])
    if choice == "upload_squad":
        file = _upload("ft_upload_squad", "a SQuAD JSON file")
        return _load_squad(file.getvalue(), file.name)
    if choice in TASKS:
        # Label names as the loader gives them: polarity's 0/1 as negative/positive (documented in the shared data's
        # README), AG News's from its classes.txt, a fetched copy's own words; an uploaded CSV keeps its own labels.
        path = local_task_csv(choice)
        if path is None:
            _fetch_box(choice)
            return None
        return _load_shared(str(path), None, None, bool(s.get("ft_drop_empty")))
    file = _upload("ft_upload", "a CSV file")
    cols = tuple(s.get("ft_text_cols") or ()) or None
    return _load_upload(file.getvalue(), file.name, cols, s.get("ft_label_col"), bool(s.get("ft_drop_empty")),
                        bool(s.get("ft_pair")))


def _describe(data) -> None:
    """A caption and a few examples of the chosen data."""
    if kind == "tags":
        if data.scheme == "iob":
            st.caption("What to expect on CoNLL-2000 chunks, with this page's defaults (2,000 training sentences, "
                       "600 steps a model): the shipped model reached 85-87 chunk F1, its from-scratch twin 63-64, "
                       "a tag per part of speech 75-77 and a tag per word 67-68 (seeds 1-2). With every sentence "
                       "and about 1,500 steps (the CLI's defaults): 89.5 against 81. The larger bert-mini-english, "
                       "with every sentence and 1,500 steps (about 7 minutes on one core): 92.5, its from-scratch "
                       "twin 66 (docs/benchmarks.md).")
        counts = sorted(zip(data.tag_counts(), data.tag_names), reverse=True)[:6]
        st.caption(f"**{data.source}**: {len(data):,} sentences, {data.num_tokens:,} words, {data.num_tags} tags "
                   f"(most frequent: {', '.join(f'{n} {c:,}' for c, n in counts)}); "
                   + ("span tags, scored by chunk F1 as the CoNLL shared task did." if data.scheme == "iob"
                      else "plain tags, scored by accuracy and macro-F1."))
        rows = [{"sentence": " ".join(data.words[i]), "tags": " ".join(data.tag_strings(i))}
                for i in range(min(5, len(data)))]
    elif kind == "spans":
        drills = getattr(data, "drills", ())
        st.caption(f"**{data.source}**: {len(data):,} questions on {data.num_passages:,} passages"
                   + (f", after {len(drills)} drills: " + "; ".join(f"*{d.example}*" for d in drills) + "."
                      if drills else "."))
        if drills:
            st.caption(EXPECT_QA_DRILLS + (" " + EXPECT_QA_BY_MODEL[ACTIVE_SHIPPED]
                                           if ACTIVE_SHIPPED in EXPECT_QA_BY_MODEL else ""))
        else:
            st.caption("What to expect: answering means matching the question's words to the passage and reading "
                       "the words a few places from the match, which a small model learns slowly. On the toy "
                       "stories alone either shipped model (2 or 4 layers) stays near 25-30% exact match for "
                       "thousands of steps (the right kind of answer, often for the wrong character: a guess among "
                       "the characters); the drills are what it needs. Watch which kind of span each model picks, "
                       "and how sure it is where.")
        rows = [{"question": ex.question, "answer": ex.answers[0] if ex.answers else "",
                 "passage": finetune_figures.shorten(ex.context, 160)} for ex in data.examples[:6]]
    else:
        expect = {**EXPECT_TOY, **EXPECT_BY_MODEL.get(ACTIVE_SHIPPED, EXPECT)}
        if st.session_state["ft_data"] in expect:
            st.caption(expect[st.session_state["ft_data"]])
        counts = ", ".join(f"{n} {c:,}" for n, c in zip(data.label_names, data.label_counts()))
        st.caption(f"**{data.source}**: {len(data):,} examples, {data.num_labels} labels ({counts}); text from "
                   f"{' + '.join(data.text_columns)}, label from {data.label_column}.")
        rows = [{"label": data.label_names[y], "text": data.example_text(i)}
                for i, y in enumerate(data.labels[:8])]
    for note in data.notes:
        st.caption(f"ℹ️ {note}")
    with st.expander("A few examples"):
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def _race_data(folder) -> finetune_runs.RaceData:
    """The chosen data by reference, as the race's training process reads it (an upload is kept as a file in the
    race's folder)."""
    s = st.session_state
    choice = s["ft_data"]
    if choice in finetune_runs.PAGE_TASKS:
        return finetune_runs.RaceData(task=finetune_runs.PAGE_TASKS[choice], drills=bool(s.get("ft_drills", True)))
    if choice == "conll2000":
        return finetune_runs.RaceData(conll=str(local_task_csv(choice)), name="conll2000/train.txt",
                                      tag_column=s["ft_tag_column"])
    if choice in TASKS:
        return finetune_runs.RaceData(csv=str(local_task_csv(choice)), drop_empty=bool(s.get("ft_drop_empty")))
    key = {"upload_conll": "ft_upload_conll", "upload_squad": "ft_upload_squad"}.get(choice, "ft_upload")
    file = _upload(key, "a file")
    kept = finetune_runs.keep_upload(folder, file.getvalue(), file.name)
    if choice == "upload_conll":
        return finetune_runs.RaceData(conll=kept, name=file.name, tag_column=s["ft_tag_column"])
    if choice == "upload_squad":
        return finetune_runs.RaceData(squad=kept, name=file.name)
    return finetune_runs.RaceData(csv=kept, name=file.name, text_columns=tuple(s.get("ft_text_cols") or ()) or None,
                                  label_column=s.get("ft_label_col"), pair=bool(s.get("ft_pair")),
                                  drop_empty=bool(s.get("ft_drop_empty")))


def _race_spec(run_id: str, settings: dict) -> finetune_runs.FinetuneSpec:
    """This page's race as plain data: the active model by its folder (one trained in this session is written to
    the race's folder first), the data by reference, the settings under FinetuneConfig's names."""
    s = st.session_state
    folder = app_state.RECORDS.folder_for(run_id)
    checkpoint = (str(active.path) if active.path is not None and Path(active.path).is_dir() else
                  finetune_race.keep_source_model(active.model, active.tokenizer, folder / "source"))
    second = s.get("ft_second")
    return finetune_runs.FinetuneSpec(
        kind=s["ft_kind"], data=_race_data(folder), checkpoint=checkpoint,
        settings=finetune_runs.page_settings(settings),
        compare=((f"from {second}", str(OTHERS[second])),) if second else (), baseline=bool(s.get("ft_baseline")),
        train_size=int(settings["train"]), val_size=int(settings["val"]),
        data_label=UPLOADED.get(s["ft_data"], ALL_DATASETS[s["ft_data"]]), model_label=active.short_name,
        keep_in=str(app_state.RECORDS.checkpoint_for(run_id)))


data = None
try:
    data = _data()
except BertCoreError as exc:
    app_state.show_error(exc)

if data is not None:
    _describe(data)


b1, b2, b3 = st.columns(3)
notice = st.empty()  # what a pressed button is doing, shown before the work starts
if viewer:
    st.info("**You are watching a shared race.** Its curves, queue place and results update here. Only the person "
            "who started it can stop or reset it; the button starts a race of your own.", icon=":material/groups:")
try:
    if active is None:
        st.info("Pick a model in the sidebar first: fine-tuning starts from the active model's weights.")
    racing = bool(st.session_state.get("ft_second") or st.session_state.get("ft_baseline"))
    start_help = ("Fine-tune the active model, then train the same architecture from scratch, same budget" +
                  ("; the race's second model and baseline too" if racing else "") +
                  ". When the server is full it waits in the queue and starts by itself.")
    if b1.button("Run the race" if racing else "Fine-tune both", icon=":material/play_arrow:", type="primary",
                 disabled=(busy and not viewer) or data is None or active is None, help=start_help):
        s = st.session_state
        settings = {k: s[f"ft_{k}"] for k in ("train", "val", "seed", "steps", "budget", "lr", "batch", "maxlen")}
        split_task(data, settings["train"], settings["val"], settings["seed"])  # size errors, now
        comparison_config(settings)  # and config errors, before any process starts
        notice.info("Starting: a training process is loading PyTorch and reading the model and the data (a few "
                    "seconds)…", icon=":material/hourglass_top:")
        if run is not None and not viewer:
            app_state.RUNS.discard(run.run_id)   # a new race replaces this tab's last one (its models held memory)
        run_id = runs.new_token()
        spec = _race_spec(run_id, settings)
        app_state.set_current_run(app_state.RUNS.submit(spec, app_state.session_id(), run_id=run_id), FINETUNE_PAGE)
        st.rerun()
    if b2.button("Stop", icon=":material/stop:", disabled=viewer or not busy,
                 help="Stop the model in training after its current step and skip the rest (a queued race that has "
                      "not started is cancelled)"):
        notice.info("Stopping: the model in training ends after the step it is on…", icon=":material/hourglass_top:")
        app_state.RUNS.stop(run.run_id, wait=10)
        st.rerun()
    if b3.button("Reset", icon=":material/restart_alt:", disabled=viewer or run is None):
        app_state.RUNS.discard(run.run_id)
        app_state.set_current_run(None, FINETUNE_PAGE)
        st.rerun()
except BertCoreError as exc:
    app_state.show_error(exc)

if run is not None and not viewer:
    with st.expander("Share this race with a class", icon=":material/share:"):
        base = (st.context.url or "").split("?")[0]
        st.code(f"{base}?{app_state.FINETUNE_WATCH_PARAM}={run.view_id}", language=None)
        st.caption("Everyone who opens this link watches this race live, and then tries its fine-tuned models on "
                   "their own sentences. They cannot stop or reset it. Your own address bar holds the race's private "
                   "link (`?ft=...`): reloading or reopening it brings you back here.")


def _queued(run) -> bool:
    """Say where a queued race stands; True when there is nothing more to draw yet."""
    job = run.job
    ahead, wait = app_state.RUNS.queue_position(run)
    paused = ("Its turn was up, so it paused after the model it was training; it goes on with the next one when "
              "its turn comes again. " if job is not None and job.trainer is not None else "")
    st.info(f"**Queued**: {ahead} run(s) ahead of this race, estimated wait {jobs.format_duration(wait)}. {paused}"
            "It starts by itself" + ("; *Stop* cancels it." if not viewer else "."), icon=":material/schedule:")
    st.caption(app_state.RUNS.policy())
    return job is None or job.trainer is None


def _live() -> None:
    run, _ = app_state.current_run(FINETUNE_PAGE)
    if run is None:
        return
    if run.note:
        st.warning(f"This race was {run.note}.")
    if run.record_failed:
        st.warning(run.record_failed, icon=":material/hard_drive:")
    if run.phase == "queued" and _queued(run):
        return
    job = run.job
    if job is None:
        return
    if job.error:
        st.error(f"Fine-tuning failed: {job.error}")
    elif job.ended_note:
        st.warning(f"Fine-tuning ended: {job.ended_note}.")
    comparison = job.trainer
    if comparison is None:
        st.info("Preparing: splitting the data and copying the model…", icon=":material/hourglass_top:")
        return
    if not comparison.tuners:   # a race read back after a restart that had ended none of its models
        st.info("Nothing of this race was kept: the server restarted before any of its models had ended. Run it "
                "again.", icon=":material/history:")
        return
    prog = comparison.progress
    current = next((t.name for t in comparison.tuners if t.state == "running"), None)
    st.progress(min(max(prog.fraction, 0.0), 1.0),
                text=f"{run.phase}" + (f": training {current}" if current else "") +
                     f" · time left {jobs.format_duration(prog.eta_s)}"
                     + (f" · on {app_state.RUNS.device_of(run)}" if run.device else ""))
    runs = {t.name: t.evals for t in comparison.tuners}
    names, primary = comparison.metric_names, comparison.primary
    metric = ("accuracy", "macro_f1")[primary]
    chance = None
    if comparison.task_kind == "labels":
        chance = max(comparison.val_data.label_counts()) / max(len(comparison.val_data), 1)
    st.markdown(f"**Validation {names[primary]}** of each model, so far")
    cols = st.columns(len(comparison.tuners))
    for col, tuner in zip(cols, comparison.tuners):   # a model's name alone: a long label is cut on a projector
        ev = tuner.evals
        col.metric(finetune_figures.RUN_LABELS.get(tuner.name, tuner.name),
                   f"{getattr(ev[-1], metric):.1%}" if ev else "–",
                   help=f"{tuner.step:,} of {comparison.config.max_steps:,} steps so far" if comparison.config.max_steps
                   else f"{tuner.step:,} steps so far")
    staged = next((t for t in comparison.tuners if len(getattr(t, "stages", ())) > 1), None)
    # Against steps when the budget is steps: the curves a busy server draws are then the quiet one's.
    app_state.plotly(finetune_figures.accuracy_curves_figure(
        runs, x="step" if comparison.config.max_steps else "elapsed_s", chance=chance, metric=metric,
        metric_label=names[primary],
        stages=staged.stages if staged is not None else ()), "finetune-accuracy", key="ft_curves")
    training = next((t for t in comparison.tuners if t.state == "running" and len(getattr(t, "stages", ())) > 1),
                    None)
    if training is not None:
        now = training.stages[-1]
        st.caption(f"**{finetune_figures.RUN_LABELS.get(training.name, training.name)}** is on stage {now.index + 1} "
                   f"of {now.count}: {now.name}. The curve is always the held-out stories: it moves little during "
                   "the drills, which teach the reading that the stories then need.")
    train, val = comparison.train_data, comparison.val_data
    if comparison.task_kind == "labels":
        counts = train.label_counts()
        st.caption(f"{len(train):,} training examples ({', '.join(map(str, counts))} per label), {len(val):,} "
                   "validation; the dashed line is always guessing the largest class.")
    elif comparison.task_kind == "tags":
        st.caption(f"{len(train):,} training sentences, {len(val):,} validation sentences ({val.num_tokens:,} words); "
                   "dashed lines are baselines fitted in a second.")
    else:
        st.caption(f"{len(train):,} training questions, {len(val):,} validation questions on {val.num_passages:,} "
                   "passages never trained on.")
    if busy and not run.active:
        st.rerun()  # drawn while running (the only time this polls) and now ended: redraw so the results appear


st.divider()
# A race of another kind than the settings now show is not drawn under them (the note below says so); a watched
# race is always drawn: its viewer's settings are their own.
stale = run is not None and not viewer and run.spec.kind != st.session_state["ft_kind"]
if not stale:
    st.fragment(_live, run_every=app_state.poll_seconds() if busy else None)()

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


def _label_results(results: dict, comparison) -> None:
    """Confusion matrices, the most confident mistakes, and a typed sentence classified by each run."""
    if "tfidf" in results:
        st.caption(f"The bag-of-words line was fitted on the same training split in "
                   f"{results['tfidf'].train_seconds:.1f} s and scored on the same validation rows; it ignores "
                   "word order and had no pretraining. A tiny model fine-tuned for a few hundred steps does not "
                   "always beat it: that is an honest result, not a bug.")
    # One row a model, its confusion matrix beside its mistakes: three or four side by side squeeze the class labels
    # and the mistakes' text past reading on a projector (1280 x 720).
    for r in results.values():
        matrix, mistakes = st.columns([2, 3])
        with matrix:
            app_state.plotly(finetune_figures.confusion_figure(   # two lines: one is cut at a third of 1280 px
                r.confusion, r.label_names,
                f"Confusion matrix<br>{finetune_figures.RUN_LABELS.get(r.name, r.name)}"),
                f"confusion-{r.name}", key=f"ft_conf_{r.name}")
        with mistakes:
            st.markdown(f"**Most confident mistakes ({finetune_figures.RUN_LABELS.get(r.name, r.name)})**")
            if r.misclassified:
                # A static table: every column on screen, long texts wrapped (a data grid scrolls them away).
                st.table(pd.DataFrame(finetune_figures.mistakes_table(r.misclassified)), hide_index=True)
            else:
                st.caption("No mistakes on the validation set.")
    st.subheader("Classify a sentence with each")
    val = getattr(comparison, "val_data", None) or data
    example = val.example_text(0) if val is not None and len(val) else "a sentence like the task's"
    sentence = st.text_input("Sentence", key="ft_sentence", placeholder=f"e.g. {finetune_figures.shorten(example)}",
                             help="Any text; the placeholder is a validation example of this task.")
    if sentence.strip():
        try:
            first = next(iter(results.values()))
            # A baseline read back after a restart keeps its figures, not its scikit-learn model.
            probs = {name: result_probabilities(r, sentence, max_length=comparison.config.max_length)
                     for name, r in results.items() if r.model is not None}
            rows = [{"model": finetune_figures.RUN_LABELS.get(n, n),
                     "prediction": first.label_names[max(range(len(p)), key=p.__getitem__)],
                     "confidence": f"{max(p):.0%}"} for n, p in probs.items()]
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
            app_state.plotly(finetune_figures.class_probabilities_figure(probs, first.label_names),
                             "finetune-probabilities", key="ft_probs")
        except BertCoreError as exc:
            app_state.show_error(exc)


def _tag_results(results: dict, comparison) -> None:
    """F1 per chunk type, and a typed (or held-out) sentence tagged by each fine-tuned run."""
    per_type = {n: r.details["per_type"] for n, r in results.items() if r.details.get("per_type")}
    if per_type:
        with st.expander("F1 per chunk type"):
            cols = st.columns(min(len(per_type), 4))
            for col, (n, table) in zip(cols * 2, per_type.items()):
                col.markdown(f"**{finetune_figures.RUN_LABELS.get(n, n)}**")
                col.dataframe(pd.DataFrame(finetune_figures.per_type_table(table)), hide_index=True)
    st.subheader("Tag a sentence with each")
    val = comparison.val_data
    st.number_input(f"A held-out sentence (0 to {len(val) - 1}), shown with its true tags", 0, len(val) - 1,
                    key="ft_tag_example")
    typed = st.text_input("…or type a sentence", key="ft_tag_sentence", max_chars=MAX_TYPED_CHARS,
                          placeholder="e.g. The company said its profit rose sharply in the third quarter .",
                          help="Words are split on spaces and punctuation, as the tagger's training words were.")
    index = int(st.session_state.get("ft_tag_example") or 0)
    words, gold = (typed, None) if typed.strip() else (val.words[index], val.tag_strings(index))
    try:
        for name, r in results.items():
            if r.tokenizer is None:
                continue  # a baseline tags validation words it has seen counted, not a typed sentence
            tagged = tag_words(r.model, r.tokenizer, words, r.label_names, comparison.config.max_length)
            st.markdown(f"**{finetune_figures.RUN_LABELS.get(name, name)}**")
            st.html(finetune_figures.tagged_words_html(tagged, gold))
        st.caption("Each box: the word, its predicted tag and how sure the tagger is (hover for it); under a held-"
                   "out sentence, ✓ where the true tag agrees, else the true tag in red. A darker left edge starts "
                   "a chunk (B-).")
    except BertCoreError as exc:
        app_state.show_error(exc)


def _span_results(results: dict, comparison) -> None:
    """How each run's drills ended, the most confident wrong answers, and a typed question answered by each run
    from a passage."""
    for r in results.values():
        ended = [(finetune_figures.stage_label(a.name), b.previous_score) for a, b in zip(r.stages, r.stages[1:])
                 if b.previous_score is not None]
        if ended:
            st.caption(f"**{finetune_figures.RUN_LABELS.get(r.name, r.name)}**, each drill at its end (the share of "
                       "its last training batches' answers right): "
                       + ", ".join(f"{name} {score:.0%}" for name, score in ended) + ".")
    cols = st.columns(len(results))
    for col, r in zip(cols, results.values()):
        col.markdown(f"**Most confident wrong answers ({finetune_figures.RUN_LABELS.get(r.name, r.name)})**")
        if r.misclassified:
            col.table(pd.DataFrame([{"question": m.text, "true answer": m.true_label, "answered": m.predicted_label,
                                     "confidence": f"{m.confidence:.0%}"} for m in r.misclassified[:8]]))
        else:
            col.caption("Every validation question answered exactly.")
    st.subheader("Ask each a question")
    val = comparison.val_data
    example = val.examples[0]
    passage = st.text_area("Passage", value=example.context[:MAX_PASSAGE_CHARS], key="ft_passage", height=140,
                           max_chars=MAX_PASSAGE_CHARS,
                           help="A held-out passage to start with; edit it or paste your own.")
    question = st.text_input("Question", value=example.question[:MAX_TYPED_CHARS], key="ft_question",
                             max_chars=MAX_TYPED_CHARS)
    try:
        for name, r in results.items():
            if r.tokenizer is None:
                continue
            answer = answer_question(r.model, r.tokenizer, question, passage, comparison.config.max_length)
            label = finetune_figures.RUN_LABELS.get(name, name)
            st.markdown(f"**{label}** answers **{answer.text or '(nothing)'}** ({answer.probability:.0%} sure)")
            st.html(finetune_figures.answer_html(passage, answer.start_char, answer.end_char))
            app_state.plotly(finetune_figures.span_probabilities_figure(
                answer, f"Where the answer starts and ends, {label}"), f"answer-{name}", key=f"ft_span_{name}")
    except BertCoreError as exc:
        app_state.show_error(exc)


if stale:
    st.info(f"Your last race was on {run.spec.task_label}; the settings above are for {KINDS[kind].lower()}. "
            "Press the button to race on them; the last race stays in *My runs*.", icon=":material/swap_horiz:")
if job is not None and job.trainer is not None and not busy and not stale:
    results = job.trainer.results
    if results:
        comparison = job.trainer
        _results_table(results, comparison.metric_names)
        {"labels": _label_results, "tags": _tag_results, "spans": _span_results}[comparison.task_kind](
            results, comparison)
elif run is None:
    st.info("Choose the kind of task, the data and the budget, then press **Fine-tune both**. Each model trains "
            "for the same number of steps, one after the other.")
    st.caption(app_state.RUNS.where())
