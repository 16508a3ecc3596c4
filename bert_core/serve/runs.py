"""The training runs of a shared explorer server: runs that outlive the browser tab, a fair queue for the CPU,
and runs a whole class can watch. No Streamlit here: `bert_core.serve.app_state` drives a `RunStore`, and so do tests.

Ids. A run has two random 128-bit tokens. `run_id` is the owner's: it sits in their page's URL (`?run=...`), so a
reload or a reopened link finds the run again, and whoever holds it may stop, resume or reset the run. `view_id`
is the share link's (`?watch=...`): whoever holds it watches the run and inspects its model, and can change
nothing. Nobody can guess a token, so nobody reaches another person's run.

Capacity. At most `slots` runs prepare or train at once (`$BERT_EXPLORER_MAX_TRAININGS`; default: the cores
minus one for the web server, at least one). A Start beyond that joins a first-come queue and starts by itself
when a slot frees. While anyone waits, a run trains for at most `turn_s` seconds at a stretch
(`$BERT_EXPLORER_TURN_S`, default 120); then it pauses at a step boundary, in its own process and with its
optimizer, and goes to the back of the queue, so one long run cannot keep a class waiting.

Lifetime. A run that no open tab has watched for `unwatched_s` seconds (`$BERT_EXPLORER_UNWATCHED_S`, default
600: long enough for a Wi-Fi blip or a reopened laptop) is stopped. When a run ends (finished, stopped and then
left, failed) its checkpoint goes to a folder and its process ends: an ended run costs the server a folder, not a
process. The store keeps the latest `keep` ended runs (`$BERT_EXPLORER_KEEP_RUNS`, default 40) and drops the
oldest; whoever opens a dropped run's link is told so.
"""

from __future__ import annotations

import heapq
import logging
import os
import secrets
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bert_core.errors import BertCoreError

log = logging.getLogger("bert_core.app")

SLOTS_ENV = "BERT_EXPLORER_MAX_TRAININGS"     # runs preparing or training at once on one server
TURN_ENV = "BERT_EXPLORER_TURN_S"             # longest stretch a run trains while others wait
UNWATCHED_ENV = "BERT_EXPLORER_UNWATCHED_S"   # a run nobody has watched this long is stopped
KEEP_ENV = "BERT_EXPLORER_KEEP_RUNS"          # ended runs the server keeps (oldest dropped first)
DEFAULT_TURN_S = 120.0
DEFAULT_UNWATCHED_S = 600.0
DEFAULT_KEEP = 40

OWNER, VIEWER = "owner", "viewer"
ACTIVE_PHASES = ("preparing", "running")


def _env_number(name: str, default: float, minimum: float) -> float:
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        return default
    return value if minimum <= value < float("inf") else default


def default_slots(cores: int | None = None) -> int:
    """Runs at once: `$BERT_EXPLORER_MAX_TRAININGS`, else one per core with one core left for the web server."""
    raw = os.environ.get(SLOTS_ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    cores = os.cpu_count() or 1 if cores is None else cores
    return max(1, cores - 1)


def new_token() -> str:
    """A fresh unguessable id (128 random bits, URL-safe)."""
    return secrets.token_urlsafe(16)


def scratch_key(run_id: str) -> str:
    """The name a run's scratch folder is keyed by (`app_storage.session_scratch` hashes it into a path)."""
    return f"run:{run_id}"


@dataclass(eq=False)
class Run:
    """One training run: its settings, its job once it has a slot, and who is watching it."""

    run_id: str
    view_id: str
    family: str                     # the runs started one after another from one tab share a family (its list)
    spec: Any
    name: str = ""
    created: float = field(default_factory=time.time)
    job: Any = None
    queued: bool = False
    cancelled: bool = False
    note: str | None = None          # why the server ended it, shown to whoever opens it
    ended_at: float | None = None    # monotonic time it stopped being active (orders the drops)
    turn_started: float | None = None
    pausing: bool = False            # told to stop at the end of its turn; goes back into the queue
    stopping: bool = False           # stopped by its owner: does not go back into the queue
    released: bool = False           # its process has ended and its checkpoint is in a folder
    started_at: float | None = None  # monotonic time of its first slot
    watchers: dict[str, str] = field(default_factory=dict)   # session id -> OWNER | VIEWER
    unwatched_since: float | None = None

    @property
    def phase(self) -> str:
        """queued | preparing | running | stopped | finished | failed | cancelled."""
        if self.cancelled:
            return "cancelled"
        if self.queued:
            return "queued"
        if self.job is None:
            return "queued"
        phase = self.job.phase
        return "preparing" if phase == "new" else phase

    @property
    def active(self) -> bool:
        """Queued, preparing or training: it will use CPU unless someone stops it."""
        return not self.cancelled and (self.queued or self.job is None or self.job.busy or self.pausing)

    @property
    def trainer(self):
        return self.job.trainer if self.job is not None else None


def _progress_eta(run: Run) -> float | None:
    trainer = run.trainer
    progress = getattr(trainer, "progress", None) if trainer is not None else None
    eta = getattr(progress, "eta_s", None)
    return float(eta) if eta is not None else None


class RunStore:
    """Every training run of one server process: ids, the queue and its slots, watching, and the ends of runs.

    `job_factory(run)` makes the run's job (`bert_core.serve.jobs.pretraining_job`) when it first gets a slot.
    `is_alive(session_id)` says whether a browser session is still open (None: cannot tell, counted as open).
    `release_folder(run)` is where an ended run's checkpoint goes before its process ends (None: keep the job).
    `busy_elsewhere()` counts other trainings on this CPU (the Fine-tune page's), which take slots too.
    """

    def __init__(self, job_factory: Callable[[Run], Any], slots: Callable[[], int] = default_slots,
                 is_alive: Callable[[str], bool | None] = lambda session_id: None,
                 release_folder: Callable[[Run], Path | None] = lambda run: None,
                 busy_elsewhere: Callable[[], int] = lambda: 0,
                 unwatched_s: float | None = None, keep: int | None = None, turn_s: float | None = None,
                 poll_s: float = 0.5):
        self._job_factory = job_factory
        self._slots = slots
        self._is_alive = is_alive
        self._release_folder = release_folder
        self._busy_elsewhere = busy_elsewhere
        self.unwatched_s = _env_number(UNWATCHED_ENV, DEFAULT_UNWATCHED_S, 0) if unwatched_s is None else unwatched_s
        self.keep = int(_env_number(KEEP_ENV, DEFAULT_KEEP, 1)) if keep is None else keep
        self.turn_s = _env_number(TURN_ENV, DEFAULT_TURN_S, 1) if turn_s is None else turn_s
        self.poll_s = poll_s
        self._runs: dict[str, Run] = {}
        self._views: dict[str, Run] = {}
        self._queue: deque[Run] = deque()
        self._slotted: list[Run] = []          # runs holding a slot (preparing, training or pausing)
        self._dropped: deque[str] = deque(maxlen=10_000)
        self._durations: deque[float] = deque(maxlen=20)   # wall time of recent whole runs, for wait estimates
        self._lock = threading.RLock()
        self._tick_lock = threading.Lock()    # one scheduler pass at a time (the thread's and a page's)
        self._thread: threading.Thread | None = None
        self._closed = False

    # -------------------------------------------------------------- lookups

    def get(self, run_id: str | None) -> Run | None:
        """The run with this owner id, if the server still has it."""
        with self._lock:
            return self._runs.get(run_id or "")

    def by_view(self, view_id: str | None) -> Run | None:
        """The run with this share id, if the server still has it."""
        with self._lock:
            return self._views.get(view_id or "")

    def has(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._runs

    def was_dropped(self, token: str | None) -> bool:
        """True when a run with this owner or share id was dropped to keep the store bounded."""
        with self._lock:
            return bool(token) and token in self._dropped

    def family(self, run: Run) -> list[Run]:
        """The runs of `run`'s family (started from one tab, one after another), oldest first."""
        with self._lock:
            return sorted((r for r in self._runs.values() if r.family == run.family), key=lambda r: r.created)

    def runs(self) -> list[Run]:
        with self._lock:
            return list(self._runs.values())

    def busy_count(self) -> int:
        """Runs holding a slot now (preparing, training, or finishing their turn)."""
        with self._lock:
            return len(self._slotted)

    def slots(self) -> int:
        return max(1, int(self._slots()))

    # -------------------------------------------------------------- owner actions

    def submit(self, spec: Any, session_id: str, run_id: str | None = None, family_of: Run | None = None,
               name: str = "") -> Run:
        """A new run of `spec` owned by `session_id`: it starts now if a slot is free, else it joins the queue.
        `family_of`: the run it follows in its tab's list. Returns the run (its phase says which)."""
        run_id = run_id or new_token()
        run = Run(run_id=run_id, view_id=new_token(), family=family_of.family if family_of else run_id,
                  spec=spec, name=name, queued=True)
        run.watchers[session_id] = OWNER
        with self._lock:
            if self._closed:
                raise BertCoreError("the server is shutting down")
            if run_id in self._runs:
                raise BertCoreError("this run id is taken")
            self._runs[run_id] = run
            self._views[run.view_id] = run
            self._queue.append(run)
        self._ensure_thread()
        self.schedule()
        return run

    def _owned(self, run_id: str) -> Run:
        run = self.get(run_id)
        if run is None:
            raise BertCoreError("this run is no longer on the server")
        return run

    def stop(self, run_id: str, wait: float | None = None) -> Run:
        """Stop a run (its owner's Stop): a queued run that never started is cancelled, a paused one stays
        stopped, a training one stops at its next step boundary."""
        run = self._owned(run_id)
        with self._lock:
            if run.queued:
                run.queued = False
                self._queue.remove(run)
                run.ended_at = time.monotonic()   # cancelled, or paused between turns and now stopped
                if run.job is None:
                    run.cancelled, run.note = True, "cancelled before it started"
                return run
            run.stopping = True
            run.pausing = False
            job = run.job
        if job is not None:
            job.stop(wait=wait)
        self.tick()
        return run

    def resume(self, run_id: str) -> Run:
        """Continue a stopped run where it stopped (same schedule): at once if a slot is free, else queued."""
        run = self._owned(run_id)
        with self._lock:
            job = run.job
            if run.queued or (job is not None and job.busy):
                raise BertCoreError("this run is already running or queued")
            if job is None or run.cancelled or job.trainer is None:
                raise BertCoreError("this run has nothing to resume: start a new one")
            if run.released:
                raise BertCoreError("this run's training process has ended; start a new run from its weights")
            if job.phase == "finished":
                raise BertCoreError("this run has finished; start a new run from its weights to train on")
            run.stopping = False
            run.queued, run.ended_at = True, None
            self._queue.append(run)
        self.schedule()
        return run

    def discard(self, run_id: str, wait: float = 5.0) -> None:
        """Forget a run (its owner's Reset): stop it, end its process, drop it from the store."""
        with self._lock:
            run = self._runs.pop(run_id, None)
            if run is None:
                return
            self._views.pop(run.view_id, None)
            if run.queued:
                self._queue.remove(run)
            if run in self._slotted:
                self._slotted.remove(run)
        self._end_job(run, wait)
        self.schedule()

    def retire(self, run_id: str) -> None:
        """Its tab has moved on to a new run: end an idle run's process now (its checkpoint kept in its folder, its
        curves in the list) rather than when nobody watches it any more."""
        run = self.get(run_id)
        if run is None:
            return
        with self._lock:
            idle = not run.active and not run.released and run.job is not None and run.job.trainer is not None
            if idle and run.ended_at is None:
                run.ended_at = time.monotonic()
        if idle:
            self._release(run)

    def attach(self, run: Run, session_id: str, role: str) -> None:
        """Record that a browser session is looking at the run (as its owner or as a viewer)."""
        with self._lock:
            if run.watchers.get(session_id) != OWNER:
                run.watchers[session_id] = role
            run.unwatched_since = None

    # -------------------------------------------------------------- queue

    def queue_position(self, run: Run) -> tuple[int, float]:
        """(runs ahead of it, estimated seconds until it gets a slot) for a queued run; (0, 0) otherwise."""
        now = time.monotonic()
        elsewhere = self._busy_elsewhere()
        with self._lock:
            if not run.queued or run not in self._queue:
                return 0, 0.0
            ahead = list(self._queue)[: list(self._queue).index(run)]
            waiting = bool(self._queue)
            frees = [self._time_left(r, now, waiting) for r in self._slotted]
            frees += [0.0] * max(0, self.slots() - elsewhere - len(frees))
        if not frees:   # every slot is taken by the Fine-tune page's runs: assume one turn each
            frees = [self.turn_s]
        heapq.heapify(frees)
        for other in ahead:
            heapq.heappush(frees, heapq.heappop(frees) + self._expected_turn(other))
        return len(ahead), max(0.0, frees[0])

    def _expected_duration(self) -> float:
        return statistics.median(self._durations) if self._durations else self.turn_s

    def _expected_turn(self, run: Run) -> float:
        eta = _progress_eta(run)
        return min(self.turn_s, eta if eta is not None else self._expected_duration())

    def _time_left(self, run: Run, now: float, waiting: bool) -> float:
        eta = _progress_eta(run)
        left = eta if eta is not None else self._expected_duration()
        if waiting and run.turn_started is not None:
            left = min(left, self.turn_s - (now - run.turn_started))
        return max(0.0, left)

    def policy(self) -> str:
        """The sharing rules in one paragraph, as the pages show them."""
        return (f"This server trains {self.slots()} run(s) at a time; further runs wait in a queue, first come "
                f"first served, and start by themselves. While anyone waits, a run trains for at most "
                f"{self.turn_s / 60:g} min at a stretch, then pauses and rejoins the queue at the back, continuing "
                f"where it stopped. A run that no open tab has watched for {self.unwatched_s / 60:g} min is stopped; "
                f"the server keeps the latest {self.keep} ended runs.")

    # -------------------------------------------------------------- the scheduler

    def schedule(self) -> None:
        """Give free slots to the runs at the front of the queue (a first slot makes the run's job)."""
        starts = []
        elsewhere = self._busy_elsewhere()   # asked before taking our lock: the other side takes its own
        with self._lock:
            free = self.slots() - len(self._slotted) - elsewhere
            while free > 0 and self._queue:
                run = self._queue.popleft()
                run.queued = False
                run.turn_started = time.monotonic()
                run.started_at = run.started_at or run.turn_started
                self._slotted.append(run)
                starts.append(run)
                free -= 1
                log.info("run %s gets a slot (%d of %d taken, %d still queued)", run.run_id[:6], len(self._slotted),
                         self.slots(), len(self._queue))
        for run in starts:
            try:
                if run.job is None:
                    run.job = self._job_factory(run)
                run.job.start()
            except Exception as exc:  # noqa: BLE001 - a run that cannot start must not block the queue
                log.exception("starting a run failed")
                with self._lock:
                    if run in self._slotted:
                        self._slotted.remove(run)
                    run.cancelled, run.note = True, f"could not start: {exc}"
                    run.ended_at = time.monotonic()

    def tick(self, now: float | None = None) -> None:
        """One pass of the scheduler: free the slots of runs that ended, end turns that are up, stop runs nobody
        watches, release ended runs' processes, drop the oldest ended runs, and start queued runs."""
        with self._tick_lock:
            self._tick(time.monotonic() if now is None else now)
        self.schedule()

    def _tick(self, now: float) -> None:
        to_stop, to_release, to_end = [], [], []
        with self._lock:
            waiting = bool(self._queue)
            for run in list(self._slotted):
                job = run.job
                if job is not None and job.busy:
                    if (waiting and not run.pausing and not run.stopping and job.phase == "running"
                            and run.turn_started is not None and now - run.turn_started >= self.turn_s):
                        run.pausing = True
                        to_stop.append(run)
                        log.info("run %s: its %g s turn is up with %d waiting; pausing it", run.run_id[:6],
                                 self.turn_s, len(self._queue))
                    continue
                self._slotted.remove(run)
                if run.pausing and job is not None and job.phase == "stopped" and not job.error:
                    run.pausing, run.queued = False, True     # its turn is up: to the back of the queue
                    self._queue.append(run)
                    continue
                run.pausing = False
                run.ended_at = now
                if job is not None and job.phase == "finished" and run.started_at is not None:
                    self._durations.append(now - run.started_at)
            for run in self._runs.values():
                self._watch(run, now, to_end)
                job = run.job
                if (not run.released and job is not None and not run.active and run not in to_end
                        and job.phase in ("finished", "failed")):
                    to_release.append(run)
            ended = sorted((r for r in self._runs.values() if not r.active and r.ended_at is not None),
                           key=lambda r: r.ended_at)
            doomed = ended[: max(0, len(ended) - self.keep)]
            for run in doomed:
                self._runs.pop(run.run_id, None)
                self._views.pop(run.view_id, None)
                self._dropped.extend((run.run_id, run.view_id))
        for run in to_stop:
            run.job.stop()
        for run in to_end:
            self._release(run, stop_first=True)
        for run in to_release:
            self._release(run)
        for run in doomed:
            log.info("dropping the ended run %s (the server keeps %d)", run.run_id[:6], self.keep)
            self._end_job(run, wait=1.0)

    def _watch(self, run: Run, now: float, to_end: list[Run]) -> None:
        """Note whether anyone still watches the run; an active or idle-but-alive run nobody has watched for the
        grace period is ended (queued: cancelled)."""
        alive = {sid: self._is_alive(sid) for sid in run.watchers}
        if not alive or any(a is None or a for a in alive.values()):
            run.unwatched_since = None
            # Forget closed tabs while others still watch (a shared run's viewers come and go); a reopened link
            # attaches again with the role its id gives.
            for sid, a in alive.items():
                if a is False:
                    del run.watchers[sid]
            return
        since = run.unwatched_since = run.unwatched_since or now
        if now - since < self.unwatched_s or run.released or run.cancelled:
            return
        minutes = f"{self.unwatched_s / 60:g} min"
        if run.queued and run.job is None:
            self._queue.remove(run)
            run.queued, run.cancelled = False, True
            run.note, run.ended_at = f"cancelled: nobody watched it for {minutes}", now
        elif run.job is not None and (run.active or run.job.phase == "stopped"):
            if run.queued:
                self._queue.remove(run)
                run.queued = False
            if run in self._slotted:
                self._slotted.remove(run)
            run.pausing, run.stopping = False, True
            run.note, run.ended_at = f"stopped by the server: nobody watched it for {minutes}", now
            log.warning("stopping run %s: nobody watched it for %s", run.run_id[:6], minutes)
            to_end.append(run)

    def _release(self, run: Run, stop_first: bool = False) -> None:
        """End the run's process, its checkpoint first written to the run's folder (so its link still shows the
        model and can be downloaded). Runs in the background: a save takes a moment."""
        run.released = True

        def work():
            try:
                if stop_first:
                    run.job.stop(wait=10)
                folder = self._release_folder(run)
                release = getattr(run.job, "release", None)
                if folder is not None and release is not None:
                    release(folder)
            except Exception:  # noqa: BLE001 - the run keeps its in-memory mirror; only the weights are lost
                log.exception("releasing a run failed")
                run.job.close(wait=1.0)

        threading.Thread(target=work, name=f"bert-release-{run.run_id[:6]}", daemon=True).start()

    @staticmethod
    def _end_job(run: Run, wait: float) -> None:
        job = run.job
        if job is not None:
            job.stop(wait=min(wait, 1.0))
            job.close(wait=wait)

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._loop, name="bert-run-scheduler", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._closed:
            time.sleep(self.poll_s)
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the scheduler must outlive one bad pass
                log.exception("scheduler pass failed")

    def close(self) -> None:
        """End every run and the scheduler (tests; a server shutting down)."""
        with self._lock:
            self._closed = True
            runs = list(self._runs.values())
            self._runs.clear()
            self._views.clear()
            self._queue.clear()
            self._slotted.clear()
        for run in runs:
            self._end_job(run, wait=2.0)
