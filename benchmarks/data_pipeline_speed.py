"""How long the data pipeline takes on a corpus of about a million words (Brown from the shared data, or a
generated toy corpus of the same size when it is absent): tokenizer training, tokenising, NSP instances,
and masking + padding every batch of one epoch. Medians of --repeats runs, one thread.

    .venv/bin/python benchmarks/data_pipeline_speed.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from bert_core.data.corpora import (
    generate_toy_corpus,  # noqa: E402
    load_corpus,  # noqa: E402
)
from bert_core.data.pretraining_data import PretrainingData  # noqa: E402
from bert_core.model.tokenization import train_tokenizer  # noqa: E402
from bert_core.paths import shared_data_dir  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    corpus = load_corpus("brown") if shared_data_dir() else generate_toy_corpus(16_000)
    times: dict[str, list[float]] = {"train_tokenizer": [], "tokenise": [], "nsp_instances": [], "mask_epoch": []}
    for r in range(args.repeats):
        tok, dt = timed(lambda: train_tokenizer(corpus.texts(), vocab_size=8000))
        times["train_tokenizer"].append(dt)
        data, dt = timed(lambda: PretrainingData(corpus, tok, max_seq_length=args.max_seq_length,
                                                 batch_size=args.batch_size, seed=r))
        times["tokenise"].append(dt)
        n_batches, dt = timed(lambda: data.batches_per_epoch)  # builds the epoch's NSP instances
        times["nsp_instances"].append(dt)
        _, dt = timed(lambda: [next(data) for _ in range(n_batches)])
        times["mask_epoch"].append(dt)
    medians = {k: round(statistics.median(v), 3) for k, v in times.items()}
    print(f"{corpus!r}: {len(data._epoch_instances(0))} NSP instances, {n_batches} batches of {args.batch_size} per epoch")
    for k, v in medians.items():
        print(f"  {k:16s} median {v:7.2f} s   (runs: {', '.join(f'{x:.2f}' for x in times[k])})")
    print(json.dumps({"corpus": repr(corpus), "medians_s": medians, "batches_per_epoch": n_batches}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
