"""A server killed outright (SIGKILL: nothing runs in it to clean up) leaves no process behind (issue #70): its
launcher exits at once, even while a process the server forked still holds the server's end of its socket; a training
process that was still building its trainer exits at once (it has trained nothing); one that was training stops at
the end of its step, keeps its checkpoint as a stopped run does, and exits. The servers here are real processes,
killed by the test with `kill -9`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bert_core.serve import launcher as launcher_module
from bert_core.serve.training_child import ORPHAN_GRACE_S

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not launcher_module.fork_available(), reason="the launcher forks: Linux only")]

ROOT = Path(__file__).resolve().parent.parent
START_S = 240        # a server-like process importing torch and building a run, on a loaded 2-core machine
# Generous for an exit that needs no step to end, yet short of the grace after which an orphan used to end itself.
GONE_S = ORPHAN_GRACE_S / 2


def blocking_builder(marker: str):
    """A trainer builder that never returns (a corpus still downloading, say): the process is still building."""
    Path(marker).write_text(str(os.getpid()))
    time.sleep(3600)


def _server(tmp_path: Path, body: str) -> tuple[subprocess.Popen, dict]:
    """A server-like process running `body` after the common imports; it prints one JSON line of pids, then waits."""
    script = textwrap.dedent("""
        import json, os, sys, time
        sys.path.insert(0, {root!r})
        from functools import partial
        from bert_core.serve import jobs
        from bert_core.serve.job_factory import pretraining_job
        from bert_core.serve.launcher import launcher
        from bert_core.serve.training_process import ProcessTrainingJob
        from tests.test_server_death import blocking_builder
    """).format(root=str(ROOT)) + textwrap.dedent(body) + "\ntime.sleep(3600)\n"
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    line = _read_line(server)
    return server, json.loads(line)


def _read_line(server: subprocess.Popen) -> str:
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(server.stdout, selectors.EVENT_READ)
        if not sel.select(START_S):
            server.kill()
            pytest.fail("the server-like process never said its pids")
    line = server.stdout.readline()
    if not line:
        pytest.fail(f"the server-like process ended ({server.wait()}) before saying its pids")
    return line


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _kill_and_wait(server: subprocess.Popen, pids: dict[str, int], within: float) -> dict[str, int]:
    """`kill -9` the server, then wait up to `within` s for `pids` to end; returns those still alive."""
    server.send_signal(signal.SIGKILL)
    server.wait(30)
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {name: pid for name, pid in pids.items() if _alive(pid)}


def _end(pids) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_killed_servers_process_still_building_its_trainer_ends_and_so_does_its_launcher(tmp_path):
    """Before: the building process lived on until ORPHAN_GRACE_S (60 s) after it saw the server go, or until its
    build ended; the launcher until its interpreter had torn torch down (1 to 9 s here)."""
    marker = tmp_path / "building"
    server, pids = _server(tmp_path, f"""
        job = ProcessTrainingJob("orphan", partial(blocking_builder, {str(marker)!r}))
        job.start()
        while not os.path.exists({str(marker)!r}):
            time.sleep(0.05)
        print(json.dumps({{"launcher": launcher()._proc.pid, "child": job.process.pid}}), flush=True)
    """)
    try:
        left = _kill_and_wait(server, pids, GONE_S)
        assert not left, f"alive {GONE_S:.0f} s after their server was killed: {left}"
    finally:
        _end(pids.values())


def test_a_killed_servers_training_run_stops_at_a_step_keeps_its_checkpoint_and_ends(tmp_path):
    """A run that was training stops as a stopped run does: its checkpoint is written at the step it stopped at."""
    checkpoint = tmp_path / "checkpoint"
    server, pids = _server(tmp_path, f"""
        spec = jobs.TrainSpec(corpus="toy", vocab_size=300, preset="nano",
                              train=dict(max_steps=10**6, batch_size=4, max_seq_length=32, eval_every=0,
                                         probe_every=0, device="cpu"))
        job = pretraining_job("orphan", spec, checkpoint_dir={str(checkpoint)!r}, kind="process")
        job.start()
        while job.trainer is None or job.trainer.step < 3:
            time.sleep(0.05)
        print(json.dumps({{"launcher": launcher()._proc.pid, "child": job.process.pid,
                          "step": job.trainer.step}}), flush=True)
    """)
    try:
        step = pids.pop("step")
        left = _kill_and_wait(server, pids, GONE_S)
        assert not left, f"alive {GONE_S:.0f} s after their server was killed: {left}"
        state = json.loads((checkpoint / "trainer_state.json").read_text())
        assert state["step"] >= step, (state["step"], step)
    finally:
        _end(pids.values())


def test_the_launcher_ends_with_its_server_though_a_fork_of_the_server_holds_its_socket(tmp_path):
    """A process the server forked (a library's worker) holds the server's end of the launcher's socket, so the
    launcher never reads its end: it watches the server's pid too. Before: it lived as long as that fork."""
    server, pids = _server(tmp_path, """
        from bert_core.serve.launcher import Launcher
        made = Launcher(preload=())
        made.warm()
        holder = os.fork()
        if holder == 0:
            time.sleep(3600)
            os._exit(0)
        print(json.dumps({"launcher": made._proc.pid, "holder": holder}), flush=True)
    """)
    holder = pids.pop("holder")
    try:
        left = _kill_and_wait(server, pids, GONE_S)
        assert not left, f"the launcher was alive {GONE_S:.0f} s after its server was killed"
    finally:
        _end([holder, *pids.values()])


def test_an_orphan_whose_run_never_stops_logs_where_its_threads_are_and_ends(tmp_path):
    """The last resort: a run that does not stop within ORPHAN_GRACE_S of its server's end (a step or a write that
    never returns) ends its process, and the log says where each thread was, for whoever reads it."""
    script = textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        from bert_core.serve import training_child

        class NeverStops:
            def stop(self):
                pass

        def stuck_in_a_step():
            threading.Event().wait()

        training_child.ORPHAN_GRACE_S = 0.5
        threading.Thread(target=stuck_in_a_step, daemon=True).start()
        child = training_child.TrainingChild(commands=None, events=None)
        child.trainer = NeverStops()
        child.orphaned()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=START_S)
    assert out.returncode == 1, out.stderr
    assert "the run did not stop within 0.5 s of the server's end" in out.stderr
    assert "in stuck_in_a_step" in out.stderr and "in orphaned" in out.stderr


def test_a_server_gone_between_a_steps_event_and_its_commands_stops_the_run_once():
    """The server dies after the child sent a step's event (the send succeeds) and before it reads its commands: the
    command pipe's end reads as "quit" once, and the run is told to stop at its step. Before, the child's drain read
    "quit" again forever inside the step's callback, so the run never reached its stop's checkpoint and the orphan
    was ended by the grace without it (test_faults' restart test, failing about once in a hundred under load)."""
    from bert_core.serve.training_child import TrainingChild

    class ServerGone:
        reads = 0

        def poll(self, timeout: float = 0.0) -> bool:
            return True   # a pipe whose writer has closed is always readable

        def recv(self):
            ServerGone.reads += 1
            if ServerGone.reads > 10:
                raise AssertionError("the child went on reading its commands after the server's end")
            raise EOFError

    class Training:
        state, stops = "running", 0

        def stop(self):
            Training.stops += 1

    child = TrainingChild(commands=ServerGone(), events=None)
    child.trainer = Training()
    child.drain()
    assert child.quit and Training.stops == 1 and ServerGone.reads == 1
