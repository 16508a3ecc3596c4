"""A server's GPUs (bert_core.serve.server_gpus) and the queue's device slots (bert_core.serve.run_registry): runs
take a GPU slot while one is free and the CPU's after, keep their device across turns, and the pages say where a
run trains. Stand-in GPUs and jobs everywhere but the last tests, which train on a real CUDA GPU (skipped
without one)."""

import threading
import time
from functools import partial
from types import SimpleNamespace

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.serve import job_factory, jobs, runs, server_gpus
from bert_core.serve.run_registry import Run, RunQueue
from bert_core.serve.server_gpus import ServerGpu
from tests.race_stand_ins import builder_of, race_spec
from tests.stand_ins import Steps

H100 = ServerGpu("cuda", "NVIDIA H100 80GB HBM3", 81_559, 2)


@pytest.fixture(autouse=True)
def _this_machines_gpus_cached():
    """detected_gpus() answered with this machine's GPUs before a test stands in for the probe: a store's scheduler
    thread left running by an earlier test in this worker (the app's) asks it, and must never keep a stand-in's
    answer (it once did: a later page test's race was given a GPU this machine does not have)."""
    server_gpus.detected_gpus()
    yield


def _runs(n: int) -> list[Run]:
    return [Run(run_id=f"r{i}", view_id=f"v{i}", family=f"r{i}", spec=Steps(), queued=True) for i in range(n)]


def _job(busy: bool, phase: str) -> SimpleNamespace:
    return SimpleNamespace(busy=busy, phase=phase, error=None, trainer=None, ended_note=None, silent_s=lambda: 0.0)


def _queue(slots: int, gpus) -> RunQueue:
    return RunQueue(threading.RLock(), lambda: slots, turn_s=100, gpus=lambda: gpus)


def test_runs_take_the_gpu_slots_first_then_the_cpu_and_the_rest_wait():
    queue = _queue(3, [H100])
    assert queue.capacities() == {"cuda": 2, "cpu": 1}
    rs = _runs(4)
    for r in rs:
        queue.append(r)
    started = queue.take_free_slots()
    assert started == rs[:3] and [r.device for r in started] == ["cuda", "cuda", "cpu"]
    assert rs[3].queued and rs[3].device is None and queue.busy_count() == 3


def test_a_paused_run_waits_for_its_own_device_and_a_new_run_may_take_the_other():
    queue = _queue(3, [H100])
    rs = _runs(4)
    for r in rs:
        queue.append(r)
    queue.take_free_slots()
    for r in rs[:3]:
        r.job = _job(True, "running")
    # The first GPU run's turn ended: it paused (its process keeps the model on the GPU) and rejoined the queue.
    rs[0].pausing, rs[0].job = True, _job(False, "stopped")
    queue.end_turns(time.monotonic())
    assert rs[0].queued and list(queue._queue) == [rs[3], rs[0]]
    assert queue.take_free_slots() == [rs[3]] and rs[3].device == "cuda"   # the new run takes the free GPU slot
    rs[3].job = _job(True, "running")
    # The CPU run finishes: its slot is free, but the paused GPU run does not move to the CPU.
    rs[2].job = _job(False, "finished")
    queue.end_turns(time.monotonic())
    assert queue.take_free_slots() == [] and rs[0].queued and rs[0].device == "cuda"
    # Its turns: a run waiting for the GPU ends the GPU runs' turns, not the CPU's.
    queue.turn_s = 0.0
    cpu_run = _runs(5)[4]
    queue.append(cpu_run)
    assert queue.take_free_slots() == [cpu_run] and cpu_run.device == "cpu"
    cpu_run.job = _job(True, "running")
    cpu_run.turn_started = rs[1].turn_started = rs[3].turn_started = 0.0
    assert set(queue.end_turns(time.monotonic())) == {rs[1], rs[3]} and not cpu_run.pausing
    rs[1].job = _job(False, "finished")
    queue.end_turns(time.monotonic())
    assert queue.take_free_slots() == [rs[0]] and rs[0].device == "cuda"


def test_several_gpus_share_the_runs_and_the_slots_cap_them_all():
    gpus = [ServerGpu("cuda:0", "A", 1000, 1), ServerGpu("cuda:1", "B", 1000, 1)]
    queue = _queue(4, gpus)
    rs = _runs(4)
    for r in rs:
        queue.append(r)
    assert [r.device for r in queue.take_free_slots()] == ["cuda:0", "cuda:1", "cpu", "cpu"]
    # A server with one slot and a GPU trains that one run on the GPU, none on the CPU.
    assert _queue(1, [H100]).capacities() == {"cuda": 1, "cpu": 0}
    assert _queue(2, []).capacities() == {"cpu": 2}


def test_the_gpus_come_from_the_probe_and_the_setting(monkeypatch):
    two = [{"name": "NVIDIA A100", "memory_mb": 40_000}, {"name": "NVIDIA A100", "memory_mb": 40_000}]
    monkeypatch.delenv(server_gpus.GPU_RUNS_ENV, raising=False)
    assert server_gpus.server_gpus(probe=lambda: []) == []
    found = server_gpus.server_gpus(probe=lambda: two)
    assert [g.device for g in found] == ["cuda:0", "cuda:1"]
    assert {g.runs for g in found} == {server_gpus.DEFAULT_GPU_RUNS}
    assert server_gpus.server_gpus(probe=lambda: two[:1])[0].device == "cuda"
    monkeypatch.setenv(server_gpus.GPU_RUNS_ENV, "3")
    assert [g.runs for g in server_gpus.server_gpus(probe=lambda: two)] == [3, 3]
    monkeypatch.setenv(server_gpus.GPU_RUNS_ENV, "0")   # the GPU turned off: not even asked
    assert server_gpus.server_gpus(probe=lambda: pytest.fail("probed")) == []
    monkeypatch.setenv(server_gpus.GPU_RUNS_ENV, "many")   # not a count: the default
    assert server_gpus.server_gpus(probe=lambda: two[:1])[0].runs == server_gpus.DEFAULT_GPU_RUNS


def test_the_gpus_are_asked_for_once_however_many_ask_at_once(monkeypatch):
    calls = []

    def slow_probe():
        calls.append(1)
        time.sleep(0.3)
        return [H100]

    monkeypatch.setattr(server_gpus, "server_gpus", slow_probe)
    server_gpus._detected.cache_clear()
    try:
        server_gpus.detect_in_background()     # what a new RunStore does
        answers = []
        askers = [threading.Thread(target=lambda: answers.append(server_gpus.detected_gpus())) for _ in range(3)]
        for t in askers:
            t.start()
        for t in askers:
            t.join(10)
        assert answers == [(H100,)] * 3 and calls == [1]
    finally:
        # The real probe back before the stand-in's answer is forgotten, both under the lock every caller takes:
        # a store's scheduler thread left running by an earlier test (the app's, in this worker) could otherwise
        # ask in between and keep the stand-in H100 for the rest of the session.
        with server_gpus._DETECTING:
            monkeypatch.undo()
            server_gpus._detected.cache_clear()


def test_a_machine_without_a_gpu_device_is_answered_without_starting_torch(monkeypatch):
    monkeypatch.setattr(server_gpus, "DEVICE_NODES", ("/nonexistent/nvidiactl",))
    monkeypatch.setattr(server_gpus.subprocess, "run", lambda *a, **k: pytest.fail("a child interpreter was started"))
    assert server_gpus._probe() == []


def test_a_probe_that_fails_leaves_the_runs_on_the_cpu(monkeypatch):
    monkeypatch.setattr(server_gpus, "DEVICE_NODES", (__file__,))   # "a device node exists"

    def broken(*args, **kwargs):
        raise server_gpus.subprocess.TimeoutExpired("python", 60)

    monkeypatch.setattr(server_gpus.subprocess, "run", broken)
    assert server_gpus._probe() == []
    monkeypatch.setattr(server_gpus.subprocess, "run",
                        lambda *a, **k: SimpleNamespace(returncode=0, stdout='junk\n[{"name": "G", "memory_mb": 5}]'))
    assert server_gpus._probe() == [{"name": "G", "memory_mb": 5}]


def test_the_pages_say_where_the_runs_train():
    cpu_store = runs.RunStore(lambda run: None, slots=lambda: 1, gpus=lambda: [])
    gpu_store = runs.RunStore(lambda run: None, slots=lambda: 3, gpus=lambda: [H100])
    try:
        assert "CPU" in cpu_store.where() and "GPU" not in cpu_store.where()
        where = gpu_store.where()
        assert "NVIDIA H100 80GB HBM3, up to 2 run(s) at once" in where and "up to 1 more on its CPU (" in where
        assert "GPU" in gpu_store.policy()
        run = _runs(1)[0]
        assert gpu_store.device_of(run) == ""
        run.device = "cuda"
        assert gpu_store.device_of(run) == "the GPU (NVIDIA H100 80GB HBM3)"
        run.device = "cpu"
        assert gpu_store.device_of(run) == "the CPU"
    finally:
        cpu_store.close()
        gpu_store.close()
    assert server_gpus.device_label("cuda:1", [ServerGpu("cuda:1", "B", 1, 1)]) == "GPU 1 (B)"


def test_the_slots_device_reaches_the_trainer_and_the_run_keeps_its_spec(monkeypatch):
    """On a server thread (no process): a run given a GPU slot builds its trainer for CUDA, so on this CPU-only
    machine it fails saying so, while the spec the run keeps (its record, its train command) is the page's."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the build would succeed")
    monkeypatch.setenv(jobs.PROCESS_ENV, "0")
    spec = jobs.TrainSpec(vocab_size=300, train=dict(max_steps=2, batch_size=4, max_seq_length=32, eval_every=0,
                                                     probe_every=0, device="cpu"), probes=False)
    job = job_factory.pretraining_job("gpu", spec, device="cuda")
    job.start()
    assert job.wait(120) and job.phase == "failed" and "no CUDA GPU is visible" in job.error
    assert job.spec.train["device"] == "cpu"
    seen = []

    def builder(device="cpu"):
        seen.append(device)
        raise BertCoreError("built")

    for device in ("cuda:1", None):
        race = job_factory.finetune_job("race", partial(builder), device=device)
        race.start()
        assert race.wait(30) and race.error == "built"
    assert seen == ["cuda:1", "cpu"]


# ------------------------------------------------------------------ on a real CUDA GPU (skipped without one)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@needs_cuda
def test_the_probe_finds_this_machines_gpu():
    found = server_gpus.server_gpus()
    assert found and found[0].name == torch.cuda.get_device_name(0) and found[0].memory_mb > 1000


def _until(condition, what: str, wait_s: float = 180):
    deadline = time.monotonic() + wait_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@needs_cuda
def test_a_class_server_trains_its_runs_and_races_on_the_gpu_and_the_rest_on_the_cpu(tmp_path, monkeypatch):
    """The app's own path on a CUDA machine: training processes forked from the launcher, two pretraining runs
    sharing the GPU, the third on the CPU, then a fine-tuning race on the GPU whose models come back on the CPU."""
    import app_fixtures

    from bert_core.data.classification_data import toy_topic_task
    from bert_core.serve import model_sources
    from bert_core.training.finetune_spec import FinetuneSpec
    from bert_core.training.finetune import classify_text
    from tests.page_races import build_comparison

    monkeypatch.setenv(jobs.PROCESS_ENV, "1")
    gpu = server_gpus.server_gpus()[0]

    def factory(run):
        if isinstance(run.spec, FinetuneSpec):
            return job_factory.finetune_job(run.run_id, builder_of(run.spec), device=run.device)
        return job_factory.pretraining_job(run.run_id, run.spec, device=run.device)

    store = runs.RunStore(factory, slots=lambda: 3, gpus=lambda: [ServerGpu(gpu.device, gpu.name, 0, 2)],
                          poll_s=0.05, turn_s=1000)
    try:
        spec = jobs.TrainSpec(vocab_size=300, train=dict(max_steps=40, batch_size=8, max_seq_length=32,
                                                         eval_every=20, eval_batches=2, probe_every=0, device="cpu"),
                              probes=False)
        started = [store.submit(spec, f"s{i}") for i in range(3)]
        assert [r.device for r in started] == ["cuda", "cuda", "cpu"]
        _until(lambda: all(r.phase == "finished" for r in started), "the three runs finish")
        for r in started:
            assert r.job.trainer.step == 40 and r.job.trainer.evals, r.job.error
            model = r.job.model_snapshot()
            assert next(model.parameters()).device.type == "cpu"   # what the pages inspect is on the CPU
        assert "the GPU (" in store.device_of(started[0]) and store.device_of(started[2]) == "the CPU"
        model, tok, _ = model_sources.load_folder(app_fixtures.train_nano_checkpoint(tmp_path / "nano"))
        settings = dict(train=120, val=40, seed=0, budget=2, lr=1e-3, batch=16, maxlen=32)
        race = store.submit(race_spec(partial(build_comparison, toy_topic_task(0, 200), model, tok, settings),
                                         kind="labels", data_label="toy", model_label="nano", models=2,
                                         budget_s=2.0), "s-race")
        assert race.device == "cuda"
        _until(lambda: race.phase == "finished", "the race finishes")
        for result in race.job.trainer.results.values():
            assert result.steps > 0 and next(result.model.parameters()).device.type == "cpu"
            assert abs(sum(classify_text(result.model, result.tokenizer, "the farmer feeds the cows",
                                         max_length=32)) - 1) < 1e-5
    finally:
        store.close()


def test_a_run_out_of_gpu_memory_says_what_to_do_in_one_line():
    from bert_core.training.run_loop import failure_message

    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
                                 "14.57 GiB of which 1.56 MiB is free.\nIf reserved but unallocated memory is large...")
    said = failure_message(oom)
    assert said.startswith("the GPU ran out of memory (other runs or programs may share it): use a smaller size")
    assert "Tried to allocate 20.00 MiB" in said and "\n" not in said
    assert failure_message(BertCoreError("a reason")) == "a reason"
    assert failure_message(ValueError("bad")) == "ValueError: bad"
