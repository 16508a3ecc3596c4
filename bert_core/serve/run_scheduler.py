"""The pass a shared server makes over its runs by itself (`bert_core.serve.runs`): on a thread of its own every
`poll_s` seconds, and after an owner's action. It starts queued runs, ends turns that are up, stops runs nobody
watches, ends the processes of ended runs (their checkpoints kept in folders), and drops the oldest ended runs.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from bert_core.serve.run_queue import RunQueue
from bert_core.serve.run_registry import Run, RunRegistry

log = logging.getLogger("bert_core.app")


class RunScheduler:
    """Moves runs through `queue` and ends them in `registry`; `lock` is the store's, which both share.

    `job_factory(run)` makes the run's job when it first gets a slot; `release_folder(run)` is where an ended run's
    checkpoint goes before its process ends (None: keep the job).
    """

    def __init__(self, lock: threading.RLock, registry: RunRegistry, queue: RunQueue,
                 job_factory: Callable[[Run], Any], release_folder: Callable[[Run], Path | None], poll_s: float):
        self._lock = lock
        self._registry = registry
        self._queue = queue
        self._job_factory = job_factory
        self._release_folder = release_folder
        self.poll_s = poll_s
        self._tick_lock = threading.Lock()    # one scheduler pass at a time (the thread's and a page's)
        self._thread: threading.Thread | None = None
        self.closed = False                  # set when the store closes: the thread ends

    def schedule(self) -> None:
        """Give free slots to the runs at the front of the queue (a first slot makes the run's job)."""
        for run in self._queue.take_free_slots():
            try:
                if run.job is None:
                    run.job = self._job_factory(run)
                run.job.start()
            except Exception as exc:  # noqa: BLE001 - a run that cannot start must not block the queue
                log.exception("starting a run failed")
                with self._lock:
                    self._queue.remove(run)
                    run.cancelled, run.note = True, f"could not start: {exc}"
                    run.ended_at = time.monotonic()

    def tick(self, now: float | None = None) -> None:
        """One pass of the scheduler: free the slots of runs that ended, end turns that are up, stop runs nobody
        watches, release ended runs' processes, drop the oldest ended runs, and start queued runs."""
        with self._tick_lock:
            self._tick(time.monotonic() if now is None else now)
        self.schedule()

    def _tick(self, now: float) -> None:
        to_release, to_end = [], []
        with self._lock:
            to_stop = self._queue.end_turns(now)
            for run in self._registry.runs():
                if self._registry.unwatched(run, now) and not run.released and not run.cancelled:
                    self._end_unwatched(run, now, to_end)
                job = run.job
                if (not run.released and job is not None and not run.active and run not in to_end
                        and job.phase in ("finished", "failed")):
                    to_release.append(run)
            doomed = self._registry.drop_oldest_ended()
        for run in to_stop:
            run.job.stop()
        for run in to_end:
            self.release(run, stop_first=True)
        for run in to_release:
            self.release(run)
        for run in doomed:
            log.info("dropping the ended run %s (the server keeps %d)", run.run_id[:6], self._registry.keep)
            end_job(run, wait=1.0)

    def _end_unwatched(self, run: Run, now: float, to_end: list[Run]) -> None:
        """End a run nobody has watched for the grace period: a queued one that never started is cancelled, an
        active or idle-but-alive one is stopped and goes into `to_end`, to be released."""
        minutes = f"{self._registry.unwatched_s / 60:g} min"
        if run.queued and run.job is None:
            run.cancelled, what = True, "cancelled"
        elif run.job is not None and (run.active or run.job.phase == "stopped"):
            run.pausing, run.stopping, what = False, True, "stopped by the server"
            log.warning("stopping run %s: nobody watched it for %s", run.run_id[:6], minutes)
            to_end.append(run)
        else:
            return
        self._queue.remove(run)
        run.queued = False
        run.note, run.ended_at = f"{what}: nobody watched it for {minutes}", now

    def release(self, run: Run, stop_first: bool = False) -> None:
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

    def ensure_thread(self) -> None:
        """Start the scheduler's thread unless it runs already (the first submitted run starts it)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._loop, name="bert-run-scheduler", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self.closed:
            time.sleep(self.poll_s)
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the scheduler must outlive one bad pass
                log.exception("scheduler pass failed")


def end_job(run: Run, wait: float) -> None:
    """Stop the run's job and end its process (a dropped or discarded run, or the server closing)."""
    job = run.job
    if job is not None:
        job.stop(wait=min(wait, 1.0))
        job.close(wait=wait)
