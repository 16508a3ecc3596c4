"""An upload from inside a page of another site, as a Hugging Face Space shows the app (huggingface.co's page holds
it in an iframe of *.hf.space): the image's Streamlit settings (the Dockerfile's STREAMLIT_* variables) accept it,
whether the visitor's browser keeps third-party cookies or blocks them (Safari's default, a private window, and this
headless Chromium's own default); the laptop's settings refuse it (HTTP 403), as every Space did before.

Two different sites on one machine: the page of the other site is served from http://127.0.0.1, the app from
http://localhost (a browser treats localhost as a secure origin, so a cookie marked Secure behaves there as on the
Space's https). The file is a CSV for the Fine-tune page: once the server has it, the page lists its columns.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pytest

from bert_core.serve.app_server import free_port, start_app_server
from tests.browser_support import CHROMIUM_ARGS, chromium, screenshot_dirs  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def image_streamlit_settings() -> dict[str, str]:
    """The STREAMLIT_* variables the Dockerfile sets for the app (its ENV lines, `NAME=value` pairs)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    found = {}
    for line in text.splitlines():
        if line.strip().startswith("ENV "):
            found.update(dict(re.findall(r"(STREAMLIT_[A-Z_]+)=(\S+)", line)))
    return found


@pytest.fixture(scope="module")
def other_site(tmp_path_factory):
    """A page server on 127.0.0.1 (another site than the app's localhost) for the pages that frame the app."""
    folder = tmp_path_factory.mktemp("other-site")
    port = free_port()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield folder, f"http://127.0.0.1:{port}"
    finally:
        srv.shutdown()


def _app(tmp_path_factory, settings: dict[str, str]):
    port = free_port()
    folder = tmp_path_factory.mktemp("app")
    env = dict(os.environ, BERT_EXPLORER_PUBLIC="1", BERT_EXPLORER_RUNS_DIR=str(folder / "runs"),
               BERT_EXPLORER_STATE_DIR=str(folder / "state"), PYTHONUNBUFFERED="1", **settings)
    for name in [k for k in env if k.startswith("STREAMLIT_") and k not in settings]:
        del env[name]   # only the settings under test
    log = open(folder / "server.log", "w")
    proc = start_app_server(port, env, log, timeout_s=120)
    return proc, log, f"http://localhost:{port}"


@pytest.fixture(scope="module", params=["image", "laptop"])
def app(request, tmp_path_factory):
    """The app with the image's Streamlit settings, or with none (a laptop's, and every image's before)."""
    settings = image_streamlit_settings() if request.param == "image" else {}
    proc, log, base = _app(tmp_path_factory, settings)
    try:
        yield request.param, base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _browser(pw, chromium, profile: Path, third_party_cookies: bool):
    """A Chromium that keeps third-party cookies (a desktop browser's default) or blocks them (this Chromium's
    default, and Safari's)."""
    (profile / "Default").mkdir(parents=True)
    if third_party_cookies:
        prefs = {"profile": {"cookie_controls_mode": 0, "block_third_party_cookies": False}}
        (profile / "Default" / "Preferences").write_text(json.dumps(prefs))
    return pw.chromium.launch_persistent_context(str(profile), executable_path=chromium, args=CHROMIUM_ARGS,
                                                 headless=True, viewport={"width": 1400, "height": 1000})


def _upload_in_frame(context, other_site, base: str, csv: Path, shot: str, dirs) -> str:
    """Open the other site's page framing the app's Fine-tune page, upload `csv` inside the frame; 'accepted' once
    the page lists the file's columns, 'refused' once the file is marked failed."""
    folder, site = other_site
    (folder / f"{shot}.html").write_text(
        f'<!doctype html><title>another site</title><h3>A page of another site ({site}) framing the app</h3>'
        f'<iframe id="app" src="{base}/Fine-tune?ft_data=upload" width="1360" height="900"></iframe>')
    page = context.new_page()
    try:
        page.goto(f"{site}/{shot}.html")
        frame = page.frame_locator("#app")
        box = frame.locator('[data-testid="stFileUploader"] input[type=file]')
        box.wait_for(state="attached", timeout=120_000)
        box.set_input_files(str(csv))
        accepted = frame.get_by_text("Text column(s)", exact=False)
        refused = frame.locator('[data-testid="stFileChipIconError"]')
        accepted.or_(refused).first.wait_for(timeout=60_000)
        outcome = "accepted" if accepted.count() else "refused"
        for d in dirs:
            page.screenshot(path=str(d / f"{shot}.png"))
        return outcome
    finally:
        page.close()


@pytest.mark.parametrize("third_party_cookies", [True, False], ids=["keeps-3p-cookies", "blocks-3p-cookies"])
def test_an_upload_inside_another_sites_page(app, other_site, chromium, screenshot_dirs, tmp_path,  # noqa: F811
                                             third_party_cookies):
    from playwright.sync_api import sync_playwright

    which, base = app
    csv = tmp_path / "my-labels.csv"
    csv.write_text("label,text\npositive,a fine film\nnegative,a dull film\n", encoding="utf-8")
    shot = f"cross-origin-upload-{which}-{'keeps' if third_party_cookies else 'blocks'}-3p-cookies"
    with sync_playwright() as pw:
        context = _browser(pw, chromium, tmp_path / "profile", third_party_cookies)
        try:
            outcome = _upload_in_frame(context, other_site, base, csv, shot, screenshot_dirs)
        finally:
            context.close()
    assert outcome == ("accepted" if which == "image" else "refused"), (which, third_party_cookies)
