"""The Streamlit side of the explorer: the sidebar's model picker, this session's jobs, widget and URL helpers.

The only `bert_core` module that calls Streamlit. What it steers lives in
Streamlit-free modules, tested without it: training runs and their jobs (`bert_core.serve.runs`, `.jobs`), checkpoint
folders (`bert_core.serve.model_sources`), files and public mode (`bert_core.serve.app_storage`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import streamlit as st
from streamlit import runtime
from streamlit.errors import StreamlitPageNotFoundError
from streamlit.runtime.scriptrunner import get_script_run_ctx

from bert_core.errors import BertCoreError
from bert_core.inspect.figures import DEFAULT_SMOOTHING, clear_of_toolbar, plotly_config
from bert_core.inspect.lesson import STEP_KEYS
from bert_core.inspect.probes import ENGLISH_PROBES, probes_key, recorded_probes
from bert_core.model.config import BertConfig
from bert_core.paths import REPO_ROOT
from bert_core.serve.app_storage import (
    list_runs,
    public_mode,
    saved_run_folder,
    start_janitor,
    unpack_uploaded_checkpoint,
    upload_cap_bytes,
)
from bert_core.serve.finetune_runs import FINETUNE_PAGE, FinetuneSpec
from bert_core.serve.jobs import (
    TrainingJob,
    finetune_job,
    pretraining_job,
    restored_pretraining_job,
    train_in_process,
    training_threads,
)
from bert_core.serve.launcher import fork_available, launcher
from bert_core.serve.lesson_classes import PUBLIC_URL_ENV, LessonClasses  # noqa: F401  (a server setting: docs)
from bert_core.serve.model_sources import (
    ActiveModel,
    default_checkpoint,
    describe_checkpoint,
    folder_stamp,
    load_folder,
    shipped_checkpoints,
)
from bert_core.serve.run_records import RunRecords, state_dir
from bert_core.serve.runs import OWNER, VIEWER, Run, RunStore, new_token
from bert_core.serve.visitor_runs import (
    LINK_PARAMS,
    TRAIN_PAGE,
    VISITOR_COOKIE,
    cookie_script,
    rows_markdown,
    valid_visitor,
    visitor_rows,
)

log = logging.getLogger("bert_core.app")

POLL_ENV = "BERT_EXPLORER_POLL_S"                  # how often the live training charts redraw
LOG_LEVEL_ENV = "BERT_EXPLORER_LOG_LEVEL"          # the operator's log: INFO (default), WARNING, DEBUG...


_LOG_HANDLER = "bert_explorer"


def configure_logging() -> None:
    """The operator's log on the server's standard error: one line for each run that starts, ends or fails, each
    slot handed over, each run a restart restores or drops, each save or checkpoint that fails (run ids only, no
    visitor's text). `$BERT_EXPLORER_LOG_LEVEL` sets the level (default INFO). Once per server process."""
    logger = logging.getLogger("bert_core")
    if any(h.get_name() == _LOG_HANDLER for h in logger.handlers):   # its own handler, by the name it gave it
        return
    level = os.environ.get(LOG_LEVEL_ENV, "INFO").strip().upper() or "INFO"
    handler = logging.StreamHandler()
    handler.set_name(_LOG_HANDLER)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s bert_core: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level if level in logging.getLevelNamesMapping() else "INFO")
    logger.propagate = False


configure_logging()

SOURCE_SHIPPED = "Shipped checkpoint"
SOURCE_SESSION = "Model trained in this session"
SOURCE_SAVED = "A saved run"
SOURCE_UPLOAD = "Upload a checkpoint (zip)"
SOURCE_FOLDER = "Checkpoint folder"   # a server path: local use only, off in public mode
SOURCES = (SOURCE_SHIPPED, SOURCE_SESSION, SOURCE_SAVED, SOURCE_UPLOAD, SOURCE_FOLDER)
SOURCE_CODES = {"shipped": SOURCE_SHIPPED, "session": SOURCE_SESSION, "saved": SOURCE_SAVED,
                "upload": SOURCE_UPLOAD, "folder": SOURCE_FOLDER}   # the URL's ?model=...

# The sidebar's page list, in teaching order. Streamlit would name the main script's entry after its file ("app");
# .streamlit/config.toml hides that list (client.showSidebarNavigation) and every page draws this one instead.
NAVIGATION = (
    ("app.py", "Home", ":material/home:"),
    ("pages/0_Lesson.py", "Lesson", ":material/school:"),
    ("pages/1_Tokens_and_masking.py", "Tokens & masking", ":material/text_fields:"),
    ("pages/2_Train.py", "Train", ":material/model_training:"),
    ("pages/3_Attention.py", "Attention", ":material/visibility:"),
    ("pages/4_Predictions.py", "Predictions", ":material/target:"),
    ("pages/7_How_BERT_computes.py", "How BERT computes", ":material/calculate:"),   # after what it explains
    ("pages/5_Fine-tune.py", "Fine-tune", ":material/label:"),
    ("pages/6_Export.py", "Export", ":material/download:"),
)
APP_ROOT = REPO_ROOT


def model_sources() -> tuple[str, ...]:
    """The sidebar's choices: every source on the user's own machine; no server path in public mode."""
    return tuple(s for s in SOURCES if s != SOURCE_FOLDER) if public_mode() else SOURCES


def poll_seconds() -> float:
    """Seconds between redraws of the live training view (`$BERT_EXPLORER_POLL_S`, default 2)."""
    try:
        return max(0.25, float(os.environ.get(POLL_ENV, "2")))
    except ValueError:
        return 2.0


CHART_POLL_ENV = "BERT_EXPLORER_CHART_POLL_S"       # how often the live training charts redraw


def chart_poll_seconds() -> float:
    """Seconds between redraws of the live training charts (`$BERT_EXPLORER_CHART_POLL_S`, default three polls).
    The numbers above them redraw at every poll; a headless browser redrawing four Plotly charts every 2 s took
    about as much CPU as the training of the default nano run and made it up to twice as slow on a 2-core machine
    (docs/benchmarks.md, "The default Train run")."""
    try:
        return max(poll_seconds(), float(os.environ.get(CHART_POLL_ENV, "") or 3 * poll_seconds()))
    except ValueError:
        return 3 * poll_seconds()


# ---------------------------------------------------------------------------------------------- models


def _cached_loader():

    @st.cache_resource(max_entries=4, show_spinner="Loading the checkpoint…")
    def load(path: str, stamp: float):
        return load_folder(path)

    return load


_LOADER = None


def load_folder_cached(folder: str | Path) -> tuple[Any, Any, dict | None]:
    """`load_folder` through `st.cache_resource`, keyed by path and modification time (a re-saved folder reloads)."""
    global _LOADER
    path = Path(str(folder).strip()).expanduser()
    if not path.is_dir():
        return load_folder(path)  # raises the right message
    if _LOADER is None:
        _LOADER = _cached_loader()
    return _LOADER(str(path.resolve()), folder_stamp(path))


# ---------------------------------------------------------------------------------------------- jobs


def _session_alive_from_runtime(session_id: str) -> bool | None:
    """True/False from Streamlit's runtime when a server is running; None when there is none (tests, scripts)."""
    try:

        if not runtime.exists():
            return None
        return runtime.get_instance().is_active_session(session_id)
    except Exception:  # noqa: BLE001 - private runtime API; when it changes, never reap on a guess
        return None


# Each run's record and checkpoints live in the state folder, where a restarted server finds them
# (bert_core.serve.run_records); an ended run's process is released into that same checkpoint folder.
RECORDS = RunRecords(state_dir())


def _run_job(run: Run):
    # run.device: where the queue gave the run its first slot (a GPU of the server's, or its CPU)
    if isinstance(run.spec, FinetuneSpec):
        return finetune_job(run.run_id, run.spec.builder, device=run.device)
    return pretraining_job(run.run_id, run.spec, checkpoint_dir=RECORDS.checkpoint_for(run.run_id), device=run.device)


def _release_folder(run: Run) -> Path:
    return RECORDS.checkpoint_for(run.run_id)


def _scratch_alive(key: str) -> bool | None:
    """The scratch janitor's question: a run's folder lives as long as the server keeps the run, a session's as
    long as its tab."""
    if key.startswith("run:"):
        return RUNS.has(key[4:])
    return _session_alive_from_runtime(key)


# Every training of this server, pretraining runs (Train page) and fine-tuning races (Fine-tune page) alike, is a run
# of one store: they outlive a tab, take fair turns in one queue for the CPU and GPU, and can be watched by a class
# (bert_core.serve.runs).
RUNS = RunStore(_run_job, is_alive=_session_alive_from_runtime, release_folder=_release_folder, records=RECORDS,
                restore_job=restored_pretraining_job)
LESSON_CLASSES = LessonClasses(STEP_KEYS)   # a teacher's lesson step, for the students who follow it


# ---------------------------------------------------------------------------------------------- Streamlit side


def warm_launcher() -> None:
    """Have the training launcher make its imports now (bert_core.serve.launcher), on the pages with a Start button,
    so the first Start finds it ready; not when the app loads, where its seconds of imports would compete with the
    first page's draw on a small server."""
    if train_in_process() and fork_available():
        launcher().warm()


def session_id() -> str:
    """This browser session's id (a stable fallback outside a Streamlit run)."""
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else "no-session"


RUN_PARAM, WATCH_PARAM = LINK_PARAMS[TRAIN_PAGE]   # the URL's run ids: the owner's, and a share link's
FINETUNE_PARAM, FINETUNE_WATCH_PARAM = LINK_PARAMS[FINETUNE_PAGE]   # the same for the Fine-tune page's races
# Each page's run in this tab: its URL keys, and where the session keeps the owner's and the share link's id.
_TAB_RUN = {TRAIN_PAGE: (RUN_PARAM, WATCH_PARAM, "run_id", "watch_id"),
            FINETUNE_PAGE: (FINETUNE_PARAM, FINETUNE_WATCH_PARAM, "ft_run_id", "ft_watch_id")}


def attach_run(page: str = TRAIN_PAGE) -> None:
    """Find this tab's run of `page` (the Train page's pretraining run, or the Fine-tune page's race) from its URL
    (a reload, a reopened link, a share link) or its session, note this session as watching it, and write its id
    back into the URL so that the address bar always reopens it."""

    s = st.session_state
    run_param, watch_param, run_key, watch_key = _TAB_RUN[page]
    for param, state_key, lookup in ((run_param, run_key, RUNS.get), (watch_param, watch_key, RUNS.by_view)):
        token = st.query_params.get(param)
        if not token or token == s.get(state_key):
            continue
        found = lookup(token)
        if found is not None and found.spec.page == page:
            s.pop(run_key, None)
            s.pop(watch_key, None)
            s[state_key] = token
        else:
            s["run_note"] = ("The race of this link is gone: a race's results stay on the server while someone "
                             f"looks at them, and go {RUNS.unwatched_s() / 60:g} min after the last look. Run it "
                             "again here."
                             if RUNS.was_dropped(token) and page == FINETUNE_PAGE else
                             "The run of this link was dropped: the server keeps only its latest ended runs. Save "
                             "a run you want to keep (Train page, *Save this run on the server*)."
                             if RUNS.was_dropped(token) else
                             "The run of this link was lost when the server restarted: it had not written its first "
                             "checkpoint yet. Start a new run on the Train page."
                             if RUNS.was_lost(token) else
                             f"The run of this link is not on this server (it may have restarted). Start a new run "
                             f"on the {page} page.")
            del st.query_params[param]
    run, role = current_run(page)
    if run is None:
        s.pop(run_key, None)   # dropped or reset meanwhile
        s.pop(watch_key, None)
        for param in (run_param, watch_param):
            if param in st.query_params:
                del st.query_params[param]
        return
    RUNS.attach(run, session_id(), role, visitor_id())
    param, token = (run_param, run.run_id) if role == OWNER else (watch_param, run.view_id)
    if st.query_params.get(param) != token:
        st.query_params[param] = token


def note_class_run() -> None:
    """A run this tab started while in a led lesson class (the class link, or leading it) is one of the class's runs:
    the teacher's view lists it by its view id (bert_core.serve.lesson_classes)."""
    s = st.session_state
    code = s.get("lesson_class") or s.get("lesson_lead")
    run, role = current_run()
    if code and run is not None and role == OWNER:
        LESSON_CLASSES.add_run(code, run.view_id)


def visitor_id() -> str:
    """This browser's id (the "My runs" list is kept under it): read from its cookie, or a new one that the page
    then stores in the browser (bert_core.serve.visitor_runs)."""
    s = st.session_state
    if "visitor_id" not in s:
        try:
            known = valid_visitor((st.context.cookies or {}).get(VISITOR_COOKIE))
        except Exception:  # noqa: BLE001 - no request to read (a page run on its own): a session-long id
            known = None
        s["visitor_id"], s["_visitor_stored"] = known or new_token(), known is not None
    return s["visitor_id"]


def _store_visitor_cookie() -> None:
    """Have the browser keep its id: drawn at each script run of a session whose browser came without it (the
    cookie it sets is read at the next visit; a zero-height frame at the foot of the sidebar)."""
    visitor = visitor_id()
    if not st.session_state.get("_visitor_stored"):
        with st.sidebar:
            if hasattr(st, "iframe"):   # Streamlit >= 1.56; components.v1.html is deprecated there
                st.iframe(cookie_script(visitor), height="content")
            else:
                import streamlit.components.v1 as components

                components.html(cookie_script(visitor), height=0)


def my_runs() -> list[dict]:
    """This browser's runs, started or watched, newest first, as rows with the link that opens each on its page
    (relative: it resolves beside the page showing it, whatever path the server is served under)."""
    return visitor_rows(RUNS.visited(visitor_id()))


def my_runs_list() -> None:
    """The "My runs" switch of the Train and Fine-tune pages: this browser's runs, each with its link. Drawn only
    when switched on: folded content would still be on the page, where its words ("preparing") mix with the
    page's own."""
    rows = my_runs()
    if not st.toggle("My runs" + (f" · {len(rows)}" if rows else ""), key="my_runs_show",
                     help="The runs this browser started or watched, with their links, after a reload and when you "
                          "come back (as long as the server keeps them)."):
        return
    if not rows:
        st.caption("None yet: the runs this browser starts or watches are listed here.")
        return
    st.markdown(rows_markdown(rows))
    st.caption("Only this browser's runs: the ones it started, and the ones it watched through a share link. "
               "*Reset* on the Train page removes a run from this list; an ended run stays until the server drops "
               "it.")


def reset_note(run: Run) -> str:
    """What the Train page says after *Reset*: the run it forgot, by what it was, and that *My runs* no longer
    lists it (a finished run that vanished without a word looked lost)."""
    trainer = run.trainer
    step = trainer.step if trainer is not None else 0
    what = f"{run.phase} at step {step:,}" if step else run.phase
    return (f"**The run was reset** ({what}): its model is gone, and it is no longer listed in *My runs*. A run "
            "saved with *Save this run on the server* stays under the sidebar's *A saved run*.")


def current_run(page: str = TRAIN_PAGE) -> tuple[Run | None, str | None]:
    """(this tab's run of `page`, OWNER or VIEWER), or (None, None)."""
    s = st.session_state
    _, _, run_key, watch_key = _TAB_RUN[page]
    run = RUNS.get(s.get(run_key))
    if run is not None:
        return run, OWNER
    run = RUNS.by_view(s.get(watch_key))
    return (run, VIEWER) if run is not None else (None, None)


def set_current_run(run: Run | None, page: str = TRAIN_PAGE) -> None:
    """Make `run` (started by this tab) the tab's run of `page`, or forget it."""
    run_param, watch_param, run_key, watch_key = _TAB_RUN[page]
    st.session_state.pop(watch_key, None)
    if watch_param in st.query_params:
        del st.query_params[watch_param]
    if run is None:
        st.session_state.pop(run_key, None)
        if run_param in st.query_params:
            del st.query_params[run_param]
    else:
        st.session_state[run_key] = run.run_id
        st.query_params[run_param] = run.run_id   # the URL names the tab's run (else it would reopen the last)
        RUNS.attach(run, session_id(), OWNER, visitor_id())


def tab_run_folders() -> dict[str, Path]:
    """This tab's earlier runs whose checkpoints are in their folders ("run 1 of this tab": folder), for the pages
    that set a second model beside the active one (the run list's numbering, as on the Train page)."""
    run, role = current_run()
    if run is None or role != OWNER:
        return {}
    found = {}
    for i, r in enumerate(RUNS.family(run)):
        if r is run:
            continue  # the tab's current run is the sidebar's "Model trained in this session"
        folder = r.job.released if r.job is not None else None
        if folder is not None and (Path(folder) / "config.json").is_file():
            found[f"run {i + 1} of this tab"] = Path(folder)
    return found


def current_job() -> TrainingJob | None:
    """The training job of this tab's run (its own or one it watches), once the run has started."""
    run, _ = current_run()
    return run.job if run is not None else None


def _shipped_choice(name: str | None) -> Path:
    """The shipped checkpoint picked by name (the sidebar's box, `?ckpt=` in the URL): one of the folders in
    checkpoints/, never a path built from the name; the default one for no name or a name not shipped."""
    return shipped_checkpoints().get(name or "", default_checkpoint())


def _shipped_model(path: Path | None = None):
    path = path or default_checkpoint()
    if not path.is_dir():
        where = path.name if public_mode() else path   # a visitor of a public server learns none of its folders
        return None, (f"The shipped checkpoint is not here yet (`{where}`). Train a model on the **Train** page "
                      "and pick *Model trained in this session*, or give a checkpoint folder.")
    model, tok, state = load_folder_cached(path)
    return ActiveModel(model, tok, SOURCE_SHIPPED, path, describe_checkpoint(path.name, model, state), state,
                       (state or {}).get("step")), None


def shipped_model(name: str) -> ActiveModel | None:
    """The shipped checkpoint `name` (a folder of checkpoints/, never a path), or None when it is not here."""
    path = shipped_checkpoints().get(name)
    return _shipped_model(path)[0] if path is not None else None


def _toy_pairs_cached():

    @st.cache_resource(max_entries=4, show_spinner="Tokenising the toy corpus…")
    def toy(key: str, _tokenizer, seq_len: int):
        from bert_core.data.corpora import generate_toy_corpus
        from bert_core.data.pretraining_data import PretrainingData

        return PretrainingData(generate_toy_corpus(num_documents=200, seed=0), _tokenizer, max_seq_length=seq_len)

    return toy


_TOY = None


def toy_pretraining_data(active: ActiveModel):
    """Sentence pairs of the toy grammar corpus (200 documents) in the active model's tokenizer, up to 128 tokens:
    what the Tokens & masking page and the lesson draw pairs from when no run of this tab gives its own."""
    global _TOY
    if _TOY is None:
        _TOY = _toy_pairs_cached()
    tok = active.tokenizer
    seq_len = min(128, active.config.max_position_embeddings, tok.model_max_length)
    return _TOY(f"{active.source}:{active.path}:{id(tok)}", tok, seq_len)


def _accuracy_cached():

    @st.cache_data(max_entries=32, show_spinner="Asking the model for every chosen token…")
    def accuracy(key: str, _model, _tokenizer, _pairs, seed: int, rate: float):
        from bert_core.inspect.masked_guesses import accuracy_by_decision

        return accuracy_by_decision(_model, _tokenizer, _pairs, seed=seed, mask_rate=rate)

    return accuracy


_ACCURACY = None
DECISION_POOL = 256   # pairs the accuracy by decision is counted over: about 1,500 chosen tokens, 2-3 s on 2 cores


def decision_accuracy(active: ActiveModel, pairs_name: str, instances, seed: int, rate: float):
    """The active model's right guesses by masking decision over the first DECISION_POOL of `instances` masked with
    `seed` and `rate` (masked_guesses.accuracy_by_decision), kept per model, pairs, seed and rate. A run's model
    changes as it trains: its step is part of the key."""
    global _ACCURACY
    if _ACCURACY is None:
        _ACCURACY = _accuracy_cached()
    pairs = [(x.input_ids, x.token_type_ids) for x in instances[:DECISION_POOL]]
    key = f"{active.source}:{active.path}:{id(active.model)}:{active.step}:{pairs_name}:{len(pairs)}"
    return _ACCURACY(key, active.model, active.tokenizer, pairs, int(seed), float(rate))


def _pair_attention_cached():

    @st.cache_data(max_entries=16, show_spinner="Reading sentence pairs through every head…")
    def pairs(key: str, _model, _tokenizer, _instances):
        from bert_core.inspect.pair_attention import b_to_a_attention

        return b_to_a_attention(_model, _tokenizer, _instances)

    return pairs


_PAIRS = None


def pair_attention(active: ActiveModel, pairs_name: str, instances):
    """The active model's sentence-B-to-A attention over the first PAIR_POOL of `instances`
    (pair_attention.b_to_a_attention), kept per model, its step and the pairs."""
    global _PAIRS
    from bert_core.inspect.pair_attention import PAIR_POOL

    if _PAIRS is None:
        _PAIRS = _pair_attention_cached()
    chosen = list(instances[:PAIR_POOL])
    key = f"{active.source}:{active.path}:{id(active.model)}:{active.step}:{pairs_name}:{len(chosen)}"
    return _PAIRS(key, active.model, active.tokenizer, chosen)


def _waiting_model_note(phase: str | None) -> str:
    """What the sidebar's *Model trained in this session* says before the tab's run has a model: a run that is
    queued or preparing (loading its corpus, training its tokenizer) is named as such, with what it will offer,
    never as "no model has been trained" (issue #64)."""
    offer = ("Its model appears here from its first step and follows the run as it trains; once it ends, its final "
             "model stays here for the other pages.")
    if phase == "queued":
        return f"**This tab's run is waiting for a slot** (see the Train page). {offer}"
    if phase == "preparing":
        return (f"**This tab's run is preparing**: loading its corpus and training its tokenizer (see the Train "
                f"page). {offer}")
    if phase in ("cancelled", "failed", "stopped"):
        return (f"This tab's run {'was cancelled' if phase == 'cancelled' else phase} before its first step, so it "
                "has no model: start a new one on the **Train** page.")
    return "No model has been trained in this session yet: start one on the **Train** page."


def _session_model():
    job = current_job()
    if job is None or job.trainer is None:
        run, _ = current_run()
        return None, _waiting_model_note(run.phase if run is not None else None)
    model = job.model_snapshot()
    trainer = job.trainer
    if model is None:   # its process ended before its weights reached a folder, and no copy was taken
        return None, job.lost_message()
    # A copy taken earlier is labelled with its own step: a run whose process died later is not at that step.
    step = job.snapshot_step if job.snapshot_step is not None else trainer.step
    # Its whole training config, as a checkpoint's trainer_state holds it: the Fine-tune page's rate follows its
    # peak rate, and anything that writes this state writes a true config, not a part of one.
    state = {"metadata": trainer.metadata, "step": step, "train_config": trainer.config.to_dict()}
    spec = job.spec
    whose = "A shared run (watched through its link)" if current_run()[1] == VIEWER else "Trained in this session"
    older = ("" if step == trainer.step else
             f"; the weights of step {step:,}, the last copy the server holds (the run reached step {trainer.step:,}"
             " and its later weights are lost)")
    desc = (f"{whose} on {spec.corpus_label if spec else 'a corpus'}: step {step:,}"
            f" ({job.phase}{older}); {model.config.num_hidden_layers} layers, hidden size "
            f"{model.config.hidden_size}, {model.config.num_attention_heads} heads.")
    return ActiveModel(model, trainer.tokenizer, SOURCE_SESSION, None, desc, state, step), None


def _folder_model(folder: str):
    if public_mode():  # a stale URL or session value must not reopen a server path on a public server
        return None, "Opening a folder by its server path is off on this public server: upload a zip instead."
    if not folder.strip():
        return None, "Type the path of a checkpoint folder (ours or a Hugging Face BERT folder)."
    model, tok, state = load_folder_cached(folder)
    path = Path(folder).expanduser()
    return ActiveModel(model, tok, SOURCE_FOLDER, path, describe_checkpoint(path, model, state), state,
                       (state or {}).get("step"), _grown_rate(path, state)), None


def _grown_rate(folder: Path, state: dict | None) -> float | None:
    from bert_core.model.growth import grown_pretraining_rate   # torch: not at the top (TORCH_FREE)

    return grown_pretraining_rate(folder) if state is None else None


def _saved_model(name: str | None):
    if not name:
        return None, "No run has been saved on this server yet: train one and press **Save** on the Train page."
    path = saved_run_folder(name)
    model, tok, state = load_folder_cached(path)
    return ActiveModel(model, tok, SOURCE_SAVED, Path(name), describe_checkpoint(Path(name), model, state), state,
                       (state or {}).get("step")), None


def _uploaded_model(upload):
    if upload is None:
        return None, ("Upload a zip of a checkpoint folder (config.json, model.safetensors and tokenizer files), "
                      "such as the one the Train page's download gives.")

    # Every rerun of every page passes through here: unpack (and hash) a given upload once, not at each rerun.
    known = st.session_state.get("_model_upload_folder")
    if known and known[0] == upload.file_id and Path(known[1]).is_dir():
        path = Path(known[1])
    else:
        path = unpack_uploaded_checkpoint(session_id(), upload.getvalue())
        st.session_state["_model_upload_folder"] = (upload.file_id, str(path))
    try:
        model, tok, state = load_folder_cached(path)
    except BertCoreError as exc:   # name the file inside the zip, not the server's scratch folder it went to
        message = str(exc)
        for where in (str(path.resolve()), str(path)):
            message = message.replace(where + os.sep, "the zip's ").replace(where, "the zip")
        raise BertCoreError(message) from None
    label = Path(upload.name)
    return ActiveModel(model, tok, SOURCE_UPLOAD, label, describe_checkpoint(label, model, state), state,
                       (state or {}).get("step"), _grown_rate(path, state)), None


_TORCH_THREADS_SET = False


def _configure_torch() -> None:
    global _TORCH_THREADS_SET
    if not _TORCH_THREADS_SET:
        # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
        import torch

        torch.set_num_threads(training_threads())
        _TORCH_THREADS_SET = True


def navigation() -> None:
    """The sidebar's list of pages (Home first), the ones present in this install."""
    with st.sidebar:
        try:
            for page, label, icon in NAVIGATION:
                if (APP_ROOT / page).is_file():  # the fine-tuning page may be absent in a trimmed install
                    st.page_link(page, label=label, icon=icon)
        except StreamlitPageNotFoundError:
            return  # a page run on its own (AppTest.from_file of one page): there is no app to link to
        st.divider()


def show_step_record(record, key: str) -> None:
    """What one update did (a bert_core.inspect.training_step.StepRecord), as the lesson and the Train page's
    *Step once* show it: the numbers, the batch's first pair as the model saw it, each part's gradient and the
    weights that moved most."""
    from bert_core.inspect import figures, lesson_figures

    m = st.columns(4)
    m[0].metric("Update", f"{record.step:,}")
    m[1].metric("Next-token loss" if record.causal else "Masked-LM loss", f"{record.mlm_loss:.3f}")
    m[2].metric("Learning rate", f"{record.learning_rate:.2g}")
    m[3].metric("Gradient norm", f"{record.grad_norm:.3g}")
    nsp = "" if record.is_random_next is None else \
        f" (NSP: {'B is random' if record.is_random_next else 'B follows A'})"
    fig = figures.masking_figure(record.example)
    fig.update_layout(title=f"The batch's first sequence of {record.rows}{nsp}")
    plotly(fig, "step-batch", key=f"{key}_batch")
    left, right = st.columns([2, 3])
    with left:
        plotly(lesson_figures.layer_gradient_figure(record.layer_grad_norms, record.step), "step-gradients",
               key=f"{key}_grads")
    with right:
        st.markdown(f"**The {len(record.changes)} weights that moved most**")
        st.dataframe([{"weight": c.name, "change": f"{c.change:+.2e}", "gradient": f"{c.gradient:+.3g}"}
                      for c in record.changes], hide_index=True, width="stretch")
        st.caption("Nearly every weight moves, even those that played no part in this batch: AdamW's weight "
                   "decay shrinks every weight a little, and the output layer shares the word embeddings, so every "
                   "token's embedding gets a gradient.")


def page_link(page: str, label: str, icon: str | None = None) -> None:
    """A link to another page of the app; nothing when the page is run on its own (AppTest.from_file of one
    page), where there is no app to link to."""
    try:
        st.page_link(page, label=label, icon=icon)
    except StreamlitPageNotFoundError:
        pass


def page_link_with(page: str, label: str, icon: str | None = None, **query: str) -> None:
    """`page_link` to a page opened with these query parameters (e.g. the lesson at a given `step`)."""
    try:
        st.page_link(page, label=label, icon=icon, query_params=query)
    except StreamlitPageNotFoundError:
        pass


def quick_config():
    """The active model's sizes (a BertConfig) read from its config.json, without torch or the weights, for the
    home page's first drawing; None when the sidebar's choice has no folder yet (then the sidebar loads it)."""


    source = st.session_state.get("model_source") or SOURCE_CODES.get(query_default("model", "shipped"))
    try:
        if source == SOURCE_SHIPPED:
            return BertConfig.load(_shipped_choice(st.session_state.get("model_shipped")
                                                   or query_default("ckpt", "")))
        if source == SOURCE_SESSION:
            job = current_job()
            return job.trainer.model_config
    except Exception:  # noqa: BLE001 - only a first drawing: the sidebar reports what is wrong
        return None
    return None


def sidebar(navigation_drawn: bool = False) -> ActiveModel | None:
    """Draw the sidebar: the page list and the model picker (every page calls this). Returns the active model,
    or None with a note."""
    _persist_every_page_keys()
    if not navigation_drawn:
        navigation()
    _configure_torch()
    start_janitor(_scratch_alive)
    attach_run()
    note_class_run()
    _store_visitor_cookie()

    persist_keys("model_source", "model_folder", "model_saved", "model_shipped")
    sources = model_sources()
    # The model choice travels in the URL (`?model=session`), so a shared link opens the same model; a share link
    # of a run opens that run's model.
    watching = current_run()[1] == VIEWER
    init_widget("model_source", SOURCE_SESSION if watching else SOURCE_SHIPPED,
                lambda v: SOURCE_CODES.get(v, SOURCE_SHIPPED), param="model")
    with st.sidebar:
        st.markdown("### Active model")
        if st.session_state.get("model_source") not in sources:
            st.session_state["model_source"] = SOURCE_SHIPPED
        source = st.radio("Which model do the pages look at?", sources, key="model_source")
        code = next(c for c, name in SOURCE_CODES.items() if name == source)
        if st.query_params.get("model") != code:
            st.query_params["model"] = code
        active = _load_sidebar_model(source, _sidebar_model_choice(source))
        _sidebar_notes(active)
    return active


def _sidebar_model_choice(source: str):
    """Draw the sidebar's input for a model of `source`'s kind; returns what `_load_sidebar_model` loads: a shipped
    checkpoint's folder, a server folder's path, a saved run's name, an upload, or None (this session's model)."""


    if source == SOURCE_SHIPPED:
        # Which shipped checkpoint, when there are several (the BERT and its GPT-style twin); `?ckpt=NAME`.
        folders = shipped_checkpoints()
        names = list(folders)
        shipped = None
        if len(names) > 1:
            init_widget("model_shipped", names[0], param="ckpt")
            if st.session_state["model_shipped"] not in names:
                st.session_state["model_shipped"] = names[0]
            shipped = st.selectbox("Checkpoint", names, key="model_shipped")
            if shipped != names[0]:
                st.query_params["ckpt"] = shipped
            else:
                st.query_params.pop("ckpt", None)
        return folders.get(shipped)
    st.query_params.pop("ckpt", None)
    if source == SOURCE_FOLDER:
        return st.text_input("Checkpoint folder on the server", key="model_folder",
                             placeholder="/path/to/checkpoint (config.json + model.safetensors)")
    if source == SOURCE_SAVED:
        names = [r.name for r in list_runs()]
        if st.session_state.get("model_saved") not in names:
            st.session_state.pop("model_saved", None)
        return st.selectbox("Saved run", names, key="model_saved") if names else None
    if source == SOURCE_UPLOAD:
        return st.file_uploader(f"A zipped checkpoint folder (up to {upload_cap_bytes() // 2**20} MB)",
                                type=["zip"], key="model_upload")
    return None


def _load_sidebar_model(source: str, choice) -> ActiveModel | None:
    """Load the model the sidebar picked (`choice` from `_sidebar_model_choice`); a failure or a note is shown
    under the picker, never a traceback. Returns the model, or None."""

    try:
        if source == SOURCE_SHIPPED:
            active, note = _shipped_model(choice)
        elif source == SOURCE_SESSION:
            active, note = _session_model()
        elif source == SOURCE_SAVED:
            active, note = _saved_model(choice)
        elif source == SOURCE_UPLOAD:
            active, note = _uploaded_model(choice)
        else:
            active, note = _folder_model(choice)
    except BertCoreError as exc:
        active, note = None, None
        st.error(str(exc))
    except Exception as exc:  # noqa: BLE001 - a checkpoint we cannot read is a message, never a traceback
        log.exception("loading the model failed")
        active, note = None, None
        st.error(f"could not load this model: {type(exc).__name__}: {exc}")
    if note:
        st.info(note)
    return active


def _sidebar_notes(active: ActiveModel | None) -> None:
    """Under the picker: the active model's size, whether this tab's run trains in the background, and why the run
    of this page's link is not there (dropped, or not on this server)."""

    if active is not None:
        cfg = active.config
        st.caption(f"{active.source}: {cfg.num_hidden_layers} layers × {cfg.num_attention_heads} heads, "
                   f"hidden {cfg.hidden_size}, vocab {cfg.vocab_size:,}"
                   + (f", step {active.step:,}" if active.step is not None else ""))
    run, role = current_run()
    if run is not None and run.active:
        # Drawn outside the live fragment, so it would go stale: no step count here.
        st.caption(("A training run of this tab is going on in the background (see the Train page)"
                    if role == OWNER else "You are watching a shared training run (see the Train page)")
                   + (": *Model trained in this session* is its model as it trains, and its final model once it "
                      "ends." if active is not None and active.source == SOURCE_SESSION else "."))
    note = st.session_state.pop("run_note", None)
    if note:
        st.warning(note)


def persist_keys(*keys: str) -> None:
    """Keep widget values across page switches. Streamlit drops a widget's state at the end of any script run that
    does not draw the widget, so every page's run (through `sidebar`) re-saves the keys that any page named here."""

    st.session_state.setdefault("_persisted_keys", set()).update(keys)
    for key in keys:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def _persist_every_page_keys() -> None:
    """Re-save the keys every page has named (see `persist_keys`); first thing in `sidebar`, before any widget."""
    persist_keys(*st.session_state.get("_persisted_keys", ()))


def query_default(name: str, default, cast=str):
    """A page setting from the URL query (so a shared link opens the same view), else `default`."""
    raw = st.query_params.get(name)
    if raw is None:
        return default
    try:
        return cast(raw)
    except (TypeError, ValueError):
        return default


def follow_default(key: str, default, cast=str) -> None:
    """Seed a widget like `init_widget`, and when its default changes (another model, corpus or seed) replace the
    value too, unless the user has changed it: what they typed stays, an untouched default follows."""

    marker = f"_default_of_{key}"
    init_widget(key, default, cast)
    previous = st.session_state.get(marker)
    if previous is not None and previous != default and st.session_state[key] == previous:
        st.session_state[key] = default
    st.session_state[marker] = default


def _recorded_probes_cached():


    @st.cache_data(max_entries=16, show_spinner="Reading sentences from the model's held-out text…")
    def probes(key: str, allow_paths: bool, _metadata):
        return recorded_probes(_metadata, allow_paths)

    return probes


_PROBES = None


def model_probes(active: ActiveModel | None):
    """Sentences for the Attention and Predictions pages from the active model's own held-out text (the probes
    its run recorded, or drawn again from its recorded corpora when they can be read here); English sentences
    for a model without a readable corpus (e.g. a Hugging Face download)."""
    global _PROBES

    meta = ((active.trainer_state or {}).get("metadata") if active is not None else None) or {}
    if not meta:
        return ENGLISH_PROBES
    if _PROBES is None:
        _PROBES = _recorded_probes_cached()
    return _PROBES(probes_key(meta), not public_mode(), meta) or ENGLISH_PROBES


def init_widget(key: str, default, cast=str, param: str | None = None) -> None:
    """Seed a widget's session value once: from the URL query parameter `param` (default: the key), else `default`.

    Keys carry a page prefix (att_, pred_...) so that one page's parameters never leak into another's.
    """

    if key not in st.session_state:
        st.session_state[key] = query_default(param or key, default, cast)


def smoothing_slider(key: str, help: str, view: Any = None) -> float:
    """The "Smoothing of the training curves" slider (figures.ema's weight), seeded from the URL or the default,
    an out-of-range URL value replaced by the default; returns its value. `view` names what the curves show (a run
    and whether it still trains): when it changes, the slider returns to the default, so a value set for a live run
    (0 shows its raw steps) does not draw the finished run's curves as blocks of spikes (issue #64)."""
    init_widget(key, DEFAULT_SMOOTHING, float)
    marker = f"_view_of_{key}"
    if view is not None:
        if st.session_state.get(marker) not in (None, view):
            st.session_state[key] = DEFAULT_SMOOTHING
        st.session_state[marker] = view
    if not 0.0 <= st.session_state[key] <= 0.99:
        st.session_state[key] = DEFAULT_SMOOTHING
    return st.slider("Smoothing of the training curves", 0.0, 0.99, step=0.01, key=key, help=help)


def sync_query(*keys: str) -> None:
    """Write these widgets' current values into the URL query, so the address bar is a shareable link."""
    for key in keys:
        if key not in st.session_state:
            continue
        text = str(st.session_state[key])
        if st.query_params.get(key) != text:
            st.query_params[key] = text


EXPORT_WIDTH_PX = 1100   # the width of a downloaded chart, whatever the screen


def plotly(fig, name: str, key: str | None = None) -> None:
    """Show a Plotly figure with the download-as-image toolbar configured (PNG, or SVG via the Export page)."""


    fmt = st.session_state.get("image_format", "png")
    config = plotly_config(name)
    config["toImageButtonOptions"]["format"] = fmt
    fig = clear_of_toolbar(fig)   # first: it may add to the height the download is drawn at
    # The download is drawn at a fixed width, not the chart's width on this screen: a narrow column (or a phone)
    # would otherwise cut the legend and titles of the exported picture.
    config["toImageButtonOptions"].update(width=EXPORT_WIDTH_PX, height=fig.layout.height or 450)
    st.plotly_chart(fig, config=config, key=key, width="stretch")


def show_error(exc: Exception) -> None:
    """Show a user error as a message on the page (the app never shows a traceback for bad input)."""
    st.error(str(exc))
