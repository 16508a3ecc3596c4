"""Text a projector shows (issue 74): after figure_floor.projector_figure no font anywhere in a figure is under 12 px
or a light grey, the figure's own larger sizes are kept, and the one chart sink applies it. No Streamlit, no
browser (tests/test_browser_figure_text.py reads what the browser draws at 1280 x 720)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bert_core.inspect import figures
from bert_core.inspect.figure_floor import MIN_FONT_PX, projector_figure, too_light
from bert_core.inspect.inspection import AttentionResult
from bert_core.model.config import BertConfig

ROOT = Path(__file__).resolve().parent.parent


def violations(fig: go.Figure) -> list[str]:
    """Every font under MIN_FONT_PX or in a light grey, anywhere in `fig`; and the text a theme would grey because
    the figure leaves its colour unset (the base font, the first axes' tick labels)."""
    out: list[str] = []

    def walk(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                here = f"{path}.{key}"
                if key.endswith("font") and isinstance(value, dict):
                    sizes = np.atleast_1d(value.get("size", MIN_FONT_PX)).tolist()
                    colors = np.atleast_1d(value.get("color", "#000")).tolist()
                    out.extend(f"{here}.size={s}" for s in sizes if isinstance(s, (int, float)) and s < MIN_FONT_PX)
                    out.extend(f"{here}.color={c}" for c in colors if too_light(c))
                elif key != "template":
                    walk(value, here)
        elif isinstance(node, (list, tuple)):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")

    spec = fig.to_plotly_json()
    walk(spec, "")
    layout = spec["layout"]
    if not layout.get("font", {}).get("color"):
        out.append("layout.font.color unset")
    for axis in ("xaxis", "yaxis"):
        if not layout.get(axis, {}).get("tickfont", {}).get("color"):
            out.append(f"{axis}.tickfont.color unset")
    return out


def _attention(layers=2, heads=3, seq=5) -> AttentionResult:
    rng = np.random.default_rng(0)
    att = rng.random((layers, heads, seq, seq)).astype(np.float32)
    return AttentionResult(tokens=[f"w{i}" for i in range(seq)], attentions=att / att.sum(-1, keepdims=True),
                           token_type_ids=[0] * seq, special_mask=[False] * seq)


def _small_grey_figure() -> go.Figure:
    """Every kind of text a figure can set small and grey: ticks, axis titles, a colour bar, annotations, a trace's
    text (one size per point), the legend, a second subplot's axes."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["left", "right"])
    fig.add_trace(go.Heatmap(z=[[1, 2], [3, 4]], colorbar=dict(tickfont=dict(size=9, color="#999"),
                                                               title=dict(text="v", font=dict(size=10)))), 1, 1)
    fig.add_trace(go.Bar(x=["a", "b"], y=[1, 2], text=["1", "2"], textfont=dict(size=[10, 15], color="#aaa")), 1, 2)
    fig.add_annotation(text="note", font=dict(size=10, color="rgba(49, 51, 63, 0.6)"))
    fig.update_xaxes(tickfont=dict(size=11, color="gray"), title=dict(text="x", font=dict(size=10)))
    fig.update_layout(legend=dict(font=dict(size=10)), font=dict(size=11, color="#7f7f7f"))
    return fig


def page_figures() -> dict[str, go.Figure]:
    """Figures the pages draw, on small inputs (the Home diagram, the masking counts, the attention views)."""
    result = _attention()
    return {
        "architecture": figures.architecture_figure(BertConfig.preset("mini", vocab_size=8000)),
        "architecture-causal": figures.architecture_figure(BertConfig.preset("nano", vocab_size=300,
                                                                             attention="causal")),
        "architecture-letters": figures.architecture_figure(),
        "decision-counts": figures.decision_counts_figure({"chosen_share": 0.15, "masked_share": 0.8,
                                                           "random_share": 0.1, "kept_share": 0.1,
                                                           "candidates": 1000}),
        "model-view": figures.model_view_figure(result),
        "small-grey": _small_grey_figure(),
    }


def test_todays_figures_leave_text_to_the_theme_and_the_floor_fixes_every_one():
    built = page_figures()
    assert all(violations(fig) for fig in built.values())   # before: unset colours (greyed) or small sizes
    for name, fig in built.items():
        assert violations(projector_figure(fig)) == [], name


def test_the_floor_raises_small_text_to_12_and_keeps_larger_sizes():
    fig = projector_figure(_small_grey_figure())
    assert fig.layout.font.size == 13 and fig.layout.font.color == "#222"
    assert fig.layout.xaxis.tickfont.size == MIN_FONT_PX and fig.layout.xaxis.title.font.size == MIN_FONT_PX
    assert fig.data[0].colorbar.tickfont.size == MIN_FONT_PX and fig.data[0].colorbar.tickfont.color == "#222"
    assert list(fig.data[1].textfont.size) == [MIN_FONT_PX, 15]   # a deliberate 15 stays
    assert fig.layout.annotations[-1].font.color == "#222"
    big = go.Figure(layout=dict(font=dict(size=16, color="#c0504d")))
    assert projector_figure(big).layout.font.size == 16 and big.layout.font.color == "#c0504d"   # a colour stays


def test_the_floor_is_idempotent():
    fig = projector_figure(_small_grey_figure())
    once = fig.to_plotly_json()
    assert projector_figure(fig).to_plotly_json() == once


def test_too_light_is_about_greys_on_white():
    assert too_light("#7f7f7f") and too_light("#999") and too_light("rgba(49, 51, 63, 0.6)") and too_light("gray")
    assert not too_light("#444") and not too_light("#222") and not too_light("#000")
    assert not too_light("#ffffff")    # text on a dark cell
    assert not too_light("#c0504d")    # a colour that carries meaning


def test_the_sink_applies_the_floor():
    drawing = (ROOT / "bert_core/app/app_drawing.py").read_text()
    assert re.search(r"projector_figure\(safe_figure\(fig\)\)[^\n]*\n(.*\n)*?\s+st\.plotly_chart\(fig", drawing)
