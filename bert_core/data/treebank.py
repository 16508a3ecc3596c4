"""Dependency trees from a CoNLL-U file (Universal Dependencies): each word, its syntactic head and the relation
between them. UD English EWT's development split (CC BY-SA 4.0) is fetched once from its public home like the other
tasks (downloads.cached_download, its sha256 pinned) and read by the syntax heads (inspect.syntax_heads)."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path

from bert_core.data.downloads import Progress, RemoteFile, cache_path, fetch_checked
from bert_core.errors import BertCoreError

COLUMNS = 10   # ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC, separated by tabs


@dataclass(frozen=True)
class DependencySentence:
    words: tuple[str, ...]
    heads: tuple[int, ...]       # each word's head: the head's word number, counted from 1; 0 for the root
    relations: tuple[str, ...]   # the UD relation to the head, its subtype kept ("nsubj:pass")


def parse_conllu(text: str, source: str = "<text>") -> list[DependencySentence]:
    """The sentences of a CoNLL-U text. Multiword tokens (ids `3-4`: "don't" over "do" and "n't") and empty nodes
    (ids `8.1`, enhanced graphs only) are skipped: the basic tree joins the words between them."""
    sentences: list[DependencySentence] = []
    rows: list[tuple[int, str, int, str]] = []   # (line number, form, head, relation) of the sentence being read

    def close() -> None:
        for line_no, _, head, _ in rows:
            if head > len(rows):
                raise BertCoreError(f"{source}, line {line_no}: the head {head} is not a word of its sentence (it "
                                    f"has {len(rows)} words)")
        sentences.append(DependencySentence(*(tuple(r[i] for r in rows) for i in (1, 2, 3))))
        rows.clear()

    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            if rows:
                close()
            continue
        if line.startswith("#"):
            continue
        cells = line.split("\t")
        if len(cells) != COLUMNS:
            raise BertCoreError(f"{source}, line {line_no} has {len(cells)} column{'s' * (len(cells) != 1)}; a "
                                f"CoNLL-U word line has {COLUMNS}, separated by tabs (it reads {line[:60]!r})")
        word_id, form, head, relation = cells[0], cells[1], cells[6], cells[7]
        if "-" in word_id or "." in word_id:
            continue
        if not word_id.isdigit() or int(word_id) != len(rows) + 1:
            raise BertCoreError(f"{source}, line {line_no}: the word id {word_id!r} should be {len(rows) + 1} (a "
                                "sentence's words are numbered 1, 2, 3… and a blank line ends it)")
        if not head.isdigit() or relation in ("", "_"):
            raise BertCoreError(f"{source}, line {line_no}: a word needs its head's number and a relation "
                                f"(columns 7 and 8 read {head!r} and {relation!r})")
        rows.append((line_no, form, int(head), relation))
    if rows:
        close()
    if not sentences:
        raise BertCoreError(f"{source} holds no CoNLL-U sentences (tab-separated word lines, a blank line after "
                            "each sentence)")
    return sentences


@functools.lru_cache(maxsize=2)
def read_conllu(path: str | Path) -> list[DependencySentence]:
    """parse_conllu on a file (kept: a treebank is read once for every model and visitor)."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BertCoreError(f"{path} is not UTF-8 text, as CoNLL-U files are") from exc
    return parse_conllu(text, str(path))


# Release 2.16 of the treebank, its development split: 2,001 sentences, 25,147 words of web text (blogs, reviews,
# e-mail, questions and answers). The tag pins the file; the digest was computed from the release's copy.
UD_EWT = RemoteFile(url="https://raw.githubusercontent.com/UniversalDependencies/UD_English-EWT/r2.16/"
                        "en_ewt-ud-dev.conllu",
                    filename="en_ewt-ud-2.16-dev.conllu",
                    sha256="531a54ff90d6ab12201c5a50c3e78e6ddac4de69abc4bce5d275d3cd29efe2b6")
UD_EWT_LABEL = "Universal Dependencies English EWT (release 2.16, development split, 2,001 sentences)"
UD_EWT_HOME = "https://universaldependencies.org/treebanks/en_ewt/"
UD_EWT_MB = 1.8
UD_EWT_NAME = "ud-english-ewt"   # its name for `python -m bert_core download`

_FETCHING = threading.Lock()   # thirty visitors pressing Fetch together make one download


def local_treebank(cache_dir: str | Path | None = None) -> Path | None:
    """UD English EWT's file already in the cache, or None."""
    path = cache_path(cache_dir, UD_EWT.filename)
    return path if path.is_file() else None


def fetch_treebank(cache_dir: str | Path | None = None, progress: Progress | None = None,
                   url: str | None = None) -> Path:
    """UD English EWT's file in the cache, downloaded and checked on first use (a file that is not CoNLL-U removed)."""
    with _FETCHING:
        return fetch_checked(UD_EWT, UD_EWT_LABEL, read_conllu, cache_dir, progress, url,
                             offline_hint="download it on a machine that is online and copy it here")[0]
