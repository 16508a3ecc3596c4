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
        ("The dogs bark at night.", "The dogs barks at night.", "a plural subject takes a plural verb"),
        ("The girl walks to school.", "The girl walk to school.", "a singular subject takes -s in the present"),
        ("The keys to the old house are lost.", "The keys to the old house is lost.",
         "the verb agrees with 'keys', not with the nearer 'house'"),
        ("The man who owns the farms is rich.", "The man who owns the farms are rich.",
         "the verb agrees with 'man' across the relative clause"),
        ("There were many people in the room.", "There was many people in the room.",
         "after 'there', the verb agrees with what follows it"),
        ("These books were written in French.", "These books was written in French.",
         "'these' and a plural noun take 'were'"),
        ("My brother has two children.", "My brother have two children.", "a singular subject takes 'has'"),
    ])
    + _pairs(ANAPHORA, [
        ("The boy hurt himself.", "The boy hurt herself.", "a reflexive agrees with its subject in gender"),
        ("The women saw themselves in the mirror.", "The women saw herself in the mirror.",
         "a reflexive agrees with its subject in number"),
        ("She said that he would help her.", "She said that he would help herself.",
         "a reflexive needs its antecedent in its own clause"),
        ("The children washed themselves.", "The children washed itself.",
         "'children' is plural and a person: 'themselves'"),
        ("John thinks that Mary likes him.", "John thinks that Mary likes himself.",
         "'himself' cannot reach past 'mary' to 'john'"),
    ])
    + _pairs(ARGUMENTS, [
        ("The baby slept.", "The baby slept the bed.", "'sleep' takes no object"),
        ("She gave her friend a book.", "She gave her friend.", "'give' wants both a receiver and a thing"),
        ("He put the cup on the table.", "He put the cup.", "'put' needs a place"),
        ("The guests arrived early.", "The guests arrived the hotel early.", "'arrive' takes no object"),
        ("They discussed the plan.", "They discussed about the plan.", "'discuss' takes its object directly"),
        ("The teacher told us a story.", "The teacher said us a story.", "'say' does not take a receiver"),
    ])
    + _pairs(DETERMINERS, [
        ("He ate an apple.", "He ate a apple.", "'an' before a vowel sound"),
        ("She bought a new car.", "She bought an new car.", "'a' before a consonant sound"),
        ("There are many cats in the garden.", "There are much cats in the garden.",
         "'many' for things you count"),
        ("We did not have much money.", "We did not have many money.", "'much' for things you do not count"),
        ("Each student has a desk.", "Each students has a desk.", "'each' takes a singular noun"),
        ("Those houses are old.", "That houses are old.", "'those' with a plural noun"),
        ("Both of the towns are small.", "Both of the town are small.", "'both of' takes a plural noun"),
    ])
    + _pairs(NEGATION, [
        ("Nobody has ever seen it.", "Somebody has ever seen it.", "'ever' needs a negative before it"),
        ("I did not see anyone.", "I did see anyone.", "'anyone' here needs a negative"),
        ("He has not arrived yet.", "He has arrived yet.", "'yet' at the end needs a negative (or a question)"),
        ("She never said anything.", "She always said anything.", "'anything' needs a negative"),
        ("They do not like it at all.", "They do like it at all.", "'at all' needs a negative"),
        ("No student could answer any question.", "Every student could answer any question.",
         "'any' here needs a negative before it"),
    ])
    + _pairs(ISLANDS, [
        ("What did you think that she bought?", "What did you wonder whether she bought?",
         "no question word out of a 'whether' clause"),
        ("Who did you see a picture of?", "Who did you see the man and?",
         "nothing can be taken out of an 'and' phrase"),
        ("What did he say that they found?", "What did he meet the man who found?",
         "no question word out of a relative clause"),
        ("Who did she believe that he met?", "Who did she believe the claim that he met?",
         "no question word out of 'the claim that'"),
        ("What did you read before dinner?", "What did you sleep before reading?",
         "no question word out of an adverb clause"),
    ])
)


def pairs_in(category: str | None = None) -> list[MinimalPair]:
    """The built-in pairs, all of them or one category's."""
    return [p for p in MINIMAL_PAIRS if category is None or p.category == category]
