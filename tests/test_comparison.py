"""One knob at a time (bert_core.training.comparison): what differs between two runs, a copy with one knob changed, the
overlay's legend, and the `train` command that repeats an app run."""

import dataclasses
import json
import random
import shlex

import pytest
import torch

from bert_core.data.pretraining_data import KEPT, MASKED, NOT_CHOSEN, RANDOM, mask_tokens
from bert_core.errors import BertCoreError
from bert_core.serve.jobs import TrainSpec, build_trainer
from bert_core.training import comparison
from bert_core.training.comparison import (
    KNOBS,
    knob_diff,
    one_change,
    other_differences,
    train_command,
)


def page_spec(**train) -> TrainSpec:
    """The Train page's default run (`jobs.page_spec` on the page's defaults; tests/test_run_builder.py checks it)."""
    settings = dict(max_steps=2000, batch_size=16, learning_rate=3e-3, max_seq_length=32, mask_rate=0.15, nsp=True,
                    seed=0, eval_every=100, probe_every=100, eval_batches=20, device="cpu")
    return TrainSpec(corpus="toy", corpus_label="toy", vocab_size=2000, preset="nano",
                     model_overrides=dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                          initializer_range=0.02),
                     train={**settings, **train}, probes=True)


def _random_value(knob: str, current, rng: random.Random):
    """A valid value of a knob other than `current`, drawn at random (beyond the suggested ones)."""
    if knob in ("nsp", "mask_only", "whole_word_masking"):
        return not current
    if knob == "mask_rate":
        return round(rng.uniform(0.01, 0.6), 3)
    if knob == "learning_rate":
        return float(f"{10 ** rng.uniform(-5, -1):.2g}")
    if knob == "model_size":
        return rng.choice([p for p in ("nano", "tiny", "mini", "small") if p != current] + [(3, 96, 4, 200)])
    if knob == "corpus":
        return rng.choice(["tinyshakespeare", "wikitext-2", "brown", "/data/my text.txt"])
    if knob == "attention":
        return "causal" if current == "bidirectional" else "bidirectional"
    raise AssertionError(knob)


def test_one_change_differs_in_exactly_that_knob_for_every_knob_and_many_values():
    rng = random.Random(0)
    assert set(KNOBS) >= {"nsp", "mask_rate", "mask_only", "whole_word_masking", "model_size",
                                      "learning_rate", "corpus"}
    start_points = [page_spec(), page_spec(nsp=False, mask_rate=0.3, learning_rate=1e-3),
                    dataclasses.replace(page_spec(), preset="tiny")]
    tried = 0
    for spec in start_points:
        before = json.dumps(dataclasses.asdict(spec), sort_keys=True)
        for knob in KNOBS:
            values = [c.after for c in comparison.suggested_changes(spec) if c.knob == knob]
            values += [_random_value(knob, KNOBS[knob].get(spec), rng) for _ in range(3)]
            for value in values:
                if KNOBS[knob].parse(value) == KNOBS[knob].get(spec):
                    continue
                new = one_change(spec, knob, value)
                changed = {c.knob for c in knob_diff(spec, new)}
                # causal attention is GPT's objective, which has no NSP (comparison.IMPLIED)
                implied = comparison.IMPLIED.get(knob, set()) & changed
                assert changed == {knob} | implied, (knob, value, changed)
                assert other_differences(spec, new) == [], (knob, value)
                assert KNOBS[knob].get(new) == KNOBS[knob].parse(value)
                tried += 1
        assert json.dumps(dataclasses.asdict(spec), sort_keys=True) == before  # the original is left as it was
    assert tried >= 60


def test_knob_diff_labels_say_what_changed_and_ignore_settings_that_are_not_knobs():
    a = page_spec()
    b = one_change(one_change(a, "mask_rate", 0.4), "nsp", False)
    assert [c.label for c in knob_diff(a, b)] == ["NSP on → off", "mask rate 0.15 → 0.4"]
    assert knob_diff(a, a) == [] and knob_diff(a, page_spec(seed=1)) == []
    assert other_differences(a, page_spec(seed=1, max_steps=300)) == ["steps 2000 → 300", "seed 0 → 1"]
    assert [c.label for c in knob_diff(a, one_change(a, "mask_only", True))] == ["masking 80/10/10 → [MASK] only"]
    assert [c.label for c in knob_diff(a, one_change(a, "model_size", "tiny"))] == ["model size nano → tiny"]
    # The Train page's custom sizes equal to a preset's are that preset, not a change.
    custom = dataclasses.replace(a, model_overrides={**a.model_overrides, "num_hidden_layers": 2, "hidden_size": 64,
                                                     "num_attention_heads": 2, "intermediate_size": 256})
    assert knob_diff(a, custom) == []


def test_one_change_refuses_bad_knobs_and_values_with_a_message():
    spec = page_spec()
    for knob, value, words in [("dropout", 0.1, "unknown knob"), ("mask_rate", 1.5, "below 1"),
                               ("mask_rate", "lots", "must be a number"), ("learning_rate", -1, "above 0"),
                               ("nsp", True, "already on"), ("model_size", "huge", "preset"),
                               ("model_size", (2, 100, 3, 400), "divisible"), ("nsp", "maybe", "on or off"),
                               ("corpus", " ", "corpus must be")]:
        with pytest.raises(BertCoreError, match=words):
            one_change(spec, knob, value)


def test_an_overlay_of_two_runs_names_exactly_the_knobs_that_differ():
    from bert_core.inspect.figures import overlay_figure
    from bert_core.training.pretraining_events import EvalEvent

    a = page_spec()
    b = one_change(a, "nsp", False)
    c = one_change(a, "mask_rate", 0.4)
    evals = [[EvalEvent(step=s, mlm_loss=5 - s / 100, mlm_acc=s / 400, perplexity=1.0, nsp_acc=None)
              for s in (0, 100, 200)] for _ in range(3)]
    history = [[{"step": s, "mlm_loss": 5 - s / 100} for s in range(1, 201)] for _ in range(3)]
    fig = overlay_figure([a, b], history[:2], evals[:2], smoothing=0.5)
    names = {t.name for t in fig.data if t.showlegend is not False}
    assert names == {"reference (NSP on)", "NSP on → off"}
    three = overlay_figure([a, b, c], history, evals, names=["base", "", "more masking"])
    legend = [t.name for t in three.data if t.showlegend is not False]
    assert legend == ["base: reference (NSP on, mask rate 0.15)", "NSP on → off", "more masking: mask rate 0.15 → 0.4"]
    assert len({t.line.color for t in three.data if t.mode != "markers"}) == 3  # one colour per run
    with pytest.raises(ValueError, match="1 to 4 runs"):
        overlay_figure([a] * 5, history[:1] * 5, evals[:1] * 5)


def test_mask_only_masking_never_emits_random_or_kept_tokens_and_chooses_the_same_positions():
    ids = torch.randint(5, 300, (64, 40), generator=torch.Generator().manual_seed(0))
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    paper = mask_tokens(ids, special, torch.Generator().manual_seed(1), 300, 4, mask_rate=0.3)
    only = mask_tokens(ids, special, torch.Generator().manual_seed(1), 300, 4, mask_rate=0.3, mask_only=True)
    assert {int(v) for v in only.decisions.unique()} == {NOT_CHOSEN, MASKED}
    assert not ((only.decisions == RANDOM) | (only.decisions == KEPT)).any()
    assert ((paper.decisions != NOT_CHOSEN) == (only.decisions != NOT_CHOSEN)).all()
    assert ((paper.decisions == RANDOM).any() and (paper.decisions == KEPT).any())  # 80/10/10 does emit them
    assert (only.input_ids[only.decisions == MASKED] == 4).all()
    assert torch.equal(only.mlm_labels, paper.mlm_labels)


def test_the_command_names_every_setting_the_train_page_sets():
    spec = page_spec()
    args = shlex.split(train_command(spec, out="runs/x"))
    assert args[:4] == ["python", "-m", "bert_core", "train"]
    given = dict(zip(args[4::1], args[5::1]))
    for flag, value in {"--corpus": "toy", "--vocab-size": "2000", "--preset": "nano", "--dropout": "0",
                        "--initializer-range": "0.02", "--steps": "2000", "--batch-size": "16", "--lr": "0.003",
                        "--seq-len": "32", "--mask-rate": "0.15", "--seed": "0", "--eval-every": "100",
                        "--device": "cpu", "--out": "runs/x"}.items():
        assert given.get(flag) == value, flag
    assert "--nsp" in args and "--mask-only" not in args and "--whole-word-masking" not in args
    custom = dataclasses.replace(spec, model_overrides={**spec.model_overrides, "num_hidden_layers": 3,
                                                        "hidden_size": 48, "num_attention_heads": 3,
                                                        "intermediate_size": 96})
    for flag in ("--layers 3", "--hidden-size 48", "--heads 3", "--intermediate-size 96"):
        assert flag in train_command(custom)
    pasted = dataclasses.replace(spec, corpus="/tmp/scratch/abc/corpus.txt", corpus_label="pasted text")
    assert "--corpus pasted-text.txt" in train_command(pasted) and "/tmp/scratch" not in train_command(pasted)
    assert "--corpus 'my file.txt'" in train_command(pasted, corpus="my file.txt")
    with pytest.raises(BertCoreError, match="no `train` option for adam_eps"):
        train_command(page_spec(adam_eps=1e-8))


@pytest.mark.parametrize("knob, value", [("whole_word_masking", True), ("attention", "causal")])
def test_the_command_run_by_the_cli_reproduces_an_app_run(tmp_path, capsys, knob, value):
    """Same settings, same seed: the app's build_trainer and `train` build the same data and initial weights and
    take the same updates, so the held-out accuracy agrees to float precision (not just within seed noise)."""
    from bert_core.cli.main import main
    from bert_core.model.checkpoint import load_checkpoint

    text = tmp_path / "stories.txt"
    from bert_core.data.corpora import generate_toy_corpus

    text.write_text("\n\n".join("\n".join(d) for d in generate_toy_corpus(num_documents=80, seed=3).documents))
    spec = dataclasses.replace(page_spec(max_steps=30, batch_size=8, eval_every=15, eval_batches=3, probe_every=15,
                                         learning_rate=5e-3, mask_rate=0.2),
                               corpus=str(text), corpus_label="stories.txt", vocab_size=300, probes=False)
    if knob not in KNOBS:
        pytest.skip(f"no {knob} knob in this version")
    spec = one_change(spec, knob, value)
    trainer = build_trainer(spec)
    torch.set_num_threads(1)
    trainer.run()
    assert trainer.state == "finished", trainer.error
    assert trainer.metadata["commands"] == [train_command(spec)]
    out = tmp_path / "cli-run"
    argv = shlex.split(train_command(spec, out=str(out), corpus=str(text)))[3:]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    metrics = json.loads((out / "metrics.json").read_text())
    app_acc = trainer.evals[-1].mlm_acc
    key = "next_token_accuracy" if value == "causal" else "masked_token_accuracy"
    assert metrics["heldout"][key] == pytest.approx(app_acc, rel=1e-5)
    cli = load_checkpoint(out)
    saved = dict(cli.trainer_state["train_config"])
    ours = trainer.config.to_dict()
    for housekeeping in ("checkpoint_every_s", "probe_every"):  # change when things are saved, not what is learnt
        saved.pop(housekeeping), ours.pop(housekeeping)
    if not ours.get("short_seq_length"):  # no short-sequence phase: its other settings do nothing
        for inert in ("short_seq_fraction", "short_seq_batch_size"):
            saved.pop(inert, None), ours.pop(inert, None)
    assert saved == ours
    assert cli.model.config == trainer.model.config
    assert [e.mlm_acc for e in trainer.evals] == pytest.approx(
        [e["mlm_acc"] for e in cli.trainer_state["evals"]], rel=1e-5)
    mine = trainer.model.state_dict()
    for name, tensor in cli.model.state_dict().items():
        assert torch.allclose(tensor, mine[name], rtol=1e-4, atol=1e-6), name


def test_the_train_page_shows_the_command_of_its_settings():
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from bert_core.paths import REPO_ROOT

    at = AppTest.from_file(str(REPO_ROOT / "pages" / "2_Train.py"), default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [c.value for c in at.code if "bert_core train" in c.value]
    expected = train_command(page_spec())
    assert shown == [expected], shown
    at.checkbox(key="train_nsp").uncheck().run()
    at.slider(key="train_mask").set_value(0.4).run()
    assert [c.value for c in at.code if "bert_core train" in c.value] == [
        train_command(one_change(one_change(page_spec(), "nsp", False), "mask_rate", 0.4))]
    at.selectbox(key="train_corpus").set_value("paste").run()
    assert any("--corpus pasted-text.txt" in c.value for c in at.code)
    assert any("pasted-text.txt" in c.value and "Save your text" in c.value for c in at.caption)
