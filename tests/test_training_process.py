"""The app's pretraining in a child process: the mirror shows exactly what the child's Trainer did, weights and
saves come back whole, stop is prompt, failures and crashes are messages, and no process outlives its owner."""

import json
import subprocess
import sys
import textwrap
import threading
import time
from functools import partial
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bert_core.errors import BertCoreError
from bert_core.serve import job_factory, jobs, launcher, model_sources, thread_job, train_spec
from bert_core.serve.training_process import ProcessTrainingJob
from tests import app_fixtures

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


def _spec(steps: int = 12, **train) -> jobs.TrainSpec:
    settings = dict(max_steps=steps, batch_size=4, max_seq_length=32, eval_every=4, probe_every=4, eval_batches=2,
                    device="cpu", seed=3)
    return jobs.TrainSpec(corpus="toy", vocab_size=300, preset="nano", train={**settings, **train})


def _job(spec: jobs.TrainSpec, sid: str = "proc") -> ProcessTrainingJob:
    return ProcessTrainingJob(sid, partial(jobs.build_trainer, spec), spec=spec, threads=1,
                              data_factory=partial(train_spec.training_data_for, spec))


def _wait_for_step(job, step: int) -> None:
    deadline = time.time() + TIMEOUT
    while (job.trainer is None or job.trainer.step < step) and time.time() < deadline:
        time.sleep(0.05)


@pytest.fixture
def started_jobs():
    started = []
    yield started
    for job in started:
        job.close(wait=10)
        assert job.process is None or job.process.poll() is not None


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_child_run_is_the_same_run_as_in_process_and_its_mirror_is_exact(started_jobs, tmp_path, monkeypatch, start):
    """Forked from the warm launcher (Linux) or a fresh interpreter (elsewhere, or BERT_EXPLORER_LAUNCHER=spawn):
    the same run either way."""
    monkeypatch.setenv(launcher.LAUNCHER_ENV, start)
    if start == "fork" and not launcher.fork_available():
        pytest.skip("the launcher forks: Linux only")
    spec = _spec()
    job = _job(spec)
    started_jobs.append(job)
    job.start()
    assert job.busy and job.phase == "preparing"
    deadline = time.monotonic() + 120   # forked on a thread of its own: start() does not wait for the launcher
    while job.process is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(job.process, launcher.LaunchedProcess if start == "fork" else subprocess.Popen)
    assert job.wait(TIMEOUT)
    assert job.phase == "finished", job.error
    mirror = job.trainer
    assert mirror.step == 12 and mirror.progress.fraction == 1.0

    # The same spec trained here, in this process, gives the same numbers: the child is not a different run.
    local = jobs.build_trainer(spec)
    local.run()
    assert [e.loss for e in mirror.history] == [e.loss for e in local.history]
    assert mirror.evals == local.evals and mirror.baselines == local.baselines
    assert [s.step for s in mirror.probes.snapshots()] == [s.step for s in local.probes.snapshots()]
    assert mirror.probes.snapshots()[-1].predictions == local.probes.snapshots()[-1].predictions

    # The weights copied back equal the in-process run's, and a save by the child writes them too.
    snapshot = job.model_snapshot()
    assert not snapshot.training
    for name, tensor in local.model.state_dict().items():
        assert torch.equal(snapshot.state_dict()[name], tensor), name
    assert job.model_snapshot() is snapshot  # same step: no second copy
    folder = job.save(tmp_path / "ckpt")
    saved = load_file(folder / "model.safetensors")
    assert torch.equal(saved["bert.embeddings.word_embeddings.weight"],
                       local.model.bert.embeddings.word_embeddings.weight)
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["step"] == 12 and len(state["history"]) == 12

    # The training data rebuilt on the server side is the run's (same tokenizer, same first pairs).
    assert mirror.data.build_instances(0)[:3] == local.data.build_instances(0)[:3]


def test_stop_resume_and_extend(started_jobs):
    job = _job(_spec(steps=100_000, eval_every=0, probe_every=0))
    started_jobs.append(job)
    job.start()
    _wait_for_step(job, 3)
    job.stop(wait=TIMEOUT)
    assert not job.busy and job.phase == "stopped"
    stopped_at = job.trainer.step
    time.sleep(0.5)
    assert job.trainer.step == stopped_at  # really stopped, not only reported so
    job.start()  # resume
    assert job.busy
    with pytest.raises(BertCoreError, match="no stopped or finished"):
        job.extend(5)
    _wait_for_step(job, stopped_at + 3)
    job.stop(wait=TIMEOUT)
    assert job.phase == "stopped" and job.trainer.step > stopped_at


def test_step_once_takes_the_next_update_of_a_stopped_run_in_its_process(started_jobs):
    """*Step once* on a stopped run: the child makes the next update and sends back what it did; the mirror's
    history gains that step; a running run refuses, and Resume goes on from the stepped weights."""
    job = _job(_spec(steps=100_000, eval_every=0, probe_every=0))
    started_jobs.append(job)
    job.start()
    _wait_for_step(job, 2)
    with pytest.raises(BertCoreError, match="stop the run first"):
        job.step_once()
    job.stop(wait=TIMEOUT)
    stopped_at = job.trainer.step
    record = job.step_once()
    assert record.step == stopped_at + 1 and record.mlm_loss > 0 and len(record.changes) == 10
    assert {name for name, _ in record.layer_grad_norms} >= {"embeddings", "layer 1", "layer 2", "LM head"}
    deadline = time.time() + TIMEOUT
    while job.trainer.history[-1].step != record.step and time.time() < deadline:
        time.sleep(0.05)
    assert job.trainer.history[-1].step == record.step and job.trainer.step == record.step
    assert job.trainer.history[-1].loss == pytest.approx(record.loss)
    assert job.phase == "stopped"
    job.start()  # Resume, from the stepped weights
    _wait_for_step(job, record.step + 2)
    job.stop(wait=TIMEOUT)
    assert job.trainer.step > record.step


def test_a_finished_run_goes_on_after_extend(started_jobs):
    job = _job(_spec(steps=4, eval_every=0, probe_every=0))
    started_jobs.append(job)
    job.start()
    job.wait(TIMEOUT)
    job.stop(wait=5)  # a late Stop, after the run finished, must not cut the next run short
    job.extend(3)
    job.start()
    job.wait(TIMEOUT)
    assert job.phase == "finished" and job.trainer.step == 7


def test_a_builder_error_is_a_message(started_jobs):
    job = ProcessTrainingJob("bad", app_fixtures.failing_builder)
    started_jobs.append(job)
    job.start()
    job.wait(TIMEOUT)
    assert job.phase == "failed" and job.error == "the corpus file is empty: give some text"


def test_a_crashed_child_is_reported_not_waited_for(started_jobs):
    job = ProcessTrainingJob("crash", app_fixtures.crashing_builder)
    started_jobs.append(job)
    job.start()
    assert job.wait(TIMEOUT)
    assert job.phase == "failed" and "exit code 7" in job.error
    with pytest.raises(BertCoreError, match="nothing to save"):
        job.save("/tmp/never")


def test_close_ends_the_process_of_a_discarded_run():
    job = _job(_spec(steps=100_000, eval_every=0, probe_every=0), sid="reg")
    job.start()
    deadline = time.time() + TIMEOUT
    while job.phase != "running" and time.time() < deadline:
        time.sleep(0.05)
    job.stop(wait=30)       # what RunStore.discard does (run_scheduler.end_job)
    job.close(wait=30)
    assert job.process.poll() is not None and not job.busy
    assert job.error is None and job.phase == "stopped"


def test_the_child_exits_when_the_server_dies(tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from functools import partial
        from bert_core.serve import job_factory, jobs, thread_job, train_spec
        from bert_core.serve.training_process import ProcessTrainingJob
        spec = jobs.TrainSpec(corpus="toy", vocab_size=300, preset="nano",
                              train=dict(max_steps=10**6, batch_size=4, max_seq_length=32, eval_every=0,
                                              probe_every=0, device="cpu"))
        job = ProcessTrainingJob("orphan", partial(jobs.build_trainer, spec), spec=spec)
        job.start()
        while job.trainer is None or job.trainer.step < 2:
            time.sleep(0.05)
        print(job.process.pid, flush=True)
        os._exit(0)  # the server dies without any cleanup (as with SIGKILL)
    """)
    # Started from another directory, as a server may be: the child must still find bert_core.
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=TIMEOUT,
                         cwd=tmp_path)
    child = int(out.stdout.split()[-1])
    deadline = time.time() + 30
    while Path(f"/proc/{child}").exists() and time.time() < deadline:
        status = Path(f"/proc/{child}/status").read_text() if Path(f"/proc/{child}").exists() else ""
        if "State:\tZ" in status:
            break
        time.sleep(0.1)
    alive = Path(f"/proc/{child}").exists() and "State:\tZ" not in Path(f"/proc/{child}/status").read_text()
    assert not alive, "the training process outlived the server"


def test_the_train_page_job_is_a_process_unless_switched_off(monkeypatch):
    spec = _spec()
    monkeypatch.delenv(jobs.PROCESS_ENV, raising=False)
    assert isinstance(job_factory.pretraining_job("s", spec), ProcessTrainingJob)
    monkeypatch.setenv(jobs.PROCESS_ENV, "0")
    assert isinstance(job_factory.pretraining_job("s", spec), thread_job.TrainingJob)


def test_a_finetuning_comparison_runs_in_the_child_and_its_models_come_back(started_jobs, tmp_path):
    from bert_core.data.classification_data import toy_topic_task
    from bert_core.training.race_view import RaceView
    from bert_core.training.finetune import classify_text
    from tests.page_races import build_comparison

    model, tok, _ = model_sources.load_folder(app_fixtures.train_nano_checkpoint(tmp_path / "nano"))
    data = toy_topic_task(0, 200)
    settings = dict(train=120, val=40, seed=0, budget=1, lr=1e-3, batch=16, maxlen=32)
    job = job_factory.finetune_job("ft", partial(build_comparison, data, model, tok, settings))
    started_jobs.append(job)
    job.start()
    assert job.wait(TIMEOUT) and job.phase == "finished", job.error
    comparison = job.trainer
    assert isinstance(comparison, RaceView)
    assert [t.name for t in comparison.tuners] == ["pretrained", "scratch"]
    assert all(t.state == "finished" and t.step > 0 and t.evals for t in comparison.tuners)
    assert comparison.progress.fraction == 1.0 and len(comparison.val_data) == 40
    results = comparison.results
    assert set(results) == {"pretrained", "scratch"}
    for r in results.values():
        assert r.steps == next(t.step for t in comparison.tuners if t.name == r.name)
        probs = classify_text(r.model, r.tokenizer, "the farmer feeds the cows", max_length=32)
        assert len(probs) == data.num_labels and abs(sum(probs) - 1) < 1e-5


def test_stopping_a_finetuning_comparison_keeps_the_run_so_far(started_jobs, tmp_path):
    from bert_core.data.classification_data import toy_topic_task
    from tests.page_races import build_comparison

    model, tok, _ = model_sources.load_folder(app_fixtures.train_nano_checkpoint(tmp_path / "nano"))
    settings = dict(train=120, val=40, seed=0, budget=600, lr=1e-3, batch=16, maxlen=32)
    job = job_factory.finetune_job("ft-stop", partial(build_comparison, toy_topic_task(0, 200), model, tok, settings))
    started_jobs.append(job)
    job.start()
    _wait_for_step(job, 5)
    job.stop(wait=TIMEOUT)
    assert job.phase == "stopped" and not job.busy
    assert list(job.trainer.results) == ["pretrained"] and job.trainer.results["pretrained"].state == "stopped"
    assert job.trainer.progress.fraction < 0.5


def test_a_run_that_starts_small_grows_in_the_child_and_the_server_follows(started_jobs):
    """A mini run of the Train page starts as 2 x 64 and grows (TrainConfig.grow_fraction): the server's mirror
    takes the grown size, the weights copied back load into it, and the loss chart marks the step."""
    from bert_core.inspect.figures import LIVE_CHARTS

    spec = jobs.TrainSpec(corpus="toy", vocab_size=300, preset="mini",
                          train=dict(max_steps=6, batch_size=4, max_seq_length=32, eval_batches=1, device="cpu",
                                     grow_fraction=0.5, grow_from_hidden=64, grow_from_layers=2))
    job = _job(spec, sid="grows")
    started_jobs.append(job)
    job.start()
    assert job.wait(TIMEOUT)
    assert job.phase == "finished", job.error
    mirror = job.trainer
    assert mirror.growth == {"step": 3, "fraction": 0.5, "from_size": [2, 64], "to_size": [4, 256]}
    assert (mirror.model_config.hidden_size, mirror.model_config.num_hidden_layers) == (256, 4)
    model = job.model_snapshot()
    assert model.config.hidden_size == 256 and len(model.bert.encoder.layer) == 4
    loss = LIVE_CHARTS.figures(mirror, 0.0)["loss"]
    assert [s.x0 for s in loss.layout.shapes if s.type == "line" and s.x0 == s.x1] == [3]


@pytest.mark.parametrize("killed", [None, ("it stalled", "failed")])
def test_a_dead_process_stops_its_runs_clock_before_the_phase_says_the_run_ended(killed):
    """Pages read a job's phase and its mirror's clock without the lock: once the phase says failed, the clock
    must already have stopped (a page saw it read 0.31 s, then 0.29 s, when the state changed after the phase)."""
    from types import SimpleNamespace

    seen = []

    class Watched(ProcessTrainingJob):
        @property
        def phase(self):
            return self.__dict__.get("_phase", "new")

        @phase.setter
        def phase(self, value):
            if value == "failed" and self.trainer is not None:
                seen.append(self.trainer.state)
            self.__dict__["_phase"] = value

    job = Watched("s", builder=None)
    job.phase = "running"
    job.trainer = SimpleNamespace(state="running", error=None)
    job._killed = killed
    job._child_gone(SimpleNamespace(returncode=-9))
    assert job.phase == "failed" and seen == ["failed"]
    assert job.trainer.error == job.error
    assert ("exit code -9" in job.error) if killed is None else job.error == "it stalled"


def test_a_start_does_not_wait_for_the_launcher_and_a_failed_fork_is_said(monkeypatch):
    """The launcher can take its time (its imports on a loaded server, up to START_TIMEOUT_S): start() returns at
    once with the run preparing, so the page whose Start gave the run its slot answers; a fork that fails ends the
    run with the reason, as a failed training does."""
    entered, release = threading.Event(), threading.Event()

    def slow_launch(self, entry, fds, env):
        entered.set()
        release.wait(TIMEOUT)
        raise OSError("the training launcher did not start the process")

    monkeypatch.setenv(launcher.LAUNCHER_ENV, "fork")
    if not launcher.fork_available():
        pytest.skip("the launcher forks: Linux only")
    monkeypatch.setattr(launcher.Launcher, "launch", slow_launch)
    job = _job(_spec())
    job.start()                         # returns while the launch is held
    assert entered.wait(TIMEOUT) and not release.is_set()
    assert job.phase == "preparing" and job.busy and job.error is None
    release.set()
    assert job.wait(TIMEOUT)
    assert job.phase == "failed" and "could not be started: the training launcher did not start" in job.error
