"""`corpus build` decontaminates against every text the project evaluates on by default (issue 71): each file of the
shared folder, and WikiText-2's test split, from a copy given with --against or else downloaded once into the cache;
offline with no copy, the build stops with one error line that says how to give one."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import bert_core.corpus.build as build
from bert_core.cli.main import main
from bert_core.data.downloads import RemoteFile
from bert_core.paths import shared_data_dir

TOKENIZER = Path(__file__).resolve().parent.parent / "checkpoints" / "bert-tiny-english"
# A line of "test text" planted in a source document; a reference holding it drops that document.
PLANTED = "the lighthouse keeper counted eleven silver boats drifting past the harbour wall before the storm began"


@pytest.fixture
def source(tmp_path, monkeypatch):
    """A text source of three documents, one holding PLANTED; the build's other defaults left out (they are slow
    to read) and its cache in tmp_path."""
    monkeypatch.setattr(build, "default_references", lambda: [])
    monkeypatch.setenv("BERT_CORE_CACHE", str(tmp_path / "cache"))
    rng = random.Random(0)
    words = "the a farmer walked to market with his dog and bought bread cheese apples before going home".split()
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        text = "\n\n".join(" ".join(rng.choice(words) for _ in range(40)) + "." for _ in range(5))
        (src / f"doc{i}.txt").write_text(text + (f"\n\nThen {PLANTED}.\n" if i == 1 else "\n"))
    return src


def _wikitext_at(monkeypatch, url: str) -> None:
    monkeypatch.setattr(build, "WIKITEXT_TEST", RemoteFile(url=url, filename="wikitext-2-raw-v1-test.parquet",
                                                           sha256=None))


def _build(src, out, *extra) -> int:
    return main(["corpus", "build", "--out", str(out), "--tokenizer", str(TOKENIZER), *extra, f"text:{src}"])


def test_every_shared_file_is_a_default_reference():
    shared = shared_data_dir()
    if shared is None:
        pytest.skip("the shared data folder is absent")
    found = set(build.default_references())
    for rel in ("wikitext-2/valid.txt", "tinyshakespeare/input.txt", "movie_reviews/reviews.txt",
                "state_union/addresses.txt", "news/abc.txt", "movie_plots/plots.txt", "conll2000/train.txt",
                "brown/brown.txt", "sentence_polarity/polarity.csv", "ag_news/news.csv"):
        assert str(shared / rel) in found, rel


def test_offline_without_a_copy_of_wikitext_test_is_one_error_line(source, tmp_path, monkeypatch, capsys):
    _wikitext_at(monkeypatch, (tmp_path / "nowhere.parquet").as_uri())
    assert _build(source, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: could not download") and "--against" in err[-1], err
    assert not (tmp_path / "out").exists()


def test_wikitext_test_is_downloaded_and_drops_what_shares_a_run(source, tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    lines = [" = Robert Boulter = \n", " Robert Boulter is an English film , television and theatre actor .\n",
             f" {PLANTED.capitalize()} .\n"]
    pq.write_table(pa.table({"text": lines}), tmp_path / "test.parquet")
    _wikitext_at(monkeypatch, (tmp_path / "test.parquet").as_uri())
    assert _build(source, tmp_path / "out") == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    dropped = report["sources"]["text"]["dropped"]
    assert dropped["shares a 13-word run with wikitext-2-raw-v1-test.parquet"]["documents"] == 1
    assert (tmp_path / "cache" / "wikitext-2-raw-v1-test.parquet").is_file()


def test_a_copy_given_with_against_is_used_instead_of_the_download(source, tmp_path, monkeypatch):
    _wikitext_at(monkeypatch, (tmp_path / "nowhere.parquet").as_uri())
    copy = tmp_path / "wiki.test.tokens"
    copy.write_text(" = Robert <unk> = \n\n Robert <unk> is an English film , television and theatre actor . He "
                    f"had a guest @-@ starring role on the television series The Bill in 2000 .\n {PLANTED} .\n")
    assert _build(source, tmp_path / "out", "--against", str(copy)) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["sources"]["text"]["dropped"]["shares a 13-word run with wiki.test.tokens"]["documents"] == 1
    assert [r["name"] for r in report["references"]] == ["wiki.test.tokens"]
