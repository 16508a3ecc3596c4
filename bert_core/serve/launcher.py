"""Training processes forked from a warm interpreter, instead of a fresh `python` that imports torch each time.

A fresh interpreter spends about 3 CPU-seconds importing torch and the trainer before its first step
(docs/benchmarks.md, "Starting a run"): thirty Starts in a minute on a class server would spend a minute and a half
of both cores on imports. So on Linux the server keeps one launcher that has imported them once and forks each
training process from it.

Why not multiprocessing's forkserver: each of its children re-runs the server's `__main__` (Streamlit's console script,
so an import of Streamlit a start; Python 3.11's `set_forkserver_preload(["__main__"])` never receives the main path),
and it hands back a `Process` where the server steers a `subprocess.Popen`, which `LaunchedProcess` imitates.

The launcher never runs a torch operation, so no OpenMP or BLAS pool holds a lock when it forks, and CUDA is first
touched in the child. It exits as soon as the server has gone (its socket closes, or its pid ends); a training process
sees that itself (BERT_SERVER_PID). Elsewhere, or with `BERT_EXPLORER_LAUNCHER=spawn`, each training process is a
fresh interpreter (`training_child.ChildLink`). Protocol: SOCK_SEQPACKET, one JSON message a packet: {"id", "entry",
"env"} with the child's two pipe ends attached (SCM_RIGHTS); answers {"id", "pid"} or {"id", "error"}, and {"exit":
pid, "code"} when a child ends (negative: the signal, as in `subprocess`).
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bert_core.paths import REPO_ROOT

log = logging.getLogger("bert_core.app")

LAUNCHER_ENV = "BERT_EXPLORER_LAUNCHER"   # "spawn": a fresh interpreter per training process (the fallback)
SERVER_PID_ENV = "BERT_SERVER_PID"        # set in a forked training process: whose end means the server has gone
LAUNCHER_MODULE = "bert_core.serve.launcher"
START_TIMEOUT_S = 120.0                   # the launcher's imports, on a machine under load
# What every training process imports: loaded once in the launcher, shared by each fork. torch._dynamo is among
# them because torch.optim imports it when the first optimizer is made (torch._compile), 2 to 5 s of CPU.
PRELOAD = ("torch", "torch._dynamo", "bert_core.serve.training_child", "bert_core.serve.jobs",
           "bert_core.training.trainer", "bert_core.training.finetune", "bert_core.training.run_builder")
_PACKET = 65536
PROCESS_NAME = "bert-training"            # a forked training process's name (/proc/PID/comm; `ps -o comm`)
SPAWNED_MODULE = b"bert_core.serve.training_process"   # in a spawned training process's command line


def fork_available() -> bool:
    """Linux (on macOS a fork after importing torch is not safe) with pidfds (how the launcher and its processes
    watch for an end), not switched off."""
    return sys.platform.startswith("linux") and os.environ.get(LAUNCHER_ENV, "fork") != "spawn" and _pidfds()


@functools.lru_cache(maxsize=1)
def _pidfds() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
        return True
    except OSError:   # a kernel before 5.3 (ENOSYS); Python 3.10+ on Linux has pidfd_open and send_fds
        return False


def repo_pythonpath(env=os.environ) -> str:
    """`env`'s PYTHONPATH with the repository first: a process started from anywhere imports this bert_core."""
    return os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)


class LaunchedProcess:
    """A forked training process steered like a spawned one's `subprocess.Popen`. Its exit code comes from the
    launcher, its parent; if the launcher itself is gone, from /proc."""

    def __init__(self, pid: int, launcher: "Launcher", parent: subprocess.Popen):
        self.pid = pid
        self.returncode: int | None = None
        self._launcher = launcher
        self._parent = parent   # the launcher process that forked it (a restarted launcher does not report it)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._launcher.exit_code(self.pid, self._parent)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired([LAUNCHER_MODULE, str(self.pid)], timeout)
            self._launcher.wait_for_exit(0.25 if left is None else min(left, 0.25))
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Launcher:
    """The server's end of the launcher, started on first use (or `warm()`); one per server process (`launcher()`)."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD):
        self._preload = preload
        self._lock = threading.Lock()         # one request at a time, and (re)starting
        self._changed = threading.Condition()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._replies: dict[int, dict] = {}
        self._exits: dict[int, int] = {}
        self._ids = 0

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def warm(self) -> None:
        """Start the launcher now, so the first Start does not wait for its imports. Never blocks a page."""
        if self.running() or not self._lock.acquire(blocking=False):
            return
        try:
            self._ensure_started()
        finally:
            self._lock.release()

    def launch(self, entry: str, fds: tuple[int, int], env: dict[str, str]) -> LaunchedProcess:
        """Fork a process that calls `entry` ("module:function") with the pipe ends `fds`, `env` added to its
        environment. The caller closes its copies of `fds`."""
        with self._lock:
            self._ensure_started()
            self._ids += 1
            rid = self._ids
            message = json.dumps({"id": rid, "entry": entry, "env": env}).encode()
            try:
                socket.send_fds(self._sock, [message], list(fds))
            except OSError:
                # It ended since it was last asked (killed, out of memory): the pipe ends never reached it, so a new
                # launcher can take them.
                if self._proc is not None:
                    self._proc.wait(10)
                self._ensure_started()
                socket.send_fds(self._sock, [message], list(fds))
            deadline = time.monotonic() + START_TIMEOUT_S
            with self._changed:
                while rid not in self._replies:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self.running():
                        raise OSError("the training launcher did not start the process")
                    self._changed.wait(min(left, 0.5))
                reply = self._replies.pop(rid)
            parent = self._proc
        if "error" in reply:
            raise OSError(f"the training launcher could not start the process: {reply['error']}")
        return LaunchedProcess(int(reply["pid"]), self, parent)

    def exit_code(self, pid: int, parent: subprocess.Popen) -> int | None:
        with self._changed:
            if pid in self._exits:
                return self._exits[pid]
        if parent.poll() is None:
            return None   # its launcher runs, and reports the end when it comes
        # The launcher has gone, so nobody reports this child: /proc says whether it still runs.
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return -1
        return -1 if state in ("Z", "X") else None

    def wait_for_exit(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)

    def close(self) -> None:
        """End the launcher (its training processes go on until they see the server go)."""
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)   # wakes the reader thread; the launcher reads the end
                except OSError:
                    pass
                self._sock.close()
                self._sock = None
            if self._proc is not None:
                try:
                    self._proc.wait(10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(5)

    def _ensure_started(self) -> None:
        if self.running():
            return
        if self._sock is not None:
            self._sock.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        # One thread for every pool the imports may create, so none runs when the launcher forks; each training
        # process then sets its own count (torch.set_num_threads, training_child.receive_setup).
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        # Should anything ask torch.cuda.is_available() before a fork, ask NVML rather than the CUDA driver: a driver
        # initialised in the launcher cannot be used by its forks ("Cannot re-initialize CUDA in forked subprocess").
        env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        env["PYTHONPATH"] = repo_pythonpath(env)
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", LAUNCHER_MODULE, str(theirs.fileno()),
                                           str(os.getpid()), ",".join(self._preload)],
                                          pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._sock = ours
        threading.Thread(target=self._read, args=(ours, self._proc), name="bert-launcher", daemon=True).start()

    def _read(self, sock: socket.socket, proc: subprocess.Popen) -> None:
        while True:
            try:
                data = sock.recv(_PACKET)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            with self._changed:
                if "exit" in message:
                    self._exits[int(message["exit"])] = int(message["code"])
                else:
                    self._replies[int(message["id"])] = message
                self._changed.notify_all()
        proc.wait()
        with self._changed:
            self._changed.notify_all()


def training_processes(server_pid: int) -> set[int]:
    """The live training processes of the server `server_pid` from /proc (operators, tests, benchmarks): its spawned
    children, and its launcher's children (named PROCESS_NAME)."""
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


_LAUNCHER = Launcher()   # one per server process; its process starts at the first launch (or warm)


def launcher() -> Launcher:
    return _LAUNCHER


# ------------------------------------------------------------------------------------------ the launcher process


def _run_child(entry: str, fds: list[int], env: dict[str, str], sock: socket.socket, server_pid: int) -> None:
    """In the fork: become a training process, `entry` called with the two pipe ends."""
    code = 0
    try:
        sock.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            Path("/proc/self/comm").write_text(PROCESS_NAME)   # what `ps` and `top` call it
        except OSError:
            pass
        os.environ.update(env)
        os.environ[SERVER_PID_ENV] = str(server_pid)
        module, _, function = entry.partition(":")
        getattr(importlib.import_module(module), function)(*fds)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a fresh interpreter would print it and exit 1 too
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        _leave(code)


def launcher_main(sock_fd: int, server_pid: int, preload: list[str]) -> None:
    """The launcher process: preload, then fork a training process for each request and report how each ends,
    until the server has gone. Never returns."""
    sock = socket.socket(fileno=sock_fd)
    server = _server_end(server_pid)
    if server is None:
        _leave()
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the child imports it again and reports its own error
            log.warning("the training launcher could not preload %s: %s", name, exc)
    children: dict[int, int] = {}   # pidfd -> pid
    while True:
        readable, _, _ = select.select([sock, server, *children], [], [])
        for fd in readable:
            if fd == server:
                _leave()
            if fd in children:
                pid = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})
                continue
            try:
                data, fds, _, _ = socket.recv_fds(sock, _PACKET, 2)
            except OSError:
                data, fds = b"", []
            if not data:
                _leave()
            request = json.loads(data)
            try:
                pid = os.fork()
            except OSError as exc:
                for f in fds:
                    os.close(f)
                _send(sock, {"id": request["id"], "error": str(exc)})
                continue
            if pid == 0:
                os.close(server)
                for f in children:
                    os.close(f)
                _run_child(request["entry"], fds, request.get("env") or {}, sock, server_pid)
            for f in fds:
                os.close(f)
            children[os.pidfd_open(pid)] = pid
            _send(sock, {"id": request["id"], "pid": pid})


def _server_end(server_pid: int) -> int | None:
    """A pidfd readable when the server ends (None: gone already). Watched beside the socket, whose server end a
    process the server forked (a library's worker) would hold open after the server died. Checking our parent after
    the open tells a live server from a reused pid."""
    try:
        fd = os.pidfd_open(server_pid)
    except OSError:   # ProcessLookupError: it has gone already
        return None
    if os.getppid() != server_pid:
        os.close(fd)
        return None
    return fd


def _leave(code: int = 0) -> None:
    """Exit now, not through the interpreter's shutdown, which tears down torch's modules for 1 to 9 s on a loaded
    2-core machine (a launcher outliving its server all that time)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)


def _send(sock: socket.socket, message: dict) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass   # the server has gone; the next read ends the launcher


if __name__ == "__main__":
    launcher_main(int(sys.argv[1]), int(sys.argv[2]), [n for n in sys.argv[3].split(",") if n])
