"""The browser half of benchmarks/space_image.sh: drive the app in a running Space image as a visitor does.

    python benchmarks/space_image_checks.py first   BASE --started T0 --out DIR   # Home, the default run, a save,
                                                                                    # the saved run opened, an upload
                                                                                    # from another site's page
    python benchmarks/space_image_checks.py restart BASE --started T0 --out DIR   # after a restart: Home, the run's
                                                                                    # link, the saved run

BASE is the app's address as http://localhost:PORT (a browser keeps a Secure cookie there as on https); the page of
the other site is served from 127.0.0.1. T0 is the container's start (time.time()), for the time to Home. Writes
DIR/checks-PHASE.json (the figures and what each check found) and screenshots; exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import re
import sys
import threading
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
SAVE_NAME = "space-check"


def settle(page, timeout_s: float = 120) -> None:
    """Wait until the page's script has run: Streamlit's status widget gone for half a second."""
    page.wait_for_selector("h1", timeout=timeout_s * 1000)
    deadline, quiet = time.time() + timeout_s, None
    while time.time() < deadline:
        busy = page.locator('[data-testid="stStatusWidget"]').count() > 0
        quiet = None if busy else (quiet or time.time())
        if quiet and time.time() - quiet > 0.5:
            return
        time.sleep(0.1)
    raise AssertionError("the page kept running")


def no_trouble(page, where: str) -> None:
    """No traceback, and none of the messages a server that cannot write its files shows."""
    assert page.locator('[data-testid="stException"]').count() == 0, f"{where}: a traceback"
    text = page.locator("body").inner_text()
    for words in ("could not be written", "not on disk yet", "cannot write its runs folder"):
        if words in text:
            said = next(line for line in text.splitlines() if words in line)
            raise AssertionError(f"{where}: the page says {said!r}")


def home(page, base: str, started: float, out: Path, name: str) -> float:
    page.goto(base + "/", timeout=300_000)
    page.wait_for_selector("h1", timeout=300_000)
    seconds = time.time() - started
    settle(page)
    no_trouble(page, "Home")
    page.screenshot(path=str(out / f"{name}.png"))
    return seconds


def default_run(page, base: str, out: Path) -> dict:
    """The Train page's default run, Start to its end; then saved under SAVE_NAME."""
    page.goto(base + "/Train")
    settle(page)
    t0 = time.time()
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start", exact=True).click()
    page.get_by_text("Run finished at step", exact=False).first.wait_for(timeout=1_200_000)
    seconds = time.time() - t0
    settle(page)
    run_url = page.url.replace(base, "")
    print(f"the default run ended {seconds:.1f} s after Start: {run_url}", file=sys.stderr)
    page.screenshot(path=str(out / "space-train-finished.png"), full_page=True)
    no_trouble(page, "Train, the run finished")
    assert "run=" in run_url, run_url
    page.get_by_text("Save this run on the server").click()
    box = page.get_by_label("Name", exact=True)
    box.fill(SAVE_NAME)
    box.press("Enter")
    settle(page)
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Save", exact=True).click()
    page.locator('[data-testid="stAlert"]', has_text="Saved as").first.wait_for(timeout=120_000)
    settle(page)
    no_trouble(page, "Train, saved")
    finished = page.get_by_text("Run finished at step", exact=False).first.inner_text()
    held_out = re.search(r"Held-out MLM acc\.\s*([\d.]+%)", page.locator("body").inner_text())
    return {"run_url": run_url, "run_s": round(seconds, 1), "finished": finished,
            "held_out": held_out.group(1) if held_out else None}


def saved_run(page, base: str, out: Path, name: str) -> str:
    """The saved run opened from the sidebar's *A saved run* on the Predictions page."""
    page.goto(base + "/Predictions?model=saved")
    settle(page)
    sidebar = page.get_by_test_id("stSidebar")
    opened = sidebar.get_by_text("A saved run:", exact=False).first   # the active model's description
    opened.wait_for(timeout=60_000)
    chosen = sidebar.get_by_role("combobox", name="Saved run").input_value()
    assert chosen == SAVE_NAME, f"the saved run offered is {chosen!r}"
    assert sidebar.locator('[data-testid="stAlertContentError"]').count() == 0, "the saved run did not open"
    page.wait_for_selector(".js-plotly-plot", timeout=120_000)
    no_trouble(page, "Predictions with the saved run")
    page.screenshot(path=str(out / f"{name}.png"))
    return f"{chosen}: {opened.inner_text()}"


@contextlib.contextmanager
def other_site(folder: Path):
    """Serve `folder` from http://127.0.0.1:PORT, another site than the app's http://localhost; yields the address."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()


def upload_in_frame(page, site: tuple[Path, str], base: str, csv: Path, shot: Path) -> str:
    """Open a page of the other site (`site`: its folder and address) framing the app's Fine-tune page, upload `csv`
    inside the frame: 'accepted' once the page lists the file's columns, 'refused' once the file is marked failed
    (Streamlit's upload answered 403)."""
    folder, url = site
    (folder / f"{shot.stem}.html").write_text(
        f'<!doctype html><title>another site</title><h3>A page of another site ({url}) framing the app</h3>'
        f'<iframe id="app" src="{base}/Fine-tune?ft_data=upload" width="1360" height="900"></iframe>')
    page.goto(f"{url}/{shot.stem}.html")
    frame = page.frame_locator("#app")
    box = frame.locator('[data-testid="stFileUploader"] input[type=file]')
    box.wait_for(state="attached", timeout=120_000)
    box.set_input_files(str(csv))
    accepted = frame.get_by_text("Text column(s)", exact=False)
    refused = frame.locator('[data-testid="stFileChipIconError"]')
    accepted.or_(refused).first.wait_for(timeout=60_000)
    page.screenshot(path=str(shot))
    return "accepted" if accepted.count() else "refused"


def cross_origin_upload(browser, base: str, out: Path) -> str:
    """A CSV uploaded inside a page of another site that frames the Fine-tune page (the Space's iframe)."""
    folder = out / "other-site"
    folder.mkdir(exist_ok=True)
    csv = out / "my-labels.csv"
    csv.write_text("label,text\npositive,a fine film\nnegative,a dull film\n", encoding="utf-8")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        with other_site(folder) as url:
            return upload_in_frame(page, (folder, url), base, csv, out / "space-cross-origin-upload.png")
    finally:
        page.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("phase", choices=("first", "restart"))
    p.add_argument("base")
    p.add_argument("--started", type=float, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--run-url", default=None, help="restart: the run's link from the first phase")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    found: dict = {"phase": args.phase, "failed": []}

    def check(name, fn, *a):
        try:
            found[name] = fn(*a)
        except Exception as exc:  # noqa: BLE001 - every check is tried and reported
            found["failed"].append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
            print(f"FAILED {name}: {exc}", file=sys.stderr)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        check("home_s", home, page, args.base, args.started, args.out, f"space-home-{args.phase}")
        if args.phase == "first":
            check("run", default_run, page, args.base, args.out)
            check("saved", saved_run, page, args.base, args.out, "space-saved-run")
            check("upload", cross_origin_upload, browser, args.base, args.out)
            if found.get("upload") not in (None, "accepted"):
                found["failed"].append(f"upload: {found['upload']}")
        else:
            def run_again():
                page.goto(args.base + args.run_url)
                page.get_by_text("Run finished at step", exact=False).first.wait_for(timeout=120_000)
                settle(page)
                no_trouble(page, "the run's link after the restart")
                page.screenshot(path=str(args.out / "space-train-after-restart.png"), full_page=True)
                return page.get_by_text("Run finished at step", exact=False).first.inner_text()
            check("run_after_restart", run_again)
            check("saved", saved_run, page, args.base, args.out, "space-saved-run-after-restart")
        browser.close()
    (args.out / f"checks-{args.phase}.json").write_text(json.dumps(found, indent=1))
    print(json.dumps(found, indent=1))
    return 1 if found["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
