"""The model's CPU training speed path, `FastDropout`: it changes the random numbers, not the results, and is kept
for gaining at least 3% on a workload people run: 6% of a `bench` step (dropout 0.1; docs/benchmarks.md, "Speed
paths"). The default runs train with dropout 0, where it does nothing."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


class FastDropout(nn.Dropout):
    """`nn.Dropout`, with masks that cost a quarter of the random numbers on the CPU.

    torch's CPU dropout draws a random number per element, on one core (~6 ns each on our 2-core VM): 10% of a
    `mini` training step. Here each 64-bit draw (numpy's PCG64DXSM, 2.5x faster than torch's mt19937) gives four
    16-bit numbers; an element is kept when its number is at least p x 65,536 (rounded), so the rate is quantised
    to 1/65,536 (0.1 is 0.100006), and kept elements are scaled by the inverse of the kept fraction.

    Each mask's generator is seeded by one draw from torch's global generator, where torch's own dropout draws
    too, so `torch.manual_seed` repeats the masks and a resumed Trainer draws the same ones. On a GPU, for rates
    that round to 0 or 1, and inside torch.compile, this is `nn.Dropout`.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = self.scale_mask(x)
        return super().forward(x) if mask is None else x * mask

    def scale_mask(self, x: torch.Tensor) -> torch.Tensor | None:
        """The mask this module multiplies `x` by (0 or the keep scale); None where torch's dropout runs, or none."""
        if not self.training or self.p == 0 or x.device.type != "cpu" or not 0 < self.drop_levels < 65536:
            return None
        if torch.compiler.is_compiling():
            # Inside torch.compile (training.compiled_step) torch's dropout, which the compiler fuses and draws
            # from its own generator; numpy's draws here would break the graph at every dropout.
            return None
        return dropout_keep_mask(x.shape, self.drop_levels, x.dtype).mul_(self.keep_scale)

    @property
    def drop_levels(self) -> int:   # the rate in 65,536ths
        return round(self.p * 65536)

    @property
    def keep_scale(self) -> float:
        return 65536 / (65536 - self.drop_levels)


def dropout_keep_mask(shape, drop_levels: int, dtype: torch.dtype) -> torch.Tensor:
    """A tensor of `shape` holding 1 (kept) or 0 (dropped, with probability drop_levels / 65536); see `FastDropout`."""
    numel = math.prod(shape)
    seed = int(torch.empty((), dtype=torch.int64).random_())  # one draw from torch's global generator (see above)
    words = torch.from_numpy(np.random.PCG64DXSM(seed).random_raw((numel + 3) // 4).view(np.int64))  # 64 random bits
    levels = words.view(torch.int16)[:numel].view(shape)  # uniform over -32768..32767
    return torch.ge(levels, drop_levels - 32768, out=torch.empty(shape, dtype=dtype))
