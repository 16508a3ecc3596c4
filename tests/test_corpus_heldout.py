"""`corpus build` holds out the share of a source's words it is asked for (issue 71), also when the source is a
few large files: those are split at paragraphs into sections, and a source that cannot make the share is warned
about on stderr and in report.json."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bert_core.cli.main import main
from bert_core.corpus.build import HELDOUT_TOLERANCE

TOKENIZER = Path(__file__).resolve().parent.parent / "checkpoints" / "bert-tiny-english"
WORDS = "the a farmer walked to market with his dog and bought bread cheese apples before going home".split()


def _paragraphs(rng: random.Random, n: int, sep: str = "\n\n") -> str:
    return sep.join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60))).capitalize() + "."
                    for _ in range(n)) + "\n"


def _build(tmp_path, files: dict[str, str], capsys, fraction: str = "0.05") -> tuple[dict, str]:
    src = tmp_path / "src"
    src.mkdir()
    for name, text in files.items():
        (src / name).write_text(text)
    out = tmp_path / "out"
    code = main(["corpus", "build", "--out", str(out), "--tokenizer", str(TOKENIZER), "--no-default-references",
                 "--heldout-fraction", fraction, f"text:{src}"])
    assert code == 0
    return json.loads((out / "report.json").read_text()), capsys.readouterr().err


@pytest.mark.parametrize("n_files", [1, 2])
def test_a_few_large_files_hold_out_the_share_asked(tmp_path, capsys, n_files):
    rng = random.Random(n_files)
    report, err = _build(tmp_path, {f"book{i}.txt": _paragraphs(rng, 300) for i in range(n_files)}, capsys)
    text = report["sources"]["text"]
    share = text["heldout_words"] / text["words_kept"]
    assert 0.05 <= share <= 0.05 * (1 + HELDOUT_TOLERANCE), share
    assert text["documents_kept"] == n_files and text["pieces"] > 20 and text["heldout_documents"] >= 1
    tokens = report["tokens"]
    assert 0.04 < tokens["heldout"] / (tokens["train"] + tokens["heldout"]) < 0.07
    assert report["warnings"] == [] and "warning:" not in err
    held = (tmp_path / "out" / "heldout" / "text.txt").read_text()
    assert len(held.split()) == text["heldout_words"]


def test_a_source_that_cannot_make_the_share_is_warned_about(tmp_path, capsys):
    rng = random.Random(3)
    # Two files, each one paragraph (no blank line): neither can be split, and either is half the words.
    files = {f"line{i}.txt": _paragraphs(rng, 40, sep=" ") for i in range(2)}
    report, err = _build(tmp_path, files, capsys)
    (warning,) = report["warnings"]
    assert warning.startswith("text held out 0.00% of its words, not the 5.00% asked")
    assert f"warning: {warning}" in err.splitlines()
    assert report["sources"]["text"]["heldout_words"] == 0
