"""page_copy.json against the code that says its sentences: every key a page or module reads is there, every key there
is read, each key is named for its role (not the sentence's first words) and means one text wherever it appears, and
every template is filled with exactly the plain named values it names ({step:,}, never {job.step} or {stats[n]}), so
a renamed constant or attribute fails here, not at run time on the branch that says the sentence.

Read with `ast` (the call sites) and `string.Formatter().parse` (the templates); nothing is imported or run."""

import ast
import json
import re
import string
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JSON_PATH = ROOT / "bert_core" / "app" / "page_copy.json"
COPY = json.loads(JSON_PATH.read_text(encoding="utf-8"))
SOURCES = sorted([*ROOT.glob("pages/*.py"), ROOT / "app.py", *(ROOT / "bert_core" / "app").glob("*.py")])
NOTES = {"about"}            # top-level strings that describe the file, not sections
PANEL = "run_panel"          # its entries are run_panel.PanelWords' fields, one dict a page
KEY = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


def _fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def _texts(value, where):
    """(where, text) of every string under `value`."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _texts(v, f"{where}.{k}")


def _words_subscript(node, sections: dict[str, str]):
    """(section, key) when `node` is NAME["key"], NAME a module's section (NAME = page_copy.WORDS["section"]), or
    page_copy.WORDS["section"]["key"]; ("", section) when it is page_copy.WORDS["section"]; key or section None when
    not a literal; else None."""
    if not isinstance(node, ast.Subscript):
        return None
    key = node.slice.value if isinstance(node.slice, ast.Constant) else None
    base = node.value
    if isinstance(base, ast.Attribute) and base.attr == "WORDS" and isinstance(base.value, ast.Name) \
            and base.value.id == "page_copy":
        return ("", key)
    if isinstance(base, ast.Name) and base.id in sections:
        return (sections[base.id], key)
    outer = _words_subscript(base, {})   # page_copy.WORDS["section"]["key"], read in place
    if outer is not None and outer[0] == "" and outer[1] is not None:
        return (outer[1], key)
    return None


def _scan():
    """Every read of a key from the sources: (file:line, section, key, passed), `passed` the keyword names of the
    .format call the template is read into (a set; None when the call passes positional or ** arguments), or
    False when the text is read without .format."""
    uses = []
    for path in SOURCES:
        if path.name == "page_copy.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        sections = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                hit = _words_subscript(node.value, {})
                if hit is not None:
                    assert hit[1] is not None, f"{path.name}:{node.lineno}: a section named by a literal"
                    sections[node.targets[0].id] = hit[1]
        passed = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
                plain = not node.args and all(k.arg is not None for k in node.keywords)
                passed[id(node.func.value)] = {k.arg for k in node.keywords} if plain else None
        for node in ast.walk(tree):
            hit = _words_subscript(node, sections)
            if hit is None or hit[0] == "":
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            assert hit[1] is not None, f"{where}: a key named by a literal, so that it can be checked"
            uses.append((where, hit[0], hit[1], passed.get(id(node), False)))
    return uses


USES = _scan()
PAGE_SECTIONS = [s for s, v in COPY.items() if s not in NOTES and s != PANEL]


def test_the_sources_reach_the_copy():
    assert {s for _, s, _, _ in USES} >= {PANEL, "home", "train", "app_models"}, "the scan found the pages' WORDS"
    assert sum(p is not False for *_, p in USES) > 20, "and their .format calls"


def test_every_key_a_page_reads_is_in_the_json():
    missing = [f"{where}: {section}[{key!r}]" for where, section, key, _ in USES
               if section not in COPY or not isinstance(COPY[section], dict) or key not in COPY[section]]
    assert not missing, "keys not in page_copy.json:\n" + "\n".join(missing)


def test_every_key_in_the_json_is_read():
    used = {(s, k) for _, s, k, _ in USES}
    unused = [f"{s}[{k!r}]" for s in PAGE_SECTIONS for k in COPY[s] if (s, k) not in used]
    unused += [f"{PANEL}[{k!r}]" for k in COPY[PANEL] if (PANEL, k) not in used]
    assert not unused, "keys no page or module reads:\n" + "\n".join(unused)


def _panel_fields() -> set[str]:
    tree = ast.parse((ROOT / "bert_core" / "app" / "run_panel.py").read_text(encoding="utf-8"))
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "PanelWords")
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)} - {"page"}


def test_run_panel_entries_are_the_panel_words_fields():
    fields = _panel_fields()
    for page, words in COPY[PANEL].items():
        assert set(words) == fields, page


def test_keys_are_short_snake_case_role_names():
    bad = []
    for s in PAGE_SECTIONS:
        for key, text in COPY[s].items():
            if not KEY.match(key) or len(key) > 32:
                bad.append(f"{s}[{key!r}]: not a short snake_case name")
            # a name made of the sentence's first words (`there_press_run_race_its`) says nothing of its role
            parts = key.split("_")
            first = re.findall(r"[a-z0-9]+", text.lower())[:10]
            it = iter(first)
            if len(parts) >= 4 and all(p in it for p in parts):
                bad.append(f"{s}[{key!r}]: the sentence's first words, not its role")
    assert not bad, "\n".join(bad)


def test_a_key_name_means_one_text_in_every_section():
    seen, clashes = {}, []
    for s in PAGE_SECTIONS:
        for key, text in COPY[s].items():
            if key in seen and seen[key][1] != text:
                clashes.append(f"{key!r} in {seen[key][0]} and {s}, with different text")
            seen.setdefault(key, (s, text))
    assert not clashes, "\n".join(clashes)


def test_template_fields_are_plain_names():
    bad = []
    for where, text in _texts(COPY, "page_copy"):
        fields = _fields(text)   # raises on an unbalanced brace
        bad += [f"{where}: {{{f}}}" for f in fields if not f.isidentifier()]
    assert not bad, ("fields that reach into an object, an index or a position (pass a plain named value):\n"
                     + "\n".join(bad))


def test_each_format_call_passes_exactly_the_template_fields():
    bad = []
    for where, section, key, passed in USES:
        template = COPY.get(section, {}).get(key)
        if not isinstance(template, str):
            continue   # a missing key: test_every_key_a_page_reads_is_in_the_json says so
        named = set(_fields(template))
        if passed is False:
            if named:   # read without .format, it would show its braces
                bad.append(f"{where}: {section}[{key!r}] names {sorted(named)} but is read without .format")
        elif passed is None:
            bad.append(f"{where}: {section}[{key!r}].format takes positional or ** arguments; name each value")
        elif passed != named:
            bad.append(f"{where}: {section}[{key!r}] names {sorted(named)}, the call passes {sorted(passed)}")
    assert not bad, "\n".join(bad)


def test_panel_words_templates_are_filled_with_their_fields():
    """run_panel's entries reach the panel as PanelWords attributes (words.paused.format(step=...)): a call passes
    the fields of either page's text."""
    fields = _panel_fields()
    calls = {}
    tree = ast.parse((ROOT / "bert_core" / "app" / "run_panel.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr in fields:
            assert not node.args and all(k.arg for k in node.keywords), node.lineno
            calls.setdefault(node.func.value.attr, []).append({k.arg for k in node.keywords})
    for field in fields:
        named = set().union(*(_fields(words[field]) for words in COPY[PANEL].values()))
        if named:
            assert calls.get(field), f"PanelWords.{field} has fields {sorted(named)} but is never filled"
        for passed in calls.get(field, []):
            assert passed == named, f"PanelWords.{field}: names {sorted(named)}, a call passes {sorted(passed)}"
