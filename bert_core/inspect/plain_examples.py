"""The examples an English model's pages open on: plain everyday sentences the active model gets right, chosen by
asking it, and one a teacher would try first that it gets wrong, said plainly.

A model trained on Brown, Wikipedia and Shakespeare has never seen held-out text look like what a teacher types
("POMPEY: Here comes Signior Claudio, led by the provost to [MASK]; ..."), and a teacher's first try ("Paris is the
capital of [MASK].") is one the small shipped models get wrong. So the Predictions, Attention and How BERT computes
pages open on the first sentence of a short list (in the everyday-English set, which holds the words a fair judge
accepts at each blank) that the model fills right, and a line names one it misses and its guesses; a GPT is asked
for the next word after the words before the blank. A toy model keeps sentences from its own stories.

Asking (example_choice, which loads torch) takes up to 1.7 s on a busy 2-core machine for the shipped mini, so each
shipped checkpoint's choice is stored (SHIPPED_EXAMPLES) and another model is asked once (app.app_models.model_probes).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bert_core.data.corpora import corpus_label
from bert_core.data.everyday_set import MASK, load_blanks
from bert_core.errors import BertCoreError
from bert_core.inspect.built_in_text import MINIMAL_PAIRS, TEXT
from bert_core.inspect.safe_text import markdown

# The sentences a page may open on (built_in_text.json's "page_examples"): MASKED, the [MASK] sentences, most wanted
# first; FIRST_TRIES, what a teacher types first into a BERT demo; ATTENTION, the first whose every word is one piece
# of the vocabulary is taken ("it" looks back at what it stands for); PAIRS, pairs that really follow one another.
MASKED, FIRST_TRIES, ATTENTION = (tuple(TEXT["page_examples"][k]) for k in ("masked", "first_tries", "attention"))
PAIRS = tuple(tuple(pair) for pair in TEXT["page_examples"]["pairs"])
# The choice made for each shipped checkpoint, by the sha256 of its model.safetensors: a page opens a shipped model
# without asking it (benchmarks/shipped_examples.py writes it; a test checks it against the models).
SHIPPED_EXAMPLES = Path(__file__).resolve().with_name("shipped_examples.json")
WEIGHTS_FILE = "model.safetensors"
TOP = 3                  # guesses shown, and the rank a default may be right at when no first guess is
SMALL = 50_000_000       # weights: below this a model is called small (the shipped ones have 4 to 14 million)
PROMPT_WORDS = 4         # a GPT is asked about a blank only with at least this many words before it


@dataclass(frozen=True)
class Tried:
    """An everyday sentence put to the model (with its [MASK]), its right words, and the model's TOP guesses."""

    text: str
    answers: tuple[str, ...]
    guesses: tuple[str, ...]

    @property
    def rank(self) -> int | None:
        """1 when the first guess is right, ..., None when none of the guesses is."""
        return next((i for i, g in enumerate(self.guesses, 1) if g in self.answers), None)


@dataclass(frozen=True)
class PageExamples:
    """What a page's text boxes open on for one model: [MASK] sentences (the first the default), the attention
    sentence, a following pair, a GPT's prompt, a grammar pair (good, broken), their source, and for an English
    model the default as the model fills it (`right`) and a first try it misses (`wrong`)."""

    sentences: tuple[str, ...]
    attention_sentence: str
    pair: tuple[str, str]
    prompt: str
    grammar_pair: tuple[str, str]
    source: str
    right: Tried | None = None
    wrong: Tried | None = None

    @classmethod
    def from_dict(cls, d: dict) -> "PageExamples":
        def tried(t):
            return None if t is None else Tried(t["text"], tuple(t["answers"]), tuple(t["guesses"]))

        return cls(tuple(d["sentences"]), d["attention_sentence"], tuple(d["pair"]), d["prompt"],
                   tuple(d["grammar_pair"]), d["source"], tried(d.get("right")), tried(d.get("wrong")))


def from_probes(probes) -> PageExamples:
    """A model's own held-out sentences (probes.CorpusProbes) as page examples: how a toy model's pages open."""
    return PageExamples(tuple(probes.sentences), probes.attention_sentence, tuple(probes.pair),
                        " ".join(probes.attention_sentence.split()[:6]),
                        (MINIMAL_PAIRS[0].good, MINIMAL_PAIRS[0].bad), probes.source)


@functools.lru_cache(maxsize=1)
def _answers() -> dict[str, tuple[str, ...]]:
    return {b.text: b.answers for b in load_blanks()}


def answers_for(text: str) -> tuple[str, ...]:
    """The right words at the blank of `text`, a sentence of the everyday-English set."""
    try:
        return _answers()[text]
    except KeyError:
        raise BertCoreError(f"{text!r} is not a sentence of the everyday-English set, so its right words are "
                            "not known") from None


def prompt_of(text: str) -> str:
    """The words before the blank: what a GPT is asked to continue."""
    return text.split(MASK, 1)[0].rstrip()


def _quoted(text: str) -> str:
    return f"“{markdown(text)}”"


def _listed(words: Sequence[str]) -> str:
    return ", ".join(markdown(w) for w in words)


def corpora_in_words(recorded: Sequence[str]) -> str:
    """The recorded corpora as a reader knows them: "the Brown Corpus (...), WikiText-2 (...) and ..."."""
    names = list(dict.fromkeys(corpus_label(c) for c in recorded))
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def examples_note(examples: PageExamples, recorded: Sequence[str], weights: int, causal: bool) -> str:
    """The Markdown paragraph beside the default: what the model read, a first try it gets wrong and its guesses,
    and that it gets the default right; "" for a toy model's own sentences."""
    if examples.right is None:
        return ""
    size = f"{weights / 1e6:.1f}M weights" if weights >= 1e5 else f"{weights:,} weights"
    text = (f"This model ({size}) has read only {markdown(corpora_in_words(recorded))}. " if recorded
            else f"This model ({size}) does not record what it read. ")

    def shown(sentence: str) -> str:   # a GPT is asked for the words after the blank's start
        return prompt_of(sentence) + " …" if causal else sentence

    miss = examples.wrong
    if miss is not None:
        text += (f"It {'continues' if causal else 'gets'} plain sentences such as {_quoted(shown(miss.text))} "
                 f"{'wrongly' if causal else 'wrong'} ")
        text += f"(its guesses: {_listed(miss.guesses)}; right would be {markdown(miss.answers[0])})"
        text += ": a model this small knows little about the world. " if weights < SMALL else ". "
    right = examples.right
    what = "start" if causal else "sentence"
    if right.rank == 1:
        text += (f"The default {what}, {_quoted(shown(right.text))}, is one it gets right (its first guess: "
                 f"{markdown(right.guesses[0])}).")
    elif right.rank is not None:
        text += (f"The default {what}, {_quoted(shown(right.text))}, is one it nearly gets: a right word is its "
                 f"guess number {right.rank} ({_listed(right.guesses)}).")
    else:
        text += (f"It gets none of the plain sentences tried here right yet: the default {what}, "
                 f"{_quoted(shown(right.text))}, gets {_listed(right.guesses)}.")
    return text


@functools.lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime: float) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_digest(folder: str | Path | None) -> str | None:
    """The sha256 of a checkpoint folder's model.safetensors (cached per file and time), or None without one."""
    path = Path(folder) / WEIGHTS_FILE if folder is not None else None
    if path is None or not path.is_file():
        return None
    stat = path.stat()
    return _sha256(str(path), stat.st_size, stat.st_mtime)


def read_stored(file: str | Path = SHIPPED_EXAMPLES) -> dict:
    """The stored choices: {folder name: {"weights_sha256": ..., "examples": PageExamples.to_dict()}}."""
    path = Path(file)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def stored_examples(folder: str | Path | None, file: str | Path = SHIPPED_EXAMPLES) -> PageExamples | None:
    """The examples stored for the checkpoint in `folder` if its weights are those they were chosen for."""
    digest = weights_digest(folder)
    if digest is None:
        return None
    for entry in read_stored(file).values():
        if entry.get("weights_sha256") == digest:
            return PageExamples.from_dict(entry["examples"])
    return None
