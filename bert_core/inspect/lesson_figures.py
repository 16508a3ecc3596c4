"""Figures of the views the lesson brought: the model's guess at each chosen position, its accuracy by masking
decision, one training step's gradient per layer, and the lesson's attention steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bert_core.inspect import computation_figures
from bert_core.inspect.figures import DECISION_COLORS, _layout, box_cells, shorten, wrap

if TYPE_CHECKING:
    from bert_core.inspect.inspection import ChosenGuess, DecisionAccuracy, PairAttention

RIGHT, WRONG = "✓", "✗"
TOKEN_COLORS = {"special token": "#d9d9d9", "sentence A": "#cfe2f3", "sentence B": "#fde9c9"}


def tokens_figure(tokens: Sequence[str], segments: Sequence[int], per_line: int = 12) -> go.Figure:
    """The word pieces the model reads, a box each: specials grey, sentence A blue, B sand (## marks kept)."""
    fig = go.Figure()
    groups = {kind: [] for kind in TOKEN_COLORS}
    for i, (t, seg) in enumerate(zip(tokens, segments)):
        kind = "special token" if t.startswith("[") and t.endswith("]") else ("sentence B" if seg else "sentence A")
        groups[kind].append((i, t))
    for kind, items in groups.items():
        if items:
            box_cells(fig, kind, TOKEN_COLORS[kind], [i % per_line for i, _ in items],
                      [-(i // per_line) for i, _ in items], [shorten(t, 9) for _, t in items],
                      [f"#{i + 1}: {t}" for i, t in items], font_size=15)
    lines = max(1, -(-len(tokens) // per_line))
    fig.update_xaxes(visible=False, range=[-0.6, per_line - 0.4])
    fig.update_yaxes(visible=False, range=[-lines + 0.4, 0.6])
    return _layout(fig, f"{len(tokens)} tokens, as the model reads them", height=130 + 80 * lines, legend="below")


def guesses_figure(guesses: Sequence[ChosenGuess]) -> go.Figure:
    """A column per chosen position: what the model saw, the token, and its guess, large for a classroom."""
    fig = go.Figure()
    n = max(1, len(guesses))
    for decision, color in DECISION_COLORS.items():
        picked = [(i, g) for i, g in enumerate(guesses) if g.decision == decision]
        if not picked:
            continue
        box_cells(fig, f"{decision}: model saw", color, [i for i, _ in picked], [1] * len(picked),
                  [shorten(g.shown) for _, g in picked],
                  [f"position {g.position + 1}: the model saw {g.shown}; the token was {g.token}"
                   for _, g in picked],
                  font_size=13)
    fig.add_trace(go.Scatter(
        x=list(range(len(guesses))), y=[0] * len(guesses), mode="text", name="the token",
        text=[shorten(g.token) for g in guesses], textfont=dict(size=14, color="#000"), hoverinfo="skip",
        showlegend=False))
    fig.add_trace(go.Scatter(
        x=list(range(len(guesses))), y=[-1] * len(guesses), mode="text", name="its guess",
        text=[f"{RIGHT if g.right else WRONG} {shorten(g.guess)}<br>{g.guess_probability:.0%}" for g in guesses],
        textfont=dict(size=14, color=["#1a7f1a" if g.right else "#b00000" for g in guesses]),
        hovertext=[f"guess {g.guess} ({g.guess_probability:.1%}); the token {g.token} got "
                   f"{g.original_probability:.1%}" for g in guesses], hoverinfo="text", showlegend=False))
    fig.update_xaxes(visible=False, range=[-0.6, max(n, 8) - 0.4])
    fig.update_yaxes(range=[-1.7, 1.6], tickmode="array", tickvals=[1, 0, -1], ticktext=["saw", "token", "guess"],
                     tickfont=dict(size=14), showgrid=False, zeroline=False)
    _layout(fig, "The model's guess at each chosen position", height=320, legend="below")
    return fig.update_layout(margin_l=70)   # room for the rows' names at 14 px


def decision_accuracy_bars(accuracy: Mapping[str, DecisionAccuracy], title: str = "") -> go.Figure:
    """Right top guesses by masking decision over a batch, each bar with its count."""
    names = list(accuracy)
    values = [accuracy[d].accuracy for d in names]
    fig = go.Figure(go.Bar(
        x=names, y=values, marker_color=[DECISION_COLORS.get(d, "#1f77b4") for d in names],
        text=[f"{v:.0%} of {accuracy[d].count:,}" for d, v in zip(names, values)], textposition="outside",
        textfont=dict(size=14), hovertemplate="%{x}: %{y:.1%}<extra></extra>"))
    fig.update_yaxes(range=[0, 1.12], tickformat=".0%", title="right top guess")
    fig.update_xaxes(tickfont=dict(size=14))
    return _layout(fig, title or "Right guesses by masking decision", height=340, showlegend=False)


def layer_gradient_figure(norms: Sequence[tuple[str, float]], step: int) -> go.Figure:
    """Each part of the model's gradient norm in one update (before clipping), input side at the top."""
    fig = go.Figure(go.Bar(
        x=[v for _, v in norms], y=[n for n, _ in norms], orientation="h", marker_color="#1f77b4",
        text=[f"{v:.3g}" for _, v in norms], textposition="auto", textfont=dict(size=13),
        hovertemplate="%{y}: %{x:.4g}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=14))
    fig.update_xaxes(title="gradient norm (before clipping)")
    return _layout(fig, f"Gradient by part of the model, update {step:,}", height=max(260, 70 + 38 * len(norms)),
                   showlegend=False)


def pair_attention_figure(summary: PairAttention) -> go.Figure:
    """The share of B's attention on A by layer and head, where B follows A and where it is random."""
    panels = ((f"B follows A ({summary.pairs_follow} pairs)", summary.follows),
              (f"B is random ({summary.pairs_random} pairs)", summary.random))
    top = float(np.nanmax([np.nanmax(v) for _, v in panels if np.isfinite(v).any()] or [1.0]))
    fig = make_subplots(rows=1, cols=2, subplot_titles=[t for t, _ in panels], horizontal_spacing=0.08)
    for col, (_, values) in enumerate(panels, start=1):
        layers, heads = values.shape
        fig.add_trace(go.Heatmap(
            z=values, x=[f"H{h + 1}" for h in range(heads)], y=[f"L{l + 1}" for l in range(layers)],
            coloraxis="coloraxis", text=[[f"{v:.0%}" if np.isfinite(v) else "" for v in row] for row in values],
            texttemplate="%{text}", textfont=dict(size=14),
            hovertemplate="%{y} %{x}: %{z:.1%} of B's attention on A<extra></extra>"), row=1, col=col)
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=14))
    fig.update_xaxes(tickfont=dict(size=14))
    fig.update_layout(coloraxis=dict(colorscale="Blues", cmin=0, cmax=top, colorbar=dict(tickformat=".0%")))
    return _layout(fig, "Sentence B's attention on sentence A, by layer and head",
                   height=max(300, 140 + 60 * summary.follows.shape[0]), showlegend=False)


def attends_scores_figure(steps) -> go.Figure:
    """How BERT computes' scores figure, its title naming the layer and head (a screenshot says which)."""
    fig = computation_figures.scores_figure(steps)
    title = str(fig.layout.title.text or "").replace("<br>", " ")
    fig.update_layout(title_text=wrap(f"Layer {steps.layer + 1}, head {steps.head + 1}. {title}", 90))
    return computation_figures._room_above(fig)


def values_figure(steps) -> go.Figure:
    """Every token's value for this head, labelled with its weight, and their weighted sum, as strips."""
    cf = computation_figures
    labels = [f"{name} × {w:.2f}" for name, w in zip(cf.token_labels(steps.tokens), steps.probs)]
    dims = cf._dims(steps.head_dim)
    zmax = cf._symmetric(steps.v, steps.context)
    numbers = "%{z:.2f}" if steps.head_dim <= cf.NUMBERS_UP_TO else None
    fig = make_subplots(rows=2, cols=1, row_heights=[len(labels), 1.5], vertical_spacing=0.12, shared_xaxes=True,
                        subplot_titles=("4. every token's value, and the weight it gets",
                                        f"5. the weighted sum: what token {steps.query + 1} takes from this head"))
    for row, (z, y, what) in enumerate(((steps.v, labels, "value of "), (steps.context[None], ["weighted sum"], "")),
                                       start=1):
        fig.add_trace(cf._strip(z, y, dims, zmax, showscale=row == 1, colorbar=dict(title="value", len=0.6, y=0.7),
                                texttemplate=numbers, textfont=dict(size=cf.FONT - 1),
                                hovertemplate=f"{what}%{{y}}, component %{{x}}: %{{z:.4f}}<extra></extra>"),
                      row=row, col=1)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title=f"component (the head's {steps.head_dim} numbers)", row=2, col=1)
    title = (f"Layer {steps.layer + 1}, head {steps.head + 1}: the values token {steps.query + 1} "
             f"“{steps.tokens[steps.query]}” mixes, and their weighted sum")
    return cf._fonts(_layout(fig, wrap(title, 90), height=190 + 26 * (len(labels) + 2)))
