"""The registry of a shared server's runs (`bert_core.serve.runs`): each `Run` by its owner id and share id, who
watches it, which ended runs are kept, and which links were dropped."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from bert_core.errors import BertCoreError

OWNER, VIEWER = "owner", "viewer"


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
