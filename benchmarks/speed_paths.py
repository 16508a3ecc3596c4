"""What each CPU speed path is worth on the workloads people run (docs/benchmarks.md, "Speed paths").

Four workloads, each built as its command or page builds it:

- app:      the Train page's default live run (toy corpus, nano, vocabulary 2,000 asked, batch 16 x 32, lr 1e-3,
            dropout 0, init 0.02, NSP, held-out evaluation every 100 steps over 5 batches, probe snapshots every
            100 steps, one torch thread), built by the app's `build_trainer` and run by `Trainer.run()`, so the
            evaluations and snapshots happen at their steps (they are in the run's wall time, not in a step's);
- cli:      `python -m bert_core train --steps N --out DIR` with its defaults (`training.default_recipe()`: tiny,
            batch 16 x 128, lr 2e-3, dropout 0; vocabulary 8,000 asked of the default corpus, toy), run the same way (no checkpoints written);
- finetune: `python -m bert_core finetune --csv polarity.csv` on the shipped checkpoints/bert-tiny-english
            (batch 32, up to 128 tokens, the checkpoint's dropout 0): the Finetuner's update step;
- bench:    `python -m bert_core bench`'s training step of our model (mini, vocabulary 30,522, batch 32 x 128,
            dropout 0.1, 15% masked, fused AdamW).

The CLI, fine-tuning and bench use torch's default threads unless `--threads N`; the app one thread. Every step's
wall time and the process's CPU time (`time.process_time`) are recorded.

Two kinds of measurement:

    python benchmarks/speed_paths.py paths --workload bench --variants all off:dropout16 off:written --rounds 20
        one process; the variants take turns step by step, in an order rotated every round; prints each variant's
        median step and its paired ratio to the first variant (median and quartiles over rounds), for CPU and wall
        time, and how often each path ran. A variant is `all` or `off:PATH,PATH`; a path is switched off by
        monkeypatching it to the plain computation the model runs without it: `dropout16` (FastDropout's masks ->
        torch's bernoulli_ masks), `written` (attention written out for CPU dropout -> scaled_dot_product_attention
        with torch's dropout), and, for the code before 2026-11-24 (`--code`), `attn` (hand-written attention
        backward), `slot` (tied-gradient slot) and `fused` (fused MLM cross-entropy, the slot off with it).

    python benchmarks/speed_paths.py processes --workload app --setting keep,huge --setting keep --runs 5
        separate processes, alternated (glibc reads its tunables at start, and mallopt cannot be undone): each
        setting is a comma list of `keep` (allocator.keep_freed_memory() in the process) and `huge`
        (GLIBC_TUNABLES=glibc.malloc.hugetlb=1 in its environment); give `--code DIR` once per setting to run each
        against its own checkout (e.g. a `git worktree` of an older commit, for a before/after).

`--code DIR` (paths) runs the workload against the bert_core found in DIR (default: this checkout).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("BERT_SHARED_DATA", ROOT.parent / "shared" / "data"))
POLARITY = DATA / "sentence_polarity" / "polarity.csv"
WORKLOADS = ("app", "cli", "finetune", "bench")
THREADS = {"app": 1}  # the app's training process: cores // allowed concurrent trainings = 1 on 2 cores


# ------------------------------------------------------------------------------------------------ variants
# Each path, switched off as the model's plain path would run it. A path the code does not have is an error.


def _plain_attention(hidden_states, query, key, value, additive_mask, keep_mask, keep_scale, num_heads):
    import torch.nn.functional as F

    b, s, h = hidden_states.shape
    q, k, v = (F.linear(hidden_states, m.weight, m.bias).view(b, s, num_heads, h // num_heads).transpose(1, 2)
               for m in (query, key, value))
    scores = (q / (h // num_heads) ** 0.5) @ k.transpose(-1, -2)
    if additive_mask is not None:
        scores = scores + additive_mask
    context = (scores.softmax(-1) * (keep_mask * keep_scale)) @ v
    return context.transpose(1, 2).reshape(b, s, h)


def _torch_keep_mask(shape, drop_levels, dtype):
    import torch

    return torch.empty(shape, dtype=dtype).bernoulli_(1 - drop_levels / 65536)  # torch's dropout draws these


def _plain_cross_entropy(hidden, weight, bias, targets, slot=None):
    import torch.nn.functional as F

    logits = F.linear(hidden, weight, bias)
    return F.cross_entropy(logits.float(), targets), logits.detach()


class _PlainCE:
    apply = staticmethod(_plain_cross_entropy)


def _sdpa_attention(self, hidden_states, additive_mask, output_attentions=False):
    """BertSelfAttention.forward with scaled_dot_product_attention for CPU dropout too (its dropout: torch's)."""
    import torch.nn.functional as F

    if output_attentions:
        return _ORIGINAL_ATTENTION[0](self, hidden_states, additive_mask, output_attentions)
    q, k, v = (self._heads(m(hidden_states)) for m in (self.query, self.key, self.value))
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=additive_mask,
                                             dropout_p=self.dropout.p if self.training else 0.0)
    b, _, s, _ = context.shape
    return context.transpose(1, 2).reshape(b, s, -1), None


_ORIGINAL_ATTENTION = []


def _switch_off(fp, name: str) -> dict:
    """The (module attribute -> replacement) patches that switch path `name` off in bert_core.model.fast_paths `fp`
    ("model.X": in bert_core.model.bert; "?X": only where the code has X)."""
    if name == "written":  # written-out attention for CPU dropout -> scaled_dot_product_attention with its dropout
        return {"model.BertSelfAttention.forward": _sdpa_attention}
    if name == "attn":  # self-attention's hand-written backward -> autograd through the written-out ops
        return {"self_attention_with_dropout": _plain_attention}
    if name == "slot":  # tied-gradient slot -> autograd adds the lookup's and the decoder's gradients
        return {"DecoderGradSlot": lambda: None}
    if name == "dropout16":  # 16-bit masks -> masks from torch's generator (bernoulli_, as torch's CPU dropout)
        return {"dropout_keep_mask": _torch_keep_mask}
    if name == "fused":  # fused MLM loss -> F.linear + F.cross_entropy (the slot goes with it: it needs the loss)
        return {"LinearCrossEntropy": _PlainCE, "?DecoderGradSlot": lambda: None}
    raise SystemExit(f"unknown path {name!r}")


class Variants:
    """Patches bert_core.model.fast_paths so that one variant at a time runs; counts the calls of each path."""

    COUNTED = ("self_attention_with_dropout", "dropout_keep_mask", "LinearCrossEntropy", "DecoderGradSlot")

    def __init__(self, names: list[str]):
        from bert_core.model import bert as model
        from bert_core.model import fast_paths as fp

        self.fp, self.attention = fp, model.BertSelfAttention
        _ORIGINAL_ATTENTION[:] = [model.BertSelfAttention.forward]
        self.original = {a: getattr(fp, a) for a in self.COUNTED if hasattr(fp, a)}
        self.calls = {a: 0 for a in self.original}
        self.patches = {}
        for variant in names:
            patch = {}
            for path in variant.split(":", 1)[1].split(",") if variant.startswith("off:") else []:
                for attr, repl in _switch_off(fp, path).items():
                    optional, attr = attr.startswith("?"), attr.lstrip("?")
                    if attr not in self.original and not attr.startswith("model."):
                        if optional:
                            continue
                        raise SystemExit(f"this code has no {attr} (path {path})")
                    patch[attr] = repl
            self.patches[variant] = patch

    def use(self, variant: str) -> None:
        for attr, orig in self.original.items():
            setattr(self.fp, attr, self._counted(attr, self.patches[variant].get(attr, orig)))
        self.attention.forward = self.patches[variant].get("model.BertSelfAttention.forward", _ORIGINAL_ATTENTION[0])

    def _counted(self, attr, target):
        calls = self.calls

        if attr == "LinearCrossEntropy":
            class Counted:
                @staticmethod
                def apply(*a):
                    calls[attr] += 1
                    return target.apply(*a)
            return Counted

        def counted(*a, **k):
            calls[attr] += 1
            return target(*a, **k)
        return counted


# ------------------------------------------------------------------------------------------------ workloads


def _pretraining_trainer(workload: str, total_steps: int):
    import torch

    try:
        from bert_core.data.pretraining_data import build_datasets
    except ImportError:  # before it moved out of the CLI
        from bert_core.data.pretraining_data import build_datasets
    from bert_core.model.bert import BertForPreTraining
    from bert_core.model.config import BertConfig
    from bert_core.training.trainer import Trainer

    if workload == "app":
        try:  # the app's builder moved from app_state to jobs; either way the Train page's defaults
            from bert_core.serve.jobs import TrainSpec, build_trainer
        except ImportError:
            from bert_core.app.app_state import TrainSpec, build_trainer
        train = dict(max_steps=total_steps, batch_size=16, learning_rate=1e-3, max_seq_length=32, mask_rate=0.15,
                     nsp=True, seed=0, eval_every=100, probe_every=100, eval_batches=5, device="cpu")
        spec = TrainSpec(corpus="toy", corpus_label="Toy grammar (generated, instant)", vocab_size=2000,
                         preset="nano", model_overrides=dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                                             initializer_range=0.02),
                         train=train, probes=True)
        return build_trainer(spec)
    from bert_core.training.train_config import default_recipe

    recipe = default_recipe()
    d = recipe["train_config"]
    config = d.replace(max_steps=total_steps, time_budget_s=None, checkpoint_every_s=600.0, device="auto")
    train_data, eval_data, _, tokenizer, _ = build_datasets(
        ["toy"], None, d.max_seq_length, d.batch_size, d.mask_rate, d.nsp, d.seed, 0.1, train_tokenizer=8000)
    model_config = BertConfig.preset(recipe["preset"], vocab_size=tokenizer.vocab_size, max_position_embeddings=512,
                                     hidden_dropout_prob=recipe["dropout"],
                                     attention_probs_dropout_prob=recipe["dropout"])
    torch.manual_seed(d.seed)
    return Trainer(BertForPreTraining(model_config), tokenizer, train_data, config, eval_data=eval_data)


class PretrainingSteps:
    """The Trainer's own loop (`run()`: evaluations and probe snapshots at their usual steps), with its update step
    wrapped so that `before_step` is called and the update alone is timed."""

    def __init__(self, workload: str, steps: int):
        self.trainer = _pretraining_trainer(workload, steps)
        cfg = self.trainer.model.config
        self.describe = (f"BertForPreTraining {cfg.num_hidden_layers}L H{cfg.hidden_size} vocab {cfg.vocab_size}, "
                         f"batch {self.trainer.config.batch_size} x {self.trainer.config.max_seq_length}, "
                         f"dropout {cfg.hidden_dropout_prob}")

    def run(self, before_step, record) -> float:
        inner = self.trainer._train_step

        def step():
            before_step()
            t, c = time.perf_counter(), time.process_time()
            event = inner()
            record(time.perf_counter() - t, time.process_time() - c)
            return event

        self.trainer._train_step = step
        t = time.perf_counter()
        self.trainer.run()
        if self.trainer.error:
            raise SystemExit(self.trainer.error)
        return time.perf_counter() - t


class _StepLoop:
    def run(self, before_step, record) -> float:
        t0 = time.perf_counter()
        for _ in range(self.steps):
            before_step()
            t, c = time.perf_counter(), time.process_time()
            self.step()
            record(time.perf_counter() - t, time.process_time() - c)
        return time.perf_counter() - t0


class FinetuneSteps(_StepLoop):
    """The Finetuner's update step on the CLI's defaults (validation passes are not timed)."""

    def __init__(self, workload: str, steps: int):
        import torch

        from bert_core.data.batching import train_batches
        from bert_core.data.classification_data import encode_examples
        from bert_core.training.finetune import Finetuner, classifier_from_checkpoint, load_task
        from bert_core.data.classification_data import split_train_val
        from bert_core.training.finetune_settings import FinetuneConfig

        self.steps = steps
        data = load_task(csv=str(POLARITY), seed=0)
        train, val = split_train_val(data, None, None, seed=0)
        model, tokenizer = classifier_from_checkpoint(ROOT / "checkpoints" / "bert-tiny-english", data.num_labels, 0)
        self.tuner = Finetuner(model, tokenizer, train, val, FinetuneConfig(max_steps=10**6, time_budget_s=None))
        self.batches = train_batches(encode_examples(train, tokenizer, 128), 32, 0, tokenizer.pad_id)
        self.tuner.model.train()
        torch.manual_seed(0)
        self.describe = (f"BertForSequenceClassification from bert-tiny-english, batch 32 of polarity.csv, "
                         f"dropout {model.config.hidden_dropout_prob}")

    def step(self):
        if "batch" in inspect.signature(self.tuner._train_step).parameters:  # older Finetuners take the batch
            event = self.tuner._train_step(next(self.batches))
        else:
            self.tuner._batches = self.batches
            event = self.tuner._train_step()
        if event is None:
            raise SystemExit(self.tuner.error)


class BenchSteps(_StepLoop):
    """`bench`'s training step of our model (forward, backward, fused AdamW) on `bench`'s batch."""

    def __init__(self, workload: str, steps: int):
        import torch

        from bert_core.cli.main import bench
        from bert_core.model.bert import BertForPreTraining, adamw
        from bert_core.model.config import BertConfig

        self.steps = steps
        config = BertConfig.preset("mini", vocab_size=30522, max_position_embeddings=512)
        torch.manual_seed(0)
        self.model = BertForPreTraining(config).train()
        self.optim = adamw(self.model, lr=1e-4)
        self.batch = bench._batch(config, 32, 128, 0.15)
        self.describe = "BertForPreTraining mini, vocab 30522, batch 32 x 128, dropout 0.1 (bench)"

    def step(self):
        self.optim.zero_grad(set_to_none=True)
        self.model(**self.batch).loss.backward()
        self.optim.step()


def make_workload(name: str, steps: int):
    return {"app": PretrainingSteps, "cli": PretrainingSteps, "finetune": FinetuneSteps,
            "bench": BenchSteps}[name](name, steps)


# ------------------------------------------------------------------------------------------------ running


def _quartiles(xs):
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def _set_threads(workload: str, threads: int) -> None:
    import torch

    n = threads or THREADS.get(workload, 0)
    if n:
        torch.set_num_threads(n)


def worker(args) -> dict:
    """One process: `--warmup` untimed steps, then `--rounds` rounds in which every variant runs one step (in an
    order rotated each round, so that no variant always follows the same one)."""
    kept = False
    if args.keep:
        from bert_core.training.allocator import keep_freed_memory

        kept = keep_freed_memory()
    _set_threads(args.workload, args.threads)
    import torch

    variants = args.variants or ["all"]
    patches = Variants(variants) if variants != ["all"] else None
    schedule = [variants[0]] * args.warmup
    for r in range(args.rounds):
        schedule += variants[r % len(variants):] + variants[:r % len(variants)]
    work = make_workload(args.workload, len(schedule))
    times = {v: [] for v in variants}
    cpu = {v: [] for v in variants}
    position = iter(range(len(schedule)))
    current = [None]

    def before_step():
        i = next(position)
        current[0] = schedule[i] if i >= args.warmup else None
        if patches:
            patches.use(schedule[i])

    def record(dt, cpu_dt):
        if current[0] is not None:
            times[current[0]].append(dt)
            cpu[current[0]].append(cpu_dt)

    wall = work.run(before_step, record)
    result = {"workload": args.workload, "describe": work.describe, "threads": torch.get_num_threads(),
              "keep_freed_memory": kept, "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
              "code": str(Path(sys.modules["bert_core"].__file__).parent.parent), "wall_s": wall,
              "steps": len(schedule), "times": times, "cpu_times": cpu}
    if patches:
        result["calls"] = patches.calls
    return result


def _summary(times: dict) -> dict:
    base = list(times)[0]
    out = {}
    for v, ts in times.items():
        ratios = [t / b for t, b in zip(ts, times[base])]
        q1, med, q3 = _quartiles(ratios)
        out[v] = {"median_step_ms": round(1000 * statistics.median(ts), 3), "n": len(ts),
                  f"ratio_to_{base}": [round(q1, 4), round(med, 4), round(q3, 4)]}
    return out


def paths(args) -> None:
    result = worker(args)
    result["summary"] = {"wall": _summary(result["times"]), "cpu": _summary(result["cpu_times"])}
    result["summary"]["calls"] = result.get("calls")
    result["summary"]["threads"] = result["threads"]
    _emit(args, result)


def processes(args) -> None:
    settings = args.setting
    codes = args.code_list or [str(ROOT)] * len(settings)
    if len(codes) != len(settings):
        raise SystemExit("give --code once per --setting (or not at all)")
    keys = [f"{s} @ {c}" for s, c in zip(settings, codes)]
    per_setting = {"step_wall": {k: [] for k in keys}, "step_cpu": {k: [] for k in keys},
                   "run_wall": {k: [] for k in keys}}
    raw = []
    for r in range(args.runs):
        order = list(zip(settings, codes))
        if r % 2:
            order.reverse()
        for setting, code in order:
            parts = {p for p in setting.split(",") if p}
            env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
            env["PYTHONPATH"] = code
            if "huge" in parts:
                env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
            cmd = [sys.executable, __file__, "worker", "--workload", args.workload, "--rounds", str(args.rounds),
                   "--warmup", str(args.warmup), "--threads", str(args.threads)]
            if "keep" in parts:
                cmd.append("--keep")
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=code)
            if out.returncode:
                raise SystemExit(out.stderr[-3000:])
            res = json.loads(out.stdout.strip().splitlines()[-1])
            key = f"{setting} @ {code}"
            figures = {"step_wall": statistics.median(res["times"]["all"]),
                       "step_cpu": statistics.median(res["cpu_times"]["all"]), "run_wall": res["wall_s"]}
            for name, value in figures.items():
                per_setting[name][key].append(value)
            raw.append({"setting": setting, "code": code, **figures, "kept": res["keep_freed_memory"],
                        "tunables": res["glibc_tunables"], "run": r, "describe": res["describe"]})
            print(json.dumps(raw[-1]), file=sys.stderr)
    _emit(args, {"workload": args.workload, "runs": raw,
                 "summary": {name: _summary(v) for name, v in per_setting.items()}})


def _emit(args, result: dict) -> None:
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result if args.command == "worker" else result.get("summary"), indent=None
                     if args.command == "worker" else 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("paths", "processes", "worker"))
    p.add_argument("--workload", choices=WORKLOADS, required=True)
    p.add_argument("--variants", nargs="*", help="'all', or 'off:PATH,PATH' with paths from attn slot dropout16 fused written")
    p.add_argument("--rounds", type=int, default=10, help="timed steps per variant (per process)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: the workload's own)")
    p.add_argument("--keep", action="store_true", help="worker: allocator.keep_freed_memory() first")
    p.add_argument("--setting", action="append", default=[], help="processes: e.g. keep,huge (repeat)")
    p.add_argument("--code", dest="code_list", action="append", default=[], help="processes: checkout per setting")
    p.add_argument("--runs", type=int, default=4, help="processes: runs of each setting, alternated")
    p.add_argument("--json-out", help="also write the full result here")
    args = p.parse_args()
    if args.command != "processes":  # the bert_core to measure: --code, else PYTHONPATH, else this checkout
        sys.path.insert(0, args.code_list[0] if args.code_list else os.environ.get("PYTHONPATH") or str(ROOT))
    if args.command == "worker":
        result = worker(args)
        print(json.dumps(result))
    elif args.command == "paths":
        paths(args)
    else:
        processes(args)


if __name__ == "__main__":
    main()
