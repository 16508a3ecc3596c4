"""What the Fine-tune page tells a visitor to expect of a race before it runs: ranges measured on the page's own
defaults with each shipped model active (benchmarks/finetune_page_defaults.py runs them; docs/benchmarks.md, "The
Fine-tune page's defaults with each shipped model", has every seed, and tests/test_finetune_expectations.py checks
that the two agree), and what each says beyond its numbers. No Streamlit here.
"""

from __future__ import annotations

# The lowest and highest figure over seeds 0-2 of each model in the race: accuracy % for sentence labels, chunk F1 for
# CoNLL-2000 chunks. The baselines: the bag of words (TF-IDF + LR, "tfidf") for sentences; for chunks each part of
# speech's ("pos-majority") and each word's ("word-majority") most frequent tag. Measured 2026-11-28 on the shipped
# folders as they are (the tiny's weights stored in float16), one thread a run, bf16 autocast on a 2-core Intel VM
# with bfloat16 instructions. A race counts steps, so the same figures come on any load of that machine.
PAGE_FIGURES: dict[str, dict[str, dict[str, tuple[float, float]]]] = {
    "bert-tiny-english": {
        "toy_order": {"pretrained": (82.6, 90.2), "scratch": (68.8, 73.0), "tfidf": (70.2, 74.6)},
        "toy": {"pretrained": (85.6, 90.0), "scratch": (77.8, 78.8), "tfidf": (74.2, 77.4)},
        "polarity": {"pretrained": (64.8, 66.2), "scratch": (61.6, 66.2), "tfidf": (70.0, 73.2)},
        "ag_news": {"pretrained": (78.6, 79.0), "scratch": (73.2, 77.6), "tfidf": (82.6, 84.8)},
        "conll2000": {"pretrained": (84.4, 86.5), "scratch": (62.4, 64.4),
                      "pos-majority": (75.4, 77.2), "word-majority": (66.8, 67.9)},
    },
    "bert-mini-english": {
        "toy_order": {"pretrained": (91.4, 94.2), "scratch": (65.2, 73.4), "tfidf": (70.2, 74.6)},
        "toy": {"pretrained": (94.4, 95.2), "scratch": (78.4, 83.8), "tfidf": (74.2, 77.4)},
        "polarity": {"pretrained": (70.6, 74.0), "scratch": (49.0, 59.6), "tfidf": (70.0, 73.2)},
        "ag_news": {"pretrained": (81.2, 81.8), "scratch": (53.4, 75.4), "tfidf": (82.6, 84.8)},
        "conll2000": {"pretrained": (89.6, 90.8), "scratch": (13.1, 49.7),
                      "pos-majority": (75.4, 77.2), "word-majority": (66.8, 67.9)},
    },
    "gpt-tiny-english": {
        "toy_order": {"pretrained": (79.0, 79.8), "scratch": (71.0, 74.0), "tfidf": (70.2, 74.6)},
        "toy": {"pretrained": (88.2, 93.2), "scratch": (58.0, 67.8), "tfidf": (74.2, 77.4)},
        "polarity": {"pretrained": (63.6, 65.6), "scratch": (61.0, 62.6), "tfidf": (70.0, 73.2)},
        "ag_news": {"pretrained": (76.4, 79.6), "scratch": (69.8, 71.0), "tfidf": (82.6, 84.8)},
        "conll2000": {"pretrained": (80.6, 81.4), "scratch": (68.7, 71.2),
                      "pos-majority": (75.4, 77.2), "word-majority": (66.8, 67.9)},
    },
    "gpt-mini-english": {
        "toy_order": {"pretrained": (89.0, 94.2), "scratch": (76.6, 79.4), "tfidf": (70.2, 74.6)},
        "toy": {"pretrained": (95.6, 96.8), "scratch": (59.6, 65.8), "tfidf": (74.2, 77.4)},
        "polarity": {"pretrained": (69.0, 71.2), "scratch": (47.8, 52.6), "tfidf": (70.0, 73.2)},
        "ag_news": {"pretrained": (81.6, 85.4), "scratch": (59.4, 62.6), "tfidf": (82.6, 84.8)},
        "conll2000": {"pretrained": (85.0, 86.1), "scratch": (24.8, 47.4),
                      "pos-majority": (75.4, 77.2), "word-majority": (66.8, 67.9)},
    },
}

# What each figure means beyond its numbers, by model and data.
NOTES: dict[str, dict[str, str]] = {
    "bert-tiny-english": {
        "toy_order": "English taught it how sentences go: it tells the stories' own word order from a shuffle, where a "
                     "bag of words, which sees the same words in both classes, cannot.",
        "toy": "A topic is given away by single words, and English taught the tiny what they are. (The lesson's "
               "toy-trained model does not lead here: docs/lessons.md, \"Why not the toy topics?\")",
        "polarity": "Pretraining is ahead by 1.5 points on average, but two seeds of three tie: try two or three. "
                    "The 2-layer shipped model does not beat a bag of words here; bert-mini-english can, with more "
                    "steps.",
        "ag_news": "Pretraining pays against the same model from scratch; topic words give a bag of words the lead.",
        "conll2000": "Pretraining pays most here, about 20 points over its from-scratch twin. With every sentence and "
                     "1,500 steps (the CLI's defaults) it reached 89.5 against 81 (2026-11-26, docs/benchmarks.md)."},
    "bert-mini-english": {
        "toy_order": "Its from-scratch twin, four layers from random weights, learns slowly in 300 steps.",
        "polarity": "Its from-scratch twin has barely begun in 600 steps. Each of its steps takes about three times "
                    "the tiny's on a CPU. With more steps it passes the bag of words: 1,500 (`finetune --steps "
                    "1500`, 2 minutes on one core with bfloat16 instructions, 7 elsewhere) gave 77.5% against "
                    "75.3% over eleven larger splits.",
        "ag_news": "Topic words keep the bag of words ahead: 1,500 steps (4 minutes on one core with bfloat16 "
                   "instructions, 13 elsewhere) gave 84.3% against its 86.3% over eleven larger splits.",
        "conll2000": "Its from-scratch twin has barely begun in 600 steps: four layers from random weights learn "
                     "slowly. With every sentence and 1,500 steps (about 7 minutes on one core): 92.5, its "
                     "from-scratch twin 66 (docs/benchmarks.md)."},
    "gpt-tiny-english": {
        "toy_order": "A GPT reads leftwards only and its classifier reads the last token: it tells word order apart "
                     "less well than its BERT twin (83-90%).",
        "polarity": "Like its BERT twin, it does not beat a bag of words here.",
        "ag_news": "Topic words give a bag of words the lead.",
        "conll2000": "Each word's tag is read from that word and the words before it only (causal attention): below "
                     "its BERT twin (84-87), whose every word sees the whole sentence."},
    "gpt-mini-english": {
        "polarity": "Its from-scratch twin stays at chance in 600 steps: four layers from random weights learn slowly.",
        "ag_news": "Level with the bag of words here: ahead of it at two seeds of three, 0.6 points behind on average.",
        "conll2000": "Each word's tag is read from that word and the words before it only (causal attention): below "
                     "bert-mini-english (90-91). Its from-scratch twin has barely begun in 600 steps."},
}

# The models in a race and its baselines, in the caption's order and words.
NAMES = {"labels": (("pretrained", "pretrained"), ("scratch", "from scratch"), ("tfidf", "the bag of words")),
         "tags": (("pretrained", "pretrained"), ("scratch", "from scratch"),
                  ("pos-majority", "a tag per part of speech"), ("word-majority", "a tag per word"))}
KIND_OF = {"toy_order": "labels", "toy": "labels", "polarity": "labels", "ag_news": "labels", "conll2000": "tags"}
# The reference for a model that is not shipped (trained here, saved, uploaded or a folder): the real tasks quote
# the default shipped model's figures; the toy stories the model the lesson trains (TOY_BY_DEFAULT_RUN).
REFERENCE = "bert-tiny-english"

# The built-in sentence tasks with the model the lesson trains (the Train page's default run; docs/lessons.md, "The
# lesson's race", seeds 0-2, 2026-11-28).
TOY_BY_DEFAULT_RUN = {
    "toy_order": "What to expect with the lesson's settings (200 training sentences, 300 steps a model) and the Train "
                 "page's default run as the model: pretrained 93-97%, from scratch 58-65%, the bag of words 74-78%. "
                 "Both classes hold the same words, so only knowing how the stories' sentences go tells them apart: "
                 "what masked-word pretraining on the stories taught.",
    "toy": "What to expect with a model pretrained on the toy stories (the Train page's default run): its from-scratch "
           "twin wins here, 96-98% against 74-77% (seed 0), and the bag of words about 74%. A topic is given away by "
           "single words, which a random model's nearly even attention already adds up; pretraining taught the toy "
           "model which slot a noun fills, not which story it belongs to (docs/lessons.md, \"Why not the toy "
           "topics?\"). The word-order task is where its pretraining pays."}

# The toy stories after their drills (docs/benchmarks.md, "The drills as the task's recipe").
EXPECT_QA_DRILLS = (
    "What to expect: the drills come first, in order, each until its last training batches are 95% right or its "
    "share of the budget, and what the drills before it left unused, is spent; the curve is always the held-out "
    "stories, so it stays low through the drills (dotted lines mark where each began) and climbs once the stories "
    "begin. Each drill clicks at its own moment, a different one for each seed. docs/benchmarks.md (\"The drills "
    "as the task's recipe\") gives the figures.")
# ... and what the shipped models reached (one CPU thread a run, other runs beside them; the mini 2026-11-27, the
# tiny again on 2026-11-28 once its weights were stored in float16).
EXPECT_QA_BY_MODEL = {
    "bert-mini-english": "With bert-mini-english, `finetune --task toy-qa` (8,000 steps, 18 to 21 minutes a run on "
                         "one thread of a 2-core CPU shared with other runs) read the held-out stories at 94.3 / "
                         "95.5 / 100.0% exact match (seeds 0 / 1 / 2). This page's 600 s on one CPU thread held "
                         "4,954 steps at seed 0: every drill learnt within 329 s, then the stories at 91.9%. An "
                         "H200 shared with pretraining ran the stories at about 57 steps a second "
                         "(docs/benchmarks.md): the whole 8,000 steps fit in 600 s there.",
    "bert-tiny-english": "With bert-tiny-english (2 layers) the drills click at some seeds only and the stories "
                         "stop short of the mini's: `finetune --task toy-qa` (8,000 steps, 7 to 11 minutes on one "
                         "thread) read them at 37.8 / 41.6 / 44.3% (seeds 0 / 1 / 2), and this page's defaults "
                         "(8,000 steps on 3,000 questions) at 28.8% (seed 0). A drill learnt or missed moves a seed "
                         "by tens of points. Choose bert-mini-english in the sidebar to watch them being read."}
EXPECT_QA_ALONE = ("What to expect: answering means matching the question's words to the passage and reading the words "
                   "a few places from the match, which a small model learns slowly. On the toy stories alone either "
                   "shipped model (2 or 4 layers) stays near 25-30% exact match for thousands of steps (the right "
                   "kind of answer, often for the wrong character: a guess among the characters); the drills are "
                   "what it needs. Watch which kind of span each model picks, and how sure it is where.")


def _span(lo: float, hi: float, unit: str) -> str:
    a, b = round(lo), round(hi)
    return f"{a}{unit}" if a == b else f"{a}-{b}{unit}"


def _figures(model: str, choice: str) -> str:
    kind = KIND_OF[choice]
    unit = "%" if kind == "labels" else ""
    got = PAGE_FIGURES[model][choice]
    parts = [f"{words} {_span(*got[name], unit)}" for name, words in NAMES[kind] if name in got]
    if kind == "tags":
        parts[0] += " chunk F1"
    return ", ".join(parts[:-1]) + f" and {parts[-1]} (seeds 0-2)"


def expectation(choice: str, shipped: str | None, train: int, steps: int, unit: str) -> str | None:
    """What to expect of a race on the data `choice` with the shipped model `shipped` active (None: a model that is
    not shipped), on the page's defaults (`train` training `unit`, `steps` steps a model); None where nothing was
    measured."""
    if choice not in KIND_OF:
        return None
    settings = f"this page's defaults ({train:,} training {unit}, {steps:,} steps a model)"
    task = "CoNLL-2000 chunks" if choice == "conll2000" else None
    if shipped in PAGE_FIGURES:
        note = NOTES.get(shipped, {}).get(choice, "")
        where = f"on {task} " if task else ""
        return f"What to expect {where}with {settings} and {shipped}: {_figures(shipped, choice)}. {note}".strip()
    if choice in TOY_BY_DEFAULT_RUN:
        return TOY_BY_DEFAULT_RUN[choice]
    return (f"No figures were measured for this model{' on ' + task if task else ''}. With {settings}, the shipped "
            f"{REFERENCE} gave: {_figures(REFERENCE, choice)}.")
