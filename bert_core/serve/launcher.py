"""Training processes forked from a warm interpreter, instead of a fresh `python` that imports torch each time.

A fresh interpreter spends about 3 CPU-seconds importing torch and the trainer before its first step (docs/benchmarks.md,
"Starting a run"): thirty Starts in a minute on a class server would spend a minute and a half of both cores on imports.
So on Linux the server keeps Python's forkserver (`multiprocessing.forkserver`), preloaded with PRELOAD, and each
training process is a fork of it. Not through `multiprocessing.Process`: its children re-run the server's `__main__`
(Streamlit's console script, an import of Streamlit a start) before their target, so the forkserver is handed a
payload of ours (`_Entry`), and the server steers the fork like a spawned process's `subprocess.Popen`.

The forkserver never runs a torch operation, so no OpenMP or BLAS pool holds a lock when it forks, and CUDA is first
touched in the child. It exits at once when the server has gone (a thread of its own watches the server's pid); a
training process sees that itself (BERT_SERVER_PID). Elsewhere, or with `BERT_EXPLORER_LAUNCHER=spawn`, each training
process is a fresh interpreter (`training_link`).
"""

from __future__ import annotations

import functools
import importlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from multiprocessing import forkserver, reduction
from multiprocessing.connection import wait as ready   # poll(2): a busy server's fds may pass select's 1024
from pathlib import Path

from bert_core.paths import REPO_ROOT

LAUNCHER_ENV = "BERT_EXPLORER_LAUNCHER"   # "spawn": a fresh interpreter per training process (the fallback)
SERVER_PID_ENV = "BERT_SERVER_PID"        # set in a forked training process: whose end means the server has gone
START_TIMEOUT_S = 120.0                   # the forkserver's imports, on a machine under load
# What every training process imports: loaded once in the forkserver, shared by each fork. torch._dynamo is among
# them because torch.optim imports it when the first optimizer is made (torch._compile), 2 to 5 s of CPU.
PRELOAD = ("torch", "torch._dynamo", "bert_core.serve.training_child", "bert_core.serve.jobs",
           "bert_core.training.trainer", "bert_core.training.finetune", "bert_core.training.run_builder")
PROCESS_NAME = "bert-training"            # a forked training process's name (/proc/PID/comm; `ps -o comm`)
SPAWNED_MODULE = b"bert_core.serve.training_process"   # in a spawned training process's command line
_FORKSERVER_OF = "BERT_FORKSERVER_OF"     # set only while the server starts its forkserver: the server's pid


def fork_available() -> bool:
    """Linux (on macOS a fork after importing torch is not safe) with pidfds (how the forkserver and its processes
    watch for an end), not switched off."""
    return sys.platform.startswith("linux") and os.environ.get(LAUNCHER_ENV, "fork") != "spawn" and _pidfds()


@functools.lru_cache(maxsize=1)
def _pidfds() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
        return True
    except OSError:   # a kernel before 5.3 (ENOSYS); Python 3.10+ on Linux has pidfd_open and send_fds
        return False


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class LaunchedProcess:
    """A forked training process steered like a spawned one's `subprocess.Popen`. The forkserver, its parent, writes
    its exit code to `status`; once the forkserver itself is gone, /proc says whether it still runs (-1 once not)."""

    def __init__(self, pid: int, status: int):
        self.pid, self.returncode = pid, None
        self._status, self._unreported = status, False
        self._lock = threading.Lock()   # two readers of `status` would leave one at its end, reading no code
        self._close = functools.partial(os.close, status)

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None and not self._unreported and ready([self._status], 0):
                try:
                    self.returncode = forkserver.read_signed(self._status)
                except (OSError, EOFError):
                    self._unreported = True
            if self.returncode is None and self._unreported and not _running(self.pid):
                self.returncode = -1
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(["bert-training", str(self.pid)], timeout)
            ready([] if self._unreported else [self._status], left)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __del__(self):
        self._close()


class Launcher:
    """The server's end of its forkserver; one per server process (`launcher()`)."""

    def __init__(self):
        self._lock = threading.Lock()   # (re)starting the forkserver, and asking it for a fork

    @property
    def pid(self) -> int | None:
        return forkserver._forkserver._forkserver_pid

    def warm(self) -> None:
        """Start the forkserver now, so the first Start does not wait for its imports. Never blocks a page."""
        if self._lock.acquire(blocking=False):
            try:
                self._ensure_running()
            finally:
                self._lock.release()

    def launch(self, entry: str, fds: tuple[int, int], env: dict[str, str]) -> LaunchedProcess:
        """Fork a process that calls `entry` ("module:function") with the pipe ends `fds`, `env` added to its
        environment. The caller closes its copies of `fds`."""
        with self._lock:
            self._ensure_running()   # (again) with its environment, before connect_to_new_process would without it
            status, data = forkserver.connect_to_new_process(list(fds))
        try:
            with open(data, "wb", closefd=True) as out:
                # What multiprocessing's spawn._main reads: the preparation (no main module to re-run), then the
                # object whose _bootstrap it calls.
                reduction.dump({"sys_path": sys.path, "dir": os.getcwd()}, out)
                reduction.dump(_Entry(entry, {**env, SERVER_PID_ENV: str(os.getpid())}), out)
            if not ready([status], START_TIMEOUT_S):
                raise OSError("the training launcher did not start the process")
            return LaunchedProcess(forkserver.read_signed(status), status)
        except BaseException:
            os.close(status)
            raise

    def _ensure_running(self) -> None:
        """Start (or restart) the forkserver, two variables set for its start alone: PYTHONPATH, so that a server
        started from another folder still preloads bert_core (Python 3.11's forkserver drops the server's sys.path),
        and whose end it watches."""
        forkserver.set_forkserver_preload([__name__])   # which preloads the rest (below)
        env = {_FORKSERVER_OF: str(os.getpid()),
               "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            forkserver.ensure_running()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def training_processes(server_pid: int) -> set[int]:
    """The live training processes of the server `server_pid` from /proc (operators, tests, benchmarks): its spawned
    children, and its forkserver's children (named PROCESS_NAME)."""
    procs: dict[int, tuple[int, str, str, bytes]] = {}   # pid -> (ppid, state, comm, cmdline)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        procs[int(entry.name)] = (int(fields[1]), fields[0], comm, cmdline)
    found = set()
    for pid, (ppid, state, comm, cmdline) in procs.items():
        if state in ("Z", "X"):
            continue
        spawned = ppid == server_pid and SPAWNED_MODULE in cmdline
        forked = comm == PROCESS_NAME and procs.get(ppid, (None,))[0] == server_pid
        if spawned or forked:
            found.add(pid)
    return found


@functools.lru_cache(maxsize=1)
def launcher() -> Launcher:
    return Launcher()


# ------------------------------------------------------------------------------------------ in the forkserver


class _Entry:
    """What a fork runs (spawn._main calls `_bootstrap`): become a training process, `entry` called with the pipe
    ends the forkserver handed over."""

    def __init__(self, entry: str, env: dict[str, str]):
        self.entry, self.env = entry, env

    def _bootstrap(self, parent_sentinel: int) -> int:
        # Not the forkserver's: its liveness pipe (a training process does not keep it alive) and its watch.
        for fd in (parent_sentinel, forkserver._forkserver._forkserver_alive_fd, *_WATCHED):
            os.close(fd)
        try:
            Path("/proc/self/comm").write_text(PROCESS_NAME)   # what `ps` and `top` call it
        except OSError:
            pass
        os.environ.update(self.env)
        module, _, function = self.entry.partition(":")
        try:
            getattr(importlib.import_module(module), function)(*forkserver.get_inherited_fds())
            return 0
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - a fresh interpreter would print it and exit 1 too
            import traceback

            traceback.print_exc()
            return 1
        finally:
            _flush()


_WATCHED: list[int] = []   # the forkserver's pidfd of its server


def _watch(server_pid: int) -> None:
    """The forkserver's thread: exit as soon as the server has gone. Not only at the end of its liveness pipe, which
    a process the server forked (a library's worker) would hold open after the server died; and not through the
    interpreter's shutdown, which tears down torch's modules for 1 to 9 s on a loaded 2-core machine. Not a daemon:
    a shutdown begun at that pipe's end waits for it."""
    try:
        _WATCHED.append(os.pidfd_open(server_pid))
        if os.getppid() == server_pid:   # its parent until it dies: a live server, not a reused pid
            select.select(_WATCHED, [], [])
    except OSError:   # ProcessLookupError: it has gone already
        pass
    _flush()
    os._exit(0)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass


# Imported first as the forkserver preloads (its `-c` script's `main` is forkserver.main), before torch: one thread for
# every pool the imports may create, so none runs when it forks (each training process sets its own count); NVML, not
# the CUDA driver, answers torch.cuda.is_available() (a fork could not use the driver: "Cannot re-initialize CUDA in
# forked subprocess"); each line its forks print comes out at once; it watches the server; and it preloads PRELOAD,
# a module that fails left to the child, which reports its own error (the forkserver's preload would die of it).
if getattr(sys.modules["__main__"], "main", None) is forkserver.main and os.environ.get(_FORKSERVER_OF):
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    for _stream in (sys.stdout, sys.stderr):
        _stream.reconfigure(line_buffering=True)
    threading.Thread(target=_watch, args=(int(os.environ.pop(_FORKSERVER_OF)),), name="bert-launcher-watch").start()
    for _name in PRELOAD:
        try:
            importlib.import_module(_name)
        except Exception as exc:  # noqa: BLE001
            print(f"the training launcher could not preload {_name}: {exc}", file=sys.stderr)
