"""How busy the server is, in the one line a page shows while it waits on a run: the runs training and queued, and
what this wait is expected to take, from the run's own pace on this server now.

A run's own estimate (run_loop.Progress.eta_s) counts training seconds only: the held-out evaluations, the probe
snapshots and the turns it waits out while others train are not in it, so on a busy server it promised too little.
`Pace` times the run's progress against the wall clock whenever a page looks at it: what it gives is the run's
speed under the server's load as it is now.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass

from bert_core.serve.jobs import format_duration

WINDOW_S = 90.0       # the pace is measured over the last this many seconds: recent enough to follow the load
MIN_SPAN_S = 4.0      # two samples closer than this say too little: the run's own estimate serves meanwhile
FORGET_S = 600.0      # a run no page has looked at for this long is forgotten


@dataclass(frozen=True)
class Load:
    """The server's runs now: holding a slot (preparing or training), waiting in the queue, and slots in all."""

    training: int
    queued: int
    slots: int


def server_load(store) -> Load:
    """The counts of a `runs.RunStore`, as `busy_line` says them."""
    return Load(store.busy_count(), sum(1 for run in store.runs() if run.queued), store.slots())


class Pace:
    """Each watched run's fraction done against the wall clock, sampled whenever a page asks, and how long the runs
    of this server took from their slot to their first step (what a preparing run is waiting for)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[str, deque[tuple[float, float]]] = {}
        self._prepared: deque[float] = deque(maxlen=20)
        self._first_step_seen: deque[str] = deque(maxlen=1000)   # a server's runs are many: the latest only

    def seconds_left(self, run_id: str, fraction: float, fallback: float | None,
                     now: float | None = None) -> float | None:
        """Seconds until a run now `fraction` done ends, at its pace over the last WINDOW_S of wall time; its own
        estimate (`fallback`) until two samples MIN_SPAN_S apart show progress."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._forget(now)
            samples = self._samples.setdefault(run_id, deque())
            if not samples or samples[-1][1] != fraction or now - samples[-1][0] >= MIN_SPAN_S:
                samples.append((now, fraction))
            while len(samples) > 2 and now - samples[1][0] >= WINDOW_S:
                samples.popleft()
            (t0, f0), (t1, f1) = samples[0], samples[-1]
        if t1 - t0 < MIN_SPAN_S or f1 <= f0:
            return fallback
        return max(0.0, (1.0 - fraction) * (t1 - t0) / (f1 - f0))

    def prepared(self, run_id: str, started_at: float | None, trained_s: float, now: float | None = None) -> None:
        """Note, once per run, how long it took from its slot (`started_at`, monotonic) to its first step: the time
        since, less the `trained_s` seconds it has trained (a page may first see it some steps in)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if run_id in self._first_step_seen or started_at is None:
                return
            self._first_step_seen.append(run_id)
            self._prepared.append(max(0.0, now - started_at - trained_s))

    def typical_preparing_s(self) -> float | None:
        """The median time this server's recent runs took to prepare (None before one was seen)."""
        with self._lock:
            return statistics.median(self._prepared) if self._prepared else None

    def _forget(self, now: float) -> None:
        for run_id in [r for r, s in self._samples.items() if s and now - s[-1][0] > FORGET_S]:
            del self._samples[run_id]


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def busy_line(load: Load, run, pace: Pace, place: tuple[int, float] | None, noun: str = "run",
              now: float | None = None) -> str:
    """One line: how busy the server is, and what this `run` waits for and for how long (`place`: runs ahead of it
    and the queue's estimated wait, when queued)."""
    now = time.monotonic() if now is None else now
    others = f", {load.queued} queued" if load.queued else ""
    server = f"**Server:** {_runs(load.training)} training ({load.slots} at a time){others}."
    trainer = run.trainer
    if run.queued and place is not None:
        ahead, wait = place
        this = (f"This {noun} waits for a free slot: {_runs(ahead)} ahead of it, its turn in about "
                f"{format_duration(wait)}.")
    elif trainer is None or trainer.progress.fraction <= 0:
        so_far = format_duration(now - run.started_at) if run.started_at is not None else "…"
        typical = pace.typical_preparing_s()
        this = (f"This {noun} is preparing (its process loads the data and the model): {so_far} so far"
                + (f", about {format_duration(typical)} for this server's recent runs." if typical else "."))
    else:
        progress = trainer.progress
        pace.prepared(run.run_id, run.started_at, progress.elapsed_s, now)
        left = pace.seconds_left(run.run_id, progress.fraction, progress.eta_s, now)
        this = f"This {noun}: about {format_duration(left)} left, at its pace on this server now."
    return f"{server} {this}"
