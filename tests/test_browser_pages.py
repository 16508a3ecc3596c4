"""In a real browser (Chromium through Playwright, `streamlit run app.py`): every page opens without an exception
and is screenshotted; attention heatmaps and top-k bars render; bad uploads get a message on the page; paths typed
into the app's boxes never touch the server's files."""

from __future__ import annotations

import os
import time

import pytest

from tests.browser_support import PAGES, ROOT, _make_decoy, _no_exception, _open, _settle, _shoot, _snapshot

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out


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
        page.get_by_role("tab", name="Head view").click()   # a lazy tab: its heatmap is drawn once it is open
        page.wait_for_function("() => Array.from(document.querySelectorAll('.js-plotly-plot')).some(d => "
                               "d.offsetParent !== null && String((d.layout.title || {}).text).includes('Layer 1, "
                               "head 1') && d.querySelector('.heatmaplayer'))", timeout=30_000)
        _no_exception(page, "attention")
        _open(page, base, "Predictions")
        page.wait_for_selector(".js-plotly-plot .barlayer .point", timeout=30_000)
        bars = page.evaluate("() => document.querySelectorAll('.js-plotly-plot .barlayer .point').length")
        assert bars >= 5
        assert page.get_by_text("P(B follows A)").count() >= 1
        _no_exception(page, "predictions")
    finally:
        page.close()


@pytest.mark.long  # a long check (`--long`); test_app and test_public_server check bad uploads through AppTest
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
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start", exact=True).click()
        _settle(page)
        alert = page.locator('[data-testid="stAlert"]', has_text=message)
        alert.first.wait_for(timeout=30_000)
        _no_exception(page, "train upload")
    finally:
        page.close()


@pytest.mark.long  # a long check (`--long`); test_public_server checks the same rules through AppTest
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
        main.get_by_role("button", name="Start", exact=True).click()
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
        # Every page's sidebar box (one function draws them all) gets the riskiest path, '..' climbing out of the
        # app's folder; one page gets all four.
        pages = [p for p in PAGES if p != "Fine-tune" or (ROOT / "pages" / "5_Fine-tune.py").exists()]
        for path in pages:
            _open(page, base, path)
            sidebar.get_by_text("Checkpoint folder", exact=True).click()
            box = page.get_by_label("Checkpoint folder on the server")
            box.wait_for(timeout=30_000)
            tries = list(enumerate(zip(typed, expected)))
            for i, (text, says) in (tries if path == "Attention" else tries[1:2]):
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


@pytest.mark.long  # a long check (`--long`)
def test_leaving_a_page_and_coming_back_keeps_its_settings_and_the_model_choice_is_in_the_url(server, browser):
    base, _ = server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        _open(page, base, "Attention")
        mine = "the old lighthouse keeper waved at the ships ."
        box = page.get_by_role("textbox", name="Sentence A")
        box.fill(mine)
        box.press("Control+Enter")
        _settle(page)
        sidebar = page.get_by_test_id("stSidebar")
        assert "model=shipped" in page.url, page.url
        sidebar.get_by_role("link", name="Predictions").click()
        _settle(page)
        typed = "a [MASK] of my own ."
        box = page.get_by_role("textbox", name="Text with one or more [MASK]")
        box.fill(typed)
        box.press("Control+Enter")
        _settle(page)
        sidebar.get_by_role("link", name="Attention").click()
        _settle(page)
        assert page.get_by_role("textbox", name="Sentence A").input_value() == mine
        sidebar.get_by_role("link", name="Predictions").click()
        _settle(page)
        assert page.get_by_role("textbox", name="Text with one or more [MASK]").input_value() == typed
        _no_exception(page, "predictions (after navigating)")
    finally:
        page.close()
