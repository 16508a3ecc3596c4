"""The text the inspection pages start from, kept as data in built_in_text.json beside this module (the grammar
check's minimal pairs, the candidate page examples, the word maps' sense sentences, the English probes and the
probes' stopwords): written for this project, edited without touching code, read once."""

import json
from dataclasses import dataclass
from pathlib import Path

TEXT: dict = json.loads(Path(__file__).with_name("built_in_text.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class MinimalPair:
    """A grammar check's built-in English pair: a good sentence, its broken twin, the kind of rule it tests (six
    kinds), and the rule in a few words. For a class to try, not a benchmark (a few dozen pairs say little)."""

    good: str
    bad: str
    category: str
    rule: str


CATEGORIES = tuple(TEXT["minimal_pairs"])   # agreement, anaphora, argument structure, determiners, negation, islands
MINIMAL_PAIRS: tuple[MinimalPair, ...] = tuple(MinimalPair(good, bad, category, rule)
                                               for category, rows in TEXT["minimal_pairs"].items()
                                               for good, bad, rule in rows)
