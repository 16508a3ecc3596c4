"""In a real browser, a run outlives its server (issue #34): a run finishes on a public server, the server is killed
(SIGKILL: no chance to clean up) and started again over the same folders, and the run's link opens the run with its
curves, its probes and its model, on the Train page and in the sidebar of the other pages. A Fine-tune race does too
(issue #61): its link opens its results, curves and confusion matrices, and its models classify a typed sentence."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.app_server import free_port, start_app_server
from tests.browser_support import _no_exception, _open, _settle, _shoot, _trace_lengths

pytestmark = [pytest.mark.slow, pytest.mark.long]  # a long check (`--long`): a server restarted under a browser; test_faults restarts one in the suite

STEPS = 60
RACE = "?ft_kind=labels&ft_data=toy_order&ft_steps=20&ft_train=100&ft_val=40&ft_maxlen=32"


def _start(folder: Path, model_folder: Path, log_name: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, BERT_EXPLORER_CHECKPOINT=str(model_folder), BERT_EXPLORER_PUBLIC="1",
               PYTHONUNBUFFERED="1", BERT_EXPLORER_RUNS_DIR=str(folder / "runs"),
               BERT_EXPLORER_SCRATCH_DIR=str(folder / "scratch"))
    env.pop("BERT_EXPLORER_STATE_DIR", None)   # the default: beside the runs folder, as on a real server
    log = open(folder / f"{log_name}.log", "w")  # noqa: SIM115 - the server's log for its life
    return start_app_server(port, env, log, timeout_s=90), f"http://127.0.0.1:{port}"


def _recorded_finished(folder: Path, count: int = 1) -> bool:
    records = list((folder / "runs-state").glob("*/run.json"))
    return sum(json.loads(r.read_text()).get("phase") == "finished" for r in records) >= count


def _race_figures(page) -> tuple[list[int], int]:
    """(each curve's length on the validation chart, how many confusion matrices are drawn)."""
    return page.evaluate("""() => {
        const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
        const title = d => String((d.layout && d.layout.title && (d.layout.title.text || d.layout.title)) || '');
        const curves = plots.filter(d => title(d).includes('Validation'))
            .flatMap(d => (d.data || []).map(t => (t.x || []).length));
        return [curves, plots.filter(d => title(d).includes('Confusion matrix')).length];
    }""")


def _finished_race(page) -> None:
    """Wait for a race's results, their figures drawn."""
    page.get_by_role("heading", name="Results").wait_for(timeout=180_000)
    _settle(page)
    page.wait_for_function("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter(d => String((d.layout.title || {}).text || '').includes('Confusion matrix')).length >= 2""",
                           timeout=60_000)


def test_a_finished_run_and_its_model_are_there_after_the_server_restarts(browser, model_folder, tmp_path,
                                                                          screenshot_dirs):
    first, base = _start(tmp_path, model_folder, "first")
    second = None
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        _open(page, base, "Train", f"?train_steps={STEPS}&train_probe_every=20")
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start", exact=True).click()
        page.get_by_text(f"Run finished at step {STEPS}").wait_for(timeout=180_000)
        _settle(page)
        url = page.url.replace(base, "")
        assert "run=" in url, url
        page.wait_for_function(   # the charts' fragment draws after the numbers': wait for its last points
            f"() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
            f".some(d => (d.data || []).some(t => (t.x || []).length > 0 && t.x[t.x.length - 1] == {STEPS}))",
            timeout=60_000)
        curves = max(max(x, default=0) for x in _trace_lengths(page))
        # A tiny Fine-tune race (the toy word-order task, 20 steps a model) beside it.
        race = context.new_page()
        _open(race, base, "Fine-tune", RACE)
        race.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Fine-tune both", exact=True).click()
        _finished_race(race)
        race_url = race.url.replace(base, "")
        assert "ft=" in race_url, race_url
        race_curves, matrices = _race_figures(race)
        assert matrices == 2 and race_curves and min(race_curves) > 0, (race_curves, matrices)
        deadline = time.time() + 60
        while not _recorded_finished(tmp_path, 2):   # the records are written by the scheduler's next pass
            assert time.time() < deadline, "the finished run and race were never recorded"
            time.sleep(0.2)
        context.close()
        first.send_signal(signal.SIGKILL)
        first.wait(30)

        second, base = _start(tmp_path, model_folder, "second")
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.goto(base + url)
        _settle(page)
        page.get_by_text(f"Run finished at step {STEPS}").wait_for(timeout=60_000)
        _no_exception(page, "Train after the restart")
        assert "run=" in page.url, "the link still names the run"
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".some(d => (d.data || []).some(t => (t.x || []).length >= 2))", timeout=60_000)
        assert max(max(x, default=0) for x in _trace_lengths(page)) == curves, "the curves are all there"
        assert page.get_by_text("Probe sentences (snapshot at step", exact=False).count() == 1
        assert page.get_by_role("button", name="Prepare download").is_enabled()
        _shoot(page, "train-after-restart", screenshot_dirs)
        # The model: the sidebar's "Model trained in this session" loads it on the other pages.
        page.get_by_test_id("stSidebar").get_by_role("link", name="Predictions").click()
        _settle(page)
        page.get_by_test_id("stSidebar").get_by_text("Model trained in this session").first.click()
        _settle(page)
        sidebar = page.get_by_test_id("stSidebar")
        sidebar.get_by_text(f"step {STEPS}", exact=False).first.wait_for(timeout=30_000)
        assert sidebar.locator('[data-testid="stAlertContentError"]').count() == 0
        _no_exception(page, "Predictions with the restored model")
        # The race: its results, its curves as they were and both confusion matrices, and its models still answer.
        page.goto(base + race_url)
        _finished_race(page)
        _no_exception(page, "Fine-tune after the restart")
        assert _race_figures(page) == [race_curves, 2], "the race's curves and confusion matrices are all there"
        assert page.get_by_text("Nothing of this race was kept").count() == 0
        page.get_by_label("Sentence", exact=True).fill("the farmer feeds the hungry cows")
        page.keyboard.press("Enter")
        _settle(page)
        page.wait_for_function("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .some(d => String((d.layout.title || {}).text || '').includes('Class probabilities'))""", timeout=30_000)
        _no_exception(page, "a typed sentence classified by the restored race's models")
        _shoot(page, "fine-tune-after-restart", screenshot_dirs)
        context.close()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
