"""CPU training speed paths of the model: the same numbers as the plain PyTorch they replace, in fewer passes.

`model.py` reads as the architecture; what is here only makes a CPU training step faster, and each piece is tested
against the plain computation in tests/test_fast_paths.py:

- `Dropout`: masks from 16-bit slices of 64-bit random draws (changes the random numbers, not the results);
- `LinearCrossEntropy`: the MLM decoder and its cross-entropy, keeping the softmax as the gradient;
- `DecoderGradSlot` + `embedding_lookup`: the tied word-embedding matrix's two gradients (decoder and lookup)
  summed in place;
- `self_attention_with_dropout`: the self-attention sub-layer (query/key/value projections to context) with
  its backward written by hand.

On a GPU, under autocast, or when attention probabilities are requested, the model takes the plain path.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bert_core.errors import BertCoreError


class Dropout(nn.Dropout):
    """`nn.Dropout`, with masks that cost a quarter of the random numbers on the CPU.

    torch's CPU dropout draws a random number per element, on one core (~6 ns each on our 2-core VM), and that was
    10% of a `mini` training step (13 dropouts, 18 M elements). Here each 64-bit draw gives four 16-bit numbers, an
    element is kept when its number is at least p x 65,536 (rounded), and kept elements are scaled by the inverse
    of the kept fraction so that the expected output equals the input, as in the paper. The rate is thus
    quantised to 1/65,536 (0.1 is 0.100006). The 64-bit draws come from numpy's PCG64DXSM, 2.5x faster than torch's
    CPU generator (mt19937, ~4 ns per 64 bits) and still on one core, seeded by one draw from torch's default
    generator, so `torch.manual_seed` makes the masks repeat. On a GPU, and for rates that round to 0 or 1, this is
    `nn.Dropout`.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = self.scale_mask(x)
        return super().forward(x) if mask is None else x * mask

    def scale_mask(self, x: torch.Tensor, shape=None, scaled: bool = True) -> torch.Tensor | None:
        """The mask this module would multiply `x` (or a tensor of `shape` like it) by: 0 or the keep scale, or,
        with scaled=False, 0 or 1 (the caller applies `keep_scale`). None where it applies torch's dropout
        instead, or none at all."""
        if not self.training or self.p == 0 or x.device.type != "cpu" or not 0 < self.drop_levels < 65536:
            return None
        mask = dropout_keep_mask(x.shape if shape is None else shape, self.drop_levels, x.dtype)
        return mask.mul_(self.keep_scale) if scaled else mask

    @property
    def drop_levels(self) -> int:
        """The rate in 65,536ths: an element is dropped when its 16-bit number falls below this many levels."""
        return round(self.p * 65536)

    @property
    def keep_scale(self) -> float:
        """What kept elements are multiplied by: the inverse of the (quantised) kept fraction."""
        return 65536 / (65536 - self.drop_levels)


def dropout_keep_mask(shape, drop_levels: int, dtype: torch.dtype) -> torch.Tensor:
    """A tensor of `shape` holding 1 (kept) or 0 (dropped, with probability drop_levels / 65536); see `Dropout`."""
    numel = math.prod(shape)
    seed = int(torch.empty((), dtype=torch.int64).random_())  # torch's generator decides, so its seed repeats masks
    words = torch.from_numpy(np.random.PCG64DXSM(seed).random_raw((numel + 3) // 4).view(np.int64))  # 64 random bits
    levels = words.view(torch.int16)[:numel].view(shape)  # uniform over -32768..32767
    return torch.ge(levels, drop_levels - 32768, out=torch.empty(shape, dtype=dtype))


def applies(x: torch.Tensor) -> bool:
    """Whether the hand-written CPU paths may run on `x`: full-precision CPU math, no autocast."""
    return (x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
            and not torch.is_autocast_enabled("cpu"))


class DecoderGradSlot:
    """Where the fused MLM loss leaves the decoder's weight gradient for the word-embedding lookup to finish.

    The decoder's weight is the word-embedding matrix, so its gradient is the sum of a dense [vocab x hidden]
    part from the decoder and a part from the lookup that touches only the rows of the batch's tokens. Autograd
    would have the lookup build a zero-filled [vocab x hidden] matrix for those rows and then add the two matrices;
    instead the loss hands its part over here and the lookup adds its rows into it in place (~4 ms of a `mini`
    step with a 30k vocabulary). The order is safe: the lookup's gradient depends on everything after it, the MLM
    loss included, so the loss's backward has always run first; when it did not run (say, only the NSP loss was
    back-propagated), the lookup starts from zeros, as autograd would have."""

    __slots__ = ("grad",)

    def __init__(self):
        self.grad = None


def embedding_lookup(input_ids, embedding: nn.Embedding, slot: DecoderGradSlot) -> torch.Tensor:
    """`embedding(input_ids)`, whose weight gradient is finished in the gradient the slot holds (see there)."""
    return _EmbeddingLookup.apply(input_ids, embedding.weight, embedding.padding_idx, slot)


class _EmbeddingLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_ids, weight, padding_idx, slot):
        ctx.save_for_backward(input_ids)
        ctx.weight_meta = weight.shape, weight.dtype, weight.device
        ctx.padding_idx, ctx.slot = padding_idx, slot
        return F.embedding(input_ids, weight, padding_idx)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        if not ctx.needs_input_grad[1]:
            return None, None, None, None
        (input_ids,) = ctx.saved_tensors
        grad, ctx.slot.grad = ctx.slot.grad, None
        if grad is None:
            shape, dtype, device = ctx.weight_meta
            grad = torch.zeros(shape, dtype=dtype, device=device)
        ids, rows = input_ids.reshape(-1), grad_output.reshape(-1, grad_output.shape[-1])
        if ctx.padding_idx is not None:  # as nn.Embedding: the padding row gets no gradient from the lookup
            real = ids != ctx.padding_idx
            if not bool(real.all()):
                ids, rows = ids[real], rows[real]
        return None, grad.index_add_(0, ids, rows), None, None


class LinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of `hidden @ weight.T + bias` against `targets`, returning the logits too.

    The same loss and gradients as `F.cross_entropy(F.linear(hidden, weight, bias), targets)`, in fewer passes over
    the [rows x vocab] logits, which for a real vocabulary are the largest tensors of a training step: the forward
    keeps the softmax (not the log-softmax), and the backward turns it into the gradient in place,
    softmax - one_hot, instead of zero-filling a gradient buffer and running log-softmax's backward over it.
    The logits are returned for reading (accuracy, predictions) and carry no gradient. With a `DecoderGradSlot`
    (the weight is also looked up by `embedding_lookup`), the weight's gradient is left there instead of returned.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, slot=None):
        logits = torch.addmm(bias, hidden, weight.t())
        probs = torch.softmax(logits, dim=-1)
        rows = torch.arange(targets.shape[0], device=targets.device)
        p_target = probs[rows, targets]
        log_p = p_target.log()
        underflow = p_target < 1e-30  # a probability this small has lost digits: take those rows' log-softmax
        if bool(underflow.any()):
            log_p[underflow] = torch.log_softmax(logits[underflow], dim=-1)[
                torch.arange(int(underflow.sum()), device=targets.device), targets[underflow]]
        ctx.save_for_backward(hidden, weight, probs, targets)
        ctx.slot = slot
        ctx.mark_non_differentiable(logits)
        ctx.set_materialize_grads(False)  # else autograd passes a zero-filled [rows x vocab] "gradient" of the logits
        ctx.spent = False
        return -log_p.mean(), logits

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss, _grad_logits):
        if ctx.spent:
            raise BertCoreError("the fused MLM loss cannot be back-propagated twice (its softmax became the gradient)")
        ctx.spent = True
        hidden, weight, probs, targets = ctx.saved_tensors
        if grad_loss is None:
            return None, None, None, None, None
        # d(mean CE)/d logits = (softmax - one_hot) * scale. The scale is applied by the matmuls (their alpha, free)
        # and to the bias gradient, not to the [rows x vocab] tensor: one pass less over the largest tensor.
        scale = float(grad_loss) / targets.shape[0]
        grad_logits = probs
        grad_logits[torch.arange(targets.shape[0], device=targets.device), targets] -= 1.0
        unused = grad_logits.new_zeros(())  # beta=0: addmm only scales the product
        grad_hidden = torch.addmm(unused, grad_logits, weight, beta=0, alpha=scale) if ctx.needs_input_grad[0] else None
        grad_weight = (torch.addmm(unused, grad_logits.t(), hidden, beta=0, alpha=scale)
                       if ctx.needs_input_grad[1] else None)
        grad_bias = grad_logits.sum(0).mul_(scale) if ctx.needs_input_grad[2] else None
        if ctx.slot is not None and grad_weight is not None:
            ctx.slot.grad, grad_weight = grad_weight, None
        return grad_hidden, grad_weight, grad_bias, None, None


def self_attention_with_dropout(hidden_states, query: nn.Linear, key: nn.Linear, value: nn.Linear,
                                additive_mask, keep_mask, keep_scale: float, num_heads: int) -> torch.Tensor:
    """`BertSelfAttention`'s written-out path, context only: (softmax(q k^T / sqrt(d) + mask) * keep_mask) @ v
    * keep_scale, heads merged back to [batch, seq, hidden]. `keep_mask` is [batch, heads, seq, seq] of 0 or 1
    (`Dropout.scale_mask(..., scaled=False)`)."""
    return _SelfAttention.apply(hidden_states, query.weight, query.bias, key.weight, key.bias, value.weight,
                                value.bias, additive_mask, keep_mask, keep_scale, num_heads)


class _SelfAttention(torch.autograd.Function):
    """The self-attention sub-layer with a hand-written backward. Same math as autograd through the plain ops;
    what it saves on a CPU (about 2% of a `mini` step): query, key and value come from one matmul with the three
    weights stacked, so the backward makes one input-gradient matmul instead of three plus two additions of their
    results; the 1/sqrt(d) scale and dropout's keep scale ride in the matmuls' alpha instead of passes over q, the
    mask and their gradients; and the gradients of q, k and v are written into one buffer instead of being
    stacked."""

    @staticmethod
    def forward(ctx, x, wq, bq, wk, bk, wv, bv, additive_mask, keep_mask, keep_scale, num_heads):
        batch, seq, hidden = x.shape
        head_dim = hidden // num_heads
        x2 = x.reshape(batch * seq, hidden)
        weight, bias = torch.cat([wq, wk, wv]), torch.cat([bq, bk, bv])
        # [3, batch * heads, seq, head_dim]: one copy into the head-major layout the batched matmuls need
        qkv = (torch.addmm(bias, x2, weight.t()).view(batch, seq, 3, num_heads, head_dim)
               .permute(2, 0, 3, 1, 4).contiguous().view(3, batch * num_heads, seq, head_dim))
        q, k, v = qkv.unbind(0)
        alpha = 1.0 / math.sqrt(head_dim)
        unused = x.new_zeros(())  # beta=0: baddbmm only scales the product
        scores = torch.baddbmm(unused, q, k.transpose(1, 2), beta=0, alpha=alpha)
        if additive_mask is not None:
            scores.view(batch, num_heads, seq, seq).add_(additive_mask)
        probs = torch.softmax(scores, dim=-1)
        kept = probs * keep_mask.view_as(probs)  # dropout without its scale: that goes in the next matmul's alpha
        context = torch.baddbmm(unused, kept, v, beta=0, alpha=keep_scale)
        ctx.save_for_backward(x2, weight, qkv, probs, kept, keep_mask)
        ctx.sizes = batch, seq, hidden, num_heads, head_dim, alpha, keep_scale
        return context.view(batch, num_heads, seq, head_dim).transpose(1, 2).reshape(batch, seq, hidden)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_context):
        x2, weight, qkv, probs, kept, keep_mask = ctx.saved_tensors
        batch, seq, hidden, num_heads, head_dim, alpha, keep_scale = ctx.sizes
        q, k, v = qkv.unbind(0)
        g_context = grad_context.reshape(batch, seq, num_heads, head_dim).transpose(1, 2).reshape_as(q)
        g_qkv = torch.empty_like(qkv)
        unused = g_context.new_zeros(())
        torch.baddbmm(unused, kept.transpose(1, 2), g_context, beta=0, alpha=keep_scale, out=g_qkv[2])
        g_probs = torch.baddbmm(unused, g_context, v.transpose(1, 2), beta=0, alpha=keep_scale)
        g_probs.mul_(keep_mask.view_as(probs))
        g_scores = torch._softmax_backward_data(g_probs, probs, -1, probs.dtype)
        torch.baddbmm(unused, g_scores, k, beta=0, alpha=alpha, out=g_qkv[0])
        torch.baddbmm(unused, g_scores.transpose(1, 2), q, beta=0, alpha=alpha, out=g_qkv[1])
        g_rows = g_qkv.view(3, batch, num_heads, seq, head_dim).permute(1, 3, 0, 2, 4).reshape(batch * seq, 3 * hidden)
        g_x = (g_rows @ weight).view(batch, seq, hidden) if ctx.needs_input_grad[0] else None
        needs = ctx.needs_input_grad  # weights at 1, 3, 5 and biases at 2, 4, 6; autograd drops what is not needed
        g_w = (g_rows.t() @ x2).split(hidden) if any(needs[1:7:2]) else (None,) * 3
        g_b = g_rows.sum(0).split(hidden) if any(needs[2:7:2]) else (None,) * 3
        return g_x, g_w[0], g_b[0], g_w[1], g_b[1], g_w[2], g_b[2], None, None, None, None
