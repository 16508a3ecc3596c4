"""Task-adaptive pretraining (Gururangan et al. 2020, "Don't Stop Pretraining"; ULMFiT's target-task LM
fine-tuning) measured by issue #28's protocol: for each seed, continue a checkpoint's MLM + NSP on the texts of
that seed's training split only (never its 300 validation rows), then fine-tune the result as the protocol does,
`finetune --checkpoint ADAPTED --task T --val-size 300 --steps 1500 --seed S`.

    PYTHONPATH=. python benchmarks/task_adaptive.py --checkpoint checkpoints/bert-mini-english --task ag_news \\
        --seeds 20 21 22 23 --jobs 2 --out runs/tapt

The continuation is `train --init-from CHECKPOINT --corpus TEXTS --seq-len 128 --batch-size 32 --steps N --lr LR
--schedule linear --seed 0`: seed 0 and the default held-out tenth, as `--init-from` requires of a start that held
out its corpora so (here it holds out a tenth of the training rows, whose masked-token accuracy the table shows).
Compare the fine-tuned accuracy with `finetune_levers.py`'s defaults on the same seeds (paired splits).
"""
import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bert_core.data.corpora import split_sentences
from bert_core.training.finetune import load_task, split_task


def write_training_texts(data, seed: int, val_size: int, path: Path) -> int:
    """The training rows of `finetune --val-size val_size --seed seed`'s split of `data` (never its validation
    rows) as documents: a blank line between rows, a sentence a line. Returns the rows written."""
    split = split_task(data, None, val_size, seed)
    with open(path, "w") as f:
        for text in split.train_data.texts:
            f.write("\n".join(split_sentences(text) or [text]) + "\n\n")
    return len(split.train_data.texts)


def _run(cmd: list[str], log: Path, threads: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    log.write_text(proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return proc


def run_seed(args, seed: int, threads: int) -> dict:
    stem = args.out / f"{args.task}-{seed}"
    texts = Path(f"{stem}.txt")
    rows = write_training_texts(load_task(task=args.task, seed=seed), seed, args.val_size, texts)
    adapted = Path(f"{stem}-adapted")
    _run([sys.executable, "-m", "bert_core", "train", "--init-from", str(args.checkpoint), "--corpus", str(texts),
          "--out", str(adapted), "--overwrite", "--seq-len", "128", "--batch-size", "32", "--steps", str(args.steps),
          "--lr", str(args.lr), "--schedule", "linear", "--seed", "0", "--eval-every", "100"],
         Path(f"{stem}-train.err"), threads)
    evals = json.loads((adapted / "trainer_state.json").read_text()).get("evals", [])
    proc = _run([sys.executable, "-m", "bert_core", "finetune", "--checkpoint", str(adapted), "--task", args.task,
                 "--val-size", str(args.val_size), "--steps", "1500", "--seed", str(seed), "--json"],
                Path(f"{stem}-finetune.err"), threads)
    Path(f"{stem}-finetune.json").write_text(proc.stdout)
    accuracy = {r["name"]: r["accuracy"] * 100 for r in json.loads(proc.stdout)["results"]}["pretrained"]
    mlm = [e.get("mlm_acc") for e in evals]
    return {"seed": seed, "rows": rows, "mlm_before": mlm[0] if mlm else None, "mlm_after": mlm[-1] if mlm else None,
            "accuracy": accuracy}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, default=Path("checkpoints/bert-mini-english"))
    p.add_argument("--task", default="ag_news", choices=["ag_news", "polarity"])
    p.add_argument("--seeds", nargs="+", type=int, default=[20, 21, 22, 23])
    p.add_argument("--steps", type=int, default=400, help="continuation steps (about 3 passes over AG News's rows)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--val-size", type=int, default=300)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda s: run_seed(args, s, threads), args.seeds))
    print("| seed | training rows | held-out masked-token accuracy on them, before -> after | fine-tuned accuracy |")
    print("| ---: | ---: | --- | ---: |")
    for r in rows:
        mlm = (f"{r['mlm_before'] * 100:.1f}% -> {r['mlm_after'] * 100:.1f}%" if r["mlm_before"] is not None
               else "")
        print(f"| {r['seed']} | {r['rows']} | {mlm} | {r['accuracy']:.1f}% |")


if __name__ == "__main__":
    main()
