"""The whole pass on *How BERT computes* in a real browser at a projector's 1280 x 720, on the shipped BERT and its
GPT twin: the picture draws under its tab with no text under 12 px, none too light and none past its edge, and a
click on a layer's feed-forward box opens *Inside attention* at that layer with the feed-forward block in view.
Screenshot: how-whole-pass.png (docs/screenshots with BERT_UPDATE_SCREENSHOTS=1, the shipped BERT's)."""

from __future__ import annotations

import time

import pytest

from tests.browser_support import _chart_text, _settle
from tests.test_browser_how_bert_computes import PAGE, PROJECTOR, _no_error_on_page, _shoot_chart, _wait_for_charts

pytestmark = pytest.mark.slow

TITLE = "The whole pass, following"

# The centre of the invisible point of the box whose Block.key is `key`, in page coordinates.
POINT_OF = """(args) => {
    const [title, key] = args;
    const d = Array.from(document.querySelectorAll('.js-plotly-plot')).find(d => d.offsetParent !== null
        && String((d.layout.title || {}).text || '').includes(title));
    const i = d._fullData[0].customdata.indexOf(key);
    const pt = d.querySelectorAll('.scatterlayer .point')[i].getBoundingClientRect();
    return {x: pt.left + pt.width / 2, y: pt.top + pt.height / 2};
}"""


@pytest.mark.parametrize("label", ["shipped-bert", "shipped-gpt"])
def test_the_whole_pass_draws_readable_and_a_click_opens_the_block(server, browser, screenshot_dirs, model_folder,
                                                                   label):
    base, _ = server
    checkpoint = model_folder.name.replace("bert", "gpt") if label == "shipped-gpt" else None
    if checkpoint is not None and not (model_folder.parent / checkpoint / "config.json").is_file():
        pytest.skip(f"no GPT twin shipped beside {model_folder}")
    page = browser.new_page(viewport=PROJECTOR)
    try:
        page.goto(f"{base}/{PAGE}?model=shipped" + (f"&ckpt={checkpoint}" if checkpoint else ""))
        _settle(page, timeout=300)
        page.get_by_role("tab", name="The whole pass").click()
        _settle(page)
        _wait_for_charts(page, (TITLE,), label)
        _no_error_on_page(page, label)
        _shoot_chart(page, TITLE, "how-whole-pass" if label == "shipped-bert" else f"how-{label}-whole-pass",
                     screenshot_dirs if label == "shipped-bert" else screenshot_dirs[:1])
        texts = _chart_text(page, TITLE)
        assert any("feed-forward" in t["text"] for t in texts), texts
        point = page.evaluate(POINT_OF, [TITLE, "feed-forward 2"])
        page.mouse.click(point["x"], point["y"])
        _settle(page)
        page.get_by_text("The feed-forward block", exact=True).first.wait_for(state="visible", timeout=60_000)
        assert page.get_by_role("tab", name="Inside attention").get_attribute("aria-selected") == "true"
        layer = page.evaluate("() => Array.from(document.querySelectorAll('[data-testid=stSelectbox]')).filter("
                              "b => b.offsetParent !== null && b.querySelector('label').innerText.trim() === 'Layer')"
                              ".map(b => b.innerText.replace('Layer', '').trim() || b.querySelector('input').value)")
        assert layer == ["2"], layer
        deadline = time.time() + 10   # the scroll script waits for the heading; then it is on screen
        while True:
            top = page.evaluate("() => Array.from(document.querySelectorAll('h3')).find(h => h.offsetParent !== null"
                                " && h.textContent.trim() === 'The feed-forward block').getBoundingClientRect().top")
            if 0 <= top < PROJECTOR["height"]:
                break
            assert time.time() < deadline, top
            time.sleep(0.2)
        _no_error_on_page(page, label)
    finally:
        page.close()
