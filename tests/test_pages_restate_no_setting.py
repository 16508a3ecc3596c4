"""No page restates a described run setting (issue 72): a setting's widget, its label, its range, its step and its
help are said once, on its description (bert_core.training.setting.Widget), and a page draws it with
app_widgets.setting_widget / setting_widgets. So no page calls a widget with a described setting's key or label, and
no page keeps a table keyed by described settings' widget keys (its own ranges, labels or casts)."""

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from bert_core.training.setting import Setting, settings_of

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]
DRAWS = {"number_input", "slider", "select_slider", "selectbox", "radio", "checkbox", "toggle", "text_input",
         "text_area", "multiselect", "segmented_control", "pills"}


def _described() -> list[Setting]:
    """Every setting with a page widget, in every module of bert_core.training that describes one: module-level
    Settings (alone, in tuples or dicts) and the described fields of its dataclasses."""
    found = []
    for path in sorted((ROOT / "bert_core" / "training").glob("*.py")):
        if "Widget(" not in path.read_text(encoding="utf-8"):
            continue
        module = importlib.import_module(f"bert_core.training.{path.stem}")
        for value in vars(module).values():
            if isinstance(value, Setting):
                found.append(value)
            elif isinstance(value, (tuple, list)):
                found += [v for v in value if isinstance(v, Setting)]
            elif isinstance(value, dict):
                found += [v for v in value.values() if isinstance(v, Setting)]
            elif isinstance(value, type) and dataclasses.is_dataclass(value):
                found += settings_of(value)
    return [s for s in found if s.widget is not None]


DESCRIBED = _described()
KEYS = {s.widget.key for s in DESCRIBED}


def _prefix(key: str) -> str:
    """A widget key's page prefix (train_, ft_...): a page's widgets share one, so one page's never leak into
    another's (bert_core.app.app_widgets.init_widget)."""
    return key.split("_")[0]


# Each described label as a pattern ("{word}" in it, or an f-string's {expression} on a page, matches any text), by
# its key's page prefix: another page's "Seed" or "Mask rate" is its own view setting, not a restated run setting.
LABELS = {(_prefix(s.widget.key), re.sub(r"\\\{[^}]*\\\}", ".*", re.escape(s.widget.label))) for s in DESCRIBED}


def _text(node) -> str | None:
    """A literal label as a pattern's subject: a string, or an f-string with each {expression} as '{}'."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def restatements(source: str) -> list[str]:
    """What a page's source says again of a described setting: a widget drawn by hand with its key or label, or a
    table keyed by described widget keys."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)} & KEYS
            if keys:
                found.append(f"line {node.lineno}: a table of described settings {sorted(keys)}")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DRAWS):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        key = keywords.get("key")
        if isinstance(key, ast.Constant) and key.value in KEYS:
            found.append(f"line {node.lineno}: {node.func.attr} drawn by hand for {key.value}")
        label = _text(node.args[0] if node.args else keywords.get("label"))
        mine = _prefix(key.value) if isinstance(key, ast.Constant) else None
        if label is not None and any(re.fullmatch(pattern, label) for prefix, pattern in LABELS
                                     if mine in (None, prefix)):
            found.append(f"line {node.lineno}: {node.func.attr} restates the label {label!r}")
    return found


def test_the_check_finds_a_widget_drawn_by_hand():
    """The Train page as it was: its own labels and ranges beside the descriptions'."""
    old = ('RANGES = {"train_vocab": W(100, 60000), "train_layers": W(1, 12)}\n'
           'st.number_input("WordPiece vocabulary size", *RANGES["train_vocab"], step=100, key="train_vocab")\n'
           'c.number_input("Layers", 1, 12)\n')
    found = restatements(old)
    assert len(found) == 4, found
    assert "train_vocab" in found[1] and "'Layers'" in found[3]
    assert {"train_layers", "train_vocab", "train_steps"} <= KEYS


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_restates_a_described_settings_widget(page):
    assert not restatements(page.read_text(encoding="utf-8")), restatements(page.read_text(encoding="utf-8"))
