"""The runs of a shared server written where a restarted server (a redeployed Space, a teacher's server between two
lessons) finds them (`bert_core.serve.runs`): a folder a run in the state folder (`$BERT_EXPLORER_STATE_DIR`, default
`runs/app-state` beside `runs/app`):

    <state>/<hash of the run id>/run.json       its ids, settings, name, phase, why it ended (rewritten when its phase
                                               changes)
    <state>/<hash of the run id>/checkpoint/    its checkpoint: written by its training process before the first
                                               update, every CHECKPOINT_EVERY_S while it trains, at every stop, and
                                               at its end (the folder the ended run's process is released into)
    <state>/<hash of the run id>/probes.json    its probe snapshots (the Train, Attention and Predictions pages replay
                                               them), written when it ends

A restarted server reads them back: an ended run as it ended; a training one "stopped by a server restart at step N"
with its last checkpoint; one with no checkpoint yet is dropped, and its link says so. A run dropped or reset loses
its folder. Folder names are hashes, so no id becomes a path. No Streamlit or torch here.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from bert_core.errors import is_disk_full, os_reason
from bert_core.inspect.word_maps import word_maps_to_json
from bert_core.model.files import TRAINER_STATE, is_whole_checkpoint
from bert_core.serve.app_storage import runs_dir
from bert_core.serve.finetune_runs import is_race_record

# The file a race's training process keeps its results in (bert_core.training.finetune_race.KEPT_FILE), and the
# folder of its checkpoints of the model in training (finetune_race.TRAINING).
RACE_FILE = "race.json"
RACE_TRAINING = "training"

log = logging.getLogger("bert_core.app")

STATE_DIR_ENV = "BERT_EXPLORER_STATE_DIR"
RECORD = "run.json"
CHECKPOINT = "checkpoint"
PROBES = "probes.json"
CHECKPOINT_EVERY_S = 60.0   # a run training when the server dies loses at most this much
RECORD_RETRY_S = 30.0       # how often a record that could not be written (a full disk) is tried again
FORMAT = 1


def state_dir() -> Path:
    env = os.environ.get(STATE_DIR_ENV, "").strip()
    if env:
        return Path(env)
    runs = runs_dir()
    return runs.with_name(f"{runs.name}-state")


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        tmp.write_text(json.dumps(obj, allow_nan=False), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def checkpoint_step(folder: Path) -> int:
    """The step of the whole checkpoint in `folder`; -1 when there is none, or it cannot be read."""
    try:
        if is_whole_checkpoint(folder):
            return int(json.loads((Path(folder) / TRAINER_STATE).read_text(encoding="utf-8"))["step"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return -1


def probes_to_json(store) -> dict | None:
    """A ProbeStore's sentences and snapshots as JSON (attention rounded to 3 decimals: figures, not training)."""
    if store is None:
        return None
    snaps = []
    for snap in store.snapshots():
        attention = None if snap.attention is None else snap.attention.astype("float32").round(3).tolist()
        snaps.append({"step": snap.step, "predictions": snap.predictions, "attention_tokens": snap.attention_tokens,
                      "attention": attention, "word_maps": word_maps_to_json(snap.word_maps),
                      "word_classes": None if snap.word_classes is None else snap.word_classes.to_json()})
    return {"sentences": list(store.sentences), "attention_sentence": store.attention_sentence,
            "top_k": store.top_k, "max_snapshots": store.max_snapshots, "snapshots": snaps}


def record_failure(exc: BaseException) -> str:
    """What the pages say while a run's record cannot be written, each cause in its own words."""
    if is_disk_full(exc):
        why, until = "the server's disk is full", "as soon as there is room"
    elif isinstance(exc, PermissionError) or (isinstance(exc, OSError) and exc.errno == errno.EROFS):
        why = f"the server may not write in its state folder: {os_reason(exc)}"
        until = "once its operator makes the folder writable by the user the server runs as"
    else:
        why, until = f"the server could not write it: {os_reason(exc)}", "until it can"
    return (f"**This run would be lost if the server restarted:** its record could not be written ({why}). It is "
            f"here while the server runs; the server tries again every {RECORD_RETRY_S:g} s, {until}. Download "
            "what you need to keep.")


def _kept_race_models(checkpoint: Path) -> int:
    """How many of a race's models had finished, kept (0: none, or unreadable; one stopped part-way goes on)."""
    try:
        results = json.loads((checkpoint / RACE_FILE).read_text(encoding="utf-8")).get("results") or {}
        return sum(1 for r in results.values() if isinstance(r, dict) and r.get("state") == "finished")
    except (OSError, ValueError, AttributeError):
        return 0


def _race_checkpoint(checkpoint: Path) -> tuple[str, int] | None:
    """(the model, its step) of a race's checkpoint of the model in training; None: none, or unreadable."""
    try:
        state = json.loads((checkpoint / RACE_TRAINING / "trainer_state.json").read_text(encoding="utf-8"))
        return str(state["name"]), int(state["step"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def race_restart_note(done: int, training: tuple[str, int] | None) -> str:
    if training is not None:
        name, step = training
        ended = f"{done} of its models had ended, kept; " if done else ""
        return (f"stopped by a server restart ({ended}its model {name!r} had made {step:,} steps: its last "
                "checkpoint). Resume goes on from there, to the results of the race never stopped")
    if done:
        return (f"stopped by a server restart after {done} of its models had ended, kept. Resume goes on with the "
                "next, to the results of the race never stopped")
    return ("stopped by a server restart before any of its models had ended or written a checkpoint: nothing of it "
            "was kept. Resume runs it again from the start")


class RunRecords:
    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def folder_for(self, run_id: str) -> Path:
        return self.folder / hashlib.sha256(("bert-explorer-run:" + run_id).encode()).hexdigest()[:32]

    def checkpoint_for(self, run_id: str) -> Path:
        return self.folder_for(run_id) / CHECKPOINT

    def write(self, run, phase: str, step: int | None, probes=None) -> bool:
        """Write (replace) the run's record, with `probes` (a ProbeStore) its snapshots. When it cannot be written
        (False), `run.record_failed` says so to the pages and the scheduler tries again every RECORD_RETRY_S."""
        if not run.spec.recorded:
            return False   # a test's stand-in spec, which holds no plain data
        record = {"format": FORMAT, "run_id": run.run_id, "view_id": run.view_id, "family": run.family,
                  "page": run.spec.page, "name": run.name, "created": run.created,
                  "spec": dataclasses.asdict(run.spec), "phase": phase, "note": run.note,
                  "ended": run.job and (run.job.error or run.job.ended_note), "step": step,
                  "cancelled": run.cancelled, "visitors": dict(run.visitors)}
        folder = self.folder_for(run.run_id)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if probes is not None:
                _write_json(folder / PROBES, probes_to_json(probes))
            _write_json(folder / RECORD, record)
        except (OSError, TypeError, ValueError) as exc:
            why = os_reason(exc) if isinstance(exc, OSError) else type(exc).__name__
            if run.record_failed is None:
                log.warning("run %s: its record could not be written (%s)", run.run_id[:6], why)
            run.record_failed = record_failure(exc)
            run.record_retry_at = time.monotonic() + RECORD_RETRY_S
            return False
        if run.record_failed is not None:
            log.info("run %s: its record was written on a later try", run.run_id[:6])
        run.record_failed = run.record_retry_at = None
        return True

    def due(self, run, now: float) -> bool:
        """Its phase changed since its last record, or a failed write's retry is due."""
        if run.record_failed is not None:
            return run.record_retry_at is None or now >= run.record_retry_at
        return run.phase != run.recorded_phase

    @staticmethod
    def kept(record: dict, checkpoint: Path) -> tuple[str, str | None]:
        """(phase, note) a recorded run comes back with: as it ended, or stopped by the restart with what it kept.
        FileNotFoundError when it kept nothing worth it: no whole checkpoint, or only step 0's untrained weights."""
        phase, note = record.get("phase"), record.get("note")
        if is_race_record(record):
            # A race keeps each model's results as it ends, and checkpoints of the one in training: one under way
            # (training, or queued for its next turn after some of its models) comes back stopped, to be resumed.
            if phase not in ("finished", "stopped", "failed"):
                done, training = _kept_race_models(checkpoint), _race_checkpoint(checkpoint)
                if phase != "running" and not (done or training):
                    raise FileNotFoundError("it had not started")
                phase, note = "stopped", race_restart_note(done, training)
            return phase, note
        step = checkpoint_step(checkpoint)
        if step < 0:
            raise FileNotFoundError("no whole checkpoint")
        if step == 0:
            raise FileNotFoundError("only the untrained weights of step 0")
        if phase not in ("finished", "stopped", "failed"):
            phase = "stopped"
            note = f"stopped by a server restart at step {step:,} (its last checkpoint; Resume goes on from there)"
        return phase, note

    def remove(self, run_id: str) -> None:
        shutil.rmtree(self.folder_for(run_id), ignore_errors=True)

    def read_all(self) -> list[tuple[dict, Path]]:
        """Every readable record with its folder, oldest first; unreadable folders are removed."""
        if not self.folder.is_dir():
            return []
        found = []
        for folder in self.folder.iterdir():
            if folder.name.startswith(".") or folder.is_symlink() or not folder.is_dir():
                continue
            try:
                record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
                ok = (isinstance(record, dict) and record.get("format") == FORMAT
                      and folder == self.folder_for(str(record.get("run_id"))))
            except (OSError, ValueError):
                ok = False
            if not ok:
                log.info("removing the unreadable run record %s", folder.name[:8])
                shutil.rmtree(folder, ignore_errors=True)
                continue
            found.append((record, folder))
        return sorted(found, key=lambda item: float(item[0].get("created") or 0.0))
