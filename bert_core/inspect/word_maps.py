"""One word's contextual vectors across sentences, in 2-D by layer (PCA): the map, its default sense sentences, how
far apart the senses lie, and the map at each probe snapshot of a run, so the senses can be watched separating.
Torch-free: a ProbeSnapshot carries its maps to the server, which reads them without torch (tests/test_layers.py);
word_map_vectors computes them from a model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bert_core.inspect.built_in_text import TEXT


# Sentences with two senses of a few words, written for this project (built_in_text.json): the map's default sets,
# (sense, sentence) pairs. A student may type their own; the word must appear in each sentence.
SENSE_SENTENCES: dict[str, list[tuple[str, str]]] = {
    word: [tuple(row) for row in rows] for word, rows in TEXT["sense_sentences"].items()}


@dataclass
class WordMap:
    """One word's contextual vector in each sentence, after the embeddings (layer 0) and each layer, in 2-D."""

    word: str
    sentences: list[str]
    labels: list[str]                 # a sense or group label per sentence ("" when none was given)
    points: np.ndarray                # [L + 1, N, 2] PCA coordinates, layer by layer
    explained: np.ndarray             # [L + 1] share of the variance the two axes keep
    skipped: list[str]                # sentences the word was not found in


def pca_2d(x: np.ndarray) -> tuple[np.ndarray, float]:
    """The rows of `x` on their first two principal axes, and the share of the variance kept; each axis's sign fixed
    (its largest loading positive), so a map does not flip from one layer to the next for nothing."""
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(0, keepdims=True)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    axes = vt[:2]
    axes *= np.sign(axes[np.arange(len(axes)), np.abs(axes).argmax(1)])[:, None]
    coords = centred @ axes.T
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    total = float((s ** 2).sum())
    return coords.astype(np.float32), float((s[:2] ** 2).sum() / total) if total > 0 else 0.0


def separation(points: np.ndarray, labels) -> float:
    """How far apart labelled groups lie on a map: centres' distance over the mean spread (0 for one group)."""
    labels = np.asarray(labels)
    groups = [points[labels == g] for g in dict.fromkeys(labels.tolist())]
    if len(groups) < 2:
        return 0.0
    centres = np.stack([g.mean(0) for g in groups])
    between = np.mean([np.linalg.norm(a - b) for i, a in enumerate(centres) for b in centres[i + 1:]])
    within = np.mean([np.linalg.norm(g - g.mean(0), axis=1).mean() for g in groups])
    return float(between / within) if within > 0 else float("inf")


# ------------------------------------------------------------------------------------------ during training

TIMELAPSE_WORDS = tuple(SENSE_SENTENCES)   # every built-in word: a snapshot's maps cannot be drawn again later


def word_map_timelapse(snapshots, word: str) -> list[tuple[int, WordMap]]:
    """(step, map) for each snapshot that mapped `word`, oldest first."""
    return [(s.step, s.word_maps[word]) for s in snapshots if s.word_maps and word in s.word_maps]


def separation_by_step(timeline: list[tuple[int, WordMap]]) -> tuple[list[int], np.ndarray]:
    """The steps and, per step, the senses' separation on each layer's map ([steps, L + 1])."""
    return ([step for step, _ in timeline],
            np.array([[separation(layer, m.labels) for layer in m.points] for _, m in timeline]))


def word_maps_to_json(maps: dict[str, WordMap] | None) -> dict | None:
    """A snapshot's maps as JSON (coordinates rounded to 4 decimals: figures, not training), for a run's record."""
    if not maps:
        return None
    return {w: {"sentences": m.sentences, "labels": m.labels, "points": np.round(m.points, 4).tolist(),
                "explained": np.round(m.explained, 4).tolist(), "skipped": m.skipped} for w, m in maps.items()}


def word_maps_from_json(data) -> dict[str, WordMap] | None:
    """word_maps_to_json read back; None for a record without maps (one written before they were kept)."""
    if not isinstance(data, dict) or not data:
        return None
    return {w: WordMap(word=w, sentences=list(m["sentences"]), labels=list(m["labels"]),
                       points=np.asarray(m["points"], dtype=np.float32),
                       explained=np.asarray(m["explained"], dtype=np.float32), skipped=list(m["skipped"]))
            for w, m in data.items()}
