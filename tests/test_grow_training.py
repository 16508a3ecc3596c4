"""Start small, then grow (TrainConfig.grow_fraction): a run trains a 2 x 64 model first, grows it to its own size at
the fraction asked for (bert_core.model.growth), and trains on with a new optimizer after a new warmup; it resumes
exactly on either side of the growth, the CLI and the page say so, and the larger sizes take it on a CPU."""

import json

import pytest
import torch

from bert_core.cli.main import main
from bert_core.errors import BertCoreError
from bert_core.inspect.figures import loss_figure, mark_growth
from bert_core.model.files import read_json
from bert_core.model.config import BertConfig
from bert_core.training.evaluation import evaluate
from bert_core.training.recipes import GROW_FROM, recipe_for, seed_learning_rate
from bert_core.training.run_builder import RunPlan, build_run, resume_run
from bert_core.training.pretraining_events import GrowthEvent, StepEvent
from bert_core.training.train_config import TrainConfig
from tests.test_bad_input import assert_one_error_line, run_cli

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out


def _plan(steps=10, grow=0.5, preset="mini", **changes):
    config = TrainConfig(max_steps=steps, batch_size=4, max_seq_length=32, learning_rate=1e-3, eval_batches=2,
                         grow_fraction=grow, grow_from_hidden=64, grow_from_layers=2, device="cpu", **changes)
    return RunPlan(corpora=("toy",), config=config, preset=preset, vocab_size=300,
                   model_overrides={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
                                    "initializer_range": 0.05})


def _sizes(model):
    c = model.config
    return c.num_hidden_layers, c.hidden_size, c.num_attention_heads


def test_a_run_starts_as_two_by_64_and_grows_to_its_size_at_the_fraction_with_a_new_warmup():
    events = []
    run = build_run(_plan(steps=10, grow=0.6), callbacks=[events.append])
    trainer = run.trainer
    assert _sizes(trainer.model) == (2, 64, 1) and trainer.growth_pending()
    assert trainer.model.config.initializer_range == 0.1   # the width rule's std for 64, from mini's 0.05
    trainer.run()
    assert trainer.state == "finished", trainer.error
    assert _sizes(trainer.model) == (4, 256, 4) and not trainer.growth_pending()
    grown = [e for e in events if isinstance(e, GrowthEvent)]
    assert len(grown) == 1 and grown[0].step == 6 and grown[0].from_size == (2, 64) and grown[0].to_size == (4, 256)
    assert BertConfig.from_hf_dict(grown[0].model_config) == trainer.model.config
    assert trainer.growth == {"step": 6, "fraction": 0.6, "from_size": [2, 64], "to_size": [4, 256]}
    # The optimizer is the grown model's, and each stage warms up from near zero to its own peak.
    assert {id(p) for g in trainer.optimizer.param_groups for p in g["params"]} == \
        {id(p) for p in trainer.model.parameters()}
    lrs = [e.lr for e in events if isinstance(e, StepEvent)]
    seed_peak = seed_learning_rate(1e-3, 256, 4, 64, 2)
    assert seed_peak == 2e-3 and max(lrs[:6]) <= seed_peak and max(lrs[6:]) <= 1e-3
    assert lrs[6] < lrs[5] or lrs[6] < 0.5e-3   # the grown model starts its warmup again
    assert all(torch.isfinite(torch.tensor([e.loss for e in events if isinstance(e, StepEvent)])))


def test_growing_in_width_keeps_what_the_small_model_computes():
    """2 x 64 -> 2 x 128 (width only: Net2Net copies) scores the held-out batches the same just after growing."""
    seen = {}
    run = build_run(_plan(steps=6, grow=0.5, preset="tiny"))
    trainer = run.trainer

    # In fp32: growing keeps the function exactly, but bf16 autocast (a CPU with bfloat16 instructions) rounds a
    # 64-wide and a 128-wide sum differently, 2e-4 apart on an Intel Xeon with AMX.
    def score(event):
        if isinstance(event, StepEvent) and event.step == 3:
            seen["before"] = evaluate(trainer.model, trainer.heldout_batches(), precision="fp32").mlm_loss
        if isinstance(event, GrowthEvent):
            seen["after"] = evaluate(trainer.model, trainer.heldout_batches(), precision="fp32").mlm_loss
    trainer.callbacks.append(score)
    trainer.run()
    assert _sizes(trainer.model) == (2, 128, 2)
    assert seen["after"] == pytest.approx(seen["before"], rel=1e-4)


@pytest.mark.parametrize("stop_at", [3, 7])   # before and after the growth at step 5
def test_a_run_resumed_on_either_side_of_its_growth_ends_as_one_run_would(tmp_path, stop_at):
    whole = build_run(_plan(steps=10, grow=0.5)).trainer
    whole.run()

    folder = tmp_path / "run"
    first = build_run(_plan(steps=10, grow=0.5), checkpoint_dir=folder).trainer   # stopped, saved at `stop_at`
    first.callbacks.append(lambda e: first.stop() if isinstance(e, StepEvent) and e.step == stop_at else None)
    first.run()
    assert first.state == "stopped" and first.step == stop_at
    state = read_json(folder / "trainer_state.json")
    assert (state["growth"]["grown"] or {}).get("step") == (None if stop_at < 5 else 5)
    assert BertConfig.load(folder).hidden_size == (64 if stop_at < 5 else 256)

    resumed = resume_run(folder, state, TrainConfig.from_dict(state["train_config"]), {},
                         first.tokenizer).trainer
    events = []
    resumed.callbacks.append(events.append)
    resumed.run()
    assert resumed.state == "finished" and resumed.growth == whole.growth
    assert len([e for e in events if isinstance(e, GrowthEvent)]) == (1 if stop_at < 5 else 0)
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)


def test_the_larger_sizes_grow_on_a_cpu_only():
    for preset in ("mini", "small", "medium", "base"):
        r = recipe_for(preset)
        assert 0.5 <= r.grow_fraction < 1 and (r.grow_from_hidden, r.grow_from_layers) == GROW_FROM
        assert "starts as 2 layers x 64" in r.describe()
        BertConfig.preset(preset).growth_start(*GROW_FROM)   # each divides into the start size
        assert recipe_for(preset, device="cuda").grow_fraction == 0
    for preset in ("nano", "tiny"):
        assert recipe_for(preset).grow_fraction == 0
    assert recipe_for("mini", hidden_size=256, num_hidden_layers=4).grow_fraction == 0   # a custom size
    with pytest.raises(BertCoreError, match="heads keep their size"):
        BertConfig.preset("mini", num_attention_heads=2).growth_start(64, 2)
    with pytest.raises(BertCoreError, match="nothing to grow"):
        BertConfig.preset("nano").growth_start(64, 2)


def test_train_logs_the_growth_and_records_it(tmp_path, toy_file, capsys):
    out = tmp_path / "mini"
    assert main(["train", "--corpus", str(toy_file), "--vocab-size", "300", "--preset", "mini", "--steps", "5",
                 "--batch-size", "4", "--seq-len", "32", "--eval-batches", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "starts as 2 x 64 and grows after 70% of the run" in err and "starting as 2 x 64" in err
    assert "grew from 2 x 64 to 4 x 256 at step 4" in err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["growth"]["step"] == 4 and BertConfig.load(out).hidden_size == 256
    assert main(["train", "--corpus", str(toy_file), "--vocab-size", "300", "--preset", "mini", "--steps", "2",
                 "--batch-size", "4", "--seq-len", "32", "--eval-batches", "1", "--grow-fraction", "0",
                 "--out", str(tmp_path / "whole")]) == 0
    assert "grew" not in capsys.readouterr().err
    assert json.loads((tmp_path / "whole" / "metrics.json").read_text())["growth"] is None


def test_a_warm_start_cannot_grow_in_one_error_line(tmp_path, toy_file, capsys):
    start = tmp_path / "start"
    assert main(["train", "--corpus", str(toy_file), "--vocab-size", "300", "--steps", "1", "--batch-size", "4",
                 "--eval-batches", "1", "--out", str(start)]) == 0
    capsys.readouterr()
    code, err = run_cli(["train", "--corpus", str(toy_file), "--init-from", str(start), "--steps", "2",
                         "--grow-fraction", "0.5", "--out", str(tmp_path / "next")], capsys)
    assert_one_error_line(code, err, ["--grow-fraction"])


def test_a_start_size_for_a_run_that_does_not_grow_is_one_error_line(tmp_path, toy_file, capsys):
    """tiny's recipe does not grow: a start size alone would be ignored, so it is refused before anything is
    written; with a growth fraction the same start size is taken."""
    out = tmp_path / "tiny"
    code, err = run_cli(["train", "--corpus", str(toy_file), "--preset", "tiny", "--steps", "1",
                         "--grow-from-hidden", "64", "--out", str(out)], capsys)
    assert_one_error_line(code, err, ["--grow-from-hidden", "--grow-fraction", "tiny recipe"])
    assert not out.exists()
    code, err = run_cli(["train", "--corpus", str(toy_file), "--preset", "mini", "--steps", "1",
                         "--grow-fraction", "0", "--grow-from-layers", "2", "--out", str(out)], capsys)
    assert_one_error_line(code, err, ["--grow-from-layers", "--grow-fraction 0 trains at full size"])
    assert main(["train", "--corpus", str(toy_file), "--vocab-size", "300", "--preset", "tiny", "--steps", "2",
                 "--batch-size", "4", "--seq-len", "32", "--eval-batches", "1", "--grow-fraction", "0.5",
                 "--grow-from-hidden", "64", "--out", str(out)]) == 0
    assert "grew from 2 x 64 to 2 x 128" in capsys.readouterr().err


def test_the_loss_chart_marks_the_step_the_run_grew_at():
    fig = mark_growth(loss_figure([]), {"step": 120, "fraction": 0.6, "from_size": [2, 64], "to_size": [4, 256]})
    assert any(a.text == "grown 2x64 → 4x256" for a in fig.layout.annotations)
    assert [s.x0 for s in fig.layout.shapes] == [120]
    assert not mark_growth(loss_figure([]), None).layout.shapes


def test_the_page_spec_grows_from_the_recipes_start_size_and_says_the_command():
    from bert_core.training.train_spec import page_spec, page_values
    from bert_core.training.comparison import train_command

    values = page_values("wikitext-2", "mini")
    assert values["train_grow"] > 0
    spec = page_spec(values, ("wikitext-2", "wikitext-2"))
    config = spec.train_config()
    assert (config.grow_from_hidden, config.grow_from_layers) == GROW_FROM and config.grow_fraction == \
        values["train_grow"]
    command = train_command(spec)
    assert "--grow-fraction" in command or config.grow_fraction == recipe_for("mini").grow_fraction
    off = page_spec({**values, "train_grow": 0.0}, ("wikitext-2", "wikitext-2"))
    assert off.train_config().grow_fraction == 0 and "--grow-fraction 0" in train_command(off)
    custom = {**values, "train_preset": "custom", "train_hidden": 96, "train_layers": 2, "train_heads": 2,
              "train_ffn": 384}
    with pytest.raises(BertCoreError, match="Start small, then grow"):
        page_spec(custom, ("wikitext-2", "wikitext-2"))


def test_the_servers_view_of_a_run_follows_its_growth():
    from bert_core.serve.training_mirrors import TrainerProxy

    small = BertConfig.preset("mini", vocab_size=300).growth_start(64, 2)
    proxy = TrainerProxy({"config": TrainConfig(), "model_config": small, "tokenizer": None, "metadata": {},
                          "baselines": {}, "probes": None, "step": 0, "history": [], "evals": []})
    big = BertConfig.preset("mini", vocab_size=300)
    proxy._receive(GrowthEvent(step=4, fraction=0.6, from_size=(2, 64), to_size=(4, 256),
                               model_config=big.to_hf_dict()), None)
    assert proxy.model_config == big and proxy.growth["step"] == 4


def test_step_once_at_the_growth_shows_the_grown_models_update():
    from bert_core.inspect.training_step import take_one_step

    trainer = build_run(_plan(steps=4, grow=0.5)).trainer
    records = [take_one_step(trainer) for _ in range(3)]
    assert _sizes(trainer.model) == (4, 256, 4) and trainer.growth["step"] == 2
    grown = records[2]
    assert grown.changes and grown.changed_weights > 0
    assert grown.total_weights == sum(p.numel() for p in trainer.model.parameters())


def test_a_size_that_cannot_grow_is_one_error_line_and_writes_nothing(tmp_path, toy_file, capsys):
    for extra, words in ((["--preset", "nano", "--grow-fraction", "0.5"], ["nothing to grow"]),
                         (["--preset", "mini", "--grow-fraction", "0.5", "--grow-from-hidden", "96"],
                          ["grows from a size that divides it"])):
        out = tmp_path / "never"
        code, err = run_cli(["train", "--corpus", str(toy_file), "--steps", "2", *extra, "--out", str(out)], capsys)
        assert_one_error_line(code, err, words)
        assert not out.exists()


def test_trying_a_size_that_cannot_grow_from_a_growing_run_trains_it_whole():
    from bert_core.training.train_spec import page_spec, page_values, validate_spec
    from bert_core.training.comparison import one_change

    values = page_values("wikitext-2", "mini")
    spec = page_spec(values, ("wikitext-2", "wikitext-2"))
    nano = one_change(spec, "model_size", "nano")
    validate_spec(nano)
    assert nano.preset == "nano" and nano.train["grow_fraction"] == 0
    small = one_change(spec, "model_size", (4, 512, 8, 2048))   # small's sizes: it grows from 2 x 64 as mini did
    assert small.train["grow_fraction"] == spec.train["grow_fraction"]
