"""Figures for fine-tuning: runs' validation curves, confusion matrices, class bars, a sentence's words coloured by
predicted tag, and a passage with its predicted answer and start and end probabilities; the coloured texts are HTML
with every piece of user text escaped."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from bert_core.inspect.figures import _get as _value

RUN_COLORS = {"pretrained": "#1f77b4", "scratch": "#d62728", "tfidf": "#ff7f0e", "word-majority": "#ff7f0e",
              "pos-majority": "#8c564b"}
RUN_LABELS = {"pretrained": "from pretrained", "scratch": "from scratch", "tfidf": "TF-IDF + logistic regression",
              "word-majority": "each word's most frequent tag", "pos-majority": "each POS tag's most frequent tag"}
# Runs drawn as a level line across the chart (baseline_runs): fitted once, they have no curve.
LEVEL_RUNS = ("tfidf", "word-majority", "pos-majority")
_FALLBACK = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2")


def shorten(text: str, limit: int = 80) -> str:
    """A text cut to `limit` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def mistakes_table(misclassified: Sequence, limit: int = 8, text_chars: int = 200) -> list[dict]:
    """A "most confident mistakes" table, the short columns first (a narrow table shows them), texts cut."""
    return [{"true label": m.true_label, "predicted": m.predicted_label, "confidence": f"{m.confidence:.0%}",
             "text": shorten(m.text, text_chars)} for m in list(misclassified)[:limit]]


def _color(name: str, i: int) -> str:
    return RUN_COLORS.get(name, _FALLBACK[i % len(_FALLBACK)])


def accuracy_curves_figure(runs: Mapping[str, Sequence], x: str = "elapsed_s", chance: float | None = None,
                           metric: str = "accuracy", metric_label: str | None = None,
                           stages: Sequence = ()) -> go.Figure:
    """Each run's validation `metric` over seconds (or steps), baselines dashed, curriculum stages dotted."""
    label_of_metric = metric_label or metric.replace("_", "-")
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
                hovertemplate=f"{label}<br>{label_of_metric} {level:.1%}<extra></extra>"))
            continue
        fig.add_trace(go.Scatter(
            x=[_value(e, x) for e in evals], y=[_value(e, metric) for e in evals], mode="lines+markers",
            name=RUN_LABELS.get(name, name), line=dict(color=_color(name, i), width=3),
            hovertemplate=f"{RUN_LABELS.get(name, name)}<br>%{{x:.1f}}<br>{label_of_metric} %{{y:.1%}}<extra></extra>"))
    if chance is not None:
        # A line of the legend, as the baselines are: a label on the chart lay where a curve near chance ran.
        fig.add_trace(go.Scatter(x=[0, max(ends, default=0) or 1], y=[chance, chance], mode="lines",
                                 name="majority class", line=dict(color="#7f7f7f", dash="dash"),
                                 hovertemplate=f"majority class<br>{label_of_metric} {chance:.1%}<extra></extra>"))
    if len(stages) > 1:
        for stage in stages:
            fig.add_vline(x=_value(stage, x), line=dict(color="#9e9e9e", width=1, dash="dot"),
                          annotation_text=stage_label(stage.name), annotation_position="top right",
                          annotation_font=dict(size=12, color="#616161"))
    fig.update_xaxes(title="training seconds" if x == "elapsed_s" else "step", rangemode="tozero")
    fig.update_yaxes(title=f"validation {label_of_metric}", range=[0, 1], tickformat=".0%")
    title = (f"Validation {label_of_metric}: same model, same budget, with and without pretraining"
             if len(runs) <= 2 else f"Validation {label_of_metric}: the same data and budget for every run")
    fig.update_layout(title=title,
                      height=380, margin=dict(l=60, r=20, t=50, b=40), template="plotly_white",
                      legend=dict(orientation="h", y=-0.2))
    return fig


def stage_label(name: str) -> str:
    """A curriculum stage's short name: "drill: where" -> "where", "toy QA stories (seed 0)" -> "toy QA stories"."""
    return name.removeprefix("drill: ").split(" (")[0]


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
    top = 50 + 22 * title.count("<br>")   # room for a title of two lines (the page's: a third of a projector)
    size = min(max(260, 60 * k + 120), 700) + top - 50
    fig.update_layout(title=title or "Confusion matrix", height=size, margin=dict(l=90, r=20, t=top, b=60),
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


# ---------------------------------------------------------------------------------------------- token tags

# One colour per chunk type (the CoNLL-2000 ones first; others cycle through the rest); a chunk's first word is
# drawn darker than the words inside it, so "B-NP I-NP" reads as one noun phrase that starts at the first.
TAG_COLORS = {"NP": "#aec7e8", "VP": "#ffbb78", "PP": "#98df8a", "ADVP": "#ff9896", "ADJP": "#c5b0d5",
              "SBAR": "#c49c94", "PRT": "#f7b6d2", "CONJP": "#dbdb8d", "INTJ": "#9edae5", "LST": "#c7c7c7",
              "UCP": "#bcbd22"}
_MORE_TAG_COLORS = ("#e6ab02", "#66c2a5", "#fc8d62", "#8da0cb", "#e78ac3", "#a6d854", "#ffd92f", "#b3b3b3")


def tag_color(tag: str) -> str:
    """The background of a word tagged `tag`: its chunk type's colour ("O" and unknown plain tags: grey shades)."""
    kind = tag.split("-", 1)[1] if tag[:2] in ("B-", "I-") else tag
    if tag == "O":
        return "#f0f0f0"
    if kind not in TAG_COLORS:
        return _MORE_TAG_COLORS[sum(map(ord, kind)) % len(_MORE_TAG_COLORS)]
    return TAG_COLORS[kind]


def tagged_words_html(words: Sequence, gold: Sequence[str] | None = None) -> str:
    """A sentence as word boxes coloured by predicted tag, with `gold`: a tick or the true tag in red."""
    boxes = []
    for i, w in enumerate(words):
        tag = html.escape(w.tag)
        border = "2px solid #555" if w.tag.startswith("B-") else "1px solid #ccc"
        gold_line = ""
        if gold is not None and i < len(gold):
            ok = gold[i] == w.tag
            style = "color:#2a7a2a" if ok else "color:#c0392b;font-weight:600"
            gold_line = f'<div style="font-size:0.75em;{style}">{"✓" if ok else html.escape(gold[i])}</div>'
        boxes.append(
            f'<span title="{tag}: {w.probability:.0%}" style="display:inline-block;margin:2px;padding:2px 6px;'
            f'border-radius:4px;border-left:{border};background:{tag_color(w.tag)};text-align:center">'
            f'<div>{html.escape(w.word)}</div><div style="font-size:0.75em;color:#333">{tag} '
            f'<span style="color:#666">{w.probability:.0%}</span></div>{gold_line}</span>')
    return '<div style="line-height:1.2">' + "".join(boxes) + "</div>"


def per_type_table(per_type: Mapping[str, Mapping[str, float]]) -> list[dict]:
    """Rows of a per-chunk-type score table, the most frequent type first."""
    rows = sorted(per_type.items(), key=lambda kv: (-kv[1]["support"], kv[0]))
    return [{"chunk type": t, "F1": f"{v['f1']:.1%}", "precision": f"{v['precision']:.1%}",
             "recall": f"{v['recall']:.1%}", "chunks in validation": int(v["support"])} for t, v in rows]


# ---------------------------------------------------------------------------------------------- answer spans


def answer_html(passage: str, start_char: int, end_char: int) -> str:
    """The passage with the predicted answer highlighted, escaped."""
    start, end = max(start_char, 0), min(end_char, len(passage))
    parts = [passage] if end <= start else [passage[:start], passage[start:end], passage[end:]]
    text = "".join(f'<mark style="background:#ffd54f;padding:1px 2px;border-radius:3px">{html.escape(p)}</mark>'
                   if i == 1 else html.escape(p) for i, p in enumerate(parts) if p)
    return f'<div style="line-height:1.7">{text}</div>'


def span_probabilities_figure(answer, title: str = "") -> go.Figure:
    """Each passage token's probability of being the answer's start and its end (in the answer's window)."""
    keep = [i for i, p in enumerate(answer.passage_token) if p]
    tokens = [f"{answer.tokens[i]}·{n}" for n, i in enumerate(keep)]  # made unique, so repeated words keep a bar
    fig = go.Figure([go.Bar(x=tokens, y=[probs[i] for i in keep], name=name, marker_color=color,
                            hovertemplate=f"%{{x}}<br>{name} %{{y:.1%}}<extra></extra>")
                     for name, probs, color in (("start", answer.start_probs, "#1f77b4"),
                                                ("end", answer.end_probs, "#d62728"))])
    fig.update_xaxes(type="category", tickangle=-60, tickvals=tokens,
                     ticktext=[t.rsplit("·", 1)[0] for t in tokens])
    fig.update_yaxes(title="probability", range=[0, 1], tickformat=".0%")
    fig.update_layout(barmode="group", height=340, margin=dict(l=60, r=20, t=40, b=90), template="plotly_white",
                      title=title or "Where the answer starts and ends", legend=dict(orientation="h", y=1.12))
    return fig
