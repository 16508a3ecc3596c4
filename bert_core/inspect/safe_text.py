"""Text a visitor supplies (labels, tokens, sentences, file, column and run names) made inert for the renderers
that read markup in it: Plotly, which draws a subset of HTML in every text (`<a href>` a live link, `<span style>`
CSS), and Streamlit's Markdown (`[text](url)`, bare URLs, `:red[...]`). `safe_figure` is applied to every figure in
the app's one Plotly sink (app.app_drawing.plotly); `markdown` where a page writes such text into Markdown."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import plotly.graph_objects as go

# The only tags the explorer's own figures write (line breaks, and a hover box's trace name), exactly, without
# attributes. Every other `<` is written as `&lt;`, which Plotly shows as the character itself and never as a tag:
# it splits its text at tags before it decodes entities. So a visitor's `<a href=...>`, `<img ...>`, `<span
# style=...>` and `<b>` all come out as the characters they are, as a data table shows them.
OWN_TAGS = ("<br>", "</extra>", "<extra>")
_LT = re.compile("<(?!" + "|".join(re.escape(t[1:]) for t in OWN_TAGS) + ")")
# The entities Plotly decodes (`&lt;`, `&#60;`, `&#x3c;`, names): a visitor's `&lt;b&gt;` is kept as written
# rather than shown as `<b>`. A lone `&` ("R&D") is left alone.
_ENTITY = re.compile(r"&(?=#\d+;|#x[\da-fA-F]+;|[a-zA-Z]+;)")


def plotly_text(text: str) -> str:
    """`text` as Plotly should draw it: every `<` that does not begin one of OWN_TAGS, and every `&` that begins an
    entity, escaped. Idempotent on text that holds no entity of its own; our own markup passes unchanged."""
    if "<" not in text and "&" not in text:
        return text
    return _LT.sub("&lt;", _ENTITY.sub("&amp;", text))


# Markdown. A backslash keeps a character literal (CommonMark lets any ASCII punctuation be escaped); escaped are
# those that open something inline (links and images need `[`, emphasis, code, tables, strikethrough, `$` maths,
# entities, raw HTML, Streamlit's `:red[...]`, `:icon:` and `:material/...:`), and at a line's start those that
# open a block (heading, list, quote, setext line). Common punctuation (`.,;()'"-!?%`) stays as it is, and so
# does a `_` between two letters (never emphasis in GFM: `weights_only`), so that a message reads the same in the
# page's source as on screen. GFM's autolinks are found afterwards in the decoded
# text (`http://`, `www.`, `name@host`), so those patterns are also broken by a word joiner (U+2060: invisible, no
# line break) after `:` before `/` (and before `material/`: an icon's name is also read from the decoded text), after
# `www` before `.` and after `@`. Checked in Chromium on st.markdown, st.caption and st.table's cells
# (tests/test_browser_hostile_upload.py).
WORD_JOINER = "\u2060"
_AUTOLINK = re.compile(r":(?=/|material/)|@|(?i:www)(?=\.)")
_INLINE = re.compile(r"([\\`*\[\]<>|~$:&{}]|(?<![^\W_])_|_(?![^\W_]))")
_LINE_START = re.compile(r"(?m)^([ \t]*)([-+=#]|\d+(?=[.)]))")


def markdown(text: str) -> str:
    """`text` (a visitor's, or holding a visitor's) as Streamlit's Markdown should show it: as the characters it
    is, never a link, an image, an emphasis, a heading or a directive. For st.markdown, st.caption, st.error and
    the other alerts, st.table's cells, and the labels of expanders, tabs and metrics; not for st.dataframe,
    st.code or st.text, which show text as it is (a backslash there would show)."""
    text = _AUTOLINK.sub(lambda m: m.group(0) + WORD_JOINER, str(text))
    text = _INLINE.sub(r"\\\1", text)
    return _LINE_START.sub(lambda m: m.group(1) + (m.group(2) + "\\" if m.group(2)[0].isdigit() else
                                                    "\\" + m.group(2)), text)


def markdown_rows(rows) -> list[dict]:
    """Rows for st.table, whose cells are Markdown: every string cell through `markdown`."""
    return [{key: markdown(value) if isinstance(value, str) else value for key, value in row.items()}
            for row in rows]


def _needs(value: Any) -> bool:
    """Whether any string in `value` (at any depth: dicts, lists, tuples, arrays of strings) changes by plotly_text."""
    if isinstance(value, str):
        return plotly_text(value) != value
    if isinstance(value, dict):
        return any(_needs(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_needs(item) for item in value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "UO":   # categories, text; numbers are never read
        return any(_needs(item) for item in value.ravel().tolist())
    return False


def _clean(value: Any) -> Any:
    """`value` with every string in it through plotly_text (the same walk as _needs)."""
    if isinstance(value, str):
        return plotly_text(value)
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "UO":
        return np.array([_clean(item) for item in value.ravel().tolist()], dtype=object).reshape(value.shape)
    return value


def safe_figure(fig: go.Figure) -> go.Figure:
    """`fig` with no text that Plotly could draw as an element beyond OWN_TAGS: every string of its layout, of every
    trace and of every frame (titles, labels, hover and tick text, x/y/z categories, customdata, names,
    annotations, table cells, templates) through plotly_text. The one rule for every figure, whoever built it.
    A figure with nothing to escape (every figure of ours on our own text) is returned as it is; else a copy."""
    # Read-only look at the figure's own dicts: to_dict() deep-copies the whole figure (15 to 50 ms for a page's
    # chart, redrawn every two seconds while a run trains), this walk takes under a millisecond to a few.
    if not (_needs(fig._data) or _needs(fig._layout) or any(_needs(f.to_plotly_json()) for f in fig.frames)):
        return fig
    return go.Figure(_clean(fig.to_dict()), skip_invalid=False)
