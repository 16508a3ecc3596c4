"""`python -m bert_core download` tries every name it is given (the image's build fetches three tasks: one host
out of reach must not keep the others from the cache), says one line for each, and fails when any failed."""

from pathlib import Path

from bert_core.cli import download
from bert_core.cli.main import main
from bert_core.errors import BertCoreError


def test_every_task_is_tried_and_each_reported(monkeypatch, tmp_path, capsys):
    tried = []

    def fetch(name, progress=None):
        tried.append(name)
        if name == "polarity":   # the first one fails, as an unreachable host does
            raise BertCoreError("could not download https://example.invalid/x (no network); fine-tune on toy")
        if name == "ag_news":
            raise PermissionError(13, "Permission denied", str(tmp_path / "cache" / "ag_news.csv"))
        return tmp_path / f"{name}.csv"

    monkeypatch.setattr(download, "fetch_task_csv", fetch)
    assert main(["download", "polarity", "ag_news", "conll2000"]) == 1
    out, err = capsys.readouterr()
    assert tried == ["polarity", "ag_news", "conll2000"]
    assert out.splitlines() == [f"conll2000: {tmp_path / 'conll2000.csv'}"]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == ["error: polarity: could not download https://example.invalid/x (no network); fine-tune on toy",
                      f"error: ag_news: {tmp_path / 'cache' / 'ag_news.csv'}: Permission denied"]


def test_a_full_disk_is_said_in_plain_words_for_that_task(monkeypatch, tmp_path, capsys):
    import errno

    def fetch(name, progress=None):
        if name == "polarity":
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "polarity.csv"))
        return tmp_path / f"{name}.csv"

    monkeypatch.setattr(download, "fetch_task_csv", fetch)
    assert main(["download", "polarity", "ag_news"]) == 1
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: polarity: could not write {tmp_path / 'polarity.csv'}: "
                                                     "the disk is full (No space left on device"), errors
    assert out.splitlines() == [f"ag_news: {tmp_path / 'ag_news.csv'}"]


def test_all_fetched_exits_zero(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(download, "fetch_task_csv", lambda name, progress=None: tmp_path / f"{name}.csv")
    assert main(["download", "polarity", "ag_news", "polarity"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"polarity: {tmp_path / 'polarity.csv'}", f"ag_news: {tmp_path / 'ag_news.csv'}"]
    assert "error:" not in err


def test_the_treebank_is_fetched_by_its_name(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(download, "fetch_treebank", lambda progress=None: tmp_path / "en_ewt-ud-dev.conllu")
    assert main(["download", "ud-english-ewt"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"ud-english-ewt: {tmp_path / 'en_ewt-ud-dev.conllu'}"]


def test_the_image_and_its_docs_name_the_same_tasks():
    """The Dockerfile's build-time download and docs/deployment.md's list of fetched tasks agree."""
    root = Path(__file__).resolve().parent.parent
    line = next(x for x in (root / "Dockerfile").read_text().splitlines() if "-m bert_core download" in x)
    names = line.split("download", 1)[1].split("\\")[0].split()
    assert names and all(n in download.NAMES for n in names)
    docs = (root / "docs" / "deployment.md").read_text()
    assert f"python -m bert_core download {' '.join(names)}" in docs
