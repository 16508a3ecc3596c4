"""The model's guess at every position the masking chose, [MASK] (80%), random (10%) and kept (10%) alike: side by
side they show what each decision teaches (a kept token can be copied, a random one must be distrusted, a [MASK]
read from the context). `guesses_for_instance` masks one instance as `inspection.mask_example` does;
`accuracy_by_decision` counts right guesses per decision over many, a figure a class can trust more."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from bert_core.data.objectives import MASK_RATE
from bert_core.errors import BertCoreError
from bert_core.inspect.kit import device_of, evaluating, padded_batch
from bert_core.inspect.inspection import CAUSAL_CANNOT_FILL, DECISION_NAMES, mask_padded
from bert_core.model.bert import IGNORE_INDEX, is_causal

CHOSEN = ("[MASK]", "random", "kept")   # the decisions of a chosen position, in the order the pages show them


@dataclass(frozen=True)
class ChosenGuess:
    """One chosen position: the original token, the decision and what the model saw, and its top guess."""

    position: int
    token: str                    # the original, the token to predict
    decision: str                 # "[MASK]", "random" or "kept"
    shown: str                    # what the model saw at this position
    guess: str                    # its most likely token
    guess_probability: float
    original_probability: float   # the probability it gave the original token

    @property
    def right(self) -> bool:
        return self.guess == self.token


@dataclass(frozen=True)
class DecisionAccuracy:
    """Right guesses at the positions of one decision, over a batch."""

    decision: str
    count: int
    right: int

    @property
    def accuracy(self) -> float:
        return self.right / self.count if self.count else 0.0


def _logits(model, ids, types, attention, labels: torch.Tensor | None = None) -> torch.Tensor:
    """Masked-LM logits in eval mode: [B, S, V], or with `labels` [N, V] at the labelled positions only."""
    device = device_of(model)
    with evaluating(model):
        return model(input_ids=ids.to(device), attention_mask=attention.to(device), token_type_ids=types.to(device),
                     labels=None if labels is None else labels.to(device),
                     full_mlm_logits=labels is None).mlm_logits.float().cpu()


def _check(model, instances) -> None:
    if is_causal(model):
        raise BertCoreError(CAUSAL_CANNOT_FILL)
    if not instances:
        raise BertCoreError("no instances to mask")


def guesses_for_instance(model, tokenizer, input_ids: Sequence[int], token_type_ids: Sequence[int], seed: int = 0,
                         mask_rate: float = MASK_RATE) -> list[ChosenGuess]:
    """The model's guess at each position `inspection.mask_example` chooses with `seed` and `mask_rate`."""
    _check(model, [input_ids])
    ids, types, attention = padded_batch(tokenizer.pad_id, [(input_ids, token_type_ids)])
    result, _ = mask_padded(tokenizer, ids, attention, seed, mask_rate)
    probs = torch.softmax(_logits(model, result.input_ids, types, attention)[0], dim=-1)
    out = []
    for pos, code in enumerate(result.decisions[0].tolist()):
        decision = DECISION_NAMES.get(int(code))
        if decision not in CHOSEN:
            continue
        best = int(probs[pos].argmax())
        original = int(input_ids[pos])
        out.append(ChosenGuess(
            position=pos, token=tokenizer.id_to_token(original), decision=decision,
            shown=tokenizer.id_to_token(int(result.input_ids[0, pos])), guess=tokenizer.id_to_token(best),
            guess_probability=float(probs[pos, best]), original_probability=float(probs[pos, original])))
    return out


def accuracy_by_decision(model, tokenizer, instances: Sequence[tuple[Sequence[int], Sequence[int]]], seed: int = 0,
                         mask_rate: float = MASK_RATE, batch_size: int = 64) -> dict[str, DecisionAccuracy]:
    """The model's right top guesses per decision over `instances`, masked by one seeded draw as pretraining."""
    _check(model, instances)
    ids, types, attention = padded_batch(tokenizer.pad_id, instances)
    result, _ = mask_padded(tokenizer, ids, attention, seed, mask_rate)
    counts = {d: [0, 0] for d in CHOSEN}
    codes = torch.tensor([code for code, name in DECISION_NAMES.items() if name in counts], dtype=torch.long)
    for start in range(0, len(instances), batch_size):
        rows = slice(start, start + batch_size)
        width = int(attention[rows].sum(1).max())
        decisions = result.decisions[rows, :width]
        originals = ids[rows, :width]
        # The LM head on the chosen positions only (about 15% of the tokens): its vocabulary-wide matmul is most of
        # the forward pass, and the other positions' guesses are never counted.
        chosen = torch.isin(decisions, codes)
        guesses = _logits(model, result.input_ids[rows, :width], types[rows, :width], attention[rows, :width],
                          originals.masked_fill(~chosen, IGNORE_INDEX)).argmax(-1)
        right = guesses == originals[chosen]
        decided = decisions[chosen]
        for code, name in DECISION_NAMES.items():
            if name in counts:
                this = decided == code
                counts[name][0] += int(this.sum())
                counts[name][1] += int((right & this).sum())
    return {d: DecisionAccuracy(d, n, r) for d, (n, r) in counts.items()}
