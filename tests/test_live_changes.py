"""A setting changed while a run trains (TrainConfig.changes): the schedule after a change, the record, an exact
resume, `train --change` and its refusals, the page's path (the same weights as the CLI's), and the owner check."""

import json
import re
import shlex
import time

import pytest
import torch

from bert_core.cli.main import main
from bert_core.errors import BertCoreError
from bert_core.model.bert import BertForPreTraining
from bert_core.model.config import BertConfig
from bert_core.training.optimization import lr_multiplier
from bert_core.training.pretraining_events import StepEvent
from bert_core.training.train_config import TrainConfig, change_labels, change_text, parse_change, typed_change
from bert_core.training.trainer import Trainer


@pytest.fixture(scope="module")
def toy():
    from bert_core.data.corpora import generate_toy_corpus, split_heldout
    from bert_core.model.tokenization import train_tokenizer

    corpus = generate_toy_corpus(num_documents=60, seed=0)
    train, held = split_heldout(corpus, fraction=0.2, seed=0)
    return train, held, train_tokenizer(train.texts(), vocab_size=300)


def _trainer(toy, **config):
    from bert_core.data.pretraining_data import PretrainingData

    train, _, tokenizer = toy
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=64,
                                                 hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1))
    cfg = TrainConfig(**{**dict(batch_size=4, max_steps=12, learning_rate=3e-3, warmup_ratio=0.25, max_seq_length=32,
                                eval_batches=2, device="cpu"), **config})
    return Trainer(model, tokenizer, PretrainingData(train, tokenizer, max_seq_length=32, batch_size=4, seed=0), cfg)


def _change_at(trainer, step, name, value):
    """Change a setting when the run has made `step` updates, as the page does from another thread."""
    trainer.callbacks.append(lambda e: trainer.change(name, value)
                             if isinstance(e, StepEvent) and e.step == step else None)


def _same_weights(a, b):
    mine = b.state_dict()
    return all(torch.equal(t, mine[k]) for k, t in a.state_dict().items())


def test_a_change_sets_the_peak_from_its_step_on_and_the_schedule_keeps_its_shape():
    cfg = TrainConfig(max_steps=100, learning_rate=1e-3, warmup_ratio=0.1, device="cpu")
    assert cfg.at(50) is cfg   # no change: the very config of today's runs
    changed = cfg.changed(40, "learning_rate", 3e-4)
    assert changed.changes == ((40, "learning_rate", 3e-4),)
    assert changed.at(39).learning_rate == 1e-3 and changed.at(40).learning_rate == 3e-4 == changed.at(99).learning_rate
    assert changed.learning_rate == 1e-3   # the run's own peak stays: the change is kept beside it
    # The same change again at the same step replaces it; a later one comes after it, in step order.
    again = changed.changed(40, "learning_rate", 1e-4).changed(60, "learning_rate", 2e-4)
    assert again.changes == ((40, "learning_rate", 1e-4), (60, "learning_rate", 2e-4))
    assert change_labels(again) == [(40, "lr 0.001 → 0.0001 at step 40"), (60, "lr 0.0001 → 0.0002 at step 60")]
    assert TrainConfig.from_dict(json.loads(json.dumps(again.to_dict()))) == again
    with pytest.raises(BertCoreError, match="0.0003 already"):
        changed.changed(50, "learning_rate", 3e-4)
    with pytest.raises(BertCoreError, match="cannot change while a run trains"):
        cfg.changed(10, "mask_rate", 0.3)
    with pytest.raises(BertCoreError, match="learning_rate must be a finite number"):
        cfg.changed(10, "learning_rate", -1.0)


def test_the_trainer_trains_at_the_new_peak_from_the_next_update(toy):
    trainer = _trainer(toy)
    _change_at(trainer, 5, "learning_rate", 1e-3)
    trainer.run()
    assert trainer.state == "finished", trainer.error
    lrs = {e.step: e.lr for e in trainer.history}   # event `step` is update number `step`: made after step - 1
    base = trainer.config.replace(changes=())
    for step in range(1, 13):
        peak = 3e-3 if step <= 5 else 1e-3
        assert lrs[step] == pytest.approx(peak * lr_multiplier(base, step - 1), rel=1e-12), step
    assert trainer.config.changes == ((5, "learning_rate", 1e-3),)


def test_a_run_changed_as_it_trains_equals_a_run_given_the_change_and_resumes_exactly(toy, tmp_path):
    live = _trainer(toy)
    _change_at(live, 5, "learning_rate", 1e-3)
    live.run()
    given = _trainer(toy, changes=((5, "learning_rate", 1e-3),))
    given.run()
    assert _same_weights(live.model, given.model)
    plain = _trainer(toy)
    plain.run()
    assert not _same_weights(live.model, plain.model)   # the change did something

    # Changed at step 5, stopped at 8: the checkpoint records the change, and its resume ends where `live` did.
    first = _trainer(toy)
    _change_at(first, 5, "learning_rate", 1e-3)
    first.callbacks.append(lambda e: first.stop() if isinstance(e, StepEvent) and e.step == 8 else None)
    first.run()
    first.save(tmp_path / "ckpt")
    state = json.loads((tmp_path / "ckpt" / "trainer_state.json").read_text())
    assert state["train_config"]["changes"] == [[5, "learning_rate", 1e-3]]
    from bert_core.data.pretraining_data import PretrainingData

    resumed = Trainer.resume(tmp_path / "ckpt", PretrainingData(toy[0], toy[2], max_seq_length=32, batch_size=4,
                                                                seed=0))
    resumed.run()
    assert resumed.step == 12 and _same_weights(resumed.model, live.model)


def test_a_damaged_record_of_changes_is_refused_by_name():
    with pytest.raises(BertCoreError, match="changes must be"):
        TrainConfig.from_dict({"changes": [[5, "dropout", 0.1]]})
    with pytest.raises(BertCoreError, match="a change at step 5: learning_rate must be"):
        TrainConfig.from_dict({"changes": [[5, "learning_rate", "1e-3"]]})
    with pytest.raises(BertCoreError, match="two changes of lr at step 5"):
        TrainConfig(changes=((5, "learning_rate", 1e-3), (5, "learning_rate", 2e-3)))


@pytest.mark.parametrize("text, words", [
    ("", "type the new learning rate"), ("  ", "type the new learning rate"), ("fast", "must be a number"),
    ("-0.001", "between 1e-06 and 1"), ("0", "between 1e-06 and 1"), ("1e9", "between 1e-06 and 1"),
    ("nan", "between 1e-06 and 1"), ("inf", "between 1e-06 and 1")])
def test_a_value_typed_on_the_page_is_refused_in_words(text, words):
    with pytest.raises(BertCoreError, match=words):
        typed_change("learning_rate", text)
    assert typed_change("learning_rate", " 3e-4 ") == 3e-4


def test_the_flag_reads_and_writes_a_change_exactly():
    assert parse_change("120:lr=3e-4") == (120, "learning_rate", 3e-4)
    value = 0.000123456789012
    assert parse_change(change_text((7, "learning_rate", value))) == (7, "learning_rate", value)


@pytest.mark.parametrize("change, words", [
    ("lr=1e-3", "expected STEP:SETTING=VALUE"), ("x:lr=1e-3", "the step must be a whole number"),
    ("-3:lr=1e-3", "the step must be a whole number"), ("5:dropout=0.1", "cannot change while a run trains"),
    ("5:lr=fast", "lr must be a number"), ("5:lr=-1", "learning_rate must be a finite number in \\(0, inf\\)"),
    ("5:lr=inf", "learning_rate must be a finite number")])
def test_a_bad_change_flag_is_one_error_line(change, words, toy_file, tmp_path, capsys):
    try:
        code = main(["train", "--corpus", str(toy_file), "--steps", "4", "--out", str(tmp_path / "x"),
                     f"--change={change}"])
    except SystemExit as exc:   # argparse's own refusal
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "x").exists()
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ") and len([x for x in lines if x.startswith("error")]) == 1, err
    assert re.search(words, lines[-1]), lines[-1]


def _cli(toy_file, out, *extra):
    return ["train", "--corpus", str(toy_file), "--preset", "nano", "--vocab-size", "300", "--seq-len", "32",
            "--batch-size", "4", "--eval-batches", "2", "--device", "cpu", "--dropout", "0.1", "--out", str(out),
            *extra]


def test_the_cli_change_resumes_exactly_and_a_resume_adds_changes_after_its_step(toy_file, tmp_path, capsys):
    from bert_core.model.checkpoint import load_checkpoint

    # A constant schedule, so that a run of 5 steps lengthened to 8 takes the updates a run of 8 takes.
    assert main(_cli(toy_file, tmp_path / "straight", "--steps", "8", "--schedule", "constant", "--change",
                     "3:lr=0.0005", "--change", "6:lr=0.0001")) == 0
    assert main(_cli(toy_file, tmp_path / "half", "--steps", "5", "--schedule", "constant", "--change",
                     "3:lr=0.0005")) == 0
    capsys.readouterr()
    # A resume keeps the run's changes; it may add one from its saved step (5) on, never before it.
    assert main(["train", "--resume", str(tmp_path / "half"), "--change", "4:lr=0.0001", "--steps", "8"]) == 2
    assert "--change 4:lr=0.0001 is before step 5" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "half"), "--change", "6:lr=0.0001", "--steps", "8"]) == 0
    a, b = load_checkpoint(tmp_path / "straight"), load_checkpoint(tmp_path / "half")
    assert b.trainer_state["train_config"]["changes"] == a.trainer_state["train_config"]["changes"] == [
        [3, "learning_rate", 0.0005], [6, "learning_rate", 0.0001]]
    assert _same_weights(a.model, b.model)
    # `--resume --lr` of a run that changed its rate is one more change at the saved step, so that it takes effect.
    assert main(["train", "--resume", str(tmp_path / "straight"), "--lr", "0.0002", "--steps", "9"]) == 0
    state = load_checkpoint(tmp_path / "straight").trainer_state
    assert state["train_config"]["changes"][-1] == [8, "learning_rate", 0.0002]
    assert state["history"][-1]["lr"] == 0.0002


def test_help_lists_the_flag_once():
    from bert_core.cli.train import add_parser
    import argparse

    parser = argparse.ArgumentParser(prog="x")
    text = add_parser(parser.add_subparsers()).format_help()
    assert text.count("--change STEP:lr=VALUE") == 2   # usage and its own line


def test_a_page_run_changed_mid_way_equals_the_cli_run_of_its_command(tmp_path, capsys):
    """The page's path (the server's change_setting on the run build_trainer made) and `train` with the command
    the page shows: the same weights, bit for bit; the run's record holds that command."""
    from bert_core.data.corpora import generate_toy_corpus
    from bert_core.model.checkpoint import load_checkpoint
    from bert_core.serve.train_spec import change_setting
    from bert_core.serve.jobs import TrainSpec, build_trainer
    from bert_core.training.comparison import train_command, with_changes

    text = tmp_path / "stories.txt"
    text.write_text("\n\n".join("\n".join(d) for d in generate_toy_corpus(num_documents=80, seed=3).documents))
    spec = TrainSpec(corpus=str(text), corpus_label="stories.txt", vocab_size=300, preset="nano",
                     model_overrides=dict(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                                          initializer_range=0.02),
                     train=dict(max_steps=16, batch_size=8, learning_rate=5e-3, max_seq_length=32, mask_rate=0.15,
                                nsp=True, seed=0, eval_every=8, eval_batches=3, probe_every=0, device="cpu"),
                     probes=False)
    trainer = build_trainer(spec)
    torch.set_num_threads(1)
    trainer.callbacks.append(lambda e: change_setting(trainer, spec, "learning_rate", 1e-3)
                             if isinstance(e, StepEvent) and e.step == 6 else None)
    trainer.run()
    assert trainer.state == "finished", trainer.error
    command = train_command(with_changes(spec, trainer.config))
    assert "--change 6:lr=0.001" in command and trainer.metadata["commands"] == [command]
    out = tmp_path / "cli-run"
    assert main(shlex.split(train_command(with_changes(spec, trainer.config), out=str(out), corpus=str(text)))[3:]) \
        == 0, capsys.readouterr().err
    cli = load_checkpoint(out)
    assert cli.trainer_state["train_config"]["changes"] == [[6, "learning_rate", 1e-3]]
    assert _same_weights(cli.model, trainer.model)


def test_only_the_owner_changes_a_run_and_only_while_it_trains():
    """The owner's token reaches the run (as for Stop); the share link's id does not, nor a run that is not training."""
    from bert_core.serve import runs, thread_job
    from tests.stand_ins import Counter, Steps

    class Changing(Counter):
        def change(self, name, value):
            self.config = TrainConfig(max_steps=10 ** 6).changed(self.step, name, value)
            return self.config

    store = runs.RunStore(lambda run: thread_job.TrainingJob(run.run_id, builder=Changing), slots=lambda: 1,
                          poll_s=0.02, turn_s=1000)
    try:
        run = store.submit(Steps(), "owner-session")
        waiting = store.submit(Steps(), "another-session")
        deadline = time.monotonic() + 60
        while not (run.job is not None and run.job.busy and run.trainer is not None and run.trainer.state == "running"):
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.01)
        with pytest.raises(BertCoreError, match="no longer on the server"):   # the share link's id steers nothing
            store.change(run.view_id, "learning_rate", 1e-4)
        with pytest.raises(BertCoreError, match="not training"):   # queued behind it: nothing trains yet
            store.change(waiting.run_id, "learning_rate", 1e-4)
        config = store.change(run.run_id, "learning_rate", 1e-4)
        assert config.changes[0][1:] == ("learning_rate", 1e-4) and run.trainer.config is config
        with pytest.raises(BertCoreError, match="must be a finite number"):
            store.change(run.run_id, "learning_rate", float("nan"))
    finally:
        store.close()
