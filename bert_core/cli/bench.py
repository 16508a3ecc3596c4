"""`python -m bert_core bench`: training speed of our BertForPreTraining against transformers', side by side.

Both models get the same config, weights, batch and masking; their training steps (forward, backward, AdamW)
are alternated in one process so that machine noise hits both alike. It prints tokens/s of each, the ratio of the
medians, and each model's useful FLOP/s (bench_figures.FLOPS_FORMULA: the same count for both, the work a step
needs) as a share of a large matmul sampled between the steps of the same run and, on a GPU the table knows, of
its datasheet peak (MFU). A memory-bandwidth probe is sampled there too, and the spread of each set of timings is
printed: on a shared machine, a busy neighbour shows up there, and the run says so.
Both train under the autocast `train` would use (training.distributed: bf16 by default on a CUDA GPU, `--device
cuda` or auto when one is visible, and on a CPU with bfloat16 instructions; fp32 on other CPUs, or with
`--precision fp32`), and the ceiling is a large matmul in that precision: the fraction printed is of what the
device reaches on dense math, not its datasheet peak. On a GPU the timings wait for it (torch.cuda.synchronize).
`--compile` puts both models through torch.compile first: ours as `train --compile` runs it (its encoder, for
training steps: bert_core.training.compiled_step), transformers' whole model; `--compile reduce-overhead` adds CUDA
graphs. The warm-up steps (at least 3 when compiling) then include the compilation, reported apart as
`*_compile_s` (their time less as many timed steps).
`transformers` is only a test/benchmark dependency: without it, only our figures are printed.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from bert_core.cli.arguments import FRACTION, int_arg
from bert_core.cli.bench_figures import (
    FLOPS_FORMULA,
    MatmulCeiling,
    MemoryProbe,
    datasheet_tflops,
    spread,
    sync,
    useful_flops,
    utilisation,
)
from bert_core.data.objectives import MASK_RATE
from bert_core.model.bert import IGNORE_INDEX, BertForPreTraining, adamw
from bert_core.model.config import MAX_BATCH, MAX_SEQ_LEN, PRESETS, BertConfig
from bert_core.training.allocator import keep_freed_memory
from bert_core.training.compiled_step import CompiledTraining
from bert_core.training.train_config import COMPILE_MODES
from bert_core.training.distributed import DistInfo, autocast_for, computes_in, resolve_device

# Warm-up steps a compiled run takes at least: the first compiles forward and backward, and with CUDA graphs the
# next ones record them, so no timed step includes either.
COMPILED_WARMUP = 3


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("bench", help="training speed against transformers.BertForPreTraining",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="mini", choices=list(PRESETS))
    # Ids 0-4 are the special tokens the random batch leaves out, so a vocabulary needs a few more.
    p.add_argument("--vocab-size", type=int_arg(8, 2**22), default=30522, help="BERT's WordPiece size by default")
    p.add_argument("--seq-len", type=int_arg(2, MAX_SEQ_LEN), default=128)
    p.add_argument("--batch-size", type=int_arg(1, MAX_BATCH), default=32)
    p.add_argument("--mask-rate", type=FRACTION, default=MASK_RATE)
    p.add_argument("--rounds", type=int_arg(1, 10**4), default=7, help="timed steps per model, alternated")
    p.add_argument("--warmup", type=int_arg(0, 10**4), default=2,
                   help=f"untimed steps per model first (at least {COMPILED_WARMUP} with --compile)")
    p.add_argument("--threads", type=int_arg(0, 4096), default=0, help="torch intra-op threads (0: leave as is)")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc as it is instead of keeping freed memory, as training does (see "
                        "bert_core.training.allocator): shows what that setting is worth")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto: the GPU when one is visible)")
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp16", "fp32"),
                   help="autocast as `train` uses it (default bf16: on a CUDA GPU, and on a CPU with bfloat16 "
                        "instructions; other CPUs run fp32)")
    p.add_argument("--compile", nargs="?", const="default", default="off", choices=COMPILE_MODES, metavar="MODE",
                   help="torch.compile both models before the warm-up steps (ours as `train --compile` runs it); "
                        "MODE: default (a bare --compile) or reduce-overhead (CUDA graphs on a GPU); off by default")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return p


_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _batch(config: BertConfig, batch: int, seq: int, mask_rate: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (batch, seq), generator=g)
    labels = torch.full_like(ids, IGNORE_INDEX)
    chosen = torch.rand(ids.shape, generator=g) < mask_rate
    labels[chosen] = ids[chosen]
    ids[chosen] = 4
    tt = torch.zeros_like(ids)
    tt[:, seq // 2:] = 1
    return dict(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=tt,
                labels=labels, next_sentence_label=torch.randint(0, 2, (batch,), generator=g))


def _side_by_side(config: BertConfig) -> dict:
    """Our model and, where transformers is installed, its BertForPreTraining (SDPA attention) with the same
    weights, both in training mode."""
    torch.manual_seed(0)
    ours = BertForPreTraining(config).train()
    models = {"ours": ours}
    try:
        import transformers  # optional (tests only): the side-by-side runs where it is installed

        ref = transformers.BertForPreTraining(
            transformers.BertConfig(**{k: v for k, v in config.to_hf_dict().items() if k != "architectures"}),
        )
        ref.config._attn_implementation = "sdpa"
        ref.load_state_dict(ours.state_dict())
        models["transformers"] = ref.train()
    except ImportError:
        pass
    return models


class _Stepper:
    """One training step of each model, timed: forward under the run's autocast, backward, AdamW. Ours compiles as
    `train --compile` does (its encoder); transformers' whole model goes through torch.compile in the same mode."""

    def __init__(self, models: dict, batch: dict, device: torch.device, precision: str, mode: str):
        self.models, self.batch, self.device, self.precision, self.mode = models, batch, device, precision, mode
        self.optims = {k: adamw(m, lr=1e-4) for k, m in models.items()}  # the same (fused) optimizer for both
        self.ours = CompiledTraining(models["ours"])
        self.runners = {"ours": models["ours"]}
        for name, model in models.items():
            if name != "ours":
                self.runners[name] = (model if mode == "off" else
                                      torch.compile(model, mode=None if mode == "default" else mode, dynamic=False))
        self.scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None

    def __call__(self, name: str) -> float:
        sync(self.device)
        t = time.perf_counter()
        optim = self.optims[name]
        optim.zero_grad(set_to_none=True)
        if name == "transformers" and self.mode == "reduce-overhead" and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        with self.ours.forward(self.mode if name == "ours" else "off", self.device):
            with autocast_for(self.device, self.precision):
                loss = self.runners[name](**self.batch).loss
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(optim)
            self.scaler.update()
        else:
            loss.backward()
            optim.step()
        sync(self.device)
        return time.perf_counter() - t


def _machine(device: torch.device) -> str:
    return (torch.cuda.get_device_name(device) if device.type == "cuda"
            else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")


def _figures(args, config: BertConfig, device, kept: bool, times: dict, warm: dict, matmul, memory,
             masked: int) -> dict:
    """The run's report: the machine, each model's median step, tokens/s, spread and compile time, and each
    model's useful FLOP/s as a share of the measured matmul and of the datasheet peak."""
    ceiling = matmul.gflops()
    peak = datasheet_tflops(_machine(device)) if device.type == "cuda" else None
    flops = useful_flops(config, args.batch_size, args.seq_len, masked)
    size = f"L{config.num_hidden_layers} H{config.hidden_size} A{config.num_attention_heads}"
    result = {"machine": f"{_machine(device)}, torch {torch.__version__}", "device": device.type,
              "precision": computes_in(device, args.precision), "compiled": args.compile != "off",
              "compile_mode": args.compile,
              "config": f"{args.preset} ({size}), vocab {config.vocab_size}, seq {args.seq_len}, "
                        f"batch {args.batch_size}, {args.mask_rate:.0%} masked",
              "freed_memory_kept": kept, "matmul_gflops": round(ceiling, 1),
              "matmul_spread": round(spread(matmul.times), 3), "datasheet_tflops": peak,
              "memory_gbps": round(memory.gbps(), 1), "memory_spread": round(spread(memory.times), 3),
              "useful_gflop_per_step": round(flops / 1e9, 4), "flops_formula": FLOPS_FORMULA}
    for name, ts in times.items():   # each model's median step, tokens/s, spread, compile time and utilisation
        med = statistics.median(ts)
        tokens_per_s = args.batch_size * args.seq_len / med
        result.update({f"{name}_step_s": round(med, 4), f"{name}_tokens_per_s": round(tokens_per_s, 1),
                       f"{name}_step_spread": round(spread(ts), 3),
                       f"{name}_warmup_s": round(sum(warm[name]), 2),
                       f"{name}_compile_s": round(max(sum(warm[name]) - len(warm[name]) * med, 0.0), 2)
                       if args.compile != "off" else None})
        result.update({f"{name}_{k}": v for k, v in utilisation(flops, med, ceiling, peak).items()})
    if "transformers" in times:
        result["speedup"] = round(result["transformers_step_s"] / result["ours_step_s"], 3)
    if max(result["matmul_spread"], result["memory_spread"]) > 0.1:
        result["warning"] = ("the machine was busy during this run (the middle half of the matmul or memory samples "
                             "spread over more than 10% of their median): compare its figures only with quiet runs")
    return result


def run_bench(args) -> dict:
    """Run the side-by-side benchmark and return its figures (also printed)."""
    config = BertConfig.preset(args.preset, vocab_size=args.vocab_size, max_position_embeddings=max(512, args.seq_len))
    # Two models train side by side: refuse, before allocating either, a size that could not train even once.
    config.check_memory(training=True, batch_size=2 * args.batch_size, seq_len=args.seq_len)
    device = resolve_device(args.device, DistInfo())
    precision = computes_in(device, args.precision)
    kept = False if args.default_malloc else keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    models = {k: m.to(device) for k, m in _side_by_side(config).items()}
    batch = {k: v.to(device) for k, v in _batch(config, args.batch_size, args.seq_len, args.mask_rate).items()}
    step = _Stepper(models, batch, device, precision, args.compile)
    warmup = max(args.warmup, COMPILED_WARMUP) if args.compile != "off" else args.warmup
    warm = {name: [] for name in models}
    for _ in range(warmup):
        for name in models:
            warm[name].append(step(name))
    times = {name: [] for name in models}
    if device.type == "cuda":
        matmul, memory = MatmulCeiling(8192, device, _DTYPES[precision]), MemoryProbe(256 * 1024 * 1024, device)
    else:
        matmul, memory = MatmulCeiling(dtype=_DTYPES[precision]), MemoryProbe()
    for _ in range(args.rounds):
        for name in models:
            times[name].append(step(name))
        matmul.sample()
        memory.sample()
    masked = int((batch["labels"] != IGNORE_INDEX).sum())
    result = _figures(args, config, device, kept, times, warm, matmul, memory, masked)
    print(json.dumps(result) if args.json else "\n".join(f"{k:>34}: {v}" for k, v in result.items()))
    return result


def run(args) -> int:
    run_bench(args)
    return 0
