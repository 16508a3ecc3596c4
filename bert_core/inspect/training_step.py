"""One training step a student takes and sees: the batch, its masks, the loss, each layer's gradient and the
weights that moved most. `take_one_step` makes a Trainer's next update exactly as its run would (same batches,
seeds and schedule: a run continued afterwards is the run it would have been), recording the raw gradients (before
clipping, through `Optimization.on_gradients`) and the weights before and after."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.inspection import MaskingRow, masking_rows

TOP_CHANGES = 10


@dataclass(frozen=True)
class WeightChange:
    """One weight (a single number of the model) and what the update did to it."""

    name: str          # readable: "embedding of 'the' (dim 3)", "layer 1 attention.self.query.weight[4, 17]"
    parameter: str     # the state_dict key
    index: tuple[int, ...]   # its place in that tensor
    before: float
    after: float
    gradient: float    # its gradient before clipping

    @property
    def change(self) -> float:
        return self.after - self.before


@dataclass(frozen=True)
class StepRecord:
    """What one update did (see the module docstring)."""

    step: int                      # the trainer's step count after the update
    loss: float
    mlm_loss: float
    nsp_loss: float | None
    mlm_accuracy: float | None     # on this batch, before the update
    learning_rate: float
    grad_norm: float               # all gradients together, before clipping
    layer_grad_norms: list[tuple[str, float]]   # ("embeddings", ...), ("layer 1", ...), ..., heads last
    changes: list[WeightChange]    # the TOP_CHANGES weights that moved most
    changed_weights: int           # weights the update changed at all
    total_weights: int
    rows: int                      # sequences in the batch
    tokens: int                    # real (non-padding) tokens in the batch
    example: list[MaskingRow]      # the batch's first sequence, position by position, as the model saw it
    is_random_next: bool | None    # its NSP label (None for a GPT, which has none)
    causal: bool


_LAYER = re.compile(r"(?:^|\.)encoder\.layer\.(\d+)\.")


_HEADS = ("pooler", "LM head", "NSP head")   # after the layers, in this order


def layer_group(parameter: str) -> str:
    """The part of the model a state_dict key belongs to, as the gradient chart names it (layers from 1)."""
    found = _LAYER.search(parameter)
    if found:
        return f"layer {int(found.group(1)) + 1}"
    if ".embeddings." in f".{parameter}":
        return "embeddings"
    return "pooler" if "pooler" in parameter else "NSP head" if "seq_relationship" in parameter else "LM head"


def _group_order(name: str) -> tuple[int, int]:
    return (0, 0) if name == "embeddings" else (1, int(name.split()[1])) if name.startswith("layer ") \
        else (2, _HEADS.index(name))


def weight_name(parameter: str, index: tuple[int, ...], tokenizer) -> str:
    """A readable name for one number of a parameter (layers and positions from 1, the index the tensor's)."""
    where = ", ".join(str(i) for i in index)
    if parameter.endswith("word_embeddings.weight"):
        return f"embedding of '{tokenizer.id_to_token(index[0])}' (dim {index[1]})"
    if parameter.endswith("position_embeddings.weight"):
        return f"embedding of position {index[0] + 1} (dim {index[1]})"
    if parameter.endswith("token_type_embeddings.weight"):
        return f"embedding of segment {'AB'[index[0]] if index[0] < 2 else index[0]} (dim {index[1]})"
    found = _LAYER.search(parameter)
    short = parameter[found.end():] if found else parameter.removeprefix("bert.")
    prefix = f"layer {int(found.group(1)) + 1} " if found else ""
    return f"{prefix}{short}[{where}]"


def _top_changes(before: dict, after: dict, grads: dict, tokenizer, top: int) -> list[WeightChange]:
    """The `top` weights with the largest change. Adam's first update moves every weight with a gradient by about
    the learning rate, so near-equal changes (to 3 significant figures) are ordered by the size of the gradient."""
    candidates = []
    for name, old in before.items():
        delta = (after[name] - old).abs().flatten()
        k = min(top, delta.numel())
        for flat in delta.topk(k).indices.tolist():
            grad = grads.get(name)
            g = float(grad.flatten()[flat]) if grad is not None else 0.0
            candidates.append((float(delta[flat]), abs(g), name, flat, g))
    if not candidates:
        return []
    scale = max(c[0] for c in candidates) or 1.0
    candidates.sort(key=lambda c: (round(c[0] / scale, 3), c[1]), reverse=True)
    out = []
    for _, _, name, flat, g in candidates[:top]:
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), before[name].shape))
        out.append(WeightChange(name=weight_name(name, index, tokenizer), parameter=name, index=index,
                                before=float(before[name].flatten()[flat]),
                                after=float(after[name].flatten()[flat]), gradient=g))
    return out


def take_one_step(trainer, top: int = TOP_CHANGES) -> StepRecord:
    """Make `trainer`'s next update (see the module docstring) and return what it did. Raises BertCoreError when
    the trainer cannot step (it is running, finished or failed) or the update was refused (a non-finite loss)."""
    trainer.grow_if_due()   # a run that starts small grows before this update: note the grown model's weights
    model = trainer.model
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    before = {name: p.detach().float().clone() for name, p in params.items()}
    grads: dict[str, torch.Tensor] = {}

    def observe(_model) -> None:
        for name, p in params.items():
            if p.grad is not None:
                grads[name] = p.grad.detach().float().clone()

    trainer.optimization.on_gradients = observe
    try:
        event = trainer.step_once()
    finally:
        trainer.optimization.on_gradients = None
    if event is None:
        raise BertCoreError(trainer.error or "the update was refused")
    after = {name: p.detach().float() for name, p in params.items()}

    norms: dict[str, float] = {}
    for name, g in grads.items():
        norms[layer_group(name)] = norms.get(layer_group(name), 0.0) + float(g.pow(2).sum())
    layer_norms = sorted(((n, math.sqrt(v)) for n, v in norms.items()), key=lambda kv: _group_order(kv[0]))

    batches = trainer.last_batches
    first = batches[0]
    width = int(first.attention_mask[0].sum())
    example = masking_rows(trainer.tokenizer, first.original_ids[0, :width].tolist(),
                           first.token_type_ids[0, :width].tolist(), first.input_ids[0, :width].tolist(),
                           first.decisions[0, :width].tolist())
    causal = first.causal
    return StepRecord(
        step=event.step, loss=event.loss, mlm_loss=event.mlm_loss, nsp_loss=event.nsp_loss,
        mlm_accuracy=event.mlm_acc, learning_rate=event.lr, grad_norm=event.grad_norm,
        layer_grad_norms=layer_norms, changes=_top_changes(before, after, grads, trainer.tokenizer, top),
        changed_weights=sum(int((after[n] != before[n]).sum()) for n in before),
        total_weights=sum(t.numel() for t in before.values()), rows=sum(len(b) for b in batches),
        tokens=sum(b.num_tokens for b in batches), example=example,
        is_random_next=None if causal else bool(first.next_sentence_label[0]), causal=causal)
