"""`python -m bert_core score`: how likely a checkpoint finds sentences, and which of a pair it prefers
(bert_core.inspect.grammar)."""

from __future__ import annotations

import json

from bert_core.cli.arguments import path_arg
from bert_core.errors import BertCoreError
from bert_core.inspect.grammar import compare_pair, read_pairs_file, score_sentence, trained_lm_head
from bert_core.inspect.built_in_text import MINIMAL_PAIRS
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT


def add_parser(sub):
    p = sub.add_parser("score", help="score sentences and say which of a pair the model prefers (grammar check)",
                       description="Print each sentence's natural-log score: a BERT's pseudo-log-likelihood (each "
                                   "word piece masked in turn, Salazar et al. 2020), a GPT-style model's sum of "
                                   "next-token log-probabilities. For a pair, which sentence the model prefers.")
    p.add_argument("--checkpoint", type=path_arg, default=None, help="checkpoint folder (default: the shipped model)")
    p.add_argument("sentences", nargs="*", metavar="SENTENCE",
                   help="sentences to score; two make a pair, e.g. \"the dogs bark .\" \"the dogs barks .\"")
    p.add_argument("--file", type=path_arg, default=None, metavar="PAIRS",
                   help="a UTF-8 file with one pair a line, the two sentences separated by a tab")
    p.add_argument("--builtin", action="store_true", help="score the built-in minimal pairs (good sentence first)")
    p.add_argument("--json", action="store_true", help="print one JSON object (each sentence's score under 'score')")
    return p


def _sentence(s) -> dict:
    return {"text": s.text, "score": s.score,
            "tokens": [{"token": t, "log_prob": lp} for t, lp in zip(s.tokens, s.log_probs)]}


def _pair(comparison, category: str | None = None) -> dict:
    out = {"a": _sentence(comparison.a), "b": _sentence(comparison.b), "difference": comparison.difference,
           "preferred": comparison.preferred}
    if category is not None:
        out["category"] = category
    return out


def run(args) -> int:
    """Carry out `python -m bert_core score`: one line per sentence, then the preferred one of each pair."""
    sources = sum((bool(args.sentences), args.file is not None, args.builtin))
    if sources != 1:
        raise BertCoreError("give sentences, or --file PAIRS, or --builtin (exactly one of them)")
    ckpt = load_checkpoint(args.checkpoint or DEFAULT_CHECKPOINT, require_tokenizer=True)
    trained_lm_head(ckpt.model)
    model, tok = ckpt.model, ckpt.tokenizer
    categories: list[str | None]
    if args.file is not None:
        pairs = read_pairs_file(args.file)
        categories = [None] * len(pairs)
    elif args.builtin:
        pairs = [(p.good, p.bad) for p in MINIMAL_PAIRS]
        categories = [p.category for p in MINIMAL_PAIRS]
    elif len(args.sentences) == 2:
        pairs, categories = [tuple(args.sentences)], [None]
    else:
        scores = [score_sentence(model, tok, s) for s in args.sentences]
        if args.json:
            print(json.dumps({"checkpoint": str(ckpt.folder), "method": scores[0].method,
                              "sentences": [_sentence(s) for s in scores]}, indent=1))
        else:
            for s in scores:
                print(f"{s.score:10.3f}  {s.text}")
        return 0
    comparisons = [compare_pair(model, tok, a, b) for a, b in pairs]
    if args.json:
        print(json.dumps({"checkpoint": str(ckpt.folder), "method": comparisons[0].a.method,
                          "pairs": [_pair(c, cat) for c, cat in zip(comparisons, categories)]}, indent=1))
        return 0
    print(f"{comparisons[0].a.method} (natural log; higher is likelier)")
    for c in comparisons:
        print(f"A {c.a.score:10.3f}  {c.a.text}")
        print(f"B {c.b.score:10.3f}  {c.b.text}")
        verdict = "neither (a tie)" if c.preferred == "tie" else c.preferred.upper()
        print(f"  prefers {verdict} by {abs(c.difference):.3f} nats")
    if len(comparisons) > 1:
        first = sum(c.preferred == "a" for c in comparisons)
        print(f"A preferred in {first} of {len(comparisons)} pairs")
    return 0
