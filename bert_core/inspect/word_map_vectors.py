"""The word map computed from a model (word_maps): for the How BERT computes page and, at each probe snapshot of a
run, the Train page's time-lapse (every built-in sense word's map, made while that step's weights exist)."""

from __future__ import annotations

import numpy as np
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.attention_steps import encode_for_steps
from bert_core.inspect.kit import hidden_states
from bert_core.inspect.word_maps import SENSE_SENTENCES, TIMELAPSE_WORDS, WordMap, pca_2d


def word_map(model, tokenizer, word: str, sentences, labels=None) -> WordMap:
    """PCA maps of `word`'s contextual vectors (the mean over its pieces) across `sentences`, one per layer."""
    if not isinstance(word, str) or not word.strip():
        raise BertCoreError("type the word to follow")
    word_ids = tokenizer.encode(word.strip())
    if tokenizer.unk_id in word_ids:   # [UNK] would match any other unknown word in a sentence
        raise BertCoreError(f"{word.strip()!r} is not in this model's vocabulary: its pieces include [UNK]")
    labels = list(labels) if labels is not None else [""] * len(sentences)
    found, used, used_labels, skipped = [], [], [], []
    for sentence, label in zip(sentences, labels):
        if not sentence.strip():
            continue
        ids = encode_for_steps(model, tokenizer, sentence)[0]
        # Where the word's pieces first occur after [CLS], or None.
        start = next((i for i in range(1, len(ids) - len(word_ids) + 1) if ids[i:i + len(word_ids)] == word_ids),
                     None) if word_ids else None
        if start is None:
            skipped.append(sentence)
            continue
        found.append((ids, start))
        used.append(sentence)
        used_labels.append(label)
    if len(used) < 3:
        raise BertCoreError(f"{word!r} was found in {len(used)} sentence(s); a map needs at least 3 with the word in "
                            "them")
    # One padded batch, not a pass per sentence: a training run maps the built-in words at every probe snapshot.
    hidden = torch.stack(hidden_states(model, tokenizer, [ids for ids, _ in found])).float()
    vectors = [hidden[:, b, start:start + len(word_ids)].mean(1) for b, (_, start) in enumerate(found)]
    stacked = torch.stack(vectors, 1).cpu().numpy()  # [L + 1, N, H]
    maps = [pca_2d(layer) for layer in stacked]
    return WordMap(word=word.strip(), sentences=used, labels=used_labels, points=np.stack([m[0] for m in maps]),
                   explained=np.array([m[1] for m in maps], dtype=np.float32), skipped=skipped)


def sense_word_map(model, tokenizer, word: str) -> WordMap:
    """The map of built-in `word` across its sense sentences, exactly as the How BERT computes page draws it."""
    if word not in SENSE_SENTENCES:
        raise BertCoreError(f"{word!r} has no built-in sentences; pick one of {', '.join(SENSE_SENTENCES)}")
    rows = SENSE_SENTENCES[word]
    return word_map(model, tokenizer, word, [s for _, s in rows], [g for g, _ in rows])


def snapshot_word_maps(model, tokenizer, words=TIMELAPSE_WORDS) -> dict[str, WordMap]:
    """Each built-in word's map for a probe snapshot, from `model` as it is now: the weights are not kept (a run's
    snapshots would hold dozens of copies), so every word the page offers is mapped now (one not found in three
    sentences left out)."""
    maps = {}
    for word in words:
        try:
            maps[word] = sense_word_map(model, tokenizer, word)
        except BertCoreError:
            continue
    return maps
