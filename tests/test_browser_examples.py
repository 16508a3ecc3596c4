"""Every page a teacher opens first, in a real browser at a projector's 1280 x 720, on each shipped model (issue
74): the text boxes open on plain sentences as a person writes them (a GPT's prompts on the start of one), and
nothing on the page names a speaker ("POMPEY: ...") or a corpus by its file ("valid", "abc"). The same checks as
tests/test_plain_examples.py's under AppTest, on what Chromium shows.

A long check (`--long`): four models through five pages, one to two minutes on a loaded 2-core CPU."""

from __future__ import annotations

import json

import pytest

from tests.browser_support import _no_exception, _settle
from tests.test_browser_how_bert_computes import PROJECTOR
from tests.test_plain_examples import FILE_NAMES, SHIPPED_NAMES, SPEAKER, plain_sentence

pytestmark = [pytest.mark.slow, pytest.mark.long]

# Page -> the tabs to open on it (lazy tabs draw only the open one's boxes), the first being the page's own.
PAGES = {"": (None,), "Tokens_and_masking": (None,), "Predictions": (None,), "Attention": (None,),
         "How_BERT_computes": ("Inside attention", "Each layer's guess", "Grammar check")}
# The typed-text boxes of the open tab, and what the main area says.
BOXES = """() => Array.from(document.querySelectorAll('[data-testid=stMain] textarea, [data-testid=stMain] input'))
    .filter(e => e.offsetParent !== null && (e.tagName === 'TEXTAREA' || e.type === 'text')
                 && !e.closest('[data-testid=stSelectbox]')).map(e => e.value)"""   # a select box's search box


@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_each_page_opens_on_plain_sentences_and_names_no_speaker_or_file(server, browser, model_folder, name):
    if not (model_folder.parent / name / "config.json").is_file():
        pytest.skip(f"{name} is not shipped beside {model_folder}")
    base, _ = server
    causal = name.startswith("gpt")
    config = json.loads((model_folder.parent / name / "config.json").read_text())
    shape = (f"{config['num_hidden_layers']} layers × {config['num_attention_heads']} heads, hidden "
             f"{config['hidden_size']}")
    page = browser.new_page(viewport=PROJECTOR)
    boxes, text = [], []
    try:
        for path, tabs in PAGES.items():
            page.goto(f"{base}/{path}?model=shipped&ckpt={name}")
            _settle(page, timeout=300)
            for tab in tabs:
                if tab is not None:
                    page.get_by_role("tab", name=tab).click()
                    _settle(page, timeout=300)
                _no_exception(page, f"{name}, {path or 'Home'} {tab or ''}")
                sidebar = page.get_by_test_id("stSidebar").inner_text()
                assert shape in sidebar, (path, shape, sidebar[-300:])   # the model asked for, not the default
                text.append(page.get_by_test_id("stMain").inner_text())
                if path not in ("", "Tokens_and_masking"):   # the boxes of the pages that open on an example
                    boxes += [(path, v) for v in page.evaluate(BOXES) if v.strip()]
    finally:
        page.close()
    seen = "\n".join(text)
    assert not SPEAKER.search(seen), SPEAKER.findall(seen)
    assert not FILE_NAMES.search(seen), FILE_NAMES.findall(seen)
    assert len(boxes) >= 4, boxes
    for path, value in boxes:
        # A GPT's prompt is the start of a sentence: plain once it ends.
        sentence = value if value.rstrip()[-1] in ".!?" or not causal else value + "."
        assert plain_sentence(sentence), (name, path, value)
