"""The guided lesson (pages/0_Lesson.py): its steps, in the order of the pages, and each step's "What to notice"
line, computed from the model in use, never canned.

A step is a short explanation, one control, a figure, the notice, and a question whose answer is revealed with its
reason. Everything here is plain data and plain functions of inspection results, so the tests check each notice
against the numbers it is computed from, without Streamlit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Question:
    text: str
    choices: tuple[str, ...]
    answer: int          # index into choices
    reason: str


@dataclass(frozen=True)
class LessonStep:
    key: str             # its name in the URL (?step=masking)
    title: str
    page: str            # the app page that explores the same thing further
    text: str            # a few sentences, no wall of text
    question: Question


STEPS: tuple[LessonStep, ...] = (
    LessonStep(
        "tokens", "Tokens", "pages/1_Tokens_and_masking.py",
        "BERT never sees letters or whole words: a WordPiece tokenizer cuts text into pieces from a fixed "
        "vocabulary, and a piece that continues a word starts with `##`. A pair of sentences is framed as "
        "`[CLS] A [SEP] B [SEP]`. Type a sentence and see how this model cuts it.",
        Question("Why does the tokenizer cut a rare word into pieces such as `play ##ing`?",
                 ("To make every sentence shorter",
                  "So that a fixed vocabulary can still spell any word",
                  "Because BERT reads one letter at a time"), 1,
                 "A vocabulary of a few thousand pieces cannot hold every word, but it can spell every word from "
                 "pieces: frequent words stay whole, rare ones are split, and no word is ever unknown.")),
    LessonStep(
        "masking", "Masking", "pages/1_Tokens_and_masking.py",
        "Pretraining hides words and asks the model to guess them back. About 15% of the tokens are chosen; of "
        "those, 80% become `[MASK]` (red), 10% a random token (orange) and 10% stay as they are (green). The model "
        "must predict the original at every chosen position. Change the seed: other tokens are chosen.",
        Question("Why would BERT have to predict a word it can still see (the kept 10%)?",
                 ("It is a bug in the masking",
                  "After pretraining it never sees [MASK] again, so it must not learn that only [MASK]s need thought",
                  "It makes training faster"), 1,
                 "When BERT is fine-tuned there is no [MASK] in its input. Kept and random tokens teach it to "
                 "build a good vector for every token, and not to trust what it sees blindly.")),
    LessonStep(
        "step", "One training step", "pages/2_Train.py",
        "Training is this step, repeated: draw a batch, mask it, score the guesses (the loss), compute how each "
        "weight should change to lower it (the gradient), and move the weights a little. Press *Take one step* "
        "and look at what moved.",
        Question("Why does the first update use a learning rate far below the run's peak?",
                 ("Warm-up: the rate climbs over the first steps, so the early, noisy gradients of a random model "
                  "cannot throw the weights far",
                  "The optimizer has not been built yet",
                  "A small batch needs a small rate"), 0,
                 "BERT warms its learning rate up from zero (10,000 steps in the paper; 10% of a run here) and "
                 "then lets it decay. Adam's first updates are as large as the rate whatever the gradient's size, "
                 "so a full rate at step 1 would scramble the random start.")),
    LessonStep(
        "run", "A live run", "pages/2_Train.py",
        "Now thousands of those steps. The default run trains a `nano` BERT (2 layers, hidden size 64) on the "
        "built-in toy stories, 2,000 steps, about half a minute on a quiet laptop core. Start it and watch the "
        "held-out loss (text it never trains on) against the grey unigram line: the loss of guessing each word by "
        "its frequency alone.",
        Question("While the loss sits on the unigram line, what has the model learned?",
                 ("How often each word occurs: it guesses common words whatever the context",
                  "The grammar of the stories",
                  "Nothing at all"), 0,
                 "The unigram line is the best a model can do without reading the context. Sitting on it means it "
                 "has learned word frequencies; going below it means it has started to read the sentence.")),
    LessonStep(
        "attention", "Attention", "pages/3_Attention.py",
        "Each layer has several attention heads; each head decides, for every token, how much to look at every "
        "other token. Each small map is one head: rows are the tokens looking, columns the tokens looked at. "
        "Heads specialise: some look at the previous or next token, some at `[SEP]`, some broadly.",
        Question("Many heads put most of their attention on [SEP]. What does that mean?",
                 ("The model has found [SEP] the most important word",
                  "It is a resting place: a head with nothing useful to add for a token parks its attention there",
                  "The model is broken"), 1,
                 "Clark et al. (2019) found this in BERT-base: attention to [SEP] rises where a head's job does not "
                 "apply, and changing it barely changes the output. A head must spend 100% of its attention "
                 "somewhere.")),
    LessonStep(
        "predictions", "Predictions", "pages/4_Predictions.py",
        "The pretrained model fills in blanks. Write `[MASK]` where a word should be and compare its guesses with "
        "the unigram guess, which is the same for every blank.",
        Question("What makes the model's guess better than the unigram guess?",
                 ("It has a larger vocabulary", "It reads the words on both sides of the blank",
                  "It remembers the training text word for word"), 1,
                 "The unigram guess ignores the sentence. The model's guess changes with the words around the "
                 "blank, left and right: that is what masked-language modelling trains.")),
    LessonStep(
        "bert-or-gpt", "BERT or GPT", "pages/3_Attention.py",
        "GPT is the same Transformer with one switch: causal attention, each token sees only the tokens before "
        "it, and it learns to predict the next token. Here are the two shipped models' attention on one sentence, "
        "the same layer and head: BERT's map is a full square, GPT's a lower triangle.",
        Question("A GPT classifier cannot read [CLS] as BERT's does. Which token should it read?",
                 ("[CLS], as BERT does", "The last token: it is the only one that has seen the whole sentence",
                  "The longest word"), 1,
                 "In a causal model [CLS] comes first, so it sees only itself. The last token attends to everything "
                 "before it, so GPT-1 classified from the last token.")),
    LessonStep(
        "fine-tune", "Fine-tuning against a bag of words", "pages/5_Fine-tune.py",
        "Pretraining is only worth its cost if it helps a task. Fine-tuning adds a small classifier on top and "
        "trains everything on labelled sentences. The honest test runs three contestants with the same data and "
        "budget: the pretrained model, the same model from scratch, and a bag of words (TF-IDF + logistic "
        "regression), which ignores word order. Run the race on the Fine-tune page (it starts on movie-review "
        "sentences where the server has them), then come back.",
        Question("On the page's built-in toy topics the bag of words scores 100% from the start. What does that "
                 "tell you?",
                 ("Pretraining is useless",
                  "The task is too easy to test pretraining: single words give the topic away",
                  "The bag of words cheated"), 1,
                 "A task that word counts solve cannot show what reading context adds. Real reviews, where "
                 "negation and phrasing matter, are where pretraining has something to prove.")),
)

STEP_KEYS = tuple(s.key for s in STEPS)


def step_index(value) -> int:
    """The step a URL names (`?step=masking` or a 1-based number), the first for anything else."""
    text = str(value or "").strip().lower()
    if text in STEP_KEYS:
        return STEP_KEYS.index(text)
    if text.isdigit() and 1 <= int(text) <= len(STEPS):
        return int(text) - 1
    return 0


def answer_feedback(question: Question, choice: int | None) -> tuple[bool, str] | None:
    """(right?, what to show) for a chosen answer; None before one is chosen."""
    if choice is None:
        return None
    right = choice == question.answer
    head = "Right." if right else f"Not quite: the answer is “{question.choices[question.answer]}”."
    return right, f"{head} {question.reason}"


# ----------------------------------------------------------------------------------------------- what to notice


def notice_tokens(words: Sequence[str], pieces_by_word: Sequence[Sequence[str]], vocab_size: int) -> str:
    """The tokens step: how many pieces the text became and which words were split."""
    n_pieces = sum(len(p) for p in pieces_by_word)
    split = [(w, p) for w, p in zip(words, pieces_by_word) if len(p) > 1]
    head = (f"Your {len(words)} words and marks became {n_pieces} word pieces, plus [CLS] and [SEP] around them, "
            f"from this model's vocabulary of {vocab_size:,}.")
    if not split:
        return head + " Every word is a single piece here: try a rarer or longer word."
    shown = "; ".join(f"“{w}” → {' '.join(p)}" for w, p in split[:3])
    were = "was" if len(split) == 1 else "were"
    return f"{head} {len(split)} of them {were} split: {shown}."


def notice_masking(stats: Mapping, accuracy: Mapping | None) -> str:
    """The masking step: the shares over a batch and, for a model that fills blanks, its accuracy by decision."""
    text = (f"Over {stats['instances']:,} pairs, {stats['chosen_share']:.1%} of the tokens were chosen; of those "
            f"{stats['masked_share']:.1%} became [MASK], {stats['random_share']:.1%} a random token and "
            f"{stats['kept_share']:.1%} stayed.")
    if not accuracy:
        return text
    acc = {d: a.accuracy for d, a in accuracy.items() if a.count}
    if not acc:
        return text
    order = sorted(acc, key=acc.get, reverse=True)
    said = ", ".join(f"the {_decision_words(d)} {acc[d]:.0%}" for d in order)
    return f"{text} The model in use guesses right {said} of the time."


def _decision_words(decision: str) -> str:
    return {"[MASK]": "[MASK]ed ones", "random": "random ones", "kept": "kept tokens"}.get(decision, decision)


def notice_step(record, vocab_size: int) -> str:
    """The one-step step: the loss against a uniform guess, the largest gradient and the share of weights moved."""
    uniform = math.log(vocab_size)
    biggest = max(record.layer_grad_norms, key=lambda kv: kv[1]) if record.layer_grad_norms else None
    text = (f"Update {record.step:,}: the masked-LM loss was {record.mlm_loss:.2f}"
            if not record.causal else f"Update {record.step:,}: the next-token loss was {record.mlm_loss:.2f}")
    text += (f" (a uniform guess over {vocab_size:,} tokens scores ln {vocab_size:,} = {uniform:.2f}), at learning "
             f"rate {record.learning_rate:.2g}.")
    if biggest is not None:
        text += f" The largest gradient was in the {biggest[0]} ({biggest[1]:.3g})."
    text += (f" The update changed {record.changed_weights:,} of the model's {record.total_weights:,} weights"
             f" ({record.changed_weights / max(1, record.total_weights):.0%}).")
    return text


def crossing_step(evals: Sequence, baseline: float | None) -> int | None:
    """The first evaluation step whose held-out loss is under the unigram line, or None."""
    if baseline is None:
        return None
    return next((int(e.step) for e in evals if e.mlm_loss < baseline), None)


def notice_run(evals: Sequence, baseline: float | None, causal: bool = False) -> str | None:
    """The live-run step, from the run's held-out evaluations and its unigram loss."""
    if not evals:
        return None
    first, last = evals[0], evals[-1]
    what = "next-token" if causal else "masked-LM"
    text = (f"Held-out {what} loss: {first.mlm_loss:.2f} at step {first.step:,}, {last.mlm_loss:.2f} at step "
            f"{last.step:,}")
    if baseline is None:
        return text + f"; accuracy {last.mlm_acc:.1%}."
    crossed = crossing_step(evals, baseline)
    text += f"; the unigram line is at {baseline:.2f}"
    text += (f" and the loss went under it at step {crossed:,}." if crossed is not None
             else ", and the loss has not gone under it yet.")
    return text + f" Held-out accuracy now: {last.mlm_acc:.1%}."


def strongest_head(summaries: Sequence) -> tuple[object, str, float]:
    """(head summary, pattern, share) of the head with the largest single share of its attention on one pattern."""
    best = None
    for s in summaries:
        for name, value in (("[CLS]", s.to_cls), ("[SEP]", s.to_sep), ("the previous token", s.to_previous),
                            ("the next token", s.to_next), ("itself", s.to_self)):
            if best is None or value > best[2]:
                best = (s, name, value)
    return best


def notice_attention(summaries: Sequence) -> str:
    """The attention step: the most specialised head, and how many heads put most of their attention on [SEP]."""
    head, pattern, share = strongest_head(summaries)
    sep = sum(1 for s in summaries if s.to_sep >= 0.5)
    text = (f"Head L{head.layer + 1} H{head.head + 1} (layer {head.layer + 1}, head {head.head + 1}) puts "
            f"{share:.0%} of its attention on {pattern}.")
    return text + f" {sep} of the {len(summaries)} heads put half or more on [SEP]."


def notice_predictions(candidates: Sequence[tuple[str, float]], unigram: Sequence[tuple[str, float]]) -> str:
    """The predictions step: the model's top guess against the unigram guess."""
    if not candidates:
        return "Write [MASK] somewhere in the sentence."
    token, p = candidates[0]
    text = f"The model's top guess is “{token}” at {p:.0%}"
    if unigram:
        u, q = unigram[0]
        text += f"; the unigram guess is “{u}” at {q:.0%}, the same for every blank"
    return text + "."


def notice_bert_or_gpt(bert_row: Sequence[float], gpt_row: Sequence[float], gpt_last_row: Sequence[float],
                       threshold: float = 0.01) -> str:
    """The BERT-or-GPT step, from the [CLS] rows of both models and GPT's last row (one layer and head)."""
    def seen(row) -> int:
        return sum(1 for v in row if v > threshold)

    n = len(gpt_last_row)
    return (f"GPT's [CLS] looks at {seen(gpt_row)} of the {n} tokens (only itself can be seen), its last token at "
            f"{seen(gpt_last_row)}; BERT's [CLS] looks at {seen(bert_row)} of {len(bert_row)} (over 1% each).")


def notice_finetune(results: Mapping | None) -> str | None:
    """The fine-tuning step, from this session's race (FinetuneResult by run name), or None before one ran."""
    if not results:
        return None
    names = {"pretrained": "the pretrained model", "scratch": "the same model from scratch",
             "tfidf": "the bag of words"}
    shown = [(names.get(k, k), r) for k, r in results.items()]
    metric = getattr(next(iter(results.values())), "metric_names", ("accuracy",))[0]
    parts = ", ".join(f"{name} {r.accuracy:.1%}" for name, r in shown)
    best = max(shown, key=lambda kv: kv[1].accuracy)
    return f"Your race, held-out {metric}: {parts}. Ahead: {best[0]}."


def notice_decisions(history: Sequence, last: int = 50) -> str | None:
    """Under the Train page's accuracy-by-decision chart: each decision's accuracy over the last `last` steps, and
    what it says (kept tokens are easy only once the model has learned to trust what it sees)."""
    def mean(name: str) -> float | None:
        values = [getattr(e, name, None) for e in history[-last:]]
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None

    kept, masked, rand = mean("mlm_acc_kept"), mean("mlm_acc_masked"), mean("mlm_acc_random")
    if kept is None or masked is None:
        return None
    n = min(last, len(history))
    text = f"Over the last {n} steps: kept tokens {kept:.0%} right, [MASK]ed ones {masked:.0%}"
    text += f", random ones {rand:.0%}." if rand is not None else "."
    if kept >= masked + 0.2:
        return text + " Kept tokens are the easy ones: the answer is in the input."
    return text + (" Kept tokens are barely easier than [MASK]ed ones: the model has not yet learned to trust what "
                   "it sees (the shipped model, after 80 CPU-minutes, gets 9 in 10 kept tokens right).")
