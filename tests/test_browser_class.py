"""In a real browser, the life of a run on a shared server: Stop and Resume say what they do at once, a reload finds
the run again in the same training process, a share link watches it without steering it, and a run nobody watches
ends after the grace period and its training process goes."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.browser_support import (
    FEEDBACK_S,
    UNWATCHED_S,
    _no_exception,
    _open,
    _settle,
    _shoot,
    _trace_lengths,
    _training_children,
)

pytestmark = [pytest.mark.slow, pytest.mark.long]  # a long check (`--long`): minutes of a shared run; AppTest and test_runs check its parts


def test_a_run_outlives_a_reload_is_watched_through_its_share_link_and_ends_when_nobody_watches(server, browser,
                                                                                              screenshot_dirs):
    """A student's run on a shared server: Stop and Resume say what they do at once; a reload comes back to the
    same run in the same training process; a classmate with the share link watches it and cannot stop it; when
    every tab is closed, the run ends after the grace period and its process is gone; its link still shows it."""
    base, log_path = server
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to see the training process")
    before = _training_children(server.pid)
    owner = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = owner.new_page()
    _open(page, base, "Train", "?train_steps=100000")
    main = page.get_by_test_id("stMainBlockContainer")
    main.get_by_role("button", name="Start", exact=True).click()
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
        ".some(d => (d.data || []).some(t => (t.x || []).length >= 2))", timeout=120_000)
    mine = _training_children(server.pid) - before
    assert mine, "no training process was found for the run"
    # Stop says so at once, the run stops, and Resume continues it (exactly: a stopped run keeps its schedule).
    main.get_by_role("button", name="Stop").click()
    # Feedback at once: "Stopping…" while the step ends, or straight "Run stopped" when that takes no time at all
    # (the notice is then replaced before the browser paints it).
    page.get_by_text("Stopping", exact=False).or_(page.get_by_text("Run stopped at step")).first.wait_for(
        timeout=FEEDBACK_S * 1000)
    page.get_by_text("Run stopped at step").wait_for(timeout=60_000)
    _settle(page)
    stopped = max(max(x, default=0) for x in _trace_lengths(page))
    time.sleep(3)
    assert max(max(x, default=0) for x in _trace_lengths(page)) == stopped, "points kept coming after Stop"
    main.get_by_role("button", name="Resume").click()
    page.wait_for_function(
        f"() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
        f".some(d => (d.data || []).some(t => (t.x || []).length > {stopped}))", timeout=60_000)
    # A reload (a new browser session) comes back to the same run, still training, in the same process.
    url = page.url
    assert "run=" in url, url
    page.reload()
    _settle(page)
    # The same run, not the same address to the letter: the smoothing stays in the URL only for an ended run, and
    # whether the page drew the resumed run as ended or as training before the reload is a race (load decides).
    assert _run_of(page.url) == _run_of(url), (page.url, url)
    page.get_by_text("running: step", exact=False).first.wait_for(timeout=30_000)
    page.wait_for_function(
        f"() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
        f".some(d => (d.data || []).some(t => (t.x || []).length > {stopped}))", timeout=60_000)
    assert _training_children(server.pid) & mine == mine, "the reload started another process"
    # Another page keeps the run in its address bar (a reload there must find the run too).
    page.get_by_test_id("stSidebar").get_by_role("link", name="Attention").click()
    _settle(page)
    page.wait_for_function("() => window.location.search.includes('run=')", timeout=10_000)
    assert "/Attention" in page.url, page.url
    page.reload()
    _settle(page)
    page.get_by_test_id("stSidebar").get_by_role("link", name="Train").click()
    _settle(page)
    page.get_by_text("running: step", exact=False).first.wait_for(timeout=30_000)
    # The share link: a classmate watches the same run and cannot steer it.
    page.get_by_text("Share this run with a class").click()
    link = page.locator('[data-testid="stCode"]', has_text="watch=").first.inner_text().strip()
    assert link.startswith(base) and "watch=" in link and "run=" not in link, link
    viewer = browser.new_context(viewport={"width": 1400, "height": 1000})
    watching = viewer.new_page()
    watching.goto(link)
    _settle(watching)
    watching.get_by_text("You are watching a shared run").wait_for(timeout=30_000)
    watching.get_by_text("running: step", exact=False).first.wait_for(timeout=30_000)
    viewer_main = watching.get_by_test_id("stMainBlockContainer")
    for name in ("Stop", "Resume", "Reset"):
        assert viewer_main.get_by_role("button", name=name, exact=True).is_disabled(), name
    _no_exception(watching, "train (watching a shared run)")
    _shoot(watching, "train-shared-run", screenshot_dirs)
    # Everyone leaves: after the grace period the run is stopped and its process is gone.
    closed = time.monotonic()
    viewer.close()
    owner.close()
    while _training_children(server.pid) & mine and time.monotonic() - closed < UNWATCHED_S + 60:
        time.sleep(0.2)
    freed_after = time.monotonic() - closed
    assert not _training_children(server.pid) & mine, "the run outlived its grace period by a minute"
    assert UNWATCHED_S - 1 <= freed_after <= UNWATCHED_S + 10, f"the unwatched run's process went after {freed_after:.1f} s"
    assert "nobody watched it" in log_path.read_text()
    # Its link still opens it: ended by the server, with its curves and its model.
    again = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        back = again.new_page()
        back.goto(url)
        _settle(back)
        back.get_by_text("nobody watched it", exact=False).first.wait_for(timeout=30_000)
        back.get_by_role("button", name="Train on from these weights").wait_for(timeout=30_000)
        back.wait_for_function(
            f"() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
            f".some(d => (d.data || []).some(t => (t.x || []).length > {stopped}))", timeout=30_000)
        _no_exception(back, "train (an ended run reopened)")
    finally:
        again.close()


def _run_of(url: str) -> list[str]:
    """The run a page's address names (its `run=` parameter)."""
    return parse_qs(urlsplit(url).query).get("run", [])
