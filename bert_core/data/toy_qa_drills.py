"""Drills for the toy QA stories: one kind of question at a time (ASKED), on one-sentence-a-name passages.

Trained on the toy stories alone (answer_spans_data.toy_qa_task), the shipped models stay at 25-33% held-out exact
match; drilled on one kind at a time first, in DRILL_SHARES' order, each until it is learnt, they then read the
stories at 99-100% (docs/benchmarks.md, "A curriculum: one kind of question at a time, then the stories").
`sentence` (which the stories never ask, nor `happened`) comes first because `where` alone is a gamble at some seeds,
and clicks within a few hundred steps after it. A drill's names, places and finds are its own (not the stories'), so
that a drill teaches reading, not the stories' answers. Seeded, and returned as SQuAD v1.1 (drill_squad;
answer_spans_data.drill_data reads it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


NAMES = ("tom", "anna", "leo", "mary", "john", "sara", "ben", "lucy", "max", "emma", "jack", "nora", "sam", "kate",
         "paul", "rose")
PLACES = ("barn", "river", "forest", "market", "school", "castle", "garden", "beach", "valley", "church", "harbor",
          "bridge")
COLOURS = ("red", "blue", "green", "black", "white", "yellow", "brown", "grey")
THINGS = ("stone", "key", "box", "coin", "book", "hat", "cup", "shell")

QUESTION_KINDS = ("who", "where", "what", "finder")  # the toy stories' four questions a name, in their order
# ... and the drills' own two, which the stories never ask: a name's whole sentence, found by its name ("What did
# tom do?" -> "tom went to the barn": the span starts at the name the question gives) or by its place ("What
# happened at the barn?": the span ends there).
DRILL_KINDS = ("sentence", "happened", *QUESTION_KINDS)
# How a drill asks each kind, and what part of a name's sentence answers it (SpanWriter keys).
ASKED = {"who": ("Who went to the {place}?", "name"), "where": ("Where did {name} go?", "place"),
         "what": ("What did {name} find?", "thing"), "finder": ("Who found the {thing}?", "finder"),
         "sentence": ("What did {name} do?", "told"), "happened": ("What happened at the {place}?", "told")}

# The drills in training order, each with its share of the run's budget (steps, or seconds); each ends when it is
# learnt or at its deadline, where the shares so far add up (what one leaves unused goes to the next); the stories
# get the rest. A share lets most of a kind's seed-dependent clicks happen (docs/benchmarks.md, "The drills as the
# task's recipe").
DRILL_SHARES: tuple[tuple[str, float], ...] = (("sentence", 0.15), ("where", 0.12), ("happened", 0.12), ("who", 0.15),
                                               ("what", 0.12), ("finder", 0.12))
DRILL_PASSAGES = 3000
# The share of a drill's finds told in a sentence of their own ("tom went to the barn. tom found a red stone."),
# as the stories tell half of theirs: drilled on "... and found ..." only, a model answered the stories' "Who found"
# with another character's name (docs/benchmarks.md, "What held the candidate back on the stories").
OWN_SENTENCE = 0.5
# The stories' verbs (answer_spans_data reads them from here): a drill with finds draws its verbs from them, so that
# "Who found ...?" is asked of "ran to the beach and spotted a shell" as the stories ask it, not of "found" alone.
GO_VERBS = ("went", "walked", "ran", "hurried", "travelled", "went")
FIND_VERBS = ("found", "found", "discovered", "spotted")
# A drill is learnt when its last training steps (training.finetune.MASTERY_STEPS) answer this share right on
# average: once a kind clicks, its training batches are 98-100% right.
MASTERY = 0.95


@dataclass(frozen=True)
class Drill:
    """One drill of a curriculum: a kind of question (DRILL_KINDS), its share of the run's budget, and the training
    score that ends it. Its questions are made when asked for (answer_spans_data.drill_data)."""

    kind: str
    share: float
    seed: int = 0
    passages: int = DRILL_PASSAGES
    mastery: float | None = MASTERY   # the training score that ends it early (None: it runs to its deadline)
    own_sentence: float = OWN_SENTENCE   # the share of its finds (what, finder) told in a sentence of their own
    story_verbs: bool = True   # its finds told with the stories' verbs (GO_VERBS, FIND_VERBS), not went and found

    @property
    def name(self) -> str:
        return f"drill: {self.kind}"

    @property
    def example(self) -> str:
        return ASKED[self.kind][0].format(name="tom", place="barn", thing="red stone")


def toy_qa_drills(seed: int = 0) -> tuple[Drill, ...]:
    return tuple(Drill(kind, share, seed) for kind, share in DRILL_SHARES)


def drill_squad(passages: int = DRILL_PASSAGES, seed: int = 0, find: bool = False,
                questions: tuple[str, ...] = ("who",), own_sentence: float = 0.0, story_verbs: bool = False) -> dict:
    """Drill passages as SQuAD v1.1: 2-3 names, each in one sentence ("tom went to the barn."), asked `questions`.
    With `find` (implied by what and finder) each goes on to a find ("... and found a red stone."), drawn from a
    second generator so that the names, places and questions stay those of the plain file; `own_sentence` of the
    finds get a sentence of their own, and `story_verbs` the stories' verbs, from a third generator."""
    questions = tuple(questions)
    if not questions or set(questions) - set(DRILL_KINDS):
        raise ValueError(f"questions are some of {DRILL_KINDS}, not {questions}")
    find = find or bool({"what", "finder"} & set(questions))
    # The finds of a passage differ, so that "Who found the red stone?" has one answer.
    distinct = bool(set(questions) - {"who", "sentence", "happened"})
    rng, finds, forms = random.Random(seed), random.Random(seed + 1), random.Random(seed + 2)
    data = []
    for i in range(passages):
        k = rng.randint(2, 3)
        names, places = rng.sample(NAMES, k), rng.sample(PLACES, k)
        if find and distinct:
            things = [f"{c} {t}" for c, t in zip(finds.sample(COLOURS, k), finds.sample(THINGS, k))]
        else:
            things = [f"{finds.choice(COLOURS)} {finds.choice(THINGS)}" for _ in range(k)] if find else []
        writer = SpanWriter()
        for j, (name, place) in enumerate(zip(names, places)):
            own = find and forms.random() < own_sentence
            go, found = (forms.choice(GO_VERBS), forms.choice(FIND_VERBS)) if find and story_verbs else ("went", "found")
            went = [(name, ("name", j)), f" {go} to ", (f"the {place}", ("place", j))]
            if own:   # what the name did, and happened at the place: the first sentence
                writer.add((went, ("told", j)), ".")
                writer.add((name, ("finder", j)), f" {found} ", (f"a {things[j]}", ("thing", j)), ".")
            else:
                writer.add((went + ([f" and {found} ", (f"a {things[j]}", ("thing", j))] if find else []), ("told", j)),
                           ".")
        qas = []
        for j, (name, place) in enumerate(zip(names, places)):
            for q, kind in enumerate(QUESTION_KINDS + ("sentence", "happened")):
                if kind in questions:
                    template, part = ASKED[kind]
                    answer, start = writer.spans.get((part, j)) or writer.spans[("name", j)]   # finder: the name
                    qas.append({"id": f"{i}-{j}" + ("" if questions == ("who",) else f"-{q}"),
                                "question": template.format(name=name, place=place, thing=things[j] if find else ""),
                                "answers": [{"text": answer, "answer_start": start}]})
        data.append({"title": "drill", "paragraphs": [{"context": writer.text, "qas": qas}]})
    return {"version": "1.1", "data": data}


class SpanWriter:
    """Writes a passage sentence by sentence, remembering where each marked piece begins: the toy stories and the
    drills write their answers this way, so that every answer is a span of its passage by construction."""

    def __init__(self):
        self.text = ""
        self.spans: dict[tuple[str, int], tuple[str, int]] = {}  # (what, character) -> (text, start)

    def add(self, *pieces) -> None:
        """Append a sentence of strings and (piece or pieces, key) pairs whose spans are remembered."""
        if self.text:
            self.text += " "
        self._write(pieces)

    def _write(self, pieces) -> None:
        for piece in pieces:
            if isinstance(piece, str):
                self.text += piece
                continue
            inner, key = piece
            start = len(self.text)
            self._write([inner] if isinstance(inner, str) else inner)
            self.spans.setdefault(key, (self.text[start:], start))


def question_kind(question: str) -> str:
    """Which of DRILL_KINDS `question` asks (the stories' wordings and the drills' alike)."""
    q = question.lower()
    if q.startswith("what did") and q.endswith(" do?"):
        return "sentence"
    if q.startswith("what happened at"):
        return "happened"
    if q.startswith(("where", "which place")):
        return "where"
    if q.startswith("what"):
        return "what"
    return "finder" if q.startswith("who found") else "who"
