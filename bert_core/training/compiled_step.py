"""A compiled training step (TrainConfig.compile): the encoder's forward and backward passes through torch.compile
during training steps only, on micro-batches padded to fixed shapes.

Why the encoder alone (the MLM head's row count changes every batch), why only the training step (evaluations keep
their own shapes eager; the model is not wrapped, so checkpoints, growth and resume are an eager run's), why fixed
shapes (one static graph per phase length, as CUDA graphs need, under dynamo's recompilation limit) and why it is
off by default: docs/benchmarks.md, "The GPU at its limit". Padding changes no result: padded positions are masked
from attention and carry no label (tests/test_compile.py). Dropout inside the compiled encoder is torch's own, which
the compiler fuses: a seed repeats a compiled run, but its masks are not an eager run's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types

import torch

from bert_core.errors import BertCoreError
from bert_core.model.bert import IGNORE_INDEX
from bert_core.training.train_config import COMPILE_MODES


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
