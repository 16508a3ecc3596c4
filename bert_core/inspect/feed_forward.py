"""The rest of the layer, for one token: the feed-forward block step by step (W1·x + b1, the activation, W2·h + b2,
the residual and the LayerNorm), computed here from the layer's own weights and the attention block's output that
attention_steps hooked; what one of its units fires on, over every token of the model's held-out text; and their
figures (units and components count from 1 on screen)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from plotly.subplots import make_subplots

from bert_core.errors import BertCoreError
from bert_core.inspect.computation_figures import (FONT, MODEL_COLOUR, WHAT_IF_COLOUR, _dims, _fonts, _strip,
                                                   _symmetric)
from bert_core.inspect.embeddings import TokenPool, token_pool
from bert_core.inspect.inspection import group_word_pieces, word_text
from bert_core.inspect.figures import _layout, shorten, wrap
from bert_core.inspect.kit import check_head, hooked, kept, numpy32, own
from bert_core.inspect.safe_text import markdown

POOL_BATCH = 32    # token_pool's batch: which captured batch a pool sentence's activations sit in
STEPS = json.loads(Path(__file__).with_name("view_text.json").read_text(encoding="utf-8"))["feed_forward"]["steps"]
CONTEXT_CHARS = 64    # a sentence beside its bar: the marked token kept in view, the rest cut with "…"


@dataclass
class FeedForwardSteps:
    """One token through one layer's feed-forward block (layer and token count from 0)."""

    tokens: list[str]
    layer: int
    query: int
    activation: str       # the config's hidden_act ("gelu": the exact GELU)
    x: np.ndarray         # [H] the attention block's LayerNorm output for the token: the block's input
    pre: np.ndarray       # [I] W1·x + b1, one number a unit
    h: np.ndarray         # [I] the activation of pre
    out: np.ndarray       # [H] W2·h + b2
    residual: np.ndarray  # [H] out + x
    normed: np.ndarray    # [H] LayerNorm(residual): the layer's output, the next layer's input
    curve: np.ndarray     # [2, 201] the activation function over pre's range, for the figure

    @property
    def most_active(self) -> int:
        return int(np.argmax(self.h))


def feed_forward_steps(model, steps) -> FeedForwardSteps:
    """The feed-forward block of `steps`' layer for `steps`' query token (steps: attention_steps' result)."""
    block = model.bert.encoder.layer[steps.layer]
    w1, w2, norm = block.intermediate.dense, block.output.dense, block.output.LayerNorm
    act = block.intermediate.intermediate_act_fn
    with torch.inference_mode():
        x = torch.as_tensor(steps.model_normed, device=w1.weight.device)
        pre = F.linear(x, w1.weight.float(), w1.bias.float())
        h = act(pre)
        out = F.linear(h, w2.weight.float(), w2.bias.float())
        normed = F.layer_norm(out + x, x.shape, norm.weight.float(), norm.bias.float(), norm.eps)
        grid = torch.linspace(min(-4.0, float(pre.min())), max(4.0, float(pre.max())), 201, device=x.device)
        curve = torch.stack([grid, act(grid)])
    return FeedForwardSteps(tokens=steps.tokens, layer=steps.layer, query=steps.query,
                            activation=str(model.config.hidden_act), x=numpy32(x), pre=numpy32(pre), h=numpy32(h),
                            out=numpy32(out), residual=numpy32(out + x), normed=numpy32(normed), curve=numpy32(curve))


def what_each_step_does(ffn: FeedForwardSteps) -> list[str]:
    """A sentence a step, with this token's numbers (the token escaped for Markdown)."""
    return [step.format(token=markdown(ffn.tokens[ffn.query]), width=len(ffn.x), units=len(ffn.pre),
                        above=int((ffn.pre > 0).sum()), activation=ffn.activation.upper(),
                        lowest=float(ffn.curve[1].min()), top=ffn.most_active + 1, most=ffn.h[ffn.most_active])
            for step in STEPS]


@dataclass
class UnitPool:
    """Every token of a pool of sentences and each unit's activation on it, at one layer."""

    pool: TokenPool
    layer: int
    acts: np.ndarray      # [N, I] the activation (GELU's output) of every unit on every pool token


def unit_pool(model, tokenizer, sentences, source: str, layer: int) -> UnitPool:
    """The pool's tokens (embeddings.token_pool) with layer `layer`'s feed-forward activations, hooked as the pool
    is read: one pass over the sentences."""
    check_head(model, layer, 0)
    seen: list[torch.Tensor] = []
    # Only this thread's passes (kit.own): a student's page reading the same model at the same time put its own
    # sentence's activations among the pool's (an IndexError in a two-browser lesson test).
    with hooked(model.bert.encoder.layer[layer].intermediate.register_forward_hook(
            own(lambda module, args, output: seen.append(output.float().cpu())))):
        pool = token_pool(model, tokenizer, sentences, source, batch=POOL_BATCH)
    acts = [seen[s // POOL_BATCH][s % POOL_BATCH, p] for s, p in zip(pool.sentence_of, pool.position_of)]
    return UnitPool(pool=pool, layer=layer, acts=torch.stack(acts).numpy())


def cached_unit_pool(model, tokenizer, sentences, source: str, layer: int) -> UnitPool:
    """unit_pool, kept with the model (kit.kept): a redraw is free."""
    return kept(model, "unit pool", (source, tuple(sentences), layer),
                lambda: unit_pool(model, tokenizer, sentences, source, layer))


@dataclass
class UnitFiring:
    """The pool tokens on which one unit fires most, strongest first."""

    layer: int
    unit: int
    source: str
    tokens: list[str]
    contexts: list[str]   # each token's sentence as the model reads it (pieces joined into words), the token «marked»
    values: np.ndarray


def unit_firing(units: UnitPool, unit: int, k: int = 8) -> UnitFiring:
    """The `k` pool tokens with the highest activation of `unit` (from 0)."""
    if not 0 <= unit < units.acts.shape[1]:
        raise BertCoreError(f"unit {unit + 1} does not exist: the layer has {units.acts.shape[1]} units")
    pool, column = units.pool, units.acts[:, unit]
    top = np.argsort(-column, kind="stable")[:max(1, int(k))]
    contexts = []
    for i in top:
        same = np.flatnonzero(pool.sentence_of == pool.sentence_of[i])
        pieces = [pool.tokens[j] for j in same]
        marked = pieces[i - same[0]]
        pieces[i - same[0]] = ("##" if marked.startswith("##") else "") + f"«{marked.removeprefix('##')}»"
        contexts.append(" ".join(word_text(w) for w in group_word_pieces(pieces)))
    return UnitFiring(layer=units.layer, unit=unit, source=pool.source, tokens=[pool.tokens[i] for i in top],
                      contexts=contexts, values=column[top])


# ------------------------------------------------------------------------------------------------ the figures

def feed_forward_figure(ffn) -> go.Figure:
    """x, W1·x + b1, the activation, W2·h + b2, + x and the LayerNorm, each a strip (its numbers on hover)."""
    rows = [("x (the block's input)", ffn.x), ("W1·x + b1", ffn.pre), (ffn.activation.upper(), ffn.h),
            ("W2·h + b2", ffn.out), ("+ x (residual)", ffn.residual), ("LayerNorm (the layer's output)", ffn.normed)]
    fig = make_subplots(rows=len(rows), cols=1, vertical_spacing=0.11,
                        subplot_titles=[f"{i}. {name}: {len(z)} {'units' if i in (2, 3) else 'numbers'}"
                                        for i, (name, z) in enumerate(rows, 1)])
    for row, (name, z) in enumerate(rows, start=1):
        fig.add_trace(_strip(z[None], [""], _dims(len(z)), _symmetric(z), name=name, showscale=False,
                             hovertemplate=f"{name}, number %{{x}}: %{{z:.4f}}<extra></extra>"), row=row, col=1)
    fig.update_xaxes(nticks=10)
    fig.update_yaxes(showticklabels=False)
    token = f"token {ffn.query + 1} “{ffn.tokens[ffn.query]}”"
    return _fonts(_layout(fig, f"Layer {ffn.layer + 1}'s feed-forward block for {token} (each strip its own "
                                 "colour scale: red above 0, blue below)", height=640))


def gelu_figure(ffn, unit: int) -> go.Figure:
    """The activation function, every unit of this token on it (input W1·x + b1, output h), the picked one marked."""
    labels = [f"unit {i + 1}" for i in range(len(ffn.pre))]
    fig = go.Figure([
        go.Scatter(x=ffn.curve[0], y=ffn.curve[1], mode="lines", line=dict(color="#555", width=2),
                   name=ffn.activation.upper(), hoverinfo="skip"),
        go.Scatter(x=ffn.pre, y=ffn.h, mode="markers", marker=dict(color=MODEL_COLOUR, size=6, opacity=0.6),
                   text=labels, name="this token's units",
                   hovertemplate="%{text}: W1·x + b1 = %{x:.4f} → %{y:.4f}<extra></extra>"),
        go.Scatter(x=[ffn.pre[unit]], y=[ffn.h[unit]], mode="markers+text", text=[labels[unit]],
                   textposition="top left", textfont=dict(size=FONT), name=f"{labels[unit]} (picked)",
                   marker=dict(color=WHAT_IF_COLOUR, size=13, line=dict(color="#000", width=1)),
                   hovertemplate="%{text}: W1·x + b1 = %{x:.4f} → %{y:.4f}<extra></extra>")])
    fig.update_xaxes(title="W1·x + b1 (the unit's input)", zeroline=True)
    fig.update_yaxes(title=f"{ffn.activation.upper()} (its output)", zeroline=True)
    _layout(fig, f"{ffn.activation.upper()}, with this token's {len(ffn.pre)} units on it", height=420)
    # Top left, inside the plot: the curve stays near 0 there, and a legend below ran into the axis title.
    return _fonts(fig.update_layout(legend=dict(x=0.01, xanchor="left", y=0.98, yanchor="top")))


def _in_view(context: str) -> str:
    """The sentence cut to CONTEXT_CHARS around its «marked» token."""
    if len(context) <= CONTEXT_CHARS:
        return context
    start = max(0, min(context.index("«") - CONTEXT_CHARS // 3, len(context) - CONTEXT_CHARS))
    return ("…" if start else "") + shorten(context[start:], CONTEXT_CHARS)


def unit_firing_figure(firing) -> go.Figure:
    """The tokens on which one unit fires most, a bar each, its sentence beside it (whole on hover)."""
    y = [f"{rank} {token}" for rank, token in enumerate(firing.tokens, start=1)]
    fig = go.Figure(go.Bar(x=[float(v) for v in firing.values], y=y, orientation="h", marker_color=MODEL_COLOUR,
                           customdata=[wrap(c, 70) for c in firing.contexts], xaxis="x",
                           hovertemplate="%{y}: %{x:.4f} in<br>%{customdata}<extra></extra>"))
    for label, context in zip(y, firing.contexts):
        fig.add_annotation(x=0.30, xref="paper", xanchor="left", y=label, yref="y", text=_in_view(context),
                           showarrow=False, font=dict(size=FONT), align="left")
    fig.update_xaxes(domain=[0, 0.28], title="activation")
    fig.update_yaxes(autorange="reversed")
    title = (f"Layer {firing.layer + 1}, unit {firing.unit + 1}: where it fires most<br>"
             f"in the {shorten(firing.source, 96)}")
    return _fonts(_layout(fig, title, height=140 + 34 * len(y)))
