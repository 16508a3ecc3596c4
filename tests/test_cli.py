import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bert_core.cli.main import main

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trained(toy_file, tmp_path_factory):
    """A checkpoint written by `train` (4 steps of a nano model) and the JSON it printed."""
    out = tmp_path_factory.mktemp("ckpt") / "run"
    argv = ["train", "--corpus", str(toy_file), "--preset", "nano", "--vocab-size", "300", "--seq-len", "32",
            "--batch-size", "4", "--steps", "4", "--eval-batches", "2", "--device", "cpu", "--out", str(out),
            "--json"]
    return out, argv


def _run_main(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_train_writes_a_checkpoint_that_transformers_loads_and_a_metrics_file(trained, capsys):
    out, argv = trained
    code, stdout, stderr = _run_main(argv, capsys)
    assert code == 0, stderr
    printed = json.loads(stdout)
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "trainer_state.json",
            "optimizer.safetensors", "metrics.json"} <= names
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics == printed
    assert metrics["steps"] == 4
    assert 0 <= metrics["heldout"]["masked_token_accuracy"] <= 1
    assert {"unigram", "untrained"} <= set(metrics["baselines"])
    split = metrics["heldout_split"]["corpora"][0]
    assert split["heldout_documents"] == len(split["heldout_document_indices"]) > 0
    assert metrics["commands"][0].startswith("python -m bert_core train --corpus")
    assert "%" in stderr  # the progress bar
    transformers = pytest.importorskip("transformers")
    transformers.BertForPreTraining.from_pretrained(out)


def test_train_resume_continues_the_same_run(trained, capsys):
    out, argv = trained
    if not (out / "trainer_state.json").exists():
        assert _run_main(argv, capsys)[0] == 0
    code, stdout, stderr = _run_main(["train", "--resume", str(out), "--steps", "6", "--json"], capsys)
    assert code == 0, stderr
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["step"] == 6
    assert [e["step"] for e in state["history"]] == [1, 2, 3, 4, 5, 6]
    assert len(state["metadata"]["commands"]) == 2


def test_train_resume_keeps_the_runs_own_schedule_unless_given(toy_file, tmp_path, capsys):
    """A wsd run lengthened with --time-budget goes on by wsd (its peak again, then its decay), not by the linear
    'time' schedule; --schedule on the resume still wins."""
    out = tmp_path / "wsd"
    assert _run_main(["train", "--corpus", str(toy_file), "--preset", "nano", "--vocab-size", "300", "--seq-len",
                      "32", "--batch-size", "4", "--steps", "3", "--schedule", "wsd", "--eval-batches", "1",
                      "--device", "cpu", "--out", str(out)], capsys)[0] == 0

    def resumed(*extra):
        code, _, stderr = _run_main(["train", "--resume", str(out), *extra], capsys)
        assert code == 0, stderr
        return json.loads((out / "trainer_state.json").read_text())

    state = resumed("--time-budget", "1")
    assert (state["train_config"]["schedule"], state["train_config"]["max_steps"]) == ("wsd", None)
    assert state["step"] > 3
    assert resumed("--steps", str(state["step"] + 1), "--schedule", "cosine")["train_config"]["schedule"] == "cosine"


def test_train_defaults_take_the_recipe_with_its_short_phase_off_when_not_shorter(trained, toy_file, capsys,
                                                                                  tmp_path):
    from bert_core.training.recipes import DEFAULT_PRESET, recipe_for

    recipe = dataclasses.asdict(recipe_for(DEFAULT_PRESET))

    out, argv = trained  # --seq-len 32: the default short phase (32 tokens) would be no shorter, so it is off
    if not (out / "trainer_state.json").exists():
        assert _run_main(argv, capsys)[0] == 0
    assert json.loads((out / "trainer_state.json").read_text())["train_config"]["short_seq_length"] == 0
    longer = tmp_path / "longer"
    code, _, stderr = _run_main(["train", "--corpus", str(toy_file), "--vocab-size", "300", "--seq-len", "64",
                                 "--batch-size", "4", "--steps", "4", "--eval-batches", "2", "--device", "cpu",
                                 "--out", str(longer)], capsys)
    assert code == 0, stderr
    state = json.loads((longer / "trainer_state.json").read_text())
    config = state["train_config"]
    assert (config["short_seq_length"], config["short_seq_fraction"]) == (recipe["short_seq_length"],
                                                                          recipe["short_seq_fraction"])
    assert state["short_data_state"]["max_seq_length"] == recipe["short_seq_length"]
    assert state["metadata"]["preset"] == recipe["preset"]
    assert json.loads((longer / "config.json").read_text())["initializer_range"] == recipe["initializer_range"]
    code, _, stderr = _run_main(["train", "--resume", str(longer), "--steps", "6", "--short-seq-len", "16"], capsys)
    assert code == 2 and "--short-seq-len cannot change on --resume" in stderr


def test_eval_is_seeded_and_reports_the_unigram_baseline(trained, toy_file, capsys):
    out, argv = trained
    if not (out / "model.safetensors").exists():
        assert _run_main(argv, capsys)[0] == 0
    args = ["eval", "--checkpoint", str(out), "--text-file", str(toy_file), "--batches", "3", "--batch-size", "4",
            "--seed", "3", "--json"]
    code, stdout, stderr = _run_main(args, capsys)
    assert code == 0, stderr
    first = json.loads(stdout)
    assert set(first) >= {"masked_token_accuracy", "perplexity", "nsp_accuracy", "unigram_baseline"}
    assert first["unigram_baseline"]["counts_from"] == "the checkpoint's training text"
    assert json.loads(_run_main(args, capsys)[1]) == first
    code, text, _ = _run_main(args[:-1], capsys)
    assert "masked-token accuracy" in text and "unigram baseline" in text and "NSP accuracy" in text


def test_fill_mask_prints_top_k_candidates_for_each_mask(trained, capsys):
    out, argv = trained
    if not (out / "model.safetensors").exists():
        assert _run_main(argv, capsys)[0] == 0
    code, stdout, stderr = _run_main(["fill-mask", "--checkpoint", str(out), "--top-k", "3", "--json",
                                      "the [MASK] sat on the [MASK] ."], capsys)
    assert code == 0, stderr
    result = json.loads(stdout)
    assert len(result) == 2 and all(len(r["candidates"]) == 3 for r in result)


def test_heldout_text_reproduces_the_eval_figures_in_metrics_json(trained, capsys, tmp_path):
    out, argv = trained
    if not (out / "metrics.json").exists():
        assert main(argv) == 0
    capsys.readouterr()
    metrics = json.loads((out / "metrics.json").read_text())
    recorded = metrics["eval"]
    assert recorded["commands"] == [f"python -m bert_core heldout --checkpoint {out} --out heldout.txt",
                                    f"python -m bert_core eval --checkpoint {out} --text-file heldout.txt"]
    text_file = tmp_path / "heldout.txt"
    code, stdout, stderr = _run_main(["heldout", "--checkpoint", str(out), "--out", str(text_file)], capsys)
    assert code == 0, stderr
    held = metrics["heldout_split"]["corpora"][0]
    assert f"wrote {held['heldout_documents']} held-out documents ({held['heldout_sentences']} sentences)" in stdout
    # The written text reads back as exactly the held-out documents.
    from bert_core.data.corpora import load_corpus, split_heldout

    expected = split_heldout(load_corpus(held["spec"]), fraction=0.1, seed=0)[1].documents
    assert load_corpus(str(text_file)).documents == expected
    code, stdout, stderr = _run_main(["eval", "--checkpoint", str(out), "--text-file", str(text_file), "--json"],
                                     capsys)
    assert code == 0, stderr
    again = json.loads(stdout)
    for key in ("masked_token_accuracy", "mlm_loss", "perplexity", "nsp_accuracy", "masked_tokens", "sequences"):
        assert again[key] == recorded[key], key
    assert again["unigram_baseline"] == recorded["unigram_baseline"]


def test_heldout_writes_one_corpus_by_its_spec_or_name_and_refuses_one_it_did_not_hold_out(trained, capsys, tmp_path):
    out, argv = trained
    if not (out / "metrics.json").exists():
        assert main(argv) == 0
    held = json.loads((out / "metrics.json").read_text())["heldout_split"]["corpora"][0]
    whole, alone = tmp_path / "all.txt", tmp_path / "alone.txt"
    assert _run_main(["heldout", "--checkpoint", str(out), "--out", str(whole)], capsys)[0] == 0
    for chosen in (held["spec"], held["name"]):
        code, stdout, stderr = _run_main(["heldout", "--checkpoint", str(out), "--corpus", chosen, "--out",
                                          str(alone), "--overwrite"], capsys)
        assert code == 0, stderr
        assert alone.read_text() == whole.read_text() and held["spec"] in stdout
    code, _, stderr = _run_main(["heldout", "--checkpoint", str(out), "--corpus", "brownish", "--out",
                                 str(tmp_path / "none.txt")], capsys)
    assert code == 2 and stderr.count("error:") == 1 and "no corpus 'brownish'" in stderr and held["spec"] in stderr
    assert not (tmp_path / "none.txt").exists()
    code, _, stderr = _run_main(["heldout", "--checkpoint", str(out), "--corpus", held["spec"], "--update-metrics"],
                                capsys)
    assert code == 2 and "give --out FILE" in stderr


def test_heldout_errors_on_a_folder_without_a_split(tmp_path, capsys):
    code, _, stderr = _run_main(["heldout", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "h.txt")], capsys)
    assert code == 2 and "records no held-out split" in stderr


@pytest.mark.parametrize(
    "argv, words",
    [
        (["fill-mask", "--checkpoint", "/nonexistent/ckpt", "a [MASK] b"], "does not exist"),
        (["train", "--corpus", "toy", "--steps", "1"], "--out"),
        (["train", "--corpus", "/nonexistent/file.txt", "--steps", "1", "--out", "/tmp/bert-cli-test-never-made"], "unknown corpus"),
        (["train", "--corpus", "toy", "--out", "/tmp/bert-cli-test-never-made"], "--steps"),
        (["eval", "--checkpoint", "/nonexistent", "--text-file", "/nonexistent.txt"], "does not exist"),
        (["train", "--steps", "nope"], "invalid int"),
    ],
)
def test_user_errors_print_one_line_and_exit_2(argv, words, capsys):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: ") and sum(ln.startswith("error") for ln in lines) == 1, err
    assert "Traceback" not in err
    assert words in lines[-1]


@pytest.mark.parametrize("command", ["train", "eval", "fill-mask", "bench", "finetune", "heldout"])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "usage: python -m bert_core " + command in capsys.readouterr().out


def test_python_dash_m_reports_errors_without_a_traceback():
    done = subprocess.run([sys.executable, "-m", "bert_core", "fill-mask", "--checkpoint", "/nonexistent", "x [MASK]"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_run_with_a_checkpoint_that_resumes(toy_file, tmp_path, signum):
    """`kill` (SIGTERM) or Ctrl-C (SIGINT) stops a training run at the end of its step and writes its checkpoint,
    so nothing since the last periodic one is lost, and the run goes on from there with --resume."""
    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    argv = [sys.executable, "-m", "bert_core", "train", "--corpus", str(toy_file), "--preset", "nano", "--vocab-size",
            "300", "--seq-len", "32", "--batch-size", "4", "--steps", "100000", "--eval-every", "100000",
            "--eval-batches", "1", "--checkpoint-every", "100000", "--device", "cpu", "--out", str(out)]
    with open(log, "w") as err:
        # start_new_session: not in this test's process group, so its SIGINT is its own (a background shell would
        # also leave SIGINT ignored: the handler takes it all the same).
        child = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while "eval step 0" not in log.read_text() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        # A log file gets a progress line every 30 s; a nano step takes milliseconds, so 3 s is hundreds of them.
        time.sleep(3)
        assert child.poll() is None, log.read_text()
        child.send_signal(signum)
        code = child.wait(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    text = log.read_text()
    assert code == 128 + signum, text
    step = json.loads((out / "trainer_state.json").read_text())["step"]
    assert step >= 1 and f"stopped by {signal.Signals(signum).name} at step {step}" in text
    assert f"--resume {out}" in text and "Traceback" not in text
    assert main(["train", "--resume", str(out), "--steps", str(step + 2)]) == 0
    assert json.loads((out / "trainer_state.json").read_text())["step"] == step + 2


def test_a_grown_folder_keeps_its_sources_rate_and_held_out_split(trained, toy_file, capsys, tmp_path):
    """`grow` records the source's pretraining rate and held-out split (growth.json): fine-tuning the grown folder,
    or a run that continues it, scales that rate and not the size rule's fallback (here 4x lower), and keeps the
    held-out documents out of training."""
    from bert_core.model.config import BertConfig
    from bert_core.training.finetune import checkpoint_pretraining_rate, finetune_learning_rate

    out, argv = trained
    if not (out / "model.safetensors").exists():
        assert main(argv) == 0
    capsys.readouterr()
    source_rate = checkpoint_pretraining_rate(out)
    assert source_rate is not None and source_rate > 1e-6
    hidden = BertConfig.load(out).hidden_size
    grown = tmp_path / "grown"
    code, _, stderr = _run_main(["grow", "--checkpoint", str(out), "--hidden-size", str(4 * hidden), "--layers",
                                 str(BertConfig.load(out).num_hidden_layers), "--out", str(grown)], capsys)
    assert code == 0, stderr
    assert not (grown / "trainer_state.json").exists()
    assert json.loads((grown / "growth.json").read_text())["pretraining_rate"] == source_rate
    assert checkpoint_pretraining_rate(grown) == source_rate
    wide = BertConfig.load(grown)
    assert finetune_learning_rate(wide, checkpoint_pretraining_rate(grown)) == \
        min(1e-3, source_rate * 128 / wide.hidden_size) != finetune_learning_rate(wide, None)
    # A run that continues the grown folder at a lower rate records the higher one behind its weights.
    second = tmp_path / "continued"
    code, _, stderr = _run_main(["train", "--corpus", str(toy_file), "--init-from", str(grown), "--seq-len", "32",
                                 "--batch-size", "4", "--steps", "1", "--lr", "1e-12", "--eval-batches", "1",
                                 "--device", "cpu", "--out", str(second)], capsys)
    assert code == 0, stderr
    assert checkpoint_pretraining_rate(second) == source_rate
    # Its weights never saw the source's held-out documents: the grown folder carries that split, so `heldout`
    # writes them out and a continuation that would train on them (another --seed) is refused.
    assert json.loads((grown / "growth.json").read_text())["heldout"] == \
        json.loads((out / "metrics.json").read_text())["heldout_split"]
    code, _, stderr = _run_main(["heldout", "--checkpoint", str(grown), "--out", str(tmp_path / "held.txt")], capsys)
    assert code == 0, stderr
    assert (tmp_path / "held.txt").read_text().strip()
    code, _, stderr = _run_main(["train", "--corpus", str(toy_file), "--init-from", str(grown), "--seq-len", "32",
                                 "--batch-size", "4", "--steps", "1", "--seed", "7", "--eval-batches", "1",
                                 "--device", "cpu", "--out", str(tmp_path / "leaky")], capsys)
    assert code == 2 and "another held-out split" in stderr.strip().splitlines()[-1], stderr
    # A damaged record, or a folder grow never wrote, gives no rate (the size rule), never an error.
    (grown / "growth.json").write_text("{not json")
    assert checkpoint_pretraining_rate(grown) is None
    (grown / "growth.json").write_text(json.dumps({"pretraining_rate": -1}))
    assert checkpoint_pretraining_rate(grown) is None
    assert checkpoint_pretraining_rate(tmp_path) is None


def test_init_from_continues_from_the_weights_with_a_new_sequence_length(trained, toy_file, capsys, tmp_path):
    out, argv = trained
    if not (out / "model.safetensors").exists():
        assert main(argv) == 0
    capsys.readouterr()
    second = tmp_path / "longer"
    code, stdout, stderr = _run_main(["train", "--corpus", str(toy_file), "--init-from", str(out), "--seq-len", "64",
                                      "--batch-size", "4", "--steps", "1", "--lr", "1e-12", "--eval-batches", "1",
                                      "--device", "cpu", "--out", str(second)], capsys)
    assert code == 0, stderr
    assert "start " in stdout + stderr and "untrained" not in stdout + stderr
    assert "positions 32 on start as copies of the 32 the checkpoint trained" in stderr
    from bert_core.model.checkpoint import load_checkpoint

    a, b = load_checkpoint(out), load_checkpoint(second)
    assert a.model.config.hidden_size == b.model.config.hidden_size
    assert b.tokenizer.vocab_size == a.tokenizer.vocab_size
    wa, wb = a.model.state_dict(), b.model.state_dict()
    positions = "bert.embeddings.position_embeddings.weight"
    # An update at lr 1e-12 moves nothing; the positions from 32 on, never trained, start as copies of 0-31.
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa if k != positions) < 1e-6
    assert torch.allclose(wb[positions][:32], wa[positions][:32], atol=1e-6)
    assert torch.allclose(wb[positions][32:64], wa[positions][:32], atol=1e-6)
    assert torch.allclose(wb[positions][96:128], wa[positions][:32], atol=1e-6)
    assert not torch.allclose(wa[positions][32:64], wa[positions][:32])
    metrics = json.loads((second / "metrics.json").read_text())
    assert metrics["baselines"]["start"]["model"]["positions_copied_from"] == 32
    # Continued at 1e-12, it keeps the rate its start trained at for the fine-tuning rule.
    from bert_core.training.run_builder import pretraining_rate_of

    assert b.trainer_state["train_config"]["learning_rate"] == 1e-12
    assert pretraining_rate_of(b.trainer_state) == pretraining_rate_of(a.trainer_state) > 1e-6
    assert metrics["commands"][0].startswith("python -m bert_core train") and "--init-from" in metrics["commands"][-1]
    assert len(metrics["commands"]) >= 2
    # Step 0 of this run is the starting checkpoint, not an untrained model: labelled so.
    assert "untrained" not in metrics["baselines"]
    assert metrics["baselines"]["start"]["model"]["folder"] == str(out)
    # Another held-out split would leak trained-on text into the evaluation: refused.
    code, _, stderr = _run_main(["train", "--corpus", str(toy_file), "--init-from", str(out), "--seed", "5",
                                 "--steps", "1", "--out", str(tmp_path / "other")], capsys)
    assert code == 2 and "another held-out split" in stderr
    # More text is a lever: a corpus may be added, and the start corpus keeps its held-out documents.
    more = tmp_path / "more.txt"
    more.write_text("\n\n".join(f"Another text number {i}. It has two sentences." for i in range(12)))
    code, _, stderr = _run_main(["train", "--corpus", str(toy_file), "--corpus", str(more), "--init-from", str(out),
                                 "--steps", "1", "--batch-size", "4", "--seq-len", "64", "--eval-batches", "1",
                                 "--device", "cpu", "--out", str(tmp_path / "added")], capsys)
    assert code == 0, stderr
    split = json.loads((tmp_path / "added" / "metrics.json").read_text())["heldout_split"]["corpora"]
    assert [c["spec"] for c in split] == [str(toy_file), str(more)]
    assert split[0]["heldout_document_indices"] == metrics["heldout_split"]["corpora"][0]["heldout_document_indices"]


def test_copy_positions_is_asked_for_only_where_it_means_something(trained, toy_file, capsys, tmp_path):
    out, argv = trained
    if not (out / "model.safetensors").exists():
        assert main(argv) == 0
    capsys.readouterr()
    base = ["train", "--corpus", str(toy_file), "--batch-size", "4", "--steps", "1", "--lr", "1e-12",
            "--eval-batches", "1", "--device", "cpu"]
    # Turned off, the untrained positions stay as the checkpoint has them.
    code, _, stderr = _run_main(base + ["--init-from", str(out), "--seq-len", "64", "--no-copy-positions",
                                        "--out", str(tmp_path / "kept")], capsys)
    assert code == 0, stderr
    from bert_core.model.checkpoint import load_checkpoint

    positions = "bert.embeddings.position_embeddings.weight"
    before = load_checkpoint(out).model.state_dict()[positions]
    after = load_checkpoint(tmp_path / "kept").model.state_dict()[positions]
    assert torch.allclose(before, after, atol=1e-6)
    kept = json.loads((tmp_path / "kept" / "metrics.json").read_text())
    assert "positions_copied_from" not in kept["baselines"]["start"]["model"]
    # The page's "train on from these weights" copies them when its run is longer, and only then.
    from bert_core.serve.train_spec import _warm_start

    assert _warm_start(str(out), 64).copy_positions_from == 32 and _warm_start(str(out), 32).copy_positions_from == 0
    # At the length it trained at, there is nothing to copy; without --init-from, nothing to copy from.
    for extra, words in ((["--init-from", str(out), "--seq-len", "32", "--copy-positions"], "trained at 32 tokens"),
                         (["--preset", "nano", "--copy-positions"], "--copy-positions starts the untrained")):
        code, _, stderr = _run_main(base + extra + ["--out", str(tmp_path / "refused")], capsys)
        assert code == 2 and stderr.startswith("error: ") and words in stderr, stderr
    code, _, stderr = _run_main(["train", "--resume", str(out), "--copy-positions", "--steps", "5"], capsys)
    assert code == 2 and "--copy-positions only shapes a new run" in stderr, stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_finetune_after_its_step_keeping_the_models_it_has(tmp_path, signum):
    """`kill` (SIGTERM) or Ctrl-C (SIGINT) stops `finetune` as it stops `train`: the model in training ends after its
    step and is saved as it stands (with the baseline that ran before it), the output says what was kept, what
    never ran and that fine-tuning does not resume from it, and the exit status is 128 + the signal."""
    import re

    out, log = tmp_path / "classifier", tmp_path / "stderr.txt"
    argv = [sys.executable, "-m", "bert_core", "finetune", "--scratch-preset", "nano", "--task", "toy",
            "--train-size", "200", "--val-size", "40", "--batch-size", "8", "--max-length", "32", "--steps", "100000",
            "--eval-points", "10000", "--baseline", "--device", "cpu", "--out", str(out)]
    with open(log, "w") as err:
        child = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=err, start_new_session=True,
                                 text=True)
    try:
        deadline = time.monotonic() + 240
        # A validation line past step 0: the model has made steps (evaluations come every 10 here).
        while (not re.search(r"\[scratch\] step +[1-9]", log.read_text()) and child.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.2)
        assert child.poll() is None, log.read_text()
        child.send_signal(signum)
        stdout, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    text = log.read_text()
    assert child.returncode == 128 + signum, text
    kept = json.loads((out / "finetune_result.json").read_text())
    assert kept["state"] == "stopped" and kept["steps"] >= 10
    assert f"stopped by {signal.Signals(signum).name} with scratch at step {kept['steps']:,}." in text
    assert f"scratch: stopped at step {kept['steps']:,}, its model of that step saved to {out}" in text
    assert "tfidf: finished, its figures above" in text and "Fine-tuning does not resume" in text
    assert "Traceback" not in text and "tfidf" in stdout and "scratch" in stdout   # the table of what ran
    from bert_core.model.hf import load_pretrained
    from bert_core.training.finetune_tasks import SentenceLabels

    assert load_pretrained(out, model_class=SentenceLabels.head).num_labels == len(kept["label_names"])
