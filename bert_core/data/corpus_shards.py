"""Token shards: a corpus tokenized once into uint16 files read through memory maps, and a seeded stream of masked
batches over them that resumes exactly (issue 60).

A shard is `shards/<source>-<split>-NNNN.u16`: token ids, each document followed by [SEP]. `index.json` lists
every shard with its token count and sha256, the tokenizer sits in `tokenizer/`, and a compressed build writes
`.u16.xz` instead (a third of the size, for carrying to a GPU machine), unpacked beside itself on first read.

The stream cuts each shard into windows of `seq_len - 3` tokens; a window becomes `[CLS] A [SEP] B [SEP]` with A
its first half and B its second half (is-next), or, for half of them by the seed, the second half of another
window (not-next). Batch j of epoch e is a pure function of (seed, e, j): an epoch's order of windows is drawn
from (seed, e), source weights repeat a source's windows, and the masks come from a generator seeded by
(seed, e, j). So a stream restored at (epoch, position) gives the same next batches, masks and all.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import uuid
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from bert_core.data.corpora import SHARD_INDEX, SHARDS_PREFIX, shard_folder  # noqa: F401  (re-exported)
from bert_core.data.objectives import MASK_RATE, OBJECTIVES, objective_has_nsp
from bert_core.data.pretraining_data import Batch, _mix, causal_labels, mask_tokens, unigram_baseline
from bert_core.errors import BertCoreError
from bert_core.model.bert import next_token_targets
from bert_core.model.tokenization import BertTokenizer, special_tokens_count

__all__ = ["INDEX_FILE", "SHARDS_PREFIX", "ShardWriter", "ShardStream", "open_index", "shard_folder", "shard_tokens",
           "shard_patterns"]

INDEX_FILE = SHARD_INDEX
_EVAL_SALT = 0x45564C   # the held-out batches' seed is mixed with this, as PretrainingData.eval_batches does
INDEX_VERSION = 1
_SUFFIX, _XZ = ".u16", ".u16.xz"
SHARDS_DIR = "shards"


def shard_patterns(source: str) -> tuple[str, ...]:
    """The names (fnmatch patterns) ShardWriter gives the shards of a source whose name matches `source`, and the
    raw copies shard_tokens unpacks beside compressed ones."""
    return tuple(f"{SHARDS_DIR}/{source}-*-[0-9][0-9][0-9][0-9]{suffix}" for suffix in (_SUFFIX, _XZ))


class ShardWriter:
    """Tokenizes documents into shards of at most `shard_tokens` ids per (source, split), then writes index.json."""

    def __init__(self, folder: str | Path, tokenizer: BertTokenizer, shard_tokens: int = 1 << 23,
                 compress: bool = False):
        self.folder = Path(folder)
        (self.folder / SHARDS_DIR).mkdir(parents=True, exist_ok=True)
        self.tokenizer = tokenizer
        self.shard_tokens = int(shard_tokens)
        self.compress = bool(compress)
        self.shards: list[dict] = []
        self._open: dict[tuple[str, str], list] = {}   # (source, split) -> [arrays, count, documents]

    def add_document(self, source: str, split: str, paragraphs: list[str]) -> None:
        """Append one document (its paragraphs tokenized, then [SEP]) to its source's open shard."""
        ids = [i for piece in self.tokenizer.encode_batch(paragraphs) for i in piece] + [self.tokenizer.sep_id]
        buf = self._open.setdefault((source, split), [[], 0, 0])
        buf[0].append(np.asarray(ids, dtype=np.uint16))
        buf[1] += len(ids)
        buf[2] += 1
        if buf[1] >= self.shard_tokens:
            self._flush(source, split)

    def _flush(self, source: str, split: str) -> None:
        arrays, count, docs = self._open.pop((source, split), [[], 0, 0])
        if not count:
            return
        n = sum(1 for s in self.shards if s["source"] == source and s["split"] == split)
        data = np.concatenate(arrays).astype("<u2").tobytes()
        name = f"{source}-{split}-{n:04d}" + (_XZ if self.compress else _SUFFIX)
        stored = lzma.compress(data, preset=6) if self.compress else data
        (self.folder / SHARDS_DIR / name).write_bytes(stored)
        self.shards.append({"file": f"{SHARDS_DIR}/{name}", "source": source, "split": split, "tokens": count,
                            "documents": docs, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(stored)})

    def finish(self, settings: dict, weights: dict) -> dict:
        """Flush every open shard, save the tokenizer and write index.json; return the index."""
        for source, split in list(self._open):
            self._flush(source, split)
        self.tokenizer.save(self.folder / "tokenizer")
        index = {"version": INDEX_VERSION, "dtype": "uint16", "vocab_size": self.tokenizer.vocab_size,
                 "weights": weights, "settings": settings, "shards": self.shards,
                 "tokens": {split: sum(s["tokens"] for s in self.shards if s["split"] == split)
                            for split in ("train", "heldout")}}
        (self.folder / INDEX_FILE).write_text(json.dumps(index, indent=1) + "\n")
        return index


def open_index(folder: str | Path) -> dict:
    """index.json of a shard folder, checked: every shard present and whole (its size, or for a compressed one
    its unpacked size, matches the count recorded), so a truncated copy is refused before training starts."""
    folder = Path(folder).expanduser()
    path = folder / INDEX_FILE
    if not path.is_file():
        raise BertCoreError(f"{folder} is not a shard folder (no {INDEX_FILE}); build one with "
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
        if s["file"].endswith(_SUFFIX) and f.stat().st_size != 2 * s["tokens"]:
            raise BertCoreError(f"shard {s['file']} is truncated or damaged ({f.stat().st_size} bytes, expected "
                                f"{2 * s['tokens']}); copy it again or rebuild the corpus")
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
        raise BertCoreError(f"{folder / INDEX_FILE} lists shard {name!r}, which is not a file inside the corpus "
                            f"folder {folder}; a shard index names files inside its own folder only (as "
                            f"{SHARDS_DIR}/NAME.u16): rebuild the corpus or copy it again")
    return where


def shard_tokens(folder: str | Path, shard: dict) -> np.ndarray:
    """The token ids of one shard as a read-only memory map; a compressed shard is unpacked beside itself once
    (checked against its sha256) and mapped from there."""
    folder = Path(folder)
    f = shard_path(folder, shard)
    if shard["file"].endswith(_XZ):
        raw = shard_path(folder, {"file": shard["file"][: -len(_XZ)] + _SUFFIX})   # a link there is refused too
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
        raise BertCoreError(f"shard {shard['file']} is truncated or damaged ({f.stat().st_size} bytes, expected "
                            f"{2 * shard['tokens']}); copy it again or rebuild the corpus")
    if shard["tokens"] == 0:
        return np.zeros(0, dtype=np.uint16)
    return np.memmap(f, dtype="<u2", mode="r")


class ShardStream:
    """An endless, seeded, resumable iterator of masked NSP batches over a shard folder's `split`.

    `sources` limits it to some sources; `weights` (default: index.json's) repeats each source's windows per
    epoch (2.5 = every window twice and half of them a third time, by the seed). Without NSP (`nsp=False`, and
    always for the next-token objective "clm") a window is one segment, `[CLS] window [SEP]`."""

    STATE_VERSION = 1

    def __init__(self, folder: str | Path, split: str = "train", seq_len: int = 128, batch_size: int = 32,
                 seed: int = 0, mask_rate: float = MASK_RATE, sources: list[str] | None = None,
                 weights: dict | None = None, tokenizer: BertTokenizer | None = None, nsp: bool = True,
                 objective: str = "mlm"):
        if objective not in OBJECTIVES:
            raise BertCoreError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
        if nsp and not objective_has_nsp(objective):
            raise BertCoreError(f"the {objective} objective has no next-sentence prediction: turn NSP off")
        self.folder = Path(folder).expanduser()
        self.index = open_index(self.folder)
        if seq_len < 16:
            raise BertCoreError(f"seq_len must be at least 16, got {seq_len}")
        if batch_size < 1:
            raise BertCoreError(f"batch_size must be at least 1, got {batch_size}")
        self.tokenizer = tokenizer or BertTokenizer.load(self.folder / "tokenizer")
        if self.tokenizer.vocab_size != self.index["vocab_size"]:
            raise BertCoreError(f"the tokenizer has {self.tokenizer.vocab_size} tokens but the shards were made with "
                                f"{self.index['vocab_size']}; use the shard folder's own tokenizer")
        self.split, self.seq_len, self.batch_size = split, int(seq_len), int(batch_size)
        self.seed, self.mask_rate = int(seed), float(mask_rate)
        self.nsp, self.objective = bool(nsp), objective
        self._sources = list(sources) if sources else None
        self.weights = dict(self.index.get("weights") or {}) if weights is None else dict(weights)
        known = sorted({s["source"] for s in self.index["shards"]})
        unknown = [s for s in (sources or []) if s not in known]
        if unknown:
            raise BertCoreError(f"no source {', '.join(unknown)} in {self.folder}; it has {', '.join(known)}")
        self.shards = [s for s in self.index["shards"] if s["split"] == split and (not sources or
                                                                                    s["source"] in sources)]
        self.window = self.seq_len - special_tokens_count(pair=self.nsp)  # [CLS] A [SEP] B [SEP], or [CLS] text [SEP]
        self._counts = np.array([s["tokens"] // self.window for s in self.shards], dtype=np.int64)
        if not self._counts.sum():
            raise BertCoreError(f"{self.folder} has no {split} text of {self.seq_len} tokens or more")
        self._maps: dict[int, np.ndarray] = {}
        self.candidate_ids = torch.tensor(sorted(set(range(self.tokenizer.vocab_size))
                                                 - set(self.tokenizer.never_sample_ids)), dtype=torch.long)
        self.epoch, self.position = 0, 0
        self._plan_epoch: int | None = None
        self._plan = np.zeros((0, 2), dtype=np.int64)
        self._token_counts: torch.Tensor | None = None

    def resized(self, seq_len: int, batch_size: int) -> "ShardStream":
        """The same shards and settings cut into windows of another length and batched anew, at its epoch 0: the
        short-sequence phase of a run (TrainConfig.short_seq_length)."""
        return ShardStream(self.folder, self.split, seq_len, batch_size, self.seed, self.mask_rate, self._sources,
                           self.weights, self.tokenizer, self.nsp, self.objective)

    @property
    def num_tokens(self) -> int:
        return int(sum(s["tokens"] for s in self.shards))

    @property
    def token_counts(self) -> torch.Tensor:
        """How often each token id occurs in this split's shards (for the unigram baseline), counted once."""
        if self._token_counts is None:
            counts = np.zeros(self.tokenizer.vocab_size, dtype=np.int64)
            for i in range(len(self.shards)):
                counts += np.bincount(self._tokens(i), minlength=len(counts))[:len(counts)]
            self._token_counts = torch.from_numpy(counts)
        return self._token_counts

    def unigram_baseline(self, batches) -> dict:
        """The most-frequent-token baseline on `batches`, from these shards' token counts (see `unigram_baseline`)."""
        tok = self.tokenizer
        return unigram_baseline(self.token_counts, batches, never_ids=tok.special_ids - {tok.unk_id})

    def eval_batches(self, n_batches: int | None = None, seed: int = 0) -> list[Batch]:
        """Fixed batches for held-out evaluation (the same windows and masks for a seed): the first `n_batches`
        (all when None) of a stream over the same shards, every source at weight 1, seeded apart from training."""
        fixed = ShardStream(self.folder, self.split, self.seq_len, self.batch_size, _mix(seed, _EVAL_SALT),
                            self.mask_rate, self._sources, {}, self.tokenizer, self.nsp, self.objective)
        total = fixed.batches_per_epoch
        n = total if n_batches is None else min(int(n_batches), total)
        return [fixed.batch(0, j) for j in range(n)]

    # -- the order of an epoch -----------------------------------------------------------------------
    def plan(self, epoch: int) -> np.ndarray:
        """(shard, window) rows of epoch `epoch`, in the order read: each source's windows repeated by its weight
        (the fraction drawn by the seed), then shuffled by (seed, epoch)."""
        if self._plan_epoch != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            parts = []
            for i, (shard, n) in enumerate(zip(self.shards, self._counts)):
                w = float(self.weights.get(shard["source"], 1.0))
                whole, frac = int(w), w - int(w)
                rows = np.repeat(np.arange(n, dtype=np.int64), whole)
                if frac > 0:
                    rows = np.concatenate([rows, np.flatnonzero(rng.random(n) < frac)])
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

    def _window(self, row) -> np.ndarray:
        shard, w = int(row[0]), int(row[1])
        return np.asarray(self._tokens(shard)[w * self.window:(w + 1) * self.window], dtype=np.int64)

    # -- batches ------------------------------------------------------------------------------------
    def batch(self, epoch: int, j: int) -> Batch:
        """Batch `j` of epoch `epoch`: a pure function of the shards, the settings and the seed."""
        plan = self.plan(epoch)
        rows = plan[j * self.batch_size:(j + 1) * self.batch_size]
        gen = torch.Generator().manual_seed(_mix(self.seed, epoch, j))
        tok = self.tokenizer
        ids = torch.full((len(rows), self.seq_len), tok.pad_id, dtype=torch.long)
        types = torch.zeros_like(ids)
        if self.nsp:
            half = self.window // 2
            not_next = torch.rand(len(rows), generator=gen) < 0.5
            others = torch.randint(len(plan), (len(rows),), generator=gen)
            for r, row in enumerate(rows):
                win = self._window(row)
                a, b = win[:half], win[half:]
                if not_next[r]:
                    b = self._window(plan[int(others[r])])[half:]
                seq = np.concatenate([[tok.cls_id], a, [tok.sep_id], b, [tok.sep_id]])
                ids[r, :len(seq)] = torch.from_numpy(seq)
                types[r, len(a) + 2:len(seq)] = 1
        else:
            not_next = torch.zeros(len(rows), dtype=torch.bool)
            for r, row in enumerate(rows):
                seq = np.concatenate([[tok.cls_id], self._window(row), [tok.sep_id]])
                ids[r, :len(seq)] = torch.from_numpy(seq)
        attn = (ids != tok.pad_id).long()
        if self.objective == "clm":
            return Batch(input_ids=ids, attention_mask=attn, token_type_ids=types,
                         mlm_labels=next_token_targets(causal_labels(ids, attn)), next_sentence_label=not_next.long(),
                         decisions=torch.zeros_like(ids), original_ids=ids.clone(), causal=True)
        special = (ids == tok.cls_id) | (ids == tok.pad_id) | (ids == tok.sep_id) | (ids == tok.mask_id)
        m = mask_tokens(ids, special, gen, tok.vocab_size, tok.mask_id, candidate_ids=self.candidate_ids,
                        mask_rate=self.mask_rate)
        return Batch(input_ids=m.input_ids, attention_mask=attn, token_type_ids=types, mlm_labels=m.mlm_labels,
                     next_sentence_label=not_next.long(), decisions=m.decisions, original_ids=m.original_ids)

    def __iter__(self):
        return self

    def __next__(self) -> Batch:
        if self.position >= self.batches_per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
        b = self.batch(self.epoch, self.position)
        self.position += 1
        return b

    # -- resuming -----------------------------------------------------------------------------------
    def where(self) -> dict:
        """The shard file and window the next batch starts at (for logs and the resume test)."""
        epoch, position = self.epoch, self.position
        if position >= self.batches_per_epoch:
            epoch, position = epoch + 1, 0
        row = self.plan(epoch)[position * self.batch_size]
        self.plan(self.epoch)
        return {"epoch": epoch, "position": position, "shard": self.shards[int(row[0])]["file"],
                "token": int(row[1]) * self.window}

    def state_dict(self) -> dict:
        """Where the stream stands (JSON-able), with what must match for a resume to be exact."""
        return {"version": self.STATE_VERSION, "epoch": self.epoch, "position": self.position, "seed": self.seed,
                "seq_len": self.seq_len, "batch_size": self.batch_size, "split": self.split,
                "mask_rate": self.mask_rate, "weights": self.weights, "nsp": self.nsp, "objective": self.objective,
                "shards": hashlib.sha256("".join(s["sha256"] for s in self.shards).encode()).hexdigest()[:16]}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict()`; refused when the shards or settings differ (the batches would too)."""
        mine = self.state_dict()
        for key in ("seed", "seq_len", "batch_size", "split", "mask_rate", "shards", "weights", "nsp", "objective"):
            if key in state and state[key] != mine[key]:
                raise BertCoreError(f"the saved stream had {key}={state[key]!r} but this one has {mine[key]!r}; "
                                    "resume with the same shards and settings")
        try:
            epoch, position = int(state["epoch"]), int(state["position"])
        except (KeyError, TypeError, ValueError) as e:
            raise BertCoreError(f"the saved stream state is damaged ({e})") from e
        if epoch < 0 or position < 0:
            raise BertCoreError(f"the saved stream state has a negative epoch or position: {state!r}")
        self.epoch, self.position = epoch, position
