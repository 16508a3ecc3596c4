"""The Fine-tune page's built-in and real tasks on the page's own defaults, with each shipped model active: what its
"What to expect" captions quote (bert_core.inspect.finetune_kinds.PAGE_FIGURES; docs/benchmarks.md, "The Fine-tune
page's defaults with each shipped model").

    PYTHONPATH=. python benchmarks/finetune_page_defaults.py --out runs/page-defaults [--jobs 2]

Each race is the `python -m bert_core finetune` command that the page's race equals (tests/test_finetune_race.py:
the same weights from the same settings): the data's split sizes, steps and max length are read from the page's own
tables (SIZES, the kind's settings, DATA_SETTINGS), the learning rate is the size rule's (the CLI's default, as the
page's), pretrained against scratch and the kind's baselines. One thread a run, --jobs at once; a run whose JSON is
in --out already is not run again, so an interrupted call resumes. The table goes to stdout and --out/table.md.
About 40 minutes of a 2-core CPU with bfloat16 instructions at --jobs 2 for every model, task and seed.
"""
import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bert_core.inspect.finetune_kinds import KIND_OF, NAMES
from bert_core.inspect.finetune_kinds import DATA_SETTINGS, KIND_PAGES, SIZES

MODELS = ("bert-tiny-english", "bert-mini-english", "gpt-tiny-english", "gpt-mini-english")
# The page's data choice -> the CLI's --task (its kind: finetune_kinds.KIND_OF).
TASKS = {"toy_order": "toy-order", "toy": "toy", "polarity": "polarity", "ag_news": "ag_news", "conll2000": "conll2000"}


def page_args(choice: str) -> list[str]:
    """The finetune arguments of the page's defaults for a data choice."""
    kind, task = KIND_OF[choice], TASKS[choice]
    settings = {**KIND_PAGES[kind].settings, **DATA_SETTINGS.get(choice, {})}
    train, val = SIZES[choice]
    return ["--task", task, "--train-size", str(train), "--val-size", str(val), "--steps", str(settings["steps"]),
            "--max-length", str(settings["maxlen"]), "--compare-scratch", "--baseline"]


def run(out: Path, name: str, args: list[str], timeout: float) -> dict | None:
    target = out / f"{name}.json"
    if not target.exists():
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "bert_core", "finetune", *args, "--json"]
        with open(out / f"{name}.err", "w") as err:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, timeout=timeout)
        if done.returncode != 0:
            print(f"{name}: exit {done.returncode} (see {name}.err)", file=sys.stderr)
            return None
        target.write_text(done.stdout)
    return json.loads(target.read_text())


def score(result: dict, kind: str) -> float:
    """A sentence task's accuracy; chunks' chunk F1 (a tags result's macro-F1 over chunk types)."""
    return 100 * result["accuracy" if kind == "labels" else "macro_f1"]


def baselines(kind: str) -> tuple[str, str | None]:
    """The kind's baselines' result names, the second None for sentence labels (finetune_kinds.NAMES)."""
    names = [name for name, _ in NAMES[kind][2:]]
    return names[0], (names[1] if len(names) > 1 else None)


def table(out: Path, models, choices, seeds) -> str:
    """One row a model and task, each cell the seeds' figures in order: accuracy % for sentence labels, chunk F1 for
    chunks (tests/test_finetune_kinds.py reads it back against the page's ranges)."""
    lines = ["| model | task | seeds | bag of words, or POS-tag baseline | word baseline | pretrained | from scratch |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for model in models:
        for choice in choices:
            kind = KIND_OF[choice]
            found = [json.loads(p.read_text()) for s in seeds if (p := out / f"{choice}-{model}-{s}.json").exists()]
            if not found:
                continue
            runs = [{r["name"]: r for r in d["results"]} for d in found]

            def cells(name):
                return " / ".join(f"{score(r[name], kind):.1f}" if name in r else "-" for r in runs) if name else "-"
            first, second = baselines(kind)
            lines.append(f"| {model} | {choice} | {' / '.join(map(str, seeds[:len(found)]))} | {cells(first)} | "
                         f"{cells(second)} | {cells('pretrained')} | {cells('scratch')} |")
    return "\n".join(lines) + "\n"


def figures(out: Path, models, choices, seeds) -> dict:
    """finetune_kinds.PAGE_FIGURES as measured: each model's and baseline's lowest and highest figure over
    the seeds, for every model and task with all its seeds."""
    got = {}
    for model in models:
        for choice in choices:
            kind = KIND_OF[choice]
            paths = [out / f"{choice}-{model}-{s}.json" for s in seeds]
            if not all(p.exists() for p in paths):
                continue
            runs = [{r["name"]: r for r in json.loads(p.read_text())["results"]} for p in paths]
            names = [name for name, _ in NAMES[kind]]
            got.setdefault(model, {})[choice] = {
                n: (min(v := [round(score(r[n], kind), 1) for r in runs]), max(v)) for n in names}
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=3600)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(f"{c}-{m}-{s}", ["--checkpoint", f"checkpoints/{m}", *page_args(c), "--seed", str(s)])
            for s in args.seeds for m in args.models for c in args.tasks]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(lambda j: run(args.out, *j, args.timeout), jobs))
    text = table(args.out, args.models, args.tasks, args.seeds)
    (args.out / "table.md").write_text(text)
    print(text)
    print("PAGE_FIGURES =", json.dumps(figures(args.out, args.models, args.tasks, args.seeds)).replace("[", "(")
          .replace("]", ")"))


if __name__ == "__main__":
    main()
