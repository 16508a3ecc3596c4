"""Figures of the feed-forward block (bert_core.inspect.feed_forward): its steps as strips, the activation's curve
with this token's units on it, and where one unit fires most. Units and components count from 1 on screen."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bert_core.inspect.computation_figures import (FONT, MODEL_COLOUR, VECTOR_SCALE, WHAT_IF_COLOUR, _dims, _fonts,
                                                   _symmetric)
from bert_core.inspect.figures import _layout, shorten, wrap

CONTEXT_CHARS = 64    # a sentence beside its bar: the marked token kept in view, the rest cut with "…"


def feed_forward_figure(ffn) -> go.Figure:
    """x, W1·x + b1, the activation, W2·h + b2, + x and the LayerNorm, each a strip (its numbers on hover)."""
    rows = [("x (the block's input)", ffn.x), ("W1·x + b1", ffn.pre), (ffn.activation.upper(), ffn.h),
            ("W2·h + b2", ffn.out), ("+ x (residual)", ffn.residual), ("LayerNorm (the layer's output)", ffn.normed)]
    fig = make_subplots(rows=len(rows), cols=1, vertical_spacing=0.11,
                        subplot_titles=[f"{i}. {name}: {len(z)} {'units' if i in (2, 3) else 'numbers'}"
                                        for i, (name, z) in enumerate(rows, 1)])
    for row, (name, z) in enumerate(rows, start=1):
        zmax = _symmetric(z)
        fig.add_trace(go.Heatmap(z=z[None], x=_dims(len(z)), y=[""], zmin=-zmax, zmax=zmax, name=name,
                                 colorscale=VECTOR_SCALE, showscale=False,
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
