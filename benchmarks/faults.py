"""Faults on a class's server (issue #34): a real `streamlit run app.py`, a fault injected, and what the students see.

    .venv/bin/python benchmarks/faults.py [--only 1,2] [--json out.json]

Every scenario starts its own server as `classroom_load.py` does (headless, `--server.fileWatcherType none`) in public
mode (`BERT_EXPLORER_PUBLIC=1`), with temporary runs and scratch folders, and the Train page's defaults (the toy
corpus, nano) but its steps set in the URL: `?train_steps=200` for a run that finishes in seconds, 20,000 for one
still training when the fault comes. The students are `classroom_load.ProtocolSession`s (Streamlit's own websocket
protocol: a page is a `rerun_script`, a button press a trigger value for its widget id, the live status fragment
answered at its interval, as a browser does) that also keep what their page shows now: every alert
(st.error/warning/info/success), the progress line, exceptions, charts, buttons and select boxes. They are read
generically, since the texts change with the app; only the words failed/stalled/lost/stopped (and the like) are
looked for, case-insensitively. A reload is a fresh session on the same `?run=` link.

1. kill -9 of the training process before its first step (while the page says "Preparing"), and
2. after its first step (while it trains). Both: seconds from the kill until the owner's page names a failure; its
   alerts then and after a reload; whether the progress line's "elapsed" still grows (read 5 s apart); whether
   "Preparing" shows beside the failure; exceptions on Train, Attention and Predictions opened with
   `?run=...&model=session`; whether "Prepare download" still gives the model.
3. SIGSTOP of a training process, with `BERT_EXPLORER_MAX_TRAININGS=1` and a second session's run queued behind it:
   what the owner's page says for up to 90 s (or until it says stalled or ended), whether the queued run gets the slot
   and what wait it is told meanwhile, whether Stop ends the frozen run and how long that takes; then SIGCONT.
4a/4b. SIGTERM / SIGKILL of the server, then a new server on the same runs and scratch folders: one run had finished,
   another was training. Both `?run=` links reopened: is the finished run there with its curves (a chart, "Run
   finished"), is the training one said to be stopped by the restart, and was a training process left orphaned.
5. ENOSPC on save: the runs folder on a small tmpfs, filled until half a checkpoint fits; a finished run's *Save*:
   the message (its length, whether it names a server path), the folders left (partial ones), what the sidebar's
   "A saved run" offers, and whether the run still downloads.
6. ENOSPC on release: the state folder (runs' records and checkpoints) on a full tmpfs; a run finishes (the server
   writes its checkpoint there, then ends its process): what the page says and when, whether the process lives on,
   whether "Prepare download" and "Model trained in this session" still work.

It prints what each scenario saw as it goes, then a markdown table for docs/benchmarks.md: each fault, what the page
showed, what was lost (nothing finished should be), and seconds until the page said so. The tmpfs scenarios mount one
(root only) and are skipped with a note where that fails. Everything is cleaned up whatever happens: pages, servers,
training processes (SIGCONT first), mounts, temporary folders. A scenario takes 20 s to two and a half minutes on
a 2-core machine (3, the frozen process, the longest), all of them about six.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import classroom_load as cl  # its Server, ProtocolSession and /proc helpers; it puts the repo on sys.path
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from tests.app_server import free_port, start_app_server
from bert_core.serve.launcher import PROCESS_NAME, SPAWNED_MODULE

LONG_STEPS = 20_000    # about four minutes of nano on toy: still training whenever a fault comes
SHORT_STEPS = 200      # a few seconds: a run that finishes
OBSERVE_STOPPED_S = 90.0
TRAINING_MODULE = SPAWNED_MODULE
ALERTS = ("error", "warning", "info", "success")
ALERT_FORMAT = {1: "error", 2: "warning", 3: "info", 4: "success"}
FAILURE = re.compile(r"\b(fail\w*|stall\w*|lost|stopped|ended|exited|killed|crash\w*|not answer\w*|frozen)\b",
                     re.IGNORECASE)
PREPARING = re.compile(r"\bPreparing\b")
FINISHED = re.compile(r"\bfinished\b", re.IGNORECASE)
RESTARTED = re.compile(r"restart|stopped|not on this server|lost|ended", re.IGNORECASE)
STEP = re.compile(r"\b(\w+): step ([\d,]+) of")
ELAPSED = re.compile(r"elapsed (?:(\d+)m )?(\d+)s")
WAIT = re.compile(r"estimated wait ([^.]*)", re.IGNORECASE)
SERVER_PATH = re.compile(r"(?:/[\w.@+-]+){2,}")
FAULTS = {
    "1": "kill -9 of the training process before its first step",
    "2": "kill -9 of the training process after its first step",
    "3": "SIGSTOP of a training process (1 slot, a run queued behind it)",
    "4a": "SIGTERM of the server, then a restart",
    "4b": "SIGKILL of the server, then a restart",
    "5": "ENOSPC on Save (runs folder full)",
    "6": "ENOSPC on release (state folder full)",
}


# ----------------------------------------------------------------------------------------------- small helpers


def short(text: str, n: int = 90) -> str:
    """A page's text in one short line: no icons, no markdown emphasis, collapsed spaces, cut at `n` characters."""
    text = re.sub(r":material/\w+:", "", text)
    text = " ".join(re.sub(r"[*`]", "", text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def listing(texts, n: int = 90) -> str:
    return "; ".join(dict.fromkeys(short(t, n) for t in texts)) or "nothing"


def digitless(texts) -> list[str]:
    """Texts with their numbers blanked: the same message at another step or second compares equal."""
    return [re.sub(r"\d[\d,.]*", "#", t) for t in texts]


def proc_state(pid: int) -> str | None:
    """The process's state letter (R, S, T stopped, Z zombie...), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def is_training(pid: int) -> bool:
    """A live (not zombie) training process, forked by the launcher (named PROCESS_NAME) or spawned (the training
    module in its command line): the pid is never one reused by something else we would kill."""
    try:
        forked = Path(f"/proc/{pid}/comm").read_text().strip() == PROCESS_NAME
        if not forked and TRAINING_MODULE not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return False
    except OSError:
        return False
    return proc_state(pid) not in (None, "Z")


async def until(pred, timeout: float, every: float = 0.1) -> float | None:
    """Seconds until `pred()` held, polled every `every` s; None when it did not within `timeout`."""
    t0 = time.monotonic()
    while True:
        if pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 >= timeout:
            return None
        await asyncio.sleep(every)


def fill(folder: Path, leave: int) -> int:
    """Write a filler file into `folder` until only `leave` bytes are free (all of it for 0); returns bytes free."""
    vfs = os.statvfs(folder)
    todo = max(0, vfs.f_bavail * vfs.f_frsize - leave)
    chunk = b"\0" * (1 << 20)
    try:
        with open(folder / "filler.bin", "wb") as f:
            while todo > 0 or leave == 0:
                f.write(chunk[: min(len(chunk), todo)] if todo > 0 else chunk)
                todo -= len(chunk)
                f.flush()
    except OSError:
        pass  # the disk is full: what was asked for, for leave=0
    vfs = os.statvfs(folder)
    return vfs.f_bavail * vfs.f_frsize


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def checkpoint_state(folder: Path) -> str:
    """'complete', or what is wrong with a checkpoint folder: missing files, or a model.safetensors cut short (its
    header names where its last tensor ends), read without torch."""
    names = {p.name for p in folder.iterdir() if p.is_file()}
    missing = [n for n in ("config.json", "model.safetensors") if n not in names]
    if not ({"tokenizer.json", "vocab.txt"} & names):
        missing.append("tokenizer")
    if "model.safetensors" in names:
        path = folder / "model.safetensors"
        try:
            with open(path, "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(size))
            end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
            if path.stat().st_size < 8 + size + end:
                return f"partial (model.safetensors cut at {path.stat().st_size:,} bytes)"
        except (OSError, ValueError, struct.error, KeyError, TypeError):
            return "partial (model.safetensors unreadable)"
    return "complete" if not missing else f"partial (no {', '.join(missing)})"


def state_folder(runs: Path) -> Path:
    """Where the server keeps its runs' records and checkpoints: beside the runs folder (bert_core.serve.run_records)."""
    return runs.with_name(f"{runs.name}-state")


def released_checkpoints(state: Path) -> list[Path]:
    """The runs' checkpoints in the state folder (<run's folder>/checkpoint)."""
    return [p.parent for p in state.glob("*/checkpoint/config.json")]


# ----------------------------------------------------------------------------------------------- the server


class FaultServer(cl.Server):
    """classroom_load's server (its memory sampler, `tracebacks`, `close`) on runs and scratch folders we choose, so a
    restarted server finds its predecessor's, and in public mode."""

    def __init__(self, workdir: Path, runs: Path, scratch: Path, env_extra: dict[str, str]):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"server-{self.port}.log"
        env = {k: v for k, v in os.environ.items() if k not in cl.CAPACITY_ENV}
        env.update(PYTHONUNBUFFERED="1", BERT_EXPLORER_RUNS_DIR=str(runs), BERT_EXPLORER_SCRATCH_DIR=str(scratch),
                   BERT_EXPLORER_PUBLIC="1", **env_extra)
        self._log = open(self.log_path, "w")  # noqa: SIM115 - open for the server's life; close() closes it
        t0 = time.monotonic()
        self.proc = start_app_server(self.port, env, self._log)
        self.startup_s = time.monotonic() - t0
        # What cl.Server.__init__ sets up after starting its process.
        self.peak = {"total_kb": 0, "server_kb": 0, "children_kb": 0, "children": 0}
        self.cpu_ticks: dict[int, int] = {}
        self.training_started: dict[int, float] = {}
        self.max_training = 0
        self.max_children = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def training_pids(self) -> list[int]:
        """The server's training processes now (the sampler sees them only once a second)."""
        return [pid for pid in cl._descendants(self.proc.pid) if is_training(pid)]

    def error_lines(self) -> list[str]:
        """The last line of each traceback in the log ("OSError: [Errno 28] ..."), for the report."""
        lines = []
        for block in self.log_path.read_text(errors="replace").split("Traceback (most recent call last):")[1:]:
            found = re.search(r"^(\w[\w.]*(?:Error|Exception|Exit|Interrupt)\b.*)$", block, re.MULTILINE)
            lines.append(short(found.group(1) if found else block.strip().splitlines()[-1], 200))
        return lines


# ----------------------------------------------------------------------------------------------- a student's tab


@dataclass
class Shown:
    run: int     # the script run (full or fragment) that drew it
    kind: str    # error, warning, info, success, progress, exception, chart, caption, markdown, button, ...
    text: str


class Page(cl.ProtocolSession):
    """A student's tab (classroom_load's protocol client) that also keeps what its page shows now, by the element's
    place on the page: what a full script run did not draw again is gone when it finishes, and so is what a fragment
    run did not draw again inside its fragment, as the browser clears stale elements."""

    def __init__(self, name: str, server: cl.Server):
        super().__init__(name, "trainer", cl.Record(), server)
        self.shown: dict[tuple, Shown] = {}
        self._run_no = 0
        self._written: list[tuple] = []
        self.last_press = ""

    # what the server sends
    def _on(self, msg, t: float) -> None:
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            self._run_no += 1
            self._written = []
        elif kind == "script_finished":
            self._prune(msg.script_finished)
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            self._keep(msg.delta.new_element, tuple(msg.metadata.delta_path))
        super()._on(msg, t)

    def _keep(self, el, path: tuple) -> None:
        kind = el.WhichOneof("type")
        text = ""
        if kind == "alert":
            kind, text = ALERT_FORMAT.get(el.alert.format, "alert"), el.alert.body
        elif kind == "progress":
            text = el.progress.text
        elif kind == "exception":
            text = f"{el.exception.type}: {el.exception.message}"
        elif kind in ("plotly_chart", "vega_lite_chart"):
            kind = "chart"
        elif kind == "markdown":
            kind, text = ("caption" if el.markdown.element_type == 2 else "markdown"), el.markdown.body
        elif kind == "button":
            text = el.button.label + (" (disabled)" if el.button.disabled else "")
        elif kind == "download_button":
            kind, text = "download", el.download_button.label
        elif kind == "selectbox":
            text = f"{el.selectbox.label}: {list(el.selectbox.options)}"
        elif kind == "heading":
            text = el.heading.body
        self.shown[path] = Shown(self._run_no, kind, text)
        self._written.append(path)

    def _prune(self, status: int) -> None:
        if status == ForwardMsg.FINISHED_SUCCESSFULLY:
            self.shown = {p: s for p, s in self.shown.items() if s.run == self._run_no}
        elif status == ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY and self._written:
            # The fragment's container: the longest place all its elements share, short of an element itself.
            prefix = os.path.commonprefix(self._written)[: min(len(p) for p in self._written) - 1]
            self.shown = {p: s for p, s in self.shown.items() if s.run == self._run_no or p[: len(prefix)] != prefix}

    # what the page shows
    def items(self, kinds, where: str = "all") -> list[Shown]:
        """Elements of these kinds in page order; where: main, sidebar or all."""
        sides = {"main": (0,), "sidebar": (1,), "all": (0, 1)}[where]
        return [s for p, s in sorted(self.shown.items()) if p and p[0] in sides and s.kind in kinds]

    def alerts(self, where: str = "all") -> list[str]:
        """Every alert, the progress line and any exception, as "kind: text" ("sidebar kind: text" there)."""
        out = []
        for side, label in (("main", ""), ("sidebar", "sidebar ")):
            if where in (side, "all"):
                out += [f"{label}{s.kind}: {s.text}" for s in self.items(ALERTS + ("progress", "exception"), side)]
        return out

    def says(self, pattern: re.Pattern, kinds=ALERTS + ("progress",), where: str = "all") -> bool:
        return any(pattern.search(s.text) for s in self.items(kinds, where))

    def progress(self) -> str | None:
        lines = self.items(("progress",), "main")
        return lines[0].text if lines else None

    def step(self) -> int:
        """The step the progress line shows, -1 without one."""
        m = STEP.search(self.progress() or "")
        return int(m.group(2).replace(",", "")) if m else -1

    def run_phase(self) -> str | None:
        m = STEP.search(self.progress() or "")
        return m.group(1) if m else None

    def elapsed(self) -> int | None:
        m = ELAPSED.search(self.progress() or "")
        return int(m.group(1) or 0) * 60 + int(m.group(2)) if m else None

    def exceptions(self) -> list[str]:
        """Every exception this tab was ever shown (the page's record), and those on it now."""
        seen = [e["text"] for e in self.rec.exceptions] + [s.text for s in self.items(("exception",))]
        return list(dict.fromkeys(seen))

    def run_over(self) -> bool:
        """The page shows its run as ended: Stop disabled, or a progress line past running."""
        stop = self.buttons.get("Stop")
        return bool(stop and stop[1]) or self.run_phase() in ("stopped", "failed", "finished", "cancelled")

    # what a student does
    async def press(self, label: str, timeout: float = 120.0) -> float | None:
        """Click a main-area button; seconds until the page has settled again. None when there is no such button,
        it is disabled or the page did not settle (`last_press` says which)."""
        # A page still redrawing (a full run after its run ended) has not sent all its buttons yet.
        if await until(lambda: label in self.buttons, 10) is None:
            self.last_press = "no such button"
            return None
        wid, disabled = self.buttons[label]
        if disabled:
            self.last_press = "disabled"
            return None
        t0 = time.monotonic()
        try:
            await self._run(self._back(self.page_hash, query=self._query_string(), triggers=[wid]), timeout)
        except TimeoutError:
            self.last_press = f"the page had not settled after {timeout:.0f} s"
            return None
        self.last_press = "pressed"
        return time.monotonic() - t0

    async def refresh(self, timeout: float = 60.0) -> None:
        """A full script run of the page as it is (what any click on it brings)."""
        try:
            await self._run(self._back(self.page_hash, query=self._query_string()), timeout)
        except TimeoutError:
            pass

    async def download(self) -> str:
        """Press "Prepare download": "offered (label)" when the zip is offered, else what the page said instead."""
        before = self.alerts()
        if await self.press("Prepare download") is None:
            return f"Prepare download {self.last_press}"
        offered = self.items(("download",), "main")
        if offered:
            return f"offered ({short(offered[0].text, 60)})"
        said = [a for a in self.alerts() if digitless([a])[0] not in digitless(before)]   # what the press added
        return "not offered: " + listing(said or ["nothing said"])


def kept_or_lost(download: str, reached: int) -> str:
    """What a run that reached step `reached` lost, from the step its offered download names ("... (step N, ...")."""
    found = re.search(r"step ([\d,]+)", download)
    kept = int(found.group(1).replace(",", "")) if found else None
    if kept is None or kept >= reached:
        return f"nothing: the model at step {reached:,} downloads"
    return (f"the steps after its last checkpoint ({kept + 1:,} to {reached:,}); the model of step {kept:,} "
            "downloads")


# ----------------------------------------------------------------------------------------------- one scenario


@dataclass
class Outcome:
    id: str
    fault: str
    seen: str = ""
    lost: str = ""
    seconds: float | None = None       # until the page said so
    seconds_of: str = ""               # from what to what
    facts: dict = field(default_factory=dict)
    wall_s: float = 0.0
    error: str | None = None           # the scenario could not be carried out (its traceback is printed)


class Lab:
    """One scenario's temporary folder, servers, pages, mounts and frozen processes; `close` undoes all of them."""

    def __init__(self, sid: str, out: Outcome):
        self.dir = Path(tempfile.mkdtemp(prefix=f"faults-{sid}-"))
        self.out = out
        self.servers: list[FaultServer] = []
        self.pages: list[Page] = []
        self.mounts: list[Path] = []
        self.frozen: set[int] = set()
        self.training: set[int] = set()   # every training process seen: killed at the end if it outlived its server
        self.mount_error = ""

    def server(self, runs: Path | None = None, scratch: Path | None = None, **env: str) -> FaultServer:
        server = FaultServer(self.dir, runs or self.dir / "runs", scratch or self.dir / "scratch", env)
        self.servers.append(server)
        return server

    async def open(self, name: str, server: cl.Server, page: str, query: str = "") -> Page:
        p = Page(name, server)
        self.pages.append(p)
        await p.open(page, query)
        return p

    def training_pid(self, server: FaultServer) -> int:
        pids = server.training_pids()
        if not pids:
            raise RuntimeError("the server has no training process")
        self.training.update(pids)
        return max(pids, key=lambda pid: server.training_started.get(pid, time.monotonic()))

    def mount_tmpfs(self, name: str, size_kb: int) -> Path | None:
        path = self.dir / name
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
                              check=False, capture_output=True, text=True)
        if done.returncode != 0:
            self.mount_error = short(done.stderr or f"exit {done.returncode}", 120)
            return None
        self.mounts.append(path)
        return path

    def freeze(self, pid: int) -> None:
        self.frozen.add(pid)
        os.kill(pid, signal.SIGSTOP)

    def thaw(self, pid: int) -> None:
        self.frozen.discard(pid)
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass

    async def close(self) -> None:
        for p in self.pages:
            with contextlib.suppress(Exception):   # a socket that is already gone
                await p.close()
        for pid in list(self.frozen):   # a stopped process would ignore everything but SIGKILL
            self.thaw(pid)
        tracebacks = []
        for server in self.servers:
            self.training.update(server.training_started)
            self.training.update(server.training_pids())
            await asyncio.to_thread(server.close)
            tracebacks += server.error_lines()
        self.out.facts["server_tracebacks"] = tracebacks
        await asyncio.sleep(0.5)   # children told to quit by their server's end
        left = [pid for pid in self.training if is_training(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        if left:
            self.out.facts["training_processes_killed_at_cleanup"] = left
        for path in reversed(self.mounts):
            unmount(path)
        shutil.rmtree(self.dir, ignore_errors=True)


def unmount(path: Path) -> None:
    """Unmount a tmpfs; lazily when something still holds it open (it goes once that lets go)."""
    if subprocess.run(["umount", str(path)], check=False, capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def log(sid: str, text: str) -> None:
    print(f"[{sid}] {text}", flush=True)


# ----------------------------------------------------------------------------------------------- 1, 2: kill -9


async def child_killed(lab: Lab, out: Outcome, after_first_step: bool) -> None:
    server = lab.server()
    owner = await lab.open("owner", server, "Train", f"train_steps={LONG_STEPS}")
    await owner.press("Start")
    run_id = owner.query.get("run")
    if after_first_step:
        ready = await until(lambda: owner.step() >= 1 and server.training_pids(), 120)
    else:
        # Before its first step: the process exists and the page has no progress line yet (it says "Preparing").
        ready = await until(lambda: owner.step() < 0 and server.training_pids(), 60)
    if ready is None:
        raise RuntimeError(f"the run never got there; the page shows {listing(owner.alerts())}")
    pid = lab.training_pid(server)
    out.facts.update(run=(run_id or "")[:6], shown_at_kill=owner.alerts(), step_at_kill=owner.step())
    os.kill(pid, signal.SIGKILL)
    log(out.id, f"killed {pid} at step {owner.step()}; the page showed {listing(owner.alerts())}")
    out.seconds = await until(lambda: owner.says(FAILURE), 60)
    out.seconds_of = "kill -9 → the owner's page names a failure"
    await asyncio.sleep(3)    # the status fragment's next polls, and the full redraw it asks for once the run ended
    after = owner.alerts()
    # Once the run has ended the status fragment polls no more: a click redraws the page, here two 5 s apart.
    await owner.refresh()
    first, t_first = owner.elapsed(), time.monotonic()
    await asyncio.sleep(5)
    await owner.refresh()
    second, apart = owner.elapsed(), time.monotonic() - t_first
    reload = await lab.open("reload", server, "Train", f"run={run_id}")
    reloaded = reload.alerts()
    together = [p.name for p in (owner, reload) if p.says(PREPARING) and p.says(FAILURE)]
    others = {}
    for page in ("Train", "Attention", "Predictions"):
        p = await lab.open(f"{page.lower()}-session", server, page, f"run={run_id}&model=session")
        others[page] = {"exceptions": p.exceptions(), "alerts": p.alerts(),
                        "errors": [a for a in p.alerts() if re.match(r"(sidebar )?(error|warning):", a)]}
        await p.close()
    download = await owner.download()
    final_step = max(owner.step(), out.facts["step_at_kill"])
    out.facts.update(after=after, elapsed_s=[first, second], reload=reloaded, preparing_beside_failure=together,
                     other_pages=others, download=download, owner_exceptions=owner.exceptions())
    grows = "no progress line" if first is None else (
        f"elapsed {first}→{second} s in redraws {apart:.0f} s apart"
        + (" (still counting)" if (second or 0) > first else " (frozen)"))
    raised = [f"{page}: {short(e[0], 60)}" for page, o in others.items() if (e := o["exceptions"])]
    model_errors = [e for page in ("Attention", "Predictions") for e in others[page]["errors"]]
    same = digitless(reloaded) == digitless(after)
    out.seen = (f"{listing(after)} | reload: {'the same' if same else listing(reloaded)} | {grows}"
                + (" | 'Preparing' beside the failure" if together else "")
                + (f" | exceptions: {'; '.join(raised)}" if raised else " | no exception on the three pages")
                + (f" | Attention, Predictions with ?model=session: {listing(model_errors)}" if model_errors else ""))
    if download.startswith("offered"):
        out.lost = kept_or_lost(download, final_step)
    elif final_step <= 0:
        out.lost = f"nothing had trained; the run must be started again ({download})"
    else:
        out.lost = f"the model of {final_step:,} steps: {download}"


# ----------------------------------------------------------------------------------------------- 3: SIGSTOP of a child


async def child_stopped(lab: Lab, out: Outcome) -> None:
    server = lab.server(BERT_EXPLORER_MAX_TRAININGS="1")
    owner = await lab.open("owner", server, "Train", f"train_steps={LONG_STEPS}")
    await owner.press("Start")
    if await until(lambda: owner.step() >= 1 and server.training_pids(), 120) is None:
        raise RuntimeError(f"the first run never trained; its page shows {listing(owner.alerts())}")
    pid = lab.training_pid(server)
    second = await lab.open("second", server, "Train", f"train_steps={SHORT_STEPS}")
    await second.press("Start")
    out.facts["second_after_start"] = second.alerts("main")
    lab.freeze(pid)
    t0 = time.monotonic()
    log(out.id, f"SIGSTOP {pid} at step {owner.step()}; the second run: {listing(second.alerts('main'))}")

    def slot() -> bool:
        return second.says(PREPARING) or second.run_phase() in ("running", "finished")

    timeline, waits = [], []
    said = got_slot = None
    while time.monotonic() - t0 < OBSERVE_STOPPED_S:
        now = round(time.monotonic() - t0, 1)
        if said is None and owner.says(FAILURE):
            said = now
        if got_slot is None and slot():
            got_slot = now
        entry = (owner.alerts("main"), second.alerts("main"))
        if not timeline or [digitless(x) for x in timeline[-1][1:]] != [digitless(x) for x in entry]:
            timeline.append((now, *entry))   # only changes, numbers aside: not every second of the clock
        wait = next((m.group(1) for a in second.alerts("main") if (m := WAIT.search(a))), None)
        if wait is not None and (not waits or waits[-1][1] != wait):
            waits.append((now, wait))
        if said is not None and got_slot is not None:
            break
        await asyncio.sleep(1.0)
    watched = time.monotonic() - t0
    owner_then = owner.alerts("main")
    out.seconds, out.seconds_of = said, "SIGSTOP → the owner's page says stalled/ended"
    step_frozen = owner.step()
    stop_s = stop_note = None
    if not owner.run_over():
        t_stop = time.monotonic()
        stop_s = await owner.press("Stop")
        ended = await until(owner.run_over, 30)
        stop_note = (f"the press took {stop_s:.1f} s" if stop_s is not None else f"Stop {owner.last_press}") + (
            f"; the page showed the run ended {time.monotonic() - t_stop:.1f} s after the click" if ended is not None
            else "; the run still shown as going 30 s later")
    else:
        stop_note = "not needed: the page already showed the run ended"
    after_stop = owner.alerts("main")
    # SIGCONT: what the frozen run and the queued one do once it can go on (20 s at most).
    lab.thaw(pid)
    t_cont = time.monotonic()
    ended_after_cont = slot_after_cont = None
    while time.monotonic() - t_cont < 20 and (ended_after_cont is None or slot_after_cont is None):
        if ended_after_cont is None and owner.run_over():
            ended_after_cont = round(time.monotonic() - t_cont, 1)
        if slot_after_cont is None and slot():
            slot_after_cont = round(time.monotonic() - t_cont, 1)
        await asyncio.sleep(0.2)
    if got_slot is not None:
        got_slot_text = f"after {got_slot:.0f} s"
    else:
        got_slot_text = "never" + (f" while frozen; {slot_after_cont:.0f} s after SIGCONT"
                                   if slot_after_cont is not None else "")
    download = await owner.download()
    out.facts.update(
        step_when_stopped=step_frozen, observed_s=round(watched, 1), timeline=timeline, second_wait_shown=waits,
        second_got_slot_s=got_slot, stop=stop_note, after_stop=after_stop, after_sigcont=owner.alerts("main"),
        owner_ended_after_sigcont_s=ended_after_cont, second_slot_after_sigcont_s=slot_after_cont,
        second_after_sigcont=second.alerts("main"),
        download=download, exceptions=owner.exceptions() + second.exceptions())
    first_seen = timeline[0][1] if timeline else []
    told = (f"{waits[0][1]} at first, {waits[-1][1]} after {waits[-1][0]:.0f} s ({len(waits)} different)" if waits
            else "none shown")
    out.seen = (f"owner, first: {listing(first_seen)}; after {watched:.0f} s: {listing(owner_then)}"
                f" | queued run's estimated wait: {told}; it got the slot {got_slot_text}"
                f" | Stop: {stop_note} | after SIGCONT: {listing(owner.alerts('main'))}")
    out.lost = (kept_or_lost(download, max(owner.step(), step_frozen)) if download.startswith("offered")
                else f"the model of {max(owner.step(), step_frozen):,} steps: {download}")


# ----------------------------------------------------------------------------------------------- 4: the server restarts


async def server_restart(lab: Lab, out: Outcome, sig: signal.Signals) -> None:
    runs, scratch = lab.dir / "runs", lab.dir / "scratch"
    state = state_folder(runs)
    server = lab.server(runs, scratch)
    done = await lab.open("finished-owner", server, "Train", f"train_steps={SHORT_STEPS}")
    await done.press("Start")
    if await until(lambda: done.says(FINISHED), 120) is None:
        raise RuntimeError(f"the short run never finished; its page shows {listing(done.alerts())}")
    done_id = done.query.get("run")
    await until(lambda: released_checkpoints(state), 15)   # its checkpoint is written once its run has ended
    busy = await lab.open("training-owner", server, "Train", f"train_steps={LONG_STEPS}")
    await busy.press("Start")
    if await until(lambda: busy.step() >= 1 and server.training_pids(), 120) is None:
        raise RuntimeError(f"the long run never trained; its page shows {listing(busy.alerts())}")
    busy_id, busy_step = busy.query.get("run"), busy.step()
    pids = server.training_pids()
    lab.training.update(pids)
    before = released_checkpoints(state)
    t_kill = time.monotonic()
    server.proc.send_signal(sig)
    log(out.id, f"{sig.name} to the server; the long run at step {busy_step}, {len(before)} checkpoint(s) on disk")
    try:
        await asyncio.to_thread(server.proc.wait, 60)
        exit_s = time.monotonic() - t_kill
    except subprocess.TimeoutExpired:
        exit_s = None
        server.proc.kill()
    for p in (done, busy):
        await p.close()
    new = lab.server(runs, scratch)
    alive_after = time.monotonic() - t_kill
    orphans = {pid: proc_state(pid) for pid in pids if is_training(pid)}
    reopened = {}
    for name, run_id in (("finished", done_id), ("training", busy_id)):
        p = await lab.open(f"{name}-reopened", new, "Train", f"run={run_id}")
        reopened[name] = {"alerts": p.alerts(), "chart": bool(p.items(("chart",))), "run_finished": p.says(FINISHED),
                          "restart_said": p.says(RESTARTED), "link_kept": p.query.get("run") == run_id,
                          "step": p.step(), "exceptions": p.exceptions()}
        if out.seconds is None:
            out.seconds = time.monotonic() - t_kill
    out.seconds_of = f"{sig.name} → the reopened link's page (server exit and restart included)"
    after = released_checkpoints(state)
    # A process that outlived its server: does it end by itself (its pipes closed), or stay on with nobody to stop it?
    gone_at = {}
    while orphans and len(gone_at) < len(orphans) and time.monotonic() - t_kill < 45:
        gone_at.update({pid: round(time.monotonic() - t_kill) for pid in orphans if pid not in gone_at
                        and not is_training(pid)})
        await asyncio.sleep(0.5)
    fate = [f"pid {pid}: " + (f"ended {gone_at[pid]} s after the {sig.name}" if pid in gone_at else
                              f"still running {time.monotonic() - t_kill:.0f} s after the {sig.name}")
            for pid in orphans]
    out.facts.update(server_exit_s=exit_s, new_server_up_s=round(new.startup_s, 1), reopened=reopened,
                     training_processes_before=pids, alive_after_new_server={str(k): v for k, v in orphans.items()},
                     checked_s_after_kill=round(alive_after, 1), orphan_fate=fate,
                     checkpoints_on_disk_before=[str(p.relative_to(state)) for p in before],
                     checkpoints_on_disk_after_reopen=[str(p.relative_to(state)) for p in after])
    fin, tr = reopened["finished"], reopened["training"]
    out.seen = (f"finished run: {listing(fin['alerts'])} (chart: {'yes' if fin['chart'] else 'no'}, "
                f"'Run finished': {'yes' if fin['run_finished'] else 'no'}) | training run: {listing(tr['alerts'])}"
                f" (says stopped/restarted: {'yes' if tr['restart_said'] else 'no'}) | training processes alive "
                f"{alive_after:.0f} s after the {sig.name}: {len(orphans)}" + (f" ({'; '.join(fate)})" if fate else "")
                + (f" | the server took {exit_s:.1f} s to exit" if exit_s is not None else " | no exit in 60 s"))
    lost = []
    if not (fin["chart"] and fin["run_finished"]):
        lost.append(f"the finished run ({SHORT_STEPS} steps: curves and model"
                    + ("; its checkpoint deleted from disk" if before and not after else "") + ")")
    if tr["step"] < 0:
        lost.append(f"the training run's {busy_step:,}+ steps")
    else:   # kept up to some step: what came after it is lost (the page showed `busy_step` a poll before the kill)
        lost.append(f"the training run after step {tr['step']:,} (its page had shown step {busy_step:,} before the "
                    f"{sig.name})")
    out.lost = "; ".join(lost)


# ----------------------------------------------------------------------------------------------- 5, 6: a full disk


async def finished_run(lab: Lab, server: FaultServer, name: str = "owner") -> tuple[Page, int]:
    """A short run started and finished on the Train page; returns its page and its training process's pid."""
    owner = await lab.open(name, server, "Train", f"train_steps={SHORT_STEPS}")
    await owner.press("Start")
    await until(lambda: server.training_pids(), 30)
    pid = lab.training_pid(server)
    if await until(lambda: owner.says(FINISHED) or owner.says(FAILURE), 120) is None:
        raise RuntimeError(f"the run never finished; its page shows {listing(owner.alerts())}")
    await owner.refresh()   # the page as it settles after the run (its save box and buttons drawn)
    return owner, pid


async def enospc_save(lab: Lab, out: Outcome) -> None:
    runs = lab.mount_tmpfs("runs", 16 * 1024)
    if runs is None:
        out.seen = out.lost = f"skipped: could not mount a tmpfs ({lab.mount_error})"
        return
    scratch = lab.dir / "scratch"
    server = lab.server(runs, scratch)
    owner, _ = await finished_run(lab, server)
    await until(lambda: released_checkpoints(state_folder(runs)), 15)
    found = released_checkpoints(state_folder(runs))
    size = folder_bytes(found[0]) if found else 1 << 20
    free = fill(runs, size // 2)   # room for the small files of a checkpoint, not for its weights
    before = owner.alerts()
    log(out.id, f"run finished; checkpoint {size:,} bytes, {free:,} bytes left free in the runs folder; Save")
    out.seconds = await owner.press("Save")
    out.seconds_of = f"Save → the message ({owner.last_press})"
    said = [a for a in owner.alerts() if a not in before]
    message = " / ".join(said)
    paths = list(dict.fromkeys(SERVER_PATH.findall(message)))
    folders = {}
    for entry in sorted(runs.iterdir()):
        if entry.is_dir():
            folders[entry.name] = checkpoint_state(entry) + f", {folder_bytes(entry):,} bytes"
    listing_page = await lab.open("saved-list", server, "Attention", "model=saved")
    offered = [s.text for s in listing_page.items(("selectbox",), "sidebar")]
    sidebar = listing_page.alerts("sidebar")
    download = await owner.download()
    out.facts.update(checkpoint_bytes=size, free_bytes_before_save=free, message=said, message_chars=len(message),
                     server_paths_in_message=paths[:4], folders_left=folders, saved_run_list=offered,
                     saved_run_sidebar=sidebar, saved_run_page_exceptions=listing_page.exceptions(),
                     download=download, exceptions=owner.exceptions())
    partial = [n for n, state in folders.items() if not state.startswith("complete")]
    out.seen = (f"{listing(said, 140) if said else 'no message'} ({len(message)} chars, server path: "
                f"{'yes: ' + short(paths[0], 50) if paths else 'no'}) | left in the runs folder: "
                f"{'; '.join(f'{n}: {s}' for n, s in folders.items()) or 'nothing'} | 'A saved run' offers: "
                f"{listing(offered) if offered else 'no list'}"
                + (f", sidebar: {listing(sidebar)}" if sidebar else ""))
    out.lost = (f"nothing: Prepare download {download}" if download.startswith("offered") else
                f"the run's model: Prepare download {download}") + (
        f"; a partial folder left in the runs folder: {', '.join(partial)}" if partial else "")


async def enospc_release(lab: Lab, out: Outcome) -> None:
    state = lab.mount_tmpfs("state", 1024)
    if state is None:
        out.seen = out.lost = f"skipped: could not mount a tmpfs ({lab.mount_error})"
        return
    free = fill(state, 0)
    server = lab.server(lab.dir / "runs", lab.dir / "scratch", BERT_EXPLORER_STATE_DIR=str(state))
    owner, pid = await finished_run(lab, server)
    t_end = time.monotonic()
    log(out.id, f"run finished ({listing(owner.alerts())}); the state folder has {free:,} bytes free")

    def trouble() -> bool:   # any error or warning but the unigram-plateau note
        return any("plateau" not in s.text.lower() for s in owner.items(("error", "warning")))

    said = await until(trouble, 15)
    out.seconds, out.seconds_of = said, "the run's end → the page warns of the lost checkpoint"
    await owner.refresh()
    shown = owner.alerts()
    state = proc_state(pid)
    download = await owner.download()
    model = await lab.open("model-session", server, "Predictions", f"run={owner.query.get('run')}&model=session")
    loaded = any(s.text.startswith("Model trained in this session") for s in model.items(("caption",), "sidebar"))
    model_said = model.alerts()
    out.facts.update(state_free_bytes=free, shown=shown, process_state_after_s=[round(time.monotonic() - t_end, 1),
                     state or "gone"], download=download, model_page=model_said, model_loaded=loaded,
                     model_page_exceptions=model.exceptions(), exceptions=owner.exceptions())
    out.seen = (f"{listing(shown)} | training process: {'gone' if state is None else 'alive (' + state + ')'}"
                f" | Prepare download: {download} | 'Model trained in this session': "
                f"{'loads' if loaded else listing(model_said)}"
                + (f" | exceptions: {listing(model.exceptions())}" if model.exceptions() else ""))
    out.lost = ("nothing" if download.startswith("offered") and loaded else
                f"the finished run's model ({SHORT_STEPS} steps)" + ("" if loaded else ": not inspectable")
                + ("" if download.startswith("offered") else ", not downloadable"))


# ----------------------------------------------------------------------------------------------- the run


SCENARIOS = {
    "1": lambda lab, out: child_killed(lab, out, after_first_step=False),
    "2": lambda lab, out: child_killed(lab, out, after_first_step=True),
    "3": child_stopped,
    "4a": lambda lab, out: server_restart(lab, out, signal.SIGTERM),
    "4b": lambda lab, out: server_restart(lab, out, signal.SIGKILL),
    "5": enospc_save,
    "6": enospc_release,
}


def run_scenario(sid: str) -> Outcome:
    out = Outcome(sid, FAULTS[sid])
    t0 = time.monotonic()
    lab = Lab(sid, out)

    async def go():
        try:
            await SCENARIOS[sid](lab, out)
        finally:
            await lab.close()

    try:
        asyncio.run(go())
    except Exception as exc:  # noqa: BLE001 - one scenario that cannot be carried out is reported, the others run
        out.error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    out.wall_s = round(time.monotonic() - t0, 1)
    return out


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ") if text else "–"


def table(outcomes: list[Outcome]) -> str:
    rows = ["| # | fault | what the page showed | what was lost | s until the page said so |",
            "| --- | --- | --- | --- | --- |"]
    for o in outcomes:
        if o.error:
            secs = "–"
            seen = f"the scenario failed: {o.error}"
        else:
            secs = ("never" if o.seconds is None else f"{o.seconds:.1f}") + (f" ({o.seconds_of})" if o.seconds_of
                                                                             else "")
            seen = o.seen
        rows.append(f"| {o.id} | {o.fault} | {_cell(seen)} | {_cell(o.lost)} | {secs} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="scenarios to run, e.g. 1,2 or 4 (both 4a and 4b); default: all")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = ap.parse_args(argv)
    chosen = []
    for token in filter(None, (t.strip() for t in args.only.split(","))):
        ids = [s for s in SCENARIOS if s == token or (s[0] == token and s[1:] in ("a", "b"))]
        if not ids:
            ap.error(f"no scenario {token!r}: choose from {', '.join(SCENARIOS)}")
        chosen += [s for s in ids if s not in chosen]
    chosen = chosen or list(SCENARIOS)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cores": os.cpu_count(), "scenarios": chosen,
            "loadavg_before": Path("/proc/loadavg").read_text().split()[:3]}
    print(f"load average before: {' '.join(meta['loadavg_before'])}", flush=True)
    outcomes = []
    for sid in chosen:
        log(sid, FAULTS[sid])
        out = run_scenario(sid)
        outcomes.append(out)
        log(sid, f"{out.wall_s:.0f} s: seen {out.seen or out.error} — lost {out.lost or '–'}")
    meta["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average after: {' '.join(meta['loadavg_after'])}")
    print("scenario wall times: " + ", ".join(f"{o.id}: {o.wall_s:.0f} s" for o in outcomes))
    for o in outcomes:
        for line in o.facts.get("server_tracebacks", [])[:5]:
            print(f"[{o.id}] server traceback: {line}")
    print(table(outcomes))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "scenarios": [asdict(o) for o in outcomes]}, indent=1,
                                        default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
