"""Every lower-case word the toy grammar (bert_core.data.toy_grammar) can write, for the tests that check what the
grammar, its probes and the pages show stay inside it."""

from bert_core.data.toy_grammar import (
    COLOURS,
    COMMON_ADJECTIVES,
    COMMON_VERBS,
    DAYS,
    FEELINGS,
    FEMALE_NAMES,
    MALE_NAMES,
    NUMBERS,
    PRONOUNS,
    TIMES,
    TOPICS,
)


def toy_vocabulary() -> set[str]:
    words = {"the", "a", "an", "some", "these", "those", "this", "that", "every", "on", "in", "near", "at", "as",
             "is", "are", "who", "lives", "works", "called", "there", "has", "and", "it", "very", "much", "more",
             "than", "anything", "friend", "with", "because", "when", "night", "goes", "home", "sleeps", "end",
             "together", "next", "day", "comes", "back", "to", "likes", "loves", "needs", ",", "."}
    for t in TOPICS.values():
        words.update(t["places"], t["adjectives"])
        for pair in t["people"] + t["things"] + t["verbs"]:
            words.update(pair)
    for pair in COMMON_VERBS:
        words.update(pair)
    for group in (COMMON_ADJECTIVES, COLOURS, FEELINGS, TIMES, DAYS, NUMBERS):
        words.update(group)
    words.update(n.lower() for n in MALE_NAMES + FEMALE_NAMES)
    for p in PRONOUNS.values():
        words.update(p)
    return words
