"""Reading a shard folder that `corpus build` (bert_core.corpus) wrote: its index checked, its uint16 token shards
memory-mapped, a seeded, resumable stream of batches over them, and a run on shards and text at once
(`--shard-share`). A shard is `shards/<source>-<split>-NNNN.u16` (or `.u16.xz`, a third of the size for carrying to
a GPU machine, unpacked beside itself on first read): token ids, each document followed by [SEP]."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from bert_core.data.corpora import SHARD_INDEX
from bert_core.data.objectives import MASK_RATE
from bert_core.data.pretraining_data import EVAL_SALT, Batch, BatchStream, NspInstance, _mix
from bert_core.errors import BertCoreError
from bert_core.model.tokenization import BertTokenizer, special_tokens_count

INDEX_VERSION = 1
SHARDS_DIR, SUFFIX, XZ = "shards", ".u16", ".u16.xz"
# How many times each source kind's training documents are read per pass over the mix. Books dominate by words; the
# news (the era and topics of AG News) and the NLTK text are repeated so that about a tenth of what a model reads
# is news, at the cost of repeating 4x a text far smaller than the books (see docs/corpus.md).
DEFAULT_WEIGHTS = {"gutenberg": 1.0, "reuters": 4.0, "newsgroups": 2.0, "bbc": 4.0, "nltk": 2.0, "text": 1.0}
# Half the batches of a mixed run from the shards: the text a warm-started model knew stays in every other batch.
DEFAULT_SHARD_SHARE = 0.5
_CHOICE_SALT = 0x4D4958   # "MIX": the draws of which stream, apart from every other use of the seed


@dataclass(frozen=True)
class BuildSettings:
    """What a `corpus build` chooses; recorded whole in report.json and index.json, so a build can be repeated."""

    seed: int = 0
    ngram: int = 13
    author_cap_words: int = 3_000_000
    heldout_fraction: float = 0.01
    dedup_min_words: int = 8          # paragraphs shorter than this ("Yes, sir.", "CHAPTER I") may repeat
    near_duplicate_share: float = 0.5  # a document this much made of paragraphs seen before is a duplicate
    shard_tokens: int = 1 << 23
    compress: bool = False
    weights: dict = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))


def _damaged(shard: dict, size: int) -> BertCoreError:
    return BertCoreError(f"shard {shard['file']} is truncated or damaged ({size} bytes, expected "
                         f"{2 * shard['tokens']}); copy it again or rebuild the corpus")


def open_index(folder: str | Path) -> dict:
    """index.json of a shard folder, checked: every shard present and whole (its size, or for a compressed one
    its unpacked size, matches the count recorded), so a truncated copy is refused before training starts."""
    folder = Path(folder).expanduser()
    path = folder / SHARD_INDEX
    if not path.is_file():
        raise BertCoreError(f"{folder} is not a shard folder (no {SHARD_INDEX}); build one with "
                            "`python -m bert_core corpus build`")
    try:
        index = json.loads(path.read_text())
        shards = index["shards"]
        int(index["vocab_size"])
        if not all(isinstance(s["file"], str) and type(s["tokens"]) is int and s["tokens"] >= 0 for s in shards):
            raise TypeError("a shard's file is not a name, or its tokens not a count")
    except (ValueError, KeyError, TypeError) as e:
        raise BertCoreError(f"{path} is damaged ({e}); rebuild the corpus") from e
    if index.get("version") != INDEX_VERSION:
        raise BertCoreError(f"{path} has version {index.get('version')}; this code reads version {INDEX_VERSION}")
    for s in shards:
        f = shard_path(folder, s)
        if not f.is_file():
            raise BertCoreError(f"shard {s['file']} listed in {path} is missing; copy it again or rebuild")
        if s["file"].endswith(SUFFIX) and f.stat().st_size != 2 * s["tokens"]:
            raise _damaged(s, f.stat().st_size)
    return index


def shard_path(folder: str | Path, shard: dict) -> Path:
    """Where a shard index's entry points: a file inside the corpus folder. An absolute path, a `..`, or a link
    that leads out of the folder is refused: an index is data that travels, and must not open /etc/passwd."""
    folder = Path(folder).expanduser()
    name = shard["file"]
    inside = PurePosixPath(name)
    where = folder / name
    if (not name or inside.is_absolute() or ".." in inside.parts or "\\" in name
            or not where.resolve().is_relative_to(folder.resolve())):
        raise BertCoreError(f"{folder / SHARD_INDEX} lists shard {name!r}, which is not a file inside the corpus "
                            f"folder {folder}; a shard index names files inside its own folder only (as "
                            f"{SHARDS_DIR}/NAME.u16): rebuild the corpus or copy it again")
    return where


def shard_tokens(folder: str | Path, shard: dict) -> np.ndarray:
    """The token ids of one shard as a read-only memory map; a compressed shard is unpacked beside itself once
    (checked against its sha256) and mapped from there."""
    f = shard_path(folder, shard)
    if shard["file"].endswith(XZ):
        raw = shard_path(folder, {"file": shard["file"][: -len(XZ)] + SUFFIX})   # a link there is refused too
        if not raw.is_file() or raw.stat().st_size != 2 * shard["tokens"]:
            try:
                data = lzma.decompress(f.read_bytes())
            except lzma.LZMAError as e:
                raise BertCoreError(f"shard {shard['file']} is truncated or damaged ({e}); copy it again") from e
            if len(data) != 2 * shard["tokens"] or hashlib.sha256(data).hexdigest() != shard["sha256"]:
                raise BertCoreError(f"shard {shard['file']} does not unpack to the tokens recorded; copy it again")
            # Opened as any file is (its mode from the umask, unlike mkstemp's 0600), under a name of ours.
            tmp = raw.with_name(f".{raw.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            try:
                with open(tmp, "xb") as out:
                    out.write(data)
                os.replace(tmp, raw)
            finally:
                tmp.unlink(missing_ok=True)
        f = raw
    if f.stat().st_size != 2 * shard["tokens"]:
        raise _damaged(shard, f.stat().st_size)
    return np.memmap(f, dtype="<u2", mode="r") if shard["tokens"] else np.zeros(0, dtype=np.uint16)


class ShardStream(BatchStream):
    """Batches over a shard folder's `split`, cut into windows of `seq_len - 3` tokens: `[CLS] A [SEP] B [SEP]` with
    A the window's first half and B its second (is-next) or, for half of them by the seed, another window's
    (not-next); without NSP, `[CLS] window [SEP]`. `weights` (default: index.json's) repeats each source's windows
    per epoch (2.5 = twice, and half of them a third time, by the seed)."""

    MUST_MATCH = ("seed", "seq_len", "batch_size", "split", "mask_rate", "shards", "weights", "nsp", "objective")

    def __init__(self, folder: str | Path, split: str = "train", seq_len: int = 128, batch_size: int = 32,
                 seed: int = 0, mask_rate: float = MASK_RATE, weights: dict | None = None,
                 tokenizer: BertTokenizer | None = None, nsp: bool = True,
                 objective: str = "mlm", whole_word_masking: bool = False, mask_only: bool = False):
        self.folder = Path(folder).expanduser()
        self.index = open_index(self.folder)
        super().__init__(tokenizer or BertTokenizer.load(self.folder / "tokenizer"), seq_len, batch_size, mask_rate,
                         seed, nsp, objective, whole_word_masking, mask_only)
        if self.tokenizer.vocab_size != self.index["vocab_size"]:
            raise BertCoreError(f"the tokenizer has {self.tokenizer.vocab_size} tokens but the shards were made with "
                                f"{self.index['vocab_size']}; use the shard folder's own tokenizer")
        self.split = split
        self.weights = dict(self.index.get("weights") or {}) if weights is None else dict(weights)
        self.shards = [s for s in self.index["shards"] if s["split"] == split]
        self.window = self.max_seq_length - special_tokens_count(pair=self.nsp)  # [CLS] A [SEP] B [SEP], or one text
        self._counts = np.array([s["tokens"] // self.window for s in self.shards], dtype=np.int64)
        if not self._counts.sum():
            raise BertCoreError(f"{self.folder} has no {split} text of {self.max_seq_length} tokens or more")
        self.num_tokens = int(sum(s["tokens"] for s in self.shards))
        self._maps: dict[int, np.ndarray] = {}
        self._plan_epoch: int | None = None
        self._plan = np.zeros((0, 2), dtype=np.int64)

    def _like(self, **changes) -> "ShardStream":
        settings = dict(folder=self.folder, split=self.split, seq_len=self.max_seq_length, batch_size=self.batch_size,
                        seed=self.seed, mask_rate=self.mask_rate, weights=self.weights,
                        tokenizer=self.tokenizer, nsp=self.nsp, objective=self.objective,
                        whole_word_masking=self.whole_word_masking, mask_only=self.mask_only)
        return ShardStream(**{**settings, **changes})

    def resized(self, seq_len: int, batch_size: int) -> "ShardStream":
        return self._like(seq_len=seq_len, batch_size=batch_size)

    @cached_property
    def token_counts(self) -> torch.Tensor:
        counts = np.zeros(self.tokenizer.vocab_size, dtype=np.int64)
        for i in range(len(self.shards)):
            counts += np.bincount(self._tokens(i), minlength=len(counts))[:len(counts)]
        return torch.from_numpy(counts)

    def eval_batches(self, n_batches: int | None = None, seed: int = 0) -> list[Batch]:
        """Fixed batches for held-out evaluation: the first `n_batches` (all when None) of a stream over the same
        shards, every source at weight 1, seeded apart from training."""
        fixed = self._like(seed=_mix(seed, EVAL_SALT), weights={})
        total = fixed.batches_per_epoch
        return [fixed.batch(0, j) for j in range(total if n_batches is None else min(int(n_batches), total))]

    def plan(self, epoch: int) -> np.ndarray:
        """(shard, window) rows of epoch `epoch`, in the order read: each source's windows repeated by its weight
        (the fraction drawn by the seed), then shuffled by (seed, epoch)."""
        if self._plan_epoch != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            parts = []
            for i, (shard, n) in enumerate(zip(self.shards, self._counts)):
                w = float(self.weights.get(shard["source"], 1.0))
                rows = np.repeat(np.arange(n, dtype=np.int64), int(w))
                if w > int(w):
                    rows = np.concatenate([rows, np.flatnonzero(rng.random(n) < w - int(w))])
                parts.append(np.stack([np.full(len(rows), i, dtype=np.int64), rows], axis=1))
            plan = np.concatenate(parts)
            self._plan = plan[rng.permutation(len(plan))]
            self._plan_epoch = epoch
        return self._plan

    @property
    def batches_per_epoch(self) -> int:
        return len(self.plan(self.epoch)) // self.batch_size

    def _tokens(self, i: int) -> np.ndarray:
        if i not in self._maps:
            self._maps[i] = shard_tokens(self.folder, self.shards[i])
        return self._maps[i]

    def _part(self, row, start: int, stop: int) -> tuple[list[int], tuple[int, int, int]]:
        first = int(row[1]) * self.window
        return self._tokens(int(row[0]))[first + start:first + stop].tolist(), (int(row[0]), first + start,
                                                                                 first + stop)

    def examples(self, epoch: int, j: int, generator: torch.Generator) -> list[NspInstance]:
        plan = self.plan(epoch)
        rows = plan[j * self.batch_size:(j + 1) * self.batch_size]
        cls, sep = self.tokenizer.cls_id, self.tokenizer.sep_id
        if not self.nsp:
            windows = [self._part(row, 0, self.window) for row in rows]
            return [NspInstance([cls, *text, sep], [0] * (len(text) + 2), False, span, (span[0], span[2], span[2]))
                    for text, span in windows]
        half = self.window // 2
        not_next = (torch.rand(len(rows), generator=generator) < 0.5).tolist()
        others = torch.randint(len(plan), (len(rows),), generator=generator).tolist()
        out = []
        for row, other, random_b in zip(rows, others, not_next):
            (a, a_span), (b, b_span) = self._part(row, 0, half), self._part(plan[other] if random_b else row, half,
                                                                            self.window)
            out.append(NspInstance([cls, *a, sep, *b, sep], [0] * (len(a) + 2) + [1] * (len(b) + 1), random_b,
                                   a_span, b_span))
        return out

    def state_dict(self) -> dict:
        return {**super().state_dict(), "seq_len": self.max_seq_length, "split": self.split,
                "mask_rate": self.mask_rate, "weights": self.weights, "nsp": self.nsp, "objective": self.objective,
                "shards": hashlib.sha256("".join(s["sha256"] for s in self.shards).encode()).hexdigest()[:16]}


def _from_shards(seed: int, k: int, share: float) -> bool:
    return bool(np.random.default_rng([int(seed), _CHOICE_SALT, int(k)]).random() < share)


def check_share(share) -> float:
    if share is None or isinstance(share, bool) or not 0.0 < float(share) < 1.0:
        raise BertCoreError(f"the shards' share of the batches must be between 0 and 1 (both left out), got {share!r}")
    return float(share)


class MixedStream:
    """A run on a shard folder and on text corpora at once (`train --corpus shards:DIR --corpus brown ...`): an
    endless, seeded, resumable iterator of batches, each whole from `shards` (a ShardStream) with probability
    `share`, else from `text` (a PretrainingData); both with the same batch size, tokenizer and objective.

    Why: the shipped models read the shared corpora twenty times; continued on a `corpus build` folder alone, whose
    text is mostly nineteenth-century books, they learn its text and lose 2.5-5 points on the held-out Brown
    documents and WikiText-2 (docs/corpus.md). Mixing keeps the text they knew in the batches while the shards bring
    new text. Which stream a batch comes from is drawn from (seed, batch number) alone, and each stream keeps its
    own position, so a resume goes on with the same choices, windows and masks."""

    STATE_VERSION = 1
    unigram_baseline = BatchStream.unigram_baseline

    def __init__(self, shards: ShardStream, text, share: float, seed: int):
        self.shards, self.text = shards, text
        self.share, self.seed = check_share(share), int(seed)
        if shards.batch_size != text.batch_size:
            raise BertCoreError(f"the two streams' batches differ ({shards.batch_size} and {text.batch_size} rows)")
        self.batch_size = shards.batch_size
        self.tokenizer = text.tokenizer
        self.taken = 0   # batches handed out so far: the next one's number

    def __iter__(self):
        return self

    def __next__(self) -> Batch:
        stream = self.shards if _from_shards(self.seed, self.taken, self.share) else self.text
        self.taken += 1
        return next(stream)

    @property
    def started(self) -> bool:
        return self.taken > 0

    @property
    def batches_per_epoch(self) -> int:
        """Both streams' batches in their first epochs (reading it builds them: a corpus too small is refused)."""
        return self.shards.batches_per_epoch + self.text.batches_per_epoch

    def resized(self, seq_len: int, batch_size: int) -> "MixedStream":
        return MixedStream(self.shards.resized(seq_len, batch_size), self.text.resized(seq_len, batch_size),
                           self.share, self.seed)

    @cached_property
    def token_counts(self) -> torch.Tensor:
        """Each token's count in the mix as the batches read it: each stream's frequencies weighted by its share
        (scaled to whole counts), for the unigram baseline."""
        a, b = self.shards.token_counts.double(), self.text.token_counts.double()
        mix = self.share * a / max(float(a.sum()), 1.0) + (1 - self.share) * b / max(float(b.sum()), 1.0)
        return torch.round(mix * 1e9).long()

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

    def __init__(self, shards: ShardStream, text, share: float):
        self.shards, self.text, self.share = shards, text, check_share(share)

    def eval_batches(self, n_batches: int | None = None, seed: int = 0) -> list[Batch]:
        if n_batches is None:
            return self.shards.eval_batches(None, seed) + self.text.eval_batches(None, seed)
        n = int(n_batches)
        from_shards = min(max(round(n * self.share), 1), n - 1) if n > 1 else n
        return self.shards.eval_batches(from_shards, seed) + self.text.eval_batches(n - from_shards, seed)
