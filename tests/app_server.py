"""`streamlit run app.py` started from Python on a free local port, as the browser tests and the app benchmarks
(`benchmarks/app_bench.py`, `benchmarks/classroom_load.py`) do, with the options a deployment uses (headless, no
file watcher, no usage statistics), and a wait until it answers its health check."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

from bert_core.paths import REPO_ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app_server(port: int, env: dict, log: IO, timeout_s: float = 120, **popen) -> subprocess.Popen:
    """The app on 127.0.0.1:`port` with this environment, its output to `log`; returns once its health check says
    ok. Raises RuntimeError (with the end of the log when it is a file) if it exits or is not up in `timeout_s`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, **popen)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            log.flush()
            name = log.name if isinstance(log, (io.TextIOWrapper, io.BufferedWriter, io.FileIO)) else None
            tail = Path(name).read_text()[-3000:] if isinstance(name, str) and Path(name).is_file() else ""
            raise RuntimeError(f"streamlit did not come up:\n{tail}")
        time.sleep(0.05)
