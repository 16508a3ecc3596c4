"""A small built-in set of English minimal pairs for the grammar check, written for this project.

Each pair differs in one place: the first sentence is good English, the second is not. They cover six kinds of
rule, a few each, in plain words that a model trained on a small English corpus has seen. They are for a class to
try, not a benchmark: a few dozen pairs say little about a model, and the tiny shipped models get many wrong.
"""

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
