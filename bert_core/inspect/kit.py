"""The inspection kit: what every look inside a model shares. One eval-mode context (no dropout, the model's mode
restored after), one head switch, the model's device, its inputs as tensors, and its language-model head, reached
through the model (`model.lm_head`, declared by every model class in bert_core.model.bert)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import torch

from bert_core.errors import BertCoreError

NO_LM_HEAD = ("this model has no language-model head (a fine-tuned classifier, tagger or answer finder), so it "
              "cannot score sentences; pick a pretrained BERT or GPT model")


@contextlib.contextmanager
def evaluating(model, grad: bool = False):
    """Eval mode (no dropout) inside the block, under torch.inference_mode unless `grad` (integrated gradients
    differentiate through the model); the model's train/eval mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with contextlib.nullcontext() if grad else torch.inference_mode():
            yield model
    finally:
        model.train(was_training)


def device_of(model) -> torch.device:
    return next(model.parameters()).device


def numpy32(t: torch.Tensor) -> np.ndarray:
    """A tensor as a float32 numpy array on the CPU: what a look's results hold."""
    return t.detach().float().cpu().numpy()


def as_batch(model, *rows: Sequence[int]) -> list[torch.Tensor]:
    """Each row of ids (or segments) as a [1, S] long tensor on the model's device."""
    device = device_of(model)
    return [torch.tensor([list(r)], dtype=torch.long, device=device) for r in rows]


def lm_head(model):
    """The model's language-model head (`cls.predictions`), or a message saying this model has none."""
    if model.lm_head is None:
        raise BertCoreError(NO_LM_HEAD)
    return model.lm_head


def check_head(model, layer: int, head: int) -> None:
    """A clear message for a layer or head (counted from 0) the model does not have."""
    cfg = model.config
    if not 0 <= layer < cfg.num_hidden_layers:
        raise BertCoreError(f"layer {layer + 1} does not exist: the model has {cfg.num_hidden_layers} layers")
    if not 0 <= head < cfg.num_attention_heads:
        raise BertCoreError(f"head {head + 1} does not exist: each layer has {cfg.num_attention_heads} heads")


@contextlib.contextmanager
def heads_masked(model, off: torch.Tensor):
    """Within the block, head h of layer l contributes nothing to batch row r where `off[r, l, h]` (bool [R, L, H];
    R = 1: every row alike): its slice of the joined contexts is zeroed before the output projection, as
    transformers' old head_mask of 0 did; by hooks, removed on exit."""
    d = model.config.head_dim

    def zero(layer: int):
        keep = ~off[:, layer].repeat_interleave(d, -1)[:, None, :]    # [R, 1, H * d]

        def hook(module, args):
            return (torch.where(keep.to(args[0].device), args[0], 0), *args[1:])
        return hook

    with hooked(*(model.bert.encoder.layer[layer].attention.output.dense.register_forward_pre_hook(own(zero(layer)))
                  for layer in range(off.shape[1]) if bool(off[:, layer].any()))):
        yield model


def own(hook: Callable) -> Callable:
    """`hook` acting on the passes of the thread that made it only: a class's sessions share one model, and a
    hook another page's view put on it for its own pass would read (or change: heads switched off) a stranger's pass
    run at the same time. A hook that returns None leaves a pass as it is."""
    owner = threading.get_ident()
    return lambda *args: hook(*args) if threading.get_ident() == owner else None


@contextlib.contextmanager
def hooked(*handles):
    """Within the block, the hooks whose `handles` are given; each removed on exit, however the block ends."""
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def heads_off(model, heads):
    """heads_masked for the given (layer, head) pairs (from 0), in every row of a batch."""
    off = torch.zeros(1, model.config.num_hidden_layers, model.config.num_attention_heads, dtype=torch.bool)
    for layer, head in heads:
        check_head(model, layer, head)
        off[0, layer, head] = True
    return heads_masked(model, off)


_KEPT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def kept(model, what: str, key: Any, build: Callable[[], Any]) -> Any:
    """`build()`, kept with `model` (and gone with it) under `what` until asked for with another `key`: a page's
    redraw is free, and a model holds one of each (a new pool or layer replaces the old)."""
    found = _KEPT.setdefault(model, {}).get(what)
    if found is None or found[0] != key:
        _KEPT[model][what] = found = (key, build())
    return found[1]


def padded_batch(pad_id: int, rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, segments, attention mask), [B, S] long on the CPU, from (ids, segments) pairs padded with `pad_id`."""
    ids = torch.full((len(rows), max(len(x) for x, _ in rows)), pad_id, dtype=torch.long)
    types, attention = torch.zeros_like(ids), torch.zeros_like(ids)
    for r, (x, t) in enumerate(rows):
        ids[r, :len(x)], types[r, :len(t)], attention[r, :len(x)] = torch.tensor(list(x)), torch.tensor(list(t)), 1
    return ids, types, attention


def hidden_states(model, tokenizer, rows) -> tuple[torch.Tensor, ...]:
    """The hidden states after the embeddings and each layer, [B, S, H] each, for rows of ids, in eval mode."""
    ids, _, mask = padded_batch(tokenizer.pad_id, [(r, ()) for r in rows])
    device = device_of(model)
    with evaluating(model):
        return model.bert(ids.to(device), mask.to(device), torch.zeros_like(ids, device=device),
                          output_hidden_states=True)[2]
