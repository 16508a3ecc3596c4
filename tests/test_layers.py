"""The layers read top-down: nothing imports the CLI, no module imports another that imports it back, pages use
only the UI helpers and bert_core's public functions, and only app_state calls Streamlit."""

import ast
from pathlib import Path

from bert_core.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "bert_core"
PAGES = [REPO_ROOT / "app.py", *sorted((REPO_ROOT / "pages").glob("*.py"))]
# What a page may import from bert_core: the UI helpers and the library's public modules. Not the CLI, not the
# training process's internals, not the speed paths or the allocator.
PAGE_API = {"app_state", "app_storage", "jobs", "model_sources", "figures", "finetune_figures", "inspection",
            "export", "config", "errors", "classification_data", "finetune", "paths", "corpora", "toy_grammar",
            "tokenization", "pretraining_data", "training", "evaluation", "probes", "comparison", "generation", "runs",
            "recipes", "plateau"}


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every import in a file, at any depth (imports inside functions count)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [a.name for a in node.names]
            if node.module == "bert_core":  # `from bert_core import jobs` imports the module bert_core.jobs
                found += [(f"bert_core.{n}", []) for n in names if (PACKAGE / f"{n}.py").exists()]
            else:
                found.append((node.module, names))
    return found


def graph() -> dict[str, set[str]]:
    edges = {}
    for path in PACKAGE.glob("*.py"):
        name = f"bert_core.{path.stem}"
        edges[name] = {m for m, _ in imports(path) if m.startswith("bert_core.") and m != name}
    return edges


def test_nothing_imports_the_cli():
    importers = [m for m, deps in graph().items() if "bert_core.cli" in deps and m != "bert_core.__main__"]
    importers += [p.name for p in PAGES if any(m == "bert_core.cli" for m, _ in imports(p))]
    assert not importers, importers


def test_no_import_circles():
    edges = graph()
    circles = set()

    def visit(node, stack):
        for nxt in edges.get(node, ()):
            if nxt in stack:
                circles.add(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif len(stack) < len(edges):
                visit(nxt, stack + [nxt])

    for start in edges:
        visit(start, [start])
    assert not circles, sorted(circles)[:10]


def test_pages_import_only_ui_helpers_and_the_public_api():
    bad = []
    for page in PAGES:
        for module, names in imports(page):
            if not module.startswith("bert_core"):
                continue
            short = module.removeprefix("bert_core").lstrip(".")
            if short and short not in PAGE_API:
                bad.append(f"{page.name}: {module}")
            bad += [f"{page.name}: {module}.{n}" for n in names if n.startswith("_")]
    assert not bad, bad


def test_only_app_state_calls_streamlit():
    users = [p.name for p in PACKAGE.glob("*.py") if any(m.split(".")[0] == "streamlit" for m, _ in imports(p))]
    assert users == ["app_state.py"], users
