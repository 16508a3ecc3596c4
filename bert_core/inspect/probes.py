"""Probe snapshots for the training time-lapse (what the model fills into fixed [MASK] sentences and one sentence's
attention, at chosen steps, in bounded memory), and the probe sentences, drawn from the held-out part of the corpus
trained on (a content word masked): the kind of text the model learns from, never seen."""

from __future__ import annotations

import json
import random
import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bert_core.data.corpora import load_corpus, split_heldout
from bert_core.data.downloads import SOURCES
from bert_core.errors import BertCoreError
from bert_core.inspect.built_in_text import TEXT
from bert_core.inspect.word_class_timelapse import WordClassProbe
from bert_core.inspect.word_maps import WordMap
from bert_core.paths import cache_dir, shared_data_dir
from bert_core.training.train_spec import check_probe_sentences

# English fallbacks, for a model whose corpus cannot be read here (e.g. a Hugging Face download).
DEFAULT_PROBES = tuple(TEXT["english_probes"]["sentences"])
DEFAULT_ATTENTION_PROBE = TEXT["english_probes"]["attention"]
PROBE_COUNT = 4
# Function words: never the masked word of a probe (they teach little, and any corpus is full of them).
STOPWORDS = frozenset(TEXT["stopwords"].split())
_STRIP = ".,;:!?\"'()[]{}`-_"
# A speaker's name that leads a line of a play ("POMPEY: Here comes ...", "KING RICHARD III: ..."): not part of what
# is said, and no sentence a student would type, so a probe drops it.
_SPEAKER = re.compile(r"^[A-Z][A-Z']+(?: [A-Z][A-Z']+)*:\s+(?=\S)")


@dataclass(frozen=True)
class CorpusProbes:
    """Probe sentences from held-out text: [MASK] sentences, an attention sentence, a following pair, a source."""

    sentences: tuple[str, ...]
    attention_sentence: str
    pair: tuple[str, str]
    source: str

    @classmethod
    def from_dict(cls, d: dict) -> "CorpusProbes":
        """Probes a run recorded in its metadata; BertCoreError when a field is missing or of the wrong kind."""
        try:
            sentences = tuple(str(x) for x in d["sentences"])
            pair = tuple(str(x) for x in d["pair"])
            probes = cls(sentences, str(d["attention_sentence"]), (pair[0], pair[1]), str(d.get("source", "")))
        except (KeyError, TypeError, IndexError) as exc:
            raise BertCoreError(f"recorded probes are incomplete: {exc}") from exc
        if not sentences or not all("[mask]" in x.lower() for x in sentences) or not probes.attention_sentence:
            raise BertCoreError("recorded probes need [MASK] sentences and an attention sentence")
        return probes


ENGLISH_PROBES = CorpusProbes(DEFAULT_PROBES, DEFAULT_ATTENTION_PROBE, tuple(TEXT["english_probes"]["pair"]),
                              "built-in English sentences")


def _core(word: str) -> str:
    return word.strip(_STRIP)


def word_counts(documents) -> Counter:
    """Lower-cased word counts (punctuation stripped) over documents of sentences."""
    return Counter(_core(w).lower() for doc in documents for s in doc for w in s.split() if _core(w))


def mask_content_word(sentence: str, counts: Counter | None = None, min_count: int = 1) -> tuple[str, str] | None:
    """(the sentence with its last content word replaced by [MASK], that word), or None when the sentence is not
    5 to 16 words long or has none. A content word is not the first, not capitalised (a name), not a function word,
    has 3 letters or more and is seen `min_count` times in `counts`; the last is usually the noun the rest predicts."""
    words = sentence.split()
    if not 5 <= len(words) <= 16:
        return None
    pick = next((i for i in range(len(words) - 1, 0, -1) if (core := _core(words[i])) and len(core) >= 3
                 and core.isalpha() and core.islower() and core not in STOPWORDS
                 and (counts is None or counts[core] >= min_count)), None)
    if pick is None:
        return None
    core = _core(words[pick])
    words[pick] = words[pick].replace(core, "[MASK]", 1)
    return " ".join(words), core


def probes_from_documents(documents, count: int = PROBE_COUNT, seed: int = 0, counts: Counter | None = None,
                          source: str = "") -> CorpusProbes:
    """`count` [MASK] sentences, each from another document with another masked word where the text allows, an
    attention sentence of 6-12 words and a pair of consecutive sentences, chosen with `seed` from held-out
    `documents`; `counts` (by default the documents' own) keeps rare words from being the blank."""
    docs = [[_SPEAKER.sub("", s) for s in d] for d in documents if d]
    counts = counts if counts is not None else word_counts(docs)
    rng = random.Random(seed)
    order = list(range(len(docs)))
    rng.shuffle(order)
    shuffled = {di: rng.sample(docs[di], len(docs[di])) for di in order}
    sentences, words, used = [], set(), set()
    # Strictest first: a word seen 3 times and not yet masked, from an unused document; then relax.
    for min_count, distinct, fresh_doc in ((3, True, True), (1, True, True), (1, False, True), (1, False, False)):
        for di in order:
            if fresh_doc and di in used:
                continue
            for sent in shuffled[di]:
                if len(sentences) >= count:
                    break
                found = mask_content_word(sent, counts, min_count)
                if found is None or found[0] in sentences or (distinct and found[1] in words):
                    continue
                sentences.append(found[0])
                words.add(found[1])
                used.add(di)
                break
    if not sentences:
        raise BertCoreError("no sentence of 5-16 words with a content word to mask was found in the held-out text")
    attention = next((s for di in order for s in shuffled[di] if 6 <= len(s.split()) <= 12), None)
    attention = attention or next(s for d in docs for s in d if s.split())
    pair = next(((docs[di][i], docs[di][i + 1]) for di in order for i in range(len(docs[di]) - 1)
                 if 4 <= len(docs[di][i].split()) <= 20 and 4 <= len(docs[di][i + 1].split()) <= 20), None)
    if pair is None:  # documents of one sentence each: any two neighbours
        flat = [s for d in docs for s in d]
        pair = (flat[0], flat[1]) if len(flat) > 1 else ENGLISH_PROBES.pair
    return CorpusProbes(tuple(sentences), attention, pair, source)


def heldout_probes(corpus, seed: int = 0, fraction: float = 0.1, count: int = PROBE_COUNT) -> CorpusProbes:
    """Probes from the held-out part of `corpus`, split as a training run with this seed splits it."""
    _, held = split_heldout(corpus, fraction=fraction, seed=seed)
    return probes_from_documents(held.documents, count, seed, source=f"held-out part of {corpus.name}")


def readable_offline(spec: str, allow_paths: bool = True) -> bool:
    """Whether corpus `spec` can be read without a download: toy, a named corpus in the shared data folder or the
    download cache, or a file (with `allow_paths` False only one in the shared data folder: a public server never
    opens a path that an uploaded checkpoint names)."""
    key = str(spec).strip()
    if key.lower() == "toy":
        return True
    shared = shared_data_dir()
    src = SOURCES.get(key.lower())
    if src is not None:
        return bool((shared is not None and src.shared_copy and (shared / src.shared_copy).is_file())
                    or (cache_dir() / src.filename).is_file())
    path = Path(key).expanduser()
    if not allow_paths and (shared is None or not path.resolve().is_relative_to(shared.resolve())):
        return False
    return path.is_file()


def probes_for_corpus(spec: str, seed: int = 0, fraction: float = 0.1, count: int = PROBE_COUNT) -> CorpusProbes:
    """heldout_probes of corpus `spec`; BertCoreError unless it can be read without a download."""
    if not readable_offline(spec):
        raise BertCoreError(f"the corpus {spec!r} is not on this machine yet; its probe sentences are drawn when "
                            "training starts")
    return heldout_probes(load_corpus(spec, seed=seed), seed, fraction, count)


def recorded_probes(metadata: dict | None, allow_paths: bool = True) -> CorpusProbes | None:
    """The probes a run recorded in its metadata, else ones drawn again from the held-out part of its recorded
    corpora when all can be read here without a download (`allow_paths` as readable_offline), else None."""
    meta = metadata or {}
    if isinstance(meta.get("probes"), dict):
        try:
            return CorpusProbes.from_dict(meta["probes"])
        except BertCoreError:
            pass
    record = meta.get("heldout")
    if not isinstance(record, dict) or not record.get("corpora"):
        # No split recorded (an older or hand-made checkpoint): the corpora it names, split as `train` would
        corpora = meta.get("corpora")
        if not isinstance(corpora, list) or not corpora:
            return None
        record = {"seed": 0, "fraction": 0.1, "corpora": [{"spec": c} for c in corpora]}
    specs = [c.get("spec") for c in record["corpora"] if isinstance(c, dict)]
    if not specs or not all(isinstance(s, str) and readable_offline(s, allow_paths) for s in specs):
        return None
    try:
        return probes_from_documents(heldout_documents(record, specs), PROBE_COUNT, int(record.get("seed", 0)),
                                     source="held-out part of " + " + ".join(specs))
    except BertCoreError:
        return None


def heldout_documents(record: dict, specs) -> list:
    """The held-out documents of corpora `specs`, split as a run's `heldout` record (seed, fraction) says."""
    seed, fraction = int(record.get("seed", 0)), float(record.get("fraction", 0.1))
    return [d for spec in specs for d in split_heldout(load_corpus(spec, seed=seed), fraction=fraction,
                                                       seed=seed)[1].documents]


def probes_key(metadata: dict | None) -> str:
    """A cache key for `recorded_probes`: what it reads from the metadata."""
    meta = metadata or {}
    return json.dumps({"probes": meta.get("probes"), "heldout": meta.get("heldout")}, sort_keys=True, default=str)


@dataclass
class ProbeSnapshot:
    """Probe results at one step: per sentence, per [MASK], the top-k (token, probability); and attention maps."""

    step: int
    predictions: list[list[list[tuple[str, float]]]]
    attention_tokens: list[str] | None
    attention: np.ndarray | None  # float16 [layers, heads, S, S] (half precision keeps the store small)
    word_maps: dict[str, WordMap] | None = None  # each built-in sense word's map (word_map_vectors)
    # The part-of-speech probe per layer (word_class_timelapse); None: an English run without CoNLL-2000 here, a toy
    # run (its words have no tags), or a record from before.
    word_classes: WordClassProbe | None = None


class ProbeStore:
    """Snapshots of fixed probe sentences taken during training; thread-safe. Past `max_snapshots`, every other one
    (never the first or the newest) is dropped: the store spans the whole run at a coarser pace, as a time-lapse
    needs."""

    def __init__(self, sentences=DEFAULT_PROBES, attention_sentence: str | None = DEFAULT_ATTENTION_PROBE,
                 top_k: int = 5, max_snapshots: int = 32, word_classes: bool = False):
        sentences = list(sentences)
        if not sentences and attention_sentence is None:
            raise BertCoreError("give at least one probe sentence or an attention sentence")
        check_probe_sentences(sentences)
        if max_snapshots < 2:
            raise BertCoreError(f"max_snapshots must be at least 2, got {max_snapshots}")
        self.sentences, self.attention_sentence, self.top_k, self.max_snapshots = (sentences, attention_sentence,
                                                                                   top_k, max_snapshots)
        self._snapshots: list[ProbeSnapshot] = []
        # Each snapshot fits the part-of-speech probes too (English-text runs: the toy corpus's words have no tags).
        # Kept: the random model's curve per shape, scored once per run (layer_probes.snapshot_word_classes).
        self.word_classes: dict | None = {} if word_classes else None
        self._lock = threading.Lock()

    def snapshot(self, model, tokenizer, step: int) -> ProbeSnapshot:
        """Run the probes through `model` (its train/eval mode is restored), store and return the snapshot."""
        # Imported here, not at the top: they load torch, and the server imports this module without it (TORCH_FREE).
        from bert_core.inspect import inspection, layer_probes, word_map_vectors

        # A causal model cannot fill a [MASK] (inspection.CAUSAL_CANNOT_FILL): its snapshots keep the attention only.
        predictions = [
            [] if inspection.is_causal(model)
            else [p.candidates for p in inspection.fill_mask(model, tokenizer, s, top_k=self.top_k)]
            for s in self.sentences
        ]
        tokens = attention = None
        if self.attention_sentence is not None:
            result = inspection.attention_maps(model, tokenizer, self.attention_sentence)
            tokens, attention = result.tokens, result.attentions.astype(np.float16)
        # Every built-in word's map, made now: the weights of this step are not kept for later (Train page).
        return self.add(ProbeSnapshot(step=step, predictions=predictions, attention_tokens=tokens, attention=attention,
                                      word_maps=word_map_vectors.snapshot_word_maps(model, tokenizer) or None,
                                      word_classes=None if self.word_classes is None else
                                      layer_probes.snapshot_word_classes(model, tokenizer, self.word_classes)))

    def add(self, snap: ProbeSnapshot) -> ProbeSnapshot:
        """Store a snapshot (taken here or received from a training process), thinning when full."""
        with self._lock:
            self._snapshots.append(snap)
            if len(self._snapshots) > self.max_snapshots:
                middle = self._snapshots[1:-1]
                self._snapshots = [self._snapshots[0], *middle[1::2], self._snapshots[-1]]
        return snap

    def snapshots(self) -> list[ProbeSnapshot]:
        """The stored snapshots, oldest first."""
        with self._lock:
            return list(self._snapshots)

    def __len__(self) -> int:
        with self._lock:
            return len(self._snapshots)
