"""Time to quality: our trainer's default recipe against a plain transformers recipe, same wall-clock budget each.

Both learn from the training part of WikiText-2 (validation split, the shared copy) with one WordPiece 8k
tokenizer; 10% of the articles (seeded) are held out, and both models are scored on the same held-out masked
tokens (sequence 128, 15% masking, fixed seed, contiguous text). The two runs are interleaved in chunks of a few
seconds in this one process and each is charged only its own running time, so machine load hits both alike.

Reference recipe: transformers.BertForMaskedLM of the same size (or of each --reference-preset), sequence 128,
batch 32, AdamW lr 1e-3 with 10% warmup and linear decay to zero at the end of the budget, dropout 0.1 (Hugging
Face's default), a plain loop.
Ours: `bert_core.training.trainer.default_recipe()` run by `Trainer` (whatever the defaults of this version are), and any
variants of it (--variant, e.g. the previous defaults), interleaved with the others. The table printed at the end
gives each recipe beside the reference, with its accuracy as a multiple of the reference's; --summarize prints
one table over several runs' JSON files (e.g. one run per seed).

    python benchmarks/time_to_quality.py --budget 300 --threads 1 --seed 0 --json ttq-seed0.json \
        --reference-preset nano --reference-preset tiny \
        --variant preset=tiny,initializer_range=0.02,short_seq_length=0,short_seq_fraction=0
    python benchmarks/time_to_quality.py --summarize ttq-seed*.json

--steps N trains each of our recipes for N steps instead (no reference): how recipes compare after as many
updates as a quiet machine makes in the budget, whatever the load on this one.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bert_core.data.corpora import load_corpus, split_heldout  # noqa: E402
from bert_core.data.pretraining_data import PretrainingData  # noqa: E402
from bert_core.model.bert import BertForPreTraining  # noqa: E402
from bert_core.model.config import BertConfig  # noqa: E402
from bert_core.model.tokenization import train_tokenizer  # noqa: E402
from bert_core.paths import shared_data_dir  # noqa: E402
from bert_core.training.evaluation import evaluate  # noqa: E402
from bert_core.training.trainer import Trainer
from bert_core.training.pretraining_events import StepEvent
from bert_core.training.train_config import default_recipe

SEQ_LEN, VOCAB, EVAL_MASK_RATE = 128, 8000, 0.15


class Reference:
    """The plain loop: transformers.BertForMaskedLM, AdamW 1e-3, 10% warmup, linear decay over the time budget."""

    def __init__(self, preset: str, tokenizer, train_corpus, budget_s: float, seed: int = 0, batch_size: int = 32):
        import transformers

        ours = BertConfig.preset(preset, vocab_size=tokenizer.vocab_size)
        hf_config = transformers.BertConfig(
            vocab_size=ours.vocab_size, hidden_size=ours.hidden_size, num_hidden_layers=ours.num_hidden_layers,
            num_attention_heads=ours.num_attention_heads, intermediate_size=ours.intermediate_size,
            max_position_embeddings=512, pad_token_id=tokenizer.pad_id,
        )
        torch.manual_seed(seed)
        self.model = transformers.BertForMaskedLM(hf_config)
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.data = PretrainingData(train_corpus, tokenizer, max_seq_length=SEQ_LEN, batch_size=batch_size,
                                    mask_rate=0.15, seed=seed, nsp=False)
        self.preset = preset
        self.budget_s = budget_s
        self.elapsed_s = 0.0
        self.steps = 0
        self.tokens = 0

    def lr(self) -> float:
        p = min(self.elapsed_s / self.budget_s, 1.0)
        return 1e-3 * (p / 0.1 if p < 0.1 else (1.0 - p) / 0.9)

    def run_until(self, until_s: float) -> None:
        while self.elapsed_s < min(until_s, self.budget_s):
            t0 = time.perf_counter()
            batch = next(self.data)
            for group in self.optimizer.param_groups:
                group["lr"] = max(self.lr(), 1e-3 * 1e-3)
            loss = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                              token_type_ids=batch.token_type_ids, labels=batch.mlm_labels).loss
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.steps += 1
            self.tokens += batch.num_tokens
            self.elapsed_s += time.perf_counter() - t0

    @torch.no_grad()
    def evaluate(self, batches) -> dict:
        self.model.eval()
        loss_sum = correct = n = 0
        for b in batches:
            logits = self.model(input_ids=b.input_ids, attention_mask=b.attention_mask,
                                token_type_ids=b.token_type_ids).logits
            pos = b.mlm_labels != -100
            sel, targets = logits[pos].float(), b.mlm_labels[pos]
            loss_sum += F.cross_entropy(sel, targets, reduction="sum").item()
            correct += int((sel.argmax(-1) == targets).sum())
            n += targets.numel()
        return {"mlm_acc": correct / n, "mlm_loss": loss_sum / n, "perplexity": math.exp(loss_sum / n),
                "num_masked": n}


def build_ours(tokenizer, train_corpus, budget_s: float, recipe: dict, seed: int = 0, steps: int | None = None
               ) -> Trainer:
    """Our default recipe as the CLI would run it with --time-budget (or with --steps when `steps` is given)."""
    init = {"initializer_range": recipe["initializer_range"]} if recipe.get("initializer_range") else {}
    model_config = BertConfig.preset(recipe["preset"], vocab_size=tokenizer.vocab_size,
                                     hidden_dropout_prob=recipe["dropout"],
                                     attention_probs_dropout_prob=recipe["dropout"], **init)
    config = recipe["train_config"].replace(time_budget_s=budget_s, max_steps=None, schedule="time", seed=seed,
                                            device="cpu", max_seq_length=SEQ_LEN)
    if steps is not None:
        config = config.replace(time_budget_s=None, max_steps=steps, schedule="linear")
    data = PretrainingData(train_corpus, tokenizer, max_seq_length=SEQ_LEN, batch_size=config.batch_size,
                           mask_rate=config.mask_rate, seed=seed, nsp=config.nsp)
    torch.manual_seed(seed)
    return Trainer(BertForPreTraining(model_config), tokenizer, data, config)


def run_ours_until(trainer: Trainer, until_s: float) -> None:
    def stop_at_boundary(event):
        if isinstance(event, StepEvent) and event.elapsed_s >= until_s:
            trainer.stop()

    trainer.callbacks = [stop_at_boundary]
    if trainer.progress.elapsed_s < until_s:
        trainer.run()
    if trainer.error:
        raise RuntimeError(trainer.error)


def apply_changes(recipe: dict, items) -> dict:
    """Recipe with KEY=VALUE changes: preset, dropout, initializer_range, or any TrainConfig field."""
    changes = {}
    for item in items:
        key, value = item.split("=", 1)
        if key == "preset":
            recipe["preset"] = value
        elif key in ("dropout", "initializer_range"):
            recipe[key] = float(value)
        else:
            current = getattr(recipe["train_config"], key)
            changes[key] = value.lower() in ("1", "true", "yes") if isinstance(current, bool) else type(current)(value)
    recipe["train_config"] = recipe["train_config"].replace(**changes)
    recipe["changes"] = list(items)
    return recipe


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=300.0, help="seconds of training for each recipe")
    parser.add_argument("--chunk", type=float, default=10.0, help="seconds per turn when interleaving")
    parser.add_argument("--reference-preset", action="append", default=[],
                        help="size of the reference (default: ours); repeat for more references, each interleaved "
                             "with the others (the first is the one `accuracy_ratio` compares with)")
    parser.add_argument("--skip-reference", action="store_true", help="only run our recipe (for tuning)")
    parser.add_argument("--steps", type=int, help="train each of our recipes for this many steps instead of the "
                        "time budget (no reference): how they compare after as many updates as a quiet machine "
                        "makes in the budget, whatever the load on this one")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of our recipe (preset, dropout, or a TrainConfig field)")
    parser.add_argument("--variant", action="append", default=[], metavar="K=V,K=V",
                        help="also run our recipe with these changes, interleaved with the others (tuning)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--summarize", type=Path, nargs="+", metavar="JSON",
                        help="print one table over these runs' --json files (no training)")
    args = parser.parse_args(argv)
    if args.summarize:
        results = []
        for path in args.summarize:
            try:
                result = json.loads(path.read_text())
                if not isinstance(result, dict) or "ours" not in result:
                    raise ValueError("not a --json file of this script")
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                sys.exit(f"error: {path}: {exc}")
            results.append(result)
        print(summary_table(results))
        return {}
    if args.threads:
        torch.set_num_threads(args.threads)
    data_dir = shared_data_dir()
    if data_dir is None:
        sys.exit("error: the shared data folder is absent (set BERT_SHARED_DATA)")

    recipe = apply_changes(default_recipe(), args.set)
    variants = [apply_changes(default_recipe(), v.split(",")) for v in args.variant]

    corpus = load_corpus(str(data_dir / "wikitext-2" / "valid.txt"))
    train, held = split_heldout(corpus, fraction=0.1, seed=0)
    tokenizer = train_tokenizer(train.texts(), vocab_size=VOCAB)
    eval_data = PretrainingData(held, tokenizer, max_seq_length=SEQ_LEN, batch_size=32, mask_rate=EVAL_MASK_RATE,
                                seed=1234, nsp=False)
    eval_batches = eval_data.eval_batches(None, seed=1234)
    unigram = PretrainingData(train, tokenizer, max_seq_length=SEQ_LEN, batch_size=32).unigram_baseline(eval_batches)

    ours = build_ours(tokenizer, train, args.budget, recipe, seed=args.seed, steps=args.steps)
    others = [build_ours(tokenizer, train, args.budget, v, seed=args.seed, steps=args.steps) for v in variants]
    refs = []
    if args.steps is None and not args.skip_reference:
        refs = [Reference(p, tokenizer, train, args.budget, seed=args.seed)
                for p in args.reference_preset or [recipe["preset"]]]
    untrained = evaluate(ours.model, eval_batches).mlm_acc
    boundary = 0.0
    wall0 = time.perf_counter()
    if args.steps is not None:
        args.budget = 0.0  # no time turns: each recipe runs its steps here
        for trainer in [ours, *others]:
            trainer.run()
    while boundary < args.budget:
        boundary = min(boundary + args.chunk, args.budget)
        run_ours_until(ours, boundary)
        for other in others:
            run_ours_until(other, boundary)
        for ref in refs:
            ref.run_until(boundary)
        print(f"{boundary:6.0f}s  ours step {ours.step}  ref steps {[ref.steps for ref in refs]}", file=sys.stderr)
    ours_eval = evaluate(ours.model, eval_batches)
    result = {
        "budget_s": args.budget,
        "steps_each": args.steps,
        "seed": args.seed,
        "wall_s": time.perf_counter() - wall0,
        "heldout": {"articles": held.num_documents, "masked_tokens": ours_eval.num_masked,
                    "split": held.source},
        "unigram_accuracy": unigram["accuracy"],
        "untrained_accuracy": untrained,
        "ours": {
            "recipe": {"preset": recipe["preset"], "dropout": recipe["dropout"],
                       "initializer_range": ours.model.config.initializer_range,
                       "changes": recipe.get("changes", []), "train_config": ours.config.to_dict()},
            "steps": ours.step, "tokens": ours.tokens_seen, "train_s": ours.elapsed_s,
            "mlm_acc": ours_eval.mlm_acc, "mlm_loss": ours_eval.mlm_loss, "perplexity": ours_eval.perplexity,
        },
        "machine": {"platform": platform.platform(), "torch": torch.__version__,
                    "threads": torch.get_num_threads()},
        "command": "python benchmarks/time_to_quality.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    result["variants"] = []
    for v, other in zip(variants, others):
        e = evaluate(other.model, eval_batches)
        result["variants"].append({"changes": v["changes"], "steps": other.step, "tokens": other.tokens_seen,
                                   "train_s": other.elapsed_s, "mlm_acc": e.mlm_acc, "perplexity": e.perplexity})
    result["references"] = [{"preset": ref.preset, "steps": ref.steps, "tokens": ref.tokens, "train_s": ref.elapsed_s,
                              **ref.evaluate(eval_batches)} for ref in refs]
    if refs:
        result["reference"] = result["references"][0]
        result["accuracy_ratio"] = result["ours"]["mlm_acc"] / max(result["reference"]["mlm_acc"], 1e-9)
    print(json.dumps(result, indent=1))
    rows = [("ours " + " ".join(recipe["changes"]), result["ours"])]
    rows += [("ours " + " ".join(v["changes"]), v) for v in result["variants"]]
    rows += [(f"reference (transformers, {r['preset']})", r) for r in result["references"]]
    print(f"unigram {unigram['accuracy']:.4f}  untrained {untrained:.4f}", file=sys.stderr)
    for name, r in rows:
        print(f"{name:50s} steps {r['steps']:5d}  held-out acc {r['mlm_acc']:.4f}  ppl {r['perplexity']:.0f}",
              file=sys.stderr)
    print(summary_table([result]), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return result


def summary_table(results: list[dict]) -> str:
    """A markdown table: each recipe of these runs (one run per seed, say) beside the reference, with steps,
    held-out accuracy and its multiple of the reference's accuracy in the same run, per run and on average."""
    def rows(r):
        out = [("ours, default recipe" + (" " + " ".join(r["ours"]["recipe"].get("changes", []))).rstrip(), r["ours"])]
        out += [("ours, " + ",".join(v["changes"]), v) for v in r.get("variants", [])]
        out += [(f"reference: transformers, plain loop, `{ref['preset']}`", ref) for ref in references(r)]
        return out

    def references(r):
        return r.get("references", [r["reference"]] if "reference" in r else [])

    names = [name for name, _ in rows(results[0])]
    seeds = ", ".join(str(r.get("seed", "?")) for r in results)
    first = results[0]
    each = f"{first['steps_each']:,} steps" if first.get("steps_each") else f"{first['budget_s']:.0f} s"
    presets = [ref["preset"] for ref in references(first)]
    lines = [f"| {each} each, seeds {seeds} | steps | held-out masked-token accuracy | mean accuracy | "
             + "".join(f"x reference `{p}` (mean) | " for p in presets),
             "| --- | ---: | ---: | ---: |" + " ---: |" * len(presets)]
    for i, name in enumerate(names):
        per = [rows(r)[i][1] for r in results]
        mean_acc = sum(p["mlm_acc"] for p in per) / len(per)
        steps = " / ".join(f"{p['steps']:,}" for p in per)
        accs = " / ".join(f"{100 * p['mlm_acc']:.2f}%" for p in per)
        cells = ""
        for j in range(len(presets)):
            ratios = [p["mlm_acc"] / references(r)[j]["mlm_acc"] for p, r in zip(per, results)]
            cells += f"{' / '.join(f'{x:.2f}' for x in ratios)} ({sum(ratios) / len(ratios):.2f}x) | "
        lines.append(f"| {name} | {steps} | {accs} | {100 * mean_acc:.2f}% | {cells}")
    unigram = " / ".join(f"{100 * r['unigram_accuracy']:.2f}%" for r in results)
    lines.append(f"| unigram baseline (most frequent training token) | | {unigram} | |" + " |" * len(presets))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
