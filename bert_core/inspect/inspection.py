"""Looking inside a trained BERT: fill-mask, next-sentence prediction, attention maps and simple head measures (and
how much sentence B attends to A by head, the next-sentence signal in attention), masking as pretraining does and the
model's guess at every masked position, as plain data (lists, dataclasses, numpy arrays) the app, the CLI and the
tests share; `figures` and `lesson_figures` draw them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np
import torch

from bert_core.data.objectives import MASK_RATE
from bert_core.data.pretraining_data import KEPT, MASKED, NOT_CHOSEN, RANDOM, mask_tokens
from bert_core.errors import BertCoreError
from bert_core.inspect.kit import as_batch, device_of, evaluating, padded_batch
from bert_core.model.bert import IGNORE_INDEX, is_causal
from bert_core.model.tokenization import special_tokens_count, truncate_pair

MASK_MARKER = re.compile(r"\[mask\]", re.IGNORECASE)
# The masking page shows "random" (short) where pretraining_data.DECISION_NAMES says "random token".
DECISION_NAMES = {NOT_CHOSEN: "not chosen", MASKED: "[MASK]", RANDOM: "random", KEPT: "kept"}
# What each kind of model cannot do, and why, in one line each (the Predictions page and the errors say them).
CAUSAL_CANNOT_FILL = ("A GPT-style (causal) model cannot fill a [MASK]: each token sees only the tokens before it, "
                      "so the words after the blank never reach it. It continues text instead.")
BIDIRECTIONAL_CANNOT_CONTINUE = ("A BERT cannot continue text: it learned to fill blanks from the words on both "
                                 "sides, and after the end of a text there is no right side to read. It fills "
                                 "[MASK]s instead.")


@dataclass
class EncodedInput:
    """One model input built from user text: ids, segments, readable tokens, and whether it was cut to fit."""

    input_ids: list[int]
    token_type_ids: list[int]
    tokens: list[str]
    truncated: bool = False
    dropped_tokens: int = 0   # how many word pieces were cut to fit the model's positions
    max_length: int = 512


@dataclass
class MaskPrediction:
    """Top-k candidates for one [MASK]: its position in the token sequence and (token, probability) pairs."""

    position: int
    candidates: list[tuple[str, float]]


@dataclass
class AttentionResult:
    """Attention probabilities of every layer and head for one input: `attentions[layer, head, query, key]`."""

    tokens: list[str]
    attentions: np.ndarray            # float32 [L, H, S, S], rows sum to 1
    token_type_ids: list[int]
    special_mask: list[bool]          # True for [CLS], [SEP], [PAD], [MASK]...
    truncated: bool = False
    specials_hidden: bool = False
    causal: bool = False              # a GPT-style model: no token attends to a later one (zeros above the diagonal)

    @property
    def num_layers(self) -> int:
        return int(self.attentions.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.attentions.shape[1])


LEANS_SHARE = 0.3   # a head's largest share this high (and under half) is named: "leans [SEP] 44%"


@dataclass
class HeadSummary:
    """What one head mostly does, as shares of its attention averaged over query tokens, plus its entropy."""

    layer: int
    head: int
    to_cls: float
    to_sep: float
    to_previous: float
    to_next: float
    to_self: float
    entropy: float             # mean over queries, in bits
    normalized_entropy: float  # entropy / log2(number of keys): 1 = uniform

    @property
    def measures(self) -> dict[str, float]:
        return {"[CLS]": self.to_cls, "[SEP]": self.to_sep, "previous": self.to_previous, "next": self.to_next,
                "self": self.to_self, "entropy": self.normalized_entropy}

    @property
    def label(self) -> str:
        """What the head mostly does, in a few words: "[SEP] 62%", "broad", "leans [SEP] 44%" or "mixed"."""
        name, value = max(((k, v) for k, v in self.measures.items() if k != "entropy"), key=lambda kv: kv[1])
        if value >= 0.5:
            return f"{name} {value:.0%}"
        if self.normalized_entropy >= 0.85:
            return "broad"
        if value >= LEANS_SHARE:   # a head giving 44% to [SEP] is not "mixed": say where most of it goes
            return f"leans {name} {value:.0%}"
        return "mixed"


def _encode_with_masks(tokenizer, text: str) -> list[int]:
    """Encode text where the literal `[MASK]` (any case) becomes the tokenizer's mask id."""
    pieces = MASK_MARKER.split(text)
    ids: list[int] = []
    for i, piece in enumerate(pieces):
        if i > 0:
            ids.append(tokenizer.mask_id)
        if piece.strip():
            ids.extend(tokenizer.encode(piece))
    return ids


def encode_input(tokenizer, a: str, b: str | None = None, max_length: int = 512) -> EncodedInput:
    """Build `[CLS] a [SEP] (b [SEP])` from user text, keeping `[MASK]` markers and truncating to `max_length`."""
    if not isinstance(a, str) or not a.strip():
        raise BertCoreError("the text is empty: type a sentence first")
    if b is not None and not b.strip():
        b = None
    ids_a, ids_b = _encode_with_masks(tokenizer, a), _encode_with_masks(tokenizer, b) if b is not None else None
    if not ids_a:
        raise BertCoreError("the text produced no tokens: type some words")
    specials = special_tokens_count(pair=ids_b is not None)
    if max_length <= specials:
        raise BertCoreError(f"max_length {max_length} leaves no room for text")
    ids_a, ids_b, dropped = truncate_pair(ids_a, ids_b, max_length - specials)
    input_ids = [tokenizer.cls_id, *ids_a, tokenizer.sep_id]
    token_type_ids = [0] * len(input_ids)
    if ids_b is not None:
        input_ids += [*ids_b, tokenizer.sep_id]
        token_type_ids += [1] * (len(ids_b) + 1)
    return EncodedInput(input_ids, token_type_ids, list(tokenizer.convert_ids_to_tokens(input_ids)), dropped > 0,
                        dropped, max_length)


def _forward(model, encoded: EncodedInput, output_attentions: bool = False):
    ids, types = as_batch(model, encoded.input_ids, encoded.token_type_ids)
    with evaluating(model):
        return model(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=types,
                     output_attentions=output_attentions)


def predict_masks(model, tokenizer, encoded: EncodedInput, top_k: int = 5) -> list[MaskPrediction]:
    """Return the model's top-k candidates for every [MASK] in an already encoded input."""
    if is_causal(model):
        raise BertCoreError(CAUSAL_CANNOT_FILL)
    positions = [i for i, t in enumerate(encoded.input_ids) if t == tokenizer.mask_id]
    if not positions:
        if encoded.truncated:
            raise BertCoreError("every [MASK] was cut off: the text is longer than the model's positions; "
                                "put a [MASK] nearer the start")
        raise BertCoreError("the text has no [MASK]: write [MASK] where a word should be predicted")
    probs = torch.softmax(_forward(model, encoded).mlm_logits[0][positions].float(), dim=-1)   # [masks, V]
    values, indices = probs.topk(min(max(1, int(top_k)), probs.shape[-1]), dim=-1)
    return [MaskPrediction(pos, list(zip(tokenizer.convert_ids_to_tokens(idx), vals)))
            for pos, vals, idx in zip(positions, values.tolist(), indices.tolist())]


def fill_mask(model, tokenizer, text: str, top_k: int = 5, text_b: str | None = None) -> list[MaskPrediction]:
    """Return top-k (token, probability) candidates for each `[MASK]` in `text` (longer text is truncated)."""
    encoded = encode_input(tokenizer, text, text_b, max_length=int(model.config.max_position_embeddings))
    return predict_masks(model, tokenizer, encoded, top_k)


def predict_nsp(model, tokenizer, a: str, b: str) -> float:
    """Return the model's probability that sentence `b` follows sentence `a` (NSP class 0)."""
    if not model.has_nsp_head:
        raise BertCoreError("this model has no next-sentence head (a GPT-style model is trained on the next token "
                            "only), so it cannot say whether B follows A")
    if not isinstance(b, str) or not b.strip():
        raise BertCoreError("sentence B is empty: next-sentence prediction needs two sentences")
    encoded = encode_input(tokenizer, a, b, max_length=int(model.config.max_position_embeddings))
    logits = _forward(model, encoded).nsp_logits[0].float()
    return float(torch.softmax(logits, dim=-1)[0])


def attention_maps(model, tokenizer, a: str, b: str | None = None) -> AttentionResult:
    """Run one input through the model and return every layer's and head's attention probabilities."""
    encoded = encode_input(tokenizer, a, b, max_length=int(model.config.max_position_embeddings))
    out = _forward(model, encoded, output_attentions=True)
    if not out.attentions:
        raise BertCoreError("this model returned no attention maps")
    att = torch.stack([layer[0].float() for layer in out.attentions]).cpu().numpy()
    return AttentionResult(list(encoded.tokens), att.astype(np.float32), list(encoded.token_type_ids),
                           [i in tokenizer.special_ids for i in encoded.input_ids], encoded.truncated,
                           causal=is_causal(model))


def hide_special_tokens(result: AttentionResult, keep_mask_token: bool = True) -> AttentionResult:
    """Drop [CLS]/[SEP] rows and columns, each row renormalised (one all on specials becomes uniform)."""
    keep = [not s or (keep_mask_token and tok == "[MASK]") for s, tok in zip(result.special_mask, result.tokens)]
    idx = np.flatnonzero(keep)
    if idx.size == 0:
        raise BertCoreError("the input has only special tokens; nothing is left when they are hidden")
    att = result.attentions[:, :, idx][:, :, :, idx].astype(np.float64)
    sums = att.sum(axis=-1, keepdims=True)
    uniform = np.full_like(att, 1.0 / idx.size)
    att = np.where(sums > 1e-12, att / np.maximum(sums, 1e-12), uniform)
    return replace(result, tokens=[result.tokens[i] for i in idx], attentions=att.astype(np.float32),
                   token_type_ids=[result.token_type_ids[i] for i in idx],
                   special_mask=[result.special_mask[i] for i in idx], specials_hidden=True)


def head_summaries(result: AttentionResult) -> list[HeadSummary]:
    """Measure each head: share of attention to [CLS], [SEP], previous, next and own token; entropy; a short label."""
    att = result.attentions.astype(np.float64)   # [L, H, S, S]
    n_layers, n_heads, seq, _ = att.shape
    cls_cols = [i for i, t in enumerate(result.tokens) if t == "[CLS]"]
    sep_cols = [i for i, t in enumerate(result.tokens) if t == "[SEP]"]
    diag = np.arange(seq)
    to_self = att[:, :, diag, diag].mean(-1)
    zero = np.zeros((n_layers, n_heads))
    to_prev = att[:, :, diag[1:], diag[1:] - 1].mean(-1) if seq > 1 else zero
    to_next = att[:, :, diag[:-1], diag[:-1] + 1].mean(-1) if seq > 1 else zero
    to_cls = att[..., cls_cols].sum(-1).mean(-1) if cls_cols else zero
    to_sep = att[..., sep_cols].sum(-1).mean(-1) if sep_cols else zero
    plogp = np.where(att > 0, att * np.log2(np.where(att > 0, att, 1.0)), 0.0)
    entropy = (-plogp.sum(-1)).mean(-1)
    max_entropy = math.log2(seq) if seq > 1 else 1.0
    return [HeadSummary(layer=layer, head=head, to_cls=float(to_cls[layer, head]), to_sep=float(to_sep[layer, head]),
                        to_previous=float(to_prev[layer, head]), to_next=float(to_next[layer, head]),
                        to_self=float(to_self[layer, head]), entropy=float(entropy[layer, head]),
                        normalized_entropy=float(entropy[layer, head] / max_entropy))
            for layer in range(n_layers) for head in range(n_heads)]


def unigram_top_k(counts: Mapping[int, int], tokenizer, top_k: int = 5) -> list[tuple[str, float]]:
    """The baseline that ignores context: the k most frequent tokens and their relative frequencies."""
    total = sum(counts.values())
    best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k] if total > 0 else []
    return [(tokenizer.id_to_token(i), c / total) for i, c in best]


@dataclass
class MaskingRow:
    """One token of a masked pretraining instance, as the Tokens & masking page shows it."""

    position: int
    token: str
    token_id: int
    segment: int
    decision: str
    shown: str          # what the model sees at this position
    shown_id: int


def masking_rows(tokenizer, input_ids: Sequence[int], token_type_ids: Sequence[int],
                 masked_ids: Sequence[int], decisions: Sequence[int]) -> list[MaskingRow]:
    """Describe each position of a masked instance: the original token, what replaced it and why."""
    originals = tokenizer.convert_ids_to_tokens(list(input_ids))
    shown = tokenizer.convert_ids_to_tokens(list(masked_ids))
    return [MaskingRow(i, originals[i], int(input_ids[i]), int(token_type_ids[i]),
                       DECISION_NAMES.get(int(decisions[i]), str(int(decisions[i]))), shown[i], int(masked_ids[i]))
            for i in range(len(input_ids))]


def decision_counts(decisions: torch.Tensor, special_mask: torch.Tensor) -> dict:
    """Count masking decisions over a batch, specials and padding (`special_mask`, as mask_padded gives it) left
    out, and compare them with BERT's 15% and 80/10/10 targets."""
    d = decisions[~special_mask.bool()]
    total = int(d.numel())
    counts = {name: int((d == code).sum()) for name, code in (("masked", MASKED), ("random", RANDOM), ("kept", KEPT))}
    chosen = sum(counts.values())
    return {"candidates": total, "chosen": chosen, "chosen_share": chosen / total if total else 0.0, **counts,
            **{f"{name}_share": n / chosen if chosen else 0.0 for name, n in counts.items()}}


def mask_padded(tokenizer, ids: torch.Tensor, attention_mask: torch.Tensor, seed: int, mask_rate: float):
    """Mask a padded [B, S] batch as pretraining does: specials and padding never chosen nor used as replacements."""
    never = tokenizer.never_sample_ids
    specials = torch.tensor(sorted(set(tokenizer.special_ids) - {tokenizer.unk_id}), dtype=torch.long)
    special_mask = torch.isin(ids, specials) | (attention_mask == 0)
    candidates = torch.tensor([i for i in range(tokenizer.vocab_size) if i not in never], dtype=torch.long)
    generator = torch.Generator().manual_seed(int(seed))
    return mask_tokens(ids, special_mask, generator, tokenizer.vocab_size, tokenizer.mask_id,
                       candidate_ids=candidates, mask_rate=mask_rate), special_mask


def mask_example(tokenizer, input_ids: Sequence[int], token_type_ids: Sequence[int], seed: int = 0,
                 mask_rate: float = MASK_RATE) -> list[MaskingRow]:
    """Mask one instance with `seed` and `mask_rate` (BERT's 80/10/10 rule) and describe every position."""
    ids = torch.tensor([list(input_ids)], dtype=torch.long)
    result, _ = mask_padded(tokenizer, ids, torch.ones_like(ids), seed, mask_rate)
    return masking_rows(tokenizer, input_ids, token_type_ids, result.input_ids[0].tolist(),
                        result.decisions[0].tolist())


def masking_stats(tokenizer, instances: Sequence[Sequence[int]], seed: int = 0, mask_rate: float = MASK_RATE) -> dict:
    """Mask many instances (lists of ids) at once and count decisions against the 15% and 80/10/10 targets."""
    if not instances:
        raise BertCoreError("no instances to mask")
    ids, _, attention = padded_batch(tokenizer.pad_id, [(x, ()) for x in instances])
    result, special_mask = mask_padded(tokenizer, ids, attention, seed, mask_rate)
    return {**decision_counts(result.decisions, special_mask), "target_rate": mask_rate,
            "instances": len(instances)}


# ---------------------------------------------------------------------------------------------- guesses

# The model's guess at every position the masking chose, [MASK] (80%), random (10%) and kept (10%) alike: side by
# side they show what each decision teaches (a kept token can be copied, a random one must be distrusted, a [MASK]
# read from the context). `guesses_for_instance` masks one instance as `mask_example` does; `accuracy_by_decision`
# counts right guesses per decision over many, a figure a class can trust more.
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
    """The model's guess at each position `mask_example` chooses with `seed` and `mask_rate`."""
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


# ---------------------------------------------------------------------------------------------- words


def group_word_pieces(pieces: Sequence[str]) -> list[list[str]]:
    """Group WordPiece tokens into words: ['play', '##ing', 'on'] -> [['play', '##ing'], ['on']]."""
    words: list[list[str]] = []
    for piece in pieces:
        if piece.startswith("##") and words:
            words[-1].append(piece)
        else:
            words.append([piece])
    return words


def word_text(word: Sequence[str]) -> str:
    """A word's pieces written as text: ['play', '##ing'] -> 'playing'."""
    return "".join(piece.removeprefix("##") for piece in word)


def text_with_word_masked(words: Sequence[Sequence[str]], pick: int) -> str:
    """The text of `words` with word `pick` replaced by one [MASK] per piece (as whole-word masking does: half a
    word cannot be written as text)."""
    return " ".join(" ".join(["[MASK]"] * len(w)) if i == pick else word_text(w) for i, w in enumerate(words))


def context_before(tokens: Sequence[str], position: int, words: int = 4) -> str:
    """Up to `words` words before token `position` (after [CLS]), then '___': a short label for a [MASK]."""
    before = group_word_pieces(tokens[max(1, position - 6):position])[-words:]
    return " ".join(word_text(w) for w in before) + " ___"


# ---------------------------------------------------------------------------------------------- pairs


@dataclass(frozen=True)
class PairAttention:
    """Mean share of B's attention on A, [layer, head], for pairs where B follows A and where B is random: for each
    head, the share of each of B's word pieces' attention on A's ([CLS] and [SEP] left out), averaged over B's pieces
    and then the pairs. A model trained with next-sentence prediction has a reason to tell the two apart."""

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
