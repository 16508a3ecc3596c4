"""The preset ladder in one device call (issue #62): every size trained on the same text for the same budget, one
after another, with [MASK] accuracy on its held-out documents read at times through each run, to a JSON; and a
plotting step that draws those curves beside the CPU ladder (bert_core/training/preset_ladder.json).

Each size is `python -m bert_core train --corpus C --preset P --time-budget B --device D` with its recipe and
nothing else (the CPU ladder's rule, benchmarks/preset_ladder.py), built through the same functions as `train` in a
child process of its own (so each size starts with a clean GPU), without checkpoints. Its held-out documents are
scored as `heldout` + `eval --json` score them (batches of 32 at the run's length, seed 0, fp32 on a CPU, bf16 on a
GPU) before the first step and at 1/32, 1/16, 1/8, 1/4, 1/2 and 3/4 of the budget and at its end; those evaluations
run inside the budget (their seconds are recorded: a fraction of a second each on a GPU). The unigram line is the
most frequent training token at the same masked positions, as `eval` reads it.

    python benchmarks/gpu_ladder.py --device cuda --budget 60 --out $OUT/ladder.json      # on the GPU machine
    python benchmarks/gpu_ladder.py --plot docs/preset-ladder-gpu.png --from docs/preset-ladder-gpu.json
    DEV=cpu: python benchmarks/gpu_ladder.py --device cpu --presets nano,tiny --budget 6 --out /tmp/ladder.json

The text is WikiText-2's validation split, as the CPU ladder's. Where ../shared/data is not beside the checkout (a
lent GPU machine gets the repository only), `--corpus` takes a file, and a name ending in .xz or .gz is unpacked
first: carry it as benchmarks/gpu_common.sh says (`.devdata/wikitext-2-valid.txt.xz`, 0.3 MB).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import lzma
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bert_core.paths import shared_data_dir  # noqa: E402
from bert_core.training.recipes import LADDER_FILE  # noqa: E402

PRESETS = "nano,tiny,mini,small,medium,base"
DEFAULT_CORPUS = (shared_data_dir() or ROOT.parent / "shared" / "data") / "wikitext-2" / "valid.txt"
CARRIED_CORPUS = ROOT / ".devdata" / "wikitext-2-valid.txt.xz"
MARKS = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4)   # shares of the budget at which a run is scored


def corpus_file(path: Path, work: Path) -> Path:
    """A plain text file of the corpus: `path` itself, or unpacked from .xz / .gz into `work`."""
    if path.suffix not in (".xz", ".gz"):
        return path
    opener = lzma.open if path.suffix == ".xz" else gzip.open
    # The unpacked name is the corpus's own (valid.txt), so `train` records it as the CPU ladder's runs did.
    out = work / path.name.removesuffix(path.suffix).removeprefix("wikitext-2-")
    with opener(path, "rb") as src:
        out.write_bytes(src.read())
    return out


class Scorer:
    """The held-out documents of a run as `eval` scores them: fixed batches (seeded masks), [MASK] accuracy, and the
    unigram guess from the training text's counts."""

    def __init__(self, built, work: Path, device):
        from bert_core.data.corpora import corpus_from_file
        from bert_core.data.objectives import MASK_RATE, objective_settings
        from bert_core.data.pretraining_data import PretrainingData, unigram_baseline
        from bert_core.training.heldout import documents_to_text

        trainer = built.trainer
        tok = trainer.tokenizer
        docs = [d for corpus in built.heldout.values() for d in corpus.documents]
        text = work / "heldout.txt"
        text.write_text(documents_to_text(docs))   # what `heldout` writes, read back as `eval` reads it
        data = PretrainingData(corpus_from_file(text), tok, max_seq_length=trainer.config.max_seq_length,
                               batch_size=32, mask_rate=MASK_RATE, seed=0, **objective_settings("mlm"))
        self.batches = data.eval_batches(50, seed=0)
        self.device = device
        self.unigram = unigram_baseline(trainer.data.token_counts, self.batches,
                                        never_ids=tok.special_ids - {tok.unk_id})["accuracy"]

    def __call__(self, model) -> dict:
        from bert_core.training.evaluation import evaluate

        r = evaluate(model, self.batches, device=self.device,
                     precision="bf16" if self.device.type == "cuda" else "fp32")
        return {"masked_accuracy": r.acc_by_decision["masked"], "overall_accuracy": r.mlm_acc,
                "perplexity": r.perplexity, "masked_tokens": r.num_masked}


def run_one(preset: str, budget: float, corpus: Path, device: str, extra: list[str]) -> dict:
    """Train one size for `budget` seconds with its recipe (in this process) and return its curve."""
    from bert_core.cli.main import build_parser
    from bert_core.cli.train_plan import new_run_plan
    from bert_core.cli.train_options import apply_recipe
    from bert_core.training.pretraining_events import StepEvent
    from bert_core.training.run_builder import build_run

    with tempfile.TemporaryDirectory() as tmp:
        argv = ["train", "--corpus", str(corpus), "--preset", preset, "--time-budget", f"{budget:g}",
                "--device", device, "--out", str(Path(tmp) / "run"), "--checkpoint-every", "0", *extra]
        args = build_parser().parse_args(argv)
        args.argv = argv
        recipe = apply_recipe(args)
        curve, marks, ref = [], [budget * m for m in MARKS], {}

        def score(elapsed_s: float, step: int) -> None:
            t = time.perf_counter()
            point = ref["scorer"](ref["trainer"].model)
            curve.append({"elapsed_s": round(elapsed_s, 2), "step": step, **point,
                          "eval_s": round(time.perf_counter() - t, 3)})

        def on_event(event) -> None:
            if isinstance(event, StepEvent) and marks and event.elapsed_s >= marks[0]:
                while marks and event.elapsed_s >= marks[0]:
                    marks.pop(0)
                score(event.elapsed_s, event.step)

        started = time.perf_counter()
        built = build_run(new_run_plan(args), callbacks=[on_event])
        trainer = ref["trainer"] = built.trainer
        ref["scorer"] = scorer = Scorer(built, Path(tmp), trainer.device)
        setup_s = time.perf_counter() - started
        score(0.0, 0)
        trainer.run()
        if trainer.state == "failed":
            raise RuntimeError(trainer.error)
        score(trainer.elapsed_s, trainer.step)
    cfg = trainer.config
    return {"preset": preset, "device": trainer.device.type, "budget_s": budget, "recipe": recipe,
            "batch": f"{cfg.batch_size} x {cfg.max_seq_length}", "compile": getattr(cfg, "compile", "off"),
            "steps": trainer.step, "training_s": round(trainer.elapsed_s, 1), "setup_s": round(setup_s, 1),
            "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "unigram_accuracy": scorer.unigram, "masked_accuracy": curve[-1]["masked_accuracy"], "curve": curve}


def machine(device: str) -> str:
    import torch

    if device == "cuda":
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    import os
    import platform

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"


def ladder(args) -> int:
    """Every size in a child process of its own, one after another; the rows so far written after each."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = corpus_file(args.corpus, Path(tmp))
        data = {"machine": machine(args.device), "date": datetime.date.today().isoformat(),
                "corpus": f"{args.corpus.name} (each run's held-out documents scored as `eval` scores them)",
                "budget_s": args.budget, "command": "benchmarks/gpu_ladder.py " + " ".join(sys.argv[1:]),
                "rows": [], "failed": []}
        for preset in args.presets.split(","):
            cmd = [sys.executable, __file__, "--one", preset, "--budget", f"{args.budget:g}", "--corpus", str(corpus),
                   "--device", args.device, *(["--compile", args.compile] if args.compile != "off" else [])]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.budget + args.slack)
            except subprocess.TimeoutExpired:
                done = subprocess.CompletedProcess(cmd, 124, "", f"stopped after {args.budget + args.slack:g} s")
            if done.returncode:
                last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                data["failed"].append({"preset": preset, "error": last[:400]})
                print(f"{preset:>6}  failed: {last[:200]}", file=sys.stderr, flush=True)
            else:
                row = json.loads(done.stdout.strip().splitlines()[-1])
                data["rows"].append(row)
                print(f"{preset:>6}  {row['steps']:>6} steps  [MASK] {row['masked_accuracy']:.2%} "
                      f"({row['masked_accuracy'] / row['unigram_accuracy']:.2f}x unigram)  setup {row['setup_s']} s",
                      file=sys.stderr, flush=True)
            args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 0 if data["rows"] else 1


def plot(gpu: dict, cpu: dict | None, path: Path) -> None:
    """[MASK] accuracy against training time (log), one curve per size on the GPU, beside the CPU ladder's points
    (its budgets), the unigram line dashed; a PNG drawn by Plotly in Debian's chromium."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    kind = "GPU" if any(r["device"] == "cuda" for r in gpu["rows"]) else "CPU"   # a dry run's rows are a CPU's
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06, subplot_titles=(
        f"{kind}: {gpu['machine'].split(',')[0]}, {gpu['budget_s']:g} s a size, one run each",
        f"CPU ladder: {cpu['machine'].split(',')[0]}, one run a budget" if cpu else "CPU ladder (not found)"))
    for row in gpu["rows"]:
        points = [p for p in row["curve"] if p["elapsed_s"] > 0]
        fig.add_scatter(x=[p["elapsed_s"] for p in points], y=[p["masked_accuracy"] for p in points],
                        mode="lines+markers", name=f"{row['preset']} ({kind})", row=1, col=1)
    for preset in dict.fromkeys(r["preset"] for r in (cpu or {}).get("rows", []) if r["device"] == "cpu"):
        rows = sorted((r for r in cpu["rows"] if r["preset"] == preset and r["device"] == "cpu"),
                      key=lambda r: r["budget_s"])
        fig.add_scatter(x=[r["budget_s"] for r in rows], y=[r["masked_accuracy"] for r in rows],
                        mode="lines+markers", name=f"{preset} (CPU)", line_dash="dot", row=1, col=2)
    unigram = [r["unigram_accuracy"] for r in gpu["rows"]]
    if unigram:
        fig.add_hline(y=sum(unigram) / len(unigram), line_dash="dash", annotation_text="unigram line")
    fig.update_xaxes(type="log", title_text="training time (s, log)", range=[0.5, 3.05])   # 3 s to 19 minutes
    fig.update_yaxes(tickformat=".0%", title_text="held-out accuracy at [MASK]", row=1, col=1)
    fig.update_layout(title="Every size on the same text: [MASK] accuracy over training time", width=1100,
                      height=520)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        page_file = Path(tmp) / "ladder.html"
        fig.write_html(page_file, include_plotlyjs=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium")
            page = browser.new_page(viewport={"width": 1120, "height": 540})
            page.goto(page_file.as_uri())
            page.wait_for_selector(".main-svg")
            page.screenshot(path=str(path))
            browser.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default=PRESETS)
    p.add_argument("--budget", type=float, default=60.0, help="seconds of training a size (default 60)")
    p.add_argument("--slack", type=float, default=120.0,
                   help="seconds a size may take beyond its budget (loading, scoring, compiling) before it is "
                        "stopped and recorded as failed (default 120)")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS if DEFAULT_CORPUS.is_file() else CARRIED_CORPUS)
    p.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    p.add_argument("--compile", default="off", help="train --compile MODE for every size (default off)")
    p.add_argument("--out", type=Path, help="the ladder's JSON")
    p.add_argument("--one", metavar="PRESET", help=argparse.SUPPRESS)   # a child: one size, its row on stdout
    p.add_argument("--plot", type=Path, help="draw the ladder of --from beside the CPU ladder as a PNG here")
    p.add_argument("--from", dest="source", type=Path, help="the ladder JSON to draw (default --out)")
    p.add_argument("--cpu", type=Path, default=LADDER_FILE, help="the CPU ladder's JSON (default the Train page's)")
    args = p.parse_args(argv)
    if args.one:
        extra = ["--compile", args.compile] if args.compile != "off" else []
        print(json.dumps(run_one(args.one, args.budget, args.corpus, args.device, extra)))
        return 0
    if args.out is None and args.plot is None:
        p.error("give --out FILE (run the ladder) and/or --plot PNG")
    if args.out is not None:
        if not args.corpus.is_file():
            print(f"error: no corpus at {args.corpus} (give --corpus FILE, or carry {CARRIED_CORPUS.name})",
                  file=sys.stderr)
            return 2
        if ladder(args):
            return 1
    if args.plot is not None:
        source = args.source or args.out
        cpu = json.loads(args.cpu.read_text()) if args.cpu.is_file() else None
        plot(json.loads(source.read_text()), cpu, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
