"""The wings read top-down: each imports only the wings below it, nothing imports the CLI, no module imports another
that imports it back, pages use only the UI helpers and bert_core's public functions, and only the app's `app_*`
modules call Streamlit."""

import ast
import os
import subprocess
import sys
from pathlib import Path

from bert_core.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "bert_core"
PAGES = [REPO_ROOT / "app.py", *sorted((REPO_ROOT / "pages").glob("*.py"))]
# The wings from the ground up; a module may import its own wing and those before it (errors and paths are ground).
WINGS = ("model", "data", "training", "inspect", "serve", "app", "cluster", "corpus", "cli")
GROUND = {"bert_core", "bert_core.errors", "bert_core.paths"}
# What a page may import from bert_core: the UI helpers and the library's public modules. Not the CLI, not the
# training process's internals, not the speed paths or the allocator.
PAGE_API = {"app.app_state", "app.app_drawing", "app.live_change", "app.app_models", "app.app_sidebar", "app.app_tab", "app.app_widgets",
            "app.run_panel", "app.url_settings", "serve.app_storage", "serve.jobs", "serve.model_sources",
            "inspect.figures", "app.page_copy",
            "inspect.finetune_figures", "inspect.inspection", "app.export", "model.config", "errors",
            "data.classification_data", "training.finetune", "paths", "data.corpora", "data.toy_grammar",
            "model.tokenization", "data.pretraining_data", "training.trainer", "training.evaluation", "inspect.probes",
            "training.comparison", "inspect.generation", "serve.runs", "training.recipes", "training.plateau",
            "data.token_tags_data", "data.answer_spans_data", "training.token_tagging", "training.answer_spans",
            "inspect.lesson", "inspect.lesson_figures", "inspect.training_step",
            "serve.finetune_runs", "inspect.finetune_kinds", "training.finetune_race", "training.finetune_settings",
            "training.finetune_spec", "inspect.salience",
            "inspect.tricks", "data.task_downloads", "training.lesson_settings",
            # How BERT computes (pages/7_How_BERT_computes.py) and a led class (pages/0_Lesson.py)
            "inspect.computation_figures", "inspect.attention_steps", "inspect.embeddings", "inspect.grammar",
            "inspect.built_in_text", "app.class_view", "app.lesson_classes",
            "inspect.whole_pass",
            "inspect.word_maps", "inspect.word_map_vectors", "inspect.safe_text", "inspect.feed_forward",
            "inspect.layer_probes", "inspect.head_weights", "inspect.syntax_heads", "data.treebank",
            # the Train page's what each layer knows, snapshot by snapshot
            "inspect.word_class_timelapse", "inspect.word_class_figures"}


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every import in a file, at any depth (imports inside functions count)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [a.name for a in node.names]
            if node.module.count(".") <= 1:  # `from bert_core.serve import jobs` imports bert_core.serve.jobs
                folder = PACKAGE.parent.joinpath(*node.module.split("."))
                modules = [n for n in names if (folder / f"{n}.py").exists()]
                found += [(f"{node.module}.{n}", []) for n in modules]
                if len(modules) < len(names):
                    found.append((node.module, [n for n in names if n not in modules]))
            else:
                found.append((node.module, names))
    return found


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def graph() -> dict[str, set[str]]:
    edges = {}
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        edges[name] = {m for m, _ in imports(path) if m.startswith("bert_core") and m != name}
    return edges


def wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in WINGS) else None


def test_the_package_is_wings_and_a_ground_floor():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "errors.py", "paths.py"], top
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(WINGS)


def test_each_wing_imports_only_the_wings_below_it():
    upward = []
    for module, deps in graph().items():
        mine = wing(module)
        for dep in deps - GROUND:
            theirs = wing(dep)
            if mine is None or theirs is None:
                # The package's own __init__ and __main__ sit above every wing (they re-export and dispatch).
                if module not in ("bert_core", "bert_core.__main__") and mine is None:
                    upward.append(f"{module} -> {dep}")
            elif WINGS.index(theirs) > WINGS.index(mine):
                upward.append(f"{module} -> {dep}")
    assert not upward, upward


def test_nothing_imports_the_cli():
    importers = [m for m, deps in graph().items() if "bert_core.cli.main" in deps and m != "bert_core.__main__"]
    importers += [p.name for p in PAGES if any(m == "bert_core.cli.main" for m, _ in imports(p))]
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


# The modules that call Streamlit. The job factory and everything the pages steer are not among them.
STREAMLIT_SIDE = {"bert_core.app.app_drawing", "bert_core.app.app_models", "bert_core.app.app_state", "bert_core.app.live_change",
                  "bert_core.app.app_sidebar", "bert_core.app.app_tab", "bert_core.app.app_widgets"}


def test_only_the_serving_wing_calls_streamlit():
    users = {module_name(p) for p in PACKAGE.rglob("*.py")
             if any(m.split(".")[0] == "streamlit" for m, _ in imports(p))}
    assert users == STREAMLIT_SIDE, sorted(users ^ STREAMLIT_SIDE)


# The app's server imports these without loading torch: the home page draws at once, and a class server's process
# stays small until a model is shown (training runs in child processes). Their torch imports sit inside functions.
TORCH_FREE = (*sorted(STREAMLIT_SIDE), "bert_core.serve.jobs",
              "bert_core.serve.job_factory", "bert_core.serve.job_base", "bert_core.serve.thread_job",
              "bert_core.serve.training_process", "bert_core.serve.training_child", "bert_core.serve.training_mirrors",
              "bert_core.serve.runs", "bert_core.app.run_panel", "bert_core.serve.finetune_runs",
              "bert_core.training.finetune_spec", "bert_core.data.task_downloads", "bert_core.data.treebank",
              "bert_core.serve.model_sources",
              "bert_core.serve.app_storage", "bert_core.app.export", "bert_core.inspect.figures",
              "bert_core.inspect.probes", "bert_core.training.comparison", "bert_core.training.recipes",
              "bert_core.training.heldout", "bert_core.data.objectives", "bert_core.model.config")


def test_the_servers_modules_import_without_torch(tmp_path):
    code = ("import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
            "    assert 'torch' not in sys.modules, name\n")
    # An empty state folder: with run records in it (earlier tests in this worker write them), app_state's store
    # restores those runs on a thread of its own, which loads torch while the later imports are checked.
    env = {**os.environ, "BERT_EXPLORER_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-c", code, *TORCH_FREE], capture_output=True, text=True,
                          cwd=REPO_ROOT, env=env)
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1:]


# Imports inside functions hide a module's dependencies; each one left has a reason, said in a comment on its line or
# just above the group it belongs to (a torch module the server must not load yet, an optional dependency...).
MAX_INNER_IMPORTS = 30


def inner_imports(path: Path) -> list[ast.stmt]:
    """The import statements inside functions (methods and nested functions included), each counted once."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def test_imports_inside_functions_are_few_and_say_why():
    total, silent = 0, []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        found = inner_imports(path)
        total += len(found)
        spans = {n: set(range(n.lineno, n.end_lineno + 1)) for n in found}
        for node in found:
            # The comment: on the import's own lines, or on the first line above the run of imports it belongs to.
            above = node.lineno - 1
            while any(above in s for s in spans.values()) or (above and not lines[above - 1].strip()
                                                                   and any(above - 1 in s for s in spans.values())):
                above -= 1
            said = any("#" in lines[i - 1] for i in spans[node]) or (above > 0 and "#" in lines[above - 1])
            if not said:
                silent.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert total <= MAX_INNER_IMPORTS, f"{total} imports inside functions in bert_core (at most {MAX_INNER_IMPORTS})"
    assert not silent, f"imports inside functions without a comment saying why: {silent}"


def test_the_inner_import_count_sees_every_depth(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import os\n\ndef f():\n    import json\n\n    class C:\n        def g(self):\n"
                      "            from pathlib import Path\n    return C\n\nclass D:\n    import re\n")
    assert [n.lineno for n in inner_imports(sample)] == [4, 8]


# No class over 250 lines and no function over 80 (the developers' guide), in the package and the pages.
MAX_CLASS_LINES, MAX_FUNCTION_LINES = 250, 80


def test_no_class_or_function_is_too_long():
    long = []
    for path in [*sorted(PACKAGE.rglob("*.py")), *sorted((REPO_ROOT / "pages").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            size = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, ast.ClassDef) and size > MAX_CLASS_LINES:
                long.append(f"class {path.relative_to(REPO_ROOT)}:{node.name} ({size} lines)")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and size > MAX_FUNCTION_LINES:
                long.append(f"function {path.relative_to(REPO_ROOT)}:{node.name} ({size} lines)")
    assert not long, long
