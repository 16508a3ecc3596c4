"""The commands that read a checkpoint and print what it does: `eval` (bert_core.training.heldout), `fill-mask`,
`generate` (bert_core.inspect.generation), `score` (bert_core.inspect.grammar) and `everyday`
(bert_core.inspect.everyday_measure on bert_core.data.everyday_set)."""

from __future__ import annotations

import dataclasses
import json

from bert_core.cli.arguments import FRACTION, SEED, float_arg, int_arg, path_arg
from bert_core.cli.console import percent
from bert_core.data.everyday_set import BLANKS_FILE, PAIRS_FILE, load_blanks, load_everyday_pairs
from bert_core.data.objectives import MASK_RATE
from bert_core.errors import BertCoreError
from bert_core.inspect.built_in_text import MINIMAL_PAIRS
from bert_core.inspect.everyday_measure import TOP_K, everyday_report
from bert_core.inspect.generation import MAX_NEW_TOKENS, generate
from bert_core.inspect.grammar import compare_pair, read_pairs_file, score_sentence, trained_lm_head
from bert_core.inspect.inspection import fill_mask
from bert_core.model.checkpoint import Checkpoint, load_checkpoint
from bert_core.model.config import MAX_BATCH, MAX_SEQ_LEN
from bert_core.paths import DEFAULT_CHECKPOINT
from bert_core.training.heldout import evaluate_text_file


def _checkpoint_option(p, required: bool = False, help: str = "checkpoint folder (default: the shipped model)"):
    p.add_argument("--checkpoint", type=path_arg, required=required, default=None, help=help)


def _load(args, lm_head: bool = False) -> Checkpoint:
    """The checkpoint --checkpoint names (else the shipped one), with the tokenizer every command here reads text
    with; `lm_head`: refused when its language-model head was never trained (grammar.trained_lm_head)."""
    ckpt = load_checkpoint(args.checkpoint or DEFAULT_CHECKPOINT, require_tokenizer=True)
    if lm_head:
        trained_lm_head(ckpt.model)
    return ckpt


def add_eval(sub):
    p = sub.add_parser("eval", help="evaluate a checkpoint on a text file (seeded masking)",
                       description="Masked-token accuracy, MLM perplexity and NSP accuracy of a checkpoint on a "
                                   "text file, with seeded masking, beside the unigram baseline.")
    _checkpoint_option(p, required=True, help="checkpoint folder")
    p.add_argument("--text-file", type=path_arg, required=True, help="plain text to evaluate on")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the masking and NSP pairs")
    p.add_argument("--batches", type=int_arg(1, 10**6), default=50, help="maximum number of batches to evaluate")
    p.add_argument("--batch-size", type=int_arg(1, MAX_BATCH), default=32)
    p.add_argument("--seq-len", type=int_arg(16, MAX_SEQ_LEN), default=None,
                   help="default: the checkpoint's training length or 128 (at most its positions)")
    p.add_argument("--mask-rate", type=FRACTION, default=MASK_RATE)
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    return p


def run_eval(args) -> int:
    r = evaluate_text_file(args.checkpoint, args.text_file, seed=args.seed, batches=args.batches,
                           batch_size=args.batch_size, seq_len=args.seq_len, mask_rate=args.mask_rate,
                           device=args.device)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    u = r["unigram_baseline"]
    unigram = percent(u.get("accuracy"))
    if r.get("objective") == "clm":
        print(f"{r['text_file']}: {r['predicted_tokens']} next-token predictions in {r['sequences']} sequences "
              "(a causal model: each position predicts the token after it, seeing only the tokens before)")
        print(f"next-token accuracy   {percent(r['next_token_accuracy'])}   unigram baseline {unigram}")
        print(f"next-token perplexity {r['perplexity']:.1f}   unigram baseline {u.get('perplexity', float('nan')):.1f}")
        return 0
    print(f"{r['text_file']}: {r['masked_tokens']} masked tokens in {r['sequences']} sequences (seed {r['seed']})")
    print(f"masked-token accuracy {percent(r['masked_token_accuracy'])}   unigram baseline {unigram}")
    print(f"MLM perplexity        {r['perplexity']:.1f}   unigram baseline {u.get('perplexity', float('nan')):.1f}")
    print(f"NSP accuracy          {percent(r['nsp_accuracy'])}   chance 50%")
    return 0


def add_fill_mask(sub):
    p = sub.add_parser("fill-mask", help="top-k predictions for each [MASK] in a text",
                       description="Print the checkpoint's top-k candidates for every [MASK] in TEXT.")
    _checkpoint_option(p)
    p.add_argument("text", help='text with one or more [MASK], e.g. "the cat sat on the [MASK] ."')
    p.add_argument("--top-k", type=int_arg(1, 10**6), default=5, help="candidates per [MASK] (default 5)")
    p.add_argument("--json", action="store_true")
    return p


def run_fill_mask(args) -> int:
    ckpt = _load(args, lm_head=True)
    predictions = fill_mask(ckpt.model, ckpt.tokenizer, args.text, top_k=args.top_k)
    if args.json:
        print(json.dumps([{"position": p.position, "candidates": [{"token": t, "prob": pr} for t, pr in p.candidates]}
                          for p in predictions], indent=1))
        return 0
    for i, p in enumerate(predictions, 1):
        cands = "  ".join(f"{t} {pr:.3f}" for t, pr in p.candidates)
        print(f"[MASK] {i} (token {p.position}): {cands}")
    return 0


def add_generate(sub):
    p = sub.add_parser("generate", help="continue a text with a GPT-style (causal) checkpoint, token by token",
                       description="Continue PROMPT with a checkpoint trained with --objective clm: greedy, or "
                                   "sampled with a temperature and top-k and a seed (the same seed, the same text). "
                                   "Each new token is printed with its probability and the alternatives.")
    _checkpoint_option(p, required=True, help="a causal checkpoint folder")
    p.add_argument("prompt", help='the start of a text, e.g. "the dog"')
    p.add_argument("--max-new-tokens", type=int_arg(1, MAX_NEW_TOKENS), default=20, help="default 20")
    p.add_argument("--sample", action="store_true", help="draw each token instead of taking the most likely")
    p.add_argument("--temperature", type=float_arg(0, 100, low_open=True), default=1.0,
                   help="with --sample: below 1 surer, above 1 wilder")
    p.add_argument("--top-k", type=int_arg(0, 10**6), default=0, help="with --sample: draw among the k best (0: all)")
    p.add_argument("--seed", type=SEED, default=0, help="with --sample: the generator's seed (default 0)")
    p.add_argument("--json", action="store_true", help="print the steps as JSON")
    return p


def run_generate(args) -> int:
    ckpt = _load(args)
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


def add_score(sub):
    p = sub.add_parser("score", help="score sentences and say which of a pair the model prefers (grammar check)",
                       description="Print each sentence's natural-log score: a BERT's pseudo-log-likelihood (each "
                                   "word piece masked in turn, Salazar et al. 2020), a GPT-style model's sum of "
                                   "next-token log-probabilities. For a pair, which sentence the model prefers.")
    _checkpoint_option(p)
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


def run_score(args) -> int:
    sources = sum((bool(args.sentences), args.file is not None, args.builtin))
    if sources != 1:
        raise BertCoreError("give sentences, or --file PAIRS, or --builtin (exactly one of them)")
    ckpt = _load(args, lm_head=True)
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


def add_everyday(sub):
    p = sub.add_parser("everyday", help="top-1/top-5 on plain everyday sentences with one blank, and minimal pairs",
                       description="Measure a checkpoint on the project's everyday-English set (written for it, kept "
                                   "out of training): top-1 and top-5 on fill-in-the-blank sentences, overall and per "
                                   "topic (a BERT only: a GPT cannot fill a blank with words after it), and the "
                                   "minimal pairs it gets right, scored as `score` scores them.")
    _checkpoint_option(p)
    p.add_argument("--blanks", type=path_arg, default=BLANKS_FILE, metavar="TSV",
                   help="your own blanks: topic<TAB>sentence with one [MASK]<TAB>right, words (default: the set's)")
    p.add_argument("--pairs", type=path_arg, default=PAIRS_FILE, metavar="TSV",
                   help="your own minimal pairs: kind<TAB>good sentence<TAB>bad sentence (default: the set's)")
    p.add_argument("--each", action="store_true", help="also print every sentence with the model's guesses")
    p.add_argument("--json", action="store_true", help="print one JSON object (every sentence under 'items')")
    return p


def _row(name: str, t: dict) -> str:
    return f"{name:<22} {percent(t['top1_share']):>8} {percent(t['top5_share']):>8} {t['sentences']:>10}"


def _print_blanks(b: dict, each: bool) -> None:
    print(f"{'blanks':<22} {'top-1':>8} {'top-5':>8} {'sentences':>10}")
    print(_row("all", b))
    if b["out_of_vocabulary"]:
        print(_row("within the vocabulary", b["within_vocabulary"]) + f"   ({b['out_of_vocabulary']} sentences "
              "have no right word that is one piece of this vocabulary: counted as misses in 'all')")
    for topic, t in b["by_topic"].items():
        print(_row(topic, t))
    if each:
        for item in b["items"]:
            mark = f"top-{item['rank']}" if item["rank"] else "miss " if item["in_vocabulary"] else "(oov)"
            print(f"{mark:<6} {item['text']}  guesses: {', '.join(item['guesses'])}  "
                  f"right: {', '.join(item['answers'])}")


def run_everyday(args) -> int:
    blanks, pairs = load_blanks(args.blanks), load_everyday_pairs(args.pairs)  # a bad file fails before the model
    ckpt = _load(args)
    report = {"checkpoint": str(ckpt.folder), "blanks_file": str(args.blanks), "pairs_file": str(args.pairs),
              "top_k": TOP_K, **everyday_report(ckpt.model, ckpt.tokenizer, blanks, pairs)}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{ckpt.folder} ({report['model'].upper()}): {len(blanks)} blanks, {len(pairs)} minimal pairs")
    if report["blanks"] is None:
        print(f"blanks: not measured. {report['blanks_skipped']}")
    else:
        _print_blanks(report["blanks"], args.each)
    p = report["pairs"]
    print(f"minimal pairs ({p['method']}): {p['right']} of {p['pairs']} right ({percent(p['accuracy'])})"
          + "".join(f"; {k} {v['right']}/{v['pairs']}" for k, v in p["by_kind"].items()))
    return 0
