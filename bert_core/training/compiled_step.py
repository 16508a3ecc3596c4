"""A compiled training step (TrainConfig.compile): the encoder's forward and backward passes through torch.compile
during training steps only, on micro-batches padded to fixed shapes.

- **What is compiled: the encoder** (BertEncoder, the stack of layers), where a step's many small kernels are: the
  elementwise work around its matmuls (bias, GELU, dropout, residual adds, LayerNorm) fused into few kernels, and
  with "reduce-overhead" the whole stack forward and backward replayed as CUDA graphs, which removes the launch cost
  that bounds the small sizes on a GPU (docs/benchmarks.md, "On a CUDA GPU"). The embeddings and the heads stay
  eager: the MLM head runs on the masked rows only (`bert._lm_head`), whose count changes with every batch, a
  data-dependent shape that would otherwise compile a graph per count or fall back to dynamic shapes; and
  BertModel.forward asks whether any position is padded, a read from the device that would break a graph there.
- **Only the training step**: the compiled forward is put in place for the step's forward pass and taken away after
  it (`CompiledTraining.forward`), so evaluations, probes and inspections run the same module eagerly and their
  other shapes never compile. The model itself is not wrapped: its state_dict, checkpoints, growth and resume are
  the same as an eager run's. The backward pass is compiled with the forward (AOTAutograd).
- **Fixed shapes, one graph per shape** (`dynamic=False`), because batches pad to their longest sequence, so their
  width changes from batch to batch: every micro-batch is padded to the length of its phase (the short phase's
  `short_seq_length` or `max_seq_length`; `fixed_width`). A graph per shape keeps every graph static, which CUDA
  graphs need and which gives the best kernels; the shapes are few (two lengths, with or without an attention mask,
  and a smaller row count where grad_accum or the last batch splits rows unevenly), well under dynamo's limit of
  recompilations (8), past which a new shape runs eagerly, correct but slower. Padding adds no work to packed
  pretraining batches, which already fill their length almost always, and changes no result: padded positions are
  masked from attention and carry no label (tests/test_compile.py checks the loss against the eager step).
- The optimizer step is not compiled: it is torch's fused AdamW already (`bert.adamw`), one kernel over all the
  parameters.

Compiling costs time at the first steps (seconds for a small model on a CPU, up to a minute for base on a GPU:
`bench --compile` states it apart from the step time) and needs a C compiler on a CPU (Triton on a GPU), which a
student's machine may not have; so it is off by default. Dropout inside the compiled encoder is torch's own, which
the compiler fuses (`FastDropout` steps aside there): its masks come from torch's generator, so a seed repeats a
compiled run, but they are not an eager run's masks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types

import torch

from bert_core.errors import BertCoreError
from bert_core.model.bert import IGNORE_INDEX
from bert_core.training.train_config import COMPILE_MODES

__all__ = ["COMPILE_MODES", "CompiledTraining", "fixed_width", "pad_columns", "phase_lengths"]


def fixed_width(width: int, lengths: tuple[int, ...]) -> int:
    """The padded width of a micro-batch `width` wide: the smallest of a run's phase lengths that holds it (the
    width itself when none does)."""
    fitting = [n for n in lengths if n >= width]
    return min(fitting) if fitting else width


def pad_columns(batch, width: int):
    """A pretraining Batch padded on the right to `width` positions: attention mask 0, no label, id 0 (any id would
    do: a masked position is never attended to and never scored)."""
    have = batch.input_ids.shape[1]
    if have >= width:
        return batch
    changes = {}
    for f in dataclasses.fields(batch):
        value = getattr(batch, f.name)
        if isinstance(value, torch.Tensor) and value.dim() == 2:
            fill = IGNORE_INDEX if f.name == "mlm_labels" else 0
            changes[f.name] = torch.nn.functional.pad(value, (0, width - have), value=fill)
    return dataclasses.replace(batch, **changes)


def phase_lengths(config) -> tuple[int, ...]:
    """The sequence lengths a run's micro-batches are padded to: the short phase's (when on) and the full one."""
    short = config.short_seq_length
    return (short, config.max_seq_length) if 0 < short < config.max_seq_length else (config.max_seq_length,)


class CompiledTraining:
    """The compiled encoder of one model, made on first use for each mode, and put in place around a training
    step's forward pass. With mode "off" it does nothing."""

    def __init__(self, model: torch.nn.Module):
        self.encoder = model.bert.encoder   # the model itself: a DistributedDataParallel wrapper is held beside it
        self._compiled: dict[str, object] = {}

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes this encoder has been compiled in so far."""
        return tuple(self._compiled)

    def compiled(self, mode: str):
        """The encoder's forward, compiled in `mode` (made once per mode)."""
        if mode not in COMPILE_MODES or mode == "off":
            raise BertCoreError(f"compile must be one of {', '.join(COMPILE_MODES)}, got {mode!r}")
        if mode not in self._compiled:
            # The class's forward bound to this encoder, so the compiled function never calls back into itself
            # while it stands in for `encoder.forward`.
            forward = types.MethodType(type(self.encoder).forward, self.encoder)
            self._compiled[mode] = torch.compile(forward, mode=None if mode == "default" else mode, dynamic=False)
        return self._compiled[mode]

    def shaped(self, batch, config, mode: str):
        """`batch` padded to its phase's length when compiling (see the module's docstring), else as it is."""
        if mode == "off":
            return batch
        return pad_columns(batch, fixed_width(batch.input_ids.shape[1], phase_lengths(config)))

    @contextlib.contextmanager
    def forward(self, mode: str, device: torch.device | None = None):
        """Within this block the model's encoder runs compiled in `mode` ("off": eagerly, as always)."""
        if mode == "off":
            yield
            return
        compiled = self.compiled(mode)
        if mode == "reduce-overhead" and device is not None and device.type == "cuda":
            # Each forward starts a new step for the CUDA graphs: the previous step's outputs (read before this
            # one, by the loss and the step's figures) may then be overwritten by the replay.
            torch.compiler.cudagraph_mark_step_begin()
        self.encoder.forward = compiled   # an instance attribute shadows the class's forward...
        try:
            yield
        finally:
            del self.encoder.forward      # ...and the eager forward is back for everything else
