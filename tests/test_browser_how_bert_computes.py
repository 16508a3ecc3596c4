"""In a real browser at a projector's 1280 x 720: every view of *How BERT computes* (inside attention with a
temperature what-if, each layer's guess with a head switched off, the embeddings with their neighbours and the word
map, the grammar check, the whole pass; the weights as matrices and the feed-forward block under inside attention)
draws, for BERT and for its GPT twin, on the shipped checkpoints and on models trained in
this session from the Train page. Each view is screenshotted at the projector's size (docs/screenshots/how-*.png
with BERT_UPDATE_SCREENSHOTS=1) and the whole page once per tab for review (test-artifacts only). Last, after a
short fine-tuning race on the Fine-tune page, the fifth tab explains a fine-tuned model's answer.

A long check (`--long`): four models through five views, two of them trained first, and a race; five to eight
minutes on a loaded 2-core CPU."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from bert_core.data.treebank import UD_EWT
from tests.browser_support import _chart_text, _no_exception, _open, _settle
from tests.test_syntax_heads import SENTENCES

pytestmark = [pytest.mark.slow, pytest.mark.long]

PAGE = "How_BERT_computes"
PROJECTOR = {"width": 1280, "height": 720}
STEPS = 20   # a few steps of the Train page's default nano run: enough for a model, not for a good one
# Each tab and the charts it draws, by a part of their titles. The tabs hold the title's words for BERT and GPT
# alike (the GPT twin's lens guesses "the next token", not "the [MASK]").
VIEWS = {
    "Inside attention": ("query, keys and values", "its scores and weights", "the weighted sum",
                         "·x + b for token", "its query against every key",   # the weights as matrices
                         "feed-forward block for", "with this token's", "where it fires most"),   # and the FFN
    "Each layer's guess": ("Each layer's guess", "The final answer's tokens", "The guess with heads off"),
    "Embeddings": ("its embeddings", "How long each part is", "Nearest in context to", "in the embedding table",
                   "layer by layer (PCA)"),
    "Grammar check": ("Prefers", "Each piece's log-probability"),
    "The whole pass": ("The whole pass, following",),
}
# The chart each docs screenshot is scrolled to (its top at the window's top), by tab.
SHOWN = {"Inside attention": "its scores and weights", "Each layer's guess": "Each layer's guess",
         "Embeddings": "layer by layer (PCA)", "Grammar check": "Prefers", "The whole pass": "The whole pass"}
SLUGS = {"Inside attention": "attention-steps", "Each layer's guess": "logit-lens", "Embeddings": "word-map",
         "Grammar check": "grammar-check", "The whole pass": "whole-pass"}
# The views that also go to docs/screenshots (README, docs/how-bert-computes.md), by model: the rest stay in
# test-artifacts, looked over but not kept (the repository's size matters).
# (test_browser_whole_pass shoots the whole pass's docs picture.)
DOCS = {"shipped-bert": set(VIEWS) - {"The whole pass"}, "shipped-gpt": {"Inside attention"}, "session-bert": set(),
        "session-gpt": set()}


def _visible_titles(page) -> list[str]:
    """The titles of the Plotly charts drawn in the open tab (a hidden tab's charts have no offsetParent)."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
            .filter(d => d.offsetParent !== null && d.layout)
            .map(d => String((d.layout.title || {}).text || d.layout.title || '').replace(/<[^>]+>/g, ' '))""")


def _wait_for_charts(page, titles: tuple[str, ...], where: str, timeout: float = 120.0) -> list[str]:
    """Every chart named in `titles` drawn in the open tab (a chart below the fold may be drawn when scrolled to)."""
    deadline = time.time() + timeout
    while True:
        drawn = _visible_titles(page)
        missing = [t for t in titles if not any(t in d for d in drawn)]
        if not missing:
            return drawn
        assert time.time() < deadline, f"{where}: no chart titled {missing}; drawn: {drawn}"
        page.mouse.wheel(0, 500)
        time.sleep(0.5)


def _no_error_on_page(page, where: str) -> None:
    """No exception box, no traceback in the text, no error box in the open tab."""
    _no_exception(page, where)
    text = page.locator('[data-testid="stMain"]').inner_text()
    assert "Traceback" not in text, f"{where}: {text[:2000]}"
    errors = page.locator('[data-testid="stAlertContentError"]')
    shown = [errors.nth(i).inner_text() for i in range(errors.count()) if errors.nth(i).is_visible()]
    assert not shown, f"{where}: {shown}"


def _shoot_chart(page, title: str, name: str, dirs) -> None:
    """The window as a projector shows it, scrolled so that the chart titled `title` starts at its top."""
    page.evaluate(
        """(title) => {
            const d = Array.from(document.querySelectorAll('.js-plotly-plot')).find(d => d.offsetParent !== null
                && String((d.layout.title || {}).text || d.layout.title || '').includes(title));
            const box = d.closest('[data-testid="stElementContainer"]') || d;
            box.scrollIntoView({block: 'start'});
            // Clear of the app's header bar, which would otherwise cover the chart's title.
            let el = box.parentElement;
            while (el && el.scrollTop === 0) el = el.parentElement;
            (el || document.scrollingElement).scrollTop -= 64;
        }""", title)
    time.sleep(0.8)   # the scroll settles, and plotly relayouts
    for d in dirs:
        page.screenshot(path=str(d / f"{name}.png"))


def _shoot_whole(page, name: str, dirs) -> None:
    """The whole page at the projector's width, for looking over (test-artifacts only: too tall for the docs)."""
    height = page.evaluate("() => Math.max(...Array.from(document.querySelectorAll('[data-testid=stMain], "
                           "[data-testid=stAppViewContainer]')).map(e => e.scrollHeight), document.body.scrollHeight)")
    page.set_viewport_size({"width": PROJECTOR["width"], "height": int(min(max(height, 720), 8000))})
    time.sleep(0.8)
    page.screenshot(path=str(dirs[0] / f"{name}.png"), full_page=True)
    page.set_viewport_size(PROJECTOR)
    time.sleep(0.5)


def _switch_a_head_off(page) -> None:
    """Pick layer 1, head 1 in *Switch heads off*; the guess without it is drawn (checked by the caller)."""
    box = page.get_by_test_id("stMultiSelect").filter(has_text="Heads to switch off").locator("input")
    box.click()
    box.fill("layer 1, head 1")
    page.keyboard.press("Enter")
    page.keyboard.press("Escape")
    _settle(page)


def _every_view(page, label: str, dirs) -> None:
    """Open each tab of the page, check its charts are drawn and nothing failed, and screenshot it: as
    how-{view}.png for the shipped BERT, how-{label}-{view}.png for the others; in docs/screenshots too for the
    views DOCS names."""
    for tab, titles in VIEWS.items():
        where = f"{label}, {tab}"
        page.get_by_role("tab", name=tab).click()
        time.sleep(0.5)
        _settle(page)
        if tab == "Each layer's guess":
            _wait_for_charts(page, titles[:2], where)
            _switch_a_head_off(page)
            page.get_by_text("with those heads off").first.wait_for(timeout=60_000)
        drawn = _wait_for_charts(page, titles, where)
        assert drawn, where
        _no_error_on_page(page, where)
        for title in titles:   # a projector reads every chart: nothing under 12 px, too light or past its edge
            _chart_text(page, title)
        slug = SLUGS[tab]
        name = f"how-{slug}" if label == "shipped-bert" else f"how-{label}-{slug}"
        _shoot_chart(page, SHOWN[tab], name, dirs if tab in DOCS[label] else dirs[:1])
        _shoot_whole(page, f"how-{label}-{slug}-whole", dirs)
        page.evaluate("() => window.scrollTo(0, 0)")


def _train_in_this_tab(page, base: str, objective: str) -> None:
    """A few steps of the Train page's default nano run on toy text (BERT's `mlm` or the GPT twin's `clm`), then
    the sidebar's *Model trained in this session* and the page."""
    _open(page, base, "Train", f"?train_steps={STEPS}&train_eval_every={STEPS // 2}&train_probe_every=0"
                               f"&train_objective={objective}")
    page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start", exact=True).click()
    page.get_by_text(f"Run finished at step {STEPS}").wait_for(timeout=300_000)
    _settle(page)
    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_test_id("stRadioGroup").get_by_text("Model trained in this session").click()
    _settle(page)
    sidebar.get_by_role("link", name="How BERT computes").click()
    page.wait_for_url(re.compile(PAGE), timeout=60_000)
    _settle(page, timeout=300)


@pytest.mark.parametrize("label", ["shipped-bert", "shipped-gpt"])
def test_every_view_draws_on_the_shipped_checkpoints(server, browser, screenshot_dirs, model_folder, server_home,
                                                     label):
    """The shipped BERT the app opens by default (with a temperature what-if on the softmax) and its GPT twin
    beside it (`?ckpt=gpt-...`), every view, what each layer knows and the heads that follow syntax."""
    base, _ = server
    cache = _treebank_in_cache(server_home)
    checkpoint = model_folder.name.replace("bert", "gpt") if label == "shipped-gpt" else None
    if checkpoint is not None and not (model_folder.parent / checkpoint / "config.json").is_file():
        pytest.skip(f"no GPT twin shipped beside {model_folder}")
    page = browser.new_page(viewport=PROJECTOR)
    try:
        query = "?model=shipped&hbc_temperature=0.5" + (f"&ckpt={checkpoint}" if checkpoint else "")
        page.goto(f"{base}/{PAGE}{query}")
        _settle(page, timeout=300)   # the first open reads the held-out pool through the model
        # The sidebar's picker reads the checkpoint from the URL; the GPT twin's page says so by its causal mask.
        causal = page.get_by_text("The GPT twin's causal mask", exact=False).count() >= 1
        assert causal == (checkpoint is not None), label
        assert page.get_by_text("Orange is a what-if at temperature 0.5", exact=False).count() == 1
        _every_view(page, label, screenshot_dirs)
        _probes_and_syntax_heads(page, label, screenshot_dirs, cache)
    finally:
        page.close()


def _treebank_in_cache(server_home: Path) -> Path | None:
    """The 33 hand-annotated test sentences as the treebank in the server's cache (its folder, or None where the
    cache is a folder of this machine's, named by the environment, not the test's own)."""
    if os.environ.get("BERT_CORE_CACHE") or os.environ.get("XDG_CACHE_HOME"):
        return None
    cache = server_home / ".cache" / "bert_core"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SENTENCES, cache / UD_EWT.filename)
    return cache


def _probes_and_syntax_heads(page, label: str, dirs, cache: Path | None) -> None:
    """The views that read text of their own, on the active model: what each layer knows (when this server has
    CoNLL-2000), then on the Attention page the heads that follow syntax (when the test could put the treebank, its
    33 hand-annotated sentences, in the server's cache)."""
    page.get_by_role("tab", name="Each layer's guess").click()
    _settle(page)
    if page.get_by_role("button", name="Fetch it").count() == 0:
        page.get_by_text("Fit the probes", exact=False).first.click()
        _settle(page, timeout=300)
        _wait_for_charts(page, ("What each layer knows",), f"{label}, layer probes", timeout=300)
        _no_error_on_page(page, f"{label}, layer probes")
        _chart_text(page, "What each layer knows")
        _shoot_chart(page, "What each layer knows", f"how-{label}-layer-probes", dirs[:1])
    if cache is None:
        return
    page.get_by_test_id("stSidebar").get_by_role("link", name="Attention").click()
    page.wait_for_url(re.compile("Attention"), timeout=60_000)
    _settle(page, timeout=300)
    page.get_by_role("tab", name="What heads do").click()
    _settle(page)
    page.get_by_text("Find the heads that follow syntax").click()
    _settle(page, timeout=300)
    _wait_for_charts(page, ("Heads that follow syntax",), f"{label}, syntax heads", timeout=300)
    _no_error_on_page(page, f"{label}, syntax heads")
    _chart_text(page, "Heads that follow syntax")
    _shoot_chart(page, "Heads that follow syntax", f"attention-{label}-syntax-heads", dirs[:1])


@pytest.mark.parametrize("objective, label", [("mlm", "session-bert"), ("clm", "session-gpt")])
def test_every_view_draws_on_a_model_trained_in_this_session(server, browser, screenshot_dirs, server_home, objective,
                                                             label):
    """A nano BERT and a nano GPT twin, each trained a few steps from the Train page, every view, what each layer
    knows and the heads that follow syntax; the toy BERT also scores every built-in pair (does a toy run know any
    grammar?)."""
    base, _ = server
    cache = _treebank_in_cache(server_home)
    context = browser.new_context(viewport=PROJECTOR)
    try:
        page = context.new_page()
        _train_in_this_tab(page, base, objective)
        causal = page.get_by_text("The GPT twin's causal mask", exact=False).count() >= 1
        assert causal == (objective == "clm"), label
        _every_view(page, label, screenshot_dirs)
        _probes_and_syntax_heads(page, label, screenshot_dirs, cache)
        if objective == "mlm":   # back to How BERT computes for the grammar check
            page.get_by_test_id("stSidebar").get_by_role("link", name="How BERT computes").click()
            page.wait_for_url(re.compile(PAGE), timeout=60_000)
            _settle(page, timeout=300)
        if objective == "mlm":
            page.get_by_role("tab", name="Grammar check").click()
            page.get_by_text("Score all", exact=False).first.click()
            _settle(page, timeout=300)
            page.get_by_text(re.compile(r"prefers the good sentence in \d+ of \d+ pairs")).wait_for(timeout=300_000)
            _wait_for_charts(page, ("The built-in pairs",), f"{label}, every pair")
            _no_error_on_page(page, f"{label}, every pair")
            _shoot_chart(page, "The built-in pairs", "how-session-bert-grammar-pairs", screenshot_dirs)
    finally:
        context.close()


def test_a_fine_tuned_model_of_this_tab_is_explained(server, browser, screenshot_dirs):
    """After a short fine-tuning race on the Fine-tune page (the default labels task, a few steps), the page's
    *Why a fine-tuned model decided* explains one model's answer to a typed sentence: the saliences and the heads."""
    base, _ = server
    context = browser.new_context(viewport=PROJECTOR)
    try:
        page = context.new_page()
        _open(page, base, "Fine-tune", "?ft_steps=30&ft_train=100&ft_val=50")
        page.get_by_role("button", name="Fine-tune both").click()
        page.get_by_role("heading", name="Results").wait_for(timeout=600_000)
        _settle(page)
        page.get_by_test_id("stSidebar").get_by_role("link", name="How BERT computes").click()
        page.wait_for_url(re.compile(PAGE), timeout=60_000)
        _settle(page, timeout=300)
        page.get_by_role("tab", name="Why a fine-tuned model decided").click()
        box = page.get_by_role("textbox", name="Sentence", exact=True)
        box.fill("the film was a long and rather dull story .")
        box.press("Enter")
        _settle(page)
        page.get_by_text("Explain (about a second)").click()
        _settle(page, timeout=300)
        _wait_for_charts(page, ("Which tokens made the answer", "Each head switched off"), "why", timeout=300)
        _no_error_on_page(page, "why a fine-tuned model decided")
        _shoot_chart(page, "Which tokens made the answer", "how-why-fine-tuned", screenshot_dirs)
        _shoot_whole(page, "how-why-fine-tuned-whole", screenshot_dirs)
    finally:
        context.close()
