"""One way of counting: every layer and head a person reads is counted from 1, on every page and every lesson step.
Each page (and each step of the lesson) is drawn under AppTest with the shipped BERT, and every text it shows is
searched for a layer or head 0: notices, captions, widget labels and options, number boxes' lowest value, and the
titles, labels and hover text of its charts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out
pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from bert_core.inspect import lesson  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "pages").glob("*.py"))
ZERO = re.compile(r"\b[LH]0\b|\b(layer|head)s? 0\b|\bL\d+ H0\b", re.I)
HIDDEN_KEYS = ("bdata", "z", "x", "y", "customdata", "dtype", "shape")   # numbers, not text a reader sees


def _chart_texts(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key not in HIDDEN_KEYS:
                yield from _chart_texts(value)
    elif isinstance(node, list):
        for value in node:
            yield from _chart_texts(value)
    elif isinstance(node, str):
        yield node


def _texts(at: AppTest) -> list[str]:
    """Every text the page shows a reader."""
    out = []
    for kind in ("markdown", "caption", "info", "success", "warning", "error", "subheader", "title", "header"):
        out += [str(e.value) for e in getattr(at, kind)]
    for kind in ("selectbox", "radio", "multiselect", "select_slider"):
        for widget in getattr(at, kind):
            out.append(str(widget.label))
            out += [str(o) for o in (widget.options or [])]
    for box in at.number_input:
        out.append(str(box.label))
        if re.search(r"\b(layer|head)\b", str(box.label), re.I):
            out.append(f"{box.label} {int(box.min)}")   # its lowest value: a box that starts at 0 counts from 0
    for chart in at.get("plotly_chart"):
        out += list(_chart_texts(json.loads(chart.proto.spec)))
    return out


def _open(page: str, **query) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()
    for name, value in query.items():
        at.query_params[name] = value
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("page", PAGES)
def test_no_page_shows_a_layer_or_head_counted_from_0(page):
    at = _open(page)
    found = [t for t in _texts(at) if ZERO.search(t)]
    assert not found, found


@pytest.mark.parametrize("step", [s.key for s in lesson.STEPS])
def test_no_lesson_step_shows_a_layer_or_head_counted_from_0(step):
    at = _open("pages/0_Lesson.py", step=step)
    found = [t for t in _texts(at) if ZERO.search(t)]
    assert not found, found


def test_the_search_finds_what_it_looks_for():
    assert ZERO.search("Head L0 H1 puts 40%") and ZERO.search("Layer 0") and ZERO.search("L2 H0")
    assert ZERO.search("Layer 0") and not ZERO.search("Layer 10") and not ZERO.search("L1 H10: 40%")
