"""The bookkeeping of a shared server's runs (`bert_core.serve.runs`): the registry (each `Run` by its owner id and
share id, who watches it, which ended runs are kept, and which links were dropped) and the queue (`RunQueue`: the
slots on the server's GPUs and CPU, the first-come queue for them, the turns a run trains while others wait, and how
long a queued run will wait)."""

from __future__ import annotations

import heapq
import logging
import statistics
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from bert_core.errors import BertCoreError
from bert_core.serve.server_gpus import usable

log = logging.getLogger("bert_core.app")

OWNER, VIEWER = "owner", "viewer"
SILENT_S = 5.0   # a training process quiet this long (its heartbeat comes every 2 s) is not answering


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
    release_failed: str | None = None  # why its checkpoint could not be written (its process is kept meanwhile)
    release_retry_at: float | None = None  # monotonic time of the next try to write it
    started_at: float | None = None  # monotonic time of its first slot
    device: str | None = None        # where it trains ("cpu", "cuda", "cuda:1"), from its first slot on
    watchers: dict[str, str] = field(default_factory=dict)   # session id -> OWNER | VIEWER
    # browser -> OWNER | VIEWER: the browsers that started or watched it ("My runs"); kept in its record
    visitors: dict[str, str] = field(default_factory=dict)
    unwatched_since: float | None = None
    recorded_phase: str | None = None   # the phase its record on disk holds (bert_core.serve.run_records)
    record_failed: str | None = None    # why its record could not be written: a restart would lose it
    record_retry_at: float | None = None  # monotonic time of the next try to write it

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
        """The job's trainer (or its mirror in the server), None before the run has a job."""
        return self.job.trainer if self.job is not None else None


class RunRegistry:
    """`lock` is its store's: a run enters or leaves the registry and the queue in one step. `is_alive(session_id)`:
    whether a browser session is still open (None: cannot tell, counted as open)."""

    def __init__(self, lock: threading.RLock, is_alive: Callable[[str], bool | None], unwatched_s: float,
                 keep: int):
        self._lock = lock
        self._is_alive = is_alive
        self._unwatched_s = unwatched_s
        self.keep = keep
        self._runs: dict[str, Run] = {}
        self._views: dict[str, Run] = {}
        self._dropped: deque[str] = deque(maxlen=10_000)
        self._lost: set[str] = set()   # ids of runs a restart could not bring back (no checkpoint yet)

    def unwatched_s(self) -> float:
        """Seconds a run nobody watches lives on (an ended race's results go then too)."""
        return self._unwatched_s

    def get(self, run_id: str | None) -> Run | None:
        with self._lock:
            return self._runs.get(run_id or "")

    def by_view(self, view_id: str | None) -> Run | None:
        with self._lock:
            return self._views.get(view_id or "")

    def has(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._runs

    def was_dropped(self, token: str | None) -> bool:
        with self._lock:
            return bool(token) and token in self._dropped

    def was_lost(self, token: str | None) -> bool:
        with self._lock:
            return bool(token) and token in self._lost

    def mark_lost(self, *tokens: str) -> None:
        with self._lock:
            self._lost.update(t for t in tokens if t)

    def family(self, run: Run) -> list[Run]:
        with self._lock:
            return sorted((r for r in self._runs.values() if r.family == run.family), key=lambda r: r.created)

    def runs(self) -> list[Run]:
        """A copy: the caller may add or drop runs meanwhile."""
        with self._lock:
            return list(self._runs.values())

    def add(self, run: Run) -> None:
        with self._lock:
            if run.run_id in self._runs:
                raise BertCoreError("this run id is taken")
            self._runs[run.run_id] = run
            self._views[run.view_id] = run

    def pop(self, run_id: str) -> Run | None:
        with self._lock:
            run = self._runs.pop(run_id, None)
            if run is not None:
                self._views.pop(run.view_id, None)
            return run

    def clear(self) -> list[Run]:
        with self._lock:
            runs = list(self._runs.values())
            self._runs.clear()
            self._views.clear()
            return runs

    def drop(self, run: Run) -> bool:
        """Forget one run, remembering its ids so that its links can say so; False when it was gone already."""
        with self._lock:
            if self._runs.pop(run.run_id, None) is None:
                return False
            self._views.pop(run.view_id, None)
            self._dropped.extend((run.run_id, run.view_id))
            return True

    def drop_oldest_ended(self) -> list[Run]:
        """Drop the oldest ended runs beyond the latest `keep`; returns them (their jobs are the caller's to end)."""
        with self._lock:
            ended = sorted((r for r in self._runs.values() if not r.active and r.ended_at is not None),
                           key=lambda r: r.ended_at)
            return [run for run in ended[: max(0, len(ended) - self.keep)] if self.drop(run)]

    def attach(self, run: Run, session_id: str, role: str, visitor: str | None = None) -> None:
        """A browser session looks at the run (as OWNER or VIEWER); its browser (`visitor`) lists it."""
        with self._lock:
            if run.watchers.get(session_id) != OWNER:
                run.watchers[session_id] = role
            if visitor and run.visitors.get(visitor) != OWNER and run.visitors.get(visitor) != role:
                run.visitors[visitor] = role
                run.recorded_phase = None   # its record on disk is rewritten with the new visitor
            run.unwatched_since = None

    def visited(self, visitor: str | None) -> list[tuple[Run, str]]:
        if not visitor:
            return []
        with self._lock:
            found = [(run, run.visitors[visitor]) for run in self._runs.values() if visitor in run.visitors]
        return sorted(found, key=lambda rv: rv[0].created, reverse=True)

    def unwatched(self, run: Run, now: float) -> bool:
        """True once no open tab has watched the run for `unwatched_s` (closed tabs are forgotten). Under the lock."""
        alive = {sid: self._is_alive(sid) for sid in run.watchers}
        if not alive or any(a is None or a for a in alive.values()):
            run.unwatched_since = None
            # Forget closed tabs while others still watch (a shared run's viewers come and go); a reopened link
            # attaches again with the role its id gives.
            for sid, a in alive.items():
                if a is False:
                    del run.watchers[sid]
            return False
        since = run.unwatched_since = run.unwatched_since or now
        return now - since >= self._unwatched_s


# ------------------------------------------------------------------------------------------ the queue


def _progress_eta(run: Run) -> float | None:
    trainer = run.trainer
    eta = trainer.progress.eta_s if trainer is not None else None
    return float(eta) if eta is not None else None


def run_silence(run: Run) -> float:
    """Seconds its training process has said nothing (0 for a job that cannot tell: one on a server thread)."""
    return run.job.silent_s() if run.job is not None else 0.0


def _free_device(run: Run, caps: dict[str, int], used: Counter) -> str | None:
    """The device with a free slot that `run` may take: its own once it has had one (its process holds the model
    there), else the least busy GPU, else the CPU."""
    if run.device is not None:
        return run.device if used[run.device] < caps.get(run.device, 0) else None
    gpus = sorted((d for d in caps if d != "cpu"), key=lambda d: used[d] / caps[d])
    return next((d for d in [*gpus, "cpu"] if used[d] < caps[d]), None)


class RunQueue:
    """While anyone waits, a run trains `turn_s` at most. `lock` is its store's. `slots()`: how many runs (races
    alike) train at once; of those, up to `gpus()`' shares (server_gpus.ServerGpu) train on each GPU and the rest on
    the CPU. A run keeps the device of its first slot: its training process holds the model there."""

    def __init__(self, lock: threading.RLock, slots: Callable[[], int], turn_s: float,
                 stall_s: float = float("inf"), gpus: Callable[[], Sequence] = tuple):
        self._lock = lock
        self._slots = slots
        self._gpus = gpus
        self.turn_s = turn_s
        self.stall_s = stall_s   # a silent process holds its slot until the scheduler ends it, this long
        self._queue: deque[Run] = deque()
        self._slotted: list[Run] = []          # runs holding a slot (preparing, training or pausing)
        self._durations: deque[float] = deque(maxlen=20)   # wall time of recent whole runs, for wait estimates

    def slots(self) -> int:
        return max(1, int(self._slots()))

    def capacities(self) -> dict[str, int]:
        total, caps = self.slots(), {}
        for gpu in usable(self._gpus()):   # a GPU that failed a run with a CUDA fault has no slots
            share = min(int(gpu.runs), total - sum(caps.values()))
            if share > 0:
                caps[gpu.device] = share
        caps["cpu"] = total - sum(caps.values())
        return caps

    def busy_count(self) -> int:
        with self._lock:
            return len(self._slotted)

    # `append` and `remove` only move a run: its flags (queued, stopping, ...) are the store's to set.

    def append(self, run: Run) -> None:
        with self._lock:
            self._queue.append(run)

    def remove(self, run: Run) -> None:
        with self._lock:
            if run in self._queue:
                self._queue.remove(run)
            if run in self._slotted:
                self._slotted.remove(run)

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()
            self._slotted.clear()

    # -------------------------------------------------------------- slots and turns

    def take_free_slots(self) -> list[Run]:
        """Give free slots to the runs at the front of the queue; returns those runs, whose jobs are to start."""
        starts = []
        with self._lock:
            caps = self.capacities()
            used = Counter(run.device for run in self._slotted)
            for run in list(self._queue):
                if len(self._slotted) >= sum(caps.values()):
                    break
                device = _free_device(run, caps, used)
                if device is None:
                    continue   # its device is full: the runs behind it may take the others
                self._queue.remove(run)
                run.device = device
                used[device] += 1
                run.queued = False
                run.turn_started = time.monotonic()
                run.started_at = run.started_at or run.turn_started
                self._slotted.append(run)
                starts.append(run)
                log.info("run %s gets a slot on %s (%d of %d taken, %d still queued)", run.run_id[:6], device,
                         len(self._slotted), sum(caps.values()), len(self._queue))
        return starts

    def end_turns(self, now: float) -> list[Run]:
        """Free the slots of runs that stopped (a paused run goes to the back of the queue, an ended one records
        when it ended) and mark the runs whose turn is up while others wait; returns those, to be stopped."""
        to_stop = []
        with self._lock:
            for run in list(self._slotted):
                job = run.job
                if job is not None and job.busy:
                    # A turn ends only for someone who could take its slot: a run that has trained on a GPU waits
                    # for that GPU, so it does not cut short the CPU's runs.
                    waiting = any(other.device in (None, run.device) for other in self._queue)
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
                phase = job.phase if job is not None else "cancelled"
                why = f" ({job.error or job.ended_note})" if job is not None and phase == "failed" else ""
                log.info("run %s ended: %s at step %s%s; its slot is free (%d of %d taken, %d queued)",
                         run.run_id[:6], phase, run.trainer.step if run.trainer is not None else 0, why,
                         len(self._slotted), self.slots(), len(self._queue))
        return to_stop

    # -------------------------------------------------------------- wait estimates

    def position(self, run: Run) -> tuple[int, float]:
        now = time.monotonic()
        with self._lock:
            if not run.queued or run not in self._queue:
                return 0, 0.0
            ahead = list(self._queue)[: list(self._queue).index(run)]
            waiting = bool(self._queue)
            frees = [self._time_left(r, now, waiting) for r in self._slotted]
            frees += [0.0] * max(0, self.slots() - len(frees))
        heapq.heapify(frees)
        for other in ahead:
            heapq.heappush(frees, heapq.heappop(frees) + self._expected_turn(other))
        return len(ahead), max(0.0, frees[0])

    def _left(self, run: Run) -> float:
        """Its own estimate, else its spec's budget, else the recent runs' median."""
        eta = _progress_eta(run)
        if eta is not None:
            return eta
        if run.spec.expected_s is not None:
            return float(run.spec.expected_s)
        return statistics.median(self._durations) if self._durations else self.turn_s

    def _turn(self, run: Run) -> float:
        # A race yields its slot only between its models: a turn lasts at least the model it is on.
        return max(self.turn_s, float(run.spec.longest_part_s))

    def _expected_turn(self, run: Run) -> float:
        return min(self._turn(run), self._left(run))

    def _time_left(self, run: Run, now: float, waiting: bool) -> float:
        left = self._left(run)
        if waiting and run.turn_started is not None:
            left = min(left, self._turn(run) - (now - run.turn_started))
        silent = run_silence(run)
        if silent > SILENT_S:   # frozen: its slot frees when the scheduler ends it as stalled, not before
            left = max(left, self.stall_s - silent)
        return max(1.0, left)   # a slot still held is never free "in 0 s"
