"""The training runs of a shared explorer server, pretraining (the Train page) and fine-tuning races (the Fine-tune
page) alike: runs that outlive the browser tab, one fair queue for the CPU and GPU, and runs a whole class can watch. No
Streamlit here: `bert_core.app.app_state` drives a `RunStore`, and so do tests.

A run has two random 128-bit tokens, so nobody can guess another person's run: `run_id`, the owner's (`?run=...`:
stop, resume, reset), and `view_id`, the share link's (`?watch=...`: watch and inspect, change nothing).

The policy, with each setting and default, is docs/deployment.md's: `slots` runs at once (GPU shares first), a
first-come queue, turns of `turn_s` while anyone waits (so one long run cannot keep a class waiting; a race yields
only between its models), a run nobody watched for `unwatched_s` stopped (600 s: long enough for a Wi-Fi blip or a
reopened laptop), an ended run a folder rather than a process, the latest `keep` ended runs kept, and a process
silent for `stall_s` ended (stopped by a signal, swapped out, frozen).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Callable

from bert_core.errors import BertCoreError
from bert_core.serve.finetune_runs import restoring
from bert_core.serve.job_base import SLOTS_ENV, default_slots
from bert_core.serve.run_registry import OWNER, SILENT_S, VIEWER, Run, RunQueue, RunRegistry, run_silence
from bert_core.serve.run_scheduler import RunScheduler, end_job, restore_runs
from bert_core.serve.server_gpus import detect_in_background, detected_gpus, device_label

log = logging.getLogger("bert_core.app")

TURN_ENV = "BERT_EXPLORER_TURN_S"             # longest stretch a run trains while others wait
UNWATCHED_ENV = "BERT_EXPLORER_UNWATCHED_S"   # a run nobody has watched this long is stopped
KEEP_ENV = "BERT_EXPLORER_KEEP_RUNS"          # ended runs the server keeps (oldest dropped first)
STALL_ENV = "BERT_EXPLORER_STALL_S"           # a training process silent this long is ended as stalled
DEFAULT_TURN_S = 120.0
DEFAULT_UNWATCHED_S = 600.0
DEFAULT_KEEP = 40
DEFAULT_STALL_S = 60.0
RESTORE_WAIT_S = 30.0   # a link opened while a restarted server reads its runs back waits this long at most

ACTIVE_PHASES = ("preparing", "running")

# Run, OWNER and VIEWER live with the registry, SLOTS_ENV and default_slots with the jobs; the pages use them here.
__all__ = ["SLOTS_ENV", "TURN_ENV", "UNWATCHED_ENV", "KEEP_ENV", "STALL_ENV", "DEFAULT_TURN_S",
           "DEFAULT_UNWATCHED_S", "DEFAULT_KEEP", "DEFAULT_STALL_S", "SILENT_S", "OWNER", "VIEWER", "ACTIVE_PHASES",
           "Run", "RunStore", "default_slots", "new_token", "scratch_key"]


def _env_number(name: str, default: float, minimum: float) -> float:
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        return default
    return value if minimum <= value < float("inf") else default


def new_token() -> str:
    return secrets.token_urlsafe(16)


def scratch_key(run_id: str) -> str:
    """The name a run's scratch folder is keyed by (`app_storage.session_scratch` hashes it into a path)."""
    return f"run:{run_id}"


def where_runs_train(caps: dict[str, int], gpus: list) -> str:
    """Where a server's runs train, in one sentence: its CPU, or its GPUs (those with slots in `caps`) and the CPU."""
    cores = os.cpu_count() or 1
    cpu = f"CPU ({cores} core{'s' if cores != 1 else ''})"
    if not gpus:
        return f"Runs train on this server's {cpu}, a training process a run."
    names = ", ".join(f"{g.name}, up to {caps[g.device]} run(s) at once" for g in gpus)
    cpu_part = (f", and up to {caps['cpu']} more on its {cpu} while the GPU{'s are' if len(gpus) > 1 else ' is'} "
                "full" if caps["cpu"] else "")
    return (f"Runs train on this server's GPU{'s' if len(gpus) > 1 else ''} ({names}; bf16 autocast){cpu_part}, "
            "a training process a run.")


def sharing_policy(where: str, slots: int, turn_s: float, unwatched_s: float, keep: int) -> str:
    return (f"{where} This server trains {slots} run(s) at a time; further runs wait in a "
            f"queue, first come first served, and start by themselves. While anyone waits, a run trains for at "
            f"most {turn_s / 60:g} min at a stretch, then pauses and rejoins the queue at the back, "
            f"continuing where it stopped (a fine-tuning race pauses between two of its models, never within "
            f"one). A run that no open tab has watched for {unwatched_s / 60:g} min is stopped; the server keeps "
            f"the latest {keep} ended runs.")


def _restore_recorded(records, registry: RunRegistry, restore_job, done: threading.Event) -> None:
    """Restore the recorded runs into `registry`; `done` is set however it went."""
    try:
        restored, lost = restore_runs(records, registry, restore_job)
        if restored or lost:
            log.info("restart: %d run(s) restored, %d dropped (no checkpoint yet)", restored, lost)
    except Exception:  # noqa: BLE001 - a server must start whatever an old record holds
        log.exception("restoring the recorded runs failed")
    finally:
        done.set()


class RunStore(RunRegistry):
    """Every training run of one server process (the `RunRegistry` of them and their watchers), and what its owner
    and the pages do with it; its lock is shared with the queue (`RunQueue`) and the scheduler's pass (`RunScheduler`).

    `job_factory(run)` makes the run's job at its first slot; `is_alive(session_id)`: whether a browser session is
    still open (None: cannot tell); `release_folder(run)`: where an ended run's checkpoint goes before its process
    ends (None: keep the job). `records` keeps each run's record on disk, and `restore_job(record, checkpoint, phase,
    note, probes)` rebuilds an earlier server's run from there as the store starts (a link asked for meanwhile waits).
    """

    def __init__(self, job_factory: Callable[[Run], Any], slots: Callable[[], int] = default_slots,
                 gpus: Callable[[], Any] = detected_gpus,
                 is_alive: Callable[[str], bool | None] = lambda session_id: None,
                 release_folder: Callable[[Run], Path | None] = lambda run: None,
                 unwatched_s: float | None = None, keep: int | None = None, turn_s: float | None = None,
                 stall_s: float | None = None, poll_s: float = 0.5, records: Any = None,
                 restore_job: Callable[[dict, Path, str, str | None, dict | None], Any] | None = None,
                 where: Callable[[dict, list], str] = where_runs_train):
        self._where = where   # the sentence saying where runs train: this server's, or a cluster's (job_factory)
        lock = threading.RLock()   # shared with its collaborators: a run moves between them in one step
        super().__init__(lock, is_alive,
                         _env_number(UNWATCHED_ENV, DEFAULT_UNWATCHED_S, 0) if unwatched_s is None else unwatched_s,
                         int(_env_number(KEEP_ENV, DEFAULT_KEEP, 1)) if keep is None else keep)
        stall_s = _env_number(STALL_ENV, DEFAULT_STALL_S, 1) if stall_s is None else stall_s
        self._gpus = gpus
        detect_in_background(gpus)
        self._queue = RunQueue(self._lock, slots,
                               _env_number(TURN_ENV, DEFAULT_TURN_S, 1) if turn_s is None else turn_s, stall_s,
                               gpus=gpus)
        self._scheduler = RunScheduler(self._lock, self, self._queue, job_factory, release_folder, poll_s, stall_s,
                                       records)
        self._records = records
        self._restored = threading.Event()
        if records is not None and restore_job is not None:
            # A race's record is read back by finetune_runs, a pretraining run's by `restore_job`.
            threading.Thread(target=_restore_recorded, name="bert-run-restore", daemon=True,
                             args=(records, self, restoring(restore_job), self._restored)).start()
        else:
            self._restored.set()

    def get(self, run_id: str | None) -> Run | None:
        """The run with this owner id (waiting for the recorded runs to be read back as the server starts)."""
        return self._found(super().get, run_id)

    def by_view(self, view_id: str | None) -> Run | None:
        """The run with this share id (waiting for the recorded runs, as `get`)."""
        return self._found(super().by_view, view_id)

    def _found(self, lookup: Callable[[str | None], Run | None], token: str | None) -> Run | None:
        run = lookup(token)
        if run is None and token and not self._restored.is_set():
            self._restored.wait(RESTORE_WAIT_S)
            run = lookup(token)
        return run

    def busy_count(self) -> int:
        """Runs holding a slot now (preparing, training, or finishing their turn)."""
        return self._queue.busy_count()

    def slots(self) -> int:
        return self._queue.slots()

    def stall_s(self) -> float:
        return self._scheduler.stall_s

    def queue_position(self, run: Run) -> tuple[int, float]:
        return self._queue.position(run)

    def where(self) -> str:
        caps = self._queue.capacities()
        return self._where(caps, [g for g in self._gpus() if caps.get(g.device)])

    def device_of(self, run: Run) -> str:
        """Where `run` trains, as a page says it (server_gpus.device_label); '' before its first slot."""
        return device_label(run.device, self._gpus()) if run.device else ""

    def policy(self) -> str:
        return sharing_policy(self.where(), self.slots(), self._queue.turn_s, self.unwatched_s(), self.keep)

    def submit(self, spec: Any, session_id: str, run_id: str | None = None, family_of: Run | None = None,
               name: str = "", visitor: str | None = None) -> Run:
        """A new run of `spec` owned by `session_id`, started now or queued; `family_of`: the run it follows."""
        run_id = run_id or new_token()
        run = Run(run_id=run_id, view_id=new_token(), family=family_of.family if family_of else run_id,
                  spec=spec, name=name, queued=True)
        run.watchers[session_id] = OWNER
        if visitor:
            run.visitors[visitor] = OWNER
        with self._lock:
            if self._scheduler.closed:
                raise BertCoreError("the server is shutting down")
            self.add(run)
            self._queue.append(run)
        self._scheduler.ensure_thread()
        self.schedule()
        return run

    def _owned(self, run_id: str) -> Run:
        run = self.get(run_id)
        if run is None:
            raise BertCoreError("this run is no longer on the server")
        return run

    def stop(self, run_id: str, wait: float | None = None) -> Run:
        """Its owner's Stop: a queued run is cancelled (a paused one stays stopped), a training one stops at its next
        step, and one whose process does not answer is ended (the scheduler's pass that follows)."""
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
            # A process that does not answer would only make the Stop wait: the scheduler's pass ends it now.
            job.stop(wait=None if run_silence(run) > SILENT_S else wait)
        self.tick()
        return run

    def change(self, run_id: str, name: str, value):
        """Its owner's change of a setting while the run trains (Trainer.change), from its next update on; returns
        the run's new config. Only the owner's token reaches it, as for Stop."""
        run = self._owned(run_id)
        if run.job is None or not run.active:
            raise BertCoreError("this run is not training: a setting changes while it trains")
        return run.job.change_setting(name, value)

    def resume(self, run_id: str) -> Run:
        """Continue a stopped run where it stopped: at once if a slot is free, else queued."""
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
        """Its owner's Reset: end its process, drop it from the store and from disk."""
        with self._lock:
            run = self.pop(run_id)
            if run is None:
                return
            self._queue.remove(run)
        end_job(run, wait)
        if self._records is not None:
            self._records.remove(run.run_id)
        self.schedule()

    def retire(self, run_id: str) -> None:
        """Its tab has moved on to a new run: end an idle run's process now (its checkpoint kept in its folder)."""
        run = self.get(run_id)
        if run is None:
            return
        with self._lock:
            idle = not run.active and not run.released and run.job is not None and run.job.trainer is not None
            if idle and run.ended_at is None:
                run.ended_at = time.monotonic()
        if idle:
            self._scheduler.release(run)

    def visited(self, visitor: str | None) -> list[tuple[Run, str]]:
        """This browser's "My runs": what it started (OWNER) or opened the link of (VIEWER), newest first."""
        self._restored.wait(RESTORE_WAIT_S)
        return super().visited(visitor)

    def schedule(self) -> None:
        self._scheduler.schedule()

    def tick(self, now: float | None = None) -> None:
        self._scheduler.tick(now)

    def close(self) -> None:
        """End every run and the scheduler (tests; a server shutting down)."""
        with self._lock:
            self._scheduler.closed = True
            runs = self.clear()
            self._queue.clear()
        for run in runs:
            end_job(run, wait=2.0)
