"""The built-in `toy` corpus: short stories from a small probabilistic English grammar, offline and seeded.

What a model can learn from it, and why each piece is there:
- subject-verb agreement ("the farmer feeds" / "the farmers feed"), also across a relative clause
  ("the sailors who mend the nets are tired"), so a masked verb or noun needs the words on its right too;
- every thing has its own adjective ("the muddy pig"), so a masked adjective is read off the noun after it;
- pronouns that refer back to the story's named character ("Anna ... she ... her"), so a masked
  pronoun needs a name several sentences away;
- one topic per story (farm, sea, castle...), and within it a few things and verbs that recur, so a
  masked noun is guessable from the other sentences and NSP is learnable (a random B comes from
  another story, usually another topic and another name).
The vocabulary is about 510 words and no single word is more than about 10% of the tokens, so the
most-frequent-token baseline stays low (under 10% masked-token accuracy) while a model that reads
the context on both sides can fill most masks: guessing from the word on each side alone gets about 60%.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from bert_core.errors import BertCoreError

# topic -> places, (occupation, plural), (object, plural), (verb, 3rd person singular), adjectives: data, in
# toy_topics.json beside this module (pairs read back as tuples).
TOPICS: dict[str, dict[str, list]] = {
    topic: {field: [tuple(x) if isinstance(x, list) else x for x in words] for field, words in fields.items()}
    for topic, fields in json.loads(Path(__file__).with_name("toy_topics.json").read_text(encoding="utf-8")).items()}
# Every thing has its own adjective ("the muddy pig", "the stormy wave"): a masked adjective is read from the
# noun on its right, a masked noun narrowed by the adjective on its left.
ADJECTIVE_OF = {thing: t["adjectives"][i % len(t["adjectives"])]
                for t in TOPICS.values() for i, (thing, _) in enumerate(t["things"])}
MALE_NAMES = ["Tom", "Sam", "Leo", "Max", "Ben", "Jack", "Oscar", "Hugo", "Felix", "Omar",
              "Ivan", "Pablo", "Ravi", "Kenji", "Peter", "Liam"]
FEMALE_NAMES = ["Anna", "Mia", "Lucy", "Emma", "Sara", "Nora", "Alice", "Julia", "Rosa", "Aisha",
                "Yuki", "Maria", "Chloe", "Ella", "Hannah", "Zoe"]
# Verbs and adjectives that fit any topic, so a topic word is a clue, not a certainty.
COMMON_VERBS = [("like", "likes"), ("see", "sees"), ("find", "finds"), ("love", "loves"), ("watch", "watches"),
                ("need", "needs"), ("want", "wants"), ("carry", "carries")]
COMMON_ADJECTIVES = ["big", "small", "old", "new", "heavy", "little"]
COLOURS = ["red", "blue", "yellow", "white", "black", "brown", "grey", "orange"]
FEELINGS = ["happy", "tired", "worried", "calm", "excited", "sleepy", "angry", "glad"]
TIMES = ["morning", "evening", "afternoon", "day", "week", "spring", "summer", "winter"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
NUMBERS = ["two", "three", "four", "five", "six", "many", "some", "several"]
PRONOUNS = {"m": ("he", "him", "his"), "f": ("she", "her", "her")}


class _Story:
    """One story's fixed choices: topic, hero (name and gender), friend; sentences draw on them."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.topic_name = rng.choice(sorted(TOPICS))
        self.topic = TOPICS[self.topic_name]
        self.gender = rng.choice("mf")
        self.he, self.him, self.his = PRONOUNS[self.gender]
        self.name = rng.choice(MALE_NAMES if self.gender == "m" else FEMALE_NAMES)
        self.friend_gender = rng.choice("mf")
        pool = [n for n in (MALE_NAMES if self.friend_gender == "m" else FEMALE_NAMES) if n != self.name]
        self.friend = rng.choice(pool)
        self.job = rng.choice(self.topic["people"])
        self.place = rng.choice(self.topic["places"])
        # Each story keeps to a few of its topic's things and verbs, each thing with its own adjective, so a
        # masked noun, verb or adjective can be read off the rest of the story (on either side of the mask).
        self.things = rng.sample(self.topic["things"], 3)
        self.verbs = rng.sample(self.topic["verbs"], 2)
        self.adjective_of = {t[0]: ADJECTIVE_OF[t[0]] for t in self.things}
        self.pet = self.things[0]
        self.time = rng.choice(TIMES)

    # pieces ------------------------------------------------------------------------------------
    def subject(self):
        """The hero as a subject: mostly the pronoun, sometimes the name again."""
        return self.name if self.rng.random() < 0.25 else self.he

    def verb(self, third_person: bool, topical_p=0.8):
        pool = self.verbs if self.rng.random() < topical_p else COMMON_VERBS
        base, s = self.rng.choice(pool)
        return s if third_person else base

    def adjective(self, topical_p=0.6):
        r = self.rng.random()
        if r < topical_p:
            return self.rng.choice(self.topic["adjectives"])
        return self.rng.choice(COMMON_ADJECTIVES if r < topical_p + (1 - topical_p) / 2 else COLOURS)

    def place_(self):
        return self.place if self.rng.random() < 0.6 else self.rng.choice(self.topic["places"])

    def people(self, plural: bool):
        sing, plur = self.rng.choice(self.topic["people"])
        return plur if plural else sing

    def article(self, noun_plural: bool):
        if noun_plural:
            return self.rng.choice(["the", "the", "the", "some", "these"])
        return self.rng.choice(["the", "the", "the", "a", "this"])

    def np(self, plural=None):
        """A noun phrase with an agreeing determiner and maybe an adjective."""
        plural = self.rng.random() < 0.5 if plural is None else plural
        pair = self.rng.choice(self.things)
        words = [self.article(plural)]
        if self.rng.random() < 0.7:
            words.append(self.adjective_of[pair[0]])
        words.append(pair[1] if plural else pair[0])
        return words

    # sentences ---------------------------------------------------------------------------------
    def intro(self):
        r = self.rng.random()
        a_or_an = "an" if self.job[0][0] in "aeiou" else "a"
        if r < 0.5:
            return [self.name, "is", a_or_an, self.job[0], "who", "lives", "near", "the", self.place, "."]
        if r < 0.8:
            return [self.name, "works", "as", a_or_an, self.job[0], "at", "the", self.place, "."]
        return ["there", "is", a_or_an, self.job[0], "called", self.name, "at", "the", self.place, "."]

    def pet_sentence(self):
        adj = self.adjective_of[self.pet[0]]
        return [self.he, "has", "a", adj, self.pet[0], "and", self.he, "loves", "it", "very", "much", "."]

    def routine(self):
        time = self.time if self.rng.random() < 0.8 else self.rng.choice(TIMES)
        if self.rng.random() < 0.5:
            return ["every", time, self.subject(), self.verb(True), *self.np(), "."]
        return ["on", self.rng.choice(DAYS), self.subject(), self.verb(True), *self.np(), "in", "the", self.place_(), "."]

    def possessive(self):
        thing = self.pet[0] if self.rng.random() < 0.5 else self.rng.choice(self.things)[0]
        return [self.subject(), self.rng.choice(["likes", "loves", "needs"]), self.his, self.adjective_of[thing],
                thing, "more", "than", "anything", "."]

    def friend_helps(self):
        return [self.friend, ",", self.his, "friend", ",", self.verb(True), *self.np(), "with", self.him, "."]

    def crowd(self):
        many = self.rng.random() < 0.5
        number = [self.rng.choice(NUMBERS)] if many else [self.rng.choice(["the", "a"])]
        who = self.people(many)
        if number[0] == "a" and who[0] in "aeiou":
            number = ["an"]
        return [*number, who, self.verb(not many), *self.np(), "near", "the", self.place_(), "."]

    def relative(self):
        many = self.rng.random() < 0.5
        who = self.people(many)
        be = "are" if many else "is"
        return ["the", who, "who", self.verb(not many), *self.np(), be, self.rng.choice(FEELINGS), "."]

    def feeling(self):
        many = self.rng.random() < 0.5
        return [self.subject(), "is", self.rng.choice(FEELINGS), "because", *self.np(many),
                "are" if many else "is", self.adjective(), "."]

    def when(self):
        return ["when", self.he, self.verb(True), *self.np(), ",", self.friend, self.verb(True), *self.np(), "."]

    def closing(self):
        r = self.rng.random()
        if r < 0.4:
            return ["at", "night", self.name, "goes", "home", "and", self.he, "sleeps", "."]
        if r < 0.7:
            return ["in", "the", "end", self.he, "and", self.friend, self.verb(False), *self.np(), "together", "."]
        return ["the", "next", "day", self.name, "comes", "back", "to", "the", self.place, "."]

    def sentences(self):
        middle = [self.routine, self.possessive, self.friend_helps, self.crowd, self.relative, self.feeling,
                  self.when, self.pet_sentence, self.routine, self.crowd]
        n = self.rng.randint(3, 7)
        body = [self.rng.choice(middle)() for _ in range(n)]
        return [self.intro(), *body, self.closing()]


def _render(words: list[str]) -> str:
    text = " ".join(words).replace(" ,", ",").replace(" .", ".")
    return text[0].upper() + text[1:]


def generate_toy_documents(num_documents: int = 2000, seed: int = 0) -> list[list[str]]:
    """`num_documents` stories of 5-9 sentences each, deterministic for a seed (corpora.generate_toy_corpus wraps
    them as the `toy` Corpus)."""
    if not isinstance(num_documents, int) or num_documents < 1:
        raise BertCoreError(f"num_documents must be a positive whole number, got {num_documents!r}")
    rng = random.Random(seed)
    return [[_render(s) for s in _Story(rng).sentences()] for _ in range(num_documents)]

