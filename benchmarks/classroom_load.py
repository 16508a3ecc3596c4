"""A class of thirty on one server (issue #17): `streamlit run app.py` on localhost, 30 concurrent sessions.

    python benchmarks/classroom_load.py [--duration 240] [--solo-s 60] [--browsers 4] [--json out.json]
    python benchmarks/classroom_load.py --finetuners 4 --viewers 15 --browse 3   # fine-tuning in the mix (issue #31)
    python benchmarks/classroom_load.py --ray 2 --ray-cpus 1   # the server trains on a local Ray cluster (issue #63)

With `--ray N` (Ray installed: requirements-cluster.txt) the benchmark first starts a local Ray cluster, a head that
trains nothing and N worker nodes of `--ray-cpus` CPUs each (`ray.cluster_utils.Cluster`), and each server it starts
trains on it (`BERT_EXPLORER_RAY_ADDRESS`): its runs are Ray actors, its slots the cluster's. The cluster's own
processes (GCS, raylets, the actors' workers) are not the server's children: their memory is reported on a row of
its own.

What it does, in two phases, each on its own fresh server (headless, `--server.fileWatcherType none`, temporary
runs and scratch folders, the shipped checkpoint, the capacity settings at their defaults unless a flag says
otherwise):

1. solo: one session opens the Train page and presses Start on the defaults; the run's training tokens/s (the
   page's own "Tokens / s" metric, sampled at every poll) is measured for `--solo-s` seconds of training.
2. class: 30 sessions at once. Every one opens Home, Tokens & masking, Attention and Predictions. Then
   - a teacher (a Chromium page) opens Train, presses Start, opens "Share this run with a class" and reads the
     `?watch=` link off the page;
   - seven more trainers press Start on the defaults once the teacher's run is answered (eight runs in all); each
     tours the four pages once while its run is queued or training, then stays on the Train page;
   - twenty viewers open the share link and tour Train, Attention, Predictions, Home, Tokens & masking (with a
     few seconds' think time on each) until the end;
   - two sessions only browse the four pages, and at the end open the Train page (which must show no run);
   - with `--finetuners N`, N more sessions open the Fine-tune page and press *Fine-tune both* on its defaults within
     the class's first minute, then watch their races: each race is a run of the same queue (its Start answered
     "Queued (k ahead)" with an estimated wait, or preparing), and the report gives each one's answer, the wait the
     page estimated against the wait it had, and when its results showed.
   It ends `--duration` seconds after the teacher's Start.

`--browsers` of the sessions (default 4: the teacher, one trainer, two viewers) are real headless Chromium pages
(Playwright, Debian's /usr/bin/chromium, never a download). The others speak Streamlit's own websocket protocol
(`/_stcore/stream`, `BackMsg`/`ForwardMsg` protobufs, the `websockets` package): a page is a `rerun_script` with the
page's name or script hash, the query string and, to press a button, a trigger value for the button's widget id
taken from the element deltas; a page has settled when its script run has finished (`script_finished`,
FINISHED_SUCCESSFULLY), as a browser waits; the `auto_rerun` messages of the Train page's live fragments are
answered with fragment reruns at their interval, as the frontend does. Opening a share link is a new websocket
session, as a browser tab is. Chromium pages are timed the same way, from the ForwardMsgs on their own websocket
(then the page's title drawn). A page that has not settled in NAV_TIMEOUT_S (120 s) counts at 120 s, a lower bound,
and the session goes on.

It reports: p50/p95 page settle time for viewers and trainers (navigations that began while the eight runs were
queued or training); time from Start to the page showing "running"/"Preparing" or "Queued (k ahead)"; queue wait
(Start answered until the run held a slot; runs still queued at the end count as censored); each run's training
tokens/s against the solo run; the server's and its training processes' peak memory (sum of Pss from
/proc/PID/smaps_rollup over the server and all its descendants, sampled every second); every exception on a page
(Chromium: `[data-testid="stException"]`; protocol: exception deltas) and the server log's tracebacks; and the
isolation checks:
  - each trainer's `?run=` id is its own (8 distinct), and never changes once set; viewers and browsing sessions
    never get a `?run=`; every viewer's `?watch=` is the teacher's share id; browsing sessions get neither;
  - each owner's share box holds its own share id (8 distinct, the teacher's the viewers' one); no viewer ever
    receives a share box, or a Stop/Resume/Reset button that is enabled;
  - the step count each session sees of its run never goes back (a session shown another run's progress would
    jump), and a viewer's step never runs ahead of the teacher's run by more than the polls between them;
  - a browsing session's Train page shows no run at the end.
Targets (issue #17, a benchmark, not a timed test): viewers' p95 settle < 3 s, Start answered < 2 s, no exception,
no state shared, server plus children < 4 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.app_server import free_port, start_app_server  # noqa: E402
from bert_core.serve.launcher import PROCESS_NAME, SPAWNED_MODULE  # noqa: E402

CHROMIUM = os.environ.get("BERT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]
CAPACITY_ENV = ("BERT_EXPLORER_MAX_TRAININGS", "BERT_EXPLORER_TURN_S", "BERT_EXPLORER_UNWATCHED_S",
                "BERT_EXPLORER_KEEP_RUNS", "BERT_EXPLORER_POLL_S", "BERT_EXPLORER_CHART_POLL_S",
                "BERT_EXPLORER_PUBLIC", "BERT_EXPLORER_TORCH_THREADS")
# URL path (the frontend's page name) -> the page's title (its h1)
PAGES = {"": "BERT explorer", "Tokens_and_masking": "Tokens & masking", "Train": "Train a tiny BERT",
         "Attention": "Attention", "Predictions": "Predictions"}
SIDEBAR_LABEL = {"": "Home", "Tokens_and_masking": "Tokens & masking", "Train": "Train", "Attention": "Attention",
                 "Predictions": "Predictions"}
TOUR = ["", "Tokens_and_masking", "Attention", "Predictions"]
PROGRESS = re.compile(r"\b(running|queued|stopped|finished|failed|preparing): step ([\d,]+) of")
# The Fine-tune page's race: its progress bar ("running: training scratch · time left 12s"), its preparing note, the
# queue's estimated wait, and its results.
RACE_PROGRESS = re.compile(r"^(running|stopped|finished|failed|preparing)(?:: training [\w -]+)? · time left")
RACE_PREPARING = "Preparing: splitting the data"
ESTIMATED = re.compile(r"estimated wait (?:(\d+)m )?(\d+)s")
RESULTS = "Results"
QUEUED = re.compile(r"Queued\W+(\d+) run\(s\) ahead")
PREPARING = "Preparing: loading the corpus"


def _start_answered(text: str) -> bool:
    """Whether a status text answers a Train page's Start: queued with its place, preparing, or training."""
    return bool(QUEUED.search(text) or PREPARING in text or PROGRESS.search(text))


NAV_TIMEOUT_S = 120.0   # a page that has not settled by then is counted at this (a lower bound) and left
TARGETS = {"viewer_p95_s": 3.0, "start_answer_s": 2.0, "memory_gb": 4.0}
ROLES = {"viewers": ("viewer",), "trainers": ("trainer", "teacher"), "browsing": ("browse",)}   # the report's groups


# ----------------------------------------------------------------------------------------------- the record


@dataclass
class Record:
    """Everything the sessions saw, timestamped with time.monotonic()."""

    settles: list[dict] = field(default_factory=list)        # role, client, session, page, s, t0, during_runs
    starts: list[dict] = field(default_factory=list)         # session, client, answer, answer_s, first_notice_s, ...
    exceptions: list[dict] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)          # a session that failed to do its part
    timelines: dict[str, list] = field(default_factory=dict)  # session -> [(t, phase, step, run_key)]
    tokens: dict[str, list] = field(default_factory=dict)    # session -> tokens/s samples while running
    runs_window: list[float] = field(default_factory=lambda: [float("inf"), float("inf")])  # all 8 answered .. end
    cpu_at_window: tuple = (0.0, 0.0, 0.0, 0.0)
    cpu_at_end: tuple = (0.0, 0.0, 0.0, 0.0)
    teacher_start: float | None = None
    notes: list[str] = field(default_factory=list)       # a run's failure or the server's note on it
    race_starts: list[dict] = field(default_factory=list)    # the fine-tuners' presses, as `starts`
    first_estimate: dict[str, tuple] = field(default_factory=dict)   # session -> (t, estimated wait s) when queued
    finished_at: dict[str, float] = field(default_factory=dict)      # session -> t its race's results showed

    def settle(self, role, client, session, page, seconds, t0):
        self.settles.append(dict(role=role, client=client, session=session, page=page or "Home", s=seconds, t0=t0))

    def leak(self, text):
        if text not in self.leaks:
            self.leaks.append(text)


# ----------------------------------------------------------------------------------------------- the server


def _descendants(pid: int) -> list[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _generator_cpu_s(server_pid: int) -> tuple[float, float]:
    """CPU seconds so far of this process, and of its browsers (the Chromium pages, Playwright's driver). Not the
    server: it is this process's child too, and was once counted here, so that the generator seemed to take 1.1
    cores where it and its pages took half of one, the server the rest (the three together 'asked' 2.3 cores of 2)."""
    hz = os.sysconf("SC_CLK_TCK")
    own = os.times()
    server = {server_pid, *_descendants(server_pid)}
    # A browser's renderers come and go with its tabs: an ended one's time is in its parent's cutime + cstime.
    kids = sum(_cpu_ticks(pid, reaped=True) or 0 for pid in _descendants(os.getpid()) if pid not in server) / hz
    return own.user + own.system, kids


def _cpu_ticks(pid: int, reaped: bool = False) -> int | None:
    """utime + stime of `pid` in clock ticks; `reaped`: and of its children that ended and were waited for."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)
    except (OSError, ValueError, IndexError):
        return None


class Server:
    """`streamlit run app.py` on a free port with temporary runs and scratch folders; memory sampled every second."""

    def __init__(self, workdir: Path, slots: int | None, ray_address: str | None = None,
                 cluster_pids=lambda: []):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"server-{self.port}.log"
        env = {k: v for k, v in os.environ.items() if k not in CAPACITY_ENV}
        env.update(PYTHONUNBUFFERED="1", BERT_EXPLORER_RUNS_DIR=str(workdir / f"runs-{self.port}"),
                   BERT_EXPLORER_SCRATCH_DIR=str(workdir / f"scratch-{self.port}"))
        if slots:
            env["BERT_EXPLORER_MAX_TRAININGS"] = str(slots)
        if ray_address:
            env["BERT_EXPLORER_RAY_ADDRESS"] = ray_address
        self._cluster_pids = cluster_pids   # a local Ray cluster's processes and their children (--ray)
        self.cluster_peak_kb = 0
        self._log = open(self.log_path, "w")
        self.proc = start_app_server(self.port, env, self._log)
        self.peak = dict(total_kb=0, server_kb=0, children_kb=0, children=0)
        self.cpu_ticks: dict[int, int] = {}   # pid -> utime + stime last seen (the server and its children)
        self.training_started: dict[int, float] = {}   # training process pid -> when first seen (monotonic)
        self.max_training = 0
        self.max_children = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            kids = _descendants(self.proc.pid)
            server = _pss_kb(self.proc.pid)
            children = sum(_pss_kb(k) for k in kids)
            if server + children > self.peak["total_kb"]:
                self.peak.update(total_kb=server + children, server_kb=server, children_kb=children,
                                 children=len(kids))
            self.max_children = max(self.max_children, len(kids))
            cluster = set(self._cluster_pids())
            for pid in list(cluster):
                cluster.update(_descendants(pid))
            self.cluster_peak_kb = max(self.cluster_peak_kb, sum(_pss_kb(k) for k in cluster))
            for pid in kids:
                if pid not in self.training_started:
                    try:
                        # A training process: forked by the server's launcher (named so), or spawned.
                        if (Path(f"/proc/{pid}/comm").read_text().strip() == PROCESS_NAME
                                or SPAWNED_MODULE in Path(f"/proc/{pid}/cmdline").read_bytes()):
                            self.training_started[pid] = time.monotonic()
                    except OSError:
                        pass
            alive = [k for k in kids if k in self.training_started]
            self.max_training = max(self.max_training, len(alive))
            for pid in [self.proc.pid] + kids:
                ticks = _cpu_ticks(pid)
                if ticks is not None:
                    self.cpu_ticks[pid] = ticks
            self._stop.wait(1.0)

    def cpu_s(self) -> tuple[float, float]:
        """CPU seconds used so far: (the server, its training processes), as last sampled."""
        hz = os.sysconf("SC_CLK_TCK")
        server = self.cpu_ticks.get(self.proc.pid, 0) / hz
        return server, sum(v for k, v in self.cpu_ticks.items() if k != self.proc.pid) / hz

    def tracebacks(self) -> list[str]:
        text = self.log_path.read_text(errors="replace")
        return [block[:1500] for block in text.split("Traceback (most recent call last):")[1:]]

    def close(self) -> None:
        self._stop.set()
        kids = _descendants(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        for pid in kids:  # the training processes this server started, if any outlived it
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self._log.close()


# ----------------------------------------------------------------------------------------------- sessions


class Session:
    """What every kind of client shares: a name, a role, and what it has seen of its run."""

    client = "?"

    def __init__(self, name: str, role: str, rec: Record, server: Server):
        self.name, self.role, self.rec, self.server = name, role, rec, server
        self.query: dict[str, str] = {}
        self.run_id: str | None = None       # its ?run= once set
        self.share_ids: set[str] = set()     # ?watch= ids of the share boxes it was shown
        self.last_step: dict[str, int] = {}
        self.rec.timelines[name] = []
        self.rec.tokens[name] = []
        self.phase: str | None = None
        self.ahead: int | None = None

    def _timed_out(self, page: str, t0: float) -> float:
        """A page that had not settled after NAV_TIMEOUT_S: counted at the timeout (a lower bound), and the session
        goes on, as a student clicks on."""
        self.rec.settle(self.role, self.client, self.name, page, NAV_TIMEOUT_S, t0)
        self.rec.settles[-1]["timed_out"] = True
        return NAV_TIMEOUT_S

    # what the page says about the run
    def saw_status(self, text: str, t: float) -> None:
        m = PROGRESS.search(text)
        key = self.run_id or self.query.get("watch") or "?"
        if m:
            phase, step = m.group(1), int(m.group(2).replace(",", ""))
            self.phase = phase
            self.rec.timelines[self.name].append((t, phase, step, key))
            prev = self.last_step.get(key)
            if prev is not None and step < prev:
                self.rec.leak(f"{self.name} ({self.role}, {self.client}): run {key[:6]} went back from step "
                              f"{prev} to {step}")
            self.last_step[key] = max(step, prev or 0)
        elif RACE_PROGRESS.search(text):
            self.phase = RACE_PROGRESS.search(text).group(1)
            self.rec.timelines[self.name].append((t, self.phase, None, key))
        elif text.strip() == RESULTS and self.role == "finetuner":
            self.phase = "finished"
            self.rec.finished_at.setdefault(self.name, t)
            self.rec.timelines[self.name].append((t, "finished", None, key))
        elif QUEUED.search(text):
            self.phase = "queued"
            self.ahead = int(QUEUED.search(text).group(1))
            est = ESTIMATED.search(text)
            if est and self.name not in self.rec.first_estimate:
                self.rec.first_estimate[self.name] = (t, 60 * int(est.group(1) or 0) + int(est.group(2)))
            self.rec.timelines[self.name].append((t, "queued", None, key))
        elif RACE_PREPARING in text:
            self.phase = "preparing"
            self.rec.timelines[self.name].append((t, "preparing", None, key))
        elif PREPARING in text:
            self.phase = "preparing"
            self.rec.timelines[self.name].append((t, "preparing", None, key))
        elif text.startswith(("Training failed", "This run was", "Fine-tuning failed", "This race was")):
            self.rec.timelines[self.name].append((t, "note", text[:200], key))
            self.rec.notes.append(f"{self.name}: {text[:200]}")

    def saw_query(self, query: dict[str, str]) -> None:
        self.query = query
        run, watch = query.get("run"), query.get("watch")
        if self.role == "finetuner":
            run = None   # its own ?ft=; the Train page's ?run= never comes to it (checked below)
            if query.get("run") or query.get("watch"):
                self.rec.leak(f"{self.name} (finetuner) got a Train page run id")
        if run:
            if self.role not in ("trainer", "teacher"):
                self.rec.leak(f"{self.name} ({self.role}, {self.client}) got an owner's ?run={run[:6]}…")
            elif self.run_id is None:
                self.run_id = run
            elif run != self.run_id:
                self.rec.leak(f"{self.name} ({self.client}): its ?run= changed from {self.run_id[:6]}… to {run[:6]}…")
        if watch and self.role != "viewer":
            self.rec.leak(f"{self.name} ({self.role}, {self.client}) got a ?watch= it never opened")

    def saw_share(self, code_text: str) -> None:
        m = re.search(r"[?&]watch=([\w-]+)", code_text)
        if not m:
            return
        if self.role not in ("trainer", "teacher"):
            self.rec.leak(f"{self.name} ({self.role}, {self.client}) was shown a share box (owner only)")
        self.share_ids.add(m.group(1))

    def saw_buttons(self, label: str, disabled: bool) -> None:
        if self.role == "viewer" and self.query.get("watch") and label in ("Stop", "Resume", "Reset") and not disabled:
            self.rec.leak(f"{self.name} ({self.client}): a viewer's {label} button is enabled")


class ProtocolSession(Session):
    """A client that speaks Streamlit's websocket protocol and waits for each script run, as a browser does."""

    client = "protocol"

    def __init__(self, *args):
        super().__init__(*args)
        self.ws = None
        self.reader = None
        self.page = ""
        self.page_hash = ""
        self.hashes: dict[str, str] = {}      # page link label -> page script hash
        self.buttons: dict[str, tuple[str, bool]] = {}   # main-area button label -> (widget id, disabled)
        self.autoreruns: dict[str, asyncio.Task] = {}
        self._waiting: asyncio.Future | None = None
        self._started_since_send = False
        self.watchers: list = []              # (predicate(text), future) for texts the session waits for

    async def connect(self) -> None:
        import websockets

        await self.close()
        self.ws = await websockets.connect(self.server.base.replace("http", "ws") + "/_stcore/stream",
                                           subprotocols=["streamlit"], max_size=None, open_timeout=60,
                                           ping_interval=20, ping_timeout=120)
        self.reader = asyncio.create_task(self._read())

    async def close(self) -> None:
        for task in self.autoreruns.values():
            task.cancel()
        self.autoreruns.clear()
        if self.ws is not None:
            await self.ws.close()
            self.ws = None
        if self.reader is not None:
            self.reader.cancel()
            self.reader = None

    def _back(self, page_hash="", page_name="", query="", fragment="", auto=False, triggers=()):
        from streamlit.proto.BackMsg_pb2 import BackMsg

        msg = BackMsg()
        r = msg.rerun_script
        r.query_string = query
        r.page_script_hash = page_hash
        r.page_name = page_name
        r.fragment_id = fragment
        r.is_auto_rerun = auto
        r.context_info.url = f"{self.server.base}/{self.page}"
        r.context_info.timezone = "UTC"
        r.context_info.locale = "en-US"
        for wid in triggers:
            w = r.widget_states.widgets.add()
            w.id = wid
            w.trigger_value = True
        return msg.SerializeToString()

    async def _read(self) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        try:
            async for raw in self.ws:
                msg = ForwardMsg()
                msg.ParseFromString(raw)
                self._on(msg, time.monotonic())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a closed socket ends the reader
            if self._waiting is not None and not self._waiting.done():
                self._waiting.set_exception(exc)

    def _on(self, msg, t: float) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        kind = msg.WhichOneof("type")
        if kind == "new_session":
            fragment_run = msg.metadata.HasField("run") and len(msg.metadata.run.fragment_ids) > 0
            if not fragment_run:
                self._started_since_send = True
                for task in self.autoreruns.values():   # a full run draws its fragments (and their timers) anew
                    task.cancel()
                self.autoreruns.clear()
                self.buttons.clear()
        elif kind == "navigation":
            # The page's own script hash (a fresh session's new_session names the main script's instead), and every
            # page's, as the frontend keeps them for its links.
            self.page_hash = msg.navigation.page_script_hash
            for page in msg.navigation.app_pages:
                self.hashes["" if page.is_default else page.url_pathname] = page.page_script_hash
        elif kind == "page_info_changed":
            self.saw_query({k: v[-1] for k, v in parse_qs(msg.page_info_changed.query_string).items()})
        elif kind == "auto_rerun":
            fid, interval = msg.auto_rerun.fragment_id, msg.auto_rerun.interval
            old = self.autoreruns.pop(fid, None)
            if old is not None:
                old.cancel()
            self.autoreruns[fid] = asyncio.create_task(self._auto(fid, interval))
        elif kind == "stop_auto_rerun":
            for fid in msg.stop_auto_rerun.fragment_ids:
                task = self.autoreruns.pop(fid, None)
                if task is not None:
                    task.cancel()
        elif kind == "script_finished":
            if (msg.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY and self._started_since_send
                    and self._waiting is not None and not self._waiting.done()):
                self._waiting.set_result(t)
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            self._element(msg.delta.new_element, list(msg.metadata.delta_path), t)

    def _element(self, el, path, t) -> None:
        kind = el.WhichOneof("type")
        text = None
        if kind == "button":
            if path and path[0] == 0:
                self.buttons[el.button.label] = (el.button.id, el.button.disabled)
                self.saw_buttons(el.button.label, el.button.disabled)
        elif kind == "alert":
            text = el.alert.body
        elif kind == "progress":
            text = el.progress.text
        elif kind == "markdown":
            text = el.markdown.body
        elif kind == "heading":
            text = el.heading.body
        elif kind == "code":
            self.saw_share(el.code.code_text)
        elif kind == "metric":
            if el.metric.label == "Tokens / s" and self.phase == "running":
                try:
                    self.rec.tokens[self.name].append(float(el.metric.body.replace(",", "")))
                except ValueError:
                    pass
        elif kind == "exception":
            self.rec.exceptions.append(dict(session=self.name, client=self.client, page=self.page or "Home",
                                            text=f"{el.exception.type}: {el.exception.message}"[:500],
                                            where=" | ".join(line.strip() for line in el.exception.stack_trace[-4:])))
        if text:
            self.saw_status(text, t)
            for pred, fut in list(self.watchers):
                if not fut.done() and pred(text):
                    fut.set_result(t)

    async def _auto(self, fragment_id: str, interval: float) -> None:
        try:
            while True:
                await asyncio.sleep(interval)
                await self.ws.send(self._back(self.page_hash, query=self._query_string(), fragment=fragment_id,
                                              auto=True))
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - the socket went away
            pass

    def _query_string(self) -> str:
        return "&".join(f"{k}={v}" for k, v in self.query.items())

    async def _run(self, payload: bytes, timeout: float = None) -> float:
        timeout = timeout or NAV_TIMEOUT_S
        """Send a rerun and wait until a full script run has finished; returns the monotonic finish time."""
        self._waiting = asyncio.get_running_loop().create_future()
        self._started_since_send = False
        await self.ws.send(payload)
        return await asyncio.wait_for(self._waiting, timeout)

    async def open(self, page: str, query: str = "") -> float:
        """Open a page in a new tab (a fresh websocket session), as typing its URL does; returns the settle time."""
        await self.connect()
        self.page = page
        self.query = {}
        t0 = time.monotonic()
        try:
            t = await self._run(self._back(page_name=page, query=query))
        except asyncio.TimeoutError:
            return self._timed_out(page, t0)
        self.rec.settle(self.role, self.client, self.name, page, t - t0, t0)
        return t - t0

    async def goto(self, page: str) -> float:
        """Follow the sidebar's link to a page (the frontend sends the page's script hash and an empty query)."""
        self.page = page
        page_hash = self.hashes.get(page, "")
        t0 = time.monotonic()
        try:
            t = await self._run(self._back(page_hash=page_hash, page_name="" if page_hash else page))
        except asyncio.TimeoutError:
            return self._timed_out(page, t0)
        self.rec.settle(self.role, self.client, self.name, page, t - t0, t0)
        return t - t0

    async def press_start(self, label: str = "Start") -> dict:
        wid, disabled = self.buttons[label]
        loop = asyncio.get_running_loop()
        answer, notice = loop.create_future(), loop.create_future()
        self.watchers = [(lambda s: _start_answered(s) or bool(RACE_PREPARING in s or RACE_PROGRESS.search(s)),
                          answer),
                         (lambda s: s.startswith("Starting"), notice)]
        t0 = time.monotonic()
        self._waiting = loop.create_future()
        self._started_since_send = False
        await self.ws.send(self._back(self.page_hash, query=self._query_string(), triggers=[wid]))
        result = dict(session=self.name, client=self.client, role=self.role, t0=t0, disabled=disabled)
        try:
            t = await asyncio.wait_for(asyncio.shield(answer), 120)
            result.update(answer_s=t - t0, answer=self.phase, ahead=self.ahead)
        except asyncio.TimeoutError:
            result.update(answer_s=None, answer=None)
        if notice.done():
            result["notice_s"] = notice.result() - t0
        try:
            await asyncio.wait_for(self._waiting, 120)
        except asyncio.TimeoutError:
            pass
        self.watchers = []
        return result

    async def stay(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class BrowserSession(Session):
    """A real headless Chromium page (Playwright, async API)."""

    client = "chromium"

    def __init__(self, name, role, rec, server, browser):
        super().__init__(name, role, rec, server)
        self.browser = browser
        self._started_since, self._finished = False, []
        self._answer: asyncio.Future | None = None   # when the frame that brings a Start's answer arrived
        self.ctx = None
        self.pg = None
        self.page = ""

    async def _new_tab(self) -> None:
        if self.ctx is not None:
            await self.ctx.close()
        self.ctx = await self.browser.new_context(viewport={"width": 1400, "height": 1000})
        self.pg = await self.ctx.new_page()
        self.pg.on("websocket", lambda ws: ws.on("framereceived", self._frame))

    def _frame(self, payload) -> None:
        """The page's own websocket: a full script run's end (not a fragment's) is when the page has settled."""
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        if not isinstance(payload, bytes):
            return
        msg = ForwardMsg()
        try:
            msg.ParseFromString(payload)
        except Exception:  # noqa: BLE001
            return
        kind = msg.WhichOneof("type")
        if kind == "new_session" and not (msg.metadata.HasField("run") and msg.metadata.run.fragment_ids):
            self._started_since = True
        elif kind == "delta" and self._answer is not None and not self._answer.done():
            if _start_answered(payload.decode("utf-8", "replace")):   # whatever element carries it
                self._answer.set_result(time.monotonic())
        elif (kind == "script_finished" and msg.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY
              and self._started_since):
            self._finished.append(time.monotonic())

    def _arm(self) -> None:
        self._started_since, self._finished = False, []

    async def _settle(self, page: str, t0: float, timeout: float = NAV_TIMEOUT_S) -> float:
        title = PAGES[page]
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self._finished:
                try:
                    await self.pg.locator("h1", has_text=title).first.wait_for(
                        timeout=max(1.0, deadline - time.monotonic()) * 1000)
                except Exception:  # noqa: BLE001
                    break
                done = self._finished[0]
                await self._after_settle()
                return done - t0
            await asyncio.sleep(0.05)
        raise asyncio.TimeoutError()

    async def _after_settle(self) -> None:
        p = self.pg
        n = await p.locator('[data-testid="stException"]').count()
        if n:
            text = await p.locator('[data-testid="stException"]').first.inner_text()
            self.rec.exceptions.append(dict(session=self.name, client=self.client, page=self.page or "Home",
                                            text=text[:500]))
        await self.observe()

    async def observe(self) -> None:
        """Read the URL, the status line, the share box and the buttons off the page."""
        p = self.pg
        url = p.url
        self.saw_query({k: v[-1] for k, v in parse_qs(url.split("?", 1)[1] if "?" in url else "").items()})
        facts = await p.evaluate("""() => {
            const main = document.querySelector('[data-testid="stMainBlockContainer"]') || document.body;
            const buttons = Array.from(main.querySelectorAll('button')).map(b => [b.innerText.trim(), b.disabled]);
            const codes = Array.from(document.querySelectorAll('[data-testid="stCode"]')).map(c => c.innerText);
            const metric = Array.from(document.querySelectorAll('[data-testid="stMetric"]'))
                .filter(m => m.innerText.includes('Tokens / s'))
                .map(m => (m.querySelector('[data-testid="stMetricValue"]') || {}).innerText);
            return {text: main.innerText, buttons, codes, tokens: metric[0] || null};
        }""")
        now = time.monotonic()
        for line in facts["text"].splitlines():
            if PROGRESS.search(line) or QUEUED.search(line) or PREPARING in line:
                self.saw_status(line, now)
        for label, disabled in facts["buttons"]:
            self.saw_buttons(label.splitlines()[-1].strip() if label else label, disabled)
        for code in facts["codes"]:
            self.saw_share(code)
        if facts["tokens"] and self.phase == "running":
            try:
                self.rec.tokens[self.name].append(float(facts["tokens"].replace(",", "")))
            except ValueError:
                pass

    async def open(self, page: str, query: str = "") -> float:
        await self._new_tab()
        self.page = page
        self._arm()
        t0 = time.monotonic()
        try:
            await self.pg.goto(f"{self.server.base}/{page}" + (f"?{query}" if query else ""),
                               timeout=NAV_TIMEOUT_S * 1000)
            s = await self._settle(page, t0)
        except (asyncio.TimeoutError, TimeoutError):
            return self._timed_out(page, t0)
        self.rec.settle(self.role, self.client, self.name, page, s, t0)
        return s

    async def goto(self, page: str) -> float:
        self.page = page
        link = self.pg.get_by_test_id("stSidebar").get_by_role("link", name=SIDEBAR_LABEL[page], exact=True)
        self._arm()
        t0 = time.monotonic()
        try:
            await link.click(timeout=NAV_TIMEOUT_S * 1000)
            s = await self._settle(page, t0)
        except (asyncio.TimeoutError, TimeoutError):
            return self._timed_out(page, t0)
        self.rec.settle(self.role, self.client, self.name, page, s, t0)
        return s

    async def press_start(self) -> dict:
        main = self.pg.get_by_test_id("stMainBlockContainer")
        button = main.get_by_role("button", name="Start", exact=True)
        disabled = await button.is_disabled()
        self._answer = asyncio.get_running_loop().create_future()
        t0 = time.monotonic()
        await button.click(timeout=60_000)
        result = dict(session=self.name, client=self.client, role=self.role, t0=t0, disabled=disabled)
        try:
            await self.pg.wait_for_function(
                """() => { const t = document.body.innerText;
                           return /Queued\\W+\\d+ run\\(s\\) ahead/.test(t) || t.includes('Preparing: loading')
                                  || /(running|preparing): step [\\d,]+ of/.test(t); }""",
                timeout=120_000, polling=50)
            result["answer_s"] = time.monotonic() - t0
            if self._answer.done():   # when the answer reached the page's websocket, before it was drawn: the
                result["frame_s"] = self._answer.result() - t0   # server's part of the wait, as a protocol client's
        except Exception:  # noqa: BLE001 - timeout: never answered
            result["answer_s"] = None
        await self.observe()
        result.update(answer=self.phase, ahead=self.ahead)
        return result

    async def share_link(self) -> str:
        await self.pg.get_by_text("Share this run with a class").click(timeout=60_000)
        code = self.pg.locator('[data-testid="stCode"]', has_text="watch=").first
        await code.wait_for(timeout=60_000)
        link = (await code.inner_text()).strip()
        self.saw_share(link)
        return link

    async def stay(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await asyncio.sleep(min(2.0, max(0.0, end - time.monotonic())))
            try:
                await self.observe()
            except Exception:  # noqa: BLE001 - the page is redrawing
                pass

    async def close(self) -> None:
        if self.ctx is not None:
            await self.ctx.close()
            self.ctx = None


# ----------------------------------------------------------------------------------------------- the scenarios


async def _guard(session: Session, coro):
    try:
        await coro
    except Exception as exc:  # noqa: BLE001 - one failing session is a finding, not the end of the benchmark
        session.rec.errors.append(f"{session.name} ({session.role}, {session.client}) on "
                                  f"{getattr(session, 'page', '') or 'Home'}: {type(exc).__name__}: {exc}"[:600])


async def _tour(s: Session, rnd: random.Random, pages=TOUR, think=(1.0, 4.0), deadline: float = float("inf")):
    for page in pages:
        if time.monotonic() >= deadline:
            return
        await s.goto(page)
        await s.stay(rnd.uniform(*think))


async def solo(server: Server, seconds: float) -> dict:
    """One run alone on the server: its tokens/s over `seconds` of training."""
    rec = Record()
    s = ProtocolSession("solo", "trainer", rec, server)
    await s.open("Train")
    start = await s.press_start()
    t_run = None
    end = time.monotonic() + seconds + 300
    while time.monotonic() < end:
        if s.phase == "running" and t_run is None:
            t_run = time.monotonic()
        if t_run is not None and time.monotonic() - t_run >= seconds:
            break
        if s.phase in ("finished", "failed"):
            break
        await asyncio.sleep(0.5)
    await s.close()
    samples = rec.tokens["solo"]
    steps = [step for _, phase, step, _ in rec.timelines["solo"] if step is not None]
    return dict(start=start, tokens_per_s=statistics.median(samples) if samples else None, samples=len(samples),
                last_step=max(steps) if steps else None, exceptions=rec.exceptions)


async def classroom(server: Server, duration: float, browsers: int, seed: int, n_finetuners: int = 0,
                    n_viewers: int = 20, n_browse: int = 2) -> tuple[Record, dict]:
    rec = Record()
    rnd = random.Random(seed)
    n_trainers = 8
    pw = browser = None
    if browsers:
        from playwright.async_api import async_playwright

        pw = await async_playwright().start()
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    # Which sessions are Chromium pages: the teacher, then one trainer, then viewers, then browsing ones.
    chromium_order = ["teacher", "trainer-2", "viewer-01", "viewer-02", "viewer-03", "viewer-04", "browse-1"]
    chromium_names = set(chromium_order[:browsers])

    def make(name, role):
        if name in chromium_names:
            return BrowserSession(name, role, rec, server, browser)
        return ProtocolSession(name, role, rec, server)

    teacher = make("teacher", "teacher")
    trainers = [teacher] + [make(f"trainer-{i}", "trainer") for i in range(2, n_trainers + 1)]
    viewers = [make(f"viewer-{i:02d}", "viewer") for i in range(1, n_viewers + 1)]
    browsing = [make(f"browse-{i}", "browse") for i in range(1, n_browse + 1)]
    finetuners = [make(f"finetuner-{i}", "finetuner") for i in range(1, n_finetuners + 1)]
    everyone = trainers + viewers + browsing + finetuners
    loop = asyncio.get_running_loop()
    shared: asyncio.Future = loop.create_future()     # the teacher's share link
    window = {"start": None, "end": None}
    answered: list[float] = []

    def class_deadline() -> float:
        return (window["start"] or time.monotonic() + 3600) + duration

    async def arrive(s: Session):
        await asyncio.sleep(rnd.uniform(0, 3))      # a class opens the link within a few seconds
        await s.open("")
        await _tour(s, rnd, TOUR[1:])

    async def teacher_part(s: Session):
        try:
            await arrive(s)
            await s.goto("Train")
            window["start"] = rec.teacher_start = time.monotonic()
            start = await s.press_start()
            rec.starts.append(start)
            answered.append(time.monotonic())
            link = await s.share_link()
        except Exception as exc:   # no link to share: the others, waiting for it, fail too rather than wait forever
            shared.set_exception(RuntimeError(f"the teacher had no share link ({type(exc).__name__}: {exc})"[:300]))
            raise
        shared.set_result(link)
        await s.stay(class_deadline() - time.monotonic())

    async def trainer_part(s: Session):
        await arrive(s)
        await s.goto("Train")
        await asyncio.shield(shared)                  # the teacher's run first: it is the one the class watches
        await asyncio.sleep(rnd.uniform(0, 2))
        start = await s.press_start()
        rec.starts.append(start)
        answered.append(time.monotonic())
        if len(answered) == n_trainers:
            rec.runs_window[0] = time.monotonic()
            rec.cpu_at_window = server.cpu_s() + _generator_cpu_s(server.proc.pid)
        await _tour(s, rnd, TOUR, deadline=class_deadline())   # while its run is queued or training
        await s.goto("Train")     # and back to its run, even past the end: its last status is read fresh
        await s.stay(class_deadline() - time.monotonic())

    async def viewer_part(s: Session):
        await arrive(s)
        link = await asyncio.shield(shared)
        await asyncio.sleep(rnd.uniform(0, 3))
        await s.open("Train", link.split("?", 1)[1])
        if s.query.get("watch") != link.split("watch=", 1)[1]:
            rec.leak(f"{s.name} ({s.client}) opened the share link but its ?watch= is {s.query.get('watch')}")
        await s.stay(rnd.uniform(4, 10))
        while time.monotonic() < class_deadline():
            await _tour(s, rnd, ["Attention", "Predictions", "", "Tokens_and_masking", "Train"],
                        think=(2.0, 6.0), deadline=class_deadline())
            await s.stay(rnd.uniform(4, 10))

    async def finetuner_part(s: Session):
        """A student at the fine-tuning step: opens the Fine-tune page, presses *Fine-tune both* on its defaults
        within the class's first minute, and watches the race (queued, then training, then its results)."""
        await arrive(s)
        await s.goto("Fine-tune")
        await asyncio.shield(shared)
        await asyncio.sleep(rnd.uniform(0, 40))
        start = await s.press_start("Fine-tune both")
        rec.race_starts.append(start)
        await s.stay(class_deadline() - time.monotonic())

    async def browse_part(s: Session):
        await arrive(s)
        await asyncio.shield(shared)
        while time.monotonic() < class_deadline():
            await _tour(s, rnd, TOUR, think=(2.0, 6.0), deadline=class_deadline())
        await s.goto("Train")
        await s.stay(1.0)
        if s.phase is not None or s.query.get("run") or s.query.get("watch"):
            rec.leak(f"{s.name} ({s.client}) never started a run but its Train page shows one ({s.phase})")

    parts = ([_guard(teacher, teacher_part(teacher))] + [_guard(s, trainer_part(s)) for s in trainers[1:]]
             + [_guard(s, viewer_part(s)) for s in viewers] + [_guard(s, browse_part(s)) for s in browsing]
             + [_guard(s, finetuner_part(s)) for s in finetuners])
    await asyncio.gather(*parts)
    rec.runs_window[1] = time.monotonic()
    rec.cpu_at_end = server.cpu_s() + _generator_cpu_s(server.proc.pid)
    # What each session ended on, then close everything.
    final = {s.name: dict(role=s.role, client=s.client, phase=s.phase, run=(s.run_id or "")[:6],
                          step=max(s.last_step.values()) if s.last_step else None) for s in everyone}
    for s in everyone:
        try:
            await s.close()
        except Exception:  # noqa: BLE001
            pass
    if browser is not None:
        await browser.close()
        await pw.stop()
    _isolation_checks(rec, trainers, viewers, shared.result() if shared.done() else None)
    return rec, final


def _isolation_checks(rec: Record, trainers: list[Session], viewers: list[Session], link: str | None) -> None:
    ids = [t.run_id for t in trainers if t.run_id]
    if len(ids) != len(trainers):
        rec.leak(f"only {len(ids)} of {len(trainers)} trainers had a ?run= id: "
                 + ", ".join(t.name for t in trainers if not t.run_id))
    if len(set(ids)) != len(ids):
        rec.leak("two trainers had the same ?run= id")
    shares = [t.share_ids for t in trainers]
    for t in trainers:
        if len(t.share_ids) > 1:
            rec.leak(f"{t.name} was shown {len(t.share_ids)} different share ids")
    flat = [next(iter(s)) for s in shares if len(s) == 1]
    if len(set(flat)) != len(flat):
        rec.leak("two trainers were shown the same share id")
    view_id = link.split("watch=", 1)[1] if link else None
    for t in trainers[1:]:
        if view_id and view_id in t.share_ids:
            rec.leak(f"{t.name}'s share box holds the teacher's share id")
    # A viewer sees the teacher's run: its step never runs ahead of what the teacher's page showed next.
    teacher_steps = sorted((t, step) for t, _, step, _ in rec.timelines[trainers[0].name] if step is not None)
    for v in viewers:
        for t, _, step, key in rec.timelines[v.name]:
            if step is None or key != view_id:
                continue
            if not teacher_steps or t > teacher_steps[-1][0] - 1.0:
                continue   # after the teacher's page last looked: nothing to compare with
            later = [s for tt, s in teacher_steps if tt >= t - 1.0]
            if later and step > max(later) + 1:
                rec.leak(f"{v.name} saw step {step} of the shared run, beyond anything the teacher's page showed")
                break


# ----------------------------------------------------------------------------------------------- report


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summarise(rec: Record, final: dict, solo_result: dict, server: Server, meta: dict) -> dict:
    start_w, end_w = rec.runs_window
    during = [s for s in rec.settles if start_w <= s["t0"] <= end_w]
    before = [s for s in rec.settles if s["t0"] < start_w]

    def stats(rows, role):
        vals = [r["s"] for r in rows if r["role"] in role]
        return dict(n=len(vals), p50=_pct(vals, 0.5), p95=_pct(vals, 0.95), max=max(vals) if vals else None,
                    timed_out=sum(1 for r in rows if r["role"] in role and r.get("timed_out")))

    by_client = {c: stats([r for r in during if r["client"] == c], ("viewer",)) for c in ("chromium", "protocol")}
    pages = ("Train", "Attention", "Predictions", "Home", "Tokens_and_masking")
    by_page = {p: stats([r for r in during if r["page"] == p], ("viewer",)) for p in pages}
    # Each page and role apart: a wait that only one page's script makes (a cached computation, a weight copy)
    # shows as that page's tail, where the role's figures above mix it with the quick pages.
    by_role_page = {role: {p: stats([r for r in during if r["page"] == p], roles) for p in pages}
                    for role, roles in ROLES.items()}
    answers = [s["answer_s"] for s in rec.starts if s.get("answer_s") is not None]
    # Queue wait: from Start answered "queued" until the session's page first showed the run with a slot.
    waits, censored = [], []
    for st in rec.starts:
        tl = rec.timelines[st["session"]]
        t_answer = st["t0"] + (st.get("answer_s") or 0)
        if st.get("answer") != "queued":
            waits.append(0.0)
            continue
        got = next((t for t, phase, _, _ in tl if t >= t_answer and phase in ("preparing", "running")), None)
        if got is None:
            censored.append(end_w - t_answer)
        else:
            waits.append(got - t_answer)
    solo_tps = solo_result.get("tokens_per_s")
    per_run = {}
    for st in rec.starts:
        samples = rec.tokens[st["session"]]
        med = statistics.median(samples) if samples else None
        per_run[st["session"]] = dict(tokens_per_s=med, samples=len(samples),
                                      vs_solo=(med / solo_tps) if med and solo_tps else None,
                                      last=final.get(st["session"], {}))
    races = []
    for st in rec.race_starts:
        name = st["session"]
        t_answer = st["t0"] + (st.get("answer_s") or 0)
        slot = next((t for t, phase, _, _ in rec.timelines[name]
                     if t >= t_answer and phase in ("preparing", "running")), None)
        estimate = rec.first_estimate.get(name)
        races.append(dict(session=name, answer=st.get("answer"), answer_s=st.get("answer_s"), ahead=st.get("ahead"),
                          estimated_wait_s=estimate[1] if estimate else None,
                          waited_s=(slot - estimate[0]) if slot is not None and estimate else
                          (0.0 if st.get("answer") != "queued" else None),
                          finished_after_s=(rec.finished_at[name] - t_answer) if name in rec.finished_at else None,
                          last=final.get(name, {}).get("phase")))
    return dict(
        races=races,
        meta=meta,
        settle=dict(viewers_during=stats(during, ("viewer",)), trainers_during=stats(during, ("trainer", "teacher")),
                    browse_during=stats(during, ("browse",)), all_before_runs=stats(before, ("viewer", "trainer",
                                                                                           "teacher", "browse")),
                    viewers_by_client=by_client, viewers_by_page=by_page, by_role_page=by_role_page),
        start_answer=dict(n=len(answers), p50=_pct(answers, 0.5), max=max(answers) if answers else None,
                          never=len(rec.starts) - len(answers),
                          answers=[(s["session"], s["client"], s.get("answer"), s.get("ahead"), s.get("answer_s"))
                                   for s in rec.starts],
                          # a Chromium page's Start: the answer reached its websocket after (s), then was drawn
                          chromium_frame_s=[(s["session"], s["frame_s"]) for s in rec.starts if "frame_s" in s]),
        queue_wait=dict(started=len(waits), waits=sorted(waits), still_queued_at_end=len(censored),
                        censored_at_least=sorted(censored)),
        tokens=dict(solo=solo_tps, solo_samples=solo_result.get("samples"), per_run=per_run),
        memory=dict(peak_total_mb=server.peak["total_kb"] / 1024, server_mb=server.peak["server_kb"] / 1024,
                    children_mb=server.peak["children_kb"] / 1024, children_at_peak=server.peak["children"],
                    max_children=server.max_children, ray_cluster_mb=server.cluster_peak_kb / 1024),
        runs_completed=sum(1 for v in final.values() if v["role"] in ("teacher", "trainer")
                           and v["phase"] == "finished"),
        exceptions=rec.exceptions, server_tracebacks=server.tracebacks(), leaks=rec.leaks, session_errors=rec.errors,
        notes=sorted(set(rec.notes)),
        timelines={k: [(round(t - (rec.teacher_start or 0), 1), ph, st, (key or "")[:6]) for t, ph, st, key in v]
                   for k, v in rec.timelines.items() if k.startswith(("teacher", "trainer"))},
        final=final, window_s=(end_w - start_w) if end_w > start_w else None,
        cpu=dict(server_core_share=(rec.cpu_at_end[0] - rec.cpu_at_window[0]) / (end_w - start_w)
                 if end_w > start_w else None,
                 children_core_share=(rec.cpu_at_end[1] - rec.cpu_at_window[1]) / (end_w - start_w)
                 if end_w > start_w else None,
                 load_generator_core_share=(rec.cpu_at_end[2] - rec.cpu_at_window[2]) / (end_w - start_w)
                 if end_w > start_w else None,
                 browsers_core_share=(rec.cpu_at_end[3] - rec.cpu_at_window[3]) / (end_w - start_w)
                 if end_w > start_w else None),
        training_processes=dict(
            started_after_teacher_start_s=sorted(t - rec.teacher_start for t in server.training_started.values())
            if rec.teacher_start else [], most_at_once=server.max_training),
    )


def _f(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def table(r: dict) -> str:
    s, a, q, m, tk = r["settle"], r["start_answer"], r["queue_wait"], r["memory"], r["tokens"]
    vd, td = s["viewers_during"], s["trainers_during"]
    rows = [
        ("viewers' page settle p50 / p95 (s), 8 runs queued or training",
         f"{_f(vd['p50'])} / {_f(vd['p95'])} (n={vd['n']}, max {_f(vd['max'])}, {vd['timed_out']} not settled "
         f"in {NAV_TIMEOUT_S:.0f} s)", "p95 < 3 s",
         vd["p95"] is not None and vd["p95"] < TARGETS["viewer_p95_s"]),
        ("trainers' page settle p50 / p95 (s), same window",
         f"{_f(td['p50'])} / {_f(td['p95'])} (n={td['n']}, max {_f(td['max'])}, {td['timed_out']} not settled)",
         "", None),
        ("every session's settle before the runs p50 / p95 (s)",
         f"{_f(s['all_before_runs']['p50'])} / {_f(s['all_before_runs']['p95'])} (n={s['all_before_runs']['n']})",
         "", None),
        ("Start to 'running'/'Preparing' or 'Queued (k ahead)' p50 / max (s)",
         f"{_f(a['p50'])} / {_f(a['max'])} ({a['n']} of {a['n'] + a['never']} answered)", "< 2 s",
         a["max"] is not None and a["never"] == 0 and a["max"] < TARGETS["start_answer_s"]),
        ("queue wait until a slot (s): runs that got one",
         ", ".join(f"{w:.0f}" for w in q["waits"]) or "–", "", None),
        ("runs still queued at the end (waited at least, s)",
         f"{q['still_queued_at_end']}" + (f" ({', '.join(f'{w:.0f}' for w in q['censored_at_least'])})"
                                           if q["censored_at_least"] else ""), "", None),
        ("training tokens/s alone (median of the page's samples)", _f(tk["solo"], "{:,.0f}"), "", None),
        ("training tokens/s per run in the class / alone",
         "; ".join(f"{k}: {_f(v['tokens_per_s'], '{:,.0f}')} ({_f(v['vs_solo'], '{:.0%}')})"
                   for k, v in tk["per_run"].items() if v["tokens_per_s"]) or "–", "", None),
        ("CPU in that window, in cores: web server / training processes / this load generator / its Chromium pages",
         f"{_f(r['cpu']['server_core_share'])} / {_f(r['cpu']['children_core_share'])} / "
         f"{_f(r['cpu']['load_generator_core_share'])} / {_f(r['cpu'].get('browsers_core_share'))}", "", None),
        ("training processes started, s after the teacher's Start (most at once)",
         ", ".join(f"{t:.0f}" for t in r["training_processes"]["started_after_teacher_start_s"])
         + f" ({r['training_processes']['most_at_once']})", "", None),
        ("peak Pss, server + training processes (MB)",
         f"{m['peak_total_mb']:,.0f} (server {m['server_mb']:,.0f}, {m['children_at_peak']} children "
         f"{m['children_mb']:,.0f}; at most {m['max_children']} children)", "< 4,096 MB",
         m["peak_total_mb"] < TARGETS["memory_gb"] * 1024),
    ] + ([
        ("fine-tuning races: Start answered as (s)",
         "; ".join(f"{x['answer']}" + (f" ({x['ahead']} ahead)" if x["answer"] == "queued" else "")
                   + f" in {_f(x['answer_s'], '{:.1f}')}" for x in r["races"]), "none refused",
         all(x["answer"] in ("queued", "preparing", "running") for x in r["races"])),
        ("races: wait the page estimated / waited until a slot (s)",
         "; ".join(f"{_f(x['estimated_wait_s'], '{:.0f}')} / {_f(x['waited_s'], '{:.0f}')}" for x in r["races"]),
         "", None),
        ("races: results shown, s after Start (else the state at the end)",
         "; ".join(_f(x["finished_after_s"], "{:.0f}") if x["finished_after_s"] is not None else str(x["last"])
                   for x in r["races"]), "each finishes or waits with an estimate", None),
    ] if r.get("races") else []) + [
        ("runs finished by the end (teacher and trainers)", f"{r['runs_completed']}", "", None),
    ] + ([
        ("peak Pss of the local Ray cluster (GCS, raylets, the runs' actors) (MB)", f"{m['ray_cluster_mb']:,.0f}",
         "", None),
    ] if m.get("ray_cluster_mb") else []) + [
        ("exceptions on pages / tracebacks in the server log",
         f"{len(r['exceptions'])} / {len(r['server_tracebacks'])}", "0", not r["exceptions"]),
        ("state seen by another session", f"{len(r['leaks'])}", "0", not r["leaks"]),
        ("sessions that failed their part", f"{len(r['session_errors'])}", "0", not r["session_errors"]),
    ]
    out = ["| measure | result | target | met |", "| --- | --- | --- | --- |"]
    for name, value, target, met in rows:
        out.append(f"| {name} | {value} | {target} | {'' if met is None else ('yes' if met else 'NO')} |")
    return "\n".join(out)


def page_table(r: dict) -> str:
    """Settle p50 / p95 / max (s) of each page, by role, in the runs' window (the figures of summarise's
    by_role_page); a run's JSON from before it has none."""
    by = r["settle"].get("by_role_page")
    if not by:
        return ""
    out = ["| page | " + " | ".join(f"{role} p50 / p95 / max (n)" for role in by) + " |",
           "| --- |" + " --- |" * len(by)]
    for page in next(iter(by.values())):
        cells = [by[role][page] for role in by]
        out.append(f"| {page or 'Home'} | " + " | ".join(
            f"{_f(c['p50'])} / {_f(c['p95'])} / {_f(c['max'])} ({c['n']})" for c in cells) + " |")
    return "\n".join(out)


def _uptime() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[:3].__str__()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=240.0, help="seconds of the class after the teacher's Start")
    ap.add_argument("--solo-s", type=float, default=60.0, help="seconds of the solo run's training to measure (0: skip)")
    ap.add_argument("--browsers", type=int, default=4, help="sessions that are real Chromium pages (at most 7)")
    ap.add_argument("--slots", type=int, default=None, help="BERT_EXPLORER_MAX_TRAININGS (default: the app's)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the think times and arrival jitter")
    ap.add_argument("--finetuners", type=int, default=0,
                    help="sessions that press Fine-tune both in the class's first minute (the issue-31 mix: 4)")
    ap.add_argument("--viewers", type=int, default=20, help="watchers of the teacher's run (the issue-31 mix: 15)")
    ap.add_argument("--browse", type=int, default=2, help="sessions that only browse (the issue-31 mix: 3)")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("--ray", type=int, default=0, metavar="NODES",
                    help="train on a local Ray cluster of this many worker nodes (0: the server's own processes)")
    ap.add_argument("--ray-cpus", type=int, default=1, help="CPUs of each local Ray worker node (with --ray)")
    args = ap.parse_args(argv)
    if args.browsers and not Path(CHROMIUM).exists():
        ap.error(f"no Chromium at {CHROMIUM} (set BERT_CHROMIUM, or --browsers 0)")
    meta = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), duration=args.duration, browsers=args.browsers,
                finetuners=args.finetuners, viewers=args.viewers, browse=args.browse,
                slots_env=args.slots, cores=os.cpu_count(), loadavg_before=Path("/proc/loadavg").read_text().split()[:3],
                ray_nodes=args.ray, ray_cpus=args.ray_cpus)
    cluster = _ray_cluster(args.ray, args.ray_cpus) if args.ray else None
    try:
        return _run(args, meta, cluster)
    finally:
        if cluster is not None:
            cluster.shutdown()


def _ray_cluster(nodes: int, cpus: int):
    """A local Ray cluster: a head that trains nothing and `nodes` worker nodes of `cpus` CPUs each."""
    try:
        from ray.cluster_utils import Cluster
    except ImportError:
        raise SystemExit("error: --ray needs Ray (pip install -r requirements-cluster.txt)") from None
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(nodes):
        cluster.add_node(num_cpus=cpus)
    cluster.wait_for_nodes()
    print(f"local Ray cluster at {cluster.address}: {nodes} node(s) of {cpus} CPU(s)", flush=True)
    return cluster


def _cluster_pids(cluster) -> list[int]:
    """The pids of a local Ray cluster's processes (its nodes' GCS, raylets and the rest)."""
    if cluster is None:
        return []
    return [info.process.pid for node in cluster.list_all_nodes() for infos in node.all_processes.values()
            for info in infos if info.process is not None]


def _run(args, meta: dict, cluster) -> int:
    address = cluster.address if cluster is not None else None
    print(f"load average before: {' '.join(meta['loadavg_before'])}", flush=True)
    with tempfile.TemporaryDirectory(prefix="classroom-load-") as tmp:
        work = Path(tmp)
        solo_result = {}
        if args.solo_s > 0:
            server = Server(work, args.slots, address, lambda: _cluster_pids(cluster))
            try:
                solo_result = asyncio.run(solo(server, args.solo_s))
            finally:
                server.close()
            print(f"solo run: {_f(solo_result.get('tokens_per_s'), '{:,.0f}')} tokens/s "
                  f"({solo_result.get('samples')} samples, up to step {solo_result.get('last_step')})", flush=True)
        server = Server(work, args.slots, address, lambda: _cluster_pids(cluster))
        try:
            rec, final = asyncio.run(classroom(server, args.duration, args.browsers, args.seed, args.finetuners,
                                               args.viewers, args.browse))
            meta["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
            result = summarise(rec, final, solo_result, server, meta)
        finally:
            server.close()
    result["solo"] = {k: v for k, v in solo_result.items() if k != "start"}
    print(f"load average after: {' '.join(meta['loadavg_after'])}")
    print(table(result))
    print("\npage settle in the runs' window, by page and role (s):\n" + page_table(result) + "\n")
    groups: dict[str, list] = {}
    for e in result["exceptions"]:
        groups.setdefault(e["text"].splitlines()[0], []).append(f"{e['session']}@{e['page']}")
    for text, where in groups.items():
        print(f"exception x{len(where)}: {text} ({', '.join(sorted(set(w.split('@')[1] for w in where)))})")
    for title, items in (("server traceback", result["server_tracebacks"]), ("state leak", result["leaks"]),
                         ("note on a run", result["notes"]),
                         ("session failed", result["session_errors"])):
        for item in items[:10]:
            print(f"{title}: {item}")
    print("final state of the trainers' runs: " + "; ".join(
        f"{k}: {v['phase']} step {v['step']}" for k, v in result["final"].items() if v["role"] in ("teacher", "trainer")))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
