"""Plotly figures for fine-tuning: validation accuracy curves of several runs overlaid, confusion matrices, class bars.

Built from plain results (`FinetuneEval` lists, confusion lists); nothing here imports Streamlit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

RUN_COLORS = {"pretrained": "#1f77b4", "scratch": "#d62728", "tfidf": "#ff7f0e"}
RUN_LABELS = {"pretrained": "from pretrained", "scratch": "from scratch", "tfidf": "TF-IDF + logistic regression"}
# Runs drawn as a level line across the chart (finetune.BASELINE_NAME): fitted once, they have no curve.
LEVEL_RUNS = ("tfidf",)
_FALLBACK = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2")


def shorten(text: str, limit: int = 80) -> str:
    """A text cut to `limit` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def mistakes_table(misclassified: Sequence, limit: int = 8, text_chars: int = 200) -> list[dict]:
    """Rows for a "most confident mistakes" table: true label, predicted label and confidence first (so that a
    narrow column shows them), then the text, shortened to `text_chars`."""
    return [{"true label": m.true_label, "predicted": m.predicted_label, "confidence": f"{m.confidence:.0%}",
             "text": shorten(m.text, text_chars)} for m in list(misclassified)[:limit]]


def _color(name: str, i: int) -> str:
    return RUN_COLORS.get(name, _FALLBACK[i % len(_FALLBACK)])


def _value(event, key):
    return event[key] if isinstance(event, Mapping) else getattr(event, key)


def accuracy_curves_figure(runs: Mapping[str, Sequence], x: str = "elapsed_s", chance: float | None = None,
                           metric: str = "accuracy") -> go.Figure:
    """Validation accuracy (or macro_f1) of each run against training seconds (or step), one line per run; a run
    in LEVEL_RUNS (the bag-of-words baseline) is a dashed level line across the others."""
    fig = go.Figure()
    ends = [_value(e, x) for name, evals in runs.items() if name not in LEVEL_RUNS for e in evals]
    for i, (name, evals) in enumerate(runs.items()):
        if not evals:
            continue
        if name in LEVEL_RUNS:
            level, label = _value(evals[-1], metric), RUN_LABELS.get(name, name)
            fig.add_trace(go.Scatter(
                x=[0, max(ends, default=_value(evals[-1], x)) or 1], y=[level, level], mode="lines", name=label,
                line=dict(color=_color(name, i), width=2, dash="dash"),
                hovertemplate=f"{label}<br>{metric} {level:.1%}<extra></extra>"))
            continue
        fig.add_trace(go.Scatter(
            x=[_value(e, x) for e in evals], y=[_value(e, metric) for e in evals], mode="lines+markers",
            name=RUN_LABELS.get(name, name), line=dict(color=_color(name, i), width=3),
            hovertemplate=f"{RUN_LABELS.get(name, name)}<br>%{{x:.1f}}<br>{metric} %{{y:.1%}}<extra></extra>"))
    if chance is not None:
        fig.add_hline(y=chance, line=dict(color="#7f7f7f", dash="dash"), annotation_text="majority class",
                      annotation_position="bottom right")
    fig.update_xaxes(title="training seconds" if x == "elapsed_s" else "step", rangemode="tozero")
    fig.update_yaxes(title=f"validation {metric.replace('_', '-')}", range=[0, 1], tickformat=".0%")
    title = ("Validation accuracy: same model, same budget, with and without pretraining" if len(runs) <= 2
             else "Validation accuracy: the same data and budget for every run")
    fig.update_layout(title=title,
                      height=380, margin=dict(l=60, r=20, t=50, b=40), template="plotly_white",
                      legend=dict(orientation="h", y=-0.2))
    return fig


def confusion_figure(confusion: Sequence[Sequence[int]], label_names: Sequence[str], title: str = "") -> go.Figure:
    """Heatmap of a confusion matrix (rows: true label, columns: predicted), counts written in the cells."""
    k = len(label_names)
    totals = [max(sum(row), 1) for row in confusion]
    share = [[v / totals[r] for v in row] for r, row in enumerate(confusion)]  # colour by row share: recall
    fig = go.Figure(go.Heatmap(
        z=share, x=list(label_names), y=list(label_names), text=[[str(v) for v in row] for row in confusion],
        texttemplate="%{text}", colorscale="Blues", zmin=0, zmax=1, showscale=False,
        hovertemplate="true %{y}<br>predicted %{x}<br>%{text} examples<extra></extra>"))
    fig.update_xaxes(title="predicted", side="bottom", type="category")
    fig.update_yaxes(title="true label", autorange="reversed", type="category")
    size = min(max(260, 60 * k + 120), 700)
    fig.update_layout(title=title or "Confusion matrix", height=size, margin=dict(l=90, r=20, t=50, b=60),
                      template="plotly_white")
    return fig


def class_probabilities_figure(probabilities: Mapping[str, Sequence[float]], label_names: Sequence[str]) -> go.Figure:
    """Grouped bars: each model's probability for each class of one typed sentence."""
    fig = go.Figure()
    for i, (name, probs) in enumerate(probabilities.items()):
        fig.add_trace(go.Bar(x=list(label_names), y=list(probs), name=RUN_LABELS.get(name, name),
                             marker_color=_color(name, i), hovertemplate="%{x}: %{y:.1%}<extra></extra>"))
    fig.update_yaxes(title="probability", range=[0, 1], tickformat=".0%")
    fig.update_xaxes(type="category")
    fig.update_layout(barmode="group", height=320, margin=dict(l=60, r=20, t=40, b=40), template="plotly_white",
                      title="Class probabilities", legend=dict(orientation="h", y=-0.25))
    return fig
