"""Downloading the public corpora once: progress reports, sha256 checks, an atomic write into the user cache."""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import socket
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bert_core.errors import BertCoreError
from bert_core.model.files import plain_file_mode
from bert_core.paths import cache_dir as default_cache_dir
from bert_core.paths import shared_data_dir

Progress = Callable[[int, "int | None"], None]
CHUNK_BYTES = 1 << 16


@dataclass(frozen=True)
class RemoteFile:
    """Where a corpus lives online, its file name in the cache, and its pinned sha256 (None: not pinned yet)."""

    url: str
    filename: str
    sha256: str | None
    shared_copy: str | None = None  # the same text under the shared data folder, used instead of downloading


SOURCES: dict[str, RemoteFile] = {
    # The char-rnn copy; the shared folder's tinyshakespeare/input.txt is the same file (checksum computed from it).
    "tinyshakespeare": RemoteFile(
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        filename="tinyshakespeare.txt", sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        shared_copy="tinyshakespeare/input.txt"),
    # WikiText-2 raw, training split, as Hugging Face serves it (the original S3 zip is gone). Not pinned: this
    # machine has no internet, so the digest could not be computed. The first online download records its
    # sha256 beside the file and later loads check against that; confirm it and pin it here.
    "wikitext-2": RemoteFile(
        url="https://huggingface.co/datasets/Salesforce/wikitext/resolve/main/wikitext-2-raw-v1/"
            "train-00000-of-00001.parquet",
        filename="wikitext-2-raw-v1-train.parquet", sha256=None),
    # NLTK's tagged Brown corpus (500 texts); converted to one sentence per line. Not pinned, as above.
    "brown": RemoteFile(
        url="https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/brown.zip",
        filename="brown.zip", sha256=None, shared_copy="brown/brown.txt"),
}


def sha256_of(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(url: str, dest: str | Path, sha256: str | None = None, progress: Progress | None = None,
             timeout: float = 30.0, offline_hint: str | None = None) -> str:
    """Download `url` to `dest` atomically (a temp file renamed only once complete and verified), telling
    `progress(done_bytes, total_bytes_or_None)`; return its sha256. A checksum mismatch or a cut connection raises
    BertCoreError and leaves nothing at `dest`; `offline_hint` says what to use instead."""
    dest = Path(dest)
    progress = progress or (lambda done, total: None)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    os.fchmod(fd, plain_file_mode())   # mkstemp's 0600 would keep a shared cache from every other user
    tmp = Path(tmp_name)
    done, total = 0, None
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                request = urllib.request.Request(url, headers={"User-Agent": "bert_core"})
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    length = response.headers.get("Content-Length")
                    total = int(length) if length and length.isdigit() else None
                    h = hashlib.sha256()
                    progress(0, total)
                    for block in iter(lambda: response.read(CHUNK_BYTES), b""):
                        out.write(block)
                        h.update(block)
                        done += len(block)
                        progress(done, total)
            except urllib.error.HTTPError as exc:
                raise BertCoreError(f"downloading {url} failed with HTTP {exc.code} ({exc.reason}); the file may have "
                                    "moved: use a local copy (pass its path) or the 'toy' corpus") from exc
            except http.client.IncompleteRead as exc:
                raise BertCoreError(f"the download of {url} was interrupted after {len(exc.partial) + done} bytes; "
                                    "nothing was kept, run it again") from exc
            except (urllib.error.URLError, socket.timeout, ConnectionError, http.client.HTTPException) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                raise BertCoreError(f"could not download {url} ({reason}). If this machine is offline, " + (
                    offline_hint or "use the built-in 'toy' corpus, or a local copy of the text: pass its file path "
                    "instead of the corpus name") + f", or put the file at {dest}") from exc
        if total is not None and done != total:
            raise BertCoreError(f"the download of {url} was interrupted after {done} of {total} bytes; "
                                "nothing was kept, run it again")
        digest = h.hexdigest()
        if sha256 is not None and digest != sha256.lower():
            raise BertCoreError(f"checksum mismatch for {url}: expected sha256 {sha256}, got {digest}. The download was "
                                "corrupted or the file changed upstream; nothing was kept. Try again, or pass a local copy")
        os.replace(tmp, dest)
        return digest
    finally:
        if tmp.exists():
            tmp.unlink()


def cache_path(cache_dir: str | Path | None, filename: str) -> Path:
    return (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / filename


def cached_download(remote: RemoteFile, cache_dir: str | Path | None = None, progress: Progress | None = None,
                    url: str | None = None, offline_hint: str | None = None) -> Path:
    """Path of `remote`'s file in the cache, downloaded on first use and checked against its pinned sha256, else
    against the digest recorded beside it by the first download (trusted on first use until pinned); a damaged or
    foreign file in the cache is fetched again."""
    dest = cache_path(cache_dir, remote.filename)
    recorded = dest.with_name(dest.name + ".sha256")
    expected = remote.sha256 or (recorded.read_text().strip() if recorded.is_file() else None) or None
    if dest.is_file() and expected is not None and sha256_of(dest) != expected:
        dest.unlink()
    if not dest.is_file():
        digest = download(url or remote.url, dest, sha256=expected, progress=progress, offline_hint=offline_hint)
        if remote.sha256 is None:
            recorded.write_text(digest + "\n")
    return dest


def fetch_checked(remote: RemoteFile, label: str, check: Callable, cache_dir: str | Path | None = None,
                  progress: Progress | None = None, url: str | None = None, offline_hint: str | None = None) -> tuple:
    """(path, `check(path)`) of `remote`'s cached download. One that fails the check (an error page, when the digest
    is not pinned) is removed with its recorded digest: a visitor cannot delete a server's file, the next try can."""
    raw = cached_download(remote, cache_dir, progress, url, offline_hint=offline_hint)
    try:
        return raw, check(raw)
    except BertCoreError as exc:
        raw.unlink(missing_ok=True)
        raw.with_name(raw.name + ".sha256").unlink(missing_ok=True)
        raise BertCoreError(f"the file fetched for {label} was not what was expected ({exc}); it was removed, "
                            "so fetching again starts afresh") from exc


def fetch(name: str, cache_dir: str | Path | None = None, progress: Progress | None = None,
          url: str | None = None) -> Path:
    """Path of corpus `name`'s file in the cache, downloading and verifying it on first use (cached_download)."""
    if name not in SOURCES:
        raise BertCoreError(f"no download known for {name!r}; choose one of {', '.join(SOURCES)}")
    return cached_download(SOURCES[name], cache_dir, progress, url)


def parquet_columns(path: str | Path, columns: list[str], what: str) -> list[list]:
    """The `columns` of a Hugging Face parquet file of `what` ("WikiText"), each as a list."""
    try:   # an optional dependency, needed only for this file type: imported where it is used
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise BertCoreError(f"reading {what}'s parquet file needs pyarrow: pip install pyarrow") from exc
    try:
        table = pq.read_table(str(path), columns=columns)
    except Exception as exc:  # pyarrow raises its own error types for damaged files
        raise BertCoreError(f"{path} is not a readable {what} parquet file ({exc}); delete it to download again") from exc
    return [table.column(c).to_pylist() for c in columns]


def wikitext_text_from_parquet(path: str | Path) -> str:
    """The WikiText lines of a Hugging Face parquet file (one row per line) as one text."""
    [column] = parquet_columns(path, ["text"], "WikiText")
    return "".join(line if line.endswith("\n") else line + "\n" for line in column if line is not None)


_BROWN_FILE = re.compile(r"(^|/)c[a-r]\d\d$")


def brown_text_from_zip(path: str | Path) -> str:
    """NLTK's tagged Brown corpus zip as plain text: tags removed, one sentence per line, a blank line between texts."""
    docs = []
    try:
        with zipfile.ZipFile(path) as z:
            for member in sorted(n for n in z.namelist() if _BROWN_FILE.search(n)):
                raw = z.read(member).decode("utf-8", errors="replace")
                sentences = [" ".join(w.rsplit("/", 1)[0] for w in line.split()).replace("``", '"').replace("''", '"')
                             for line in raw.split("\n") if line.split()]
                if sentences:
                    docs.append("\n".join(sentences))
    except zipfile.BadZipFile as exc:
        raise BertCoreError(f"{path} is not a valid zip file; delete it to download again") from exc
    if not docs:
        raise BertCoreError(f"{path} holds no Brown texts (files named ca01..cr09); delete it to download again")
    return "\n\n".join(docs) + "\n"


def fetch_corpus_text(name: str, cache_dir: str | Path | None = None, progress: Progress | None = None,
                      url: str | None = None, use_shared: bool = True) -> tuple[str, str]:
    """(text, where it came from) for a named corpus: the shared data copy when present, else the download cache."""
    src = SOURCES.get(name)
    if src is None:
        raise BertCoreError(f"no download known for {name!r}; choose one of {', '.join(SOURCES)}")
    shared = shared_data_dir() if use_shared else None
    if shared is not None and src.shared_copy and (shared / src.shared_copy).is_file():
        copy = shared / src.shared_copy
        # The shared tinyshakespeare is the downloaded file itself; brown.txt is already converted text.
        if src.sha256 is None or sha256_of(copy) == src.sha256:
            return copy.read_text(encoding="utf-8"), str(copy)
    path = fetch(name, cache_dir=cache_dir, progress=progress, url=url)
    try:
        text = {"wikitext-2": wikitext_text_from_parquet, "brown": brown_text_from_zip}.get(
            name, lambda p: p.read_text(encoding="utf-8"))(path)
    except UnicodeDecodeError as exc:
        raise BertCoreError(f"{path} is not UTF-8 text; delete it to download again") from exc
    return text, f"{src.url} (cached at {path})"

