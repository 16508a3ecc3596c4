"""Why a small BERT sits on the "predict the most frequent token" plateau: a copy task that needs attention.

Each sequence is random tokens, each written twice ("k k q q z z ..."); 15% of positions are masked, and the
only way to fill a mask is to attend to its twin next door. A 2-layer Transformer from `torch.nn` with PyTorch's
default initialisation learns this in about 200 steps. BERT's initialisation, normal(0, 0.02) everywhere, was
chosen for hidden size 768; at hidden size 128 it makes every attention and value projection so small that
attention stays uniform and the model cannot find the neighbour for thousands of steps. This is true of ours and
of `transformers.BertForPreTraining` alike (same init), and a wider `initializer_range` removes it.

    .venv/bin/python benchmarks/init_plateau.py                  # ~2 minutes on one core
    .venv/bin/python benchmarks/init_plateau.py --steps 1500 --json plateau.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bert_core.model.bert import BertForPreTraining, param_groups  # noqa: E402
from bert_core.model.config import BertConfig  # noqa: E402

MASK_ID = 4
FIRST_WORD = 5


def copy_batch(generator, batch_size, seq_len, vocab_size, mask_rate=0.15):
    """Random tokens, each twice in a row; masked positions replaced by MASK_ID. Returns (input_ids, labels)."""
    words = torch.randint(FIRST_WORD, vocab_size, (batch_size, seq_len // 2), generator=generator)
    target = words.repeat_interleave(2, dim=1)
    chosen = torch.rand(target.shape, generator=generator) < mask_rate
    labels = torch.where(chosen, target, torch.full_like(target, -100))
    return torch.where(chosen, torch.full_like(target, MASK_ID), target), labels


class TorchEncoder(torch.nn.Module):
    """torch.nn's post-LN TransformerEncoder of the same size, PyTorch's default initialisation, untied output."""

    def __init__(self, config: BertConfig, seq_len: int):
        super().__init__()
        h = config.hidden_size
        self.embed = torch.nn.Embedding(config.vocab_size, h)
        self.position = torch.nn.Embedding(seq_len, h)
        layer = torch.nn.TransformerEncoderLayer(h, config.num_attention_heads, config.intermediate_size, dropout=0.0,
                                                 activation="gelu", batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, config.num_hidden_layers, enable_nested_tensor=False)
        self.out = torch.nn.Linear(h, config.vocab_size)

    def forward(self, input_ids):
        return self.out(self.encoder(self.embed(input_ids) + self.position.weight[: input_ids.shape[1]]))


def make_model(kind: str, init: float, vocab_size: int, preset: str, seq_len: int):
    config = BertConfig.preset(preset, vocab_size=vocab_size, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0, initializer_range=init)
    if kind == "ours":
        return BertForPreTraining(config)
    if kind == "torch.nn":
        return TorchEncoder(config, seq_len)
    import transformers

    return transformers.BertForPreTraining(transformers.BertConfig(**config.to_hf_dict()))


def mlm_loss(kind, model, input_ids, labels):
    ones = torch.ones_like(input_ids)
    if kind == "torch.nn":
        return torch.nn.functional.cross_entropy(model(input_ids).flatten(0, 1), labels.flatten(), ignore_index=-100)
    if kind == "ours":
        return model(input_ids=input_ids, attention_mask=ones, token_type_ids=torch.zeros_like(input_ids),
                     labels=labels).mlm_loss
    logits = model(input_ids=input_ids, attention_mask=ones, token_type_ids=torch.zeros_like(input_ids)).prediction_logits
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def run(kind, init, args) -> dict:
    torch.manual_seed(args.seed)
    model = make_model(kind, init, args.vocab_size, args.preset, args.seq_len)
    model.train()
    opt = torch.optim.AdamW(param_groups(model, 0.01) if kind != "torch.nn" else model.parameters(), lr=args.lr, eps=1e-6)
    gen = torch.Generator().manual_seed(args.seed)
    curve, escaped, t0 = [], None, time.perf_counter()
    window = []
    for step in range(1, args.steps + 1):
        input_ids, labels = copy_batch(gen, args.batch_size, args.seq_len, args.vocab_size)
        loss = mlm_loss(kind, model, input_ids, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        window.append(loss.item())
        if step % 50 == 0:
            mean = sum(window) / len(window)
            window.clear()
            curve.append((step, round(mean, 3)))
            if escaped is None and mean < args.escaped_below:
                escaped = step
    return {"model": kind, "initializer_range": init, "escaped_at_step": escaped, "final_loss": curve[-1][1],
            "curve": curve, "seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--vocab-size", type=int, default=200)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--inits", default="0.02,0.05,0.1", help="comma-separated initializer ranges for our model")
    p.add_argument("--escaped-below", type=float, default=2.0, help="mean loss over 50 steps counted as solved")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    chance = math.log(args.vocab_size - FIRST_WORD)
    print(f"copy task: {args.preset}, sequence {args.seq_len}, batch {args.batch_size}, lr {args.lr:g}, "
          f"{args.steps} steps; uniform guessing = loss {chance:.2f}")
    runs = [("ours", float(x)) for x in args.inits.split(",")] + [("torch.nn", 0.02)]
    try:
        import transformers  # noqa: F401

        runs.insert(1, ("transformers", 0.02))
    except ImportError:
        print("(transformers not installed: only our model)")
    results = []
    for kind, init in runs:
        r = run(kind, init, args)
        results.append(r)
        when = f"solved at step {r['escaped_at_step']}" if r["escaped_at_step"] else "still on the plateau"
        init_text = "(default)" if kind == "torch.nn" else f"{init:<9g}"
        print(f"{kind:12s} initializer_range {init_text} final loss {r['final_loss']:.3f}  {when}  ({r['seconds']} s)")
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)}, "chance_loss": chance,
                                         "torch": torch.__version__, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
