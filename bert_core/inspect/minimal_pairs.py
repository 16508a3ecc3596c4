"""A small built-in set of English minimal pairs for the grammar check, written for this project.

Each pair differs in one place: the first sentence is good English, the second is not. They cover six kinds of
rule, a few each, in plain words that a model trained on a small English corpus has seen. They are for a class to
try, not a benchmark: a few dozen pairs say little about a model, and the tiny shipped models get many wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

AGREEMENT, ANAPHORA, ARGUMENTS, DETERMINERS, NEGATION, ISLANDS = (
    "agreement", "anaphora", "argument structure", "determiners", "negation", "islands")
CATEGORIES = (AGREEMENT, ANAPHORA, ARGUMENTS, DETERMINERS, NEGATION, ISLANDS)


@dataclass(frozen=True)
class MinimalPair:
    """A good sentence, its broken twin, the kind of rule it tests, and the rule in a few words."""

    good: str
    bad: str
    category: str
    rule: str


def _pairs(category: str, rows: list[tuple[str, str, str]]) -> list[MinimalPair]:
    return [MinimalPair(good, bad, category, rule) for good, bad, rule in rows]


MINIMAL_PAIRS: tuple[MinimalPair, ...] = tuple(
    _pairs(AGREEMENT, [
        ("the dogs bark at night .", "the dogs barks at night .", "a plural subject takes a plural verb"),
        ("the girl walks to school .", "the girl walk to school .", "a singular subject takes -s in the present"),
        ("the keys to the old house are lost .", "the keys to the old house is lost .",
         "the verb agrees with 'keys', not with the nearer 'house'"),
        ("the man who owns the farms is rich .", "the man who owns the farms are rich .",
         "the verb agrees with 'man' across the relative clause"),
        ("there were many people in the room .", "there was many people in the room .",
         "after 'there', the verb agrees with what follows it"),
        ("these books were written in french .", "these books was written in french .",
         "'these' and a plural noun take 'were'"),
        ("my brother has two children .", "my brother have two children .", "a singular subject takes 'has'"),
    ])
    + _pairs(ANAPHORA, [
        ("the boy hurt himself .", "the boy hurt herself .", "a reflexive agrees with its subject in gender"),
        ("the women saw themselves in the mirror .", "the women saw herself in the mirror .",
         "a reflexive agrees with its subject in number"),
        ("she said that he would help her .", "she said that he would help herself .",
         "a reflexive needs its antecedent in its own clause"),
        ("the children washed themselves .", "the children washed itself .",
         "'children' is plural and a person: 'themselves'"),
        ("john thinks that mary likes him .", "john thinks that mary likes himself .",
         "'himself' cannot reach past 'mary' to 'john'"),
    ])
    + _pairs(ARGUMENTS, [
        ("the baby slept .", "the baby slept the bed .", "'sleep' takes no object"),
        ("she gave her friend a book .", "she gave her friend .", "'give' wants both a receiver and a thing"),
        ("he put the cup on the table .", "he put the cup .", "'put' needs a place"),
        ("the guests arrived early .", "the guests arrived the hotel early .", "'arrive' takes no object"),
        ("they discussed the plan .", "they discussed about the plan .", "'discuss' takes its object directly"),
        ("the teacher told us a story .", "the teacher said us a story .", "'say' does not take a receiver"),
    ])
    + _pairs(DETERMINERS, [
        ("he ate an apple .", "he ate a apple .", "'an' before a vowel sound"),
        ("she bought a new car .", "she bought an new car .", "'a' before a consonant sound"),
        ("there are many cats in the garden .", "there are much cats in the garden .",
         "'many' for things you count"),
        ("we did not have much money .", "we did not have many money .", "'much' for things you do not count"),
        ("each student has a desk .", "each students has a desk .", "'each' takes a singular noun"),
        ("those houses are old .", "that houses are old .", "'those' with a plural noun"),
        ("both of the towns are small .", "both of the town are small .", "'both of' takes a plural noun"),
    ])
    + _pairs(NEGATION, [
        ("nobody has ever seen it .", "somebody has ever seen it .", "'ever' needs a negative before it"),
        ("i did not see anyone .", "i did see anyone .", "'anyone' here needs a negative"),
        ("he has not arrived yet .", "he has arrived yet .", "'yet' at the end needs a negative (or a question)"),
        ("she never said anything .", "she always said anything .", "'anything' needs a negative"),
        ("they do not like it at all .", "they do like it at all .", "'at all' needs a negative"),
        ("no student could answer any question .", "every student could answer any question .",
         "'any' here needs a negative before it"),
    ])
    + _pairs(ISLANDS, [
        ("what did you think that she bought ?", "what did you wonder whether she bought ?",
         "no question word out of a 'whether' clause"),
        ("who did you see a picture of ?", "who did you see the man and ?",
         "nothing can be taken out of an 'and' phrase"),
        ("what did he say that they found ?", "what did he meet the man who found ?",
         "no question word out of a relative clause"),
        ("who did she believe that he met ?", "who did she believe the claim that he met ?",
         "no question word out of 'the claim that'"),
        ("what did you read before dinner ?", "what did you sleep before reading ?",
         "no question word out of an adverb clause"),
    ])
)


def pairs_in(category: str | None = None) -> list[MinimalPair]:
    """The built-in pairs, all of them or one category's."""
    return [p for p in MINIMAL_PAIRS if category is None or p.category == category]
