"""How much sentence B attends to sentence A, by layer and head, over a batch of pairs: the next-sentence signal
in attention. For each head, the share of each of B's word pieces' attention on A's ([CLS] and [SEP] left out),
averaged over B's pieces and then the pairs, kept apart for pairs where B follows A and where it is random: a model
trained with next-sentence prediction has a reason to tell them apart, and the two panels show whether it does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.kit import device_of, evaluating, padded_batch


@dataclass(frozen=True)
class PairAttention:
    """Mean share of B's attention on A, [layer, head], for pairs where B follows A and where B is random."""

    follows: np.ndarray
    random: np.ndarray
    pairs_follow: int
    pairs_random: int
    uniform: float        # the share under evenly spread attention (mean |A| / sequence length over the pairs)

    @property
    def difference(self) -> np.ndarray:
        """follows - random: positive where a head looks back at A more when B belongs with it."""
        return self.follows - self.random


def _shares(attentions: Sequence[torch.Tensor], a_mask: torch.Tensor, b_mask: torch.Tensor) -> torch.Tensor:
    """[rows, layers, heads]: each row's mean over B's pieces of the attention on A's pieces."""
    per_layer = []
    for att in attentions:                           # [rows, heads, queries, keys]
        on_a = (att.float() * a_mask[:, None, None, :]).sum(-1)      # [rows, heads, queries]
        b = b_mask[:, None, :].float()
        per_layer.append((on_a * b).sum(-1) / b.sum(-1).clamp(min=1))
    return torch.stack(per_layer, dim=1)


def b_to_a_attention(model, tokenizer, instances, batch_size: int = 32) -> PairAttention:
    """Summarise `instances` (NspInstance-like: input_ids, token_type_ids, is_random_next) as above."""
    pairs = [x for x in instances if 1 in x.token_type_ids]
    if not pairs:
        raise BertCoreError("no sentence pairs to summarise: each needs a sentence A and a sentence B")
    specials = torch.tensor(sorted({tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id}), dtype=torch.long)
    device = device_of(model)
    shares, labels, uniform = [], [], []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        ids, types, attention = padded_batch(tokenizer.pad_id, [(x.input_ids, x.token_type_ids) for x in chunk])
        words = (attention == 1) & ~torch.isin(ids, specials)
        a_mask, b_mask = words & (types == 0), words & (types == 1)
        with evaluating(model):
            out = model(input_ids=ids.to(device), attention_mask=attention.to(device),
                        token_type_ids=types.to(device), output_attentions=True)
            shares.append(_shares([a.cpu() for a in out.attentions], a_mask.float(), b_mask))
        labels += [bool(x.is_random_next) for x in chunk]
        uniform += (a_mask.sum(1).float() / attention.sum(1).float()).tolist()
    table = torch.cat(shares).numpy()
    is_random = np.array(labels)
    mean = lambda rows: rows.mean(0) if len(rows) else np.full(table.shape[1:], np.nan)   # noqa: E731

    return PairAttention(follows=mean(table[~is_random]), random=mean(table[is_random]),
                         pairs_follow=int((~is_random).sum()), pairs_random=int(is_random.sum()),
                         uniform=float(np.mean(uniform)))
