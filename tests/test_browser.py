"""End to end in a real browser: `streamlit run app.py` driven by headless Chromium through Playwright.

Opens every page (no stException); walks the README's classroom walkthrough with the Train page's defaults (the
probe sentences drawn from the held-out toy stories, the default run past 50% held-out accuracy, the time-lapse on
one colour scale, the guesses chart, a fine-tuning run whose mistake tables show labels and confidence); renders
an attention heatmap and top-k bars, rejects bad uploads on the page, stops and resumes a run, checks that closing
a tab stops its training, and saves a full-page screenshot of every page under $BERT_SCREENSHOT_DIR (default
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
DEFAULT_RUN_TARGET = 0.50  # held-out masked-token accuracy of the Train page's default run (README, step 2)
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
    """Every file under `folder` (relative path -> content); for the repository, the files git tracks (the app's
    own files), so that what other tests write beside them (caches, artifacts) does not count."""
    if folder == ROOT:
        tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        paths = [ROOT / name for name in tracked.decode().split("\0") if name]
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


def test_readme_walkthrough_with_the_defaults(server, browser, screenshot_dirs):
    """README, "A classroom walkthrough", steps 2 to 4, as a student does them: the Train page's defaults untouched,
    Start, the run to its end, then the Attention time-lapse and the Predictions page on the trained model."""
    from bert_core.toy_grammar import toy_vocabulary

    base, _ = server
    vocab = toy_vocabulary()
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _open(page, base, "Train")
        sidebar = page.get_by_test_id("stSidebar")
        assert sidebar.get_by_role("link", name="Home", exact=True).count() == 1
        assert sidebar.get_by_role("link", name="app", exact=True).count() == 0
        # The probe sentences come from the held-out toy stories: every word is one the toy grammar writes.
        probes = page.get_by_role("textbox", name="Sentences the model fills in while it trains").input_value().splitlines()
        assert len(probes) == 4 and all("[MASK]" in p for p in probes), probes
        assert set().union(*map(_words, probes)) <= vocab, set().union(*map(_words, probes)) - vocab
        attention_probe = page.get_by_role("textbox", name="Sentence for the attention time-lapse").input_value()
        assert attention_probe and _words(attention_probe) <= vocab
        main = page.get_by_test_id("stMainBlockContainer")
        main.get_by_role("button", name="Start").click()
        page.get_by_text("Starting", exact=False).or_(page.get_by_text("Preparing", exact=False)).first.wait_for(
            timeout=FEEDBACK_S * 1000)
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".some(d => (d.data || []).some(t => (t.x || []).length >= 3))", timeout=120_000)
        first = max(max(x, default=0) for x in _trace_lengths(page))
        time.sleep(6)
        later = max(max(x, default=0) for x in _trace_lengths(page))
        assert later > first, "the live loss chart did not gain points"
        _no_exception(page, "train (running)")
        # Past the unigram plateau (step 1,000 of 2,000), the picture the README shows.
        page.get_by_text("running: step 1,", exact=False).or_(page.get_by_text("Run finished")).first.wait_for(
            timeout=300_000)
        _shoot(page, "train-running", screenshot_dirs)
        page.get_by_text("Run finished at step 2,000").wait_for(timeout=300_000)
        _settle(page)
        held_out = float(_metric(page, "Held-out MLM acc.").rstrip("%")) / 100
        assert held_out >= DEFAULT_RUN_TARGET, f"the default run ended at {held_out:.1%} held-out accuracy"
        # The probe table: the held-out sentences shown before Start, each with the model's guesses now.
        table = page.locator('[data-testid="stTable"]').last
        assert table.locator("tbody tr td").first.inner_text() == probes[0]
        assert "%" in table.locator("tbody tr").first.locator("td").nth(1).inner_text()
        # A finished run has nothing to resume: the page says so and offers a new run from its weights.
        assert main.get_by_role("button", name="Resume").is_disabled()
        assert page.get_by_text("This run has finished").count() == 1
        assert main.get_by_role("button", name="Train on from these weights").count() == 1
        _no_exception(page, "train (finished)")
        _shoot(page, "train-finished", screenshot_dirs)

        # Step 3: the trained model's attention, and its time-lapse on one colour scale.
        sidebar.get_by_test_id("stRadioGroup").get_by_text("Model trained in this session").click()
        _settle(page)
        sidebar.get_by_role("link", name="Attention").click()
        _settle(page)
        assert _words(page.get_by_role("textbox", name="Sentence A").input_value()) <= vocab
        page.get_by_role("tab", name="Time-lapse").click()
        time.sleep(1)
        last = _visible_plots(page, "Model view")
        assert len(last) == 1 and (last[0]["cmin"], last[0]["cmax"]) == (0, 1), last
        _shoot(page, "attention-timelapse", screenshot_dirs)
        page.get_by_role("tab", name="Time-lapse").click()
        page.get_by_role("slider").first.focus()
        page.keyboard.press("Home")  # the first snapshot: step 0, an untrained model
        _settle(page)
        page.get_by_role("tab", name="Time-lapse").click()
        time.sleep(1)
        assert page.get_by_text("at step 0.", exact=False).count() >= 1
        start = _visible_plots(page, "Model view")
        assert len(start) == 1 and (start[0]["cmin"], start[0]["cmax"]) == (0, 1), start
        _no_exception(page, "attention (time-lapse)")
        _shoot(page, "attention-timelapse-step0", screenshot_dirs)
        page.get_by_role("tab", name="What heads do").click()
        time.sleep(1)
        assert page.get_by_text("Entropy", exact=False).first.is_visible()
        _shoot(page, "attention-heads", screenshot_dirs)

        # Step 4: predictions on a toy sentence, and how the guesses changed during training.
        sidebar.get_by_role("link", name="Predictions").click()
        _settle(page)
        assert _words(page.get_by_role("textbox", name="Text with one or more [MASK]").input_value()) <= vocab
        history = _visible_plots(page, "“")
        assert len(history) == 1, history
        names = history[0]["names"]
        assert 1 <= len(names) <= 6 and not {"[CLS]", "[SEP]", "[MASK]", "[PAD]"} & set(names), names
        assert len(set(history[0]["colors"])) == len(names)
        _no_exception(page, "predictions (session model)")
        _shoot(page, "predictions-trained", screenshot_dirs)
    finally:
        page.close()


def test_fine_tune_shows_status_at_once_and_tables_with_labels_and_confidence(server, browser, screenshot_dirs):
    """README step 5 with a short budget: the click says at once that work has started, and each model's most
    confident mistakes show the true label, the predicted label and the confidence on screen."""
    if not (ROOT / "pages" / "5_Fine-tune.py").exists():
        pytest.skip("no Fine-tune page in this install")
    base, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _open(page, base, "Fine-tune", "?ft_budget=3")
        main = page.get_by_test_id("stMainBlockContainer")
        main.get_by_role("button", name="Fine-tune both").click()
        page.get_by_text("Starting", exact=False).or_(page.get_by_text("Preparing", exact=False)).first.wait_for(
            timeout=FEEDBACK_S * 1000)
        page.get_by_role("heading", name="Results").wait_for(timeout=180_000)
        _settle(page)
        tables = page.locator('[data-testid="stTable"]')
        mistakes = [tables.nth(i) for i in range(tables.count())]
        assert len(mistakes) == 2, [t.inner_text()[:200] for t in mistakes]
        width = page.viewport_size["width"]
        for table in mistakes:
            headers = table.locator("th").all_inner_texts()
            assert headers[:3] == ["true label", "predicted", "confidence"], headers
            first_row = table.locator("tbody tr").first.locator("td").all_inner_texts()
            assert first_row[2].endswith("%") and first_row[0] and first_row[1], first_row
            for cell in table.locator("thead th").all()[:3]:
                box = cell.bounding_box()
                assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= width, "a column is off-screen"
        _no_exception(page, "fine-tune (results)")
        _shoot(page, "fine-tune-results", screenshot_dirs)
        from bert_core.paths import shared_data_dir

        shared = shared_data_dir()
        if shared is not None and (shared / "sentence_polarity" / "polarity.csv").is_file():
            page.get_by_text("Data and settings").click()  # folded once a run has results
            page.get_by_text("Movie-review polarity (2 classes)").click()
            _settle(page)
            page.get_by_text("2 labels (negative", exact=False).first.wait_for(timeout=30_000)
            assert page.get_by_text("(0 ", exact=False).count() == 0
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
    # Stop says so at once, the run stops, and Resume continues it (exactly: a stopped run keeps its schedule).
    main = page.get_by_test_id("stMainBlockContainer")
    main.get_by_role("button", name="Stop").click()
    page.get_by_text("Stopping", exact=False).first.wait_for(timeout=FEEDBACK_S * 1000)
    page.get_by_text("Run stopped at step").wait_for(timeout=60_000)
    _settle(page)
    stopped = max(max(x, default=0) for x in _trace_lengths(page))
    time.sleep(3)
    assert max(max(x, default=0) for x in _trace_lengths(page)) == stopped, "points kept coming after Stop"
    main.get_by_role("button", name="Resume").click()
    page.wait_for_function(
        f"() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
        f".some(d => (d.data || []).some(t => (t.x || []).length > {stopped}))", timeout=60_000)
    assert _training_children(server.pid) & mine, "Resume did not continue in the same training process"
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
        # What the sidebar says for each typed path: the folder it looked at (a relative path resolved) is not a
        # checkpoint, or type one.
        expected = [str(decoy), str(decoy.resolve()), str(server_home), "Type the path"]
        sidebar = page.get_by_test_id("stSidebar")
        for path in [p for p in PAGES if p != "Fine-tune" or (ROOT / "pages" / "5_Fine-tune.py").exists()]:
            _open(page, base, path)
            sidebar.get_by_text("Checkpoint folder", exact=True).click()
            box = page.get_by_label("Checkpoint folder on the server")
            box.wait_for(timeout=30_000)
            for i, (text, says) in enumerate(zip(typed, expected)):
                box.fill(text)
                box.press("Enter")
                if i and expected[i - 1] == says:
                    _settle(page)  # the same message as before: wait for the new answer, not the old one
                sidebar.locator('[data-testid="stAlert"]', has_text=says).first.wait_for(timeout=30_000)
                _no_exception(page, f"{path or 'home'}: folder {text!r}")
    finally:
        page.close()
    for name, (folder, before) in watched.items():
        assert _snapshot(folder) == before, f"{name} folder changed"
