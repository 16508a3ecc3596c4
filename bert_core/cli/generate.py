"""`python -m bert_core generate`: continue a text with a causal checkpoint (bert_core.inspect.generation)."""

from __future__ import annotations

import dataclasses
import json

from bert_core.cli.arguments import SEED, float_arg, int_arg, path_arg
from bert_core.inspect.generation import MAX_NEW_TOKENS, generate
from bert_core.model.checkpoint import load_checkpoint


def add_parser(sub):
    p = sub.add_parser("generate", help="continue a text with a GPT-style (causal) checkpoint, token by token",
                       description="Continue PROMPT with a checkpoint trained with --objective clm: greedy, or "
                                   "sampled with a temperature and top-k and a seed (the same seed, the same text). "
                                   "Each new token is printed with its probability and the alternatives.")
    p.add_argument("--checkpoint", type=path_arg, required=True, help="a causal checkpoint folder")
    p.add_argument("prompt", help='the start of a text, e.g. "the dog"')
    p.add_argument("--max-new-tokens", type=int_arg(1, MAX_NEW_TOKENS), default=20, help="default 20")
    p.add_argument("--sample", action="store_true", help="draw each token instead of taking the most likely")
    p.add_argument("--temperature", type=float_arg(0, 100, low_open=True), default=1.0, help="with --sample: below 1 surer, above 1 wilder")
    p.add_argument("--top-k", type=int_arg(0, 10**6), default=0, help="with --sample: draw among the k best (0: all)")
    p.add_argument("--seed", type=SEED, default=0, help="with --sample: the generator's seed (default 0)")
    p.add_argument("--json", action="store_true", help="print the steps as JSON")
    return p


def run(args) -> int:
    """Carry out `python -m bert_core generate`: print each new token with its probability, then the text."""
    ckpt = load_checkpoint(args.checkpoint, require_tokenizer=True)
    out = generate(ckpt.model, ckpt.tokenizer, args.prompt, max_new_tokens=args.max_new_tokens,
                   strategy="sample" if args.sample else "greedy", temperature=args.temperature, top_k=args.top_k,
                   seed=args.seed)
    if args.json:
        print(json.dumps(dataclasses.asdict(out), indent=1))
        return 0
    for step in out.steps:
        others = "  ".join(f"{t} {p:.2f}" for t, p in step.alternatives if t != step.token)
        print(f"{step.token:>15} {step.probability:.3f}   ({others})")
    print(f"{args.prompt} -> {out.text}")
    print(f"stopped: {out.stopped}")
    return 0
