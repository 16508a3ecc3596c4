"""The launcher that forks training processes from a warm interpreter (bert_core.serve.launcher): a forked process
runs its entry with its own pipes, environment and thread count, is steered like a `subprocess.Popen` (poll, wait
with a timeout, kill and its exit code), holds no other process's pipe ends, and the launcher ends with its server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bert_core.serve import launcher as launcher_module
from bert_core.serve.launcher import Launcher, LaunchedProcess

pytestmark = pytest.mark.skipif(not launcher_module.fork_available(), reason="the launcher forks: Linux only")

ROOT = Path(__file__).resolve().parent.parent
ENTRY = "tests.test_launcher:"


# ------------------------------------------------------------- entries the forked processes run (by module:name)


def report(commands_fd: int, events_fd: int) -> None:
    """Read an exit code from the command pipe, answer with what this process sees, exit with that code."""
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    with os.fdopen(commands_fd, "rb") as commands:
        code = int(commands.readline())
    answer = {"pid": os.getpid(), "ppid": os.getppid(), "threads": torch.get_num_threads(),
              "marker": os.environ.get("LAUNCHER_TEST_MARKER"), "server": os.environ.get("BERT_SERVER_PID"),
              "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
              "torch_preloaded": "torch._dynamo" in sys.modules}
    with os.fdopen(events_fd, "wb") as events:
        events.write(json.dumps(answer).encode() + b"\n")
    raise SystemExit(code)


def wait_for_eof(commands_fd: int, events_fd: int) -> None:
    """Block until the command pipe closes."""
    with os.fdopen(commands_fd, "rb") as commands:
        commands.read()
    os.close(events_fd)


def watch_the_server(commands_fd: int, events_fd: int) -> None:
    """Keep the pipes open and exit once the server has gone, seen as a training process sees it."""
    from bert_core.serve.training_child import _server_watch

    gone = _server_watch()
    deadline = time.monotonic() + 60
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.1)
    raise SystemExit(0 if gone() else 1)


# ----------------------------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def launcher():
    made = Launcher()   # one for the file: its imports take seconds
    yield made
    made.close()


def _launch(launcher: Launcher, entry: str, threads: int = 1, marker: str = "") -> tuple[LaunchedProcess, int, int]:
    """A forked process and the server's ends of its pipes (commands to write, events to read)."""
    cmd_read, cmd_write = os.pipe()
    evt_read, evt_write = os.pipe()
    try:
        process = launcher.launch(ENTRY + entry, (cmd_read, evt_write),
                                  {"OMP_NUM_THREADS": str(threads), "LAUNCHER_TEST_MARKER": marker})
    finally:
        os.close(cmd_read)
        os.close(evt_write)
    return process, cmd_write, evt_read


def test_a_forked_process_runs_its_entry_with_its_environment_and_threads_and_returns_its_exit_code(launcher):
    process, cmd, evt = _launch(launcher, "report", threads=2, marker="first")
    assert process.poll() is None
    os.write(cmd, b"3\n")
    os.close(cmd)
    with os.fdopen(evt, "rb") as events:
        seen = json.loads(events.readline())
    assert process.wait(60) == 3 and process.returncode == 3 and process.poll() == 3
    assert seen["pid"] == process.pid and seen["marker"] == "first" and seen["threads"] == 2
    assert seen["server"] == str(os.getpid())           # whose end means the server has gone
    assert seen["torch_preloaded"]                      # imported once, in the launcher
    assert seen["ppid"] != os.getpid()                  # the launcher's child, not the server's


def test_wait_times_out_like_popen_and_a_kill_is_minus_nine(launcher):
    process, cmd, evt = _launch(launcher, "wait_for_eof")
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(0.3)
    # Named for `ps`, and found among this server's training processes (its command line is the launcher's).
    assert Path(f"/proc/{process.pid}/comm").read_text().strip() == launcher_module.PROCESS_NAME
    assert process.pid in launcher_module.training_processes(os.getpid())
    process.kill()
    assert process.wait(30) == -9
    process.kill()   # an ended process: nothing to do, no error
    os.close(cmd)
    os.close(evt)


def test_a_process_holds_no_other_process_pipe_ends(launcher):
    """Each fork closes the launcher's copies of earlier processes' pipes: a later process that kept one open would
    hide the end of an earlier one from the server (its events pipe would never reach end-of-file)."""
    first, first_cmd, first_evt = _launch(launcher, "wait_for_eof")
    second, second_cmd, second_evt = _launch(launcher, "report")
    os.close(first_cmd)                                 # the first process ends
    assert first.wait(30) == 0
    with os.fdopen(first_evt, "rb") as events:
        assert events.read() == b""                     # end-of-file: nobody else holds its write end
    os.write(second_cmd, b"0\n")
    os.close(second_cmd)
    with os.fdopen(second_evt, "rb") as events:
        seen = json.loads(events.readline())
    assert second.wait(30) == 0
    assert seen["fds"] == sorted(seen["fds"]) and len(seen["fds"]) <= 6, seen["fds"]   # stdio, its two pipes


def test_the_launcher_and_its_processes_end_with_the_server(tmp_path):
    """A server that dies without cleanup: its launcher sees its socket close and exits, and the process it forked
    sees the server's pid end (BERT_SERVER_PID), as a training process does (training_child._server_watch)."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from bert_core.serve.launcher import Launcher
        launcher = Launcher(preload=())   # nothing to import: the test is about ends, not speed
        cmd_read, cmd_write = os.pipe()
        evt_read, evt_write = os.pipe()
        process = launcher.launch("tests.test_launcher:watch_the_server", (cmd_read, evt_write), {{}})
        print(launcher._proc.pid, process.pid, flush=True)
        os._exit(0)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    launcher_pid, child_pid = (int(p) for p in out.stdout.split()[-2:])
    deadline = time.time() + 30
    while time.time() < deadline and (_alive(launcher_pid) or _alive(child_pid)):
        time.sleep(0.1)
    assert not _alive(launcher_pid), "the launcher outlived its server"
    assert not _alive(child_pid), "the forked process outlived its server"


def test_a_second_launch_is_quick_once_the_launcher_is_warm(launcher):
    first, cmd, evt = _launch(launcher, "wait_for_eof")   # waits for the launcher's imports, if still going
    started = time.monotonic()
    second, cmd2, evt2 = _launch(launcher, "wait_for_eof")
    assert time.monotonic() - started < 5.0             # a fork, not an interpreter importing torch
    for process, c, e in ((first, cmd, evt), (second, cmd2, evt2)):
        os.close(c)
        assert process.wait(30) == 0
        os.close(e)


def test_a_launcher_that_was_killed_is_started_again_at_the_next_launch():
    made = Launcher(preload=())
    try:
        made.warm()
        orphan, orphan_cmd, orphan_evt = _launch(made, "wait_for_eof")
        made._proc.kill()
        made._proc.wait(10)
        time.sleep(0.2)
        process, cmd, evt = _launch(made, "report")
        os.write(cmd, b"0\n")
        os.close(cmd)
        with os.fdopen(evt, "rb") as events:
            assert json.loads(events.readline())["pid"] == process.pid
        assert process.wait(30) == 0 and made.running()
        # A process of the killed launcher still ends for the server, though the new launcher never forked it.
        assert orphan.poll() is None
        os.close(orphan_cmd)
        assert orphan.wait(30) == -1
        os.close(orphan_evt)
    finally:
        made.close()


def test_spawn_is_the_fallback_when_the_launcher_is_switched_off(monkeypatch):
    monkeypatch.setenv(launcher_module.LAUNCHER_ENV, "spawn")
    assert not launcher_module.fork_available()
    monkeypatch.setenv(launcher_module.LAUNCHER_ENV, "fork")
    assert launcher_module.fork_available()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
