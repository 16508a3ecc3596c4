"""End to end in a real browser: `streamlit run app.py` driven by headless Chromium through Playwright.

Opens every page (no stException), trains on the toy corpus and watches the loss chart gain points, stops it,
renders an attention heatmap and top-k bars, rejects bad uploads on the page, checks that closing a tab stops its
training, and saves a full-page screenshot of every page under $BERT_SCREENSHOT_DIR (default
test-artifacts/screenshots; also docs/screenshots when BERT_UPDATE_SCREENSHOTS=1).

Uses the system's Chromium (/usr/bin/chromium); never downloads a browser. Skips when there is none, unless
BERT_REQUIRE_BROWSER=1 (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]
PAGES = {  # URL path -> screenshot name
    "": "home",
    "Tokens_and_masking": "tokens-and-masking",
    "Train": "train",
    "Attention": "attention",
    "Predictions": "predictions",
    "Fine-tune": "fine-tune",
    "Export": "export",
}
CLOSED_TAB_LIMIT_S = 10  # a closed tab's training process is gone within this (default grace period)


def _unavailable(reason: str):
    if os.environ.get("BERT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"BERT_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium() -> str:
    path = os.environ.get("BERT_CHROMIUM") or next((p for p in CHROMIUM_CANDIDATES if Path(p).exists()), None)
    path = path or shutil.which("chromium")
    if not path:
        _unavailable("no Chromium found (install Debian's chromium package, or set BERT_CHROMIUM)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright Python package is not installed")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def screenshot_dirs() -> list[Path]:
    dirs = [Path(os.environ.get("BERT_SCREENSHOT_DIR", ROOT / "test-artifacts" / "screenshots"))]
    if os.environ.get("BERT_UPDATE_SCREENSHOTS") == "1":
        dirs.append(ROOT / "docs" / "screenshots")
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    return dirs


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    """The shipped checkpoint when it exists (real screenshots), else a nano model trained briefly on toy text."""
    from bert_core.paths import DEFAULT_CHECKPOINT

    if (DEFAULT_CHECKPOINT / "config.json").is_file():
        return DEFAULT_CHECKPOINT
    from tests.app_fixtures import train_nano_checkpoint

    return train_nano_checkpoint(tmp_path_factory.mktemp("browser-ckpt") / "nano-toy", documents=200, steps=40,
                                 batch_size=16, seq_len=64, vocab_size=500, max_positions=128)


def _make_decoy(folder: Path) -> Path:
    """A folder of somebody's files, for the tests that type its path into the app's boxes."""
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("somebody's notes")
    (folder / "sub" / "data.bin").write_bytes(os.urandom(256))
    return folder


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".git" not in p.parts and "__pycache__" not in p.parts and ".venv" not in p.parts
            and "test-artifacts" not in p.parts}


class _Server(tuple):
    """(base URL, log path), with the server's pid and its runs folder as attributes."""

    def __new__(cls, base: str, log_path: Path, pid: int, runs: Path):
        self = super().__new__(cls, (base, log_path))
        self.pid, self.runs = pid, runs
        return self


@pytest.fixture(scope="module")
def server_home(tmp_path_factory) -> Path:
    """The server's $HOME (so that `~` typed into a box names a folder the test watches)."""
    home = tmp_path_factory.mktemp("home")
    _make_decoy(home)
    return home


@pytest.fixture(scope="module")
def server(model_folder, tmp_path_factory, server_home):
    port = _free_port()
    log_path = tmp_path_factory.mktemp("streamlit") / "server.log"
    runs = tmp_path_factory.mktemp("app-runs")
    # Local mode (the default), where the sidebar takes server paths: the riskier of the two modes. The session
    # grace period is the default one, so the closed-tab test measures what a user gets.
    env = dict(os.environ, BERT_EXPLORER_CHECKPOINT=str(model_folder), BERT_EXPLORER_MAX_TRAININGS="2",
               PYTHONUNBUFFERED="1", HOME=str(server_home), BERT_EXPLORER_RUNS_DIR=str(runs))
    env.pop("BERT_EXPLORER_SESSION_GRACE_S", None)
    env.pop("BERT_EXPLORER_PUBLIC", None)
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"streamlit did not come up:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        yield _Server(f"http://127.0.0.1:{port}", log_path, pid=proc.pid, runs=runs)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def _settle(page, timeout: float = 90.0) -> None:
    """Wait until the script has finished running (the status widget stays hidden for a moment)."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout * 1000)
    page.wait_for_selector("h1", timeout=timeout * 1000)
    deadline, quiet_since = time.time() + timeout, None
    while time.time() < deadline:
        running = page.locator('[data-testid="stStatusWidget"]').count() > 0 or \
            page.locator('[data-testid="stSpinner"]').count() > 0
        if running:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.time()
        elif time.time() - quiet_since > 1.0:
            return
        time.sleep(0.2)
    raise AssertionError("the page kept running")


def _no_exception(page, where: str) -> None:
    n = page.locator('[data-testid="stException"]').count()
    assert n == 0, f"{where}: {page.locator('[data-testid=stException]').first.inner_text()[:2000]}"


def _shoot(page, name: str, dirs: list[Path]) -> None:
    height = page.evaluate(
        "() => Math.max(...Array.from(document.querySelectorAll('[data-testid=stMain], section.main, "
        "[data-testid=stAppViewContainer]')).map(e => e.scrollHeight), document.body.scrollHeight)")
    page.set_viewport_size({"width": 1400, "height": int(min(max(height, 900), 8000))})
    time.sleep(0.8)  # plotly relayouts on resize
    for d in dirs:
        page.screenshot(path=str(d / f"{name}.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})


def _trace_lengths(page) -> list[list[int]]:
    return page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                         ".map(d => (d.data || []).map(t => (t.x || []).length))")


def _open(page, base: str, path: str, query: str = "") -> None:
    page.goto(f"{base}/{path}{query}")
    _settle(page)


def test_every_page_opens_without_exception_and_is_screenshotted(server, browser, screenshot_dirs):
    base, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    outside: list[str] = []  # the app must work offline: no CDN fonts, scripts or emoji images
    page.on("request", lambda r: None if r.url.startswith((base, "data:", "blob:")) else outside.append(r.url))
    try:
        for path, name in PAGES.items():
            if path == "Fine-tune" and not (ROOT / "pages" / "5_Fine-tune.py").exists():
                continue
            _open(page, base, path)
            _no_exception(page, path or "home")
            if path == "Attention":
                page.get_by_role("tab", name="Head view").click()
                time.sleep(1.0)
            _shoot(page, name, screenshot_dirs)
        assert not outside, f"requests left the server: {outside[:5]}"
    finally:
        page.close()


def test_attention_heatmap_and_topk_bars_render(server, browser):
    base, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _open(page, base, "Attention")
        page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=30_000)
        page.get_by_role("tab", name="Head view").click()
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .heatmaplayer').length >= 2",
                               timeout=30_000)
        _no_exception(page, "attention")
        _open(page, base, "Predictions")
        page.wait_for_selector(".js-plotly-plot .barlayer .point", timeout=30_000)
        bars = page.evaluate("() => document.querySelectorAll('.js-plotly-plot .barlayer .point').length")
        assert bars >= 5
        assert page.get_by_text("P(B follows A)").count() >= 1
        _no_exception(page, "predictions")
    finally:
        page.close()


def test_training_run_gains_points_and_stops(server, browser, screenshot_dirs):
    base, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        # Long enough to be stopped by hand, short enough that its warmup (10%) is over when the screenshot is taken.
        _open(page, base, "Train", "?train_steps=5000&train_eval_every=100&train_probe_every=100")
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start").click()
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".some(d => (d.data || []).some(t => (t.x || []).length >= 3))", timeout=120_000)
        first = max(max(x, default=0) for x in _trace_lengths(page))
        time.sleep(4)
        later = max(max(x, default=0) for x in _trace_lengths(page))
        assert later > first, "the live loss chart did not gain points"
        _no_exception(page, "train (running)")
        _shoot(page, "train-running", screenshot_dirs)
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop").click()
        page.get_by_text("Run stopped at step").wait_for(timeout=60_000)
        _settle(page)
        stopped = max(max(x, default=0) for x in _trace_lengths(page))
        time.sleep(3)
        assert max(max(x, default=0) for x in _trace_lengths(page)) == stopped, "points kept coming after Stop"
        _no_exception(page, "train (stopped)")
        # The session's model is now selectable and drives the other pages.
        page.get_by_test_id("stRadioGroup").get_by_text("Model trained in this session").click()
        _settle(page)
        page.get_by_role("link", name="Attention").first.click()
        _settle(page)
        page.get_by_role("tab", name="Time-lapse").click()
        time.sleep(1)
        _no_exception(page, "attention (session model)")
        _shoot(page, "attention-timelapse", screenshot_dirs)
    finally:
        page.close()


@pytest.mark.parametrize("content, message", [(b"", "is empty"), (b"\x00\x01binary\x00", "binary")])
def test_bad_upload_gets_a_message_not_a_traceback(server, browser, tmp_path, content, message):
    base, _ = server
    upload = tmp_path / "notes.txt"
    upload.write_bytes(content)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _open(page, base, "Train", "?train_corpus=upload")
        page.locator('[data-testid="stFileUploader"] input[type=file]').set_input_files(str(upload))
        _settle(page)
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start").click()
        _settle(page)
        alert = page.locator('[data-testid="stAlert"]', has_text=message)
        alert.first.wait_for(timeout=30_000)
        _no_exception(page, "train upload")
    finally:
        page.close()


def _training_children(server_pid: int) -> set[int]:
    """Pids of the server's training processes (`python -m bert_core.training_process`), read from /proc."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server_pid and b"bert_core.training_process" in cmdline:
            found.add(int(proc.name))
    return found


def test_closing_the_tab_frees_its_training_process_within_10_s(server, browser):
    base, log_path = server
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to see the training process")
    before = _training_children(server.pid)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    _open(page, base, "Train", "?train_steps=100000")
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start").click()
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
        ".some(d => (d.data || []).some(t => (t.x || []).length >= 2))", timeout=120_000)
    mine = _training_children(server.pid) - before
    assert mine, "no training process was found for the run"
    closed = time.monotonic()
    context.close()
    while _training_children(server.pid) & mine and time.monotonic() - closed < 60:
        time.sleep(0.2)
    freed_after = time.monotonic() - closed
    assert not _training_children(server.pid) & mine, "the training process outlived its closed tab by a minute"
    assert freed_after <= CLOSED_TAB_LIMIT_S, f"the closed tab's training process ran {freed_after:.1f} s more"
    assert "stopping the training of closed session" in log_path.read_text()


def test_typed_paths_never_touch_the_servers_files(server, browser, server_home, tmp_path):
    """Somebody's folder, named absolutely, relatively with '..', as '~' and as nothing, typed into every box
    that takes a path or a name (the sidebar's checkpoint folder on every page, the Train page's run name), with
    every button beside it pressed: the folder, the server's home and the app's own files stay as they were."""
    base, _ = server
    decoy = _make_decoy(tmp_path / "decoy")
    typed = [str(decoy), os.path.relpath(decoy, ROOT), "~", ""]
    assert ".." in typed[1]
    watched = {"decoy": (decoy, _snapshot(decoy)), "home": (server_home, _snapshot(server_home)),
               "app": (ROOT, _snapshot(ROOT))}
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _open(page, base, "Train", "?train_steps=3&train_eval_every=0&train_probe_every=0")
        main = page.get_by_test_id("stMainBlockContainer")
        main.get_by_role("button", name="Start").click()
        page.get_by_text("Run finished at step 3").wait_for(timeout=120_000)
        _settle(page)
        page.get_by_text("Save this run on the server").click()
        for text in typed:
            box = page.get_by_label("Name", exact=True)
            box.fill(text)
            box.press("Enter")
            _settle(page)
            main.get_by_role("button", name="Save", exact=True).click()
            _settle(page)
            page.locator('[data-testid="stAlert"]', has_text="Saved as").first.wait_for(timeout=30_000)
            _no_exception(page, f"save as {text!r}")
        saved = sorted(p.name for p in server.runs.iterdir())
        assert set(saved) <= {"decoy", "tmp", "run", "run-2"} and saved, saved
        for path in [p for p in PAGES if p != "Fine-tune" or (ROOT / "pages" / "5_Fine-tune.py").exists()]:
            _open(page, base, path)
            page.get_by_test_id("stSidebar").get_by_text("Checkpoint folder", exact=True).click()
            _settle(page)
            for text in typed:
                box = page.get_by_label("Checkpoint folder on the server")
                box.fill(text)
                box.press("Enter")
                _settle(page)
                _no_exception(page, f"{path or 'home'}: folder {text!r}")
                alerts = page.get_by_test_id("stSidebar").locator('[data-testid="stAlert"]')
                assert alerts.count() >= 1, f"{path}: no message for {text!r}"
    finally:
        page.close()
    for name, (folder, before) in watched.items():
        assert _snapshot(folder) == before, f"{name} folder changed"
