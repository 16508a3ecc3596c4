"""What `python -m bert_core bench` measures beside the steps, and the figures it reports from them: the matmul
ceiling and the memory probe sampled between the steps, the spread of a set of timings, a step's useful FLOPs, and
the share of the card's measured matmul rate and of its datasheet peak that a step's useful FLOP/s reach (MFU)."""

from __future__ import annotations

import statistics
import time

import torch

from bert_core.model.config import BertConfig

# How `useful_flops` counts a training step (forward + backward = 3 x forward), reported with every bench run.
FLOPS_FORMULA = ("6 N T + 12 L S H T + 6 (H^2 + H V) M + 6 (H^2 + 2 H) B: N = the encoder's matmul weights, "
                 "L (4 H^2 + 2 H I); T = B S tokens; the attention's two batched matmuls; the MLM head at the M "
                 "masked positions (the tied decoder included); the pooler and NSP head. Embedding lookups, "
                 "biases, LayerNorms and softmaxes are not counted")

# Dense bf16 tensor-core peaks from NVIDIA's datasheets (TFLOP/s, no sparsity), by a piece of the name torch gives
# the card; the first match wins, so the longer names come first. T4 and V100 have no bf16: their fp16 peak.
DATASHEET_TFLOPS = (
    ("gh200", 989.0), ("h200 nvl", 835.0), ("h200", 989.0),
    ("h100 nvl", 835.0), ("h100 pcie", 756.0), ("h100", 989.0),     # "NVIDIA H100 80GB HBM3" is the SXM card
    ("b200", 2250.0), ("a100", 312.0), ("l40s", 362.0), ("l40", 181.0), ("l4", 121.0),
    ("t4", 65.0), ("v100", 125.0),
)


def datasheet_tflops(device_name: str) -> float | None:
    """The card's dense bf16 (else fp16) datasheet peak in TFLOP/s; None for a card not listed, or a CPU."""
    name = device_name.lower()
    for piece, tflops in DATASHEET_TFLOPS:
        if piece in name:
            return tflops
    return None


def training_flops(config: BertConfig, batch: int, seq: int, masked: int, sparse_head: bool) -> float:
    """Matmul FLOPs of one training step (forward + backward = 3x forward), counting what the model computes: with
    `sparse_head` the MLM head at the masked rows only, as ours runs it (FLOPS_FORMULA: the useful work of a
    step), else at every position, as transformers runs it."""
    h, i, layers, v = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    tokens = batch * seq
    per_layer = tokens * (2 * 4 * h * h + 2 * 2 * h * i) + 2 * 2 * batch * seq * seq * h
    head_rows = masked if sparse_head else tokens
    head = head_rows * (2 * h * h + 2 * h * v)
    pooler_nsp = batch * (2 * h * h + 2 * h * 2)
    return 3.0 * (layers * per_layer + head + pooler_nsp)


def useful_flops(config: BertConfig, batch: int, seq: int, masked: int) -> float:
    """The FLOPs a training step needs (FLOPS_FORMULA), whoever runs it: a model that computes more (transformers'
    decoder at every position) is credited with these alone, so both models' rates compare."""
    return training_flops(config, batch, seq, masked, sparse_head=True)


def spread(times: list[float]) -> float:
    """Interquartile range / median of a list of timings: how much the middle half varied, ignoring an outlier."""
    if len(times) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return (q3 - q1) / statistics.median(times)


def utilisation(flops: float, step_s: float, matmul_gflops: float, peak_tflops: float | None) -> dict:
    """A step's useful GFLOP/s, and its share of the measured matmul rate and of the datasheet peak."""
    gflops = flops / step_s / 1e9
    return {"gflops": round(gflops, 3), "fraction_of_matmul": round(gflops / matmul_gflops, 3),
            "fraction_of_datasheet": round(gflops / (peak_tflops * 1e3), 3) if peak_tflops else None}


def sync(device: torch.device) -> None:
    """Wait for the device (a GPU runs asynchronously: a timing must wait for its work)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class MatmulCeiling:
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
            sync(self.device)
            t = time.perf_counter()
            torch.mm(self.a, self.b, out=self.out)
            sync(self.device)
            self.times.append(time.perf_counter() - t)

    def gflops(self) -> float:
        """From the median sample."""
        return 2 * self.n**3 / statistics.median(self.times) / 1e9


class MemoryProbe:
    """GB/s of a 64 MB elementwise pass (read + write), sampled between the training steps like the matmul. Much of
    a training step is memory-bound, and on a shared VM memory bandwidth varies with the neighbours far more than
    the matmul does: a low or spread figure here says the run's timings are not comparable with a quiet one."""

    def __init__(self, numel: int = 16 * 1024 * 1024, device: torch.device = torch.device("cpu")):
        self.device = device
        self.x, self.out = torch.randn(numel, device=device), torch.empty(numel, device=device)
        self.times: list[float] = []

    def sample(self, repeats: int = 2) -> None:
        for _ in range(repeats):
            sync(self.device)
            t = time.perf_counter()
            torch.mul(self.x, 2.0, out=self.out)
            sync(self.device)
            self.times.append(time.perf_counter() - t)

    def gbps(self) -> float:
        return 8 * self.x.numel() / statistics.median(self.times) / 1e9
