"""Every figure the README, docs/shipped-model.md and the Fine-tune page quote for the shipped BERT mini, measured
again on one folder: what to run before a new mini is shipped (its weights move every one of them).

    PYTHONPATH=. python benchmarks/remeasure_mini.py --checkpoint CANDIDATE --out runs/remeasure [--jobs 2]

Each run is a `python -m bert_core finetune` command with one thread (the figures are quoted "one thread a run"),
--jobs of them at once, longest first; each writes NAME.json and NAME.err in --out, and a run whose JSON is already
there is not run again (so an interrupted call resumes). Then a summary of each figure beside the command that gave
it goes to --out/summary.md:
- issue #28's protocol: polarity and AG News, all but 300 validation rows, 1,500 steps, seeds 0-2, with TF-IDF + LR;
- the Fine-tune page's race with its defaults (2,000 rows, 600 steps a model, 64 tokens: finetune_page_defaults'
  page_args), pretrained against scratch and the bag of words, seeds 0-2;
- the toy stories by the CLI's recipe (8,000 steps, seeds 0-2) and the page's 600 s on one thread (seed 0);
- CoNLL-2000 chunks, 1,500 steps, seeds 0-2, beside the POS baseline.
About 50 minutes of a 2-core CPU with bfloat16 instructions at --jobs 2 (2026-11-27; the toy stories take most of it).
"""
import argparse
import json
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.finetune_page_defaults import page_args, run   # the page's race; one finetune command a run

CONLL = "../shared/data/conll2000/train.txt"


def jobs_for(checkpoint: str, seeds: list[int]) -> list[tuple[str, list[str]]]:
    """(name, finetune arguments) for every figure, longest first."""
    c = ["--checkpoint", checkpoint]
    jobs = [(f"toyqa-{s}", c + ["--task", "toy-qa", "--seed", str(s)]) for s in seeds]
    jobs.append(("toyqa-page-0", c + ["--task", "toy-qa", "--time-budget", "600", "--train-size", "3000",
                                      "--val-size", "500", "--seed", "0"]))
    jobs += [(f"conll-{s}", c + ["--conll", CONLL, "--steps", "1500", "--baseline", "--seed", str(s)]) for s in seeds]
    for task in ("ag_news", "polarity"):
        jobs += [(f"protocol-{task}-{s}", c + ["--task", task, "--val-size", "300", "--steps", "1500", "--baseline",
                                              "--seed", str(s)]) for s in seeds]
    for task in ("ag_news", "polarity"):
        jobs += [(f"race-{task}-{s}", c + [*page_args(task), "--seed", str(s)]) for s in seeds]
    return jobs


def _score(result: dict, metric: str) -> float:
    return 100 * result[metric]


def summary(out: Path, jobs: list[tuple[str, list[str]]], seeds: list[int]) -> str:
    found = {name: json.loads((out / f"{name}.json").read_text()) for name, _ in jobs
             if (out / f"{name}.json").exists()}
    by_name = {name: {r["name"]: r for r in d["results"]} for name, d in found.items()}
    lines = ["| figure | seeds " + " / ".join(map(str, seeds)) + " | mean |", "| --- | --- | ---: |"]

    def row(label: str, prefix: str, model: str, metric: str = "accuracy", steps: bool = False) -> None:
        got = [by_name.get(f"{prefix}-{s}", {}).get(model) for s in seeds]
        cells = ["-" if r is None else f"{_score(r, metric):.1f}" + (f" ({r['steps']})" if steps else "")
                 for r in got]
        values = [_score(r, metric) for r in got if r is not None]
        mean = f"{statistics.mean(values):.2f}" if values else "-"
        lines.append(f"| {label} | {' / '.join(cells)} | {mean} |")

    for task in ("polarity", "ag_news"):
        row(f"protocol {task}: TF-IDF + LR", f"protocol-{task}", "tfidf")
        row(f"protocol {task}: BERT", f"protocol-{task}", "pretrained")
    for task in ("polarity", "ag_news"):
        row(f"page race {task}: pretrained (steps)", f"race-{task}", "pretrained", steps=True)
        row(f"page race {task}: from scratch (steps)", f"race-{task}", "scratch", steps=True)
        row(f"page race {task}: TF-IDF + LR", f"race-{task}", "tfidf")
    row("toy stories, 8,000 steps: exact match", "toyqa", "pretrained")
    row("CoNLL-2000 chunks: chunk F1", "conll", "pretrained", metric="macro_f1")
    page = by_name.get("toyqa-page-0", {}).get("pretrained")
    if page is not None:
        lines.append(f"| toy stories, the page's 600 s, seed 0: exact match (steps) | {_score(page, 'accuracy'):.1f} "
                     f"({page['steps']}) | |")
    text = "\n".join(lines) + "\n\nCommands (each with --json, one thread):\n" + "\n".join(
        f"- {name}: python -m bert_core finetune {' '.join(args)}" for name, args in jobs) + "\n"
    (out / "summary.md").write_text(text)
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default="checkpoints/bert-mini-english")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only", default="", help="run only the jobs whose names start with this")
    p.add_argument("--timeout", type=float, default=4 * 3600)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = jobs_for(args.checkpoint, args.seeds)
    todo = [j for j in jobs if j[0].startswith(args.only)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(lambda j: run(args.out, *j, args.timeout), todo))
    print(summary(args.out, jobs, args.seeds))


if __name__ == "__main__":
    main()
