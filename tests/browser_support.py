"""What the browser tests share: `streamlit run app.py` on a free port, driven by headless Chromium through
Playwright, and helpers to wait for a page, read it and screenshot it. tests/conftest.py registers this module as a
plugin, so a test module asks for the fixtures by name and imports only the helpers it calls. Each test module gets
its own server and browser (module scope), so the modules run in parallel on pytest-xdist workers.

Screenshots go under $BERT_SCREENSHOT_DIR (default test-artifacts/screenshots; also docs/screenshots when
BERT_UPDATE_SCREENSHOTS=1). Uses the system's Chromium (/usr/bin/chromium); never downloads a browser. Skips
when there is none, unless BERT_REQUIRE_BROWSER=1 (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.app_server import free_port, start_app_server

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
UNWATCHED_S = 6           # the test server's grace for a run nobody watches (the default, 10 min, is too long)
DEFAULT_RUN_TARGET = 0.50  # held-out masked-token accuracy of the Train page's default run (docs/lessons.md, step 2)
FEEDBACK_S = 2.0           # a pressed Start or Stop says what it is doing within this


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
    """Every file under `folder` (relative path -> content); for the repository, the files git tracks (the app's
    own files), so that what other tests write beside them (caches, artifacts) does not count."""
    if folder == ROOT:
        tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        paths = [ROOT / name for name in tracked.decode().split("\0") if name]
        if os.environ.get("BERT_UPDATE_SCREENSHOTS") == "1":  # the tests themselves rewrite these, on purpose
            paths = [p for p in paths if not p.is_relative_to(ROOT / "docs" / "screenshots")]
    else:
        paths = sorted(folder.rglob("*"))
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in paths if p.is_file()}


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
    port = free_port()
    log_path = tmp_path_factory.mktemp("streamlit") / "server.log"
    runs = tmp_path_factory.mktemp("app-runs")
    # Local mode (the default), where the sidebar takes server paths: the riskier of the two modes. Two slots, so
    # that two tests' runs never queue behind each other; a short unwatched grace, so a test can see it end.
    env = dict(os.environ, BERT_EXPLORER_CHECKPOINT=str(model_folder), BERT_EXPLORER_MAX_TRAININGS="2",
               PYTHONUNBUFFERED="1", HOME=str(server_home), BERT_EXPLORER_RUNS_DIR=str(runs),
               BERT_EXPLORER_UNWATCHED_S=str(UNWATCHED_S))
    env.pop("BERT_EXPLORER_PUBLIC", None)
    # Its run records beside its own runs folder: not the test process's state folder, whose runs (other tests')
    # it would read back as it starts.
    env.pop("BERT_EXPLORER_STATE_DIR", None)
    log = open(log_path, "w")
    try:
        proc = start_app_server(port, env, log, timeout_s=90)
    except RuntimeError:
        log.close()
        raise
    try:
        yield _Server(f"http://127.0.0.1:{port}", log_path, pid=proc.pid, runs=runs)
    finally:
        stop_server(proc)
        log.close()


def stop_server(proc: subprocess.Popen) -> None:
    """End a test's app server: SIGTERM, then SIGKILL if it has not gone within 15 s."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


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
    """Wait until the script has finished running: the status widget stays hidden for half a second. The browser
    shows it as soon as a rerun is requested (Streamlit's RERUN_REQUESTED state, before the server answers), so a
    click is never mistaken for a settled page; a longer wait would only add up over the suite's many settles."""
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
        elif time.time() - quiet_since > 0.5:
            return
        time.sleep(0.1)
    raise AssertionError("the page kept running")


def _no_exception(page, where: str) -> None:
    n = page.locator('[data-testid="stException"]').count()
    assert n == 0, f"{where}: {page.locator('[data-testid=stException]').first.inner_text()[:2000]}"


def _shoot(page, name: str, dirs: list[Path]) -> None:
    """A full-page screenshot at the page's own width (1400 pixels, or a projector's 1280), its size restored."""
    size = page.viewport_size or {"width": 1400, "height": 1000}
    height = page.evaluate(
        "() => Math.max(...Array.from(document.querySelectorAll('[data-testid=stMain], section.main, "
        "[data-testid=stAppViewContainer]')).map(e => e.scrollHeight), document.body.scrollHeight)")
    page.set_viewport_size({"width": size["width"], "height": int(min(max(height, size["height"]), 8000))})
    time.sleep(0.8)  # plotly relayouts on resize
    for d in dirs:
        page.screenshot(path=str(d / f"{name}.png"), full_page=True)
    page.set_viewport_size(size)


def _trace_lengths(page) -> list[list[int]]:
    # Plotly's own traces (_fullData): a figure of numpy arrays (the word map) comes as typed-array specs
    # ({dtype, bdata}) in `data`, which Plotly decodes there.
    return page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
                         ".map(d => (d._fullData || d.data || []).map(t => (t.x || []).length || 0))")


def _open(page, base: str, path: str, query: str = "") -> None:
    page.goto(f"{base}/{path}{query}")
    _settle(page)


def _filled_value(page, name: str, timeout: float = 30.0) -> str:
    """The value of the textbox named `name` once it holds text: a page under load can show a text box a moment
    before its value arrives (seen once in CI, on a cold server's first page), so a read right after `_settle`
    may find it empty. Still empty after `timeout` seconds is a failure of the page, not of the wait."""
    box = page.get_by_role("textbox", name=name)
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = box.input_value()
        if value.strip():
            return value
        time.sleep(0.2)
    return box.input_value()


def _words(sentence: str) -> set[str]:
    """The lower-cased words of a probe sentence, [MASK] and punctuation left out."""
    return {w.strip(".,!?;:").lower() for w in sentence.replace("[MASK]", " ").split() if w.strip(".,!?;:")}


def _metric(page, label: str) -> str:
    return page.locator('[data-testid="stMetric"]', has_text=label).locator(
        '[data-testid="stMetricValue"]').first.inner_text()


def _visible_plots(page, title: str) -> list[dict]:
    """Layout facts of the visible Plotly charts whose title contains `title`."""
    return page.evaluate(
        """(title) => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .filter(d => d.offsetParent !== null && d.layout && d.layout.title
                         && String(d.layout.title.text || d.layout.title).includes(title))
            .map(d => ({cmin: d.layout.coloraxis && d.layout.coloraxis.cmin,
                        cmax: d.layout.coloraxis && d.layout.coloraxis.cmax,
                        names: (d.data || []).map(t => t.name),
                        colors: (d.data || []).map(t => t.line && t.line.color)}))""", title)


# Each visible text of the chart whose title holds `title`: its size, fill, characters, and how far it runs past
# the chart's left or right edge (0 when inside).
READ_CHART_TEXT = """(title) => {
    const d = Array.from(document.querySelectorAll('.js-plotly-plot')).find(d => d.offsetParent !== null
        && String((d.layout.title || {}).text || '').includes(title));
    const box = d.getBoundingClientRect();
    return Array.from(d.querySelectorAll('svg text')).filter(t => {
        const r = t.getBoundingClientRect(); return r.width > 0 && r.height > 0 && t.textContent.trim() !== '';
    }).map(t => { const r = t.getBoundingClientRect(), s = getComputedStyle(t);
        return {size: parseFloat(s.fontSize), fill: s.fill, text: t.textContent.slice(0, 40),
                out: Math.max(0, box.left - r.left, r.right - box.right)}; });
}"""


def _rgb(fill: str) -> str:
    """'rgb(r, g, b)' (or rgba) as '#rrggbb'."""
    parts = [float(x) for x in fill[fill.index("(") + 1:-1].split(",")[:3]]
    return "#" + "".join(f"{round(v):02x}" for v in parts)


def _chart_text(page, title: str) -> list[dict]:
    """The visible texts of the chart titled `title`, having checked that a projector reads them all: none under
    MIN_FONT_PX, none too light, none past the chart's edge."""
    from bert_core.inspect.figure_floor import MIN_FONT_PX, too_light

    texts = page.evaluate(READ_CHART_TEXT, title)
    assert not [t for t in texts if t["size"] < MIN_FONT_PX - 0.01], (title, texts)
    assert not [t for t in texts if t["fill"].startswith("rgb") and too_light(_rgb(t["fill"]))], (title, texts)
    assert not [t for t in texts if t["out"] > 1], (title, [t for t in texts if t["out"] > 1])
    return texts


def _training_children(server_pid: int) -> set[int]:
    """Pids of the server's training processes (forked by its launcher, or spawned), read from /proc."""
    from bert_core.serve.launcher import training_processes

    return training_processes(server_pid)
