"""figures.py: the pictures carry the numbers they claim to show, and the module stays free of Streamlit."""

import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import plotly.graph_objects as go
import pytest

from bert_core.inspect import figures
from bert_core.inspect.inspection import AttentionResult, MaskingRow, head_summaries
from bert_core.model.config import BertConfig
from bert_core.training.pretraining_events import EvalEvent, StepEvent


def _attention(layers=2, heads=3, seq=5, seed=0) -> AttentionResult:
    rng = np.random.default_rng(seed)
    att = rng.random((layers, heads, seq, seq)).astype(np.float32)
    att /= att.sum(-1, keepdims=True)
    tokens = ["[CLS]", "the", "the", "cat", "[SEP]"][:seq]
    return AttentionResult(tokens=tokens, attentions=att, token_type_ids=[0] * seq,
                           special_mask=[t.startswith("[") for t in tokens])


def _step(step, loss):
    return StepEvent(step=step, tokens_seen=100 * step, lr=1e-3, loss=loss, mlm_loss=loss - 0.5, nsp_loss=0.5,
                     mlm_acc=0.1, mlm_acc_masked=0.1, mlm_acc_random=0.05, mlm_acc_kept=0.6, nsp_acc=0.5,
                     tokens_per_s=1000.0, grad_norm=1.0, elapsed_s=step * 0.1)


def test_figures_module_never_imports_streamlit():
    code = "import sys, bert_core.inspect.figures, bert_core.inspect.inspection; print('streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_figures_module_leaves_torch_unloaded_so_the_home_page_draws_at_once():
    code = "import sys, bert_core.inspect.figures; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_model_view_has_one_heatmap_per_head_with_its_weights():
    result = _attention()
    fig = figures.model_view_figure(result)
    heatmaps = [t for t in fig.data if isinstance(t, go.Heatmap)]
    assert len(heatmaps) == 6
    np.testing.assert_allclose(np.asarray(heatmaps[4].z), result.attentions[1, 1])
    assert fig.layout.annotations[4].text.startswith("L2 H2")


def test_model_view_labels_its_tokens_where_they_fit_and_on_hover_always():
    result = _attention(layers=2, heads=2, seq=5)
    fig = figures.model_view_figure(result)
    layout = fig.layout.to_plotly_json()
    # Rows are labelled on the first column, columns on the bottom row, with the tokens themselves.
    assert layout["yaxis"]["showticklabels"] and not layout["yaxis2"]["showticklabels"]
    assert layout["xaxis3"]["showticklabels"] and not layout["xaxis"]["showticklabels"]
    assert list(layout["yaxis"]["ticktext"]) == result.tokens
    assert all("%{y} → %{x}" in t.hovertemplate for t in fig.data)
    long = AttentionResult(tokens=["t"] * 60, attentions=np.full((2, 2, 60, 60), 1 / 60, np.float32),
                           token_type_ids=[0] * 60, special_mask=[False] * 60)
    crowded = figures.model_view_figure(long).layout.to_plotly_json()
    assert not any(crowded[k].get("showticklabels") for k in crowded if k.startswith(("xaxis", "yaxis")))
    assert all("%{y} → %{x}" in t.hovertemplate for t in figures.model_view_figure(long).data)


def test_model_view_colour_scale_is_fixed_when_asked_and_the_largest_weight_otherwise():
    uniform = AttentionResult(tokens=["[CLS]", "a", "b", "[SEP]"], attentions=np.full((1, 2, 4, 4), 0.25, np.float32),
                              token_type_ids=[0] * 4, special_mask=[True, False, False, True])
    assert figures.model_view_figure(uniform).layout.coloraxis.cmax == pytest.approx(0.25)
    fixed = figures.model_view_figure(uniform, zmax=1.0).layout.coloraxis
    assert (fixed.cmin, fixed.cmax) == (0, 1.0)


def test_head_view_labels_keep_repeated_tokens_apart():
    result = _attention()
    fig = figures.head_view_figure(result, layer=1, head=2, label="self 60%")
    (hm,) = fig.data
    assert list(hm.x) == ["1:[CLS]", "2:the", "3:the", "4:cat", "5:[SEP]"]
    np.testing.assert_allclose(np.asarray(hm.z), result.attentions[1, 2])
    assert "Layer 2, head 3" in fig.layout.title.text and "self 60%" in fig.layout.title.text


def test_token_view_rows_are_every_head_for_one_token():
    result = _attention()
    fig = figures.token_view_figure(result, token_index=3, direction="from")
    z = np.asarray(fig.data[0].z)
    assert z.shape == (6, 5)
    np.testing.assert_allclose(z[5], result.attentions[1, 2, 3])
    to = np.asarray(figures.token_view_figure(result, 3, direction="to").data[0].z)
    np.testing.assert_allclose(to[0], result.attentions[0, 0, :, 3])


def test_head_summary_figure_grid_shows_the_chosen_measure():
    result = _attention()
    summaries = head_summaries(result)
    fig = figures.head_summary_figure(summaries, measure="self")
    z = np.asarray(fig.data[0].z)
    assert z.shape == (2, 3)
    assert z[1, 2] == pytest.approx(summaries[5].to_self)
    assert fig.data[0].text[1][2] == summaries[5].label


def test_loss_figure_draws_train_heldout_and_unigram_baseline():
    history = [_step(i, 10 - i * 0.1) for i in range(1, 21)]
    evals = [EvalEvent(step=0, mlm_loss=10.0, mlm_acc=0.0, perplexity=math.exp(10), nsp_acc=0.5),
             EvalEvent(step=20, mlm_loss=8.0, mlm_acc=0.1, perplexity=math.exp(8), nsp_acc=0.6)]
    fig = figures.loss_figure(history, evals, {"unigram": {"accuracy": 0.05, "perplexity": math.exp(6.5)}})
    names = [t.name for t in fig.data]
    assert names == ["total loss (train)", "MLM loss (train)", "NSP loss (train)", "MLM loss (held-out)",
                     "unigram baseline (MLM)"]
    assert list(fig.data[0].y) == [e.loss for e in history]
    assert list(fig.data[3].x) == [0, 20]
    # The baseline is named in the legend, across every step drawn, and no label lies on the curves.
    assert list(fig.data[4].x) == [0, 20] and list(fig.data[4].y) == pytest.approx([6.5, 6.5])
    assert not fig.layout.annotations
    acc = figures.accuracy_figure(history, evals, {"unigram": {"accuracy": 0.05}})
    assert acc.data[-1].name == "unigram baseline (MLM)" and list(acc.data[-1].y) == pytest.approx([0.05, 0.05])
    assert not acc.layout.annotations
    split = figures.decision_accuracy_figure(history)
    assert [t.name for t in split.data] == ["shown as [MASK]", "replaced by a random token", "kept unchanged"]


def test_live_charts_of_a_run_before_its_first_step_draw():
    """A viewer's Train page opened as the run starts: no step yet (the class benchmark met an AttributeError here
    once events were read by their declared fields)."""
    from bert_core.training.run_loop import EventLog

    log = EventLog([], [])
    log.baselines, log.config, log.growth = {}, SimpleNamespace(objective="mlm", changes=()), None
    assert list(figures.LiveCharts().figures(log, 0.6)) == list(figures.LiveCharts.NAMES)


def test_live_charts_are_built_once_per_new_data_and_smoothing_and_shared():
    """Twenty sessions watching one run draw the same four figures: one build until a step or evaluation arrives."""
    import gc

    from bert_core.training.run_loop import EventLog

    log = EventLog([_step(i, 10 - i * 0.1) for i in range(1, 21)],
                   [EvalEvent(step=0, mlm_loss=10.0, mlm_acc=0.0, perplexity=math.exp(10), nsp_acc=0.5)])
    # What a pretraining run's live view has beside its events (run_protocols.LiveView): a run that never grew.
    log.baselines, log.config, log.growth = {"unigram": {"accuracy": 0.05}}, SimpleNamespace(objective="mlm", changes=()), None
    charts = figures.LiveCharts(keep=2)
    first = charts.figures(log, 0.6)
    assert list(first) == list(figures.LiveCharts.NAMES) and charts.builds == 1
    for _ in range(20):
        assert charts.figures(log, 0.6) is first
    assert charts.builds == 1
    # Exactly what the page built before the cache, figure for figure, laid out clear of the toolbar as the page
    # draws every figure.
    direct = [figures.clear_of_toolbar(f) for f in (
        figures.loss_figure(log.history, log.evals, log.baselines, 0.6),
        figures.accuracy_figure(log.history, log.evals, log.baselines, 0.6),
        figures.decision_accuracy_figure(log.history, 0.6), figures.rate_figure(log.history))]
    assert [f.to_dict() for f in first.values()] == [f.to_dict() for f in direct]
    other = charts.figures(log, 0.0)                       # another session's smoothing: its own build
    assert other is not first and charts.builds == 2
    log._history.append(_step(21, 7.0))                   # a new step: everyone gets the new figures
    fresh = charts.figures(log, 0.6)
    assert fresh is not first and charts.builds == 3
    assert list(fresh["loss"].data[0].x)[-1] == 21
    assert len(charts._built[log]) == 2                    # keeps its latest `keep` builds per run
    del log, first, other, fresh, direct
    gc.collect()
    assert len(charts._built) == 0                         # a dropped run's figures go with it


def test_ema_is_tensorboards_debiased_moving_average():
    values = [4.0, 2.0, 6.0, 1.0]
    w = 0.6
    acc, expected = 0.0, []
    for t, v in enumerate(values, start=1):
        acc = w * acc + (1 - w) * v
        expected.append(acc / (1 - w**t))
    assert figures.ema(values, w) == pytest.approx(expected)
    assert figures.ema(values, w)[0] == pytest.approx(4.0)  # debiased: the first point is the first value
    assert figures.ema([3.0] * 50, 0.99) == pytest.approx([3.0] * 50)  # a constant stays put
    assert figures.ema(values, 0.0) == values
    with pytest.raises(ValueError, match="smoothing"):
        figures.ema(values, 1.0)


def test_smoothed_curves_keep_the_raw_values_faint_behind_and_leave_evaluations_alone():
    history = [_step(i, 10 - i * 0.1 + (0.5 if i % 2 else -0.5)) for i in range(1, 41)]
    evals = [EvalEvent(step=0, mlm_loss=10.0, mlm_acc=0.0, perplexity=math.exp(10), nsp_acc=0.5),
             EvalEvent(step=40, mlm_loss=8.0, mlm_acc=0.1, perplexity=math.exp(8), nsp_acc=0.6)]
    fig = figures.loss_figure(history, evals, smoothing=0.8)
    raw, smooth = fig.data[0], fig.data[1]
    assert raw.opacity == 0.25 and raw.showlegend is False and raw.legendgroup == smooth.legendgroup
    assert list(raw.y) == [e.loss for e in history]
    assert list(smooth.y) == pytest.approx(figures.ema([e.loss for e in history], 0.8))
    assert smooth.name == "total loss (train)"
    assert max(abs(a - b) for a, b in zip(smooth.y[11:], smooth.y[10:-1])) < 0.3  # the zigzag (1.0) is gone
    held_out = [t for t in fig.data if t.name == "MLM loss (held-out)"]
    assert len(held_out) == 1 and list(held_out[0].y) == [10.0, 8.0]
    for build in (lambda h, s: figures.accuracy_figure(h, smoothing=s), figures.decision_accuracy_figure):
        assert len(build(history, 0.5).data) == 2 * len(build(history, 0.0).data)


def test_smoothing_runs_over_every_step_before_thinning():
    history = [_step(i, float(i % 7)) for i in range(1, 10_001)]
    fig = figures.loss_figure(history, smoothing=0.9)
    smooth = fig.data[1]
    assert len(smooth.x) <= figures.MAX_POINTS + 1 and smooth.x[-1] == 10_000
    assert smooth.y[-1] == pytest.approx(figures.ema([e.loss for e in history], 0.9)[-1])


def test_long_histories_are_thinned_but_keep_the_last_step():
    history = [_step(i, 5.0) for i in range(1, 10_001)]
    fig = figures.loss_figure(history)
    xs = list(fig.data[0].x)
    assert len(xs) <= figures.MAX_POINTS + 1 and xs[-1] == 10_000 and xs[0] == 1


def test_topk_figure_has_model_and_baseline_bars():
    fig = figures.topk_figure([("cat", 0.5), ("dog", 0.2)], title="mask 1", baseline=[("the", 0.07)])
    assert list(fig.data[0].y) == ["cat", "dog"] and list(fig.data[0].x) == [0.5, 0.2]
    assert list(fig.data[1].y) == ["the"]


def test_topk_history_has_a_line_per_token_with_gaps_where_it_left_the_top_k():
    fig = figures.topk_history_figure([(0, [("the", 0.1), ("a", 0.05)]), (100, [("store", 0.4), ("the", 0.2)])])
    lines = {t.name: list(t.y) for t in fig.data}
    assert lines == {"store": [None, 0.4], "the": [0.1, 0.2], "a": [0.05, None]}
    assert [t.name for t in fig.data][:2] == ["store", "the"]  # where the model ended comes first


def test_topk_history_shows_few_candidates_in_distinct_colours_and_no_special_tokens():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    snaps = []
    for step in range(0, 2000, 100):  # 20 snapshots of 5 candidates each, 30+ tokens in all
        picks = rng.choice(words, 4, replace=False)
        snaps.append((step, [("[CLS]", 0.3)] + [(str(w), 0.2 - 0.03 * k) for k, w in enumerate(picks)]))
    fig = figures.topk_history_figure(snaps)
    names = [t.name for t in fig.data]
    assert 1 <= len(names) <= figures.HISTORY_CANDIDATES and "[CLS]" not in names
    top3 = {t for _, cands in snaps for t, _ in [c for c in cands if c[0] != "[CLS]"][:3]}
    assert set(names) <= top3
    assert names[:3] == [t for t, _ in snaps[-1][1][1:4]]  # the final guesses are always drawn
    colours = [t.line.color for t in fig.data]
    assert len(set(colours)) == len(colours)
    assert fig.layout.legend.orientation == "v"  # beside the plot: never on the x-axis title


def test_learning_rate_and_speed_each_get_their_own_axis():
    history = [_step(i, 5.0) for i in range(1, 50)]
    fig = figures.rate_figure(history)
    lr, speed = fig.data
    assert lr.name == "learning rate" and speed.name == "tokens / s"
    assert lr.yaxis != speed.yaxis and lr.xaxis != speed.xaxis
    assert fig.layout[speed.yaxis.replace("y", "yaxis")].overlaying is None


def test_line_chart_legends_sit_beside_the_plot():
    history = [_step(i, 5.0) for i in range(1, 30)]
    for fig in (figures.loss_figure(history), figures.accuracy_figure(history),
                figures.decision_accuracy_figure(history)):
        assert fig.layout.legend.orientation == "v" and fig.layout.legend.x >= 1


def test_masking_figure_colours_each_decision():
    rows = [MaskingRow(0, "[CLS]", 2, 0, "not chosen", "[CLS]", 2), MaskingRow(1, "cat", 7, 0, "[MASK]", "[MASK]", 4),
            MaskingRow(2, "sat", 8, 0, "random", "dog", 9), MaskingRow(3, "on", 10, 0, "kept", "on", 10)]
    fig = figures.masking_figure(rows)
    by_name = {t.name: t for t in fig.data}
    assert by_name["random"].text == ("sat<br>→dog",)
    assert by_name["[MASK]"].marker.color == figures.DECISION_COLORS["[MASK]"]
    assert by_name["kept"].text == ("on",)


def test_long_masking_labels_are_shortened_with_the_full_text_on_hover():
    rows = [MaskingRow(0, "watching", 7, 0, "[MASK]", "[MASK]", 4), MaskingRow(1, "##ness", 8, 0, "random",
                                                                              "elephants", 9)]
    by_name = {t.name: t for t in figures.masking_figure(rows).data}
    for trace in (by_name["[MASK]"], by_name["random"]):
        for line in trace.text[0].split("<br>"):
            assert len(line) <= figures.LABEL_CHARS, line
    assert "watching" in by_name["[MASK]"].hovertext[0] and "elephants" in by_name["random"].hovertext[0]
    assert figures.shorten("watching") == "watchi…"


def test_architecture_figure_shows_the_config_sizes():
    fig = figures.architecture_figure(BertConfig.preset("mini", vocab_size=8000))
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert "8000 x 256" in texts and "4 heads" in texts and "× 4" in texts and "256 → 1024 → 256" in texts


def test_architecture_figure_draws_a_causal_model_as_gpt_style_with_no_nsp():
    fig = figures.architecture_figure(BertConfig.preset("nano", vocab_size=300, attention="causal"))
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert "Causal self-attention" in texts and "next token" in texts and "NSP" not in texts
    assert "every token sees every token" not in texts and fig.layout.title.text.startswith("GPT-style")
    bert = " ".join(a.text for a in figures.architecture_figure(BertConfig.preset("nano", vocab_size=300))
                    .layout.annotations)
    assert "NSP head" in bert and "MLM head" in bert and "Causal" not in bert


def test_plotly_config_offers_image_download():
    cfg = figures.plotly_config("loss")
    assert cfg["toImageButtonOptions"]["filename"] == "loss"
    assert cfg["toImageButtonOptions"]["format"] in ("png", "svg")


def test_mistakes_table_puts_labels_and_confidence_before_the_text():
    from types import SimpleNamespace

    from bert_core.inspect.finetune_figures import mistakes_table

    wrong = [SimpleNamespace(text="a very long review " * 30, true_label="positive", predicted_label="negative",
                             confidence=0.934)]
    (row,) = mistakes_table(wrong)
    assert list(row) == ["true label", "predicted", "confidence", "text"]
    assert row["confidence"] == "93%" and len(row["text"]) <= 200 and row["text"].endswith("…")


def _words_of(fig) -> str:
    """Every text a reader sees on a figure: its title, axis titles, trace names and annotations."""
    layout = fig.layout
    texts = [str(layout.title.text or "")]
    texts += [str(getattr(getattr(layout, a), "title", None) and getattr(layout, a).title.text or "")
              for a in dir(layout) if a.startswith(("xaxis", "yaxis")) and getattr(layout, a, None) is not None]
    texts += [str(t.name or "") for t in fig.data] + [str(a.text or "") for a in layout.annotations or ()]
    return " | ".join(texts)


def test_a_gpt_runs_figures_are_named_next_token_never_masked_or_mlm():
    """Issue #29: a GPT run's loss and accuracy are next-token figures and say so; it has no NSP and no chart of
    masking decisions; a BERT's keep their masked-token names."""
    from bert_core.training.run_loop import EventLog

    history = [_step(i, 10 - i * 0.1) for i in range(1, 11)]
    evals = [EvalEvent(step=0, mlm_loss=10.0, mlm_acc=0.0, perplexity=math.exp(10), nsp_acc=None)]
    baselines = {"unigram": {"accuracy": 0.05, "loss": 7.0}}
    for fig in (figures.loss_figure(history, evals, baselines, 0.5, causal=True),
                figures.accuracy_figure(history, evals, baselines, 0.5, causal=True)):
        words = _words_of(fig)
        assert "next-token" in words and "next token" in words, words
        for wrong in ("MLM", "mlm", "masked", "NSP", "nsp"):
            assert wrong not in words, (wrong, words)
    assert "MLM accuracy (train)" in _words_of(figures.accuracy_figure(history, evals, baselines))

    class Config:
        objective, changes = "clm", ()

    log = EventLog(history, evals)
    log.baselines, log.config, log.growth = baselines, Config(), None
    assert list(figures.LiveCharts().figures(log, 0.0)) == ["loss", "accuracy", "learning-rate"]


def test_compared_bert_and_gpt_runs_are_drawn_apart_each_titled_by_what_it_measures():
    from bert_core.training.train_spec import TrainSpec

    bert, gpt = TrainSpec(train={"objective": "mlm"}), TrainSpec(train={"objective": "clm", "nsp": False})
    history = [[_step(i, 9 - i * 0.1) for i in range(1, 6)] for _ in range(2)]
    evals = [[EvalEvent(step=5, mlm_loss=8.0, mlm_acc=acc, perplexity=math.exp(8), nsp_acc=None)] for acc in (.2, .3)]
    fig = figures.overlay_figure([bert, gpt], history, evals, names=["bert", "gpt"])
    titles = [a.text for a in fig.layout.annotations]
    assert any(t.startswith("BERT runs: held-out masked-token") for t in titles), titles
    assert any(t.startswith("GPT runs: held-out next-token") for t in titles), titles
    rows = ({t.yaxis for t in fig.data if t.legendgroup.startswith("bert")},
            {t.yaxis for t in fig.data if t.legendgroup.startswith("gpt")})
    assert rows[0] and rows[1] and not rows[0] & rows[1], "a GPT's figures never share a BERT's axes"
    one_kind = figures.overlay_figure([bert, bert], history, evals, names=["a", "b"])
    assert len([a for a in one_kind.layout.annotations if a.text.startswith("BERT runs")]) == 2


def test_probability_axes_fit_their_values_and_drawings_carry_no_zoom_controls():
    """Issue #29: [MASK] bars of 1 to 6% fill their axis instead of sitting as slivers on 0-100%; the guesses'
    history uses its axis; the architecture drawing offers the download but no zoom or pan."""
    bars = figures.topk_figure([("the", 0.06), ("a", 0.03), ("cat", 0.01)], baseline=[("the", 0.05)])
    low, high = bars.layout.xaxis.range
    assert low == 0 and 0.06 < high <= 0.08 and tuple(bars.layout.xaxis2.range) == (low, high)
    history = figures.topk_history_figure([(0, [("the", 0.02)]), (10, [("the", 0.04), ("cat", 0.03)])])
    assert history.layout.yaxis.range[1] == pytest.approx(0.05)
    assert figures.topk_figure([("cat", 0.9)]).layout.xaxis.range[1] == 1.0
    still = figures.plotly_config("bert-architecture")
    assert "zoom2d" in still["modeBarButtonsToRemove"] and still["toImageButtonOptions"]["filename"]
    assert "modeBarButtonsToRemove" not in figures.plotly_config("loss")


def test_a_title_sits_under_the_toolbar_and_the_plot_keeps_its_height():
    fig = figures.loss_figure([], [], None)
    top, height = fig.layout.margin.t, fig.layout.height
    figures.clear_of_toolbar(fig)
    assert fig.layout.title.pad.t == figures.TOOLBAR_PX and fig.layout.title.yref == "container"
    assert fig.layout.margin.t >= figures.TOOLBAR_PX + figures.TITLE_PX
    assert fig.layout.height - fig.layout.margin.t == height - top       # the plot area is as tall as before
    again = (fig.layout.margin.t, fig.layout.height)
    assert (figures.clear_of_toolbar(fig).layout.margin.t, fig.layout.height) == again   # idempotent


@pytest.mark.parametrize("as_records", [False, True])
def test_live_charts_traces_are_what_plotlys_validation_makes_of_them(as_records):
    """The live charts' lines are taken as plain dicts, unchecked (figures._plain_figure: validating them was most of
    rebuilding the charts at each new step, issue 74): Plotly's validation of the same figure changes nothing, for a
    live run's events and for a record read back from JSON (dicts, a field a later version added missing)."""
    import dataclasses

    history = [_step(i, 10 - i * 0.01) for i in range(1, 700)]
    history[5] = dataclasses.replace(history[5], nsp_loss=float("nan"))
    evals = [EvalEvent(step=s, mlm_loss=8.0, mlm_acc=0.1, perplexity=math.exp(8), nsp_acc=0.6) for s in (0, 300, 600)]
    if as_records:
        history = [{k: v for k, v in dataclasses.asdict(e).items() if k != "mlm_acc_kept"} for e in history]
        evals = [dataclasses.asdict(e) for e in evals]
    baselines = {"unigram": {"accuracy": 0.05, "perplexity": math.exp(6.5)}}
    built = [figures.loss_figure(history, evals, baselines, 0.9), figures.accuracy_figure(history, evals, baselines),
             figures.decision_accuracy_figure(history, 0.6), figures.rate_figure(history),
             figures.loss_figure(history, evals, baselines, 0.9, causal=True)]
    for fig in built:
        raw = fig.to_dict()
        assert go.Figure(raw).to_dict() == raw
        assert all(v is not None for trace in raw["data"] for v in trace.values())
    assert len(built[0].data[0].x) <= figures.MAX_POINTS + 1 and built[0].data[0].x[-1] == 699
    assert 6 not in built[0].data[4].x                      # the NaN step is left out of the NSP line only
    assert [t.name for t in built[2].data][1::2] == ["shown as [MASK]", "replaced by a random token"] + (
        [] if as_records else ["kept unchanged"])


def test_a_plain_figure_checks_what_is_set_on_it_afterwards():
    fig = figures._plain_figure([dict(type="scatter", x=[1, 2], y=[3.0, 4.0], mode="lines", name="a",
                                      line={"color": "#1f77b4"})])
    with pytest.raises(ValueError):
        fig.data[0].line.color = "not a colour"
    with pytest.raises(ValueError):
        fig.update_layout(no_such_property=1)
    fig.update_layout(title="t")
    assert fig.to_dict()["layout"]["title"] == {"text": "t"}


def test_a_change_is_named_on_the_plot_side_of_its_line():
    """A change made at the run's latest step is named to the left of its line (to its right, the name ran off the
    plot over the legend); one early in the run, to the right."""
    config = SimpleNamespace(changes=((90, "learning_rate", 5e-4),), learning_rate=3e-3)
    for last, anchor in ((100, "right"), (400, "left")):
        (note,) = figures.mark_changes(go.Figure(go.Scatter(x=[0, last], y=[0, 1])), config, last).layout.annotations
        assert note.xanchor == anchor and note.x == 90 and "at step 90" in note.text, (last, note)


BELOW_LEGEND = ("masking", "runs compared", "tokens", "guesses", "scores", "heads off", "word map", "layer probes",
                "salience", "syntax heads")


def _below_legend_figure(name: str) -> go.Figure:
    """A figure whose legend is below its plot (BELOW_LEGEND), at a small size: one line of masking, four tokens, a
    guess, two layers to probe, a short sentence's salience, one relation, two runs compared."""
    from bert_core.inspect import computation_figures as cf
    from bert_core.inspect import lesson_figures, salience, syntax_heads
    from bert_core.inspect.inspection import ChosenGuess
    from bert_core.training.train_spec import TrainSpec

    rows = [MaskingRow(0, "[CLS]", 2, 0, "not chosen", "[CLS]", 2), MaskingRow(1, "cat", 7, 0, "[MASK]", "[MASK]", 4)]
    guesses = [ChosenGuess(position=1, token="cat", shown="[MASK]", decision="[MASK]", guess="dog",
                           guess_probability=0.2, original_probability=0.1)]
    tokens = ["[CLS]", "a", "cat", "[SEP]"]
    steps = SimpleNamespace(tokens=tokens, allowed=np.array([True, True, False, False]), head_dim=16, causal=True,
                            scores=np.arange(4.0), scaled=np.arange(4.0) / 4, probs=np.array([.2, .8, 0, 0]),
                            query=1, layer=0, head=0)
    task = SimpleNamespace(task="chunk", tags=3, accuracy=np.array([.5, .6]), random_model=np.array([.4, .4]),
                           control=np.array([.3, .3]), selectivity=np.array([.2, .3]))
    wmap = SimpleNamespace(word="bank", points=np.random.default_rng(0).random((2, 3, 2)), explained=np.ones(2),
                           labels=["river", "money", "money"], sentences=["a", "b", "c"])
    explained = SimpleNamespace(tokens=tokens, answer="label 1", saliences=[SimpleNamespace(
        target=SimpleNamespace(name="P(label 1)"), integrated=np.ones(4), gradient_x_input=np.ones(4))])
    found = SimpleNamespace(relations=["det"], counts=np.array([5]), words=5, sentences=1,
                            overall=np.array([[0.6, 0.2]]), accuracy=np.array([[[0.6], [0.2]]]),
                            offset_overall=np.array([0.1, 0.4]), baseline=np.array([0.4]), baseline_offset=[-1],
                            best_head=lambda r: (0, 0), beats_baseline=lambda r: True)
    history = [[_step(i, 9 - i * 0.1) for i in range(1, 6)] for _ in range(2)]
    evals = [[EvalEvent(step=5, mlm_loss=8.0, mlm_acc=acc, perplexity=math.exp(8), nsp_acc=None)] for acc in (.2, .3)]
    build = {
        "masking": lambda: figures.masking_figure(rows),
        "runs compared": lambda: figures.overlay_figure([TrainSpec(), TrainSpec()], history, evals, names=["a", "b"]),
        "tokens": lambda: lesson_figures.tokens_figure(tokens, [0] * 4),
        "guesses": lambda: lesson_figures.guesses_figure(guesses),
        "scores": lambda: cf.scores_figure(steps, 2.0, np.array([.4, .6, 0, 0])),
        "heads off": lambda: cf.heads_off_figure(SimpleNamespace(before=[("dog", .3)], after=[("cat", .2)],
                                                                 heads=[(0, 1)])),
        "word map": lambda: cf.word_map_figure(wmap),
        "layer probes": lambda: cf.layer_probes_figure(SimpleNamespace(tasks=[task], test_words=30)),
        "salience": lambda: salience.salience_figure(explained),
        "syntax heads": lambda: syntax_heads.syntax_heads_figure(found)}
    return build[name]()


@pytest.mark.parametrize("name", BELOW_LEGEND)
def test_a_legend_below_sits_at_the_figures_foot_under_the_axis_title(name):
    """A legend placed at a share of the plot's height (y=-0.12) lay over a short plot's tick labels and axis
    title: it is anchored to the figure's foot instead, the bottom margin holding the labels, title and legend."""
    fig = _below_legend_figure(name)
    legend = fig.layout.legend
    assert (legend.orientation, legend.yref, legend.y, legend.yanchor) == ("h", "container", 0, "bottom"), name
    shown = [t for t in fig.data if t.showlegend is not False and t.name]
    ticks = [a for a in fig.select_xaxes() if a.visible is not False and a.showticklabels is not False]
    need = (figures.TICK_LABELS_PX if ticks else 0) + (figures.AXIS_TITLE_PX if any(a.title.text for a in ticks)
                                                        else 0) + (figures.LEGEND_ROW_PX if len(shown) > 1 else 0)
    assert fig.layout.margin.b >= need, (name, fig.layout.margin.b, need)


def test_a_legend_below_grows_the_figure_not_shrinks_the_plot():
    fig = go.Figure([go.Bar(x=[1, 2], y=["a", "b"], orientation="h", name=n) for n in ("one", "two")])
    fig.update_xaxes(title="probability")
    figures._layout(fig, "short", height=200, legend="below")
    room = figures.TICK_LABELS_PX + figures.AXIS_TITLE_PX + figures.LEGEND_ROW_PX
    assert fig.layout.margin.b == room and fig.layout.height - fig.layout.margin.t - fig.layout.margin.b == 200 - 100
    many = go.Figure([go.Scatter(x=[0], y=[0], name=f"a long name for a run, number {i}") for i in range(12)])
    assert figures._layout(many, "many", legend="below").layout.margin.b >= 2 * figures.LEGEND_ROW_PX  # two rows
    beside = figures._layout(go.Figure([go.Scatter(x=[0], y=[0], name=n) for n in "ab"]), "right", height=200)
    assert (beside.layout.height, beside.layout.margin.b) == (200, figures.BOTTOM_PX)
    # An axis title given to _layout itself counts as one set before it.
    named = go.Figure([go.Bar(x=[1, 2], y=["a", "b"], orientation="h", name=n) for n in ("one", "two")])
    figures._layout(named, "short", height=200, legend="below", xaxis=dict(title="probability"))
    assert named.layout.margin.b == room
