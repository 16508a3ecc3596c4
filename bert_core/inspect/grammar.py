"""A grammar check: how likely the model finds a sentence, and which of two sentences it prefers, in nats.

A BERT gives no probability to a whole sentence, so it is scored by its pseudo-log-likelihood (Salazar et al.,
2020): each word piece masked in turn ([CLS] and [SEP] never), the log-probability the MLM head gives it summed. The
GPT twin gives a true probability: each next token's after [CLS], the closing [SEP] included, since a sentence that
may not end there is not finished. Tests hold both against transformers on the same folders.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.kit import device_of, evaluating, lm_head
from bert_core.model.bert import is_causal

PLL, NEXT_TOKEN = "pseudo-log-likelihood", "next-token log-likelihood"
MASKED_ROWS_PER_PASS = 64  # masked copies run together: a 510-piece sentence would otherwise be 510 rows at once
TIE_NATS = 1e-6            # closer than this, neither sentence is preferred (float noise, not a preference)
MAX_PAIRS_FILE_BYTES = 1_000_000


@dataclass
class SentenceScore:
    """One sentence's score: the pieces scored and the natural-log probability of each (their sum is `score`)."""

    text: str
    tokens: list[str]
    log_probs: list[float]
    method: str

    @property
    def score(self) -> float:
        return float(sum(self.log_probs))


@dataclass
class TokenShare:
    """A stretch of A lined up with a stretch of B and its part of score(A) - score(B); shares sum to the whole."""

    tokens_a: list[str]
    tokens_b: list[str]
    difference: float
    same_tokens: bool   # True for a piece both sentences share (its share is the context's doing, not its own)


@dataclass
class PairComparison:
    """Two sentences scored by one model: which it prefers, by how many nats, and where the difference lies."""

    a: SentenceScore
    b: SentenceScore
    shares: list[TokenShare] = field(default_factory=list)

    @property
    def difference(self) -> float:
        """score(A) - score(B) in nats: above 0 the model prefers A."""
        return self.a.score - self.b.score

    @property
    def preferred(self) -> str:
        """'a', 'b' or 'tie'."""
        return "tie" if abs(self.difference) < TIE_NATS else "a" if self.difference > 0 else "b"


def trained_lm_head(model):
    """`lm_head(model)`, refused also when its folder held no trained head (a fine-tuned classifier's folder loads
    with a fresh one, in `missing_keys`), whose guesses would be noise read as the model's."""
    predictions = lm_head(model)
    if any(k.startswith("cls.predictions.") for k in model.missing_keys):   # () for a model built in memory
        raise BertCoreError("this folder holds no trained language-model head (a fine-tuned classifier, tagger or "
                            "answer finder?), so its guesses would be noise; pick a pretrained BERT or GPT folder")
    return predictions


def encode_sentence(model, tokenizer, text: str) -> list[int]:
    """`[CLS] text [SEP]` ids for scoring, refusing what cannot be scored whole (no silent truncation)."""
    if not isinstance(text, str) or not text.strip():
        raise BertCoreError("a sentence is empty: type a sentence to score")
    ids = tokenizer.encode(text)
    if not ids:
        raise BertCoreError(f"{text[:40]!r} gave no tokens: type some words")
    positions = int(model.config.max_position_embeddings)
    if len(ids) + 2 > positions:
        raise BertCoreError(f"a sentence of {len(ids)} word pieces (plus [CLS] and [SEP]) is longer than the model's "
                            f"{positions} positions; score a shorter sentence")
    return [tokenizer.cls_id, *ids, tokenizer.sep_id]


def _pll_log_probs(model, head, ids: list[int], mask_id: int) -> list[float]:
    n = len(ids) - 2  # the word pieces between [CLS] and [SEP]
    base = torch.tensor(ids, dtype=torch.long, device=device_of(model))
    out: list[float] = []
    for start in range(0, n, MASKED_ROWS_PER_PASS):
        rows = torch.arange(start, min(n, start + MASKED_ROWS_PER_PASS), device=base.device)
        positions = rows + 1
        batch = base.repeat(len(rows), 1)
        batch[torch.arange(len(rows)), positions] = mask_id
        hidden = model.bert(batch, torch.ones_like(batch), torch.zeros_like(batch))[0]
        # The head on the masked position of each copy only: the decoder (hidden x vocab) is the costly matmul.
        logits = head(hidden[torch.arange(len(rows)), positions]).float()
        out += logits.log_softmax(-1).gather(1, base[positions][:, None])[:, 0].tolist()
    return out


def _next_token_log_probs(model, head, ids: list[int]) -> list[float]:
    batch = torch.tensor([ids], dtype=torch.long, device=device_of(model))
    hidden = model.bert(batch, torch.ones_like(batch), torch.zeros_like(batch))[0]
    logits = head(hidden[0, :-1]).float()  # position i predicts token i + 1
    return logits.log_softmax(-1).gather(1, batch[0, 1:, None])[:, 0].tolist()


def score_sentence(model, tokenizer, text: str) -> SentenceScore:
    """Score one sentence: pseudo-log-likelihood for a BERT, next-token log-likelihood for the GPT twin."""
    head = lm_head(model)
    ids = encode_sentence(model, tokenizer, text)
    causal = is_causal(model)
    with evaluating(model):
        log_probs = (_next_token_log_probs(model, head, ids) if causal
                     else _pll_log_probs(model, head, ids, tokenizer.mask_id))
    scored = ids[1:] if causal else ids[1:-1]
    return SentenceScore(text=text, tokens=tokenizer.convert_ids_to_tokens(scored), log_probs=log_probs,
                         method=NEXT_TOKEN if causal else PLL)


def token_shares(a: SentenceScore, b: SentenceScore) -> list[TokenShare]:
    """The sentences' pieces lined up (difflib), each stretch with its part of score(A) - score(B)."""
    shares = []
    matcher = difflib.SequenceMatcher(a=a.tokens, b=b.tokens, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2)):
                shares.append(TokenShare([a.tokens[i]], [b.tokens[j]], a.log_probs[i] - b.log_probs[j], True))
        else:
            shares.append(TokenShare(a.tokens[i1:i2], b.tokens[j1:j2],
                                     sum(a.log_probs[i1:i2]) - sum(b.log_probs[j1:j2]), False))
    return shares


def compare_pair(model, tokenizer, a: str, b: str) -> PairComparison:
    """Score two sentences with one model and say which it prefers and where the difference comes from."""
    sa, sb = score_sentence(model, tokenizer, a), score_sentence(model, tokenizer, b)
    return PairComparison(a=sa, b=sb, shares=token_shares(sa, sb))


def parse_pairs(text: str, name: str = "the pairs file") -> list[tuple[str, str]]:
    """Sentence pairs from text with one `A<TAB>B` pair a line; blank lines and lines starting with # are skipped."""
    if "\x00" in text:
        raise BertCoreError(f"{name} contains NUL characters, so it looks binary; give plain UTF-8 text with one "
                            "tab-separated pair a line")
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise BertCoreError(f"{name}, line {number}: expected two sentences separated by one tab, got "
                                f"{len(parts)} part(s): {line[:60]!r}")
        pairs.append((parts[0].strip(), parts[1].strip()))
    if not pairs:
        raise BertCoreError(f"{name} holds no pairs: write one pair a line, the two sentences separated by a tab")
    return pairs


def read_pairs_file(path) -> list[tuple[str, str]]:
    """Pairs from a UTF-8 file (see parse_pairs), refusing a missing, oversized or binary file with a message."""
    path = Path(path)
    if not path.is_file():
        raise BertCoreError(f"{path}: no such file (give a text file with one tab-separated pair a line)")
    if path.stat().st_size > MAX_PAIRS_FILE_BYTES:
        raise BertCoreError(f"{path} is over {MAX_PAIRS_FILE_BYTES // 1_000_000} MB; a pairs file holds a few "
                            "hundred lines at most")
    data = path.read_bytes()
    if b"\x00" in data:
        raise BertCoreError(f"{path} looks like a binary file (it contains NUL bytes); give plain UTF-8 text with "
                            "one tab-separated pair a line")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BertCoreError(f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at {e.start}); save it as "
                            "UTF-8") from None
    return parse_pairs(text, str(path))
