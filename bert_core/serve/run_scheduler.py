"""The pass a shared server makes over its runs (`bert_core.serve.runs`), every `poll_s` on its own thread and after
an owner's action: start queued runs, end turns, stop unwatched runs, release ended runs' processes, drop old runs."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from bert_core.errors import BertCoreError, is_disk_full, os_reason
from bert_core.model.files import disk_free_mb
from bert_core.serve.app_storage import without_paths
from bert_core.serve.finetune_runs import KeptRaceJob
from bert_core.serve.training_process import ProcessModel
from bert_core.serve.run_protocols import FINETUNE_PAGE
from bert_core.serve.run_records import CHECKPOINT, PROBES, RACE_FILE
from bert_core.serve.run_registry import OWNER, SILENT_S, VIEWER, Run, RunQueue, RunRegistry, run_silence
from bert_core.serve.server_gpus import failed_gpus, is_gpu_fault, mark_failed

log = logging.getLogger("bert_core.app")

RELEASE_RETRY_S = 60.0   # how often an end-of-run checkpoint that could not be written is tried again


class RunScheduler:
    """Moves runs through `queue` and ends them in `registry` under the store's `lock` (RunStore names the rest)."""

    def __init__(self, lock: threading.RLock, registry: RunRegistry, queue: RunQueue,
                 job_factory: Callable[[Run], Any], release_folder: Callable[[Run], Path | None], poll_s: float,
                 stall_s: float = float("inf"), records: Any = None):
        self._lock = lock
        self._registry = registry
        self._queue = queue
        self._job_factory = job_factory
        self._release_folder = release_folder
        self.poll_s = poll_s
        self.stall_s = stall_s
        self._records = records   # a run_records.RunRecords, or None: runs live in memory only
        self._tick_lock = threading.Lock()    # one scheduler pass at a time (the thread's and a page's)
        self._parking: set[str] = set()      # runs whose processes are being ended to free their GPUs
        self._thread: threading.Thread | None = None
        self.closed = False                  # set when the store closes: the thread ends

    def schedule(self) -> None:
        for run in self._queue.take_free_slots():
            try:
                if run.job is None or run.job.rebuilds:
                    # A first slot; or a race a restart stopped, taken up from its folder by a new job's process.
                    run.job = self._job_factory(run)
                if isinstance(run.job, ProcessModel):
                    run.job.resume_on(run.device)   # a parked run goes on where the queue put it
                run.job.start()
            except Exception as exc:  # noqa: BLE001 - a run that cannot start must not block the queue
                log.exception("starting a run failed")
                with self._lock:
                    self._queue.remove(run)
                    run.cancelled, run.note = True, f"not started: {exc}"
                    run.ended_at = time.monotonic()

    def tick(self, now: float | None = None) -> None:
        with self._tick_lock:
            self._tick(time.monotonic() if now is None else now)
        self.schedule()

    def _tick(self, now: float) -> None:
        to_release, to_end, to_park = [], [], []
        self._end_silent()
        with self._lock:
            drop_failed_gpus(self._registry.runs())
            to_stop = self._queue.end_turns(now)
            forgotten = []
            for run in self._registry.runs():
                retry = run.release_retry_at is None or now >= run.release_retry_at
                unwatched = self._registry.unwatched(run, now)
                if unwatched and not run.released and not run.cancelled and retry:
                    self._end_unwatched(run, now, to_end)
                job = run.job
                # A stopped pretraining run keeps its process for Resume; a stopped race cannot resume (a Stop skips
                # its remaining models), so its idle process goes at once, as a finished one's does. A race a restart
                # stopped has no process: it is parked, and Resume takes it up in a new one.
                race = run.spec.page == FINETUNE_PAGE
                ended = ("finished", "failed", "stopped") if race and not _parked(job) else ("finished", "failed")
                if (not run.released and job is not None and not run.active and run not in to_end
                        and job.phase in ended and retry):
                    to_release.append(run)
                elif self._parkable(run) and run not in to_end:
                    to_park.append(run)
                # An ended fine-tuning race holds its models in the server's memory: once nobody has watched it for
                # the grace period they go, so memory is bounded by the races people look at. A race whose results
                # its process kept in its folder is read back from there when opened again; one that kept none
                # (a stand-in, a full disk) is dropped.
                if unwatched and run.released and not run.active and race:
                    forgotten.append(run)
            doomed = self._registry.drop_oldest_ended()
            gone = [r for r in forgotten if not self._to_disk(r) and self._registry.drop(r)]
        for run in to_stop:
            # A turn that is up: a pretraining run stops at its next step; a fine-tuning race at the end of the
            # model in training (it cannot resume one halfway: each keeps its whole budget).
            run.job.pause()
        for run in to_end:
            self.release(run, stop_first=True)
        for run in to_release:
            self.release(run)
        for run in to_park:
            self._park(run)
        for run in doomed + gone:
            if run in gone:
                log.info("dropping the ended race %s: nobody watched it for %g min", run.run_id[:6],
                         self._registry.unwatched_s() / 60)
            else:
                log.info("dropping the ended run %s (the server keeps %d)", run.run_id[:6], self._registry.keep)
            end_job(run, wait=1.0)
            if self._records is not None:
                self._records.remove(run.run_id)
        self._record_changes(now)

    def _parkable(self, run: Run) -> bool:
        """A stopped pretraining run whose process holds a GPU's CUDA context (0.8-1.1 GB): it goes, its checkpoint
        kept for Resume. On the CPU a stopped run keeps its process (Resume and Step once go on at once)."""
        job = run.job
        return (isinstance(job, ProcessModel) and run.device not in (None, "cpu") and not run.released
                and not run.active and job.phase == "stopped" and job.parked is None and job.process is not None
                and job.process.poll() is None and run.run_id not in self._parking
                and run.spec.page != FINETUNE_PAGE)

    def _park(self, run: Run) -> None:
        """Park a stopped GPU run (ProcessModel.park) in the background; without a folder it keeps its process."""
        folder = self._release_folder(run)
        if folder is None:
            return
        self._parking.add(run.run_id)

        def work():
            try:
                if run.job.park(folder, run.device):
                    log.info("run %s: stopped on %s, its process ended to free the GPU (Resume goes on from its "
                             "checkpoint)", run.run_id[:6], run.device)
            except Exception:  # noqa: BLE001 - a run whose save failed keeps its process, as it was
                log.exception("parking run %s failed", run.run_id[:6])
            finally:
                self._parking.discard(run.run_id)

        threading.Thread(target=work, name=f"bert-park-{run.run_id[:6]}", daemon=True).start()

    def _record_changes(self, now: float) -> None:
        """Write the records that are due (RunRecords.due), an ended run's probes with its record."""
        if self._records is None:
            return
        for run in self._registry.runs():
            phase, trainer = run.phase, run.trainer
            if not self._records.due(run, now):
                continue
            ended = not run.active and phase in ("finished", "stopped", "failed")
            probes = trainer.probes if ended and trainer is not None else None
            self._records.write(run, phase, trainer.step if trainer is not None else None, probes=probes)
            run.recorded_phase = phase

    def _to_disk(self, run: Run) -> bool:
        """Swap an ended race's job for one reading its kept results from its folder (True when it has one)."""
        if self._records is None or not run.spec.recorded or run.record_failed is not None:
            return False
        folder = self._records.checkpoint_for(run.run_id)
        if not (folder / RACE_FILE).is_file() or run.job.released == folder.resolve():
            return run.job.released == folder.resolve()   # already reading it from disk
        try:
            run.job = KeptRaceJob(run.run_id, run.spec, folder, run.job.phase, run.job.ended_note or run.job.error)
        except Exception:  # noqa: BLE001 - a damaged folder: the race is dropped as it was before records
            log.exception("reading back the race %s failed", run.run_id[:6])
            return False
        return True

    def _end_silent(self) -> None:
        """End the processes silent for `stall_s`, and at once the silent ones whose owner pressed Stop."""
        for run in self._registry.runs():
            job = run.job
            silent = run_silence(run)
            if job is None or silent <= SILENT_S:
                continue
            if run.stopping and not run.pausing:
                job.kill(f"it did not answer for {silent:.0f} s when its owner pressed Stop, so the server ended it",
                         phase="stopped")
            elif silent >= self.stall_s:
                job.kill(f"stalled: it gave no sign of life for {silent:.0f} s, so the server ended it")

    def _end_unwatched(self, run: Run, now: float, to_end: list[Run]) -> None:
        """A run nobody watched for the grace period: cancelled when it never started, else stopped into `to_end`."""
        minutes = f"{self._registry.unwatched_s() / 60:g} min"
        if run.queued and run.job is None:
            run.cancelled, what = True, "cancelled"
        elif run.job is not None and (run.active or (run.job.phase == "stopped" and not _parked(run.job))):
            run.pausing, run.stopping, what = False, True, "stopped by the server"
            log.warning("stopping run %s: nobody watched it for %s", run.run_id[:6], minutes)
            to_end.append(run)
        else:
            return
        self._queue.remove(run)
        run.queued = False
        run.note, run.ended_at = f"{what}: nobody watched it for {minutes}", now

    def release(self, run: Run, stop_first: bool = False) -> None:
        """End the run's process in the background, its checkpoint first written to its folder. When that fails (a
        full disk) the process, the only copy of the model, is kept: the owner is told (`run.release_failed`) and
        the write is tried again every RELEASE_RETRY_S (a dropped run's process ends all the same)."""
        run.released = True

        def work():
            folder = None
            try:
                if stop_first:
                    run.job.stop(wait=10)
                folder = self._release_folder(run)
                if folder is not None:
                    run.job.release(folder)
                if run.release_failed:
                    log.info("run %s: its checkpoint was written on a later try", run.run_id[:6])
                run.release_failed = run.release_retry_at = None
            except Exception as exc:  # noqa: BLE001 - a model still in its process is kept, never lost in silence
                if run.job.model_available and run.job.released is None:
                    run.release_failed = release_failure(exc, folder)
                    run.release_retry_at = time.monotonic() + RELEASE_RETRY_S
                    run.released = False
                    log.warning("run %s: its checkpoint could not be written (%s); its process is kept to hold the "
                                "model", run.run_id[:6], "disk full" if is_disk_full(exc) else type(exc).__name__)
                else:
                    log.exception("releasing run %s failed", run.run_id[:6])
                    run.job.close(wait=1.0)

        threading.Thread(target=work, name=f"bert-release-{run.run_id[:6]}", daemon=True).start()

    def ensure_thread(self) -> None:
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


def drop_failed_gpus(runs: list[Run]) -> None:
    """Take a GPU a run failed on with a CUDA fault out of use (server_gpus.mark_failed), and send the runs waiting
    for it, unstarted or parked, to any slot. Under the store's lock."""
    for run in runs:
        job = run.job
        if job is not None and run.device not in (None, "cpu") and job.phase == "failed" and is_gpu_fault(job.error):
            mark_failed(run.device, job.error)
    failed = failed_gpus()
    for run in runs:
        parked = isinstance(run.job, ProcessModel) and run.job.parked is not None
        if run.queued and run.device in failed and (run.job is None or parked):
            run.device = None   # the queue gives it a slot where there is one


def _parked(job) -> bool:
    """A stopped run with no process, resumable from its folder: nobody watching it is no reason to end it."""
    return isinstance(job, (ProcessModel, KeptRaceJob)) and job.parked is not None


def restore_runs(records, registry: RunRegistry, restore_job) -> tuple[int, int]:
    """Read back an earlier server process's runs (RunRecords.kept says how each comes back); (restored, dropped)."""
    found = records.read_all()
    if not found:
        return 0, 0
    restored = lost = 0
    for record, folder in found:
        run_id, view_id = str(record["run_id"]), str(record.get("view_id") or "")
        checkpoint = folder / CHECKPOINT
        try:
            phase, note = records.kept(record, checkpoint)
            probes = None
            if (folder / PROBES).is_file():
                probes = json.loads((folder / PROBES).read_text(encoding="utf-8"))
            job = restore_job(record, checkpoint, phase, record.get("ended"), probes)
        except Exception as exc:  # noqa: BLE001 - one damaged record must not keep the others away
            log.info("restart: run %s dropped (%s)", run_id[:6], exc if isinstance(exc, OSError) else
                     type(exc).__name__)
            registry.mark_lost(run_id, view_id)
            records.remove(run_id)
            lost += 1
            continue
        resumable = _parked(job)
        run = Run(run_id=run_id, view_id=view_id, family=str(record.get("family") or run_id), spec=job.spec,
                  name=str(record.get("name") or ""), created=float(record.get("created") or time.time()), job=job,
                  note=note, released=not resumable, ended_at=time.monotonic(), recorded_phase=None,
                  visitors=_visitors(record.get("visitors")))
        try:
            registry.add(run)
        except BertCoreError:
            continue   # a run of this id is here already
        log.info("restart: run %s restored (%s at step %d)", run_id[:6], phase, run.trainer.step)
        restored += 1
    return restored, lost


def _visitors(value) -> dict[str, str]:
    """A record's browsers and roles; a damaged record's other values are skipped."""
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(k, str) and v in (OWNER, VIEWER)}


def release_failure(exc: BaseException, folder: Path | None) -> str:
    """What the owner reads when the end-of-run checkpoint could not be written."""
    if is_disk_full(exc):
        free = disk_free_mb(folder) if folder is not None else None
        room = f" ({free:.0f} MB free)" if free is not None else ""
        why, ask = f"the server's disk is full{room}", "free space"
    else:
        why = f"the server could not write it ({without_paths(os_reason(exc))})"
        # A folder the server may not write in (an image whose app folder is root's) is not a full disk.
        ask = ("make the server's state folder writable by the user it runs as" if isinstance(exc, PermissionError)
               else "look at the server's log")
    return (f"**This run's model is not on disk yet:** {why}. Its training process is kept alive to hold the "
            "model, so nothing is lost while the server runs, but a server restart would lose it: download it now "
            f"(*Prepare download*), or ask the operator to {ask}. The server tries to write it again every "
            f"{RELEASE_RETRY_S / 60:g} min.")


def end_job(run: Run, wait: float) -> None:
    job = run.job
    if job is not None:
        job.stop(wait=min(wait, 1.0))
        job.close(wait=wait)
