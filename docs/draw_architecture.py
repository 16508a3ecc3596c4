"""Draw docs/architecture.svg from today's code: bert_core's wings as floors (each module by name, and how many
imports run up a floor, counted from the source), and the path of one Train-page run down to the loop and back up
as events. tests/test_repository.py checks that the committed picture is the one this script draws.

    .venv/bin/python docs/draw_architecture.py            # rewrites docs/architecture.svg
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bert_core"
OUT = ROOT / "docs" / "architecture.svg"

# Top to bottom, as a visitor's click travels: (folder, title, what it holds).
FLOORS = [
    ("pages", "pages/, app.py", "layout and widgets only; no logic, no files"),
    ("cli", "cli/", "python -m bert_core COMMAND: flags, recipe resolution, output"),
    ("corpus", "corpus/ (optional)", "corpus build: sources, cleaning, dedup, decontamination, shards"),
    ("cluster", "cluster/ (optional)", "a Ray cluster's jobs, loaded only when one is set"),
    ("app", "app/", "the pages' side of the server: session state and widgets (the only Streamlit), classes, export"),
    ("serve", "serve/", "hosting runs: the queue, jobs, child processes, records, storage, where models come from"),
    ("inspect", "inspect/", "looking inside a model: fill-mask, attention, probes, generation, Plotly figures"),
    ("training", "training/", "the observable run loop and what runs in it: Trainer, specs, fine-tuning, evaluation"),
    ("data", "data/", "text to tensors: corpora, shards, toy grammar, NSP pairs and masking, task data"),
    ("model", "model/", "what a checkpoint holds: config, the BERT (one file), tokenizer, HF folders, checkpoints"),
    ("ground", "errors.py, paths.py", "the one user-error type; where files live"),
]
# Floors drawn side by side in one row (none imports the other): the CLI and the two optional parts.
ROWS = [("pages",), ("cli", "corpus", "cluster"), ("app",), ("serve",), ("inspect",), ("training",), ("data",),
        ("model",), ("ground",)]
SIDE_BY_SIDE = {"cli", "corpus", "cluster"}

# One Train-page run: (where, what happens). Settings go down the left arrow; events come back up the right.
RUN_PATH = [
    ("pages/2_Train.py", "widgets; their start values: training/lesson_settings"),
    ("training/train_spec.py", "page_spec: one validated TrainSpec, built once"),
    ("serve/runs.py", "the fair queue, turns and watchers"),
    ("serve/training_process.py", "a child process; the spec crosses a pipe"),
    ("training/run_builder.py", "build_run: data, model, Trainer (the CLI's too)"),
    ("training/trainer.py", "the loop: step, evaluate, checkpoint -> events"),
]
RETURN_PATH = "events (steps, evaluations, probes) -> pipe -> the job on the server -> a fragment polls -> charts"


def _wing(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else "ground"


def modules() -> dict[str, list[str]]:
    """Each floor's module names (the package's own __init__ and __main__ left out)."""
    floors: dict[str, list[str]] = {f: [] for f, _, _ in FLOORS}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            floors[_wing(path)].append(path.stem)
    floors["pages"] = [p.stem for p in [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]]
    return floors


def wing_imports() -> Counter:
    """(importing wing, imported wing) -> how many module-to-module imports, at any depth in a file."""
    counts: Counter = Counter()
    files = [*PACKAGE.rglob("*.py"), ROOT / "app.py", *(ROOT / "pages").glob("*.py")]
    for path in files:
        if path.parent == PACKAGE and path.name in ("__init__.py", "__main__.py"):
            continue  # the package's door: it re-exports and dispatches, above every floor
        mine = "pages" if path.parent.name == "pages" or path.name == "app.py" else _wing(path)
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bert_core"):
                parts = node.module.split(".")
                if len(parts) >= 2:
                    targets.add(parts[1] if (PACKAGE / parts[1]).is_dir() else "ground")
                else:
                    targets.add("ground")
        for t in targets - {mine}:
            counts[(mine, t)] += 1
    return counts


def _text(x, y, s, size=13, weight="normal", anchor="start", color="#1a1a1a") -> str:
    return (f'<text x="{x}" y="{y}" font-size="{size}" font-weight="{weight}" text-anchor="{anchor}" '
            f'fill="{color}">{escape(s)}</text>')


def _wrap(items: list[str], width: int, sep: str = "   ") -> list[str]:
    lines, line = [], ""
    for item in items:
        if line and len(line) + len(item) + 3 > width:
            lines.append(line)
            line = ""
        line = f"{line}{sep}{item}" if line else item
    return lines + ([line] if line else [])


def draw() -> str:
    """The picture as SVG text."""
    floors = modules()
    counts = wing_imports()
    colors = {"pages": "#fde2e4", "cli": "#e2ece9", "corpus": "#f3e8f8", "cluster": "#f3e8f8", "app": "#e2ece9",
              "serve": "#e2ece9", "inspect": "#fff1e6", "training": "#dfe7fd", "data": "#e8f0d8", "model": "#f0efeb",
              "ground": "#eeeeee"}
    parts, y, left, width = [], 70, 20, 640
    boxes = {}
    described = {f[0]: f for f in FLOORS}
    rows = [[described[folder] for folder in row] for row in ROWS]
    for row in rows:
        box_w = (width - 10 * (len(row) - 1)) // len(row)
        chars = box_w // 7
        heights = []
        for folder, _, what in row:
            names = floors[folder]
            heights.append(44 + 16 * (len(_wrap(what.split(), chars, ' ')) + len(_wrap(names, chars))))
        h = max(heights)
        for i, (folder, title, what) in enumerate(row):
            x = left + i * (box_w + 10)
            boxes[folder] = (x, y, box_w, h)
            parts.append(f'<rect x="{x}" y="{y}" width="{box_w}" height="{h}" rx="8" fill="{colors[folder]}" '
                         f'stroke="#888"/>')
            parts.append(_text(x + 10, y + 20, title, 15, "bold"))
            ty = y + 38
            for line in _wrap(what.split(), chars, ' '):
                parts.append(_text(x + 10, ty, line, 12, color="#444"))
                ty += 16
            for line in _wrap(floors[folder], chars):
                parts.append(_text(x + 10, ty, line, 12, color="#1f3a93"))
                ty += 16
        y += h + 14
    order = [f for f, _, _ in FLOORS]
    upward = sum(n for (a, b), n in counts.items() if order.index(b) < order.index(a)
                 and not {a, b} <= SIDE_BY_SIDE)
    parts.insert(0, _text(left, 30, "bert_core in wings: each floor imports only the floors below it", 18, "bold"))
    parts.insert(1, _text(left, 52, f"imports that run up a floor: {upward}", 12, color="#444"))
    total_h = y
    # The run's path, on the right.
    rx, ry, rw = 700, 70, 460
    parts.append(_text(rx, 30, "One Train-page run, down and back", 18, "bold"))
    parts.append(_text(rx, 52, "settings travel down once, as one spec; results come back up only as events", 12,
                       color="#444"))
    step_h = 58
    for i, (where, what) in enumerate(RUN_PATH):
        top = ry + i * (step_h + 22)
        wing = "pages" if where.startswith("pages") else where.split("/")[0]
        parts.append(f'<rect x="{rx + 40}" y="{top}" width="{rw - 80}" height="{step_h}" rx="8" '
                     f'fill="{colors.get(wing, "#eee")}" stroke="#888"/>')
        parts.append(_text(rx + 52, top + 22, where, 14, "bold"))
        parts.append(_text(rx + 52, top + 42, what, 12, color="#444"))
        if i:
            parts.append(f'<line x1="{rx + 110}" y1="{top - 22}" x2="{rx + 110}" y2="{top - 2}" stroke="#1f3a93" '
                         f'stroke-width="2" marker-end="url(#down)"/>')
    bottom = ry + len(RUN_PATH) * (step_h + 22) - 22
    parts.append(f'<line x1="{rx + rw - 20}" y1="{bottom - 10}" x2="{rx + rw - 20}" y2="{ry + 10}" stroke="#c0392b" '
                 f'stroke-width="2" marker-end="url(#up)"/>')
    parts.append(_text(rx + 110, bottom + 24, "down: the spec", 12, color="#1f3a93"))
    for j, line in enumerate(_wrap(RETURN_PATH.split(" -> "), 60)):
        parts.append(_text(rx, bottom + 48 + 16 * j, ("up: " if j == 0 else "      ") + line.replace("   ", " -> "),
                           12, color="#c0392b"))
    total_h = max(total_h, bottom + 100)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="{total_h}" viewBox="0 0 1200 {total_h}" '
            'font-family="DejaVu Sans, Helvetica, Arial, sans-serif">\n<defs>'
            '<marker id="down" markerWidth="6" markerHeight="6" refX="5" refY="3" orient="auto">'
            '<path d="M0,0 L6,3 L0,6 z" fill="#1f3a93"/></marker>'
            '<marker id="up" markerWidth="6" markerHeight="6" refX="5" refY="3" orient="auto">'
            '<path d="M0,0 L6,3 L0,6 z" fill="#c0392b"/></marker></defs>\n'
            f'<rect width="1200" height="{total_h}" fill="white"/>\n')
    return head + "\n".join(parts) + "\n</svg>\n"


def main() -> int:
    missing = [where for where, _ in RUN_PATH if not (ROOT / where).exists() and not (PACKAGE / where).exists()]
    if missing:
        print(f"error: the run path names files that do not exist: {', '.join(missing)}", file=sys.stderr)
        return 1
    OUT.write_text(draw())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
