"""The preset ladder: every size trained with its recipe (bert_core.training.recipes) for fixed budgets on one
machine, then scored at the [MASK]ed positions of its held-out documents, against the unigram line. Each row says
the precision its training computed in (training.distributed: bf16 on a CPU with bfloat16 instructions).

Each run is `python -m bert_core train --corpus C --preset P --time-budget B --out DIR` (the CLI's defaults and
nothing else), then `heldout` and `eval --json` on the documents it held out. The result goes to
bert_core/training/preset_ladder.json (the Train page's "What each size reaches" reads it) and, with --plot, a PNG of
accuracy against time, one curve per size (drawn by Plotly in Debian's chromium through Playwright).

    .venv/bin/python benchmarks/preset_ladder.py --presets nano,tiny,mini,small --budgets 60,300
    .venv/bin/python benchmarks/preset_ladder.py --presets small --budgets 900 --merge    # adds to the file
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bert_core.paths import shared_data_dir  # noqa: E402
from bert_core.training.recipes import LADDER_FILE  # noqa: E402

OUT = LADDER_FILE  # the file the Train page's "What each size reaches" reads

DEFAULT_CORPUS = (shared_data_dir() or ROOT.parent / "shared" / "data") / "wikitext-2" / "valid.txt"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return f"{_cpu_name()}, {os.cpu_count()} cores"


def run_one(preset: str, budget: float, corpus: Path, device: str, work: Path) -> dict:
    """Train one size for one budget with the CLI's defaults and score its held-out documents."""
    out = work / f"{preset}-{budget:g}"
    py = [sys.executable, "-m", "bert_core"]
    train = py + ["train", "--corpus", str(corpus), "--preset", preset, "--time-budget", f"{budget:g}",
                  "--device", device, "--out", str(out), "--json"]
    done = subprocess.run(train, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"error: {preset} {budget:g} s failed: {done.stderr.strip().splitlines()[-1:]}")
    metrics = json.loads(done.stdout)
    held = work / f"{preset}-{budget:g}.txt"
    subprocess.run(py + ["heldout", "--checkpoint", str(out), "--out", str(held)], cwd=ROOT, check=True,
                   capture_output=True)
    scored = subprocess.run(py + ["eval", "--checkpoint", str(out), "--text-file", str(held), "--json",
                                  "--device", device], cwd=ROOT, check=True, capture_output=True, text=True)
    r = json.loads(scored.stdout)
    from bert_core.training.distributed import computes_in

    row = {"preset": preset, "device": device, "precision": computes_in(device), "budget_s": budget,
           "steps": metrics["steps"],
           "masked_accuracy": r["accuracy_by_decision"]["masked"], "overall_accuracy": r["masked_token_accuracy"],
           "kept_accuracy": r["accuracy_by_decision"]["kept"], "unigram_accuracy": r["unigram_baseline"]["accuracy"],
           "perplexity": r["perplexity"], "masked_tokens": r["masked_tokens"],
           "warnings": metrics.get("warnings", [])}
    print(f"{preset:>6} {budget:>6g} s  {row['steps']:>6} steps  [MASK] {row['masked_accuracy']:.2%} "
          f"({row['masked_accuracy'] / row['unigram_accuracy']:.2f}x unigram)  all {row['overall_accuracy']:.2%}",
          flush=True)
    return row


def plot(data: dict, path: Path) -> None:
    """Accuracy at [MASK] against the budget, one line per size, the unigram line dashed; a PNG via chromium."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for device in sorted({r["device"] for r in data["rows"]}):
        for preset in dict.fromkeys(r["preset"] for r in data["rows"]):
            rows = sorted((r for r in data["rows"] if r["preset"] == preset and r["device"] == device),
                          key=lambda r: r["budget_s"])
            if rows:
                fig.add_scatter(x=[r["budget_s"] / 60 for r in rows], y=[r["masked_accuracy"] for r in rows],
                                mode="lines+markers", name=f"{preset} ({device})")
    unigram = [r["unigram_accuracy"] for r in data["rows"]]
    fig.add_hline(y=sum(unigram) / len(unigram), line_dash="dash", annotation_text="unigram line")
    fig.update_layout(title=f"Held-out [MASK] accuracy by size and budget ({data['machine']})", width=900,
                      height=500, xaxis_title="training budget (minutes, log)", yaxis_title="accuracy at [MASK]",
                      yaxis_tickformat=".0%", xaxis_type="log")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        page_file = Path(tmp) / "ladder.html"
        fig.write_html(page_file, include_plotlyjs=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium")
            page = browser.new_page(viewport={"width": 920, "height": 520})
            page.goto(page_file.as_uri())
            page.wait_for_selector(".main-svg")
            page.screenshot(path=str(path))
            browser.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="nano,tiny,mini,small,medium,base")
    p.add_argument("--budgets", default="60,300", help="seconds, comma-separated")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--merge", action="store_true", help="keep the rows already in --out for other sizes/budgets")
    p.add_argument("--plot", type=Path, help="also draw the ladder as a PNG here")
    args = p.parse_args()
    if not args.corpus.is_file():
        print(f"error: no corpus at {args.corpus} (give --corpus FILE)", file=sys.stderr)
        return 2
    rows, commands = [], []
    if args.merge and args.out.is_file():
        before = json.loads(args.out.read_text())
        rows, commands = before["rows"], before.get("commands", [])
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            for budget in (float(b) for b in args.budgets.split(",")):
                rows = [r for r in rows if (r["preset"], r["device"], r["budget_s"]) != (preset, args.device, budget)]
                rows.append(run_one(preset, budget, args.corpus, args.device, Path(tmp)))
    data = {"machine": machine(args.device), "date": datetime.date.today().isoformat(),
            "corpus": "WikiText-2 (its validation split; each run's held-out 10% of articles scored)"
            if args.corpus == DEFAULT_CORPUS else args.corpus.name,
            "commands": commands + ["benchmarks/preset_ladder.py " + " ".join(sys.argv[1:])], "rows": rows}
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    if args.plot:
        plot(data, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
