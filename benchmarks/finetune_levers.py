"""Issue #28's fine-tuning protocol, one lever at a time, many runs at once: for each lever, task and seed,
`python -m bert_core finetune --checkpoint C --task T --val-size 300 --steps 1500 --seed S <lever's flags>`, with
TF-IDF + LR fitted on the same split (`--baseline`, on the first lever's runs). Prints a table of validation
accuracy per seed, the mean, and each lever's mean gap to TF-IDF and to the first lever on the same splits (paired:
the 300 validation rows move a single run by about 2 points, the same split moves both sides alike).

    PYTHONPATH=. python benchmarks/finetune_levers.py --checkpoint checkpoints/bert-mini-english \\
        --lever "defaults=" --lever "lr 2e-4=--lr 2e-4" --lever "batch 64=--batch-size 64" \\
        --seeds 10 11 12 --jobs 16 --device cuda --out runs/levers

On a GPU the runs share the card (16 at once on an H100: about a minute each at mini); on a CPU give --jobs the
number of cores (each run gets one thread). Seeds 0-4 are the splits the docs report; pick levers on others.
On a lent GPU machine, which has no ../shared/data, unpack the carried copy first (benchmarks/gpu_common.sh's
header says how to pack it): `mkdir -p ../shared && tar xzf .devdata/data.tar.gz -C ../shared`.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def parse_lever(text: str) -> tuple[str, list[str]]:
    name, sep, flags = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"a lever is NAME=FLAGS (FLAGS may be empty), not {text!r}")
    return name.strip(), shlex.split(flags)


def run_one(args, lever: str, flags: list[str], task: str, seed: int, baseline: bool, threads: int) -> dict:
    # Not Path.with_suffix: a lever named "layer decay 0.8" would lose ".8-task-seed" and share one file.
    stem = args.out / f"{lever.replace(' ', '_')}-{task}-{seed}"
    cmd = [sys.executable, "-m", "bert_core", "finetune", "--checkpoint", str(args.checkpoint), "--task", task,
           "--val-size", str(args.val_size), "--steps", str(args.steps), "--seed", str(seed), "--json", *flags]
    if args.device:
        cmd += ["--device", args.device]
    if baseline:
        cmd.append("--baseline")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    Path(f"{stem}.err").write_text(proc.stderr)
    Path(f"{stem}.json").write_text(proc.stdout)
    if proc.returncode != 0:
        return {"lever": lever, "task": task, "seed": seed, "error": proc.stderr.strip().splitlines()[-1:]}
    results = {r["name"]: r["accuracy"] * 100 for r in json.loads(proc.stdout)["results"]}
    return {"lever": lever, "task": task, "seed": seed, "accuracy": results.get("pretrained"),
            "tfidf": results.get("tfidf")}


def _mean(gaps: list[float]) -> str:
    """A signed mean gap, or nothing where there is nothing to compare."""
    return f"{statistics.mean(gaps):+.2f}" if gaps else ""


def table(rows: list[dict], levers: list[str], tasks: list[str], seeds: list[int]) -> str:
    got = {(r["lever"], r["task"], r["seed"]): r for r in rows if r.get("accuracy") is not None}
    tfidf = {(r["task"], r["seed"]): r["tfidf"] for r in rows if r.get("tfidf") is not None}
    lines = ["| task | lever | seeds " + " / ".join(map(str, seeds)) + " | mean | vs TF-IDF | vs " + levers[0] + " |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for task in tasks:
        base = [tfidf.get((task, s)) for s in seeds]
        if all(b is not None for b in base):
            lines.append(f"| {task} | TF-IDF + LR | {' / '.join(f'{b:.1f}' for b in base)} | "
                         f"{statistics.mean(base):.2f} | | |")
        for lever in levers:
            acc = [got[(lever, task, s)]["accuracy"] if (lever, task, s) in got else None for s in seeds]
            have = [(s, a) for s, a in zip(seeds, acc) if a is not None]
            if not have:
                continue
            gap = [a - tfidf[(task, s)] for s, a in have if (task, s) in tfidf]
            first = [a - got[(levers[0], task, s)]["accuracy"] for s, a in have if (levers[0], task, s) in got]
            lines.append(f"| {task} | {lever} | {' / '.join('-' if a is None else f'{a:.1f}' for a in acc)} | "
                         f"{statistics.mean(a for _, a in have):.2f} | {_mean(gap)} | {_mean(first)} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, default=Path("checkpoints/bert-mini-english"))
    p.add_argument("--lever", type=parse_lever, action="append", required=True,
                   help="NAME=FLAGS, e.g. 'lr 2e-4=--lr 2e-4'; the first is the reference ('defaults=')")
    p.add_argument("--tasks", nargs="+", default=["polarity", "ag_news"])
    p.add_argument("--seeds", nargs="+", type=int, default=[10, 11, 12])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--val-size", type=int, default=300)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--device", default=None, help="passed to finetune (default: its own, auto)")
    p.add_argument("--timeout", type=float, default=7200)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    levers = dict(args.lever)
    names = list(levers)
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    jobs = [(name, levers[name], task, seed, name == names[0])
            for task in args.tasks for seed in args.seeds for name in names]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda j: run_one(args, *j, threads), jobs))
    (args.out / "summary.json").write_text(json.dumps({"levers": levers, "rows": rows}, indent=1))
    for r in rows:
        if "error" in r:
            print(f"error: {r['lever']} {r['task']} seed {r['seed']}: {r['error']}", file=sys.stderr)
    print(table(rows, names, args.tasks, args.seeds))


if __name__ == "__main__":
    main()
