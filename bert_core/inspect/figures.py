"""Plotly figures of architecture, training curves, masking, attention and predictions, built from plain results
(inspection dataclasses, trainer events); no Streamlit, so the app, notebooks and tests share them."""

from __future__ import annotations

import json
import math
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

# Plotly imports pandas lazily while it validates a figure's data. When a class of thirty arrives at a freshly started
# server, many script threads build their first figure at once and could see each other's half-imported pandas
# ("partially initialized module 'pandas'", benchmarks/classroom_load.py): import it here, under this module's
# import lock, before any figure is built.
import pandas  # noqa: F401
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bert_core.data.objectives import MASK_RATE
from bert_core.inspect.figure_floor import projector_figure
from bert_core.training.comparison import KNOBS, run_labels
from bert_core.training.train_config import change_labels

if TYPE_CHECKING:  # inspection imports torch: the home page draws its figure before torch is loaded
    from bert_core.inspect.inspection import AttentionResult, HeadSummary, MaskingRow

DECISION_COLORS = {
    "[MASK]": "#d62728",
    "random": "#ff7f0e",
    "kept": "#2ca02c",
    "not chosen": "#e8e8e8",
}
SERIES_COLORS = {"total": "#1f77b4", "mlm": "#d62728", "nsp": "#2ca02c", "eval": "#9467bd", "eval_nsp": "#17becf",
                 "baseline": "#7f7f7f", "lr": "#1f77b4", "speed": "#8c564b"}
# Ten colours a reader tells apart (Plotly's D3 palette): a chart never gives two lines the same one.
DISTINCT_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf")
SPECIAL_TOKENS = frozenset({"[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"})
HISTORY_CANDIDATES = 6   # lines in the guesses-over-training chart: the tokens that were ever in the top 3
LABEL_CHARS = 7          # characters of a token that fit in a masking box before it is shortened
# Long runs log thousands of steps; drawing every one makes the live page slow without showing more: a half-width
# chart's plot is about 500 pixels wide. (At 1,500 the live view of the default 2,000-step run cost the training
# process a third of its speed on a 2-core machine: the server and the browser redraw four charts every 2 s.)
MAX_POINTS = 500
DEFAULT_SMOOTHING = 0.9  # of the training curves (`ema`): about a 10-step window; a batch of 16 is noisy
HEAD_MEASURES = ("[CLS]", "[SEP]", "previous", "next", "self", "entropy")


# The home page's block diagrams, as data (architecture.json beside this module).
ARCHITECTURE = json.loads(Path(__file__).with_name("architecture.json").read_text(encoding="utf-8"))
STILL_FIGURES = ("bert-architecture",)   # drawings, not data: nothing to zoom or pan
_ZOOM_BUTTONS = ["zoom2d", "pan2d", "select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d", "resetScale2d"]


def plotly_config(filename: str = "bert-explorer", scale: int = 2) -> dict:
    """The `config=` for `st.plotly_chart`: a PNG download under `filename`; a drawing keeps no zoom or pan."""
    config = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": filename, "scale": scale},
              "modeBarButtonsToAdd": ["toImage"]}
    if filename in STILL_FIGURES:
        config.update(modeBarButtonsToRemove=_ZOOM_BUTTONS, scrollZoom=False, doubleClick=False)
    return config


TOOLBAR_PX = 36     # the height Plotly's toolbar takes at the top right of a chart, when the pointer is over it
TITLE_PX = 28       # a title's line


def clear_of_toolbar(fig: go.Figure) -> go.Figure:
    """Put the title under the toolbar's strip, not beside it, where a long title or a narrow chart ran under the
    buttons: the title moves down by the toolbar's height and the top margin (and the height, so the plot keeps
    its size) grows to hold both. Idempotent; returns the figure."""
    title = fig.layout.title.text
    top = fig.layout.margin.t if fig.layout.margin.t is not None else 100
    need = TOOLBAR_PX + (TITLE_PX if title else 0) + 8
    if top >= need and (not title or fig.layout.title.pad.t == TOOLBAR_PX):
        return fig   # done already: a shared figure (LiveCharts) is only read here, never written twice
    if top < need:
        fig.update_layout(margin_t=need, height=(fig.layout.height or 450) + need - top)
    if title:
        fig.update_layout(title=dict(yref="container", y=1, yanchor="top", pad=dict(t=TOOLBAR_PX)))
    return fig


def _probability_range(*values: float) -> list[float]:
    """[0, a little above the largest], at least 5%: bars of 1 to 6% are bars, not slivers on a 0-100% axis."""
    top = max((v for v in values if v is not None), default=0.0)
    return [0.0, min(1.0, max(0.05, top * 1.15))]


def _get(event: Any, name: str):
    """An event's field: a live run's event (pretraining_events, finetune_results) or a record read back from JSON,
    which may lack one a later version added."""
    return event.get(name) if isinstance(event, Mapping) else getattr(event, name)


def _thin(events: Sequence[Any]) -> list:
    """At most MAX_POINTS (+ the last) of `events`, evenly spaced, always keeping the first and the last."""
    events = list(events)
    if len(events) <= MAX_POINTS:
        return events
    thinned = events[::math.ceil(len(events) / MAX_POINTS)]
    return thinned if thinned[-1] is events[-1] else [*thinned, events[-1]]


def ema(values: Sequence[float], weight: float) -> list[float]:
    """Exponential moving average with TensorBoard's debiasing: s_t = weight * s_(t-1) + (1 - weight) * v_t, divided
    by 1 - weight^t so that the first points are not pulled toward 0. weight 0 returns the values; 0.99 is heavy."""
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    out, acc = [], 0.0
    for t, v in enumerate(values, start=1):
        acc = weight * acc + (1 - weight) * v
        out.append(acc / (1 - weight**t))
    return out


def _series(events: Sequence[Any], name: str) -> tuple[list, list]:
    """(steps, values) of the events that carry a number `name`. A tight loop, not `_get` an event: each live chart
    reads a run's whole history every time it is rebuilt, and a Mapping check an event was a third of the build."""
    xs, ys = [], []
    kind = mapped = None
    for e in events:
        if type(e) is not kind:   # one kind of event a list, in practice: the check once, not per event
            kind, mapped = type(e), isinstance(e, Mapping)
        v, step = (e.get(name), e.get("step")) if mapped else (getattr(e, name), e.step)
        if v is None or v != v:   # absent, or NaN
            continue
        xs.append(step)
        ys.append(float(v))
    return xs, ys


def unigram_baseline_values(baselines: Mapping | None) -> dict:
    """The unigram accuracy and loss (log perplexity) of a trainer's `baselines` dict, whatever its nesting."""
    src = (baselines or {}).get("unigram", baselines) if isinstance(baselines, Mapping) else None
    if not isinstance(src, Mapping):
        return {}
    out = {} if src.get("accuracy") is None else {"accuracy": float(src["accuracy"])}
    if src.get("loss") is not None or src.get("perplexity"):
        out["loss"] = float(src["loss"]) if src.get("loss") is not None else math.log(float(src["perplexity"]))
    return out


# The room a legend below the plot takes, at the 13 px base font (figure_floor.BASE_FONT_PX), measured in Chromium.
BOTTOM_PX = 50          # the bottom margin of a figure without a legend below
LEGEND_ROW_PX = 30      # a horizontal legend's row of one-line entries, its padding included
LEGEND_LINE_PX = 17     # each further line of a row whose entry is wrapped (`<br>`)
LEGEND_ROW_WIDTH = 1000  # the width a legend's rows are counted at: a full-width chart's, less its side margins
TICK_LABELS_PX = 24     # an x axis's upright tick labels under the plot
AXIS_TITLE_PX = 32      # an x axis's title under its tick labels, its standoff included
CHAR_PX = 7             # a character of 13 px text, on average


def _legend_rows_px(fig: go.Figure) -> int:
    """The height of `fig`'s horizontal legend, its entries packed into rows of LEGEND_ROW_WIDTH; 0 when it shows
    none. Plotly shows a legend unless told not to once two traces could be in it."""
    names = [str(t.name) for t in fig.data if t.showlegend is not False and t.name]
    if fig.layout.showlegend is False or not names or (fig.layout.showlegend is None and len(fig.data) < 2):
        return 0
    rows = [[0, 1]]   # each row's width and lines
    for name in names:
        parts = name.split("<br>")
        item = 40 + CHAR_PX * max(map(len, parts))   # the symbol and its gaps, then the longest line
        if rows[-1][0] and rows[-1][0] + item > LEGEND_ROW_WIDTH:
            rows.append([0, 1])
        rows[-1] = [rows[-1][0] + item, max(rows[-1][1], len(parts))]
    return sum(LEGEND_ROW_PX + LEGEND_LINE_PX * (n - 1) for _, n in rows)


def _axis_foot_px(fig: go.Figure) -> int:
    """What the lowest row of x axes draws under its plots: tick labels (taller when slanted, by the longest
    label of the traces on the axis) and the axis title."""
    axes = {axis.plotly_name: axis for axis in fig.select_xaxes()}
    low = {}   # the bottom of each x axis's plot, as a share of the figure's plotting height
    for name, axis in axes.items():
        y_name = "yaxis" + (axis.anchor[1:] if axis.anchor and axis.anchor.startswith("y") else name[5:])
        domain = fig.layout[y_name].domain if y_name in fig.layout else None
        low[name] = domain[0] if domain else 0.0
    need = 0
    for name, axis in axes.items():
        if axis.visible is False or low[name] > min(low.values()):
            continue
        px = 0
        if axis.showticklabels is not False:
            px = TICK_LABELS_PX
            if axis.tickangle not in (None, 0, "auto"):   # a slanted label stands as high as its length allows
                ref = "x" + name[5:]
                labels = [str(v) for t in fig.data if (t.xaxis or "x") == ref and t.x is not None for v in t.x]
                px += round(CHAR_PX * max(map(len, labels), default=0) * abs(math.sin(math.radians(axis.tickangle))))
        if axis.title.text:
            px += AXIS_TITLE_PX
        need = max(need, px)
    return need


def _layout(fig: go.Figure, title: str, height: int = 340, legend: str = "right", **kw) -> go.Figure:
    """Title, height and margins; the legend right (one entry a line, overlapping nothing) or below: at the
    figure's foot, under the lowest axes' tick labels and title, the bottom margin holding all three and the
    height grown by as much, so the plot keeps the size `height` gives it."""
    # No explicit template: Streamlit applies its own theme, and naming one costs ~15 ms per figure, which the
    # live training view pays four times per redraw.
    fig.update_layout(**kw)   # first: a legend below is placed under the axes, titles included, that `kw` sets
    bottom = BOTTOM_PX
    if legend == "right":
        place = dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top")
    else:
        # Anchored to the container, not the plot: a fraction of the plot's height (y=-0.12) put a short plot's
        # legend over its tick labels and axis title. Plotly's automargin still grows the margin should a narrow
        # chart wrap the legend into more rows than counted here, so it never overlaps, the plot a little shorter.
        place = dict(orientation="h", x=0, xanchor="left", yref="container", y=0, yanchor="bottom")
        bottom = max(BOTTOM_PX, _axis_foot_px(fig) + _legend_rows_px(fig))
        height += bottom - BOTTOM_PX
    fig.update_layout(title=title, height=height, margin=dict(l=60, r=20, t=50, b=bottom), legend=place)
    return fig


def wrap(text: str, width: int = 48) -> str:
    """`text` broken at spaces into `<br>` lines of about `width` characters, to fit a half-width chart."""
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "<br>".join([*lines, line])


def shorten(text: str, limit: int = LABEL_CHARS) -> str:
    """`text` cut to `limit` characters with an ellipsis (the full text goes in the hover)."""
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"


def _line_traces(events: Sequence[Any], specs, mode: str = "lines", dash: str | None = None,
                 smoothing: float = 0.0) -> list[dict]:
    """One line per (event field, legend name, colour) the events carry, as the plain dicts Plotly's validation
    makes of them (`_plain_figure`). With smoothing > 0 the line is the `ema` (over every step, before thinning) and
    the raw values are faint behind it, in its legend group."""
    traces = []
    for key, name, color in specs:
        xs, ys = _series(events, key)
        if not xs:
            continue
        keep = _thin(range(len(xs)))
        shown_x, raw = [xs[i] for i in keep], [ys[i] for i in keep]
        line = {"color": color} if dash is None else {"color": color, "dash": dash}
        if smoothing > 0:
            traces.append(dict(type="scatter", x=shown_x, y=raw, mode=mode, name=name, legendgroup=name,
                               showlegend=False, opacity=0.25, hoverinfo="skip", line=dict(line)))
            smoothed = ema(ys, smoothing)
            raw = [smoothed[i] for i in keep]
        traces.append(dict(type="scatter", x=shown_x, y=raw, mode=mode, name=name, legendgroup=name, line=line))
    return traces


def _plain_figure(traces: list[dict]) -> go.Figure:
    """A figure of `traces` taken as they are, unchecked: plain dicts in the form Plotly's validation would give
    them (strings, numbers, lists of numbers, no None; tests/test_figures.py checks that validating them changes
    nothing). Validating the live charts' traces, each `go.Scatter` checked once when made and again when added,
    was most of building them, and the Train page rebuilds them at every new step of every watched run. The figure
    checks what is set on it from here on, as any figure does."""
    fig = go.Figure(data=traces, _validate=False)
    fig._validate = fig.layout._validate = True
    for trace in fig.data:
        trace._validate = True
    return fig


def mark_growth(fig: go.Figure, growth: Mapping | None) -> go.Figure:
    """A vertical line at the step a run that started small grew to its full size (Trainer.growth), named."""
    if growth:
        (layers, hidden), (to_layers, to_hidden) = growth["from_size"], growth["to_size"]
        fig.add_vline(x=growth["step"], line=dict(color="#888", dash="dot", width=1),
                      annotation_text=f"grown {layers}x{hidden} → {to_layers}x{to_hidden}",
                      annotation_position="top left", annotation_font_size=12)
    return fig


def mark_changes(fig: go.Figure, config: Any, last_step: int) -> go.Figure:
    """A vertical line at each step where a setting was changed while the run trained (TrainConfig.changes), named
    'lr 0.001 → 0.0003 at step 120': to the line's right in the first half of the `last_step` steps drawn, else to
    its left (a change is made at the run's latest step, and its name ran off the plot over the legend)."""
    for step, label in change_labels(config) if config.changes else ():
        side = "top right" if step < last_step / 2 else "top left"
        fig.add_vline(x=step, line=dict(color="#c0392b", dash="dash", width=1), annotation_text=label,
                      annotation_position=side, annotation_font_size=12)
    return fig


def task_name(causal: bool) -> str:
    """What a run's token predictions are called on every label: a GPT's are next-token ones, a BERT's masked-token
    (MLM) ones. One word for both would let a class read a GPT's figure as a BERT's."""
    return "next-token" if causal else "MLM"


def _curves(title: str, y: dict, history, train, smoothing: float, evals=(), held=(), baseline=None) -> go.Figure:
    """Training lines `train` (smoothed), held-out lines `held` dotted, the unigram `baseline` (y, causal) dashed."""
    traces = _line_traces(history, train, smoothing=smoothing) + _line_traces(evals, held, "lines+markers", "dot")
    y_line, causal = baseline or (None, False)
    if y_line is not None:
        # A line of the legend, not a label on the chart: the label sat on the curves as they reached the baseline.
        last = max((trace["x"][-1] for trace in traces), default=0)   # steps: each trace's last is its largest
        traces.append(dict(type="scatter", x=[0, max(last, 1)], y=[y_line, y_line], mode="lines",
                           name=f"unigram baseline ({'next token' if causal else 'MLM'})",
                           line=dict(color=SERIES_COLORS["baseline"], dash="dash")))
    return _layout(_plain_figure(traces), title, xaxis=dict(title="step"), yaxis=y)


def loss_figure(history: Sequence[Any], evals: Sequence[Any] = (), baselines: Mapping | None = None,
                smoothing: float = 0.0, causal: bool = False) -> go.Figure:
    """Training and held-out loss per step and the unigram baseline; `causal`: a GPT's, with no NSP."""
    parts = (("loss", "total", "total"), ("mlm_loss", task_name(causal), "mlm")) \
        + (() if causal else (("nsp_loss", "NSP", "nsp"),))
    return _curves(f"Loss ({'GPT: next token' if causal else 'BERT: masked tokens'})", dict(title="loss (nats)"),
                   history, [(key, f"{label} loss (train)", SERIES_COLORS[color]) for key, label, color in parts],
                   smoothing, evals, [("mlm_loss", f"{task_name(causal)} loss (held-out)", SERIES_COLORS["eval"])],
                   (unigram_baseline_values(baselines).get("loss"), causal))


def accuracy_figure(history: Sequence[Any], evals: Sequence[Any] = (), baselines: Mapping | None = None,
                    smoothing: float = 0.0, causal: bool = False) -> go.Figure:
    """MLM and NSP accuracy per step, held-out and training, and the unigram baseline's; `causal` as loss_figure."""
    task = task_name(causal)
    nsp = lambda when, color: [] if causal else [("nsp_acc", f"NSP accuracy ({when})", SERIES_COLORS[color])]  # noqa
    return _curves(f"Accuracy ({'GPT: next token' if causal else 'BERT: masked tokens'})",
                   dict(title="accuracy", range=[0, 1]), history,
                   [("mlm_acc", f"{task} accuracy (train)", SERIES_COLORS["mlm"]), *nsp("train", "nsp")], smoothing,
                   evals, [("mlm_acc", f"{task} accuracy (held-out)", SERIES_COLORS["eval"]),
                           *nsp("held-out", "eval_nsp")],
                   (unigram_baseline_values(baselines).get("accuracy"), causal))


def decision_accuracy_figure(history: Sequence[Any], smoothing: float = 0.0) -> go.Figure:
    """MLM accuracy by masking decision (smoothed: a batch holds only a few random and kept positions)."""
    return _curves("MLM accuracy by masking decision", dict(title="MLM accuracy", range=[0, 1]), history,
                   [("mlm_acc_masked", "shown as [MASK]", DECISION_COLORS["[MASK]"]),
                    ("mlm_acc_random", "replaced by a random token", DECISION_COLORS["random"]),
                    ("mlm_acc_kept", "kept unchanged", DECISION_COLORS["kept"])], smoothing)


def rate_figure(history: Sequence[Any]) -> go.Figure:
    """Learning rate (top) and tokens/s (bottom) per step, each panel its own y axis from 0 on one step axis."""
    history = _thin(history)
    traces = []
    for key, name, color, axes, hover in (("lr", "learning rate", "lr", {}, "%{y:.2e}"),
                                          ("tokens_per_s", "tokens / s", "speed", dict(xaxis="x2", yaxis="y2"),
                                           "%{y:,.0f} tokens/s")):
        xs, ys = _series(history, key)
        traces.append(dict(type="scatter", x=xs, y=ys, mode="lines", name=name, **axes,
                           line={"color": SERIES_COLORS[color]}, hovertemplate=f"step %{{x}}: {hover}<extra></extra>"))
    fig = _plain_figure(traces)
    # Axes laid out by hand (make_subplots alone costs ~30 ms, paid at every live redraw).
    fig.update_layout(
        xaxis=dict(domain=[0, 1], anchor="y", matches="x2", showticklabels=False),
        yaxis=dict(domain=[0.58, 1], anchor="x", rangemode="tozero", exponentformat="e", title="learning rate"),
        xaxis2=dict(domain=[0, 1], anchor="y2", title="step"),
        yaxis2=dict(domain=[0, 0.42], anchor="x2", rangemode="tozero", title="tokens / s"),
        showlegend=False)
    return _layout(fig, "Learning rate and speed", height=380)


class FigureCache:
    """Figures built once for everyone who looks at the same thing, kept with their owner (a run's trainer or probe
    store, held weakly: they go with the run) under a key of what they show; each owner keeps its `keep` latest.
    Twenty students watching the teacher's run cost one build per redraw, not twenty: the live charts were the web
    server's largest CPU cost under the class load test, and a run's word map 43% of a watched Train page's script
    run (docs/benchmarks.md). `build()` returns the figure(s) laid out as the pages draw them (clear of the toolbar
    and for the projector): shared figures are only read after that (app_drawing.plotly: in place and idempotent)."""

    def __init__(self, keep: int = 8):
        self.keep = keep
        self.builds = 0
        self._lock = threading.Lock()
        self._built: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self, owner: Any, key: Any, build: Callable[[], Any]) -> Any:
        with self._lock:
            found = self._built.get(owner, {}).get(key)
        if found is not None:
            return found
        built = build()
        with self._lock:
            self.builds += 1
            entries = self._built.setdefault(owner, {})
            entries[key] = built
            while len(entries) > self.keep:
                entries.pop(next(iter(entries)))
        return built


def laid_out(fig: go.Figure) -> go.Figure:
    """`fig` for the projector and clear of the toolbar, as app_drawing.plotly draws it: done once for a shared one."""
    return clear_of_toolbar(projector_figure(fig))


class LiveCharts(FigureCache):
    """The Train page's four live charts of a run, built once per new data and smoothing for every session."""

    NAMES = ("loss", "accuracy", "accuracy-by-decision", "learning-rate")   # a GPT's run has no decisions

    def __init__(self, keep: int = 4):
        super().__init__(keep)

    def figures(self, trainer: Any, smoothing: float) -> dict[str, go.Figure]:
        """`NAMES` -> figure for the trainer's history, evaluations and baselines as they are now."""
        history = trainer.history
        last = (_get(history[-1], "step"), _get(history[-1], "elapsed_s")) if history else None
        key = (len(history), last, len(trainer.evals), float(smoothing), bool(trainer.growth),
               trainer.config.changes)
        return self.get(trainer, key, lambda: self._build(trainer, smoothing))

    @staticmethod
    def _build(trainer: Any, smoothing: float) -> dict[str, go.Figure]:
        history, evals = trainer.history, trainer.evals
        causal = trainer.config.objective == "clm"
        built = {"loss": loss_figure(history, evals, trainer.baselines, smoothing, causal),
                 "accuracy": accuracy_figure(history, evals, trainer.baselines, smoothing, causal)}
        if not causal:   # a GPT masks nothing: no figure of masking decisions, rather than an empty one
            built["accuracy-by-decision"] = decision_accuracy_figure(history, smoothing)
        built["learning-rate"] = rate_figure(history)
        for fig in built.values():   # laid out before it is shared: the pages only read it (app_drawing.plotly)
            mark_growth(fig, trainer.growth)
            mark_changes(fig, trainer.config, _get(history[-1], "step") if history else 0)
            clear_of_toolbar(fig)
        return built


LIVE_CHARTS = LiveCharts()   # one per server process: every session's Train page draws from it
SHARED_FIGURES = FigureCache()   # the other figures of a run that everyone watching it draws (its word maps)


def box_cells(fig: go.Figure, name: str, color: str, xs: Sequence[float], ys: Sequence[float],
              texts: Sequence[str], hovers: Sequence[str], font_size: int = 12) -> None:
    """Boxes in data coordinates (scaling with the chart and a PNG), their text and hover on top."""
    # The boxes are one filled trace, each box a closed run of its corners between gaps: a layout shape a box
    # (`fig.add_shape`) re-validates every shape already there, and 128 tokens took 7 s a figure (profiled: 61% of a
    # class server's CPU went to the Tokens & masking page); this trace takes about 10 ms.
    bx = [v for x in xs for v in (x - 0.47, x + 0.47, x + 0.47, x - 0.47, x - 0.47, None)]
    by = [v for y in ys for v in (y - 0.4, y - 0.4, y + 0.4, y + 0.4, y - 0.4, None)]
    fig.add_trace(go.Scatter(x=bx, y=by, mode="lines", fill="toself", fillcolor=color, name=name, legendgroup=name,
                             line=dict(color="#555", width=1), hoverinfo="skip", showlegend=False))
    fig.add_trace(go.Scatter(
        x=list(xs), y=list(ys), mode="markers+text", name=name, legendgroup=name, text=list(texts),
        hovertext=list(hovers), hoverinfo="text",
        marker=dict(symbol="square", size=1, color=color, line=dict(color=color, width=0)),
        textfont=dict(size=font_size, color="#000"), showlegend=True))
    fig.update_layout(legend=dict(itemsizing="constant"))


def masking_figure(rows: Sequence[MaskingRow], per_line: int = 16) -> go.Figure:
    """The instance's tokens as coloured boxes: red [MASK], orange random (original -> replacement), green kept."""
    fig = go.Figure()
    n = len(rows)
    lines = max(1, math.ceil(n / per_line))
    for decision, color in DECISION_COLORS.items():
        picked = [r for r in rows if r.decision == decision]
        if not picked and decision != "not chosen":
            continue
        # Two short lines fit a box: the token, then what the model sees instead (the full text on hover).
        box_cells(fig, decision, color, [r.position % per_line for r in picked],
                  [-(r.position // per_line) for r in picked],
                  [shorten(r.token) if decision in ("not chosen", "kept") else
                   f"{shorten(r.token)}<br>→{shorten(r.shown, LABEL_CHARS - 1)}" for r in picked],
                  [f"#{r.position + 1} {r.token} (id {r.token_id}), segment {'AB'[min(r.segment, 1)]}<br>"
                   f"decision: {decision}; model sees {r.shown}" for r in picked])
    fig.update_xaxes(visible=False, range=[-0.6, per_line - 0.4])
    fig.update_yaxes(visible=False, range=[-lines + 0.4, 0.6])
    return _layout(fig, "Masking decisions", height=120 + 72 * lines, legend="below")


def decision_counts_figure(counts: Mapping[str, float]) -> go.Figure:
    """Observed masking shares against BERT's targets: 15% chosen, then 80% [MASK] / 10% random / 10% kept."""
    names = ["chosen (of tokens)", "[MASK] (of chosen)", "random (of chosen)", "kept (of chosen)"]
    observed = [counts.get(f"{k}_share", 0) for k in ("chosen", "masked", "random", "kept")]
    fig = go.Figure(go.Bar(x=names, y=observed, name="observed", text=[f"{v:.1%}" for v in observed],
                           marker_color=["#1f77b4", *(DECISION_COLORS[d] for d in ("[MASK]", "random", "kept"))]))
    fig.add_trace(go.Scatter(x=names, y=[counts.get("target_rate", MASK_RATE), 0.8, 0.1, 0.1], mode="markers",
                             name="target", marker=dict(symbol="line-ew-open", size=40, color="#000",
                                                        line=dict(width=3))))
    fig.update_yaxes(range=[0, 1], tickformat=".0%")
    return _layout(fig, f"Masking over {counts.get('candidates', 0):,} tokens")


def _token_labels(tokens: Sequence[str]) -> list[str]:
    # Plotly merges equal category labels; numbering keeps repeated tokens (two "the"s) apart. From 1, as every
    # page and lesson step counts tokens, layers and heads.
    return [f"{i + 1}:{t}" for i, t in enumerate(tokens)]


# Where a causal model's mask hides the future: the cells above the diagonal are left empty over this colour, so
# "never allowed to look" reads differently from "allowed, but looked little" (a pale blue).
FUTURE_COLOUR = "#d9d9d9"
FUTURE_NOTE = "grey: later tokens, hidden by the causal mask"


def future_hidden(att: np.ndarray, causal: bool) -> np.ndarray:
    """A causal model's map with the cells above the diagonal NaN (Plotly leaves them empty); else `att`."""
    if not causal:
        return att
    shown = np.array(att, dtype=np.float32, copy=True)
    rows, cols = np.triu_indices(shown.shape[-1], k=1)
    shown[..., rows, cols] = np.nan
    return shown


_DARK_TICKS = dict(size=12, color="#222")   # token labels read from the back of a room


def head_view_figure(result: AttentionResult, layer: int, head: int, label: str = "") -> go.Figure:
    """One head as a large heatmap: rows the attending (query) tokens, columns the attended (key) ones."""
    att = result.attentions[layer, head]
    labels = _token_labels(result.tokens)
    fig = go.Figure(go.Heatmap(
        z=future_hidden(att, result.causal), x=labels, y=labels, colorscale="Blues", zmin=0,
        zmax=float(max(att.max(), 1e-6)),
        hovertemplate="%{y} attends to %{x}: %{z:.3f}<extra></extra>", colorbar=dict(title="weight"),
    ))
    size = max(420, min(900, 24 * len(labels) + 160))
    fig.update_yaxes(autorange="reversed", title="query (attending) token", tickfont=_DARK_TICKS)
    fig.update_xaxes(title="key (attended) token", tickangle=-60, tickfont=_DARK_TICKS)
    title = f"Layer {layer + 1}, head {head + 1}" + (f" — {label}" if label else "")
    if result.causal:
        title += f" ({FUTURE_NOTE})"
        fig.update_layout(plot_bgcolor=FUTURE_COLOUR)
    return _layout(fig, title, height=size, width=None)


def model_view_figure(result: AttentionResult, labels: Sequence[str] | None = None,
                      zmax: float | None = None) -> go.Figure:
    """Every layer (rows) x head (columns) as a small heatmap on one colour scale, titled by head label.

    The scale runs from 0 to `zmax`, by default the largest weight (a fixed 0..1 scale leaves an untrained model's
    near-uniform maps, about 1/S, invisible); a time-lapse passes one `zmax` for every step, so learning shows as
    colour appearing. Token labels are drawn where a token gets at least 8 pixels, else on hover only."""
    n_layers, n_heads = result.num_layers, result.num_heads
    tok = _token_labels(result.tokens)
    seq = len(tok)
    cell = 170 if n_heads <= 4 else 110
    labelled = cell / max(seq, 1) >= 8
    if labelled:  # room for the labels' text: tall enough rows, and margins for the words
        cell = max(cell, min(14 * seq, 360))
    gap_x, gap_y = 0.02, (0.06 if n_layers < 8 else 0.03)
    # Axes laid out by hand: make_subplots costs more than the heatmaps themselves at 16+ panels.
    traces, layout, titles = [], {}, []
    shown = [shorten(t, 10) for t in result.tokens]
    for layer in range(n_layers):
        for head in range(n_heads):
            n = layer * n_heads + head + 1
            suffix = "" if n == 1 else str(n)
            traces.append(go.Heatmap(
                z=future_hidden(result.attentions[layer, head], result.causal), x=tok, y=tok, coloraxis="coloraxis",
                xaxis=f"x{suffix}", yaxis=f"y{suffix}",
                hovertemplate=f"L{layer + 1} H{head + 1}<br>%{{y}} → %{{x}}: %{{z:.3f}}<extra></extra>"))
            x0, x1 = head / n_heads, (head + 1) / n_heads - gap_x
            y0, y1 = 1 - (layer + 1) / n_layers, 1 - layer / n_layers - gap_y
            ticks = dict(tickmode="array", tickvals=tok, ticktext=shown, tickfont=_DARK_TICKS)
            layout[f"xaxis{suffix}"] = dict(domain=[x0, x1], anchor=f"y{suffix}",
                                            showticklabels=labelled and layer == n_layers - 1,
                                            tickangle=-90, **ticks)
            layout[f"yaxis{suffix}"] = dict(domain=[y0, y1], anchor=f"x{suffix}",
                                            showticklabels=labelled and head == 0, autorange="reversed", **ticks)
            extra = f": {labels[n - 1]}" if labels else ""
            titles.append(dict(text=f"L{layer + 1} H{head + 1}{extra}", x=(x0 + x1) / 2, y=y1, xref="paper",
                               yref="paper", xanchor="center", yanchor="bottom", showarrow=False,
                               font=dict(size=12)))
    top = float(max(result.attentions.max(), 1e-6)) if zmax is None else float(zmax)
    margin = dict(l=80, r=10, t=60, b=80) if labelled else dict(l=10, r=10, t=60, b=10)
    layout.update(coloraxis=dict(colorscale="Blues", cmin=0, cmax=top, colorbar=dict(title="weight")),
                  height=margin["t"] + margin["b"] + cell * n_layers, margin=margin, annotations=titles,
                  title="Model view: every layer (row) and head (column)"
                  + (f"; {FUTURE_NOTE}" if result.causal else ""))
    if result.causal:
        layout["plot_bgcolor"] = FUTURE_COLOUR
    return go.Figure(data=traces, layout=layout)


def side_by_side_figure(named: Sequence[tuple[str, AttentionResult]], layer: int, head: int | None = None) -> go.Figure:
    """Models' attention for the same text, a panel each: layer `layer`'s head `head`, or (None) the mean of its
    heads, clipped to each model's size; one colour scale, so BERT's full square stands beside GPT's triangle."""
    panels, titles = [], []
    for name, result in named:
        lay = min(layer, result.num_layers - 1)
        att = result.attentions[lay]
        if head is None:
            att, what = att.mean(axis=0), f"L{lay + 1}, mean of {result.num_heads} heads"
        else:
            att, what = att[min(head, result.num_heads - 1)], f"L{lay + 1} H{min(head, result.num_heads - 1) + 1}"
        panels.append((result, att))
        titles.append(f"{name}: {what}" + (" (causal)" if result.causal else ""))
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=titles, horizontal_spacing=0.12)
    top = float(max(max(float(att.max()) for _, att in panels), 1e-6))
    for col, (result, att) in enumerate(panels, start=1):
        tok = _token_labels(result.tokens)
        fig.add_trace(go.Heatmap(z=future_hidden(att, result.causal), x=tok, y=tok, coloraxis="coloraxis",
                                 hovertemplate="%{y} attends to %{x}: %{z:.3f}<extra></extra>"), row=1, col=col)
    fig.update_yaxes(autorange="reversed", tickfont=_DARK_TICKS)
    fig.update_xaxes(tickangle=-60, tickfont=_DARK_TICKS)
    seq = max(len(result.tokens) for result, _ in panels)
    causal = any(result.causal for result, _ in panels)
    fig.update_layout(coloraxis=dict(colorscale="Blues", cmin=0, cmax=top, colorbar=dict(title="weight")))
    if causal:
        fig.update_layout(plot_bgcolor=FUTURE_COLOUR)
    return _layout(fig, "The same text, side by side" + (f"; {FUTURE_NOTE}" if causal else ""),
                   height=max(420, min(800, 22 * seq + 200)), width=None)


def token_view_figure(result: AttentionResult, token_index: int, direction: str = "from") -> go.Figure:
    """One token's attention across all heads (rows layer/head): where it looks ("from") or who looks at it."""
    n_layers, n_heads = result.num_layers, result.num_heads
    att = result.attentions
    z = att[:, :, token_index, :] if direction == "from" else att[:, :, :, token_index]
    z = z.reshape(n_layers * n_heads, -1)
    rows = [f"L{l + 1} H{h + 1}" for l in range(n_layers) for h in range(n_heads)]
    tok = _token_labels(result.tokens)
    verb = "attends to" if direction == "from" else "is attended by"
    fig = go.Figure(go.Heatmap(z=z, x=tok, y=rows, colorscale="Purples", zmin=0,
                               hovertemplate=f"%{{y}}: {result.tokens[token_index]} {verb} %{{x}}: "
                                             "%{z:.3f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickangle=-60)
    return _layout(fig, f"Token view: {tok[token_index]} {verb}…", height=max(300, 120 + 22 * len(rows)))


def head_summary_figure(summaries: Sequence[HeadSummary], measure: str = "[CLS]") -> go.Figure:
    """A layers x heads grid coloured by one head measure, each cell labelled with the head's short label."""
    if not summaries:
        return go.Figure()
    n_layers, n_heads = max(s.layer for s in summaries) + 1, max(s.head for s in summaries) + 1
    z = np.zeros((n_layers, n_heads))
    text = [[""] * n_heads for _ in range(n_layers)]
    for s in summaries:
        z[s.layer, s.head] = s.measures[measure]
        text[s.layer][s.head] = s.label
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"head {h + 1}" for h in range(n_heads)], y=[f"layer {l + 1}" for l in range(n_layers)],
        text=text, texttemplate="%{text}", zmin=0, zmax=1, colorscale="Oranges",
        hovertemplate=f"%{{y}} %{{x}}<br>{measure}: %{{z:.2f}}<br>%{{text}}<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed")
    what = measure if measure != "entropy" else "evenness, entropy / its maximum (1 = spread evenly)"
    return _layout(fig, f"What each head does (colour: {what})", height=120 + 50 * n_layers)


def topk_figure(candidates: Sequence[tuple[str, float]], title: str = "",
                baseline: Sequence[tuple[str, float]] | None = None) -> go.Figure:
    """Top-k candidates as horizontal probability bars, with the unigram baseline's candidates beside them."""
    panels = [("model", candidates, "#1f77b4"), ("unigram", baseline, SERIES_COLORS["baseline"])][:2 if baseline else 1]
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=("model", "unigram baseline")[:len(panels)],
                        horizontal_spacing=0.25)
    for col, (name, cands, color) in enumerate(panels, start=1):
        fig.add_trace(go.Bar(x=[p for _, p in cands], y=[t for t, _ in cands], orientation="h", name=name,
                             text=[f"{p:.1%}" for _, p in cands], textposition="auto", marker_color=color,
                             hovertemplate="%{y}: %{x:.3f}<extra></extra>"), row=1, col=col)
    fig.update_yaxes(autorange="reversed")
    # One range for both panels, so the model's bars and the baseline's compare by length.
    fig.update_xaxes(range=_probability_range(*(p for _, p in candidates), *(p for _, p in baseline or ())),
                     tickformat=".0%")
    fig.update_layout(showlegend=False)
    return _layout(fig, title, height=max(220, 80 + 32 * len(candidates)))


def history_candidates(snapshots: Sequence[tuple[int, Sequence[tuple[str, float]]]], top: int = 3,
                       limit: int = HISTORY_CANDIDATES) -> list[str]:
    """The latest snapshot's `top` tokens, then the others once in a top by their best, at most `limit`."""
    def ranked(cands):
        return [(t, p) for t, p in cands if t not in SPECIAL_TOKENS][:top]

    best: dict[str, float] = {}
    for _, cands in snapshots:
        for t, p in ranked(cands):
            best[t] = max(best.get(t, 0.0), p)
    latest = [t for t, _ in ranked(snapshots[-1][1])] if snapshots else []
    others = sorted((t for t in best if t not in latest), key=lambda t: -best[t])
    return (latest + others)[:limit]


def topk_history_figure(snapshots: Sequence[tuple[int, Sequence[tuple[str, float]]]], title: str = "") -> go.Figure:
    """The top candidates' probabilities over training steps, a line per history_candidates token."""
    steps = [s for s, _ in snapshots]
    fig = go.Figure()
    for i, t in enumerate(history_candidates(snapshots)):
        ys = [dict(cands).get(t) for _, cands in snapshots]
        fig.add_trace(go.Scatter(x=steps, y=ys, mode="lines+markers", name=t, connectgaps=False,
                                 line=dict(color=DISTINCT_COLORS[i % len(DISTINCT_COLORS)]),
                                 hovertemplate=f"{t}<br>step %{{x}}: %{{y:.1%}}<extra></extra>"))
    fig.update_xaxes(title="training step")
    shown = [y for trace in fig.data for y in trace.y if y is not None]
    fig.update_yaxes(title="probability", range=_probability_range(*shown), tickformat=".0%")
    fig.update_layout(legend_title_text="candidate")
    return _layout(fig, title or "Top candidates over training", height=380)


def architecture_figure(config: Any = None) -> go.Figure:
    """A block diagram of BERT for pretraining with `config`'s sizes (a causal config: the GPT-style model)."""
    c = config
    causal = c is not None and c.attention == "causal"
    sizes = dict(layers="L", hidden="H", heads="A", ffn="4H", vocab="V", positions="512") if c is None else dict(
        layers=c.num_hidden_layers, hidden=c.hidden_size, heads=c.num_attention_heads, ffn=c.intermediate_size,
        vocab=c.vocab_size, positions=c.max_position_embeddings)
    drawing = ARCHITECTURE["gpt" if causal else "bert"]
    fig = go.Figure()
    for x0, y0, x1, y1, text, color in drawing["boxes"]:
        fig.add_shape(type="rect", x0=x0, y0=y0, x1=x1, y1=y1, fillcolor=color, line=dict(color="#555"),
                      layer="below")
        fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=text.format(**sizes), showarrow=False,
                           font=dict(size=12))
    # the encoder stack, repeated L times, with residual connections
    fig.add_shape(type="rect", x0=0.1, y0=0.44, x1=0.9, y1=0.71, line=dict(color="#c0504d", dash="dash"))
    fig.add_annotation(x=0.5, y=0.69, text=drawing["stack"].format(**sizes), showarrow=False,
                       font=dict(size=12, color="#c0504d"))
    for x, y0, y1 in drawing["arrows"]:
        fig.add_annotation(x=x, y=y1, ax=x, ay=y0, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=2, arrowsize=1, arrowwidth=1.5, arrowcolor="#555", text="")
    fig.add_annotation(x=0.5, y=0.97, text=drawing["output"], showarrow=False, font=dict(size=12, color="#555"))
    fig.update_xaxes(visible=False, range=[0, 1])
    fig.update_yaxes(visible=False, range=[1.0, 0])
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=40, b=10), title=drawing["title"], showlegend=False)
    return fig


MAX_OVERLAID_RUNS = 4  # more lines than this on two small panels stop being readable


def overlay_figure(specs: Sequence[Any], histories: Sequence[Sequence[Any]], evals: Sequence[Sequence[Any]],
                   names: Sequence[str] | None = None, smoothing: float = 0.0) -> go.Figure:
    """Up to four runs on the same axes: training MLM loss (smoothed) with the held-out loss as dots, and held-out
    accuracy; a colour and a legend entry a run, naming how it differs from the first (`comparison.run_labels`).
    BERT and GPT runs get a row each, so a next-token accuracy is never read off a masked-token axis."""
    if not 1 <= len(specs) <= MAX_OVERLAID_RUNS or not len(specs) == len(histories) == len(evals):
        raise ValueError(f"give 1 to {MAX_OVERLAID_RUNS} runs, each with its settings, history and evaluations")
    labels = run_labels(list(specs), names)
    causal = [KNOBS["attention"].get(spec) == "causal" for spec in specs]   # the knob's own reading of a spec
    kinds = sorted(set(causal))   # BERT's row first
    titles = []
    for kind in kinds:
        who = "GPT runs: " if kind else "BERT runs: "
        titles += [wrap(f"{who}{task_name(kind)} loss (line: training; dots: held-out)", 36),
                   wrap(f"{who}held-out {'next-token' if kind else 'masked-token'} accuracy", 36)]
    fig = make_subplots(rows=len(kinds), cols=2, subplot_titles=titles, vertical_spacing=0.2)
    for i, (label, history, run_evals) in enumerate(zip(labels, histories, evals)):
        color, row = DISTINCT_COLORS[i], kinds.index(causal[i]) + 1
        label = wrap(label, 60)
        xs, ys = _series(history, "mlm_loss")
        if xs:
            keep = _thin(range(len(xs)))
            smooth = ema(ys, smoothing) if smoothing > 0 else ys
            fig.add_trace(go.Scatter(x=[xs[j] for j in keep], y=[smooth[j] for j in keep], mode="lines", name=label,
                                     legendgroup=label, line=dict(color=color)), row=row, col=1)
        ex, ey = _series(run_evals, "mlm_loss")
        fig.add_trace(go.Scatter(x=ex, y=ey, mode="markers", name=label, legendgroup=label, showlegend=not xs,
                                 marker=dict(color=color, size=5)), row=row, col=1)
        ax, ay = _series(run_evals, "mlm_acc")
        fig.add_trace(go.Scatter(x=ax, y=ay, mode="lines+markers", name=label, legendgroup=label, showlegend=False,
                                 line=dict(color=color), marker=dict(size=4)), row=row, col=2)
    fig.update_xaxes(title="step")
    fig.update_yaxes(title="loss (nats)", col=1)
    fig.update_yaxes(title="accuracy", range=[0, 1], col=2)
    fig = _layout(fig, "Runs compared", height=420 * len(kinds) + 60, legend="below")
    # Room above the first row for its two-line titles under the chart's own title (and the toolbar:
    # clear_of_toolbar); the legend is below the axes' "step" titles already (_layout).
    fig.update_layout(margin_t=TOOLBAR_PX + TITLE_PX + 50)
    return fig
