"""`python -m bert_core bench`: training speed of our BertForPreTraining against transformers', side by side.

Both models get the same config, weights, batch and masking; their training steps (forward, backward, AdamW)
are alternated in one process so that machine noise hits both alike. It prints tokens/s of each, the ratio of the
medians, and our achieved GFLOP/s as a fraction of a large fp32 matmul sampled between the steps of the same run.
A memory-bandwidth probe is sampled there too, and the spread of each set of timings is printed: on a shared
machine, a busy neighbour shows up there, and the run says so.
Both train under the autocast `train` would use (training.precision: bf16 by default on a CUDA GPU, `--device
cuda` or auto when one is visible, and on a CPU with bfloat16 instructions; fp32 on other CPUs, or with
`--precision fp32`), and the ceiling is a large matmul in that precision: the fraction printed is of what the
device reaches on dense math, not its datasheet peak. On a GPU the timings wait for it (torch.cuda.synchronize).
`--compile` puts both models through torch.compile first (its warm-up steps then include the compilation).
`transformers` is only a test/benchmark dependency: without it, only our figures are printed.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from bert_core.cli.arguments import FRACTION, MAX_BATCH, MAX_SEQ_LEN, int_arg
from bert_core.data.objectives import MASK_RATE
from bert_core.model.bert import IGNORE_INDEX, BertForPreTraining, adamw
from bert_core.model.config import PRESETS, BertConfig
from bert_core.training.allocator import keep_freed_memory
from bert_core.training.distributed import DistInfo, resolve_device
from bert_core.training.precision import autocast_for, computes_in


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the `bench` subcommand."""
    p = subparsers.add_parser("bench", help="training speed against transformers.BertForPreTraining",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="mini", choices=list(PRESETS))
    # Ids 0-4 are the special tokens the random batch leaves out, so a vocabulary needs a few more.
    p.add_argument("--vocab-size", type=int_arg(8, 2**22), default=30522, help="BERT's WordPiece size by default")
    p.add_argument("--seq-len", type=int_arg(2, MAX_SEQ_LEN), default=128)
    p.add_argument("--batch-size", type=int_arg(1, MAX_BATCH), default=32)
    p.add_argument("--mask-rate", type=FRACTION, default=MASK_RATE)
    p.add_argument("--rounds", type=int_arg(1, 10**4), default=7, help="timed steps per model, alternated")
    p.add_argument("--warmup", type=int_arg(0, 10**4), default=2, help="untimed steps per model first")
    p.add_argument("--threads", type=int_arg(0, 4096), default=0, help="torch intra-op threads (0: leave as is)")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc as it is instead of keeping freed memory, as training does (see "
                        "bert_core.training.allocator): shows what that setting is worth")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto: the GPU when one is visible)")
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp16", "fp32"),
                   help="autocast as `train` uses it (default bf16: on a CUDA GPU, and on a CPU with bfloat16 "
                        "instructions; other CPUs run fp32)")
    p.add_argument("--compile", action="store_true", help="torch.compile both models before the warm-up steps")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return p


_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _MatmulCeiling:
    """GFLOP/s of an n x n matmul in the precision the steps autocast to (fp32 when they do not), the device's
    practical ceiling for dense math. Sampled between the training steps rather than once at the end, so that it
    sees the same machine (clock, neighbours) they do."""

    def __init__(self, n: int = 2048, device: torch.device = torch.device("cpu"), dtype=torch.float32):
        self.n, self.device = n, device
        self.a = torch.randn(n, n, device=device).to(dtype)
        self.b = torch.randn(n, n, device=device).to(dtype)
        self.out = self.a @ self.b
        self.times: list[float] = []

    def sample(self, repeats: int = 2) -> None:
        for _ in range(repeats):
            _sync(self.device)
            t = time.perf_counter()
            torch.mm(self.a, self.b, out=self.out)
            _sync(self.device)
            self.times.append(time.perf_counter() - t)

    def gflops(self) -> float:
        """From the median sample."""
        return 2 * self.n**3 / statistics.median(self.times) / 1e9


class _MemoryProbe:
    """GB/s of a 64 MB elementwise pass (read + write), sampled between the training steps like the matmul. Much of
    a training step is memory-bound, and on a shared VM memory bandwidth varies with the neighbours far more than
    the matmul does: a low or spread figure here says the run's timings are not comparable with a quiet one."""

    def __init__(self, numel: int = 16 * 1024 * 1024, device: torch.device = torch.device("cpu")):
        self.device = device
        self.x, self.out = torch.randn(numel, device=device), torch.empty(numel, device=device)
        self.times: list[float] = []

    def sample(self, repeats: int = 2) -> None:
        for _ in range(repeats):
            _sync(self.device)
            t = time.perf_counter()
            torch.mul(self.x, 2.0, out=self.out)
            _sync(self.device)
            self.times.append(time.perf_counter() - t)

    def gbps(self) -> float:
        return 8 * self.x.numel() / statistics.median(self.times) / 1e9


def _spread(times: list[float]) -> float:
    """Interquartile range / median of a list of timings: how much the middle half varied, ignoring an outlier."""
    if len(times) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return (q3 - q1) / statistics.median(times)


def training_flops(config: BertConfig, batch: int, seq: int, masked: int, sparse_head: bool) -> float:
    """Matmul FLOPs of one training step (forward + backward = 3x forward), counting what the model computes."""
    h, i, layers, v = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    tokens = batch * seq
    per_layer = tokens * (2 * 4 * h * h + 2 * 2 * h * i) + 2 * 2 * batch * seq * seq * h
    head_rows = masked if sparse_head else tokens
    head = head_rows * (2 * h * h + 2 * h * v)
    pooler_nsp = batch * (2 * h * h + 2 * h * 2)
    return 3.0 * (layers * per_layer + head + pooler_nsp)


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
        import transformers

        ref = transformers.BertForPreTraining(
            transformers.BertConfig(**{k: v for k, v in config.to_hf_dict().items() if k != "architectures"}),
        )
        ref.config._attn_implementation = "sdpa"
        ref.load_state_dict(ours.state_dict())
        models["transformers"] = ref.train()
    except ImportError:
        pass
    return models


def run_bench(args) -> dict:
    """Run the side-by-side benchmark and return its figures (also printed)."""
    config = BertConfig.preset(args.preset, vocab_size=args.vocab_size, max_position_embeddings=max(512, args.seq_len))
    # Two models train side by side: refuse, before allocating either, a size that could not train even once.
    config.check_memory(training=True, batch_size=2 * args.batch_size, seq_len=args.seq_len)
    device = resolve_device(getattr(args, "device", "cpu"), DistInfo())
    precision = computes_in(device, getattr(args, "precision", "bf16"))
    kept = False if args.default_malloc else keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    models = {k: m.to(device) for k, m in _side_by_side(config).items()}
    batch = {k: v.to(device) for k, v in _batch(config, args.batch_size, args.seq_len, args.mask_rate).items()}
    optims = {k: adamw(m, lr=1e-4) for k, m in models.items()}  # the same (fused) optimizer for both
    runners = {k: (torch.compile(m) if getattr(args, "compile", False) else m) for k, m in models.items()}
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None

    def step(name):
        _sync(device)
        t = time.perf_counter()
        optims[name].zero_grad(set_to_none=True)
        with autocast_for(device, precision):
            loss = runners[name](**batch).loss
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optims[name])
            scaler.update()
        else:
            loss.backward()
            optims[name].step()
        _sync(device)
        return time.perf_counter() - t

    for _ in range(args.warmup):
        for name in models:
            step(name)
    times = {name: [] for name in models}
    if device.type == "cuda":
        matmul = _MatmulCeiling(8192, device, _DTYPES[precision])
        memory = _MemoryProbe(256 * 1024 * 1024, device)
    else:
        matmul, memory = _MatmulCeiling(dtype=_DTYPES[precision]), _MemoryProbe()
    for _ in range(args.rounds):
        for name in models:
            times[name].append(step(name))
        matmul.sample()
        memory.sample()
    ceiling = matmul.gflops()
    tokens = args.batch_size * args.seq_len
    masked = int((batch["labels"] != IGNORE_INDEX).sum())
    where = (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    result = {
        "machine": f"{where}, torch {torch.__version__}",
        "device": device.type,
        "precision": precision,
        "compiled": bool(getattr(args, "compile", False)),
        "config": f"{args.preset} (L{config.num_hidden_layers} H{config.hidden_size} A{config.num_attention_heads}), "
                  f"vocab {config.vocab_size}, seq {args.seq_len}, batch {args.batch_size}, "
                  f"{args.mask_rate:.0%} masked",
        "freed_memory_kept": kept,
        "matmul_gflops": round(ceiling, 1),
        "matmul_spread": round(_spread(matmul.times), 3),
        "memory_gbps": round(memory.gbps(), 1),
        "memory_spread": round(_spread(memory.times), 3),
    }
    for name, ts in times.items():   # each model's median step, its tokens a second and its spread
        med = statistics.median(ts)
        result.update({f"{name}_step_s": round(med, 4), f"{name}_tokens_per_s": round(tokens / med, 1),
                       f"{name}_step_spread": round(_spread(ts), 3)})
    ours_flops = training_flops(config, args.batch_size, args.seq_len, masked, sparse_head=True)
    result["ours_gflops"] = round(ours_flops / result["ours_step_s"] / 1e9, 1)
    result["ours_fraction_of_matmul"] = round(result["ours_gflops"] / ceiling, 3)
    if "transformers" in times:
        result["speedup"] = round(result["transformers_step_s"] / result["ours_step_s"], 3)
    if max(result["matmul_spread"], result["memory_spread"]) > 0.1:
        result["warning"] = ("the machine was busy during this run (the middle half of the matmul or memory samples "
                             "spread over more than 10% of their median): compare its figures only with quiet runs")
    print(json.dumps(result) if args.json else "\n".join(f"{k:>28}: {v}" for k, v in result.items()))
    return result


def run(args) -> int:
    """Carry out `python -m bert_core bench` (the figures are printed)."""
    run_bench(args)
    return 0
