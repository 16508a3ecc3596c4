"""The weights as matrices, for the head and tokens attention_steps followed: q = W_Q·x + b (likewise k and v) as
the head's slice of the layer's projection times one token's hidden state, and the element-wise product q × k for
every key (bertviz's neuron view), whose row sums are the scores q·k. Numbers and their figures; layers, heads,
tokens and dimensions count from 1 in every label a person reads (the results count from 0)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from plotly.subplots import make_subplots

from bert_core.errors import BertCoreError
from bert_core.inspect.computation_figures import (FONT, NUMBERS_UP_TO, _dims, _fonts, _strip, _symmetric,
                                                   _token_name, token_labels)
from bert_core.inspect.figures import _layout, wrap
from bert_core.inspect.kit import numpy32

PROJECTIONS = {"query": ("W_Q", "q"), "key": ("W_K", "k"), "value": ("W_V", "v")}


@dataclass
class HeadProjection:
    """One head's share of a projection as a matrix times a vector: result = weight · x + bias."""

    name: str            # "query", "key" or "value"
    layer: int
    head: int
    token: int           # whose hidden state x is
    tokens: list[str]
    weight: np.ndarray   # [d, H] the head's rows of the layer's projection: a row per dimension of the head
    x: np.ndarray        # [H]    the token's hidden state entering the layer
    bias: np.ndarray     # [d]
    result: np.ndarray   # [d]    weight · x + bias: the head's q, k or v for the token


def head_projection(model, steps, name: str, token: int) -> HeadProjection:
    """`name`'s projection ("query", "key", "value") of `steps`' layer, cut to `steps`' head, times `token`'s hidden
    state entering the layer (steps: attention_steps' result; token counted from 0)."""
    if name not in PROJECTIONS:
        raise BertCoreError(f"no projection named {name!r}: pick one of {', '.join(PROJECTIONS)}")
    if not 0 <= token < len(steps.tokens):
        raise BertCoreError(f"token {token + 1} does not exist: the input has {len(steps.tokens)} tokens")
    linear = getattr(model.bert.encoder.layer[steps.layer].attention.self, name)
    cut = slice(steps.head * steps.head_dim, (steps.head + 1) * steps.head_dim)
    with torch.inference_mode():
        weight, bias = linear.weight[cut].float(), linear.bias[cut].float()
        x = torch.as_tensor(steps.hidden_in[token], device=weight.device)
        result = F.linear(x, weight, bias)
    return HeadProjection(name=name, layer=steps.layer, head=steps.head, token=token, tokens=steps.tokens,
                          weight=numpy32(weight), x=numpy32(x), bias=numpy32(bias), result=numpy32(result))


def query_key_products(steps) -> np.ndarray:
    """[S, d]: the query's component i times each key's component i; a row sums to that key's score q·k."""
    return steps.q[None, :] * steps.k


def projection_figure(p: HeadProjection) -> go.Figure:
    """x as a strip over the columns of W (each column meets one number of x), then + b and = the result as columns
    beside W's rows (each row, dotted with x, gives one number of the result). Each panel its own colour scale."""
    symbol, short = PROJECTIONS[p.name]
    d, hidden = p.weight.shape
    label = f"{p.token + 1} “{p.tokens[p.token]}”"
    fig = make_subplots(rows=2, cols=3, row_heights=[0.1, 0.9], column_widths=[0.8, 0.1, 0.1],
                        horizontal_spacing=0.03, vertical_spacing=0.1, shared_xaxes="columns", shared_yaxes="rows",
                        specs=[[{}, None, None], [{}, {}, {}]],
                        subplot_titles=(f"x: token {label} entering layer {p.layer + 1}", f"{symbol}: {d} × {hidden}",
                                        "+ b", f"= {short}"))
    dims, components = _dims(d), _dims(hidden)
    fig.add_trace(_strip(p.x[None], ["x"], components, _symmetric(p.x), showscale=False,
                         hovertemplate="x, number %{x}: %{z:.4f}<extra></extra>"), row=1, col=1)
    fig.add_trace(_strip(p.weight, dims, components, _symmetric(p.weight), customdata=p.weight * p.x[None, :],
                         colorbar=dict(title=symbol, len=0.6, y=0.4),
                         hovertemplate=f"{symbol} row %{{y}}, column %{{x}}: %{{z:.4f}}<br>× x's number %{{x}} = "
                                       f"%{{customdata:.4f}}<extra></extra>"), row=2, col=1)
    for col, (name, z) in enumerate((("b", p.bias), (short, p.result)), start=2):
        fig.add_trace(_strip(z[:, None], dims, [name], _symmetric(z), showscale=False,
                             texttemplate="%{z:.2f}" if d <= NUMBERS_UP_TO else None, textfont=dict(size=FONT - 1),
                             hovertemplate=f"{name}, dimension %{{y}}: %{{z:.4f}}<extra></extra>"), row=2, col=col)
    fig.update_xaxes(ticks="")   # the theme's tick marks would hang off the strips like stray dashes
    fig.update_yaxes(ticks="")
    fig.update_yaxes(autorange="reversed", row=2)
    fig.update_yaxes(showticklabels=False, row=1)
    fig.update_xaxes(showticklabels=False, row=2, col=2)
    fig.update_xaxes(showticklabels=False, row=2, col=3)
    fig.update_xaxes(title=f"column: one of x's {hidden} numbers", row=2, col=1)
    fig.update_yaxes(title=f"row: one of the head's {d} dimensions", row=2, col=1)
    title = wrap(f"Layer {p.layer + 1}, head {p.head + 1}: {short} = {symbol}·x + b for token {label} "
                 "(each panel its own colour scale: red above 0, blue below)", 90)
    return _fonts(_layout(fig, title, height=560))


def products_figure(steps) -> go.Figure:
    """bertviz's neuron view: q_i × k_i for every key (rows) and dimension (columns), each row's sum beside it."""
    labels = token_labels(steps.tokens)
    products = query_key_products(steps)
    d, s = steps.head_dim, len(labels)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.86, 0.14], shared_yaxes=True, horizontal_spacing=0.02,
                        subplot_titles=("q × k, dimension by dimension", "sum = q·k"))
    qk = np.stack([np.broadcast_to(steps.q, products.shape), steps.k], axis=-1)
    fig.add_trace(_strip(products, labels, _dims(d), _symmetric(products), customdata=qk,
                         colorbar=dict(title="q × k", len=0.8), textfont=dict(size=FONT - 1),
                         texttemplate="%{z:.2f}" if d <= NUMBERS_UP_TO else None,
                         hovertemplate="key %{y}, dimension %{x}: q %{customdata[0]:.4f} × k %{customdata[1]:.4f} = "
                                       "%{z:.4f}<extra></extra>"), row=1, col=1)
    sums = products.sum(axis=1)
    zs = 2 * _symmetric(sums)   # at most a mid red or blue: the numbers on the cells stay readable
    hidden = ["" if a else " (hidden by the mask: its weight is 0)" for a in steps.allowed]
    fig.add_trace(_strip(sums[:, None], labels, ["q·k"], zs, showscale=False, texttemplate="%{z:.2f}",
                         textfont=dict(size=FONT - 1), customdata=np.array(hidden)[:, None],
                         hovertemplate="key %{y}: q·k = %{z:.4f}%{customdata}<extra></extra>"), row=1, col=2)
    # A hidden key's products washed pale, as the scores figure greys it; its sum stays dark enough to read.
    for start, end in _runs(~steps.allowed):
        fig.add_shape(type="rect", xref="x domain", x0=0, x1=1, y0=start - 0.5, y1=end - 0.5,
                      fillcolor="rgba(255, 255, 255, 0.75)", line_width=0, row=1, col=1)
    fig.update_xaxes(ticks="")
    fig.update_yaxes(autorange="reversed", ticks="")
    fig.update_yaxes(title="key token", row=1, col=1)
    fig.update_xaxes(title=f"dimension of the head (1 to {d})", row=1, col=1)
    fig.update_xaxes(showticklabels=False, row=1, col=2)
    pale = " — pale: hidden by the mask, weight 0" if not steps.allowed.all() else ""
    title = wrap(f"{_token_name(steps)}: its query against every key, dimension by dimension "
                 f"(each row sums to the score q·k, before ÷√d){pale}", 90)
    return _fonts(_layout(fig, title, height=200 + 26 * s))


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of True in `flags`, end exclusive."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flags.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))
