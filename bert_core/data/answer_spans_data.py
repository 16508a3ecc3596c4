"""Extractive question answering data (SQuAD v1.1): files read with checks, a toy task, passage-level splits,
sliding-window features, the best span from logits and the official scores. The window and the answer search follow
Hugging Face's `run_qa.py` and the scores reproduce `evaluate-v1.1.py`, so numbers compare with published ones. A
file with a mistake is refused naming the place (`data[3].paragraphs[0].qas[5]`), never silently dropped; only
SQuAD v2's unanswerable questions are skipped, and counted in `QAData.notes`."""

from __future__ import annotations

import dataclasses
import heapq
import json
import random
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bert_core.data.batching import read_upload
from bert_core.data.splits import RowData, split_data
from bert_core.data.toy_grammar import (
    ADJECTIVE_OF,
    COLOURS,
    FEELINGS,
    FEMALE_NAMES,
    MALE_NAMES,
    TOPICS,
)
from bert_core.data.toy_qa_drills import FIND_VERBS, GO_VERBS, Drill, SpanWriter, drill_squad, toy_qa_drills
from bert_core.errors import BertCoreError
from bert_core.model.tokenization import special_tokens_count

MAX_SQUAD_BYTES = 100 * 1024 * 1024


@dataclass
class QAExample:
    """One question about a passage, with its gold answers as character spans of the passage."""

    id: str
    question: str
    context: str
    answers: list[str]  # gold answer texts (SQuAD dev has several per question, train one)
    answer_starts: list[int]  # character offset into `context` of each answer
    title: str = ""


@dataclass
class QAData(RowData):
    """Questions with their passages; questions on the same passage share the very same `context` string."""

    ROWS = ("examples",)
    examples: list[QAExample]
    source: str = ""
    notes: list[str] = field(default_factory=list)
    # Simpler tasks to train on first, in order (toy_qa_drills.Drill: the toy stories' curriculum); a split's parts
    # (subset) do not carry them: the task made of the split does (finetune.split_task).
    drills: tuple = ()

    @property
    def num_passages(self) -> int:
        return len({e.context for e in self.examples})

    def subset(self, indices, source_suffix: str = "") -> QAData:
        return dataclasses.replace(super().subset(indices, source_suffix), drills=())


# -- reading SQuAD files -----------------------------------------------------------------------------------------

# What a JSON value is, in words: checked in this order (a bool is an int to Python, an int a number to JSON).
_JSON_KINDS = ((type(None), "null"), (bool, "true/false"), ((int, float), "a number"), (str, "a string"),
               (list, "a list"), (dict, "an object"))
_KIND_NAMES = {str: "a string", list: "a list", dict: "an object", int: "a whole number"}


def _json_kind(value) -> str:
    return next((name for kind, name in _JSON_KINDS if isinstance(value, kind)), type(value).__name__)


def _get(obj, key: str, kind: type, where: str, source: str, default=None):
    if key not in obj:
        if default is not None:
            return default
        raise BertCoreError(f"{source}: {where} has no '{key}' field; SQuAD v1.1 needs one there. "
                            "Add it, or check that the file is in SQuAD format.")
    value = obj[key]
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)  # some exports write 177.0
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BertCoreError(f"{source}: {where}.{key} should be {_KIND_NAMES[kind]}, not {_json_kind(value)}. "
                            "Fix that field (SQuAD v1.1 format).")
    return value


def _object(value, where: str, source: str) -> dict:
    if not isinstance(value, dict):
        raise BertCoreError(f"{source}: {where} should be an object, not {_json_kind(value)}. "
                            "Check that the file is in SQuAD v1.1 format.")
    return value


def _answer_span(context: str, answer, where: str, source: str) -> tuple[str, int]:
    """(text, start) of an answer checked against its context; surrounding whitespace on either side is forgiven."""
    answer = _object(answer, where, source)
    text, start = _get(answer, "text", str, where, source), _get(answer, "answer_start", int, where, source)
    if not text.strip():
        raise BertCoreError(f"{source}: {where} has an empty answer text; give the answer's words.")
    if not 0 <= start < len(context):
        raise BertCoreError(f"{source}: {where}: answer_start {start} is outside its context "
                            f"({len(context)} characters); fix answer_start.")
    if context[start:start + len(text)] == text:
        return text, start
    stripped = text.strip()
    lead = len(text) - len(text.lstrip())
    skip = len(context[start:]) - len(context[start:].lstrip())
    for s in (start, start + lead, start + skip):
        if context[s:s + len(stripped)] == stripped:
            return stripped, s
    found = context[start:start + len(text)]
    raise BertCoreError(f"{source}: {where}: answer {text!r} is not at answer_start {start} of its context "
                        f"(found {found!r}); fix answer_start or the text.")


def parse_squad(obj_or_text, source: str = "<json>") -> QAData:
    """Check and read SQuAD v1.1 data: a parsed dict, or a file's JSON text; every answer must be at its
    answer_start."""
    if isinstance(obj_or_text, (str, bytes, bytearray)):
        return load_squad(obj_or_text.encode() if isinstance(obj_or_text, str) else obj_or_text, source)
    obj = obj_or_text
    if not isinstance(obj, dict) or "data" not in obj:
        got = "an object without a 'data' field" if isinstance(obj, dict) else _json_kind(obj)
        raise BertCoreError(f"{source} is not in SQuAD format: the top level should be an object with a 'data' list "
                            f"of articles, but it is {got}. Give a SQuAD v1.1 file (e.g. train-v1.1.json).")
    articles = _get(obj, "data", list, "the top level", source)
    examples: list[QAExample] = []
    seen_ids: dict[str, str] = {}
    skipped = passages = 0
    for a, article in enumerate(articles):
        where_a = f"data[{a}]"
        article = _object(article, where_a, source)
        title = _get(article, "title", str, where_a, source, default="")
        for p, paragraph in enumerate(_get(article, "paragraphs", list, where_a, source)):
            where_p = f"{where_a}.paragraphs[{p}]"
            paragraph = _object(paragraph, where_p, source)
            context = _get(paragraph, "context", str, where_p, source)
            if not context.strip():
                raise BertCoreError(f"{source}: {where_p} has an empty context; give the passage text or remove it.")
            asked = False
            for q, qa in enumerate(_get(paragraph, "qas", list, where_p, source)):
                where_q = f"{where_p}.qas[{q}]"
                qa = _object(qa, where_q, source)
                qid = qa.get("id")
                if isinstance(qid, int) and not isinstance(qid, bool):
                    qid = str(qid)
                if not isinstance(qid, str) or not qid.strip():
                    raise BertCoreError(f"{source}: {where_q} has no 'id' (or it is not a string); "
                                        "every question needs a unique id.")
                where_q += f" (id {qid!r})"
                if qid in seen_ids:
                    raise BertCoreError(f"{source}: {where_q} repeats the id of {seen_ids[qid]}; "
                                        "question ids must be unique.")
                seen_ids[qid] = where_q
                question = _get(qa, "question", str, where_q, source)
                if not question.strip():
                    raise BertCoreError(f"{source}: {where_q} has an empty question; write the question or remove it.")
                if qa.get("is_impossible") is True:  # SQuAD v2: no answer in the passage
                    skipped += 1
                    continue
                answers = _get(qa, "answers", list, where_q, source)
                if not answers:
                    raise BertCoreError(f"{source}: {where_q} has no answers; a SQuAD v1.1 question needs at least "
                                        "one (mark it is_impossible if it is a SQuAD v2 unanswerable question).")
                spans = [_answer_span(context, answer, f"{where_q}.answers[{k}]", source)
                         for k, answer in enumerate(answers)]
                examples.append(QAExample(id=qid, question=question, context=context, answers=[t for t, _ in spans],
                                          answer_starts=[s for _, s in spans], title=title))
                asked = True
            passages += asked
    if not examples:
        why = f" (all {skipped} are SQuAD v2 unanswerable questions)" if skipped else ""
        raise BertCoreError(f"{source} has no answerable questions{why}. Give a SQuAD v1.1 file with questions "
                            "and answers.")
    notes = [f"{len(examples)} questions on {passages} passages from {len(articles)} articles"]
    if skipped:
        notes.append(f"skipped {skipped} unanswerable SQuAD v2 question(s) (is_impossible); "
                     "this reader keeps SQuAD v1.1's answerable questions")
    return QAData(examples=examples, source=source, notes=notes)


def load_squad(path_or_bytes: str | Path | bytes, name: str = "upload.json") -> QAData:
    text, name, _ = read_upload(path_or_bytes, name, "SQuAD", MAX_SQUAD_BYTES, "a SQuAD-format .json file",
                                "Give a SQuAD-format JSON file (an object with a 'data' list).",
                                "Use a sample of the articles (SQuAD v1.1's whole training file is about 30 MB).")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BertCoreError(f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}). "
                            "Check that it is a complete SQuAD-format .json file.") from None
    except (ValueError, RecursionError) as exc:  # e.g. nesting deeper than the parser allows
        raise BertCoreError(f"{name} could not be read as JSON ({type(exc).__name__}). "
                            "Check that it is a SQuAD-format .json file.") from None
    return parse_squad(obj, source=name)


# -- the built-in toy task ---------------------------------------------------------------------------------------

_NUMBERS = ["two", "three", "four", "five", "some", "several"]
_WEATHER = ["It was a {adj} {time}.", "The sky was {colour} and the wind was {wind}.",
            "It rained for most of the {time}.", "The sun was shining all {time}."]
_FEELINGS = ["{name} felt {feeling}.", "{name} was {feeling} all day.", "Everyone was {feeling}.",
             "{name} and {other} were {feeling}."]


def _thing_phrase(rng: random.Random, noun: tuple[str, str]) -> tuple[str, str]:
    """(what was found, e.g. 'two salty boats', and how a question names it, e.g. 'the salty boats')."""
    plural = rng.random() < 0.4
    r = rng.random()
    adjective = ADJECTIVE_OF[noun[0]] if r < 0.6 else rng.choice(COLOURS) if r < 0.8 else ""
    word = noun[1] if plural else noun[0]
    named = f"{adjective} {word}".strip()
    if plural:
        determiner = rng.choice(_NUMBERS)
    else:
        determiner = "an" if named[0] in "aeiou" else "a"
    return f"{determiner} {named}", f"the {named}"


def _toy_story(rng: random.Random) -> tuple[str, str, list[tuple[str, str, str, str]]]:
    """(topic, story text, [(question, answer, answer_start)...]) of one story."""
    topic = rng.choice(sorted(TOPICS))
    k = rng.randint(2, 4)
    names = rng.sample(MALE_NAMES + FEMALE_NAMES, k)
    # Places must differ so "Who went to the barn?" has one answer; a topic has three, so a fourth character
    # goes to a place of another topic.
    places = rng.sample(TOPICS[topic]["places"], min(k, 3))
    if k == 4:
        other = rng.choice(sorted(set(TOPICS) - {topic}))
        places.append(rng.choice(TOPICS[other]["places"]))
        rng.shuffle(places)
    nouns = rng.sample(TOPICS[topic]["things"], k)
    finds = [_thing_phrase(rng, noun) for noun in nouns]

    blocks = []
    for c in range(k):
        name, place, find = (names[c], ("name", c)), (f"the {places[c]}", ("place", c)), (finds[c][0], ("thing", c))
        go, found = rng.choice(GO_VERBS), rng.choice(FIND_VERBS)
        # Each character's place and find follow their name closely, so a question is answered by matching its name
        # to the passage and reading the words next to it: stories that reached an answer through a pronoun stayed
        # near 25% exact match (docs/benchmarks.md, "Token tags and answer spans").
        if rng.random() < 0.5:
            # "Who found ...?" points at the name of the sentence that says so, not at the one before it.
            blocks.append([[name, f" {go} to ", place, "."], [(names[c], ("finder", c)), f" {found} ", find, "."]])
        else:
            blocks.append([[name, f" {go} to ", place, f" and {found} ", find, "."]])
    # Distractors (weather, feelings) sit between the characters' sentences; the feelings name the characters
    # too, so a name alone does not point at the answer sentence.
    for _ in range(rng.randint(1, 2)):
        if rng.random() < 0.5:
            line = rng.choice(_WEATHER).format(adj=rng.choice(["windy", "cold", "sunny", "grey", "warm", "quiet"]),
                                               time=rng.choice(["morning", "day", "afternoon", "week"]),
                                               colour=rng.choice(["grey", "blue", "white"]),
                                               wind=rng.choice(["cold", "gentle", "strong"]))
        else:
            a, b = rng.sample(names, 2)
            line = rng.choice(_FEELINGS).format(name=a, other=b, feeling=rng.choice(FEELINGS))
        blocks.insert(rng.randint(0, len(blocks)), [[line]])
    writer = SpanWriter()
    if rng.random() < 0.4:
        writer.add(", ".join(names[:-1]) + f" and {names[-1]} were friends.")
    for block in blocks:
        for sentence in block:
            writer.add(*sentence)

    questions = []
    for c in range(k):
        name, place, (_, named) = names[c], places[c], finds[c]
        questions.append((rng.choice(["Where did {n} go?", "Where did {n} go to?", "Which place did {n} visit?"])
                          .format(n=name), ("place", c)))
        questions.append((rng.choice(["What did {n} find?", "What did {n} find at the {p}?"])
                          .format(n=name, p=place), ("thing", c)))
        questions.append((rng.choice(["Who went to the {p}?", "Who visited the {p}?"]).format(p=place), ("name", c)))
        questions.append((f"Who found {named}?", ("finder", c) if ("finder", c) in writer.spans else ("name", c)))
    return topic, writer.text, [(question, *writer.spans[key]) for question, key in questions]


def toy_qa_task(seed: int = 0, num_stories: int = 600, drills: bool = True) -> QAData:
    """The built-in offline QA task: short stories in the toy grammar's words where 2-4 named characters each go
    somewhere and find something (weather and feelings between them), four questions a character about who went
    where and found what; the title is the story's topic. With `drills` the task comes with its drills
    (toy_qa_drills), which fine-tuning trains on before the stories: without them the shipped models stay near 30%.
    """
    if not isinstance(num_stories, int) or isinstance(num_stories, bool) or num_stories < 2:
        raise BertCoreError(f"the toy QA task needs at least 2 stories (a whole number), got {num_stories!r}.")
    rng = random.Random(seed)
    examples = []
    for s in range(num_stories):
        topic, story, questions = _toy_story(rng)
        for q, (question, answer, start) in enumerate(questions):
            assert story[start:start + len(answer)] == answer, (story, answer, start)  # the writer's own invariant
            examples.append(QAExample(id=f"toy{seed}-{s:05d}-{q:02d}", question=question, context=story,
                                      answers=[answer], answer_starts=[start], title=topic))
    return QAData(examples=examples, source=f"toy QA stories (seed {seed})",
                  notes=[f"{len(examples)} questions on {num_stories} stories"],
                  drills=toy_qa_drills(seed) if drills else ())


def drill_data(drill: Drill) -> QAData:
    return parse_squad(drill_squad(drill.passages, drill.seed, questions=(drill.kind,),
                                   own_sentence=drill.own_sentence, story_verbs=drill.story_verbs),
                       source=f"{drill.name} ({drill.passages} passages, seed {drill.seed})")


# -- splits ------------------------------------------------------------------------------------------------------

def split_by_passage(data: QAData, train_size: int | None = None, val_size: int | None = None, *, seed: int = 0,
                     val_fraction: float = 0.1) -> tuple[QAData, QAData]:
    """A seeded split that keeps every passage's questions on one side: otherwise the score would measure
    memorised passages, not reading."""
    return split_data(data, train_size, val_size, seed=seed, val_fraction=val_fraction, unit="questions",
                      groups=[e.context for e in data.examples])


# -- sliding-window features -------------------------------------------------------------------------------------

@dataclass
class QAFeature:
    """One window of one question's passage, as `[CLS] question [SEP] window [SEP]`, with the answer's tokens."""

    example: int  # index into QAData.examples
    input_ids: list[int]
    token_type_ids: list[int]  # 0 for [CLS] question [SEP], 1 for the window and its [SEP]
    offsets: list[tuple[int, int] | None]  # character span in the context of each window token, None elsewhere
    start_position: int  # token index of the first answer's first token; 0 ([CLS]) when not wholly in the window
    end_position: int  # token index of its last token (inclusive); 0 likewise

    @property
    def targets(self) -> dict:
        return {"start_positions": self.start_position, "end_positions": self.end_position}


def _answer_tokens(offsets: list[tuple[int, int]], start_char: int, end_char: int) -> tuple[int, int] | None:
    """(first, last) context token of the characters [start_char, end_char), or None when no token covers them."""
    first = next((i for i, (_, e) in enumerate(offsets) if e > start_char), None)
    last = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < end_char), None)
    if first is None or last is None or first > last:
        return None
    return first, last


def encode_qa(data: QAData, tokenizer, max_length: int = 256, doc_stride: int = 64,
              max_question_tokens: int = 64) -> list[QAFeature]:
    """Features for every question (cut to `max_question_tokens`) and each window of its context; consecutive
    windows share `doc_stride` tokens, so an answer cut by one window's edge is whole in the next. Labels point at
    the first gold answer in the windows that hold it whole, and at [CLS] (0) in the others, as HF's
    `prepare_train_features` does."""
    for label, value, least in (("max_length", max_length, 8), ("doc_stride", doc_stride, 0),
                                ("max_question_tokens", max_question_tokens, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise BertCoreError(f"{label} must be a whole number of at least {least}, got {value!r}.")
    limit = tokenizer.model_max_length
    if max_length > limit:
        raise BertCoreError(f"max_length={max_length} is longer than the model's {limit} positions; "
                            f"use at most {limit}.")
    if not data.examples:
        raise BertCoreError("there are no questions to encode.")
    fast = tokenizer.tokenizer
    questions = [e.ids[:max_question_tokens]
                 for e in fast.encode_batch([x.question for x in data.examples], add_special_tokens=False)]
    longest = max(len(q) for q in questions)
    specials = special_tokens_count(pair=True)   # [CLS] question [SEP] context [SEP]
    if max_length - longest - specials <= doc_stride:
        raise BertCoreError(
            f"max_length={max_length} is too small: a question of {longest} tokens and the {specials} special tokens "
            f"leave {max_length - longest - specials} tokens of context per window, not more than doc_stride={doc_stride}. "
            "Raise max_length, or lower doc_stride or max_question_tokens.")
    contexts = list(dict.fromkeys(x.context for x in data.examples))  # questions on a passage share its tokens
    encoded = {c: (e.ids, [tuple(o) for o in e.offsets])
               for c, e in zip(contexts, fast.encode_batch(contexts, add_special_tokens=False))}
    cls_id, sep_id = tokenizer.cls_id, tokenizer.sep_id
    features = []
    for index, (example, q_ids) in enumerate(zip(data.examples, questions)):
        ctx_ids, ctx_offsets = encoded[example.context]
        start_char = example.answer_starts[0] if example.answers else 0
        end_char = start_char + len(example.answers[0]) if example.answers else 0
        answer = _answer_tokens(ctx_offsets, start_char, end_char) if example.answers else None
        window = max_length - len(q_ids) - specials
        prefix = len(q_ids) + 2
        begin = 0
        while True:
            end = min(begin + window, len(ctx_ids))
            if answer is not None and begin <= answer[0] and answer[1] < end:
                start_pos, end_pos = prefix + answer[0] - begin, prefix + answer[1] - begin
            else:
                start_pos = end_pos = 0
            features.append(QAFeature(example=index, input_ids=[cls_id, *q_ids, sep_id, *ctx_ids[begin:end], sep_id],
                                      token_type_ids=[0] * prefix + [1] * (end - begin + 1),
                                      offsets=[None] * prefix + list(ctx_offsets[begin:end]) + [None],
                                      start_position=start_pos, end_position=end_pos))
            if end >= len(ctx_ids):
                break
            begin = end - doc_stride
    return features


# -- from logits to answers --------------------------------------------------------------------------------------

def _rows(logits, name: str, count: int) -> list:
    rows = list(logits)
    if len(rows) != count:
        raise BertCoreError(f"{name} has {len(rows)} rows but there are {count} features; give one row per feature.")
    return rows


def _best_in_feature(feature: QAFeature, starts: list[float], ends: list[float], max_answer_tokens: int,
                     n_best: int | None) -> tuple[float, int, int] | None:
    """(score, start token, end token) of the best allowed span of one feature; n_best=None searches every pair."""
    context = [i for i, o in enumerate(feature.offsets) if o is not None]
    if n_best is None:
        pairs = ((s, e) for s in context for e in context if s <= e < s + max_answer_tokens)
    else:
        # Ranked among the window's tokens only: HF ranks all positions and then drops question tokens, which
        # can leave no candidate at all; among the allowed pairs the best is the same.
        top_starts = heapq.nlargest(n_best, context, key=lambda i: starts[i])
        top_ends = heapq.nlargest(n_best, context, key=lambda i: ends[i])
        pairs = ((s, e) for s in top_starts for e in top_ends if s <= e < s + max_answer_tokens)
    # max() keeps the first of equal scores, so a tie goes to the pair met first (as the loop it replaced did).
    return max(((starts[s] + ends[e], s, e) for s, e in pairs), key=lambda found: found[0], default=None)


def best_answers(data: QAData, features: Sequence[QAFeature], start_logits: Sequence[Sequence[float]],
                 end_logits: Sequence[Sequence[float]], max_answer_tokens: int = 30,
                 n_best: int = 20) -> dict[str, dict]:
    """Per example id, the best answer span over its features: {"text", "start_char", "end_char", "score"}, as HF's
    `postprocess_qa_predictions` finds it (the `n_best` highest start and end logits, pairs of at most
    `max_answer_tokens`). Logits: one row per feature, padding beyond it ignored."""
    for label, value in (("max_answer_tokens", max_answer_tokens), ("n_best", n_best)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise BertCoreError(f"{label} must be a whole number of at least 1, got {value!r}.")
    start_rows = _rows(start_logits, "start_logits", len(features))
    end_rows = _rows(end_logits, "end_logits", len(features))
    by_example: dict[int, list[int]] = {}
    for f, feature in enumerate(features):
        n = len(feature.input_ids)
        if len(start_rows[f]) < n or len(end_rows[f]) < n:
            raise BertCoreError(f"the logits of feature {f} are shorter than its {n} tokens; give one logit per "
                                "token (the model's output for that feature's row).")
        if not 0 <= feature.example < len(data.examples):
            raise BertCoreError(f"feature {f} points at example {feature.example}, but the data has "
                                f"{len(data.examples)}; use the features encoded from this data.")
        by_example.setdefault(feature.example, []).append(f)
    out: dict[str, dict] = {}
    for index, feature_ids in by_example.items():
        example = data.examples[index]
        best = None
        for limit in (n_best, None):  # the full search only when no top-n pair is allowed in any window
            for f in feature_ids:
                found = _best_in_feature(features[f], start_rows[f], end_rows[f], max_answer_tokens, limit)
                if found is not None and (best is None or found[0] > best[0]):
                    best = (found[0], f, found[1], found[2])
            if best is not None:
                break
        if best is None:  # no feature has a single context token (an empty passage)
            out[example.id] = {"text": "", "start_char": 0, "end_char": 0, "score": 0.0}
            continue
        score, f, s, e = best
        start_char, end_char = features[f].offsets[s][0], features[f].offsets[e][1]
        out[example.id] = {"text": example.context[start_char:end_char], "start_char": start_char,
                           "end_char": end_char, "score": float(score)}
    return out


# -- the official SQuAD v1.1 scores ------------------------------------------------------------------------------

_PUNCTUATION = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace (evaluate-v1.1.py)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match_score(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str) -> float:
    """Token F1 of the normalized answers; as in evaluate-v1.1.py, no shared token gives 0, even when both sides
    normalize to nothing."""
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(ground_truth).split()
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(data: QAData, predictions: dict[str, str]) -> dict:
    """{"exact_match", "f1"} as fractions 0..1: the best over each question's gold answers, averaged over the
    questions; a question without a prediction scores 0. Values may also be best_answers' dicts (their "text")."""
    if not data.examples:
        raise BertCoreError("there are no questions to score.")
    em = f1 = 0.0
    for example in data.examples:
        if example.id not in predictions:
            continue
        prediction = predictions[example.id]
        if isinstance(prediction, dict):
            prediction = prediction.get("text", "")
        prediction = str(prediction)
        em += max((exact_match_score(prediction, gold) for gold in example.answers), default=0.0)
        f1 += max((f1_score(prediction, gold) for gold in example.answers), default=0.0)
    return {"exact_match": em / len(data.examples), "f1": f1 / len(data.examples)}
