"""A GPU class server that frees its memory (issue 62): a stopped run on a GPU writes its checkpoint and ends its
process, Resume starts it again from there exactly, and a GPU that fails a run with a CUDA fault other than running out
of memory is taken out of use, its runs going to the CPU.

This machine has no GPU: the queue is given a stand-in one (server_gpus.ServerGpu) while the runs' trainers build on
the CPU, so every decision that depends on "this run is on a GPU" is the server's own, taken as on a real card. A
"held CUDA context" is a live training process of a run the queue put on the GPU: each holds one (0.8-1.1 GB) for as
long as it lives. The exactness tests train real nano runs in real processes; the twenty-run test uses the cheapest
stand-in of a process job (tests.stand_ins.Counter on a thread, its "process" an object that holds a context)."""

import threading
import time
from pathlib import Path

import pytest
import torch

from bert_core.serve import job_factory, jobs, runs, server_gpus, thread_job
from bert_core.serve.training_process import ProcessModel
from bert_core.serve.run_registry import Run
from bert_core.serve.server_gpus import ServerGpu
from tests.stand_ins import Counter, Steps

GPU = ServerGpu("cuda", "stand-in GPU", 16_000, 8)
SPEC = jobs.TrainSpec(vocab_size=300, train=dict(max_steps=120, batch_size=4, max_seq_length=32, eval_every=0,
                                                 probe_every=0, device="cpu", seed=3), probes=False)


@pytest.fixture(autouse=True)
def _no_failed_gpus(monkeypatch):
    # A server forgets a failed GPU only when it restarts: each test gets a server's fresh record.
    monkeypatch.setattr(server_gpus, "_FAILED", {})


def _until(condition, what: str, wait_s: float = 120):
    deadline = time.monotonic() + wait_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _held_contexts(store) -> int:
    """Live training processes of runs the queue put on a GPU: each would hold a CUDA context on a real card."""
    held = 0
    for run in store.runs():
        process = getattr(run.job, "process", None)
        held += run.device not in (None, "cpu") and process is not None and process.poll() is None
    return held


# ------------------------------------------------------------------ real nano runs in real processes


def _process_store(tmp_path: Path, gpus, slots: int = 2) -> runs.RunStore:
    """A store whose runs train in processes on this CPU whatever slot the queue gave them, with their checkpoint
    folders where the app keeps them (one folder a run: safety-net checkpoints, the release's, the park's)."""
    def factory(run):
        return job_factory.pretraining_job(run.run_id, run.spec, checkpoint_dir=tmp_path / run.run_id)

    return runs.RunStore(factory, slots=lambda: slots, gpus=lambda: gpus,
                         release_folder=lambda run: tmp_path / run.run_id, poll_s=0.05, turn_s=1000)


def _weights(job) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in job.model_snapshot().state_dict().items()}


def _uninterrupted(tmp_path: Path) -> dict[str, torch.Tensor]:
    job = job_factory.pretraining_job("whole", SPEC, checkpoint_dir=tmp_path / "whole")
    try:
        job.start()
        _until(lambda: job.phase == "finished", f"the uninterrupted run finishes ({job.error})")
        return _weights(job)
    finally:
        job.close()


def test_stopped_gpu_runs_end_their_processes_and_resume_exactly(tmp_path, monkeypatch):
    monkeypatch.setenv(jobs.PROCESS_ENV, "1")
    whole = _uninterrupted(tmp_path)
    store = _process_store(tmp_path, [GPU])
    try:
        started = [store.submit(SPEC, f"s{i}") for i in range(2)]
        assert [r.device for r in started] == ["cuda", "cuda"]
        _until(lambda: all(r.job is not None and r.job.trainer is not None and r.job.trainer.step >= 2
                           for r in started), "both runs train")
        for run in started:
            store.stop(run.run_id, wait=30)
        # Stopped on the GPU: each run's checkpoint is written and its process ends; nothing holds the GPU.
        _until(lambda: all(r.job.parked is not None for r in started) and _held_contexts(store) == 0,
               "the stopped runs' processes end")
        for run in started:
            # Its model is read from the checkpoint meanwhile: the stopped run still shows, saves and downloads it.
            assert run.job.phase == "stopped" and 0 < run.job.trainer.step < SPEC.train["max_steps"]
            assert not run.released and run.job.model_available and run.job.kept_step == run.job.trainer.step
            store.resume(run.run_id)
            assert run.device == "cuda"
        _until(lambda: all(r.job.phase == "finished" for r in started),
               f"the resumed runs finish ({[r.job.error for r in started]})")
        for run in started:
            assert run.job.parked is None and run.job.trainer.step == SPEC.train["max_steps"]
            # It went on from its checkpoint, not from the start: its curve's steps never go back.
            steps = [event.step for event in run.job.trainer.history]
            assert steps == sorted(set(steps)) and steps[-1] == SPEC.train["max_steps"]
            resumed = _weights(run.job)
            assert resumed.keys() == whole.keys()
            assert all(torch.equal(resumed[k], whole[k]) for k in whole), "a resumed run left the uninterrupted path"
    finally:
        store.close()


def test_a_stopped_cpu_run_keeps_its_process_as_before(tmp_path, monkeypatch):
    monkeypatch.setenv(jobs.PROCESS_ENV, "1")
    store = _process_store(tmp_path, [], slots=1)
    try:
        run = store.submit(SPEC, "cpu")
        assert run.device == "cpu"
        _until(lambda: run.job is not None and run.job.trainer is not None and run.job.trainer.step >= 2, "it trains")
        store.stop(run.run_id, wait=30)
        _until(lambda: run.job.phase == "stopped", "it stops")
        for _ in range(5):
            store.tick()
        assert run.job.parked is None and run.job.process.poll() is None   # its process is kept for Resume
    finally:
        store.close()


# ------------------------------------------------------------------ the cheapest stand-in: twenty runs


class _Process:
    """A stand-in training process: it holds one CUDA context for as long as it lives."""

    def __init__(self):
        self.returncode = None

    def poll(self):
        return self.returncode


class StandInGpuJob(ProcessModel):
    """A stand-in ProcessTrainingJob: a Counter on a thread, its `process` a _Process. park() keeps the Counter's
    step as "its checkpoint" and ends the process; start() after it starts a new process whose Counter goes on from
    that step, on the device the queue gave it (`resumed_on`)."""

    rebuilds = False   # RunJob's: it starts again itself

    def __init__(self, run_id: str):
        self.session_id, self.spec, self.trainer = run_id, Steps(), None
        self.phase, self.error, self.ended_note, self.released, self.process = "new", None, None, None, None
        self.parked, self._parked_on, self._resume_device, self.resumed_on = None, None, None, []
        self._release_lock, self._snapshot, self._kept, self._thread, self._checkpoint = threading.Lock(), None, None, None, None

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self):
        if self.process is None or self.process.poll() is not None:
            self.process = _Process()
            if self.parked is not None:
                self.trainer = Counter()
                self.trainer.step, self.parked, self.released = self._checkpoint, None, None
                self.resumed_on.append(self._resume_device)
            else:
                self.trainer = Counter()
        self.phase = "running"
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        self.trainer.run()
        self.phase = self.trainer.state

    def stop(self, wait=None):
        if self.trainer is not None:
            self.trainer.stop()
        if wait and self._thread is not None:
            self._thread.join(wait)

    def pause(self):
        self.stop()

    def wait(self, timeout):
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.busy

    def close(self, wait=10.0):
        self.stop(wait)
        if self.process is not None:
            self.process.returncode = 0

    def kill(self, why, phase="failed"):
        self.close()
        self.phase, self.ended_note = phase, why

    def silent_s(self):
        return 0.0

    def release(self, folder):
        self.released = Path(folder)
        self.close()

    def park(self, folder, device):
        with self._release_lock:
            if self.phase != "stopped" or self.busy or self.process.poll() is not None:
                return False
            self._checkpoint = self.trainer.step
            self.parked = self.released = Path(folder)
            self._parked_on, self._resume_device = device, None
            self.process.returncode = 0
        return True


def _stand_in_store(tmp_path: Path, gpus, slots: int) -> runs.RunStore:
    return runs.RunStore(lambda run: StandInGpuJob(run.run_id), slots=lambda: slots, gpus=lambda: gpus,
                         release_folder=lambda run: tmp_path / run.run_id, poll_s=0.02, turn_s=1000, keep=100)


def test_twenty_runs_stopped_and_left_on_the_gpu_leave_it_as_an_idle_server_holds_it(tmp_path):
    store = _stand_in_store(tmp_path, [ServerGpu("cuda", "stand-in GPU", 16_000, 20)], slots=20)
    idle = _held_contexts(store)
    try:
        started = [store.submit(Steps(), f"s{i}") for i in range(20)]
        assert {r.device for r in started} == {"cuda"} and _held_contexts(store) == 20
        _until(lambda: all(r.job.trainer.step >= 1 for r in started), "the runs count")
        for run in started:
            store.stop(run.run_id, wait=5)
        # Left: nobody presses anything, the scheduler's passes end their processes.
        _until(lambda: all(r.job.parked is not None for r in started), "the stopped runs are parked")
        assert _held_contexts(store) == idle == 0
        kept = {r.run_id: r.job.trainer.step for r in started}
        assert all(r.job.phase == "stopped" and not r.released for r in started)
        for run in started:
            store.resume(run.run_id)
        assert _held_contexts(store) == 20 and {r.device for r in started} == {"cuda"}
        assert all(r.job.resumed_on == [None] for r in started)   # on its own device: the checkpoint's
        _until(lambda: all(r.job.trainer.step > kept[r.run_id] for r in started), "each goes on from its step")
        for run in started:
            store.stop(run.run_id, wait=5)
        _until(lambda: all(r.job.parked is not None for r in started) and _held_contexts(store) == 0,
               "stopped again, they are parked again")
    finally:
        store.close()


# ------------------------------------------------------------------ a GPU that fails


class Faulty(Counter):
    """A stand-in trainer whose first step fails with `error` (a CUDA fault, or running out of memory)."""

    def __init__(self, error: str):
        super().__init__()
        self.fault = error

    def run(self):
        self.state, self.error = "failed", self.fault


def _thread_store(errors: dict[str, str], gpus, slots: int) -> runs.RunStore:
    def factory(run):
        error = errors.get(run.run_id)
        return thread_job.TrainingJob(run.run_id, builder=lambda: Faulty(error) if error else Counter(run.spec.steps))

    return runs.RunStore(factory, slots=lambda: slots, gpus=lambda: gpus, poll_s=0.02, turn_s=1000)


CUDA_FAULT = "RuntimeError: CUDA error: an illegal memory access was encountered"
OUT_OF_MEMORY = ("the GPU ran out of memory (other runs or programs may share it): use a smaller size. CUDA out of "
                 "memory. Tried to allocate 20.00 MiB.")


def test_a_cuda_fault_takes_the_gpu_out_of_use_and_the_next_run_trains_on_the_cpu(caplog):
    store = _thread_store({"bad": CUDA_FAULT}, [ServerGpu("cuda", "stand-in GPU", 16_000, 2)], slots=3)
    try:
        assert store._queue.capacities() == {"cuda": 2, "cpu": 1}
        with caplog.at_level("ERROR", logger="bert_core.app"):
            bad = store.submit(Steps(), "s0", run_id="bad")
            assert bad.device == "cuda"
            _until(lambda: bad.phase == "failed", "the run fails")
            store.tick()
        assert server_gpus.failed_gpus() == {"cuda": CUDA_FAULT}
        assert "GPU cuda failed a run" in caplog.text and "illegal memory access" in caplog.text
        # Its slots are gone; the server's others stay the CPU's.
        assert store._queue.capacities() == {"cpu": 3}
        after = store.submit(Steps(3), "s1")
        assert after.device == "cpu"
        _until(lambda: after.phase == "finished", "the next run trains on the CPU")
    finally:
        store.close()


def test_running_out_of_gpu_memory_fails_the_run_only():
    store = _thread_store({"big": OUT_OF_MEMORY}, [ServerGpu("cuda", "stand-in GPU", 16_000, 2)], slots=3)
    try:
        big = store.submit(Steps(), "s0", run_id="big")
        _until(lambda: big.phase == "failed", "the run fails")
        store.tick()
        assert server_gpus.failed_gpus() == {} and store._queue.capacities() == {"cuda": 2, "cpu": 1}
        assert store.submit(Steps(3), "s1").device == "cuda"
    finally:
        store.close()


def test_a_parked_run_waiting_for_a_failed_gpu_resumes_on_the_cpu(tmp_path):
    store = _stand_in_store(tmp_path, [ServerGpu("cuda", "stand-in GPU", 16_000, 1)], slots=2)
    try:
        parked = store.submit(Steps(), "s0")
        assert parked.device == "cuda"
        store.stop(parked.run_id, wait=5)
        _until(lambda: parked.job.parked is not None, "it is parked")
        server_gpus.mark_failed("cuda", CUDA_FAULT)   # another run on it faulted
        store.resume(parked.run_id)
        # The scheduler's next pass sends it to the CPU, where its checkpoint resumes.
        _until(lambda: parked.job.resumed_on == ["cpu"] and parked.job.busy, "it resumes on the CPU")
        assert parked.device == "cpu"
    finally:
        store.close()


def test_which_failures_are_gpu_faults():
    assert server_gpus.is_gpu_fault(CUDA_FAULT)
    assert server_gpus.is_gpu_fault("AcceleratorError: CUDA error: unspecified launch failure")
    assert server_gpus.is_gpu_fault("RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm`")
    assert not server_gpus.is_gpu_fault(OUT_OF_MEMORY)
    assert not server_gpus.is_gpu_fault("RuntimeError: CUDA error: out of memory")
    assert not server_gpus.is_gpu_fault("ValueError: bad") and not server_gpus.is_gpu_fault(None)
