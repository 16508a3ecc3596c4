"""The server's one of each, made when a page first imports it: its log, its store of runs (every
pretraining run and race, with their queue, records and jobs: bert_core.serve.runs), the led lesson classes, the
launcher's warm-up, and how often live views redraw. Which job trains a run is job_factory's; this module hands the
store that factory and asks Streamlit's runtime whether a session lives."""

from __future__ import annotations

import logging
import os

from streamlit import runtime

from bert_core.inspect.lesson import STEP_KEYS
from bert_core.serve.job_factory import JobFactory, server_job_kind
from bert_core.serve.launcher import fork_available, launcher
from bert_core.app.lesson_classes import LessonClasses
from bert_core.serve.run_records import RunRecords, state_dir
from bert_core.serve.runs import RunStore
from bert_core.serve.server_load import Pace

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


def session_alive_from_runtime(session_id: str) -> bool | None:
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


def scratch_alive(key: str) -> bool | None:
    """The scratch janitor's question: a run's folder lives as long as the server keeps the run, a session's as
    long as its tab."""
    if key.startswith("run:"):
        return RUNS.has(key[4:])
    return session_alive_from_runtime(key)


# Which job trains each run, and with what builder: job_factory's (torch-free, and no Streamlit).
JOB_FACTORY = JobFactory(RECORDS, kind=server_job_kind())

# Every training of this server, pretraining runs (Train page) and fine-tuning races (Fine-tune page) alike, is a run
# of one store: they outlive a tab, take fair turns in one queue for the CPU and GPU, and can be watched by a class
# (bert_core.serve.runs).
# Its slots and GPUs are the factory's: this machine's, or a Ray cluster's (bert_core.cluster.ray_cluster).
RUNS = RunStore(JOB_FACTORY, slots=JOB_FACTORY.slots, gpus=JOB_FACTORY.gpus, is_alive=session_alive_from_runtime,
                release_folder=lambda run: RECORDS.checkpoint_for(run.run_id), records=RECORDS,
                restore_job=JOB_FACTORY.restore, where=JOB_FACTORY.where)
PACE = Pace()   # each watched run's pace on this server now, for the pages' busy line (server_load)
LESSON_CLASSES = LessonClasses(STEP_KEYS)   # a teacher's lesson step, for the students who follow it


def warm_launcher() -> None:
    """Have the training launcher make its imports now (bert_core.serve.launcher), on the pages with a Start button,
    so the first Start finds it ready; not when the app loads, where its seconds of imports would compete with the
    first page's draw on a small server."""
    if JOB_FACTORY.kind() == "process" and fork_available():   # a Ray server's runs are never forked here
        launcher().warm()
