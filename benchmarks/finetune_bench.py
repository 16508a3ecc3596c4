"""Does pretraining pay? The shipped checkpoint fine-tuned vs the same architecture from scratch, same CPU budget.

For each task (AG News topics: seeded 5,000 / 1,000 train / validation split of ../shared/data/ag_news/news.csv;
sentence polarity: seeded 8,000 / 1,000 of ../shared/data/sentence_polarity/polarity.csv) it fine-tunes
BertForSequenceClassification from the checkpoint's encoder for `--time-budget` seconds of training, then a copy
of the same config with fresh random weights (same tokenizer, same head seed, same batches, same schedule) for the
same seconds, and prints validation accuracy and macro-F1 of both, the gap in points, and the majority baseline.

    .venv/bin/python benchmarks/finetune_bench.py                     # both tasks, 180 s each model (~13 min)
    .venv/bin/python benchmarks/finetune_bench.py --time-budget 10    # a quick check of the machinery
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bert_core.cli.finetune import format_confusion  # noqa: E402
from bert_core.data.classification_data import load_classification_csv, split_train_val  # noqa: E402
from bert_core.errors import BertCoreError  # noqa: E402
from bert_core.paths import DEFAULT_CHECKPOINT, shared_data_dir  # noqa: E402
from bert_core.training.finetune import classifier_from_checkpoint, classifier_from_scratch, finetune
from bert_core.training.finetune_settings import FinetuneConfig

# task -> (file under the shared data folder, train size, validation size, max length in tokens)
TASKS = {
    "ag_news": ("ag_news/news.csv", 5000, 1000, 128),
    "polarity": ("sentence_polarity/polarity.csv", 8000, 1000, 64),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT, help="pretrained checkpoint folder")
    p.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    p.add_argument("--time-budget", type=float, default=180.0, help="training seconds per model (default 180)")
    p.add_argument("--lr", type=float, default=FinetuneConfig.learning_rate)
    p.add_argument("--batch-size", type=int, default=FinetuneConfig.batch_size)
    p.add_argument("--warmup-ratio", type=float, default=FinetuneConfig.warmup_ratio)
    p.add_argument("--dropout", type=float, default=FinetuneConfig.dropout, help="fine-tuning dropout (both models)")
    p.add_argument("--max-length", type=int, default=None, help="tokens per example (default: 128 AG News, 64 polarity)")
    p.add_argument("--seed", type=int, default=0, help="split, head initialisation, batches, dropout")
    p.add_argument("--eval-points", type=int, default=4,
                   help="validation passes during each run (untimed; each costs a pass over 1,000 examples)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: leave as is)")
    p.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    return p.parse_args(argv)


def run_task(task: str, args) -> dict:
    """Fine-tune from the checkpoint and from scratch on one task; return the figures."""
    shared = shared_data_dir()
    if shared is None:
        raise BertCoreError("../shared/data is absent (set BERT_SHARED_DATA); the benchmark needs its CSV files")
    rel, n_train, n_val, max_length = TASKS[task]
    data = load_classification_csv(shared / rel)
    train, val = split_train_val(data, n_train, n_val, seed=args.seed)
    config = FinetuneConfig(time_budget_s=args.time_budget, max_steps=None, learning_rate=args.lr,
                            batch_size=args.batch_size, warmup_ratio=args.warmup_ratio,
                            max_length=args.max_length or max_length, seed=args.seed, device="cpu",
                            eval_points=args.eval_points, dropout=args.dropout)
    pre_model, tokenizer = classifier_from_checkpoint(args.checkpoint, data.num_labels, args.seed)
    scratch_model = classifier_from_scratch(pre_model.config, data.num_labels, args.seed)
    results = {}
    for name, model in (("pretrained", pre_model), ("scratch", scratch_model)):
        t0 = time.perf_counter()
        r = finetune(model, tokenizer, train, val, config, name=name)
        results[name] = r
        print(f"  {task} {name:<10} {r.steps:>5} steps {r.train_seconds:6.1f} s training "
              f"({time.perf_counter() - t0:.0f} s with validation)  accuracy {100 * r.accuracy:.2f}%  "
              f"macro-F1 {100 * r.macro_f1:.2f}%", file=sys.stderr, flush=True)
    majority = max(val.label_counts()) / len(val)
    return {
        "task": task, "file": rel, "train": len(train), "validation": len(val), "labels": data.label_names,
        "majority_baseline": majority, "config": {k: getattr(config, k) for k in
                                                  ("learning_rate", "batch_size", "warmup_ratio", "max_length",
                                                   "time_budget_s", "seed", "dropout")},
        "runs": {name: {k: v for k, v in r.to_dict().items() if k not in ("misclassified",)}
                 for name, r in results.items()},
        "gap_points": 100 * (results["pretrained"].accuracy - results["scratch"].accuracy),
    }


def markdown_table(rows: list[dict]) -> str:
    """The benchmark's table, as it goes into docs/benchmarks.md."""
    lines = ["| task | train / val | model | steps | train s | accuracy | macro-F1 |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for row in rows:
        for name in ("pretrained", "scratch"):
            r = row["runs"][name]
            lines.append(f"| {row['task']} | {row['train']:,} / {row['validation']:,} | {name} | {r['steps']:,} | "
                         f"{r['train_seconds']:.0f} | {100 * r['accuracy']:.1f}% | {100 * r['macro_f1']:.1f}% |")
        lines.append(f"| {row['task']} | | majority class | | | {100 * row['majority_baseline']:.1f}% | |")
    lines.append("")
    lines += [f"- {row['task']}: pretrained beats scratch by {row['gap_points']:+.1f} accuracy points"
              for row in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.checkpoint.is_dir():
        print(f"error: checkpoint folder {args.checkpoint} does not exist; give --checkpoint DIR", file=sys.stderr)
        return 2
    machine = f"{platform.processor() or platform.machine()}, torch {torch.__version__}, " \
              f"{torch.get_num_threads()} threads"
    print(f"checkpoint {args.checkpoint}; {args.time_budget:.0f} s of training per model; {machine}",
          file=sys.stderr)
    rows = []
    try:
        for task in args.tasks:
            rows.append(run_task(task, args))
    except BertCoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown_table(rows))
    for row in rows:
        for name in ("pretrained", "scratch"):
            r = row["runs"][name]
            print(f"\nconfusion matrix, {row['task']} {name} (rows = true label, columns = predicted):")
            print(format_confusion(r["confusion"], r["label_names"]))
    if args.json:
        args.json.write_text(json.dumps({"checkpoint": str(args.checkpoint), "machine": machine, "tasks": rows},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
