"""Text a projector shows: every figure's text at least 12 px and dark (issue 74), applied by the one sink
(app/app_drawing.plotly): a base font of 13 px in near-black, any size under 12 raised to 12, and a grey lighter than
a projector shows darkened; a figure's own sizes of 12 and over are kept."""

from __future__ import annotations

import re
from typing import Any

import plotly.graph_objects as go

MIN_FONT_PX = 12      # the smallest text any figure may draw
BASE_FONT_PX = 13     # what a figure's text is drawn at unless it says otherwise
TEXT_COLOR = "#222"   # near-black: Plotly's own #444 and Streamlit's greyed axis text wash out on a projector
# A grey is too light when its contrast with the white page is under WCAG's 7:1 (its "AAA" level; #595959 passes,
# Plotly's #7f7f7f does not): a projector loses contrast a screen keeps. Greys of contrast under 1.5 (white, #eee)
# are text drawn on a dark fill (a heatmap's cell, a bar), left as they are.
MIN_CONTRAST = 7.0
ON_DARK_CONTRAST = 1.5
GREY_SPREAD = 40      # channels within this of each other: a grey, not a colour that carries meaning


def _rgb(color: str) -> tuple[float, float, float] | None:
    """'#rgb', '#rrggbb', 'rgb(...)'/'rgba(...)' or a grey's name as (r, g, b) in 0..255; None for anything else."""
    c = color.strip().lower()
    named = {"black": "#000", "white": "#fff", "gray": "#808080", "grey": "#808080", "darkgray": "#a9a9a9",
             "darkgrey": "#a9a9a9", "lightgray": "#d3d3d3", "lightgrey": "#d3d3d3", "dimgray": "#696969",
             "dimgrey": "#696969", "silver": "#c0c0c0", "gainsboro": "#dcdcdc"}
    c = named.get(c, c)
    if re.fullmatch(r"#[0-9a-f]{3}", c):
        return tuple(int(ch * 2, 16) for ch in c[1:])
    if re.fullmatch(r"#[0-9a-f]{6}", c):
        return tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))
    m = re.fullmatch(r"rgba?\(([^)]*)\)", c)
    if m:
        parts = [float(p) for p in m[1].split(",")]
        alpha = parts[3] if len(parts) > 3 else 1.0
        return tuple(alpha * v + (1 - alpha) * 255 for v in parts[:3])   # as seen on the white page
    return None


def _contrast_with_white(rgb: tuple[float, float, float]) -> float:
    def linear(v: float) -> float:
        v /= 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4
    lum = 0.2126 * linear(rgb[0]) + 0.7152 * linear(rgb[1]) + 0.0722 * linear(rgb[2])
    return 1.05 / (lum + 0.05)


def too_light(color: Any) -> bool:
    """Whether `color` is a grey that a projector washes out on a white page (see MIN_CONTRAST)."""
    rgb = _rgb(color) if isinstance(color, str) else None
    if rgb is None or max(rgb) - min(rgb) > GREY_SPREAD:
        return False
    return ON_DARK_CONTRAST <= _contrast_with_white(rgb) < MIN_CONTRAST


def _font_fixes(node: Any, path: str, out: dict) -> None:
    """Into `out`, the property path -> value of each font under `node` (a figure's raw dict) set too small or too
    light; read only, cheap enough for a chart redrawn every two seconds."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}" if path else key
            if key.endswith("font") and isinstance(value, dict):
                size, color = value.get("size"), value.get("color")
                if isinstance(size, (int, float)) and size < MIN_FONT_PX:
                    out[f"{here}.size"] = MIN_FONT_PX
                elif isinstance(size, (list, tuple)) and any(isinstance(s, (int, float)) and s < MIN_FONT_PX
                                                             for s in size):
                    out[f"{here}.size"] = [max(s, MIN_FONT_PX) if isinstance(s, (int, float)) else s for s in size]
                if isinstance(color, str) and too_light(color):
                    out[f"{here}.color"] = TEXT_COLOR
                elif isinstance(color, (list, tuple)) and any(too_light(c) for c in color):
                    out[f"{here}.color"] = [TEXT_COLOR if too_light(c) else c for c in color]
            elif key != "template":
                _font_fixes(value, here, out)
    elif isinstance(node, (list, tuple)):
        for i, item in enumerate(node):
            if isinstance(item, dict):
                _font_fixes(item, f"{path}[{i}]", out)


def projector_figure(fig: go.Figure) -> go.Figure:
    """`fig` with every text at least MIN_FONT_PX and none a light grey, its base font BASE_FONT_PX in TEXT_COLOR, and
    unset axis and colour-bar text colours TEXT_COLOR, so no theme greys them; in place and idempotent."""
    layout = fig._layout   # the raw dicts, read only: to_dict() would deep-copy the whole figure
    font = layout.get("font") or {}
    base = {}
    if not isinstance(font.get("size"), (int, float)) or font["size"] < BASE_FONT_PX:
        base["font.size"] = BASE_FONT_PX
    if not isinstance(font.get("color"), str) or too_light(font["color"]):
        base["font.color"] = TEXT_COLOR
    # The axes and colour axes; the first x and y axes always (a theme styles them even when unset).
    for axis in ["xaxis", "yaxis", *(key for key in layout if re.fullmatch(r"[xy]axis\d+|coloraxis\d*", key))]:
        if axis.startswith("coloraxis"):
            colorbar = (layout.get(axis) or {}).get("colorbar") or {}
            parts = {"colorbar.tickfont": colorbar.get("tickfont"),
                     "colorbar.title.font": (colorbar.get("title") or {}).get("font")}
        else:
            settings = layout.get(axis) or {}
            parts = {"tickfont": settings.get("tickfont"), "title.font": (settings.get("title") or {}).get("font")}
        for part, value in parts.items():
            if not (value or {}).get("color"):
                base[f"{axis}.{part}.color"] = TEXT_COLOR
    legend_font = (layout.get("legend") or {}).get("font") or {}
    if not legend_font.get("color"):
        base["legend.font.color"] = TEXT_COLOR
    _font_fixes({k: v for k, v in layout.items() if k != "font"}, "", base)
    for path, value in base.items():
        _set(layout, path, value)
    for raw in fig._data:
        fixes: dict = {}
        _font_fixes(raw, "", fixes)
        colorbar = raw.get("colorbar")
        if colorbar is not None or raw.get("showscale"):   # a trace's own colour bar: not reached by a theme's
            colorbar = colorbar or {}
            if not (colorbar.get("tickfont") or {}).get("color"):
                fixes["colorbar.tickfont.color"] = TEXT_COLOR
        for path, value in fixes.items():
            _set(raw, path, value)
    return fig


def _set(raw: dict, path: str, value: Any) -> None:
    """Write `value` at `path` ("annotations[2].font.size") into a figure's raw dict; not through Plotly's update,
    whose validation of each path cost 7 ms a figure, the most of a chart redrawn every two seconds for a class
    (docs/benchmarks.md): what is written is always a font size or colour at a path the walk found."""
    node: Any = raw
    keys = [part for step in path.split(".") for part in re.split(r"\[(\d+)\]", step) if part]
    for key in keys[:-1]:
        if isinstance(node, list):
            node = node[int(key)]
        else:
            if node.get(key) is None:   # absent, or set to None
                node[key] = {}
            node = node[key]
    node[keys[-1]] = value
