"""Probe snapshots for the training time-lapse: what the model fills into fixed [MASK] sentences, and how one
sentence's attention looks, at chosen steps, kept in bounded memory."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from bert_core.errors import BertCoreError

# Short sentences whose blanks a small model can learn to fill from any English corpus.
DEFAULT_PROBES = (
    "the man went to the [MASK] to buy some milk .",
    "she said that [MASK] would come back tomorrow .",
    "it was one of the [MASK] days of the year .",
    "he opened the door and [MASK] into the room .",
)
DEFAULT_ATTENTION_PROBE = "the cat sat on the mat because it was tired ."


@dataclass
class ProbeSnapshot:
    """Probe results at one step: per sentence, per [MASK], the top-k (token, probability); and attention maps."""

    step: int
    predictions: list[list[list[tuple[str, float]]]]
    attention_tokens: list[str] | None
    attention: np.ndarray | None  # float16 [layers, heads, S, S] (half precision keeps the store small)


class ProbeStore:
    """Snapshots of fixed probe sentences taken during training; thread-safe, at most `max_snapshots` kept.

    When full, every other snapshot (never the first or the newest) is dropped, so the store always spans the
    whole run at a coarser and coarser pace: what a time-lapse needs.
    """

    def __init__(self, sentences=DEFAULT_PROBES, attention_sentence: str | None = DEFAULT_ATTENTION_PROBE,
                 top_k: int = 5, max_snapshots: int = 32):
        sentences = list(sentences)
        if not sentences and attention_sentence is None:
            raise BertCoreError("give at least one probe sentence or an attention sentence")
        for s in sentences:
            if "[mask]" not in s.lower():
                raise BertCoreError(f"probe sentence {s!r} has no [MASK]: write [MASK] where a word should go")
        if max_snapshots < 2:
            raise BertCoreError(f"max_snapshots must be at least 2, got {max_snapshots}")
        self.sentences = sentences
        self.attention_sentence = attention_sentence
        self.top_k = top_k
        self.max_snapshots = max_snapshots
        self._snapshots: list[ProbeSnapshot] = []
        self._lock = threading.Lock()

    def snapshot(self, model, tokenizer, step: int) -> ProbeSnapshot:
        """Run the probes through `model` (its train/eval mode is restored), store and return the snapshot."""
        from bert_core.inspection import attention_maps, fill_mask

        predictions = [
            [p.candidates for p in fill_mask(model, tokenizer, s, top_k=self.top_k)] for s in self.sentences
        ]
        tokens = attention = None
        if self.attention_sentence is not None:
            result = attention_maps(model, tokenizer, self.attention_sentence)
            tokens, attention = result.tokens, result.attentions.astype(np.float16)
        return self.add(ProbeSnapshot(step=step, predictions=predictions, attention_tokens=tokens,
                                      attention=attention))

    def add(self, snap: ProbeSnapshot) -> ProbeSnapshot:
        """Store a snapshot (taken here or received from a training process), thinning when full."""
        with self._lock:
            self._snapshots.append(snap)
            if len(self._snapshots) > self.max_snapshots:
                middle = self._snapshots[1:-1]
                self._snapshots = [self._snapshots[0], *middle[1::2], self._snapshots[-1]]
        return snap

    def snapshots(self) -> list[ProbeSnapshot]:
        """A copy of the stored snapshots, oldest first."""
        with self._lock:
            return list(self._snapshots)

    def __len__(self) -> int:
        with self._lock:
            return len(self._snapshots)

    def latest(self) -> ProbeSnapshot | None:
        """The most recent snapshot, or None before the first."""
        with self._lock:
            return self._snapshots[-1] if self._snapshots else None
