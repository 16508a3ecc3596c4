"""Plotly figures for "How BERT computes" (attention step by step, each layer's guess, heads switched off,
embeddings, word maps, the grammar check), from the results of attention_steps, embeddings and grammar.
Layers, heads and tokens are counted from 1 in every label a person reads (the results count from 0)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bert_core.inspect.figures import (DISTINCT_COLORS, FUTURE_COLOUR, SERIES_COLORS, TITLE_PX, TOOLBAR_PX, _layout,
                                      _probability_range, wrap)

FONT = 13             # every label a class reads from a projector: at least 12 px
NUMBERS_UP_TO = 16    # a head this narrow (or narrower) shows its numbers in the cells, not only on hover
VECTOR_SCALE = "RdBu_r"  # negative blue, positive red, zero white: the sign of a component reads at a glance
MODEL_COLOUR, WHAT_IF_COLOUR, A_COLOUR, B_COLOUR = "#1f77b4", "#ff7f0e", "#1f77b4", "#d62728"


def token_labels(tokens: Sequence[str]) -> list[str]:
    """"1 the", "2 dog"...: tokens numbered from 1, so that two equal tokens stay apart on an axis."""
    return [f"{i + 1} {t}" for i, t in enumerate(tokens)]


def _dims(n: int) -> list[str]:
    return [str(i + 1) for i in range(n)]


def layer_names(count: int) -> list[str]:
    """"embeddings", "layer 1", ...: the hidden states after the embeddings and after each of `count - 1` layers."""
    return ["embeddings", *[f"layer {i}" for i in range(1, count)]]


def _strip(z, y, x, zmax: float, **options) -> go.Heatmap:
    """Vectors as rows of cells, a component a column, on the signed scale (zero white) from -zmax to zmax."""
    return go.Heatmap(**{"z": z, "y": y, "x": x, "zmin": -zmax, "zmax": zmax, "colorscale": VECTOR_SCALE,
                         "hovertemplate": "%{y}, component %{x}: %{z:.4f}<extra></extra>", **options})


def _token_name(steps) -> str:
    return f"Token {steps.query + 1} “{steps.tokens[steps.query]}”"


def _symmetric(*arrays: np.ndarray) -> float:
    top = max(float(np.abs(a).max()) for a in arrays if a.size)
    return top if top > 0 else 1.0


SUBTITLE_PX = 22      # a subplot title's line, at FONT + 1


def _fonts(fig: go.Figure) -> go.Figure:
    fig.update_layout(font=dict(size=FONT))
    fig.update_xaxes(tickfont=dict(size=FONT))
    fig.update_yaxes(tickfont=dict(size=FONT))
    fig.update_annotations(font_size=FONT + 1)
    return _room_above(fig)


def _room_above(fig: go.Figure) -> go.Figure:
    """A top margin that holds, under the toolbar, every line of the title and of the top row's subplot titles (the
    height grows by as much): a two-line title otherwise ran into the first panel's at 1280 px."""
    title = str(fig.layout.title.text or "")
    lines = title.count("<br>") + 1 if title else 0
    top_row = [a for a in fig.layout.annotations
               if a.yref == "paper" and a.yanchor == "bottom" and a.y is not None and a.y > 0.98]
    sub = max((str(a.text or "").count("<br>") + 1 for a in top_row), default=0)
    need = TOOLBAR_PX + TITLE_PX * lines + SUBTITLE_PX * sub + 8
    top = fig.layout.margin.t if fig.layout.margin.t is not None else 100
    if top < need:
        fig.update_layout(margin_t=need, height=(fig.layout.height or 450) + need - top)
    return fig


def vectors_figure(steps) -> go.Figure:
    """The head's query for the chosen token and every token's key and value, as strips."""
    labels = token_labels(steps.tokens)
    d = steps.head_dim
    dims = _dims(d)
    zmax = _symmetric(steps.q, steps.k, steps.v)
    s = len(labels)
    fig = make_subplots(rows=3, cols=1, row_heights=[1, s, s], vertical_spacing=0.09,
                        subplot_titles=(f"query of token {labels[steps.query]}", "keys of every token",
                                        "values of every token"))
    show_numbers = d <= NUMBERS_UP_TO
    for row, (z, y, name) in enumerate(((steps.q[None], [labels[steps.query]], "query"), (steps.k, labels, "key"),
                                        (steps.v, labels, "value")), start=1):
        fig.add_trace(_strip(z, y, dims, zmax, showscale=row == 1, colorbar=dict(title="value", len=0.5, y=0.75),
                             texttemplate="%{z:.2f}" if show_numbers else None, textfont=dict(size=FONT - 1),
                             hovertemplate=f"{name} of %{{y}}, component %{{x}}: %{{z:.4f}}<extra></extra>"),
                      row=row, col=1)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title=f"component (the head's {d} dimensions)", row=3, col=1)
    height = 150 + 26 * (2 * s + 1)
    return _fonts(_layout(fig, f"Layer {steps.layer + 1}, head {steps.head + 1}: query, keys and values",
                          height=height))


def scores_figure(steps, temperature: float = 1.0, what_if: np.ndarray | None = None) -> go.Figure:
    """q·k for every key, divided by √d, then the softmax (a masked key grey), with a what-if temperature."""
    labels = token_labels(steps.tokens)
    hidden = ~steps.allowed
    colour = [FUTURE_COLOUR if h else MODEL_COLOUR for h in hidden]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("1. score q·k", f"2. divided by √d = √{steps.head_dim} "
                                        f"= {np.sqrt(steps.head_dim):.2f}",
                                        "3. softmax: the attention weights (they sum to 1)"))
    for row, (y, name) in enumerate(((steps.scores, "q·k"), (steps.scaled, "q·k / √d")), start=1):
        fig.add_trace(go.Bar(x=labels, y=y, marker_color=colour, name=name, showlegend=False,
                             hovertemplate=f"%{{x}}: {name} = %{{y:.4f}}<extra></extra>"), row=row, col=1)
    fig.add_trace(go.Bar(x=labels, y=steps.probs, marker_color=colour, name="the model (temperature 1)",
                         text=[("" if h else f"{p:.2f}") for p, h in zip(steps.probs, hidden)],
                         textposition="outside", textfont=dict(size=FONT - 1), cliponaxis=False,
                         hovertemplate="%{x}: weight %{y:.4f}<extra></extra>"), row=3, col=1)
    if what_if is not None and temperature != 1.0:
        fig.add_trace(go.Bar(x=labels, y=what_if, marker_color=WHAT_IF_COLOUR,
                             name=f"what-if: temperature {temperature:g}",
                             hovertemplate="%{x}: what-if weight %{y:.4f}<extra></extra>"), row=3, col=1)
    top = max(float(steps.probs.max()), float(what_if.max()) if what_if is not None else 0.0)
    fig.update_yaxes(range=[0, min(1.15, top * 1.25 + 0.02)], row=3, col=1)
    fig.update_xaxes(tickangle=-45)
    masked_note = "" if not hidden.any() else (
        " — grey: hidden by the causal mask (a later token), its score set to a huge negative" if steps.causal
        else " — grey: hidden by the mask")
    # A number too small to read at 12 px is left out rather than shrunk (its exact value is on hover).
    fig.update_layout(barmode="group", showlegend=what_if is not None and temperature != 1.0,
                      uniformtext=dict(minsize=FONT - 1, mode="hide"))
    title = wrap(f"{_token_name(steps)}: its scores and weights over every token{masked_note}", 90)
    return _fonts(_layout(fig, title, height=620, legend="below"))


def context_figure(steps) -> go.Figure:
    """Weighted values and their sum, then heads joined, projected, the residual and the LayerNorm, as strips."""
    labels = token_labels(steps.tokens)
    weighted = steps.probs[:, None] * steps.v
    d = steps.head_dim
    zmax_head = _symmetric(weighted, steps.context)
    fig = make_subplots(rows=2, cols=1, row_heights=[len(labels) + 1, 5], vertical_spacing=0.16,
                        subplot_titles=(f"4. weight × value, and their sum: head {steps.head + 1}'s output",
                                        "5. heads joined → output projection → + residual → LayerNorm"))
    fig.add_trace(_strip(np.vstack([weighted, steps.context[None]]), [*labels, "sum (the context)"], _dims(d),
                         zmax_head, showscale=False, texttemplate="%{z:.2f}" if d <= NUMBERS_UP_TO else None,
                         textfont=dict(size=FONT - 1)), row=1, col=1)
    rows = [("heads joined", steps.heads_joined), ("projected", steps.projected),
            ("input to the layer", steps.hidden_in[steps.query]), ("+ residual", steps.residual),
            ("LayerNorm", steps.normed)]
    zmax = _symmetric(*(r for _, r in rows))
    fig.add_trace(_strip(np.stack([r for _, r in rows]), [n for n, _ in rows], _dims(len(steps.normed)), zmax,
                         colorbar=dict(title="value", len=0.35, y=0.15)), row=2, col=1)
    start, end = steps.head * d + 0.5, (steps.head + 1) * d + 0.5  # this head's slice of the joined vector
    fig.add_shape(type="rect", x0=start - 1, x1=end - 1, y0=-0.5, y1=0.5, line=dict(color="#000", width=2),
                  row=2, col=1)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="component", row=2, col=1)
    return _fonts(_layout(fig, f"{_token_name(steps)}: the weighted sum and what follows it",
                          height=260 + 24 * (len(labels) + 6)))


def lens_figure(lens) -> go.Figure:
    """Each layer's top guesses as cells (darker likelier), the embeddings at the top, the answer at the bottom."""
    k = len(lens.top[0])
    rows = layer_names(lens.num_layers + 1)
    z = np.array([[p for _, p in row] for row in lens.top])
    text = [[f"{t}<br>{p:.0%}" for t, p in row] for row in lens.top]
    fig = go.Figure(go.Heatmap(z=z, x=[f"guess {i + 1}" for i in range(k)], y=rows, text=text,
                               texttemplate="%{text}", textfont=dict(size=FONT), colorscale="Blues", zmin=0,
                               zmax=float(max(z.max(), 1e-6)), colorbar=dict(title="probability"),
                               hovertemplate="%{y}, %{x}: %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    what = "the next token" if lens.causal else f"the [MASK] (token {lens.position + 1})"
    return _fonts(_layout(fig, f"Each layer's guess for {what}", height=140 + 62 * len(rows)))


def lens_lines_figure(lens) -> go.Figure:
    """The last layer's top tokens' probability through the layers."""
    x = layer_names(lens.num_layers + 1)
    fig = go.Figure()
    for i, token in enumerate(lens.tracked):
        fig.add_trace(go.Scatter(x=x, y=lens.tracked_probs[:, i], mode="lines+markers", name=token,
                                 line=dict(color=DISTINCT_COLORS[i % len(DISTINCT_COLORS)]),
                                 hovertemplate=f"{token}, %{{x}}: %{{y:.1%}}<extra></extra>"))
    fig.update_yaxes(title="probability", tickformat=".0%", range=_probability_range(*lens.tracked_probs.ravel()))
    return _fonts(_layout(fig, "The final answer's tokens, layer by layer", height=360))


def heads_off_figure(effect) -> go.Figure:
    """The guesses with every head on beside the guesses with the chosen heads off, on one probability axis."""
    tokens = list(dict.fromkeys([t for t, _ in effect.before] + [t for t, _ in effect.after]))
    on, off = dict(effect.before), dict(effect.after)
    fig = go.Figure([go.Bar(y=tokens, x=[p.get(t, 0.0) for t in tokens], orientation="h", name=name,
                            marker_color=colour, hovertemplate="%{y}: %{x:.2%}<extra></extra>")
                     for p, name, colour in ((on, "every head on", MODEL_COLOUR),
                                             (off, "heads switched off", B_COLOUR))])
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickformat=".0%", range=_probability_range(*on.values(), *off.values()), title="probability")
    names = ", ".join(f"L{layer + 1} H{head + 1}" for layer, head in effect.heads) or "none"
    fig.update_layout(barmode="group")
    return _fonts(_layout(fig, wrap(f"The guess with heads off: {names}", 80), height=160 + 44 * len(tokens),
                          legend="below"))


def embedding_parts_figure(parts, token: int) -> go.Figure:
    """One token's three embeddings, their sum and the LayerNorm (its own colour scale: it rescales), as strips."""
    label = token_labels(parts.tokens)[token]
    rows = [("token", parts.word[token]), ("position", parts.position[token]), ("segment", parts.segment[token]),
            ("sum", parts.summed[token])]
    zmax = _symmetric(*(r for _, r in rows))
    fig = make_subplots(rows=2, cols=1, row_heights=[4, 1], vertical_spacing=0.2,
                        subplot_titles=("token + position + segment = sum",
                                        "LayerNorm of the sum (what layer 1 reads)"))
    dims = _dims(parts.word.shape[1])
    fig.add_trace(_strip(np.stack([r for _, r in rows]), [n for n, _ in rows], dims, zmax,
                         colorbar=dict(title="value", len=0.6, y=0.7)), row=1, col=1)
    fig.add_trace(_strip(parts.normed[token][None], ["LayerNorm"], dims, _symmetric(parts.normed[token]),
                         showscale=False), row=2, col=1)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="component", row=2, col=1)
    segment = "A" if parts.token_type_ids[token] == 0 else "B"
    return _fonts(_layout(fig, f"Token {label}: its embeddings (position {token + 1}, segment {segment})",
                          height=420))


def embedding_norms_figure(parts) -> go.Figure:
    """The length of each token's three embeddings and their sum: which part dominates, token by token."""
    labels = token_labels(parts.tokens)
    fig = go.Figure()
    for (name, arr), colour in zip((("token", parts.word), ("position", parts.position), ("segment", parts.segment),
                                    ("sum", parts.summed)), DISTINCT_COLORS):
        fig.add_trace(go.Bar(x=labels, y=np.linalg.norm(arr, axis=1), name=name, marker_color=colour,
                             hovertemplate=f"%{{x}}: length of the {name} vector %{{y:.3f}}<extra></extra>"))
    fig.update_layout(barmode="group")
    fig.update_xaxes(tickangle=-45)
    fig.update_yaxes(title="length (L2 norm)")
    return _fonts(_layout(fig, "How long each part is, token by token", height=380))


def neighbours_figure(word: str, neighbours: Sequence[tuple[str, float]]) -> go.Figure:
    """The input embedding table's rows nearest a word, by cosine similarity."""
    fig = go.Figure(go.Bar(x=[s for _, s in neighbours], y=[t for t, _ in neighbours], orientation="h",
                           marker_color=MODEL_COLOUR, text=[f"{s:.2f}" for _, s in neighbours], textposition="auto",
                           hovertemplate="%{y}: cosine %{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="cosine similarity", range=[min(0.0, min((s for _, s in neighbours), default=0)), 1])
    return _fonts(_layout(fig, f"Nearest to “{word}” in the embedding table", height=120 + 30 * len(neighbours)))


def word_map_figure(wmap, columns: int = 5, step: int | None = None) -> go.Figure:
    """A word's contextual vectors across sentences in 2-D (PCA), a map per layer, coloured by sense."""
    n = wmap.points.shape[0]
    columns = min(columns, n)
    rows = -(-n // columns)
    titles = [f"{'embeddings' if i == 0 else f'layer {i}'} ({wmap.explained[i]:.0%} kept)" for i in range(n)]
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=titles, horizontal_spacing=0.04,
                        vertical_spacing=0.12)
    groups = list(dict.fromkeys(wmap.labels))
    hover = [wrap(s, 40) for s in wmap.sentences]
    for i in range(n):
        for g, group in enumerate(groups):
            keep = [j for j, label in enumerate(wmap.labels) if label == group]
            fig.add_trace(go.Scatter(
                x=wmap.points[i, keep, 0], y=wmap.points[i, keep, 1], mode="markers", name=group or "sentences",
                legendgroup=group, showlegend=i == 0, marker=dict(size=10, color=DISTINCT_COLORS[g % 10]),
                text=[hover[j] for j in keep], hovertemplate="%{text}<extra></extra>"),
                row=i // columns + 1, col=i % columns + 1)
        # Each panel's own range with a margin: PCA scales differ by layer, and a dot on the edge is cut in half.
        for axis, update in ((0, fig.update_xaxes), (1, fig.update_yaxes)):
            lo, hi = float(wmap.points[i, :, axis].min()), float(wmap.points[i, :, axis].max())
            pad = 0.12 * (hi - lo or 1.0)
            update(range=[lo - pad, hi + pad], row=i // columns + 1, col=i % columns + 1)
    fig.update_xaxes(showticklabels=False, zeroline=False)
    fig.update_yaxes(showticklabels=False, zeroline=False)
    when = "" if step is None else f", at step {step:,}"
    return _fonts(_layout(fig, f"“{wmap.word}” in {len(wmap.sentences)} sentences, layer by layer (PCA){when}",
                          height=120 + 260 * rows, legend="below"))


def separation_timeline_figure(word: str, steps: Sequence[int], separations: np.ndarray,
                               step: int | None = None) -> go.Figure:
    """How far apart a word's senses lie on each layer's map at each probe snapshot; a dotted line at `step`."""
    fig = go.Figure()
    for layer, name in enumerate(layer_names(separations.shape[1])):
        fig.add_trace(go.Scatter(x=list(steps), y=separations[:, layer], mode="lines+markers", name=name,
                                 line=dict(color=DISTINCT_COLORS[layer % 10])))
    if step is not None:
        fig.add_vline(x=step, line=dict(dash="dot", color="#7f7f7f"))
    fig.update_xaxes(title="training step")
    fig.update_yaxes(title="separation", rangemode="tozero")
    return _fonts(_layout(fig, f"How far apart the senses of “{word}” lie, snapshot by snapshot", height=320))


def sentence_tokens_figure(comparison) -> go.Figure:
    """Each scored piece's log-probability in A and in B (closer to 0 is likelier)."""
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.25,
                        subplot_titles=(wrap(f"A: {comparison.a.text}  (score {comparison.a.score:.2f})", 90),
                                        wrap(f"B: {comparison.b.text}  (score {comparison.b.score:.2f})", 90)))
    for row, (s, colour) in enumerate(((comparison.a, A_COLOUR), (comparison.b, B_COLOUR)), start=1):
        fig.add_trace(go.Bar(x=token_labels(s.tokens), y=s.log_probs, marker_color=colour, showlegend=False,
                             hovertemplate="%{x}: log-probability %{y:.3f}<extra></extra>"), row=row, col=1)
        fig.update_yaxes(title="log-prob", row=row, col=1)
    fig.update_xaxes(tickangle=-45)
    return _fonts(_layout(fig, "Each piece's log-probability (natural log)", height=520))


def shares_figure(comparison) -> go.Figure:
    """Where score(A) - score(B) comes from: a bar for each shared piece and each differing stretch."""
    names = [s.tokens_a[0] if s.same_tokens else f"{' '.join(s.tokens_a) or '∅'} → {' '.join(s.tokens_b) or '∅'}"
             for s in comparison.shares]
    x = [f"{i + 1} {n}" for i, n in enumerate(names)]
    values = [s.difference for s in comparison.shares]
    colours = ["#bbbbbb" if s.same_tokens else (A_COLOUR if s.difference >= 0 else B_COLOUR)
               for s in comparison.shares]
    fig = go.Figure(go.Bar(x=x, y=values, marker_color=colours, text=[f"{v:+.2f}" for v in values],
                           textposition="outside", hovertemplate="%{x}: %{y:+.3f} nats<extra></extra>"))
    fig.add_hline(y=0, line_color="#444")
    fig.update_xaxes(tickangle=-45)
    lo, hi = min(values + [0.0]), max(values + [0.0])
    pad = 0.2 * (hi - lo or 1.0)
    fig.update_yaxes(title="nats (above 0: favours A)", range=[lo - pad, hi + pad])
    verdict = "neither" if comparison.preferred == "tie" else comparison.preferred.upper()
    return _fonts(_layout(fig, wrap(f"Prefers {verdict} by {abs(comparison.difference):.2f} nats: each piece's share "
                                    "(grey: a piece both share)", 90), height=420))


def pairs_summary_figure(rows: Sequence[dict]) -> go.Figure:
    """Share of built-in pairs where the model prefers the good sentence, per kind of rule, against chance."""
    categories = list(dict.fromkeys(r["category"] for r in rows))
    right = [np.mean([r["good preferred"] for r in rows if r["category"] == c]) for c in categories]
    counts = [sum(r["category"] == c for r in rows) for c in categories]
    fig = go.Figure(go.Bar(x=categories, y=right, marker_color=MODEL_COLOUR,
                           text=[f"{v:.0%} of {n}" for v, n in zip(right, counts)], textposition="outside",
                           hovertemplate="%{x}: %{y:.0%}<extra></extra>"))
    fig.add_hline(y=0.5, line_dash="dash", line_color=SERIES_COLORS["baseline"], annotation_text="chance",
                  annotation_position="top left")
    fig.update_yaxes(range=[0, 1.15], tickformat=".0%", title="good sentence preferred")
    return _fonts(_layout(fig, "The built-in pairs, by kind of rule", height=380))


def contextual_neighbours_figure(cn) -> go.Figure:
    """A token's nearest pool tokens, a column a layer and a row a rank, coloured by cosine; sentences on hover."""
    layers = layer_names(len(cn.by_layer))
    k = max(len(row) for row in cn.by_layer)
    z = np.array([[row[r][2] for row in cn.by_layer] for r in range(k)])
    text = [[row[r][0] for row in cn.by_layer] for r in range(k)]
    hover = [[wrap(row[r][1], 60) for row in cn.by_layer] for r in range(k)]
    fig = go.Figure(go.Heatmap(z=z, x=layers, y=[str(r + 1) for r in range(k)], text=text, customdata=hover,
                               texttemplate="%{text}", textfont=dict(size=FONT), colorscale="Blues", zmin=0, zmax=1,
                               colorbar=dict(title="cosine"),
                               hovertemplate="%{text} (cosine %{z:.3f}) in:<br>%{customdata}<extra>%{x}</extra>"))
    fig.update_yaxes(autorange="reversed", title="rank")
    name = f"token {cn.position + 1} “{cn.tokens[cn.position]}”"
    return _fonts(_layout(fig, wrap(f"Nearest in context to {name}, layer by layer", 90), height=150 + 44 * k))


def layer_probes_figure(probes) -> go.Figure:
    """Held-out probe accuracy per layer, a panel a task: the model, a random model of the same shape, the control
    task (each word type a fixed random tag) and the selectivity (model minus control) as bars."""
    tasks = probes.tasks
    fig = make_subplots(rows=1, cols=len(tasks), shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=[f"{t.task} ({t.tags} tags)" for t in tasks])
    x = layer_names(len(tasks[0].accuracy))
    for col, t in enumerate(tasks, start=1):
        for name, y, style in (
                ("selectivity (model − control)", t.selectivity, None),
                ("this model", t.accuracy, dict(color=MODEL_COLOUR, width=3)),
                ("random model, same shape", t.random_model, dict(color=SERIES_COLORS["baseline"], dash="dash")),
                ("control task (word → fixed random tag)", t.control, dict(color=WHAT_IF_COLOUR, dash="dot"))):
            hover = f"{t.task}, %{{x}}, {name}: %{{y:.1%}}<extra></extra>"
            trace = (go.Bar(x=x, y=y, name=name, marker_color="#c6dbef", hovertemplate=hover) if style is None else
                     go.Scatter(x=x, y=y, name=name, mode="lines+markers", line=style, hovertemplate=hover))
            fig.add_trace(trace.update(showlegend=col == 1, legendgroup=name), row=1, col=col)
    fig.update_yaxes(range=[0, 1], tickformat=".0%")
    fig.update_yaxes(title="held-out words right", row=1, col=1)
    return _fonts(_layout(fig, f"What each layer knows: linear probes on {probes.test_words:,} held-out words",
                          height=430, legend="below"))
