"""A run on a shard folder and on text corpora at once (`train --corpus shards:DIR --corpus brown ...`): each batch
comes whole from one of the two, the shards' with probability `share` (`--shard-share`).

Why: the shipped models read the shared corpora twenty times; continued on a `corpus build` folder alone, whose text
is mostly nineteenth-century books, they learn its text and lose 2.5-5 points on the held-out Brown documents and
WikiText-2 (docs/corpus.md). Mixing keeps the text they knew in the batches while the shards bring new text.

Which stream a batch comes from is drawn from (seed, batch number) alone, and each stream keeps its own position,
so a resume goes on with the same choices, windows and masks. Pure data: torch only for the counts.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from bert_core.data.pretraining_data import Batch, unigram_baseline
from bert_core.errors import BertCoreError

_CHOICE_SALT = 0x4D4958   # "MIX": the draws of which stream, apart from every other use of the seed
# Half the batches from the shards: the text a warm-started model knew stays in every other batch (docs/corpus.md).
DEFAULT_SHARD_SHARE = 0.5


def _from_shards(seed: int, k: int, share: float) -> bool:
    """Whether batch `k` of a mixed run comes from the shards."""
    return bool(np.random.default_rng([int(seed), _CHOICE_SALT, int(k)]).random() < share)


def check_share(share) -> float:
    if share is None or isinstance(share, bool) or not 0.0 < float(share) < 1.0:
        raise BertCoreError(f"the shards' share of the batches must be between 0 and 1 (both left out), got {share!r}")
    return float(share)


class MixedStream:
    """An endless, seeded, resumable iterator of batches, each from `shards` (a ShardStream) with probability
    `share`, else from `text` (a PretrainingData); both with the same batch size, tokenizer and objective."""

    STATE_VERSION = 1

    def __init__(self, shards, text, share: float, seed: int):
        self.shards, self.text = shards, text
        self.share, self.seed = check_share(share), int(seed)
        if shards.batch_size != text.batch_size:
            raise BertCoreError(f"the two streams' batches differ ({shards.batch_size} and {text.batch_size} rows)")
        self.batch_size = shards.batch_size
        self.tokenizer = text.tokenizer
        self.taken = 0   # batches handed out so far: the next one's number
        self._token_counts: torch.Tensor | None = None

    def __iter__(self):
        return self

    def __next__(self) -> Batch:
        stream = self.shards if _from_shards(self.seed, self.taken, self.share) else self.text
        self.taken += 1
        return next(stream)

    @property
    def batches_per_epoch(self) -> int:
        """Both streams' batches in their first epochs (reading it builds them: a corpus too small is refused)."""
        return self.shards.batches_per_epoch + self.text.batches_per_epoch

    @property
    def position(self) -> int:
        """Batches taken (PretrainingBatches reads it: once a long batch is taken, a short phase is over)."""
        return self.taken

    def resized(self, seq_len: int, batch_size: int) -> "MixedStream":
        """Both streams cut to another length and batched anew, from their start: a run's short-sequence phase."""
        return MixedStream(self.shards.resized(seq_len, batch_size), self.text.resized(seq_len, batch_size),
                           self.share, self.seed)

    @property
    def token_counts(self) -> torch.Tensor:
        """Each token's count in the mix as the batches read it: each stream's frequencies weighted by its share
        (scaled to whole counts), for the unigram baseline."""
        if self._token_counts is None:
            scale = 1e9
            a = self.shards.token_counts.double()
            b = self.text.token_counts.double()
            mix = self.share * a / max(float(a.sum()), 1.0) + (1 - self.share) * b / max(float(b.sum()), 1.0)
            self._token_counts = torch.round(mix * scale).long()
        return self._token_counts

    def unigram_baseline(self, batches: Sequence[Batch]) -> dict:
        tok = self.tokenizer
        return unigram_baseline(self.token_counts, batches, never_ids=tok.special_ids - {tok.unk_id})

    def state_dict(self) -> dict:
        return {"version": self.STATE_VERSION, "taken": self.taken, "share": self.share, "seed": self.seed,
                "shards": self.shards.state_dict(), "text": self.text.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict()`; refused when the share or seed differ (the choices would)."""
        try:
            share, seed, taken = float(state["share"]), int(state["seed"]), int(state["taken"])
            shards, text = state["shards"], state["text"]
        except (KeyError, TypeError, ValueError) as e:
            raise BertCoreError(f"the saved mixed stream's state is damaged ({e})") from e
        if share != self.share or seed != self.seed:
            raise BertCoreError(f"the saved run mixed the shards at {share:g} with seed {seed}; this one at "
                                f"{self.share:g} with seed {self.seed}: resume with the same settings")
        if taken < 0:
            raise BertCoreError(f"the saved mixed stream's state has a negative position: {state!r}")
        self.shards.load_state_dict(shards)
        self.text.load_state_dict(text)
        self.taken = taken


class MixedHeldOut:
    """Held-out batches of a mixed run: the shards' held-out and the text corpora's, in proportion to the mix."""

    def __init__(self, shards, text, share: float):
        self.shards, self.text, self.share = shards, text, check_share(share)
        self.batch_size = text.batch_size
        self.tokenizer = text.tokenizer

    def eval_batches(self, n_batches: int | None = None, seed: int = 0) -> list[Batch]:
        if n_batches is None:
            return self.shards.eval_batches(None, seed) + self.text.eval_batches(None, seed)
        n = int(n_batches)
        from_shards = min(max(round(n * self.share), 1), n - 1) if n > 1 else n
        return self.shards.eval_batches(from_shards, seed) + self.text.eval_batches(n - from_shards, seed)
