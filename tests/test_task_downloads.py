"""The real fine-tuning tasks fetched on demand (bert_core.data.task_downloads), checked on files made here: the
machines that run the tests have no internet."""

import io
import tarfile

import pytest

from bert_core.data.classification_data import load_classification_csv
from bert_core.data.task_downloads import (
    ag_news_csv_from_parquet,
    fetch_task_csv,
    local_task_csv,
    polarity_csv_from_tarball,
)
from bert_core.errors import BertCoreError


def _polarity_tarball(path, pos=("a gem of a film .", "caf\xe9 charm ."), neg=("dull , dull , dull .",)):
    with tarfile.open(path, "w:gz") as tar:
        for name, lines in (("rt-polarity.pos", pos), ("rt-polarity.neg", neg)):
            data = ("\n".join(lines) + "\n").encode("cp1252")
            info = tarfile.TarInfo(f"rt-polaritydata/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _ag_parquet(path, rows=(("Wall St. Bears Claw Back #36;5 \\ of losses", 2), ("Sox win", 1))):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"text": [t for t, _ in rows], "label": [label for _, label in rows]}), str(path))
    return path


def test_polarity_archive_becomes_a_labelled_csv(tmp_path):
    csv_path = tmp_path / "p.csv"
    csv_path.write_text(polarity_csv_from_tarball(_polarity_tarball(tmp_path / "p.tar.gz")), encoding="utf-8")
    data = load_classification_csv(csv_path)
    assert data.label_names == ["negative", "positive"]
    assert sorted(zip(data.texts, data.labels)) == [("a gem of a film .", 1), ("caf\xe9 charm .", 1),
                                                     ("dull , dull , dull .", 0)]


def test_ag_news_parquet_becomes_a_labelled_csv_with_its_escapes_undone(tmp_path):
    csv_path = tmp_path / "a.csv"
    csv_path.write_text(ag_news_csv_from_parquet(_ag_parquet(tmp_path / "a.parquet")), encoding="utf-8")
    data = load_classification_csv(csv_path)
    assert data.label_names == ["Business", "Sports"]
    assert data.texts[0] == "Wall St. Bears Claw Back $5 of losses" and data.labels == [0, 1]


def test_ag_news_with_an_unknown_label_is_refused(tmp_path):
    with pytest.raises(BertCoreError, match="not AG News"):
        ag_news_csv_from_parquet(_ag_parquet(tmp_path / "a.parquet", rows=(("x", 7),)))


def test_a_damaged_archive_is_refused_with_what_to_do(tmp_path):
    bad = tmp_path / "p.tar.gz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(BertCoreError, match="delete it to download again"):
        polarity_csv_from_tarball(bad)
    with tarfile.open(tmp_path / "empty.tar.gz", "w:gz"):
        pass
    with pytest.raises(BertCoreError, match="lacks rt-polarity"):
        polarity_csv_from_tarball(tmp_path / "empty.tar.gz")


def test_fetch_downloads_once_converts_and_then_reads_the_cache(tmp_path):
    source = _polarity_tarball(tmp_path / "source.tar.gz")
    cache = tmp_path / "cache"
    seen = []
    path = fetch_task_csv("polarity", cache_dir=cache, url=source.as_uri(), use_shared=False,
                          progress=lambda done, total: seen.append((done, total)))
    assert path == cache / "polarity-download.csv" and len(load_classification_csv(path).texts) == 3
    assert seen[-1][0] == seen[-1][1] == source.stat().st_size
    assert (cache / "rt-polaritydata.tar.gz.sha256").is_file()  # kept on first use, checked on later ones
    assert local_task_csv("polarity", cache_dir=cache, use_shared=False) == path
    again = fetch_task_csv("polarity", cache_dir=cache, url="http://127.0.0.1:9/nowhere", use_shared=False)
    assert again == path  # nothing fetched the second time
    assert not list(cache.glob("*.part"))


def test_offline_fetch_says_so_and_leaves_nothing(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(BertCoreError, match="could not download"):
        fetch_task_csv("ag_news", cache_dir=cache, url="http://127.0.0.1:9/ag.parquet", use_shared=False)
    assert local_task_csv("ag_news", cache_dir=cache, use_shared=False) is None
    assert not [p for p in cache.rglob("*") if p.is_file()]


def test_unknown_task_is_refused():
    with pytest.raises(BertCoreError, match="choose one of polarity, ag_news"):
        fetch_task_csv("imdb")


def test_the_shared_copy_is_used_when_present(shared_data, tmp_path):
    assert local_task_csv("polarity", cache_dir=tmp_path) == shared_data / "sentence_polarity" / "polarity.csv"
    found = fetch_task_csv("ag_news", cache_dir=tmp_path, url="http://127.0.0.1:9/x")
    assert found == shared_data / "ag_news" / "news.csv"


def _task_at(monkeypatch, url):
    from dataclasses import replace

    from bert_core.data import task_downloads

    task = task_downloads.TASKS["polarity"]
    monkeypatch.setitem(task_downloads.TASKS, "polarity", replace(task, remote=replace(task.remote, url=url)))


def test_cli_download_fetches_a_task_into_the_cache(tmp_path, monkeypatch, capsys):
    from tests.test_bad_input import run_cli

    monkeypatch.setenv("BERT_SHARED_DATA", str(tmp_path / "absent"))
    monkeypatch.setenv("BERT_CORE_CACHE", str(tmp_path / "cache"))
    _task_at(monkeypatch, _polarity_tarball(tmp_path / "source.tar.gz").as_uri())
    code, err = run_cli(["download", "polarity"], capsys)
    assert code == 0, err
    assert (tmp_path / "cache" / "polarity-download.csv").is_file()


def test_cli_download_offline_is_one_error_line_naming_what_to_use_instead(tmp_path, monkeypatch, capsys):
    from tests.test_bad_input import assert_one_error_line, run_cli

    monkeypatch.setenv("BERT_SHARED_DATA", str(tmp_path / "absent"))
    monkeypatch.setenv("BERT_CORE_CACHE", str(tmp_path / "cache"))
    _task_at(monkeypatch, "http://127.0.0.1:9/rt-polaritydata.tar.gz")
    code, err = run_cli(["download", "polarity"], capsys)
    assert_one_error_line(code, err, ["could not download", "toy topics", "--csv"])


def test_finetune_takes_a_real_task_by_name(shared_data, capsys):
    from bert_core.training.finetune import load_task

    data = load_task(task="polarity")
    assert len(data) == 9000 and data.label_names == ["negative", "positive"]
    assert load_task(task="ag_news").label_names == ["World", "Sports", "Business", "Sci/Tech"]  # its classes.txt


def test_a_fetched_file_that_is_not_the_task_is_removed_so_the_next_try_starts_afresh(tmp_path):
    bad = tmp_path / "source.tar.gz"
    bad.write_bytes(b"an error page, not an archive")
    cache = tmp_path / "cache"
    with pytest.raises(BertCoreError, match="it was removed"):
        fetch_task_csv("polarity", cache_dir=cache, url=bad.as_uri(), use_shared=False)
    assert not (cache / "rt-polaritydata.tar.gz").exists() and local_task_csv("polarity", cache, False) is None
    good = _polarity_tarball(tmp_path / "good.tar.gz")  # the next try, with the real file, is not held to the bad one
    assert fetch_task_csv("polarity", cache_dir=cache, url=good.as_uri(), use_shared=False).is_file()


def test_visitors_fetching_together_make_one_download(tmp_path, monkeypatch):
    import threading

    from bert_core.data import downloads

    source = _polarity_tarball(tmp_path / "source.tar.gz")
    calls = []
    real = downloads.download
    monkeypatch.setattr(downloads, "download", lambda *a, **k: calls.append(1) or real(*a, **k))
    found = []
    threads = [threading.Thread(target=lambda: found.append(fetch_task_csv(
        "polarity", cache_dir=tmp_path / "cache", url=source.as_uri(), use_shared=False))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(set(found)) == 1 and len(found) == 8


CONLL = "Confidence NN B-NP\nin IN B-PP\nthe DT B-NP\npound NN I-NP\n\nIt PRP B-NP\nfell VBD B-VP\n. . O\n"


def _conll_gz(path, text=CONLL):
    import gzip

    with gzip.open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    return path


def test_conll2000_is_fetched_unzipped_checked_and_read_as_token_tags(tmp_path, monkeypatch, capsys):
    from dataclasses import replace

    from bert_core.cli.finetune import config_from_args, data_kind
    from bert_core.cli.main import build_parser
    from bert_core.data import task_downloads
    from bert_core.training.finetune import load_task

    cache = tmp_path / "cache"
    path = fetch_task_csv("conll2000", cache_dir=cache, url=_conll_gz(tmp_path / "train.txt.gz").as_uri(),
                          use_shared=False)
    assert path == cache / "conll2000-train.txt" and path.read_text() == CONLL
    assert task_downloads.TASKS["conll2000"].kind == "tags"
    # The CLI reads it as token tags, by its own loader, with the chunk or POS column.
    monkeypatch.setenv("BERT_SHARED_DATA", str(tmp_path / "absent"))
    monkeypatch.setenv("BERT_CORE_CACHE", str(cache))
    data = load_task(task="conll2000", tag_column="pos")
    assert data.words[0] == ["Confidence", "in", "the", "pound"] and "VBD" in data.tag_names
    args = build_parser().parse_args(["finetune", "--task", "conll2000"])
    assert data_kind(args) == "tags" and config_from_args(args).max_length == 128
    # A damaged download is refused, removed, and fetched again next time.
    task = task_downloads.TASKS["conll2000"]
    with pytest.raises(BertCoreError, match="not CoNLL-2000"):
        fetch_task_csv("conll2000", cache_dir=tmp_path / "c2",
                       url=_conll_gz(tmp_path / "bad.gz", "one-field-lines\nonly\n").as_uri(), use_shared=False)
    assert not (tmp_path / "c2" / task.remote.filename).exists()
    (tmp_path / "notgz").write_bytes(b"plain")
    with pytest.raises(BertCoreError, match="gzipped CoNLL"):
        fetch_task_csv("conll2000", cache_dir=tmp_path / "c3", url=(tmp_path / "notgz").as_uri(), use_shared=False)
    monkeypatch.setitem(task_downloads.TASKS, "conll2000", replace(task, remote=replace(
        task.remote, url="http://127.0.0.1:9/train.txt.gz")))
    with pytest.raises(BertCoreError, match="Upload a CoNLL file"):
        fetch_task_csv("conll2000", cache_dir=tmp_path / "c4", use_shared=False)


def test_without_the_shared_folder_the_page_offers_conll2000_and_a_fetch_box(tmp_path, monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BERT_SHARED_DATA", str(tmp_path / "absent"))
    monkeypatch.setenv("BERT_CORE_CACHE", str(tmp_path / "cache"))
    at = AppTest.from_file(str(Path(__file__).parent.parent / "pages" / "5_Fine-tune.py"), default_timeout=60)
    at.run()
    at.radio(key="ft_kind").set_value("tags").run()
    assert at.radio(key="ft_data").value == "conll2000", at.radio(key="ft_data").options
    assert any("not on this server yet" in i.value and "CoNLL-2000" in i.value for i in at.info)
    assert not at.exception


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_fetched_files_honour_the_umask_like_any_plain_file(tmp_path, umask):
    # A server's cache shared by its users (or a container volume): mkstemp's 0600 kept it from all but one.
    import os

    source = _polarity_tarball(tmp_path / "source.tar.gz")
    cache = tmp_path / "cache"
    before = os.umask(umask)
    try:
        fetch_task_csv("polarity", cache_dir=cache, url=source.as_uri(), use_shared=False)
    finally:
        os.umask(before)
    files = [p for p in cache.iterdir() if p.is_file()]
    assert files and {p.stat().st_mode & 0o777 for p in files} == {0o666 & ~umask}, \
        {p.name: oct(p.stat().st_mode & 0o777) for p in files}
