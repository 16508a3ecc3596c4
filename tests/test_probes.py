"""Declared interfaces, not probes (issue 72): the product asks an object of ours what it is by its type or its
protocol (bert_core.serve.run_protocols), never by `hasattr(obj, "name")` or `getattr(obj, "name", default)`. The
few probes left are of objects that are not ours (a platform's module, a library's optional feature), each with a
comment that says why no interface can serve. Read with `ast`: a probe in a string or a comment is not one."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MOST = 10   # probes allowed across bert_core/ and pages/ (89 before issue 72)


def probes_in(source: str) -> list[tuple[int, str]]:
    """The hasattr(...) calls and getattr(obj, name, default) calls of a module, with their lines: a name held in a
    variable or a constant probes as much as a literal one (only a getattr without a default, which fails on an
    object without the attribute, declares that the object has it)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3)):
            found.append((node.lineno, ast.unparse(node)))
    return found


def _product_probes() -> list[tuple[Path, int, str]]:
    paths = sorted([*(ROOT / "bert_core").rglob("*.py"), *(ROOT / "pages").glob("*.py")])
    return [(path, line, call) for path in paths for line, call in probes_in(path.read_text())]


def _commented(lines: list[str], line: int) -> bool:
    """A comment on the probe's line or the line before it."""
    return any("#" in text and text.split("#", 1)[1].strip() for text in lines[max(line - 2, 0):line])


def test_the_counter_finds_probes_and_leaves_strings_and_other_getattrs_alone():
    source = ('hasattr(a, "x")\ngetattr(b, "y", None)\ngetattr(c, name, None)\ngetattr(d, "z")\n'
              'text = "hasattr(e, \'w\')"  # getattr(f, "v", 0)\n')
    assert probes_in(source) == [(1, "hasattr(a, 'x')"), (2, "getattr(b, 'y', None)"), (3, "getattr(c, name, None)")]


def test_at_most_ten_probes_are_left_in_the_product():
    found = _product_probes()
    listed = "\n".join(f"{p.relative_to(ROOT)}:{line}: {call}" for p, line, call in found)
    assert len(found) <= MOST, f"{len(found)} probes (at most {MOST}):\n{listed}"


def test_each_probe_left_says_why_no_interface_can_serve():
    bare = [f"{p.relative_to(ROOT)}:{line}: {call}" for p, line, call in _product_probes()
            if not _commented(p.read_text().splitlines(), line)]
    assert not bare, "a probe without a comment saying why:\n" + "\n".join(bare)
