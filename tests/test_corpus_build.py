"""The pretraining corpus builder (`python -m bert_core corpus build`, issue "A model that has read thirty times
more") on a small fixture folder: a duplicate document and a planted 13-word run of evaluation text are dropped and
reported, the shards stream seeded batches that resume exactly, and bad input is one `error:` line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from bert_core.cli.main import main
from bert_core.data.shards import ShardStream

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "checkpoints" / "bert-tiny-english"
PLANTED = "the quick brown fox jumps over the lazy dog while the old cat sleeps soundly by the fire"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    src = root / "src"
    src.mkdir()
    rng = random.Random(0)
    words = "the a farmer walked to market with his dog and bought bread cheese apples before going home".split()

    def paragraph(n):
        return " ".join(rng.choice(words) for _ in range(n)).capitalize() + "."

    for i in range(6):
        (src / f"doc{i}.txt").write_text("\n\n".join(paragraph(40) for _ in range(8)) + "\n")
    (src / "copy.txt").write_text((src / "doc0.txt").read_text())            # a whole duplicate
    (src / "doc3.txt").write_text((src / "doc3.txt").read_text() + "\n" + PLANTED + " today.\n")
    (root / "eval.txt").write_text(f"An evaluation line: {PLANTED} and more.\n")   # text the project scores on
    out = root / "out"
    code = main(["corpus", "build", "--out", str(out), "--tokenizer", str(TOKENIZER), "--no-default-references",
                 "--against", str(root / "eval.txt"), "--heldout-fraction", "0.2", f"text:{src}"])
    assert code == 0
    return root, out


def test_the_duplicate_and_the_planted_overlap_are_dropped_and_reported(corpus):
    _, out = corpus
    report = json.loads((out / "report.json").read_text())
    dropped = report["sources"]["text"]["dropped"]
    assert dropped["duplicate document"]["documents"] == 1
    assert dropped["shares a 13-word run with eval.txt"]["documents"] == 1
    (example,) = report["contamination_examples"]["eval.txt"]
    assert example["document"] == "text:doc3.txt" and example["run"] in PLANTED
    assert report["totals"]["documents_read"] == 7 and report["totals"]["documents_kept"] == 5
    assert report["tokens"]["train"] > 0 and report["tokens"]["heldout"] > 0
    assert not any(PLANTED in p.read_text() for p in (out / "heldout").rglob("*") if p.is_file())


def test_the_shards_stream_seeded_batches_and_resume_exactly(corpus):
    _, out = corpus
    stream = ShardStream(out, seq_len=32, batch_size=4, seed=3)
    first = [next(stream) for _ in range(3)]
    state = stream.state_dict()
    expected = next(stream)
    again = ShardStream(out, seq_len=32, batch_size=4, seed=3)
    assert all(torch.equal(a.input_ids, b.input_ids) for a, b in zip(first, [next(again) for _ in range(3)]))
    resumed = ShardStream(out, seq_len=32, batch_size=4, seed=3)
    resumed.load_state_dict(state)
    got = next(resumed)
    assert torch.equal(got.input_ids, expected.input_ids) and torch.equal(got.mlm_labels, expected.mlm_labels)
    assert int(expected.input_ids.max()) < 8192


def test_bad_input_is_one_error_line_and_leaves_nothing(corpus, tmp_path, capsys):
    root, _ = corpus
    empty = tmp_path / "empty"
    empty.mkdir()
    binary = tmp_path / "binary"
    binary.mkdir()
    (binary / "x.txt").write_bytes(b"text\x00\x01\x02 with a NUL byte")
    for source in (f"text:{empty}", f"text:{binary}", f"text:{tmp_path / 'missing'}"):
        out = tmp_path / "out"
        code = main(["corpus", "build", "--out", str(out), "--tokenizer", str(TOKENIZER), "--no-default-references",
                     source])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and err and err[-1].startswith("error: "), (source, err)
        assert not out.exists() or not any(out.iterdir()), source


def test_a_truncated_shard_is_refused_with_one_error_line(corpus, tmp_path, capsys):
    import shutil

    _, out = corpus
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    assert main(["corpus", "check", str(copy)]) == 0
    capsys.readouterr()
    shard = next((copy / "shards").glob("*-train-*"))
    shard.write_bytes(shard.read_bytes()[:-7])
    assert main(["corpus", "check", str(copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
