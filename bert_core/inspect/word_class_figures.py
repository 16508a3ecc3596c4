"""The Train page's figure of what each layer knows as a run trains (inspect.word_class_timelapse): the
part-of-speech probe's held-out accuracy per layer against the step, the random-init model's best layer marked."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from bert_core.inspect.computation_figures import _fonts, layer_names
from bert_core.inspect.figures import DISTINCT_COLORS, SERIES_COLORS, _layout


def word_class_timeline_figure(steps: Sequence[int], accuracy: np.ndarray, random_model: np.ndarray,
                               majority: float) -> go.Figure:
    """A line a layer (the embeddings first) of [snapshots, L + 1] `accuracy` against `steps`; dashed, the random
    model of the same shape at its best layer; dotted, always guessing the commonest tag."""
    fig = go.Figure()
    names = layer_names(accuracy.shape[1])
    for layer, name in enumerate(names):
        fig.add_trace(go.Scatter(x=list(steps), y=accuracy[:, layer].tolist(), mode="lines+markers", name=name,
                                 line=dict(color=DISTINCT_COLORS[layer % 10]),
                                 hovertemplate=f"{name}, step %{{x:,}}: %{{y:.1%}}<extra></extra>"))
    best = int(np.argmax(random_model))
    for y, name, dash in ((float(random_model[best]), f"random-init model ({names[best]})", "dash"),
                          (majority, "always the commonest tag", "dot")):
        fig.add_trace(go.Scatter(x=[steps[0], steps[-1]], y=[y, y], mode="lines", name=name,
                                 line=dict(color=SERIES_COLORS["baseline"], dash=dash),
                                 hovertemplate=f"{name}: %{{y:.1%}}<extra></extra>"))
    fig.update_xaxes(title="training step")
    fig.update_yaxes(title="held-out words tagged right", range=[0, 1], tickformat=".0%")
    return _fonts(_layout(fig, "Part of speech read off each layer, snapshot by snapshot", height=360))
