"""A visitor's text is inert in every figure and every Markdown the app draws (bert_core.inspect.safe_text), and
every chart goes through the one sink that applies it (issue 70). No Streamlit, no browser: Plotly's own text
parser is replayed here with the tag table read from the Plotly.js bundles installed (Streamlit's and plotly.py's),
so that a new tag in a later Plotly shows up as a failure. The browser's side: tests/test_browser_hostile_upload.py.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import plotly
import plotly.graph_objects as go
import pytest
import streamlit
from plotly.subplots import make_subplots

from bert_core.inspect import figures, finetune_figures, lesson_figures
from bert_core.inspect.safe_text import OWN_TAGS, WORD_JOINER, markdown, markdown_rows, plotly_text, safe_figure

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = [
    '<a href="http://evil.example/phish">click me</a>',
    "<A HREF='https://evil.example/x'>CLICK</A>",
    '<a  href="mailto:x@evil.example">mail',          # unclosed, two spaces
    "<a href=http://evil.example/u>unquoted</a>",
    '<a href="javascript:alert(1)">js</a>',
    "javascript:alert(1)",
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    '<span style="font-size:400px;fill:url(http://evil.example/t)">big</span>',
    "<b>bold</b> <i>it</i> <sup>up</sup> <em>em</em> <u>u</u> <s>s</s>",
    "&lt;a href=&quot;http://evil.example&quot;&gt;entity&lt;/a&gt; &#60;b&#62; &#x3c;i&#x3e;",
    "<a",
    "1 < 2 and 3 > 2 <<a>> R&D",
]


def _tag_table() -> set[str]:
    """The tags Plotly.js turns into SVG elements (its svg_text_utils' TAG_STYLES keys), from every bundle here."""
    bundles = [Path(plotly.__file__).parent / "package_data" / "plotly.min.js",
               *(Path(streamlit.__file__).parent / "static").rglob("PlotlyChart*.js")]
    tags = set()
    for bundle in bundles:
        text = bundle.read_text(encoding="utf-8", errors="replace")
        for table in re.findall(r"\{(sup:[`\"]font-size:70%[`\"][^}]*)\}", text):
            tags |= set(re.findall(r"(\w+):[`\"]", table))
    assert {"a", "b", "span", "sup"} <= tags, "Plotly.js's tag table was not found in the installed bundles"
    return tags | {"br"}


TAGS = _tag_table()


def rendered_tags(text: str) -> list[str]:
    """The elements Plotly would make of `text` (its convertToTspans: split at `<...>`, a tag is `<name ...>` with
    `name` in its table, case-insensitive), each as written, but for our own (OWN_TAGS)."""
    return [part for part in re.split(r"(<[^<>]*>)", text) if part not in OWN_TAGS
            and (m := re.fullmatch(r"<(/?)([^ >]*)(\s+(.*))?>", part, flags=re.S)) and m[2].lower() in TAGS]


def shown(text: str) -> str:
    """The characters Plotly shows of `text`: its own tags dropped, entities decoded (only in the text parts)."""
    return "".join("" if p in OWN_TAGS else html.unescape(p) for p in re.split(r"(<[^<>]*>)", text))


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_renders_no_tag_and_shows_as_written(text):
    safe = plotly_text(text)
    assert rendered_tags(safe) == []
    assert shown(safe) == text   # a visitor's <b> is shown as the characters "<b>", as the data table shows it


def test_the_cases_are_live_markup_unescaped():
    """Plotly draws a visitor's `<a href>` as a link (http, https, mailto: its allowed protocols), `<span style>`
    as CSS and `<b>` as bold; `<img>` and `<script>` are not in its table (shown as text even unescaped)."""
    live = [t for t in HOSTILE if rendered_tags(t)]
    assert len(live) == 8 and all("<a" in t.lower() or "<span" in t or "<b>" in t for t in live)


def test_own_markup_passes_unchanged():
    for text in ("Confusion matrix<br>Tiny BERT", "L1 H2<br>%{y} → %{x}: %{z:.3f}<extra></extra>",
                 "%{y}: %{x:+.4f}<extra>pretrained</extra>", "5 > 3, R&D, 50%"):
        assert plotly_text(text) == text
    assert plotly_text("<br><extra>") == "<br><extra>" and plotly_text(plotly_text(HOSTILE[0])) != HOSTILE[0]


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _hostile_figure(text: str) -> go.Figure:
    """Every kind of text property a figure has, each holding `text`."""
    fig = make_subplots(rows=1, cols=3, specs=[[{}, {}, {"type": "table"}]], subplot_titles=[text, "b", "c"])
    fig.add_trace(go.Heatmap(z=[[1, 2], [3, 4]], x=[text, "ok"], y=np.array([text, "ok"]),
                             text=[[text, "1"], ["2", "3"]], texttemplate="%{text}",
                             customdata=np.array([[text, "x"], ["y", "z"]], dtype=object),
                             hovertemplate="%{customdata} %{x}<br>%{y}<extra></extra>", name=text,
                             colorbar=dict(title=dict(text=text))), row=1, col=1)
    fig.add_trace(go.Bar(x=["a", "b"], y=[1, 2], hovertext=[text, text], name=text, legendgrouptitle_text=text,
                         meta=[text]), row=1, col=2)
    fig.add_trace(go.Table(header=dict(values=[text, "n"]), cells=dict(values=[[text], [1]])), row=1, col=3)
    fig.update_layout(title=text, legend_title_text=text, xaxis=dict(title=text, tickvals=[0, 1],
                                                                       ticktext=[text, "b"]),
                      annotations=[*fig.layout.annotations, dict(text=text, x=0.5, y=0.5, hovertext=text)],
                      updatemenus=[dict(buttons=[dict(label=text, method="restyle", args=["visible", True])])])
    fig.frames = [go.Frame(name="f", layout=dict(title=text))]
    return fig


@pytest.mark.parametrize("text", HOSTILE)
def test_every_text_property_of_a_figure_is_escaped(text):
    fig = _hostile_figure(text)
    before = list(_strings(json.loads(fig.to_json())))
    assert sum(text in s for s in before) >= 15, "the case reaches every property kind"
    safe = safe_figure(fig)
    after = list(_strings(json.loads(safe.to_json())))
    assert [s for s in after if rendered_tags(s)] == [], "no text of the figure holds a tag Plotly renders"
    # Every string is still there (the rebuilt figure orders its keys its own way), each shown as it was written.
    assert sorted(shown(s) for s in after) == sorted(s if s == text else shown(plotly_text(s)) for s in before)
    assert fig.layout.title.text == text, "the figure given is left as it was"


def _real_figures(labels) -> list[go.Figure]:
    """Figures of the app built from `labels` (a class's names, a token's)."""
    from bert_core.inspect.inspection import MaskingRow

    rows = [MaskingRow(position=i, token=t, token_id=i, segment=0, decision=d, shown=s, shown_id=i)
            for i, (t, d, s) in enumerate(zip(labels, ("[MASK]", "random", "kept"), ("[MASK]", labels[0], labels[2])))]
    return [finetune_figures.confusion_figure([[5, 1, 0], [2, 7, 1], [0, 0, 3]], labels, "Confusion matrix<br>Tiny"),
            finetune_figures.class_probabilities_figure({"tiny": [0.2, 0.5, 0.3]}, labels),
            figures.masking_figure(rows), figures.topk_figure([(t, 0.3) for t in labels], "title"),
            lesson_figures.layer_gradient_figure([(t, 0.1) for t in labels], 3)]


def test_real_figures_keep_their_markup_and_lose_a_visitors():
    for fig in [*_real_figures(["World", "Sports", "Sci/Tech"]), figures.architecture_figure()]:
        assert safe_figure(fig) is fig   # nothing to escape: the very figure (no copy), its <br> and <extra> kept
    hostile = ['<a href="http://evil.example/phish">click me</a>', "<img src=x onerror=alert(1)>",
               "<script>alert(1)</script>"]
    for fig in _real_figures(hostile):
        spec = json.loads(fig.to_json())
        assert any(rendered_tags(s) for s in _strings(spec) if "evil" in s or "alert" in s)
        safe = json.loads(safe_figure(fig).to_json())
        assert not [s for s in _strings(safe) if any(t.lower().startswith(("<a", "<img", "<script", "</a"))
                                                      for t in rendered_tags(s))]
        # Each string escaped, nothing else: the figure's own (`<br>`, `<extra>`) pass as they were.
        assert sorted(_strings(safe)) == sorted(plotly_text(s) for s in _strings(spec))


MARKDOWN_HOSTILE = ["[click me](http://evil.example/phish)", "http://evil.example/b", "www.evil.example",
                    "x@evil.example", "![i](http://evil.example/i.png)", "[x]: http://evil.example/r", "<http://e.x>",
                    ":red[red] :material/home: $x^2$", "# heading\n- item\n1. one\n> quote\n---",
                    "*a* _b_ `c` ~~d~~ | e | \\[f\\] &lt;"]


@pytest.mark.parametrize("text", MARKDOWN_HOSTILE)
def test_markdown_escape_leaves_nothing_to_link_or_format(text):
    safe = markdown(text)
    unescaped = re.sub(r"\\(.)", r"\1", safe.replace(WORD_JOINER, ""), flags=re.S)
    assert unescaped == text   # shown as written
    bare = re.sub(r"\\.", "", safe, flags=re.S)   # what is left where no backslash holds a character
    assert not re.search(r"[\[\]<>`*_~|$&]|://|www\.|@\w", bare, flags=re.I)
    assert not re.search(r"(?m)^\s*([-+#=]|\d+[.)])", safe)   # no line opens a block


def test_markdown_keeps_common_punctuation_and_table_rows():
    assert markdown("Drawn from notes.txt (2 MB), not UTF-8; 50% done!") == \
        "Drawn from notes.txt (2 MB), not UTF-8; 50% done!"
    assert markdown_rows([{"text": "[x](http://e.x)", "n": 3}]) == [{"text": markdown("[x](http://e.x)"), "n": 3}]


def test_every_chart_goes_through_the_one_sink():
    """Only app/app_drawing.plotly calls st.plotly_chart, after safe_figure; nothing turns on raw HTML."""
    sources = [ROOT / "app.py", *(ROOT / "pages").glob("*.py"), *(ROOT / "bert_core").rglob("*.py")]
    calls = {p.relative_to(ROOT).as_posix() for p in sources
             if re.search(r"\bplotly_chart\s*\(", p.read_text())}
    assert calls == {"bert_core/app/app_drawing.py"}
    drawing = (ROOT / "bert_core/app/app_drawing.py").read_text()
    assert re.search(r"safe_figure\(fig\)\)[^\n]*\n(.*\n)*?\s+st\.plotly_chart\(fig", drawing)
    assert not [p for p in sources if "unsafe_allow_html=True" in p.read_text()]
