"""bf16 autocast against fp32 on this CPU: one pretraining step (forward, backward, fused AdamW) of each size,
the two precisions alternated in one process, medians (docs/benchmarks.md, "bf16 on a CPU").

    .venv/bin/python benchmarks/cpu_bf16.py                  # 2 threads, the sizes the Train page offers
    .venv/bin/python benchmarks/cpu_bf16.py --threads 1 --rounds 15

It times what `train` runs (training.distributed.autocast_for decides the same way), whether or not this CPU has
bfloat16 instructions, so it also shows what a CPU without them would lose: there the project trains in fp32.
Batch 32, vocabulary 8,192 (the shipped tokenizer's), 15% of the tokens masked, NSP on, no dropout (the recipes').
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bert_core.model.bert import BertForPreTraining  # noqa: E402
from bert_core.model.config import BertConfig  # noqa: E402
from bert_core.training.distributed import cpu_has_bf16  # noqa: E402

CASES = [("nano", 64), ("tiny", 64), ("tiny", 128), ("mini", 128), ("small", 128)]


def step_times(preset: str, length: int, rounds: int, batch: int = 32) -> tuple[list[float], list[float]]:
    """(fp32 seconds, bf16-autocast seconds) of `rounds` training steps each, alternated after two untimed each."""
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset(preset, vocab_size=8192, hidden_dropout_prob=0.0,
                                                 attention_probs_dropout_prob=0.0))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(5, 8192, (batch, length))
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(batch, length) < 0.15
    labels[chosen] = ids[chosen]
    inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids),
                  labels=labels, next_sentence_label=torch.randint(0, 2, (batch,)), full_mlm_logits=False)

    def step(bf16: bool) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(**inputs)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return time.perf_counter() - start

    for _ in range(2):
        step(False), step(True)
    fp32, bf16 = [], []
    for _ in range(rounds):
        fp32.append(step(False))
        bf16.append(step(True))
    return fp32, bf16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), bfloat16 instructions: {cpu_has_bf16()}")
    print("| size | tokens | fp32 ms | bf16 ms | speed-up |\n| --- | ---: | ---: | ---: | ---: |")
    for preset, length in CASES:
        fp32, bf16 = step_times(preset, length, args.rounds)
        a, b = statistics.median(fp32), statistics.median(bf16)
        print(f"| {preset} | {length} | {a * 1000:.1f} | {b * 1000:.1f} | {a / b:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
