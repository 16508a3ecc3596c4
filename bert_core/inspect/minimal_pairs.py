"""The grammar check's built-in English minimal pairs (built_in_text.json), each a good sentence and its broken twin,
six kinds of rule in plain words: for a class to try, not a benchmark (a few dozen pairs say little of a model)."""

from __future__ import annotations

from dataclasses import dataclass

from bert_core.inspect.built_in_text import TEXT


@dataclass(frozen=True)
class MinimalPair:
    """A good sentence, its broken twin, the kind of rule it tests, and the rule in a few words."""

    good: str
    bad: str
    category: str
    rule: str


CATEGORIES = tuple(TEXT["minimal_pairs"])   # agreement, anaphora, argument structure, determiners, negation, islands
MINIMAL_PAIRS: tuple[MinimalPair, ...] = tuple(MinimalPair(good, bad, category, rule)
                                               for category, rows in TEXT["minimal_pairs"].items()
                                               for good, bad, rule in rows)
