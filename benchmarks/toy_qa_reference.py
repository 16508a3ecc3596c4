"""Is the toy-QA binding hard, or is our answer-span path wrong? The same features trained by a plain loop into
`transformers`' own BertForQuestionAnswering, into ours, and into a fresh model of the same size
(docs/benchmarks.md, "Token tags and answer spans").

    python benchmarks/toy_qa_reference.py --model hf --lr 1e-4 --steps 1200 --questions where
    python benchmarks/toy_qa_reference.py --model ours --lr 1e-4 --steps 1200 --questions where
    python benchmarks/toy_qa_reference.py --model scratch --lr 5e-4 --steps 1200 --questions where

Data: toy_qa_drills.drill_squad (3,000 passages of 2-3 "NAME went to the PLACE." sentences), split by passage with
500 validation questions, encoded by data.answer_spans_data.encode_qa (max length 256). Loop: AdamW (weight decay
0.01), 10% linear warmup then linear decay, batch 32, gradient norm clipped at 1, the model's dropout, one thread.
Score: the share of validation windows whose start and end argmax are both the gold tokens. `hf` loads the
checkpoint with transformers as it is (bf16 weights stay bf16 there); `scratch` is transformers' model with the
checkpoint's config and a fresh initialisation (std 0.02).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bert_core.data.answer_spans_data import (  # noqa: E402
    encode_qa,
    parse_squad,
    split_by_passage,
)
from bert_core.data.batching import eval_batches, train_batches  # noqa: E402
from bert_core.data.toy_qa_drills import QUESTION_KINDS, drill_squad  # noqa: E402
from bert_core.model.config import BertConfig  # noqa: E402
from bert_core.training.finetune_tasks import tokenizer_of  # noqa: E402


def build(kind: str, folder: Path):
    if kind == "ours":
        from bert_core.model.bert import BertForQuestionAnswering
        from bert_core.model.hf import load_pretrained

        return load_pretrained(folder, BertForQuestionAnswering)
    import transformers

    if kind == "hf":
        return transformers.BertForQuestionAnswering.from_pretrained(folder)
    config = transformers.BertConfig.from_pretrained(folder)
    config.initializer_range = 0.02
    return transformers.BertForQuestionAnswering(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("hf", "ours", "scratch"), required=True)
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "checkpoints" / "bert-mini-english")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--questions", nargs="+", choices=QUESTION_KINDS, default=["where"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = build(args.model, args.checkpoint)
    tokenizer = tokenizer_of(args.checkpoint, BertConfig.load(args.checkpoint))
    data = parse_squad(drill_squad(3000, 0, questions=tuple(args.questions)))
    train, val = split_by_passage(data, val_size=500, seed=0)
    train_features, val_features = encode_qa(train, tokenizer, 256, 64), encode_qa(val, tokenizer, 256, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warm = max(1, args.steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (args.steps - s) / max(1, args.steps - warm))))

    @torch.no_grad()
    def exact() -> float:
        model.eval()
        right = 0
        for b in eval_batches(val_features, 64):
            out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, token_type_ids=b.token_type_ids)
            right += int(((out.start_logits.argmax(-1) == b.start_positions)
                          & (out.end_logits.argmax(-1) == b.end_positions)).sum())
        model.train()
        return right / len(val_features)

    model.train()
    batches = train_batches(train_features, 32, args.seed)
    started = time.time()
    for step in range(1, args.steps + 1):
        b = next(batches)
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, token_type_ids=b.token_type_ids,
                    start_positions=b.start_positions, end_positions=b.end_positions)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % max(1, args.steps // 6) == 0 or step == args.steps:
            print(f"{args.model} step {step} loss {out.loss.item():.3f} validation exact {exact():.1%} "
                  f"{time.time() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
