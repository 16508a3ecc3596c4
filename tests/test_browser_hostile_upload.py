"""In a real browser, on a public server (issue 70): a CSV whose labels, texts and file name hold HTML and Markdown
links, an `<img onerror>`, a `<script>` and `javascript:` is uploaded on the Fine-tune page, raced and shared. On the
race page and on the watcher's (the `?ftwatch=` link opened in a second browser context), no `<a>` element points
where the visitor said (an `evil.example` address or `javascript:`), no figure holds a link at all (`svg a`: our own
figures have none), no picture or script of theirs is in the page, and no script of theirs ran (no dialog opened,
`alert` never called). The labels are shown as the characters the file holds. The Plotly and Markdown rules
themselves are unit-tested in tests/test_figure_text.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.app_server import free_port, start_app_server
from tests.browser_support import _no_exception, _open, _settle, _shoot, stop_server

pytestmark = pytest.mark.slow

LABELS = ('<a href="http://evil.example/phish">click me</a>', "<img src=x onerror=alert(1)>",
          "[win](javascript:alert(1))")
TEXTS = ('see <A HREF="https://evil.example/t">here</A> now', "<script>alert(1)</script> the farmer",
         "javascript:alert(1) feeds", "[click](http://evil.example/md) the cows", "visit http://evil.example/bare",
         "mail x@evil.example today", "<a href=javascript:alert(1)>js</a> hungry")
FILE_NAME = '<a href="http:evil.example">f</a><img src=x onerror=alert(1)>[f](http:evil.example).csv'
TYPED = '<a href="http://evil.example/typed">typed</a> the farmer'
RACE = "?ft_data=upload&ft_steps=10&ft_train=90&ft_val=30&ft_maxlen=32"
# What the visitor's text would have become: links to their addresses, pictures, scripts; and any link in a figure.
HOSTILE_ELEMENTS = """() => {
    const href = a => a.getAttribute('href') || a.getAttribute('xlink:href') || '';
    const bad = a => /evil\\.example|^\\s*javascript:/i.test(href(a));
    return {links: Array.from(document.querySelectorAll('a')).filter(bad).map(href),
            figureLinks: document.querySelectorAll('.js-plotly-plot a').length,
            markdownLinks: Array.from(document.querySelectorAll('[data-testid=stMarkdownContainer] a'))
                .filter(bad).length,
            images: document.querySelectorAll('img[src="x"], img[onerror], [onerror]').length,
            scripts: Array.from(document.querySelectorAll('script')).filter(s => s.text.includes('alert(1)')).length,
            alerts: window.__hostileCalls || []};
}"""
# Before any page script: every way a script of the visitor's would show itself is counted.
WATCH_SCRIPTS = """
window.__hostileCalls = [];
for (const name of ['alert', 'confirm', 'prompt']) {
    window[name] = function (...args) { window.__hostileCalls.push(name + ':' + args.join(',')); };
}
"""


def _csv(path: Path) -> Path:
    rows = ["text,label"]
    for i in range(120):
        text = TEXTS[i % len(TEXTS)] + f" {i}"
        rows.append('"' + text.replace('"', '""') + '","' + LABELS[i % len(LABELS)].replace('"', '""') + '"')
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def public_server(model_folder, tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    port = free_port()
    env = dict(os.environ, BERT_EXPLORER_CHECKPOINT=str(model_folder), BERT_EXPLORER_PUBLIC="1",
               PYTHONUNBUFFERED="1", BERT_EXPLORER_RUNS_DIR=str(folder / "runs"),
               BERT_EXPLORER_SCRATCH_DIR=str(folder / "scratch"))
    env.pop("BERT_EXPLORER_STATE_DIR", None)
    with open(folder / "server.log", "w") as log:
        proc = start_app_server(port, env, log, timeout_s=90)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_server(proc)


def _watched_page(browser, dialogs: list):
    """A page in a browser context of its own (a visitor), every dialog it opens and every alert() counted."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(WATCH_SCRIPTS)
    page = context.new_page()
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    return page


def _results(page) -> None:
    """Wait for a race's results with both confusion matrices drawn (their axes: the visitor's labels)."""
    page.get_by_role("heading", name="Results").wait_for(timeout=240_000)
    _settle(page)
    page.wait_for_function("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter(d => String((d.layout.title || {}).text || '').includes('Confusion matrix')).length >= 2""",
                           timeout=60_000)


def _nothing_hostile(page, where: str, dialogs: list) -> None:
    found = page.evaluate(HOSTILE_ELEMENTS)
    assert found == {"links": [], "figureLinks": 0, "markdownLinks": 0, "images": 0, "scripts": 0, "alerts": []}, \
        (where, found)
    assert dialogs == [], (where, dialogs)
    _no_exception(page, where)


def _labels_drawn(page) -> list[str]:
    """The tick labels of the confusion matrices' axes, as the browser shows them."""
    return page.evaluate("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .filter(d => String((d.layout.title || {}).text || '').includes('Confusion matrix'))
        .flatMap(d => Array.from(d.querySelectorAll('.xtick text, .ytick text')).map(t => t.textContent))""")


def test_a_hostile_upload_is_raced_and_shared_as_plain_text(public_server, browser, tmp_path, screenshot_dirs):
    base, dialogs = public_server, []
    upload = _csv(tmp_path / "labels.csv")
    page = _watched_page(browser, dialogs)
    _open(page, base, "Fine-tune", RACE)
    page.locator('[data-testid="stFileUploader"] input[type=file]').set_input_files(
        files=[{"name": FILE_NAME, "mimeType": "text/csv", "buffer": upload.read_bytes()}])
    _settle(page)
    summary = page.get_by_text("120 examples, 3 labels", exact=False).first
    summary.wait_for(timeout=30_000)
    assert "click me</a>" in summary.inner_text() and "onerror=alert(1)>" in summary.inner_text()
    _nothing_hostile(page, "the upload's summary", dialogs)

    main = page.get_by_test_id("stMainBlockContainer")
    main.get_by_role("button", name="Fine-tune both", exact=True).click()
    _results(page)
    page.get_by_label("Sentence", exact=True).fill(TYPED)
    page.keyboard.press("Enter")
    _settle(page)
    page.wait_for_function("""() => Array.from(document.querySelectorAll('.js-plotly-plot'))
        .some(d => String((d.layout.title || {}).text || '').includes('Class probabilities'))""", timeout=60_000)
    _nothing_hostile(page, "the race's page", dialogs)
    drawn = _labels_drawn(page)
    assert set(LABELS) <= set(drawn), drawn   # each label as the characters the file holds, on both axes
    tables = page.locator('[data-testid="stTable"]')
    assert tables.count() >= 1 and any(t in tables.first.inner_text() for t in ("<script>", "javascript:", "[click]"))
    _shoot(page, "hostile-upload-race", screenshot_dirs)

    page.get_by_text("Share this race with a class").first.click()
    link = page.locator('[data-testid="stCode"]', has_text="ftwatch=").first.inner_text().strip()
    assert "?ftwatch=" in link, link
    watcher = _watched_page(browser, dialogs)
    watcher.goto(link)
    _settle(watcher)
    _results(watcher)
    assert set(LABELS) <= set(_labels_drawn(watcher))
    _nothing_hostile(watcher, "the watcher's page", dialogs)
    watcher.context.close()
    page.context.close()
