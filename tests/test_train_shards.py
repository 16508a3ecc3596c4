"""`train --corpus shards:DIR` (issue "A model that has read thirty times more"): a run streams a `corpus build`
folder, resumes at the same shard position with the same masks (stopped and resumed = straight through, bit for
bit), warm-starts the shipped tokenizer's model, trains the GPT twin on the same shards, and mixes them with
text corpora at a stated share of the batches, resumed as exactly."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bert_core.cli.main import main
from bert_core.data.shards import ShardStream

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "checkpoints" / "bert-tiny-english"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    src = root / "src"
    src.mkdir()
    rng = random.Random(1)
    words = ("the farmer walked to the market with his old dog and bought fresh bread cheese and apples before "
             "going home across the river where children played").split()
    for i in range(12):
        paras = [" ".join(rng.choice(words) for _ in range(60)).capitalize() + "." for _ in range(6)]
        (src / f"doc{i}.txt").write_text("\n\n".join(paras) + "\n")
    out = root / "corpus"
    assert main(["corpus", "build", "--out", str(out), "--tokenizer", str(TOKENIZER), "--no-default-references",
                 "--heldout-fraction", "0.25", f"text:{src}"]) == 0
    return out


def _train(capsys, *argv) -> int:
    code = main(["train", *argv])
    capsys.readouterr()
    return code


def _weights(folder: Path) -> dict:
    return load_file(str(folder / "model.safetensors"))


COMMON = ("--preset", "nano", "--seq-len", "32", "--batch-size", "4", "--eval-batches", "1", "--device", "cpu",
          "--precision", "fp32", "--short-seq-len", "0")


def test_a_stopped_and_resumed_shard_run_equals_one_run_straight_through(shards, tmp_path, capsys):
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    assert _train(capsys, "--corpus", f"shards:{shards}", *COMMON, "--steps", "8", "--out", str(straight)) == 0
    # A run stopped after 4 steps, then resumed to 8: with a constant rate and no warmup its first half is the
    # same as the first half of an 8-step run, so the two must end on the same weights.
    flat = ("--schedule", "constant", "--warmup", "0")
    assert _train(capsys, "--corpus", f"shards:{shards}", *COMMON, *flat, "--steps", "4", "--out", str(halves)) == 0
    state = json.loads((halves / "trainer_state.json").read_text())
    assert state["metadata"]["corpora"] == [f"shards:{shards}"]
    assert state["data_state"]["position"] == 4 and "shards" in state["data_state"]
    assert _train(capsys, "--resume", str(halves), "--steps", "8") == 0
    again = tmp_path / "again"
    assert _train(capsys, "--corpus", f"shards:{shards}", *COMMON, *flat, "--steps", "8", "--out", str(again)) == 0
    a, b = _weights(again), _weights(halves)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((halves / "trainer_state.json").read_text())["step"] == 8
    metrics = json.loads((straight / "metrics.json").read_text())
    assert metrics["heldout"]["masked_token_accuracy"] is not None and "text" in metrics["per_corpus"]
    assert metrics["baselines"]["unigram"]["accuracy"] > 0


def test_the_same_seed_gives_the_same_weights_and_another_seed_other_masks(shards, tmp_path, capsys):
    one, two = tmp_path / "one", tmp_path / "two"
    for out in (one, two):
        assert _train(capsys, "--corpus", f"shards:{shards}", *COMMON, "--steps", "3", "--out", str(out)) == 0
    a, b = _weights(one), _weights(two)
    assert all(torch.equal(a[k], b[k]) for k in a)
    s0 = ShardStream(shards, seq_len=32, batch_size=4, seed=0, tokenizer=None)
    s1 = ShardStream(shards, seq_len=32, batch_size=4, seed=1)
    assert not torch.equal(next(s0).mlm_labels, next(s1).mlm_labels)


def test_a_warm_start_needs_shards_checked_against_the_start_models_heldout_corpora(shards, tmp_path, capsys):
    warm = tmp_path / "warm"
    argv = ("--init-from", str(TOKENIZER), "--seq-len", "32", "--batch-size", "4", "--steps", "2", "--eval-batches",
            "1", "--device", "cpu", "--out", str(warm))
    code = main(["train", "--corpus", f"shards:{shards}", *argv])
    err = capsys.readouterr().err
    assert code != 0 and "were not checked against them" in err and "brown" in err
    assert not (warm / "model.safetensors").exists()
    # The same source built against the start model's corpora (here stand-ins under their file names) is accepted.
    refs = tmp_path / "refs"
    for name in ("brown.txt", "valid.txt", "input.txt"):
        (refs / name.split(".")[0]).mkdir(parents=True)
        (refs / name.split(".")[0] / name).write_text("Some evaluation text that the fixture never repeats at all.\n")
    checked = tmp_path / "checked"
    against = [a for name in ("brown/brown.txt", "valid/valid.txt", "input/input.txt")
               for a in ("--against", str(refs / name))]
    assert main(["corpus", "build", "--out", str(checked), "--tokenizer", str(TOKENIZER), "--no-default-references",
                 *against, "--heldout-fraction", "0.25", f"text:{shards.parent / 'src'}"]) == 0
    assert _train(capsys, "--corpus", f"shards:{checked}", *argv) == 0
    assert json.loads((warm / "trainer_state.json").read_text())["metadata"]["init_from"]["folder"]


def test_a_model_trained_on_shards_goes_on_from_its_weights_on_the_same_shards(shards, tmp_path, capsys):
    """A second phase (--init-from a run on these shards, as BERT's longer-sequence phase): the build's split held
    out the same documents for both, so no decontamination against the first run is asked for."""
    first, second = tmp_path / "first", tmp_path / "second"
    assert _train(capsys, "--corpus", f"shards:{shards}", *COMMON, "--steps", "2", "--out", str(first)) == 0
    code = main(["train", "--corpus", f"shards:{shards}", "--init-from", str(first), "--seq-len", "64",
                 "--batch-size", "4", "--steps", "2", "--eval-batches", "1", "--device", "cpu", "--out", str(second)])
    assert code == 0, capsys.readouterr().err
    assert json.loads((second / "trainer_state.json").read_text())["metadata"]["init_from"]["folder"]


def test_the_gpt_twin_trains_on_the_same_shards(shards, tmp_path, capsys):
    gpt = tmp_path / "gpt"
    assert _train(capsys, "--corpus", f"shards:{shards}", *COMMON, "--objective", "clm", "--steps", "2", "--out",
                  str(gpt)) == 0
    metrics = json.loads((gpt / "metrics.json").read_text())
    assert metrics["heldout"]["objective"] == "clm" and metrics["heldout"]["next_token_accuracy"] is not None
    batch = next(ShardStream(shards, seq_len=32, batch_size=2, nsp=False, objective="clm"))
    assert batch.causal and int((batch.token_type_ids != 0).sum()) == 0


def test_shards_mixed_with_text_corpora_resume_exactly_and_draw_each_batch_from_one(shards, tmp_path, capsys):
    mixed = ("--corpus", f"shards:{shards}", "--corpus", "toy", *COMMON, "--schedule", "constant", "--warmup", "0")
    halves, again = tmp_path / "halves", tmp_path / "again"
    assert _train(capsys, *mixed, "--steps", "4", "--out", str(halves)) == 0
    state = json.loads((halves / "trainer_state.json").read_text())
    data = state["data_state"]
    assert data["taken"] == 4 and data["share"] == 0.5
    # Each batch came whole from one stream: their positions add up to the batches taken.
    assert data["shards"]["position"] + data["text"]["position"] == 4
    assert state["metadata"]["heldout"]["shard_share"] == 0.5
    assert _train(capsys, "--resume", str(halves), "--steps", "10") == 0
    assert _train(capsys, *mixed, "--steps", "10", "--out", str(again)) == 0
    a, b = _weights(again), _weights(halves)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    data = json.loads((halves / "trainer_state.json").read_text())["data_state"]
    assert data["shards"]["position"] > 0 and data["text"]["position"] > 0   # seed 0 draws both in 10 batches
    metrics = json.loads((again / "metrics.json").read_text())
    assert {"text", "toy"} <= set(metrics["per_corpus"])   # each held-out part's own figures
    # Another share is another run: a resume keeps the saved one.
    code = main(["train", "--resume", str(halves), "--steps", "12", "--shard-share", "0.25"])
    assert code != 0 and "shard" in capsys.readouterr().err


def test_the_share_of_batches_from_the_shards_is_the_one_asked_for():
    from bert_core.data.shards import _from_shards
    for share in (0.25, 0.5, 0.9):
        drawn = sum(_from_shards(0, k, share) for k in range(4000)) / 4000
        assert abs(drawn - share) < 0.03
    assert [_from_shards(0, k, 0.5) for k in range(20)] == [_from_shards(0, k, 0.5) for k in range(20)]
    assert [_from_shards(0, k, 0.5) for k in range(40)] != [_from_shards(1, k, 0.5) for k in range(40)]


@pytest.mark.parametrize("argv, message", [
    (("--corpus", "SHARDS", "--corpus", "SHARDS"), "give one shard folder"),
    (("--corpus", "SHARDS", "--shard-share", "0.3"), "give both"),
    (("--corpus", "toy", "--shard-share", "0.3"), "give both"),
    (("--corpus", "SHARDS", "--corpus", "toy", "--shard-share", "1.5"), "shard-share"),
])
def test_a_mix_that_cannot_be_made_is_refused_in_one_line(shards, tmp_path, capsys, argv, message):
    argv = tuple(f"shards:{shards}" if a == "SHARDS" else a for a in argv)
    try:
        code = main(["train", *argv, *COMMON, "--steps", "2", "--out", str(tmp_path / "x")])
    except SystemExit as e:   # a value out of its limits: argparse's one error line
        code = e.code
    err = capsys.readouterr().err
    assert code != 0 and err.count("error:") == 1 and message in err
    assert not (tmp_path / "x" / "model.safetensors").exists()


def test_shards_from_another_vocabulary_are_refused(shards, tmp_path, capsys):
    gpt2_vocab = tmp_path / "othertok"
    gpt2_vocab.mkdir()
    (gpt2_vocab / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a"]) + "\n")
    code = main(["train", "--corpus", f"shards:{shards}", "--tokenizer", str(gpt2_vocab), *COMMON, "--steps", "2",
                 "--out", str(tmp_path / "y")])
    err = capsys.readouterr().err
    assert code != 0 and "another vocabulary" in err


def test_a_mixed_run_needs_shards_checked_against_its_own_text_corpora(shards, toy_file, tmp_path, capsys):
    """The text corpora mixed in hold documents out; shards not decontaminated against them could hold those very
    documents, so the run is refused before it trains, and accepted once the shards are built against them."""
    out = tmp_path / "mixed"
    code = main(["train", "--corpus", f"shards:{shards}", "--corpus", str(toy_file), *COMMON, "--steps", "2",
                 "--out", str(out)])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and errors[0].startswith("error: this run holds out documents of")
    assert str(toy_file) in errors[0] and not (out / "model.safetensors").exists()
    checked = tmp_path / "checked"
    assert main(["corpus", "build", "--out", str(checked), "--tokenizer", str(TOKENIZER), "--no-default-references",
                 "--against", str(toy_file), "--heldout-fraction", "0.25", f"text:{shards.parent / 'src'}"]) == 0
    assert _train(capsys, "--corpus", f"shards:{checked}", "--corpus", str(toy_file), *COMMON, "--steps", "2",
                  "--out", str(out)) == 0


def test_whole_word_and_mask_only_masking_train_on_shards_and_take_every_piece_of_a_word(tmp_path, capsys):
    """`--whole-word-masking` and `--mask-only` reach a shard run (they were refused on shards before one batch
    builder served both): the run trains with them, and a shard batch chooses every piece of a word or none."""
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(2)
    words = "zorblax quintessentially glimmerwort snarfle blorptastic the farmer and river".split()  # many pieces
    for i in range(8):
        paras = [" ".join(rng.choice(words) for _ in range(50)).capitalize() + "." for _ in range(4)]
        (src / f"doc{i}.txt").write_text("\n\n".join(paras) + "\n")
    shards = tmp_path / "corpus"
    assert main(["corpus", "build", "--out", str(shards), "--tokenizer", str(TOKENIZER), "--no-default-references",
                 "--heldout-fraction", "0.25", f"text:{src}"]) == 0
    runs = {}
    for name, flags in (("plain", ()), ("whole", ("--whole-word-masking", "--mask-only"))):
        runs[name] = tmp_path / name
        assert _train(capsys, "--corpus", f"shards:{shards}", *COMMON, *flags, "--steps", "2", "--out",
                      str(runs[name])) == 0
    config = json.loads((runs["whole"] / "trainer_state.json").read_text())["train_config"]
    assert config["whole_word_masking"] and config["mask_only"]
    a, b = _weights(runs["plain"]), _weights(runs["whole"])
    assert any(not torch.equal(a[k], b[k]) for k in a)   # other masks, other weights
    from bert_core.data.pretraining_data import MASKED, NOT_CHOSEN
    stream = ShardStream(shards, seq_len=32, batch_size=8, whole_word_masking=True, mask_only=True)
    tok, pieces = stream.tokenizer, 0
    for _ in range(4):
        batch = next(stream)
        chosen = batch.decisions != NOT_CHOSEN
        cont = torch.tensor(tok.continuation_table())[batch.original_ids]
        # A piece right after [CLS]/[SEP] (its word's start fell in the window before) is a word of its own.
        cont[:, 1:] &= ~torch.isin(batch.original_ids, torch.tensor(sorted(tok.special_ids)))[:, :-1]
        before = torch.cat([torch.zeros(len(batch), 1, dtype=torch.bool), chosen[:, :-1]], 1)
        assert (chosen[cont] == before[cont]).all()
        assert (batch.decisions[chosen] == MASKED).all()   # --mask-only: no random or kept token
        pieces += int((chosen & cont).sum())
    assert pieces > 20
