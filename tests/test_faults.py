"""Faults a class server meets (issue #34), injected for real: a training process killed (before and after its
first step) or frozen (SIGSTOP), a full disk (a writer that fails with ENOSPC), and a server restarted over the
same folders. Each checks that nothing finished is lost, that no state contradicts another, and that the words
shown name the fault, never a server path or a Python exception."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tests.race_stand_ins import builder_of
from bert_core.serve import job_factory, jobs, runs
from tests import test_runs

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 180   # generous: a loaded shared machine starts processes slowly; passing tests never wait it out


def _spec(steps: int = 100_000, probes: bool = False, **train) -> jobs.TrainSpec:
    settings = dict(max_steps=steps, batch_size=4, max_seq_length=32, eval_every=0, probe_every=0, device="cpu")
    return jobs.TrainSpec(vocab_size=300, train={**settings, **train}, probes=probes)


def _until(condition, what: str, wait_s: float = WAIT_S):
    test_runs._until(condition, what, wait_s)


@pytest.fixture
def store(monkeypatch, tmp_path):
    monkeypatch.setenv(jobs.PROCESS_ENV, "1")
    made = []

    def make(**kw):
        kw.setdefault("slots", lambda: 1)
        kw.setdefault("turn_s", 1000)
        s = runs.RunStore(lambda run: job_factory.pretraining_job(run.run_id, run.spec), poll_s=0.05,
                          release_folder=lambda run: tmp_path / "released" / run.run_id[:8], **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        for run in s.runs():
            process = getattr(run.job, "process", None)
            if process is not None and process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
        s.close()


def _training(run, step: int = 2):
    _until(lambda: run.job is not None and run.job.trainer is not None and run.job.trainer.step >= step,
           "the child trains")


@pytest.mark.long  # a long check (`--long`): waits out a stall
def test_a_frozen_process_is_ended_as_stalled_and_the_queued_run_gets_its_slot(store):
    s = store(stall_s=4)
    frozen = s.submit(_spec(), "owner")
    _training(frozen)
    waiting = s.submit(_spec(steps=3), "student")
    os.kill(frozen.job.process.pid, signal.SIGSTOP)
    waits = []
    while frozen.phase == "running":
        waits.append(s.queue_position(waiting)[1])
        time.sleep(0.1)
    assert min(waits) >= 1.0, "a blocked slot is never said to free in 0 s"
    assert frozen.phase == "failed" and "stalled" in frozen.job.error
    _until(lambda: waiting.phase in ("running", "finished"), "the queued run gets the freed slot")
    clock = frozen.trainer.progress.elapsed_s
    time.sleep(0.3)
    assert frozen.trainer.progress.elapsed_s == clock, "a failed run's clock stops"
    assert not frozen.job.model_available and "lost" in frozen.job.lost_message()


@pytest.mark.long  # a long check (`--long`)
def test_stop_ends_a_run_whose_process_does_not_answer(store):
    s = store(stall_s=1000)
    run = s.submit(_spec(), "owner")
    _training(run)
    os.kill(run.job.process.pid, signal.SIGSTOP)
    time.sleep(6)  # long enough to count as not answering
    started = time.monotonic()
    s.stop(run.run_id, wait=10)
    _until(lambda: run.job.process.poll() is not None, "Stop ends the frozen process", wait_s=30)
    assert time.monotonic() - started < 15
    assert run.phase == "stopped" and not run.active and s.busy_count() == 0
    assert "did not answer" in run.job.ended_note


def test_a_process_killed_while_it_prepares_is_one_state_failed(store):
    s = store()
    run = s.submit(_spec(), "owner")
    _until(lambda: run.job is not None and run.job.process is not None, "the child starts")
    run.job.process.kill()
    _until(lambda: run.phase == "failed", "the kill is reported")
    assert "exit code -9" in run.job.error and run.trainer is None and not run.active


def _recorded_store(records, **kw):
    """A store as the app makes it: each run's checkpoints and record in `records`, read back when it starts."""
    kw.setdefault("slots", lambda: 2)
    return runs.RunStore(lambda run: job_factory.pretraining_job(run.run_id, run.spec,
                                                          checkpoint_dir=records.checkpoint_for(run.run_id)),
                         release_folder=lambda run: records.checkpoint_for(run.run_id), records=records,
                         restore_job=job_factory.restored_pretraining_job, poll_s=0.05, turn_s=1000, **kw)


def test_a_restarted_server_brings_back_its_ended_and_training_runs(tmp_path):
    """A server process (a script here) runs a store over a state folder and dies without any cleanup; a new store
    over the same folder (the restarted server) has the finished run back with its curves, probes and model, the
    one that was training back as stopped by the restart at its last checkpoint, and names the queued one as
    lost (it had no checkpoint yet)."""
    from bert_core.serve.run_records import RunRecords

    script = textwrap.dedent(f"""
        import json, os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tests.test_faults import _recorded_store, _spec
        from bert_core.serve.run_records import RunRecords
        records = RunRecords({str(tmp_path / "state")!r})
        slots = [2]
        store = _recorded_store(records, slots=lambda: slots[0])
        done = store.submit(_spec(steps=8, probe_every=4, probes=True), "owner", name="done",
                            visitor="teacher-browser-0000")
        store.attach(done, "a-student-tab", "viewer", "student-browser-000")
        going = store.submit(_spec(), "owner", family_of=done)
        queued = store.submit(_spec(), "student")
        while going.job is None:
            time.sleep(0.05)
        # One slot from here on: when `done` ends, `queued` must still wait (given the freed slot, it could write a
        # first checkpoint before the server dies, and come back as stopped instead of lost).
        slots[0] = 1
        def ready():
            return (done.released and done.job.process.poll() is not None and done.recorded_phase == "finished"
                    and going.trainer is not None and going.trainer.step >= 3 and going.recorded_phase == "running")
        while not ready():
            time.sleep(0.05)
        print(json.dumps(dict(done=[done.run_id, done.view_id, done.family, len(done.trainer.history),
                                    len(done.trainer.evals), len(done.trainer.probes.snapshots())],
                              going=going.run_id, queued=queued.run_id, still_queued=queued.job is None,
                              child=going.job.process.pid)), flush=True)
        os._exit(0)  # the server dies without any cleanup (as with SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT_S,
                         env={**os.environ, jobs.PROCESS_ENV: "1"}, cwd=tmp_path)
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    assert ids["still_queued"], "the third run must still be waiting when the server dies"
    _until(lambda: not _alive(ids["child"]), "the orphaned child notices and exits, writing its checkpoint")
    records = RunRecords(tmp_path / "state")
    second = _recorded_store(records)
    try:
        run_id, view_id, family, history, evals, probes = ids["done"]
        back = second.get(run_id)
        assert back is not None and back.phase == "finished" and not back.active
        assert second.by_view(view_id) is back and back.family == family
        assert len(back.trainer.history) == history and len(back.trainer.evals) == evals
        assert len(back.trainer.probes.snapshots()) == probes > 0
        assert back.job.model_snapshot() is not None and back.job.snapshot_step == back.trainer.step == 8
        stopped = second.get(ids["going"])
        assert stopped is not None, f"the training run came back without its stop's checkpoint:\n{out.stderr[-6000:]}"
        assert stopped.phase == "stopped" and stopped.job.model_available
        assert stopped.note.startswith("stopped by a server restart at step ") and not stopped.released  # Resume
        assert stopped.job.model_snapshot() is not None and stopped.job.snapshot_step == stopped.trainer.step >= 3
        assert second.family(back) == [back, stopped]
        # Each browser's list of its runs comes back with them.
        assert second.visited("teacher-browser-0000") == [(back, "owner")]
        assert second.visited("student-browser-000") == [(back, "viewer")]
        assert second.get(ids["queued"]) is None and second.was_lost(ids["queued"])
        copy = back.job.save(tmp_path / "copy")
        assert (copy / "model.safetensors").is_file()
        second.discard(run_id)
        assert not records.folder_for(run_id).exists(), "a reset run leaves no record behind"
    finally:
        second.close()


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" not in status.read_text()
    except OSError:
        return False


def test_a_full_disk_at_the_end_of_a_run_keeps_its_process_and_says_so(store, monkeypatch, tmp_path):
    """ENOSPC when the ended run's checkpoint is written (a failing writer): the process is kept with the model,
    the owner is told in plain words, a download still comes from the process, and a later try writes it."""
    from bert_core.errors import BertCoreError
    from bert_core.serve import run_scheduler

    monkeypatch.setattr(run_scheduler, "RELEASE_RETRY_S", 1.0)
    monkeypatch.setenv("BERT_EXPLORER_PUBLIC", "1")
    disk = {"full": True}
    s = store()
    run = s.submit(_spec(steps=6), "owner")
    _until(lambda: run.job is not None, "the run starts")
    real_release = run.job.release

    def release(folder):
        if disk["full"]:
            raise BertCoreError(f"could not write {folder}: No space left on device; nothing there was replaced")
        real_release(folder)

    run.job.release = release
    _until(lambda: run.release_failed is not None, "the failed write is noticed")
    assert run.job.process.poll() is None and run.job.model_available, "the process holds the model"
    assert "disk is full" in run.release_failed and str(tmp_path) not in run.release_failed
    assert run.job.zip_bytes()[:2] == b"PK", "a download still comes from the process"
    disk["full"] = False
    _until(lambda: run.released and run.release_failed is None, "a later try writes it")
    _until(lambda: run.job.process.poll() is not None, "and then the process ends")
    assert run.job.model_snapshot() is not None


def test_a_process_killed_after_its_first_steps_keeps_its_last_checkpoint_labelled_with_its_step(tmp_path,
                                                                                                  monkeypatch):
    """kill -9 of a training child: the run fails with the exit code, its clock stops, and the model the server
    still has (its last periodic checkpoint, here) is labelled with that step, not the run's."""
    from bert_core.serve import job_factory
    from bert_core.serve.run_records import RunRecords

    monkeypatch.setenv(jobs.PROCESS_ENV, "1")
    monkeypatch.setattr(job_factory, "CHECKPOINT_EVERY_S", 0.05)   # a periodic checkpoint at once
    records = RunRecords(tmp_path / "state")
    s = _recorded_store(records)
    try:
        run = s.submit(_spec(), "owner")
        _training(run, step=3)
        state = records.checkpoint_for(run.run_id) / "trainer_state.json"

        def past_step_0() -> bool:
            try:
                return json.loads(state.read_text())["step"] > 0
            except (OSError, ValueError, KeyError):   # not written yet, or being replaced
                return False

        _until(past_step_0, "a checkpoint past step 0")
        run.job.process.kill()
        _until(lambda: run.phase == "failed" and run.released, "the kill is reported and the run released")
        assert "exit code -9" in run.job.error
        clock = run.trainer.progress.elapsed_s
        time.sleep(0.3)
        assert run.trainer.progress.elapsed_s == clock
        _until(lambda: run.job.model_available, "the checkpoint it wrote is kept")
        assert run.job.model_snapshot() is not None and 0 < run.job.snapshot_step <= run.trainer.step
    finally:
        s.close()


def test_a_run_stopped_before_a_restart_resumes_exactly_where_it_stopped(tmp_path, monkeypatch):
    """A run stopped, the server restarted over the same state folder: the run comes back stopped and parked, and
    Resume goes on from its checkpoint in a new process, to the very weights of the same run never interrupted;
    its curve has every step once."""
    from safetensors.torch import load_file

    from bert_core.serve.run_records import RunRecords

    monkeypatch.setenv(jobs.PROCESS_ENV, "1")
    steps = 40
    records = RunRecords(tmp_path / "state")
    first = _recorded_store(records)
    try:
        run = first.submit(_spec(steps=steps), "owner", name="stopped")
        whole = first.submit(_spec(steps=steps), "owner", name="never stopped")
        _training(run, step=3)
        first.stop(run.run_id)
        _until(lambda: run.phase == "stopped" and not run.active, "the run stops")
        stopped_at = run.trainer.step
        _until(lambda: records.due(run, time.monotonic()) is False, "its record says it stopped")
        _until(lambda: whole.phase == "finished", "the other run finishes")
        expected = load_file(str(whole.job.save(tmp_path / "whole") / "model.safetensors"))
    finally:
        first.close()
    assert stopped_at < steps, "the run must stop before its end for the test to mean anything"
    second = _recorded_store(records)
    try:
        back = second.get(run.run_id)
        assert back is not None and back.phase == "stopped" and not back.released
        assert back.trainer.step == stopped_at
        second.resume(run.run_id)
        _until(lambda: back.phase == "finished", "the resumed run finishes")
        assert back.trainer.step == steps
        assert [e.step for e in back.trainer.history] == list(range(1, steps + 1))
        resumed = load_file(str(back.job.save(tmp_path / "resumed") / "model.safetensors"))
        assert resumed.keys() == expected.keys()
        for name, tensor in expected.items():
            assert torch.equal(resumed[name], tensor), name
    finally:
        second.close()


def _race_store(records, **kw):
    """A store as the app makes it for the Fine-tune page's races: each race's record and kept folder in `records`."""
    kw.setdefault("slots", lambda: 1)
    return runs.RunStore(lambda run: job_factory.finetune_job(run.run_id, builder_of(run.spec), device=run.device),
                         records=records, restore_job=job_factory.restored_pretraining_job, poll_s=0.05,
                         turn_s=1000, **kw)


def _race(records, run_id: str, nano: str):
    """The page's race of a nano BERT and its from-scratch twin, 60 steps each, kept in its record folder with a
    checkpoint of the model in training at every step."""
    from bert_core.training.finetune_settings import page_settings
    from bert_core.training.finetune_spec import FinetuneSpec, RaceData

    widgets = dict(ft_seed=0, ft_steps=60, ft_budget=3000, ft_lr=1e-3, ft_batch=16, ft_maxlen=32)
    return FinetuneSpec(kind="labels", data=RaceData(task="toy-order"), checkpoint=nano,
                        settings=page_settings(widgets), train_size=48, val_size=24, data_label="toy word order",
                        model_label="nano", keep_in=str(records.checkpoint_for(run_id)), checkpoint_every_s=0.0)


def test_a_race_killed_while_training_resumes_after_a_restart_to_the_race_never_killed(tmp_path):
    """The server and the race's training process are killed (SIGKILL, no cleanup) while the race's second model
    trains. The restarted server has the race back as stopped by the restart, its first model kept and its second at
    its last checkpoint; Resume goes on from there in a new process, and the race ends with the weights, figures and
    curves of the same race never killed, bit for bit."""
    from bert_core.serve import finetune_runs
    from bert_core.serve.run_records import RunRecords
    from tests.test_finetune_race import _same_race, save_nano

    nano = str(save_nano(tmp_path / "nano"))
    script = textwrap.dedent(f"""
        import json, os, signal, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tests.test_faults import _race, _race_store
        from bert_core.serve.run_records import RunRecords
        records = RunRecords({str(tmp_path / "state")!r})
        store = _race_store(records)
        race = store.submit(_race(records, "killed", {nano!r}), "owner", run_id="killed", visitor="browser-1")
        def ready():
            view = race.trainer
            return (view is not None and len(view.tuners) == 2 and view.tuners[1].state == "running"
                    and view.tuners[1].step >= 3 and race.recorded_phase == "running")
        while not ready():
            time.sleep(0.02)
        os.kill(race.job.process.pid, signal.SIGKILL)   # the whole container goes: no stop, no last checkpoint
        print(json.dumps(dict(view=race.view_id, child=race.job.process.pid)), flush=True)
        os._exit(0)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT_S * 2,
                         env={**os.environ, jobs.PROCESS_ENV: "1"}, cwd=tmp_path)
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    _until(lambda: not _alive(ids["child"]), "the killed child is gone")
    records = RunRecords(tmp_path / "state")
    second = _race_store(records)
    try:
        back = second.get("killed")
        assert back is not None and back.phase == "stopped" and second.by_view(ids["view"]) is back
        assert "stopped by a server restart (1 of its models had ended, kept; its model 'scratch' had made" in back.note
        assert finetune_runs.can_resume(back) and [(t.name, t.state) for t in back.trainer.tuners] == \
            [("pretrained", "finished"), ("scratch", "idle")]
        whole = second.submit(_race(records, "never killed", nano), "owner", run_id="never killed")
        second.resume("killed")
        _until(lambda: back.phase == "finished" and whole.phase == "finished", "both races finish", WAIT_S * 2)
        _until(lambda: back.trainer.results and whole.trainer.results, "their results reach the server")
        _same_race(back.trainer, whole.trainer)
        assert not (records.checkpoint_for("killed") / "training").exists()
    finally:
        second.close()
