"""The real fine-tuning tasks fetched from their public homes, so that a fresh clone or a Space races on them: each
downloaded once (downloads.cached_download), then converted beside it into the file its loader reads like any
upload (a `label,text` CSV, or a CoNLL text file). The shared data folder's copy is used instead when it is there."""

from __future__ import annotations

import csv
import gzip
import html
import io
import re
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bert_core.data.downloads import Progress, RemoteFile, cache_path, fetch_checked, parquet_columns
from bert_core.errors import BertCoreError
from bert_core.model.files import write_text_atomic
from bert_core.paths import shared_data_dir


def clean_ag_news_text(text: str) -> str:
    """Undo AG News's escapes: `\\` for line breaks, `#39;`-style and HTML entities, stray <b> tags."""
    text = re.sub(r"(?<![&\w])#(\d+);", r"&#\1;", text)  # the crawl lost the '&' of numeric entities
    text = re.sub(r"(?<![&\w])quot;", "&quot;", text)
    text = html.unescape(text)  # HTML5 rules map &#151; etc. through cp1252, as the crawl meant
    text = re.sub(r"</?[A-Za-z][^<>]{0,500}>", " ", text)
    text = text.replace("\\", " ")
    return re.sub(r"\s+", " ", text).strip()


@dataclass(frozen=True)
class RemoteTask:
    """A labelled task online: the file to fetch, its converted file's name in the cache, and the shared copy."""

    label: str
    remote: RemoteFile
    csv_name: str      # the converted file in the cache (a CSV, or a CoNLL text file for token tags)
    shared_copy: str
    home: str  # the page that describes it, for people
    approx_mb: float
    convert: Callable[[Path], str]   # the fetched file's content as the file its loader reads
    kind: str = "labels"   # the kind of fine-tuning it is for: "labels" (a CSV) or "tags" (a CoNLL file)


AG_NEWS_CLASSES = ("World", "Sports", "Business", "Sci/Tech")


def _csv_text(rows: list[tuple[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("label", "text"))
    writer.writerows(rows)
    return out.getvalue()


def polarity_csv_from_tarball(path: str | Path) -> str:
    """Pang and Lee's rt-polaritydata.tar.gz as a `label,text` CSV (labels "negative" and "positive")."""
    rows: dict[str, list[str]] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if member.isfile() and name in ("rt-polarity.pos", "rt-polarity.neg"):
                    raw = tar.extractfile(member).read()  # read in memory: nothing of the archive reaches the disk
                    rows[name[-3:]] = [" ".join(line.split()) for line in raw.decode("cp1252", "replace").splitlines()]
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BertCoreError(f"{path} is not a readable .tar.gz archive ({exc}); delete it to download again") from exc
    if set(rows) != {"pos", "neg"}:
        raise BertCoreError(f"{path} lacks rt-polarity.pos and rt-polarity.neg; delete it to download again")
    return _csv_text([("negative", t) for t in rows["neg"] if t] + [("positive", t) for t in rows["pos"] if t])


def ag_news_csv_from_parquet(path: str | Path) -> str:
    """Hugging Face's AG News parquet file as a `label,text` CSV (labels World, Sports, Business, Sci/Tech)."""
    rows = []
    for text, label in zip(*parquet_columns(path, ["text", "label"], "AG News")):
        if not isinstance(label, int) or not 0 <= label < len(AG_NEWS_CLASSES) or not text:
            raise BertCoreError(f"{path} has a row that is not AG News (label {label!r}); delete it to download again")
        rows.append((AG_NEWS_CLASSES[label], " ".join(clean_ag_news_text(text).split())))
    return _csv_text(rows)


def conll_text_from_gzip(path: str | Path) -> str:
    """CoNLL-2000's train.txt.gz as its text, checked: every non-blank line `word POS chunk`, sentences between
    blank lines."""
    try:
        with gzip.open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise BertCoreError(f"{path} is not a readable gzipped CoNLL file ({exc}); delete it to download again") \
            from exc
    lines = [line for line in text.splitlines() if line.strip()]
    bad = next((line for line in lines if len(line.split()) < 3), None)
    if not lines or bad is not None:
        raise BertCoreError(f"{path} is not CoNLL-2000's `word POS chunk` lines"
                            + (f" (a line reads {bad[:60]!r})" if bad else " (it is empty)")
                            + "; delete it to download again")
    return text if text.endswith("\n") else text + "\n"


TASKS: dict[str, RemoteTask] = {
    # Pang and Lee's sentence polarity dataset v1.0: 5,331 positive and 5,331 negative review snippets, one per
    # line, lower-cased and tokenised, in Windows-1252. The shared folder's polarity.csv is 9,000 of them.
    "polarity": RemoteTask(
        label="Movie-review polarity (Pang and Lee 2005, 10,662 sentences)",
        remote=RemoteFile(url="https://www.cs.cornell.edu/people/pabo/movie-review-data/rt-polaritydata.tar.gz",
                          filename="rt-polaritydata.tar.gz", sha256=None),
        csv_name="polarity-download.csv", shared_copy="sentence_polarity/polarity.csv",
        home="https://www.cs.cornell.edu/people/pabo/movie-review-data/", approx_mb=0.5,
        convert=polarity_csv_from_tarball),
    # AG News's test split (7,600 rows, 1,900 per class) as Hugging Face serves it: `text` (title and description
    # joined) and `label` 0-3. The shared folder's news.csv is 6,000 rows of the same split.
    "ag_news": RemoteTask(
        label="AG News topics (Zhang et al. 2015, test split, 7,600 rows)",
        remote=RemoteFile(url="https://huggingface.co/datasets/fancyzhx/ag_news/resolve/main/data/"
                              "test-00000-of-00001.parquet",
                          filename="ag_news-test.parquet", sha256=None),
        csv_name="ag_news-download.csv", shared_copy="ag_news/news.csv",
        home="https://huggingface.co/datasets/fancyzhx/ag_news", approx_mb=1.2, convert=ag_news_csv_from_parquet),
    # CoNLL-2000's chunking training split: 8,936 Wall Street Journal sentences, `word POS chunk` a line, gzipped.
    # The shared folder's conll2000/train.txt is the same file.
    "conll2000": RemoteTask(
        label="CoNLL-2000 chunks (Tjong Kim Sang and Buchholz 2000, training split, 8,936 sentences)",
        remote=RemoteFile(url="https://www.clips.uantwerpen.be/conll2000/chunking/train.txt.gz",
                          filename="conll2000-train.txt.gz", sha256=None),
        csv_name="conll2000-train.txt", shared_copy="conll2000/train.txt",
        home="https://www.clips.uantwerpen.be/conll2000/chunking/", approx_mb=0.6, kind="tags",
        convert=conll_text_from_gzip),
}

# One server process fetches one task at a time: the cache is the process's (and the machine's) shared resource.
_FETCHING = threading.Lock()


def local_task_csv(name: str, cache_dir: str | Path | None = None, use_shared: bool = True) -> Path | None:
    """The task's CSV already on this machine (the shared copy, else the converted download), or None."""
    task = TASKS[name]
    shared = shared_data_dir() if use_shared else None
    if shared is not None and (shared / task.shared_copy).is_file():
        return shared / task.shared_copy
    converted = cache_path(cache_dir, task.csv_name)
    return converted if converted.is_file() else None


def fetch_task_csv(name: str, cache_dir: str | Path | None = None, progress: Progress | None = None,
                   url: str | None = None, use_shared: bool = True) -> Path:
    if name not in TASKS:
        raise BertCoreError(f"no download known for the task {name!r}; choose one of {', '.join(TASKS)}")
    with _FETCHING:  # thirty visitors pressing Fetch together make one download; the others then find its CSV
        found = local_task_csv(name, cache_dir, use_shared)
        return found if found is not None else _fetch(TASKS[name], cache_dir, progress, url)


def _fetch(task: RemoteTask, cache_dir, progress: Progress | None, url: str | None) -> Path:
    instead = ("bring a local copy as a CoNLL file (finetune --conll FILE, or the page's Upload a CoNLL file)"
               if task.kind == "tags" else "fine-tune on the built-in toy topics or word-order task, or bring a "
               "local copy as a label,text CSV (finetune --csv FILE, or the page's Upload a CSV)")
    raw, text = fetch_checked(task.remote, task.label, task.convert, cache_dir, progress, url, offline_hint=instead)
    # Whole or absent: a visitor never reads half a file, two writers never mix.
    return write_text_atomic(raw.with_name(task.csv_name), text)
