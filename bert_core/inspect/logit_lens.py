"""Each layer's guess (the "logit lens", nostalgebraist 2020): the model's own MLM head applied to every layer's
hidden state at one position, a BERT's [MASK] or a GPT's last token. At the last layer it is the model's answer;
the head was trained there only, so an early layer's guess says what the head reads there, not what the layer
"thinks"."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.kit import as_batch, evaluating, lm_head
from bert_core.inspect.inspection import encode_input
from bert_core.model.bert import is_causal


@dataclass
class LogitLens:
    """Top guesses at one position after the embeddings (layer 0) and after each layer (1..L)."""

    tokens: list[str]
    position: int
    causal: bool
    top: list[list[tuple[str, float]]]   # per layer 0..L: (token, probability), likeliest first
    tracked: list[str]                   # the last layer's top tokens, followed through every layer
    tracked_probs: np.ndarray            # [L + 1, len(tracked)]: their probability after each layer
    logits: np.ndarray                   # [L + 1, V] float32: the head's raw output after each layer

    @property
    def num_layers(self) -> int:
        return len(self.top) - 1


def lens_input(model, tokenizer, text: str) -> tuple[list[int], list[int], list[str], int]:
    """(ids, types, tokens, position): a BERT's first [MASK]; a GPT's last token of `[CLS] text`."""
    positions = int(model.config.max_position_embeddings)
    if is_causal(model):
        if not isinstance(text, str) or not text.strip():
            raise BertCoreError("the text is empty: type the start of a sentence")
        if "[mask]" in text.lower():
            raise BertCoreError("a GPT-style model guesses the next token, not a [MASK]: type the start of a "
                                "sentence without [MASK]")
        ids = [tokenizer.cls_id, *tokenizer.encode(text)]
        if len(ids) > positions:
            raise BertCoreError(f"the text is longer than the model's {positions} positions; type a shorter one")
        return ids, [0] * len(ids), tokenizer.convert_ids_to_tokens(ids), len(ids) - 1
    encoded = encode_input(tokenizer, text, max_length=positions)
    masks = [i for i, t in enumerate(encoded.input_ids) if t == tokenizer.mask_id]
    if not masks:
        raise BertCoreError("the text has no [MASK]: write [MASK] where the model should guess a word")
    return encoded.input_ids, encoded.token_type_ids, encoded.tokens, masks[0]


def logit_lens(model, tokenizer, text: str, top_k: int = 5) -> LogitLens:
    """Apply the model's MLM head to every layer's hidden state at the [MASK] (BERT) or the last token (GPT)."""
    head = lm_head(model)
    ids, types, tokens, position = lens_input(model, tokenizer, text)
    x, t = as_batch(model, ids, types)
    with evaluating(model):
        hidden = model.bert(x, torch.ones_like(x), t, output_hidden_states=True)[2]
        logits = head(torch.stack([h[0, position] for h in hidden])).float()  # [L + 1, V]
    probs = logits.softmax(-1)
    values, indices = probs.topk(max(1, min(int(top_k), probs.shape[-1])), dim=-1)
    top = [list(zip(tokenizer.convert_ids_to_tokens(idx), vals)) for idx, vals in
           zip(indices.tolist(), values.tolist())]
    final = indices[-1]
    return LogitLens(tokens=list(tokens), position=position, causal=is_causal(model), top=top,
                     tracked=tokenizer.convert_ids_to_tokens(final.tolist()),
                     tracked_probs=probs[:, final].cpu().numpy(), logits=logits.cpu().numpy())
