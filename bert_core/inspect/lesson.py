"""The guided lesson (pages/0_Lesson.py): its steps, in the order of the pages, and each step's "What to notice"
line, computed from the model in use, never canned (tests check each against the numbers it is computed from)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from bert_core.inspect.safe_text import markdown
from bert_core.inspect.word_class_timelapse import layer_name


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


# The steps' words, as data (lesson_steps.json beside this module), in the order of the pages.
STEPS: tuple[LessonStep, ...] = tuple(
    LessonStep(**{**step, "question": Question(**{**step["question"], "choices": tuple(step["question"]["choices"])})})
    for step in json.loads(Path(__file__).with_name("lesson_steps.json").read_text(encoding="utf-8")))

STEP_KEYS = tuple(s.key for s in STEPS)

# The race the fine-tuning step sends a class to (the Fine-tune page's settings, by their widget names without
# `ft_`): the word-order task, where pretraining on the toy stories must pay, with the bag of words beside it. In
# steps, so that a class on a busy server sees the figures of a quiet one: over seeds 0-2 the default run's model
# reached 93-97% in 300 steps, its from-scratch twin 58-65%, the bag of words 74-78% (docs/lessons.md).
LESSON_RACE = {"kind": "labels", "data": "toy_order", "train": 200, "val": 500, "steps": 300, "budget": 300,
               "batch": 32, "maxlen": 64, "baseline": True}
LESSON_RACE_DATA_SETTINGS = {"steps": LESSON_RACE["steps"]}   # what the page's data choice sets of it

# The sentences two steps open on, written as a teacher would type them. The tokenizer lower-cases and splits the
# full stop off (`the dog saw the cat .`), so a model trained on the toy stories reads them as its own text.
EMBEDDING_SENTENCE = "The dog saw the cat."
BERT_OR_GPT_SENTENCE = "The dog sleeps in the barn after a long day."
SHIPPED_ENGLISH = "bert-tiny-english"   # the predictions step's side trip: real English, the sidebar untouched

# The notices' longer fixed sentences, as data (lesson_notices.json beside this module).
WORDS: dict[str, str] = json.loads(Path(__file__).with_name("lesson_notices.json").read_text(encoding="utf-8"))
NEXT_STEPS = WORDS["next_steps"]


def model_in_use(name: str, vocab_size: int, causal: bool, whose: str = "the sidebar's") -> str:
    """The line that names the model a step looks at (the sidebar's, or the teacher's a student follows)."""
    return WORDS["model_in_use"].format(whose=whose, name=markdown(name), vocab=vocab_size,
                                        kind="GPT-style (next token)" if causal else "BERT")


def class_run_name(step: int | None) -> str:
    """How a led class names the teacher's run, the same words on the teacher's and the students' pages."""
    return "the class's run" + (f" at step {step:,}" if step is not None else "")


def to_top_script(opened: int) -> str:
    """The script (for a zero-height frame) that scrolls the app's main area and the window to the top: a step
    opens at its title. `opened` (an int: the steps this tab opened) makes each script differ from the last, so
    the browser runs it again."""
    return (f"<script>/* step {int(opened)} */(function(){{var w=window.parent;var m=w.document.querySelector("
            "'[data-testid=\"stMain\"]');if(m){m.scrollTop=0;}w.scrollTo(0,0);})();</script>")


def answer_split(question: Question, counts: Sequence[int]) -> str:
    """A class's answers to `question` as markdown lines: each choice and how many chose it, the right one marked."""
    total = sum(counts)
    lines = [f"{total} answer{'s' if total != 1 else ''}:"]
    for i, choice in enumerate(question.choices):
        n = counts[i] if i < len(counts) else 0
        lines.append(f"- {choice}{' ✓' if i == question.answer else ''}: **{n}**"
                     + (f" ({n / total:.0%})" if total else ""))
    return "\n".join(lines)


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
    return right, ("Right." if right else f"Not quite: the answer is “{question.choices[question.answer]}”.") \
        + f" {question.reason}"


# ----------------------------------------------------------------------------------------------- what to notice


SPLIT_WORDS_SHOWN = 4   # split words a notice names one by one; past that it counts the rest


def notice_tokens(words: Sequence[str], pieces_by_word: Sequence[Sequence[str]], vocab_size: int) -> str:
    """The tokens step: how many pieces the text became and which words were split."""
    n_pieces = sum(len(p) for p in pieces_by_word)
    split = [(w, p) for w, p in zip(words, pieces_by_word) if len(p) > 1]
    head = (f"Your {len(words)} words and marks became {n_pieces} word pieces, plus [CLS] and [SEP] around them, "
            f"from this model's vocabulary of {vocab_size:,}.")
    if not split:
        return head + " Every word is a single piece here: try a rarer or longer word."
    shown = "; ".join(f"“{w}” → {' '.join(p)}" for w, p in split[:SPLIT_WORDS_SHOWN])
    more = len(split) - SPLIT_WORDS_SHOWN
    # A notice names everything it counts: past a handful it says how many it did not name.
    rest = f", and {more} more (hover the boxes below)" if more > 0 else ""
    return f"{head} {len(split)} of them {'was' if len(split) == 1 else 'were'} split: {shown}{rest}."


def notice_masking(stats: Mapping, accuracy: Mapping | None) -> str:
    """The masking step: the shares over a batch and, for a model that fills blanks, its accuracy by decision."""
    text = WORDS["masking"].format_map(stats)
    acc = {d: a.accuracy for d, a in (accuracy or {}).items() if a.count}
    if not acc:
        return text
    words = {"[MASK]": "[MASK]ed ones", "random": "random ones", "kept": "kept tokens"}
    said = ", ".join(f"the {words.get(d, d)} {acc[d]:.0%}" for d in sorted(acc, key=acc.get, reverse=True))
    return f"{text} The model in use guesses right {said} of the time."


def notice_step(record, vocab_size: int) -> str:
    """The one-step step: the loss against a uniform guess, the largest gradient and the share of weights moved."""
    biggest = max(record.layer_grad_norms, key=lambda kv: kv[1]) if record.layer_grad_norms else None
    text = (f"Update {record.step:,}: the {'next-token' if record.causal else 'masked-LM'} loss was "
            f"{record.mlm_loss:.2f} (a uniform guess over {vocab_size:,} tokens scores ln {vocab_size:,} = "
            f"{math.log(vocab_size):.2f}), at learning rate {record.learning_rate:.2g}.")
    if biggest is not None:
        text += f" The largest gradient was in the {biggest[0]} ({biggest[1]:.3g})."
    text += (f" The update changed {record.changed_weights:,} of the model's {record.total_weights:,} weights"
             f" ({record.changed_weights / max(1, record.total_weights):.0%}).")
    moves = {f"{abs(c.change):.2e}" for c in record.changes}
    if len(record.changes) > 1 and len(moves) == 1:
        # Adam divides each gradient by its own running size, so on its first steps every weight with a gradient
        # moves by about the learning rate, large gradient or small: the list below is a tie, not a ranking.
        text += WORDS["adam_tie"].format(count=len(record.changes))
    return text


def crossing_step(evals: Sequence, baseline: float | None) -> int | None:
    """The first evaluation step whose held-out loss is under the unigram line, or None."""
    return None if baseline is None else next((int(e.step) for e in evals if e.mlm_loss < baseline), None)


def notice_run(evals: Sequence, baseline: float | None, causal: bool = False) -> str | None:
    """The live-run step, from the run's held-out evaluations and its unigram loss."""
    if not evals:
        return None
    first, last = evals[0], evals[-1]
    text = (f"Held-out {'next-token' if causal else 'masked-LM'} loss: {first.mlm_loss:.2f} at step {first.step:,}, "
            f"{last.mlm_loss:.2f} at step {last.step:,}")
    if baseline is None:
        return text + f"; accuracy {last.mlm_acc:.1%}."
    crossed = crossing_step(evals, baseline)
    text += f"; the unigram line is at {baseline:.2f}" + (f" and the loss went under it at step {crossed:,}."
                                                         if crossed is not None
                                                         else ", and the loss has not gone under it yet.")
    return text + f" Held-out accuracy now: {last.mlm_acc:.1%}."


def notice_attention(summaries: Sequence) -> str:
    """The attention step: the head with the largest share of its attention on one pattern, and which heads put
    most of theirs on [SEP]."""
    head, pattern, share = max(((s, name, value) for s in summaries for name, value in (
        ("[CLS]", s.to_cls), ("[SEP]", s.to_sep), ("the previous token", s.to_previous),
        ("the next token", s.to_next), ("itself", s.to_self))), key=lambda found: found[2])
    sep = [s for s in summaries if s.to_sep >= 0.5]
    text = (f"Head L{head.layer + 1} H{head.head + 1} (layer {head.layer + 1}, head {head.head + 1}) puts "
            f"{share:.0%} of its attention on {pattern}.")
    named = ": " + ", ".join(f"L{s.layer + 1} H{s.head + 1}" for s in sep) if sep else ""
    return text + f" {len(sep)} of the {len(summaries)} heads put half or more on [SEP]{named}."


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


def looked_at(row: Sequence[float], tokens: Sequence[str], threshold: float = 0.01) -> str:
    """The tokens of an attention row over `threshold`, counted from 1 ("1 [CLS], 4 dog"), or "every one"."""
    seen = [i for i, v in enumerate(row) if v > threshold]
    if len(seen) == len(row):
        return "every one"
    return ", ".join(f"{i + 1} {tokens[i]}" for i in seen) or "none"


def notice_bert_or_gpt(bert_row: Sequence[float], gpt_row: Sequence[float], gpt_last_row: Sequence[float],
                       bert_tokens: Sequence[str], gpt_tokens: Sequence[str], threshold: float = 0.01) -> str:
    """The BERT-or-GPT step, from both models' [CLS] rows and GPT's last row; each count names its tokens."""
    def seen(row) -> int:
        return sum(1 for v in row if v > threshold)

    return WORDS["bert_or_gpt"].format(
        gpt_cls=seen(gpt_row), n=len(gpt_last_row), gpt_cls_seen=looked_at(gpt_row, gpt_tokens, threshold),
        gpt_last=seen(gpt_last_row), gpt_last_seen=looked_at(gpt_last_row, gpt_tokens, threshold),
        bert_cls=seen(bert_row), bert_n=len(bert_row), bert_cls_seen=looked_at(bert_row, bert_tokens, threshold),
        threshold=threshold)


def notice_embedding(parts, token: int, neighbours: Sequence[tuple[str, float]] = ()) -> str:
    """The embedding step: the token's three parts and its sum's length before and after the LayerNorm; how alike a
    repeated word's two embeddings are (another position); the token's nearest rows in the embedding table."""
    name = parts.tokens[token]
    length = lambda v: float(np.linalg.norm(v))   # noqa: E731
    text = WORDS["embedding"].format(number=token + 1, name=name, **{
        part: length(getattr(parts, part)[token]) for part in ("word", "position", "segment", "summed", "normed")})
    repeated = next(((i, j) for i in range(len(parts.tokens)) for j in range(i + 1, len(parts.tokens))
                     if parts.tokens[i] == parts.tokens[j] and not parts.tokens[i].startswith("[")), None)
    if repeated is not None:
        i, j = repeated
        a, b = parts.normed[i], parts.normed[j]
        cosine = float(a @ b / max(length(a) * length(b), 1e-12))
        text += (f" “{parts.tokens[i]}” at positions {i + 1} and {j + 1}: the same token vector, but their "
                 f"embeddings' cosine similarity is {cosine:.2f}, not 1: the positions differ.")
    if neighbours:
        text += " Its nearest rows in the embedding table: " + ", ".join(f"“{t}”" for t, _ in neighbours[:4]) + "."
    return text


def notice_attends(steps, undivided) -> str:
    """The one-token attention step, from attention_steps and the scores' softmax without the √d division."""
    allowed = [i for i, ok in enumerate(steps.allowed) if ok]
    top = max(allowed, key=lambda i: steps.probs[i])
    scaled_top = max(allowed, key=lambda i: steps.scaled[i])
    text = (f"Token {steps.query + 1} “{steps.tokens[steps.query]}”, layer {steps.layer + 1}, head "
            f"{steps.head + 1}: its weights over {len(allowed)} tokens sum to {float(steps.probs.sum()):.2f}; the "
            f"most, {float(steps.probs[top]):.0%}, go to token {top + 1} “{steps.tokens[top]}”")
    text += f", whose score q·k/√d is the largest, {float(steps.scaled[top]):.2f}." if scaled_top == top else "."
    text += (f" Undivided by √{steps.head_dim} = {math.sqrt(steps.head_dim):.1f}, the softmax would give its top "
             f"token {float(max(undivided)):.0%}.")
    # The weighted sum leans towards the values that weigh most: the value it is most alike names that.
    alike = [_cosine(steps.context, steps.v[i]) for i in allowed]
    closest = allowed[int(np.argmax(alike))]
    return text + (f" The weighted sum of the {len(allowed)} values, {steps.head_dim} numbers (the bottom strip), is "
                   f"most alike the value of token {closest + 1} “{steps.tokens[closest]}” (cosine similarity "
                   f"{max(alike):.2f}).")


def notice_feed_forward(ffn, firing=None, pool_tokens: int = 0) -> str:
    """The feed-forward step, from feed_forward_steps (and unit_firing for its most active unit over a pool of
    `pool_tokens` held-out tokens): how many units pass the activation, the one that fires most, what the block
    adds and how much of x survives the LayerNorm."""
    width, units, top = len(ffn.x), len(ffn.pre), ffn.most_active
    above = int((ffn.pre > 0).sum())
    act = ffn.activation.upper()
    text = (f"Token {ffn.query + 1} “{ffn.tokens[ffn.query]}”, layer {ffn.layer + 1}: W1·x + b1 turns its {width} "
            f"numbers into {units} units; {above} of the {units} are above 0 and {act} lets them through, the other "
            f"{units - above} come out between {float(ffn.h[ffn.pre <= 0].min(initial=0)):.2f} and 0. Unit {top + 1} "
            f"fires most ({float(ffn.h[top]):.2f}).")
    if firing is not None and pool_tokens:
        shown = ", ".join(f"“{t}”" for t in firing.tokens[:3])
        # The pool is the model's held-out text, or the built-in sentences where that text cannot be read here.
        pool = "the held-out text" if firing.source.startswith("held-out") else "the built-in sentences"
        text += f" Over the {pool_tokens:,} tokens of {pool}, unit {firing.unit + 1} fires most on {shown}."
    length = lambda v: float(np.linalg.norm(v))   # noqa: E731
    return text + (f" W2·h + b2 adds a vector {length(ffn.out):.2f} long to x ({length(ffn.x):.2f} long); after the "
                   f"LayerNorm the layer's output is {length(ffn.normed):.2f} long, with a cosine similarity of "
                   f"{_cosine(ffn.normed, ffn.x):.2f} to x.")


def notice_layer_probes(probes) -> str:
    """The what-each-layer-knows step, from layer_probes: for each task, its accuracy at the embeddings and after
    each layer, and at its best layer against the random model, the control task and the commonest tag."""
    parts = []
    for t in probes.tasks:
        b = t.best
        by_layer = ", ".join(f"{layer_name(i)} {a:.0%}" for i, a in enumerate(t.accuracy))
        parts.append(f"{t.task} ({t.tags} tags): {by_layer}; best at {layer_name(b)}, against "
                     f"{t.random_model[b]:.0%} on a random model of the same shape, {t.control[b]:.0%} on the "
                     f"control task and {t.majority:.0%} for always the commonest tag")
    gain = min(t.accuracy[t.best] - t.random_model[t.best] for t in probes.tasks)
    tail = WORDS["probes_gain" if gain > 0.02 else "probes_no_gain"].format(points=gain * 100)
    return (f"Of {probes.test_words:,} held-out words in {probes.test_sentences} sentences (probes fitted on "
            f"{probes.fit_words:,} words of {probes.fit_sentences} others), the share tagged right: "
            + "; ".join(parts) + "." + tail)


def _cosine(a, b) -> float:
    return float(np.dot(a, b) / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-12))


RACE_NAMES = {"pretrained": "the pretrained model", "scratch": "the same model from scratch",
              "tfidf": "the bag of words"}


def notice_finetune(results: Mapping | None, model: str = "") -> str | None:
    """The fine-tuning step, from this session's race (FinetuneResult by run name; None before one): the model it
    fine-tuned, each contestant's figure, who is ahead and by how much, and whether a time cap cut one short."""
    if not results:
        return None
    shown = [(RACE_NAMES.get(k, k), r) for k, r in results.items()]
    metric = next(iter(results.values())).metric_names[0]
    parts = ", ".join(f"{name} {r.accuracy:.1%}" for name, r in shown)
    best = max(shown, key=lambda kv: kv[1].accuracy)
    raced = f" (it fine-tuned {model})" if model else ""
    text = f"Your race{raced}, held-out {metric}: {parts}. Ahead: {best[0]}."
    pre = results.get("pretrained")
    if pre is not None:
        gaps = [(RACE_NAMES[k], pre.accuracy - results[k].accuracy) for k in ("scratch", "tfidf") if k in results]
        if gaps and all(gap > 0 for _, gap in gaps):
            said = " and ".join(f"{name} by {gap * 100:.1f} points" for name, gap in gaps)
            text += f" Pretraining paid: the pretrained model beat {said}."
        elif gaps:
            said = " and ".join(f"{gap * 100:+.1f} points against {name}" for name, gap in gaps)
            text += f" Pretraining did not pay on this race: the pretrained model scored {said}."
    short = [RACE_NAMES.get(k, k) for k, r in results.items() if r.cut_short]
    if short:
        text += f" The time cap cut {', '.join(short)} short of its steps: a busy server; run it again."
    return text


def notice_nsp(evals: Sequence, history: Sequence = (), nsp: bool = True) -> str | None:
    """Under a run's loss curves, what its next-sentence figures say (None without NSP or an evaluation): NSP
    starts at chance (a loss of ln 2 = 0.69) and leaves it after several hundred steps on the toy stories, a fall
    that looks flat beside the masked-word loss's from about 7."""
    scored = [(int(e.step), e.nsp_acc) for e in evals if e.nsp_acc is not None]
    if not nsp or not scored:
        return None
    step, last = scored[-1]
    losses = [e.nsp_loss for e in history[-50:] if e.nsp_loss is not None]
    text = WORDS["nsp_start"].format(ln2=math.log(2), last=last, step=step)
    if losses:
        text += f"; training NSP loss over the last steps {sum(losses) / len(losses):.2f}"
    left = next((s for s, a in scored if a >= 0.55), None)
    return text + (WORDS["nsp_at_chance"] if left is None else WORDS["nsp_left_chance"].format(left=left))


@dataclass(frozen=True)
class Seen:
    """What a step showed, for the lesson's end: the notice and the model it was computed from."""

    model: str
    notice: str


SIDE_TRIP = ":side"   # a step's key + this: what its side trip showed (the predictions step's shipped model)


def notice_summary(seen: Mapping[str, Seen]) -> str:
    """The lesson's end: the notices of the steps this browser visited (by step key; a side trip's under key +
    SIDE_TRIP), in step order, each naming its model, so a lesson that looked at several never mixes them."""
    lines = [f"- **{title}** (on {markdown(seen[key].model)}). {markdown(seen[key].notice)}" for step in STEPS
             for key, title in ((step.key, step.title), (step.key + SIDE_TRIP, f"{step.title}, side trip"))
             if seen.get(key)]
    return "\n".join(lines or ["- Visit the steps to collect what each one showed here."])


def notice_decisions(history: Sequence, last: int = 50) -> str | None:
    """Under the Train page's accuracy-by-decision chart: each decision's accuracy over the last steps."""
    def mean(name: str) -> float | None:
        values = [getattr(e, name) for e in history[-last:]]   # StepEvents: each has every decision's accuracy
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None

    kept, masked, rand = mean("mlm_acc_kept"), mean("mlm_acc_masked"), mean("mlm_acc_random")
    if kept is None or masked is None:
        return None
    text = f"Over the last {min(last, len(history))} steps: kept tokens {kept:.0%} right, [MASK]ed ones {masked:.0%}"
    text += f", random ones {rand:.0%}." if rand is not None else "."
    return text + WORDS["kept_easy" if kept >= masked + 0.2 else "kept_not_yet"]
