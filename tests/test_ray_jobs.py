"""Training on a Ray cluster (bert_core.cluster.ray_job): a local cluster of two simulated nodes of one CPU each
(`ray.cluster_utils.Cluster`) trains a run to the same weights as a training process, answers Stop and Step once,
sends its checkpoints back to the server's folder, and a node that is lost fails its run like a killed process: the
last checkpoint kept, the next queued run started on the node that is left. Ray is an optional extra
(requirements-cluster.txt): without it this file is skipped, and the server never imports it unless
`$BERT_EXPLORER_RAY_ADDRESS` is set (checked in a fresh process)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import torch  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from bert_core.errors import BertCoreError  # noqa: E402
from bert_core.cluster import ray_cluster  # noqa: E402
from bert_core.serve import job_factory, jobs  # noqa: E402
from bert_core.serve.run_protocols import RunJob  # noqa: E402
from bert_core.serve.run_records import RunRecords  # noqa: E402
from bert_core.serve.runs import RunStore  # noqa: E402

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 240   # a worker's first start imports torch on a busy 2-core machine


def _spec(steps: int = 12) -> jobs.TrainSpec:
    return jobs.TrainSpec(corpus="toy", vocab_size=300, preset="nano",
                          train=dict(max_steps=steps, batch_size=4, max_seq_length=32, eval_every=4, probe_every=4,
                                     eval_batches=2, device="cpu", seed=3))


def _until(check, timeout: float = TIMEOUT, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _checkpoint_step(folder: Path) -> int:
    state = folder / "trainer_state.json"
    return json.loads(state.read_text())["step"] if state.is_file() else -1


@pytest.fixture(scope="module")
def cluster():
    """A head that trains nothing (no CPU) and two worker nodes of one CPU each; the server connects through
    `$BERT_EXPLORER_RAY_ADDRESS`, as a deployed one does. Node deaths are noticed within a few seconds."""
    local = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False,
        "_system_config": {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 1000,
                           "health_check_failure_threshold": 3}})
    workers = [local.add_node(num_cpus=1) for _ in range(2)]
    before = os.environ.get(job_factory.RAY_ADDRESS_ENV)
    os.environ[job_factory.RAY_ADDRESS_ENV] = local.address
    ray_cluster.connect()
    ray_cluster.CLUSTER.forget_nodes()
    yield local, workers
    ray.shutdown()
    local.shutdown()
    if before is None:
        os.environ.pop(job_factory.RAY_ADDRESS_ENV, None)
    else:
        os.environ[job_factory.RAY_ADDRESS_ENV] = before


def test_without_the_setting_the_server_never_imports_ray(tmp_path):
    """The app's state (its run store, job factory and slots) in a fresh process, the setting unset: no Ray; and the
    Ray job's modules themselves are Ray-free and torch-free at import."""
    code = ("import sys\nfrom bert_core.app import app_sidebar, app_state\nfrom bert_core.serve import jobs\n"
            "assert app_state.JOB_FACTORY.kind() in ('process', 'thread')\nassert app_state.RUNS.slots() >= 1\n"
            "assert 'ray' not in sys.modules, 'ray imported'\n"
            # The Ray job's own modules load neither Ray nor torch until a run is made on a cluster.
            "import bert_core.cluster.ray_job, bert_core.cluster.ray_cluster\n"
            "assert 'ray' not in sys.modules and 'torch' not in sys.modules\nprint('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != job_factory.RAY_ADDRESS_ENV}
    env["BERT_EXPLORER_STATE_DIR"] = str(tmp_path / "state")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr.strip().splitlines()[-1:]


def test_the_server_places_each_run_on_the_node_with_the_most_free_slots(monkeypatch):
    nodes = [{"NodeID": "a", "Alive": True, "Resources": {"CPU": 2.0}},
             {"NodeID": "b", "Alive": True, "Resources": {"CPU": 4.0, "GPU": 1.0}},
             {"NodeID": "gone", "Alive": False, "Resources": {"CPU": 64.0}},
             {"NodeID": "head", "Alive": True, "Resources": {}}]
    monkeypatch.setenv("BERT_EXPLORER_GPU_RUNS", "3")
    slots = ray_cluster.ClusterSlots(lambda: nodes)
    assert slots.slots() == 6   # the dead node's CPUs are not slots, nor the head's none
    assert [(g.device, g.runs) for g in slots.gpus()] == [("cuda", 3)]
    training = {"r1": True, "r2": True, "r3": True, "r4": False}
    placed = [slots.place(run, False, lambda run=run: training[run]) for run in ("r1", "r2", "r3")]
    assert placed == ["b", "b", "a"]   # 4 free on b, then 3 on b against 2 on a, then 2 against 2: the first
    assert slots.place("g1", True, lambda: True) == "b"
    slots.remove("r1")
    slots.remove("r2")
    assert slots.place("r4", False, lambda: False) == "b"
    with pytest.raises(BertCoreError, match="no node with a GPU"):
        ray_cluster.ClusterSlots(lambda: nodes[:1]).place("x", True, lambda: True)


def test_a_checkpoint_from_the_cluster_replaces_the_folder_whole_and_names_stay_inside(tmp_path):
    from bert_core.cluster.ray_job import write_checkpoint

    folder = tmp_path / "checkpoint"
    write_checkpoint(folder, {"config.json": b"{}", "sub/a.bin": b"1"})
    write_checkpoint(folder, {"config.json": b"{\"step\": 2}"})
    assert sorted(p.name for p in folder.rglob("*")) == ["config.json"]
    for bad in ("../escape", "/etc/x", ""):
        with pytest.raises(BertCoreError, match="bad name"):
            write_checkpoint(folder, {bad: b"x"})
    assert not (tmp_path / "escape").exists()


@pytest.mark.skipif(os.name != "posix", reason="the sweep asks after processes by pid (POSIX)")
def test_a_new_actor_removes_the_node_folders_a_killed_actor_left(tmp_path, monkeypatch):
    """A killed actor (a stall, a discarded run, its server gone) never reaches its own clean-up; its checkpoint folder
    stays on the node until the next actor there removes it. Only folders named by a process that has ended go."""
    import tempfile

    from bert_core.cluster import ray_job

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    dead = tmp_path / f"bert-ray-checkpoint-{ended.pid}-abc"
    dead.mkdir()
    (dead / "model.safetensors").write_bytes(b"x")
    mine = Path(ray_job.node_folder("checkpoint"))
    save = Path(ray_job.node_folder("save"))
    assert mine.name.startswith(f"bert-ray-checkpoint-{os.getpid()}-") and save.parent == tmp_path
    unnamed = tmp_path / "bert-ray-checkpoint-pnmhh2sb"     # before folders were named by their process
    other = tmp_path / f"someone-else-{ended.pid}-abc"
    for folder in (unnamed, other):
        folder.mkdir()
    ray_job.remove_dead_actors_folders()
    assert not dead.exists()
    assert all(folder.is_dir() for folder in (mine, save, unnamed, other))


def test_a_run_on_the_cluster_trains_to_the_same_weights_as_a_training_process(cluster, tmp_path):
    local, workers = cluster
    spec = _spec()
    on_ray = job_factory.pretraining_job("ray-same", spec, checkpoint_dir=tmp_path / "ray-checkpoint", kind="ray")
    here = job_factory.pretraining_job("proc-same", spec, kind="process")
    assert isinstance(on_ray, RunJob)
    try:
        on_ray.start()
        assert on_ray.busy   # placed on a node by the thread that makes its actor (a start never waits for it)
        _until(lambda: on_ray.node_id is not None, 30, "its node")
        assert on_ray.node_id in {w.node_id for w in workers}
        here.start()
        assert on_ray.wait(TIMEOUT) and here.wait(TIMEOUT)
        assert on_ray.phase == here.phase == "finished", (on_ray.error, here.error)
        assert on_ray.trainer.step == 12
        assert [e.loss for e in on_ray.trainer.history] == [e.loss for e in here.trainer.history]
        assert on_ray.trainer.evals == here.trainer.evals
        assert on_ray.trainer.probes.snapshots()[-1].predictions == here.trainer.probes.snapshots()[-1].predictions
        ours, theirs = on_ray.model_snapshot().state_dict(), here.model_snapshot().state_dict()
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
        # The end-of-run checkpoint came back through the object store into the server's folder for the run,
        # and a save writes the same weights here.
        _until(lambda: _checkpoint_step(tmp_path / "ray-checkpoint") == 12, 30, "the end-of-run checkpoint")
        saved = Path(on_ray.save(tmp_path / "saved"))
        from safetensors.torch import load_file

        weights = load_file(saved / "model.safetensors")
        assert all(torch.equal(weights[k], ours[k]) for k in weights)
        assert _checkpoint_step(saved) == 12
    finally:
        on_ray.close(wait=30)
        here.close(wait=30)
    assert on_ray.process.poll() is not None


def test_stop_step_once_and_resume_on_the_cluster(cluster):
    job = job_factory.pretraining_job("ray-steps", _spec(steps=100_000), kind="ray")
    try:
        job.start()
        _until(lambda: job.trainer is not None and job.trainer.step >= 3, what="a few steps")
        job.stop(wait=60)
        assert job.phase == "stopped" and not job.busy
        stopped_at = job.trainer.step
        record = job.step_once()
        assert record is not None
        _until(lambda: job.trainer.step == stopped_at + 1, 30, "the one step's event")
        assert job.phase == "stopped"
        job.start()   # Resume goes on from there
        _until(lambda: job.trainer.step > stopped_at + 3, what="the resumed run")
        assert job.phase == "running"
    finally:
        job.close(wait=30)
    assert job.process.poll() is not None and job.phase == "stopped"


def test_a_parked_run_goes_on_in_a_new_actor_from_its_checkpoint_files(cluster, tmp_path):
    """A stopped run whose actor was ended to free its device (ProcessModel.park, a GPU server's) is resumed in a
    new actor from its checkpoint's files, sent with the builder (the node has no path to the server's folder)."""
    folder = tmp_path / "checkpoint"
    job = job_factory.pretraining_job("ray-park", _spec(steps=100_000), checkpoint_dir=folder, kind="ray")
    try:
        job.start()
        _until(lambda: job.trainer is not None and job.trainer.step >= 3, what="a few steps")
        job.stop(wait=60)
        stopped_at, first = job.trainer.step, job.process
        assert job.park(folder, "cpu") and job.parked is not None
        _until(lambda: first.poll() is not None, 30, "the parked actor to end")
        assert _checkpoint_step(folder) == stopped_at
        job.start()
        _until(lambda: job.trainer.step > stopped_at + 2, what="the resumed run")
        assert job.process is not first and job.parked is None and job.phase == "running"
        job.stop(wait=60)
        _until(lambda: _checkpoint_step(folder) == job.trainer.step, 30, "its stop's checkpoint, sent back")
    finally:
        job.close(wait=30)


def test_a_lost_node_fails_its_run_keeps_its_checkpoint_and_the_queue_goes_on(cluster, tmp_path, monkeypatch):
    """Last in the file: it removes one of the cluster's two nodes."""
    local, workers = cluster
    monkeypatch.setattr(job_factory, "CHECKPOINT_EVERY_S", 1.0)   # a checkpoint past step 0 soon
    records = RunRecords(tmp_path / "state")
    factory = job_factory.JobFactory(records, kind=lambda: "ray")
    store = RunStore(factory, slots=factory.slots, gpus=factory.gpus, poll_s=0.2,
                     release_folder=lambda run: records.checkpoint_for(run.run_id))
    try:
        assert store.slots() == 2
        first = store.submit(_spec(steps=100_000), "s1")
        second = store.submit(_spec(steps=100_000), "s2")
        _until(lambda: all(r.trainer is not None and r.trainer.step >= 2 for r in (first, second)), what="two runs")
        assert {first.job.node_id, second.job.node_id} == {w.node_id for w in workers}   # one on each node
        third = store.submit(_spec(steps=12), "s3")
        assert third.phase == "queued"   # both slots are taken: the server's queue holds it
        folder = records.checkpoint_for(first.run_id)
        _until(lambda: _checkpoint_step(folder) >= 1, what="a checkpoint past step 0 from the cluster")

        lost = next(w for w in workers if w.node_id == first.job.node_id)
        local.remove_node(lost)
        _until(lambda: first.phase == "failed", what="the lost node's run to fail")
        assert "lost" in first.job.error
        # The scheduler releases it as it does a killed process's run: the last checkpoint the node sent is its
        # model.
        _until(lambda: first.job.released is not None, 60, "the release of the failed run")
        kept = first.job.kept_step
        assert kept is not None and kept >= 1 and kept == _checkpoint_step(folder)
        _until(lambda: store.slots() == 1, 60, "the lost node to leave the slots")
        assert third.phase == "queued" and second.phase == "running"

        store.discard(second.run_id)   # the run left holds the one slot; once it goes, the queued run starts
        _until(lambda: third.phase == "finished", what="the queued run to start and finish on the node left")
        assert third.job.node_id == second.job.node_id != first.job.node_id
    finally:
        store.close()
