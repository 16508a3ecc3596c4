"""Why a fine-tuned model decided: each token's salience for one probability the model gives its own answer (its
"target"), what each attention head is worth to it (kit.heads_masked, all heads in one batched pass), and the panel's
figures with `salience_panel_data`, the one call a page makes (tokens, layers and heads count from 1 there). The
targets and the method: docs/how-bert-computes.md, "Why a fine-tuned model decided".

**Integrated gradients** (Sundararajan et al., 2017) on the embedding layer's output (as Captum's
LayerIntegratedGradients on `bert.embeddings` reads it; Captum measured, not adopted: docs/benchmarks.md), by the
trapezoid rule over steps refined where the path bends. Since f is known at both ends of every step, each step's own
error is known exactly, and errors of opposite signs cannot cancel into a lucky pass (equal steps met the whole-path
check at 16 steps by such luck, within 4.4%, where 32 then missed by 21%). **Gradient x input** is one step of the
same sum, on the same scale.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from bert_core.errors import BertCoreError
from bert_core.inspect.computation_figures import (FONT, MODEL_COLOUR, NUMBERS_UP_TO, VECTOR_SCALE, WHAT_IF_COLOUR,
                                                   _fonts, token_labels)
from bert_core.inspect.figures import _layout, wrap
from bert_core.inspect.kit import as_batch, evaluating, heads_masked, hooked, own
from bert_core.inspect.safe_text import markdown
from bert_core.model.bert import BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification
from bert_core.training.token_tagging import split_words

FIRST_STEPS = 16     # explain()'s first, equal steps; it halves those whose own error is too large
MAX_STEPS = 512
GAP_LIMIT = 0.05     # how large the steps' errors may add up to, as a share of the change (the completeness check)
ROWS_PER_PASS = 64   # rows of the path (or heads) in one forward pass: bounded memory for long inputs
BASELINE = ("the same input with [PAD] at every token but [CLS] and [SEP] (the sentence with its words taken out), "
            "positions and segments unchanged")
KINDS = ("labels", "tags", "spans")
TEXT = json.loads(Path(__file__).with_name("view_text.json").read_text(encoding="utf-8"))["salience"]


@dataclass
class Target:
    """One probability the model gives its own answer, and where it is read."""

    name: str          # "P(positive)", "P(B-NP) for “company”", "P(start at “paris”)"
    output: str        # "logits", "start_logits" or "end_logits"
    position: int | None   # the token read (None: the sentence's logits)
    index: int         # the class (or, for a span, the token) whose probability it is
    label: str = ""    # that class's name (a label or a tag)


@dataclass
class Salience:
    """One target's token saliences; index i is tokens[i]."""

    target: Target
    value: float               # f(input): the target's probability
    baseline_value: float      # f(baseline)
    integrated: np.ndarray     # [S] integrated gradients, summed over each token's components
    gradient_x_input: np.ndarray   # [S] gradient at the input x (input - baseline)
    steps: int                     # the steps of the path the sum was taken over
    points: np.ndarray             # [steps + 1] where on the path (0 the baseline, 1 the input), in order

    @property
    def gap(self) -> float:
        """How far the saliences' sum is from f(input) - f(baseline), as a share of that difference (the
        completeness check; 0 for a perfect integral). A difference under 0.01 counts as 0.01: where the input
        barely moved the probability from the baseline's, a share of almost nothing would be float noise."""
        change = self.value - self.baseline_value
        return abs(float(self.integrated.sum()) - change) / max(abs(change), 0.01)


@dataclass
class HeadGrid:
    """The change in a target probability with each head switched off: `change[layer, head]` (from 0)."""

    name: str
    before: float          # with every head on
    change: np.ndarray     # [L, H] probability with the head off, minus `before`


@dataclass
class Explanation:
    """Everything the salience panel shows for one input to one fine-tuned model."""

    kind: str
    tokens: list[str]
    answer: str                  # the model's answer in words
    saliences: list[Salience]
    heads: HeadGrid
    words: list[str]             # tags: the sentence's words (else empty)
    word: int | None             # tags: the explained word


# ------------------------------------------------------------------------------------------------ forward passes


def _probability(out, target: Target) -> torch.Tensor:
    """[B] the target's probability in each row of a batch's output."""
    logits = getattr(out, target.output).float()   # the output field it names: logits, start_ or end_logits
    if target.position is not None and logits.dim() == 3:
        logits = logits[:, target.position]
    return logits.softmax(-1)[:, target.index]


def _forward(model, ids: torch.Tensor, types: torch.Tensor, rows: int, embedded: torch.Tensor | None = None):
    """The model on `rows` copies of one input; with `embedded` ([rows, S, H]) in place of its embedding layer's
    output (a hook on the model's own module: every layer after it runs as ever)."""
    x = ids.expand(rows, -1)
    handles = [] if embedded is None else [model.bert.embeddings.register_forward_hook(own(lambda m, a, out: embedded))]
    with hooked(*handles):
        return model(x, torch.ones_like(x), types.expand(rows, -1))


def baseline_vectors(model, tokenizer, ids: torch.Tensor, types: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, baseline), [S, H] each: the embedding layer's output for both (BASELINE), in eval mode."""
    keep = (ids[0] == tokenizer.cls_id) | (ids[0] == tokenizer.sep_id)
    pads = torch.where(keep, ids[0], torch.full_like(ids[0], tokenizer.pad_id))[None]
    with evaluating(model, grad=True), torch.no_grad():   # not inference_mode: the path is differentiated
        both = model.bert.embeddings(torch.cat([ids, pads]), torch.cat([types, types]))
    return both[0].clone(), both[1].clone()


class _Path:
    """The integrand of integrated gradients along the straight path from the baseline to the input, taken at the
    points alpha (Fractions in [0, 1]) as they are asked for and kept, per target: the [S] contributions
    (input - baseline) . gradient of each token, and the target's probability there."""

    def __init__(self, model, tokenizer, ids: torch.Tensor, types: torch.Tensor, targets: list[Target]):
        self.model, self.ids, self.types, self.targets = model, ids, types, targets
        self.x, self.base = baseline_vectors(model, tokenizer, ids, types)
        self.delta = (self.x - self.base).float()
        self.points: dict = {}   # Fraction alpha -> ([T, S] contributions, [T] probabilities)

    def take(self, alphas) -> None:
        new = sorted(a for a in set(alphas) if a not in self.points)
        with evaluating(self.model, grad=True), torch.enable_grad():
            for i in range(0, len(new), ROWS_PER_PASS):
                chunk = new[i:i + ROWS_PER_PASS]
                a = torch.tensor([float(f) for f in chunk], dtype=self.x.dtype)
                path = (self.base[None] + a[:, None, None] * (self.x - self.base)[None]).requires_grad_(True)
                out = _forward(self.model, self.ids, self.types, len(chunk), path)
                contributions, values = [], []
                for t, target in enumerate(self.targets):
                    p = _probability(out, target)
                    g, = torch.autograd.grad(p.sum(), path, retain_graph=t < len(self.targets) - 1)
                    contributions.append((self.delta[None] * g.float()).sum(-1))
                    values.append(p.detach().float())
                c, v = torch.stack(contributions, 1).cpu().numpy(), torch.stack(values, 1).cpu().numpy()
                for j, alpha in enumerate(chunk):
                    self.points[alpha] = (c[j], v[j])

    def step_errors(self, grid: list) -> np.ndarray:
        """[T, steps] each step's trapezoid of the summed contributions minus the target's own change over it,
        as a share of the target's whole change (counted as at least 0.01, as `Salience.gap` does)."""
        total = np.stack([self.points[a][0].sum(-1) for a in grid])          # [n + 1, T] d f / d alpha
        value = np.stack([self.points[a][1] for a in grid])                   # [n + 1, T]
        width = np.array([float(b - a) for a, b in zip(grid, grid[1:])])[:, None]
        error = width * (total[1:] + total[:-1]) / 2 - np.diff(value, axis=0)
        return (np.abs(error) / np.maximum(np.abs(value[-1] - value[0]), 0.01)).T

    def saliences(self, grid: list) -> list[Salience]:
        """The trapezoid rule over the steps between consecutive points of `grid` (taken first)."""
        self.take(grid)
        alphas = np.array([float(a) for a in grid])
        widths = np.diff(alphas)
        weights = np.concatenate([widths, [0.0]]) / 2 + np.concatenate([[0.0], widths]) / 2
        c = np.stack([self.points[a][0] for a in grid])        # [n + 1, T, S]
        at_x, at_base = self.points[Fraction(1)], self.points[Fraction(0)]
        return [Salience(target=target, value=float(at_x[1][t]), baseline_value=float(at_base[1][t]),
                         integrated=np.tensordot(weights, c[:, t], axes=1).astype(np.float32),
                         gradient_x_input=at_x[0][t].astype(np.float32), steps=len(grid) - 1, points=alphas)
                for t, target in enumerate(self.targets)]


def _check_steps(steps) -> None:
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS:
        raise BertCoreError(f"the step count must be a whole number from 1 to {MAX_STEPS}, got {steps!r}")


def _even(steps: int) -> list:
    return [Fraction(i, steps) for i in range(steps + 1)]


def integrated_gradients(model, tokenizer, ids: torch.Tensor, types: torch.Tensor, targets: list[Target],
                         steps: int) -> list[Salience]:
    """Integrated gradients over `steps` equal steps, and gradient x input, of each target (ids, types: [1, S])."""
    _check_steps(steps)
    return _Path(model, tokenizer, ids, types, targets).saliences(_even(steps))


def adaptive_integrated_gradients(model, tokenizer, ids: torch.Tensor, types: torch.Tensor, targets: list[Target],
                                  first: int = FIRST_STEPS) -> list[Salience]:
    """integrated_gradients from `first` equal steps, halving each step whose error is over its share of GAP_LIMIT
    until every target's step errors add up to at most GAP_LIMIT (or MAX_STEPS steps)."""
    _check_steps(first)
    path = _Path(model, tokenizer, ids, types, targets)
    grid = _even(first)
    path.take(grid)
    while True:
        errors = path.step_errors(grid).max(0)    # the worst target's, per step
        if errors.sum() <= GAP_LIMIT or len(grid) - 1 >= MAX_STEPS:
            return path.saliences(grid)
        room = MAX_STEPS - (len(grid) - 1)
        worst = np.argsort(-errors)[:room]
        split = sorted(int(i) for i in worst if errors[i] > GAP_LIMIT / len(errors))
        midpoints = [(grid[i] + grid[i + 1]) / 2 for i in split]
        path.take(midpoints)
        grid = sorted(grid + midpoints)


def head_grid(model, ids: torch.Tensor, types: torch.Tensor, name: str, probability) -> HeadGrid:
    """The change in `probability(output)` ([B] from a batch's output) with each head switched off in turn."""
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    each = torch.eye(layers * heads, dtype=torch.bool).view(-1, layers, heads)   # row r: head r alone off
    changed = []
    with evaluating(model):
        before = float(probability(_forward(model, ids, types, 1))[0])
        for off in each.split(ROWS_PER_PASS):
            with heads_masked(model, off):
                changed.append(probability(_forward(model, ids, types, len(off))).float().cpu())
    change = torch.cat(changed).numpy().reshape(layers, heads) - before
    return HeadGrid(name=name, before=before, change=change.astype(np.float32))


# ------------------------------------------------------------------------------------------------ the three kinds

MAX_ANSWER_TOKENS = 30   # the longest span the answer search considers, as answer_spans decodes


def _names(model, label_names) -> list[str]:
    names = list(label_names or model.label_names or [])
    n = int(model.num_labels)
    if names and len(names) != n:
        raise BertCoreError(f"{len(names)} label names for a model with {n} labels")
    return names or [f"label {i}" for i in range(n)]


def _first_output(model, ids, types):
    with evaluating(model):
        return _forward(model, ids, types, 1)


def _label_targets(model, tokenizer, text, text_b, names, max_length):
    if not isinstance(text, str) or not text.strip():
        raise BertCoreError("type a sentence to explain")
    enc = tokenizer.encode_pair(text, text_b if text_b and text_b.strip() else None, max_length)
    ids, types = as_batch(model, enc["input_ids"], enc["token_type_ids"])
    c = int(_first_output(model, ids, types).logits[0].argmax())
    return ids, types, [Target(f"P({names[c]})", "logits", None, c, names[c])], names[c], [], None


def _tag_targets(model, tokenizer, text, word, names, max_length):
    if not isinstance(text, str) or not text.strip():
        raise BertCoreError("type a sentence to tag")
    words = [w for w, _ in split_words(tokenizer, text)]
    ids, firsts = [tokenizer.cls_id], []
    for w in words:
        pieces = tokenizer.encode(w)[: max_length - 2]
        if len(ids) + len(pieces) > max_length - 1:
            break   # a sentence longer than the model's inputs: its later words are left out (the caption says so)
        firsts.append(len(ids))
        ids += pieces or [tokenizer.unk_id]
    words = words[:len(firsts)]
    if not words:
        raise BertCoreError("the sentence gave no words to tag")
    ids, types = as_batch(model, ids + [tokenizer.sep_id], [0] * (len(ids) + 1))
    tags = _first_output(model, ids, types).logits[0, firsts].argmax(-1).tolist()
    if word is None:   # the first word given a tag other than "O" (outside every chunk), else the first word
        word = next((i for i, t in enumerate(tags) if names[t] != "O"), 0)
    if not isinstance(word, int) or isinstance(word, bool) or not 0 <= word < len(words):
        raise BertCoreError(f"word {word!r} does not exist: the sentence has {len(words)} words (counted from 0)")
    tag = names[tags[word]]
    target = Target(f"P({tag}) for “{words[word]}”", "logits", firsts[word], tags[word], tag)
    answer = " ".join(f"{w}/{names[t]}" for w, t in zip(words, tags))
    return ids, types, [target], answer, words, word


def best_span(start_logits: torch.Tensor, end_logits: torch.Tensor, passage: torch.Tensor) -> tuple[int, int]:
    """The (start, end) token pair inside the passage (`passage`: [S] bool) with the largest start + end log-
    probability, end not before start and at most MAX_ANSWER_TOKENS long."""
    s, e = start_logits.float().log_softmax(-1), end_logits.float().log_softmax(-1)
    score = s[:, None] + e[None, :]
    n = len(s)
    i = torch.arange(n, device=score.device)
    length = i[None, :] - i[:, None]
    ok = passage[:, None] & passage[None, :] & (length >= 0) & (length < MAX_ANSWER_TOKENS)
    score = score.masked_fill(~ok, float("-inf"))
    flat = int(score.argmax())
    return divmod(flat, n)


def _span_targets(model, tokenizer, question, passage, max_length):
    if not isinstance(question, str) or not question.strip():
        raise BertCoreError("type a question")
    if not isinstance(passage, str) or not passage.strip():
        raise BertCoreError("give a passage to find the answer in")
    enc = tokenizer.encode_pair(question, passage, max_length)
    ids, types = as_batch(model, enc["input_ids"], enc["token_type_ids"])
    out = _first_output(model, ids, types)
    passage_tokens = (types[0] == 1) & (ids[0] != tokenizer.sep_id)
    start, end = best_span(out.start_logits[0], out.end_logits[0], passage_tokens)
    tokens = tokenizer.convert_ids_to_tokens(ids[0].tolist())
    answer = tokenizer.decode(ids[0, start:end + 1].tolist(), skip_special_tokens=True)
    return ids, types, [Target(f"P(start at {start + 1} “{tokens[start]}”)", "start_logits", None, start),
                        Target(f"P(end at {end + 1} “{tokens[end]}”)", "end_logits", None, end)], answer, [], None


def explain(model, tokenizer, kind: str, text: str, text_b: str | None = None, word: int | None = None,
            label_names=None, max_length: int = 128, steps: int = FIRST_STEPS) -> Explanation:
    """Why `model` (a fine-tuned model of `kind`) answered as it did on `text`: each token's salience for its
    answer's probability, and the change in that probability with each head switched off.

    labels: `text` (and `text_b` for a pair task); tags: `text`, and `word` (from 0; default the first word tagged
    other than "O"); spans: `text` is the question and `text_b` the passage (cut to `max_length` tokens)."""
    heads = dict(zip(KINDS, (BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering)))
    if kind not in heads:
        raise BertCoreError(f"the kind of fine-tuned model must be one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(model, heads[kind]):
        raise BertCoreError(f"a {kind} explanation needs a {heads[kind].__name__}, got a {type(model).__name__}")
    max_length = min(int(max_length), int(model.config.max_position_embeddings))
    if kind == "spans":
        ids, types, targets, answer, words, word = _span_targets(model, tokenizer, text, text_b, max_length)
    else:
        ids, types, targets, answer, words, word = (_label_targets if kind == "labels" else _tag_targets)(
            model, tokenizer, text, text_b if kind == "labels" else word, _names(model, label_names), max_length)
    saliences = adaptive_integrated_gradients(model, tokenizer, ids, types, targets, steps)
    name = "P(this answer) = P(start) x P(end)" if kind == "spans" else targets[0].name
    grid = head_grid(model, ids, types, name, lambda out: math.prod(_probability(out, t) for t in targets))
    return Explanation(kind=kind, tokens=tokenizer.convert_ids_to_tokens(ids[0].tolist()), answer=answer,
                       saliences=saliences, heads=grid, words=words, word=word)


# ------------------------------------------------------------------------------------------------ the figures

def salience_figure(e: Explanation) -> go.Figure:
    """Each token's salience, a panel per target: integrated gradients beside gradient x input."""
    labels = token_labels(e.tokens)
    n = len(e.saliences)
    fig = make_subplots(rows=1, cols=n, shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=[wrap(s.target.name, 40) for s in e.saliences])
    for col, s in enumerate(e.saliences, start=1):
        for values, name, colour in ((s.integrated, "integrated gradients", MODEL_COLOUR),
                                     (s.gradient_x_input, "gradient × input (one step)", WHAT_IF_COLOUR)):
            fig.add_trace(go.Bar(y=labels, x=values, orientation="h", name=name, marker_color=colour,
                                 showlegend=col == 1, legendgroup=name,
                                 hovertemplate="%{y}: %{x:+.4f}<extra>" + name + "</extra>"), row=1, col=col)
        fig.update_xaxes(title="salience (probability)", zeroline=True, zerolinecolor="#444", row=1, col=col)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(barmode="group", bargap=0.25)
    height = 170 + 34 * len(labels)
    return _fonts(_layout(fig, wrap(f"Which tokens made the answer: {e.answer}", 90), height=height,
                          legend="below"))


def head_grid_figure(e: Explanation) -> go.Figure:
    """Layers x heads: the change in the answer's probability, in points, with each head alone switched off."""
    grid = e.heads
    z = grid.change * 100
    layers, heads = z.shape
    top = float(np.abs(z).max()) or 1.0
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"head {h + 1}" for h in range(heads)], y=[f"layer {layer + 1}" for layer in range(layers)],
        zmin=-top, zmax=top, colorscale=VECTOR_SCALE, colorbar=dict(title="points"),
        texttemplate="%{z:+.1f}" if heads <= NUMBERS_UP_TO else None, textfont=dict(size=FONT),
        hovertemplate="%{y}, %{x} off: %{z:+.2f} points<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    title = wrap(f"Each head switched off: the change in {grid.name} (every head on: {grid.before:.1%})", 90)
    return _fonts(_layout(fig, title, height=max(260, 150 + 44 * layers)))


@dataclass
class SaliencePanel:
    """What a page draws: a summary line, then each figure with its key and caption, in order."""

    summary: str
    figures: list[tuple[str, go.Figure, str]]
    explanation: Explanation


def _ig_caption(e: Explanation) -> str:
    parts = [TEXT["target"].format(name=markdown(s.target.name), value=s.value, baseline=s.baseline_value,
                                   total=float(s.integrated.sum()) * 100, change=(s.value - s.baseline_value) * 100,
                                   gap=s.gap) for s in e.saliences]
    steps = e.saliences[0].steps
    how = TEXT["equal_steps" if steps == FIRST_STEPS else "refined_steps"].format(steps=steps, first=FIRST_STEPS,
                                                                                  gap=GAP_LIMIT)
    return TEXT["integrated"].format(how=how, baseline=BASELINE, parts="; ".join(parts))


def salience_panel_data(model, tokenizer, kind: str, text: str, text_b: str | None = None, word: int | None = None,
                        label_names=None, max_length: int = 128) -> SaliencePanel:
    """The "why did it decide" panel for one input (as salience.explain takes it); BertCoreError if bad."""
    e = explain(model, tokenizer, kind, text, text_b, word=word, label_names=label_names, max_length=max_length)
    first = e.saliences[0]
    if kind == "labels":
        summary = f"The model says **{markdown(e.answer)}** ({first.value:.0%})."
    elif kind == "tags":
        summary = (f"The word explained: **{markdown(e.words[e.word])}**, tagged **{markdown(first.target.label)}** "
                   f"({first.value:.0%}).")
    else:
        summary = (f"The model's answer: **{markdown(e.answer) or '(nothing)'}** (start {first.value:.0%}, end "
                   f"{e.saliences[1].value:.0%}).")
    return SaliencePanel(summary=summary, explanation=e, figures=[
        ("salience", salience_figure(e), _ig_caption(e)),
        ("salience-heads", head_grid_figure(e), TEXT["heads"].format(name=markdown(e.heads.name)))])
