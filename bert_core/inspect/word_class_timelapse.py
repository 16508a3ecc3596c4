"""What each layer knows, as a run trains: at each probe snapshot, the part-of-speech probe of inspect.layer_probes
fitted on every layer of the model at that step, on a capped sample of CoNLL-2000 (the run never downloads it: when
it is not on the machine, the snapshot has none), and the same probe on a randomly initialised model of the run's
shape, scored once per run (per shape: a run that grows is scored again). The Train page draws the accuracies
against the step. Torch-free at import (the server's mirror of a run reads these)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Fewer sentences than How BERT computes fits on (200 + 100): a snapshot holds the training up while it is taken.
# 100 + 50 are about 2,400 words to fit on and 1,000 held out; about 0.3 s for the tiny on a CPU thread.
SNAPSHOT_FIT, SNAPSHOT_TEST = 100, 50


@dataclass(frozen=True)
class WordClassProbe:
    """The part-of-speech probe's held-out accuracy at the embeddings (index 0) and after each layer, of the model
    at a snapshot and of a random model of its shape; `majority` always guesses the commonest tag."""

    accuracy: tuple[float, ...]
    random_model: tuple[float, ...]
    majority: float
    test_words: int
    seconds: float          # reading the sentences through the model and solving the probes (not the random one)

    def to_json(self) -> dict:
        return {"accuracy": [round(a, 5) for a in self.accuracy],
                "random_model": [round(a, 5) for a in self.random_model], "majority": round(self.majority, 5),
                "test_words": self.test_words, "seconds": round(self.seconds, 4)}

    @classmethod
    def from_json(cls, d) -> "WordClassProbe | None":
        """A recorded probe; None for none, or one that is not whole (a record from before, or hand-edited)."""
        try:
            probe = cls(tuple(float(a) for a in d["accuracy"]), tuple(float(a) for a in d["random_model"]),
                        float(d["majority"]), int(d["test_words"]), float(d["seconds"]))
        except (KeyError, TypeError, ValueError):
            return None
        values = (*probe.accuracy, *probe.random_model, probe.majority)
        ok = probe.accuracy and len(probe.accuracy) == len(probe.random_model) and all(map(math.isfinite, values))
        return probe if ok else None


def has_word_classes(corpus: str) -> bool:
    """Whether a run on `corpus` fits the probes: English text does; the toy corpus's made-up words have no tags."""
    return str(corpus).strip().lower() != "toy"


def word_class_timeline(snaps) -> tuple[list[int], np.ndarray, np.ndarray, float] | None:
    """(steps, [snapshots, L + 1] accuracy, the newest snapshot's random-model curve, its majority) over the
    snapshots that carry the probe and have the newest one's number of layers (a run that grew: since it grew);
    None when none does."""
    probed = [(s.step, s.word_classes) for s in snaps if s.word_classes is not None]
    if not probed:
        return None
    depth = len(probed[-1][1].accuracy)
    probed = [(step, p) for step, p in probed if len(p.accuracy) == depth]
    return ([step for step, _ in probed], np.array([p.accuracy for _, p in probed]),
            np.array(probed[-1][1].random_model), probed[-1][1].majority)


def layer_name(i: int) -> str:
    return "the embeddings" if i == 0 else f"layer {i}"


def reading(steps, accuracy: np.ndarray, random_model: np.ndarray) -> str:
    """One line from the numbers: the layer that knows word classes best at the newest snapshot, against random."""
    best = int(np.argmax(accuracy[-1]))
    first = f"; {accuracy[0, best]:.0%} at step {steps[0]:,}" if len(steps) > 1 else ""
    return (f"{layer_name(best).capitalize()} knows word classes best: {accuracy[-1, best]:.0%} of held-out words "
            f"at step {steps[-1]:,}{first}; a random model of this shape {random_model[best]:.0%}.")


def toy_run(metadata: dict | None) -> bool:
    """Whether a run's recorded corpora are all ones without word classes (the toy corpus)."""
    corpora = (metadata or {}).get("corpora") or []
    return bool(corpora) and not any(has_word_classes(c) for c in corpora)
