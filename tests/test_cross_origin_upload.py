"""An upload from inside a page of another site, as a Hugging Face Space shows the app (huggingface.co's page holds
it in an iframe of *.hf.space): the image's Streamlit settings (the Dockerfile's STREAMLIT_* variables) accept it,
whether the visitor's browser keeps third-party cookies or blocks them (Safari's default, a private window, and this
headless Chromium's own default); the laptop's settings refuse it (HTTP 403), as every Space did before.

Two different sites on one machine: the page of the other site is served from http://127.0.0.1, the app from
http://localhost (a browser treats localhost as a secure origin, so a cookie marked Secure behaves there as on the
Space's https). The file is a CSV for the Fine-tune page: once the server has it, the page lists its columns.
benchmarks/space_image.sh runs the same upload (benchmarks/space_image_checks.py) against the built image.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from benchmarks.space_image_checks import other_site, upload_in_frame
from tests.app_server import free_port, start_app_server
from tests.browser_support import CHROMIUM_ARGS, stop_server

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
def site(tmp_path_factory):
    """The other site: a folder of pages served from 127.0.0.1."""
    folder = tmp_path_factory.mktemp("other-site")
    with other_site(folder) as url:
        yield folder, url


@pytest.fixture(scope="module", params=["image", "laptop"])
def app(request, tmp_path_factory):
    """The app in public mode on localhost, with the image's Streamlit settings or with none (a laptop's, and every
    image's before)."""
    settings = image_streamlit_settings() if request.param == "image" else {}
    folder = tmp_path_factory.mktemp("app")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}   # only the settings under test
    env.update(settings, BERT_EXPLORER_PUBLIC="1", BERT_EXPLORER_RUNS_DIR=str(folder / "runs"),
               BERT_EXPLORER_STATE_DIR=str(folder / "state"), PYTHONUNBUFFERED="1")
    port = free_port()
    with open(folder / "server.log", "w") as log:
        proc = start_app_server(port, env, log, timeout_s=120)
        try:
            yield request.param, f"http://localhost:{port}"
        finally:
            stop_server(proc)


def _browser(pw, chromium, profile: Path, third_party_cookies: bool):
    """A Chromium that keeps third-party cookies (a desktop browser's default) or blocks them (this Chromium's
    default, and Safari's)."""
    (profile / "Default").mkdir(parents=True)
    if third_party_cookies:
        prefs = {"profile": {"cookie_controls_mode": 0, "block_third_party_cookies": False}}
        (profile / "Default" / "Preferences").write_text(json.dumps(prefs))
    return pw.chromium.launch_persistent_context(str(profile), executable_path=chromium, args=CHROMIUM_ARGS,
                                                 headless=True, viewport={"width": 1400, "height": 1000})


@pytest.mark.parametrize("third_party_cookies", [True, False], ids=["keeps-3p-cookies", "blocks-3p-cookies"])
def test_an_upload_inside_another_sites_page(app, site, chromium, screenshot_dirs, tmp_path,  # noqa: F811
                                             third_party_cookies):
    from playwright.sync_api import sync_playwright

    which, base = app
    csv = tmp_path / "my-labels.csv"
    csv.write_text("label,text\npositive,a fine film\nnegative,a dull film\n", encoding="utf-8")
    shot = screenshot_dirs[0] / f"cross-origin-upload-{which}-{'keeps' if third_party_cookies else 'blocks'}-3p.png"
    with sync_playwright() as pw:
        context = _browser(pw, chromium, tmp_path / "profile", third_party_cookies)
        try:
            outcome = upload_in_frame(context.new_page(), site, base, csv, shot)
        finally:
            context.close()
    assert outcome == ("accepted" if which == "image" else "refused"), (which, third_party_cookies)
