"""Choosing an English model's page examples by asking it (plain_examples says what and why); torch is loaded here,
so the pages' torch-free modules import this only when a model must be asked."""

from __future__ import annotations

from typing import Sequence

from bert_core.data.everyday_set import load_everyday_pairs
from bert_core.errors import BertCoreError
from bert_core.inspect.generation import generate
from bert_core.inspect.grammar import compare_pair
from bert_core.inspect.inspection import fill_mask, is_causal, predict_nsp
from bert_core.inspect.plain_examples import (ATTENTION, FIRST_TRIES, MASKED, PAIRS, PROMPT_WORDS, TOP, PageExamples,
                                              Tried, answers_for, prompt_of)


def ask(model, tokenizer, text: str) -> Tried:
    """The model's TOP guesses at the blank of `text`: a BERT's for the [MASK], a GPT's for the next token."""
    if is_causal(model):
        step = generate(model, tokenizer, prompt_of(text), max_new_tokens=1, alternatives=TOP).steps[0]
        return Tried(text, answers_for(text), tuple(t for t, _ in step.alternatives))
    (prediction,) = fill_mask(model, tokenizer, text, top_k=TOP)
    return Tried(text, answers_for(text), tuple(t for t, _ in prediction.candidates))


def _askable(model, texts: Sequence[str]) -> list[str]:
    return [t for t in texts if not is_causal(model) or len(prompt_of(t).split()) >= PROMPT_WORDS]


def choose_default(model, tokenizer, candidates: Sequence[str] = MASKED) -> Tried:
    """The first candidate right at the first guess, else within TOP guesses, else the first."""
    tried = []
    for text in _askable(model, candidates):
        tried.append(ask(model, tokenizer, text))
        if tried[-1].rank == 1:
            return tried[-1]
    if not tried:
        raise BertCoreError("no candidate sentence can be asked of this model")
    return next((t for t in tried if t.rank is not None), tried[0])


def first_miss(model, tokenizer, tries: Sequence[str] = FIRST_TRIES) -> Tried | None:
    """The first of a teacher's first tries the model misses at its first guess (None: it gets them all)."""
    return next((r for r in (ask(model, tokenizer, t) for t in _askable(model, tries)) if r.rank != 1), None)


def whole_words(tokenizer, text: str) -> bool:
    """Whether every word of `text` is one piece of the tokenizer's vocabulary."""
    return not any(p.startswith("##") for p in tokenizer.tokenize(text))


def choose_pair(model, tokenizer, pairs: Sequence[tuple[str, str]] = PAIRS) -> tuple[str, str]:
    """The first pair the model says follows (a GPT has no next-sentence head: the first pair)."""
    if model.has_nsp_head:
        for a, b in pairs:
            if predict_nsp(model, tokenizer, a, b) > 0.5:
                return a, b
    return pairs[0]


def choose_grammar_pair(model, tokenizer) -> tuple[str, str]:
    """The first everyday-English minimal pair whose good sentence the model scores higher (else the first)."""
    pairs = load_everyday_pairs()
    for pair in pairs[:6]:   # a few at most: each is a batch of passes, and almost every model gets one of these
        if compare_pair(model, tokenizer, pair.good, pair.bad).preferred == "a":
            return pair.good, pair.bad
    return pairs[0].good, pairs[0].bad


def choose_examples(model, tokenizer) -> PageExamples:
    """The plain-English examples for `model` (BERT or GPT), each chosen by asking it (see the module's text)."""
    right = choose_default(model, tokenizer)
    attention = next((s for s in ATTENTION if whole_words(tokenizer, s)), ATTENTION[0])
    return PageExamples((right.text,), attention, choose_pair(model, tokenizer), prompt_of(right.text),
                        choose_grammar_pair(model, tokenizer),
                        "plain English sentences, chosen from a short list as ones this model gets right", right,
                        first_miss(model, tokenizer))
