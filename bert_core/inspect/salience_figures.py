"""Figures for "why a fine-tuned model decided" (salience), and the one call a page makes for the whole panel,
`salience_panel_data`: its figures with their captions. Tokens, layers and heads count from 1."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bert_core.inspect.computation_figures import (FONT, MODEL_COLOUR, VECTOR_SCALE, WHAT_IF_COLOUR, _fonts,
                                                  token_labels)
from bert_core.inspect.figures import _layout, wrap
from bert_core.inspect.safe_text import markdown
from bert_core.inspect.salience import BASELINE, FIRST_STEPS, GAP_LIMIT, Explanation, explain

NUMBERS_UP_TO = 16   # a grid this wide (heads) or narrower shows its numbers in the cells, not only on hover


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
    parts = [f"{markdown(s.target.name)}: {s.value:.1%} at the input, {s.baseline_value:.1%} at the baseline; the "
             f"saliences add up to {float(s.integrated.sum()) * 100:+.2f} points of the "
             f"{(s.value - s.baseline_value) * 100:+.2f} (completeness gap {s.gap:.1%})" for s in e.saliences]
    steps = e.saliences[0].steps
    if steps == FIRST_STEPS:
        how = (f"{steps} equal steps (enough: their trapezoids' errors add up to under {GAP_LIMIT:.0%} of the "
               "change)")
    else:
        how = (f"{steps} steps ({FIRST_STEPS} equal ones to begin with, each halved while its own error was over "
               f"its share, until the errors added up to under {GAP_LIMIT:.0%} of the change: the steps crowd "
               "where the path bends)")
    return (f"Blue: integrated gradients, {how}, along the straight line from a baseline to "
            f"this input, on the word embeddings. The baseline: {BASELINE}. A token's bar is its share of the "
            "change in probability from the baseline to the input. " + "; ".join(parts) + ". Orange: gradient × "
            "input, one gradient at the input times the same difference: cheap, and misleading where the model is "
            "saturated (a flat probability has a small gradient however much a token mattered).")


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
    grid_caption = ("Each cell switches one head off (its output set to zero, the others on) and shows how "
                    f"{markdown(e.heads.name)} changes, in percentage points. Red: the answer gets likelier without "
                    "the head; blue: the head was helping it. Most heads matter little alone: a model spreads its "
                    "work.")
    return SaliencePanel(summary=summary, explanation=e, figures=[
        ("salience", salience_figure(e), _ig_caption(e)),
        ("salience-heads", head_grid_figure(e), grid_caption)])
