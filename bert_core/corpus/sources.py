"""Reading the public collections of issue 60 into `SourceDocument` records: a folder or a bare git directory (as the
`fetch` tool brings a GitHub repository) of one of KINDS, known by its file names (docs/corpus.md, "Sources"); a
document is a book, a story, a post, an article or a file. A git directory is read with `git ls-tree` and
`git cat-file --batch` (no work tree, nothing written); files its copy lacks (4 MiB and over, Git LFS) are counted as
absent, never guessed.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bert_core.corpus.cleaning import gutenberg_language, is_english, newsgroup_body, paragraphs, strip_gutenberg
from bert_core.errors import BertCoreError

KINDS = ("gutenberg", "reuters", "newsgroups", "bbc", "nltk", "text")

# NLTK's English running text not already elsewhere in the project (docs/corpus.md says why each other is left out),
# each mapped to the members read as text.
NLTK_CORPORA = {
    "webtext": r"webtext/[^/]+\.txt$",
    "inaugural": r"inaugural/[^/]+\.txt$",
    "treebank": r"treebank/raw/wsj_\d+$",
    "genesis": r"genesis/english-kjv\.txt$",
    "udhr": r"udhr/English-Latin1$",
}


@dataclass(frozen=True)
class SourceFile:
    """A file of a source: its path inside the source, its size in bytes (None when the copy lacks it)."""

    path: str
    size: int | None


@dataclass
class SourceDocument:
    """One document read from a source, before the corpus-wide steps (duplicates, caps, contamination)."""

    source: str      # the source's name in the build (its kind, or kind-2 for a second source of a kind)
    group: str       # the author (Gutenberg), topic or newsgroup (news), corpus (nltk), folder (text)
    name: str        # the file path (and the story number for Reuters) inside the source
    paragraphs: list[str]
    note: str = ""   # why it is dropped already ("not English", "no Gutenberg markers"); empty when kept

    @property
    def words(self) -> int:
        return sum(len(p.split()) for p in self.paragraphs)


def _is_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


class SourceTree:
    """The files of a folder or of a bare git directory's HEAD, read the same way."""

    def __init__(self, path: str | Path):
        p = Path(path).expanduser()
        if not p.exists():
            raise BertCoreError(f"source {path} does not exist; give a folder or a bare git directory")
        if not p.is_dir():
            raise BertCoreError(f"source {path} is not a folder; give a folder or a bare git directory")
        if not _is_git_dir(p) and _is_git_dir(p / ".git") and not any(c.name != ".git" for c in p.iterdir()):
            p = p / ".git"  # a clone with no work tree checked out
        self.path = p
        self.is_git = _is_git_dir(p)
        self._files: list[SourceFile] | None = None

    def _git(self, *args: str, input_bytes: bytes | None = None) -> bytes:
        r = subprocess.run(["git", f"--git-dir={self.path}", *args], input=input_bytes, capture_output=True)
        if r.returncode != 0:
            raise BertCoreError(f"git could not read {self.path}: {r.stderr.decode(errors='replace').strip()}")
        return r.stdout

    def files(self) -> list[SourceFile]:
        """Every file, sorted by path (hidden files and folders left out)."""
        if self._files is None:
            if self.is_git:
                out = self._git("ls-tree", "-r", "-l", "-z", "HEAD")
                files, self._blobs = [], {}
                for entry in out.split(b"\0"):
                    if not entry:
                        continue
                    meta, name = entry.split(b"\t", 1)
                    mode, kind, sha, size = meta.split()
                    if kind != b"blob":
                        continue
                    path = name.decode("utf-8", errors="surrogateescape")
                    self._blobs[path] = sha.decode()
                    files.append(SourceFile(path, int(size) if size.isdigit() else None))  # "BAD": not in the copy
                present = self._present({self._blobs[f.path] for f in files})
                files = [f if self._blobs[f.path] in present else SourceFile(f.path, None) for f in files]
            else:
                files = [SourceFile(p.relative_to(self.path).as_posix(), p.stat().st_size)
                         for p in self.path.rglob("*") if p.is_file()]
            self._files = sorted((f for f in files if not any(part.startswith(".") for part in f.path.split("/"))),
                                 key=lambda f: f.path)
        return self._files

    def _present(self, shas: set[str]) -> set[str]:
        out = self._git("cat-file", "--batch-check", input_bytes="".join(s + "\n" for s in sorted(shas)).encode())
        return {ln.split()[0] for ln in out.decode().splitlines() if not ln.endswith("missing")}

    def read_many(self, paths: list[str]) -> Iterator[tuple[str, bytes]]:
        """(path, bytes) of each present file in `paths`, in order, with one git process for a git directory."""
        if not self.is_git:
            for path in paths:
                yield path, (self.path / path).read_bytes()
            return
        shas = [self._blobs[p] for p in paths]
        proc = subprocess.Popen(["git", f"--git-dir={self.path}", "cat-file", "--batch"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        try:
            for path, sha in zip(paths, shas):
                proc.stdin.write(sha.encode() + b"\n")
                proc.stdin.flush()
                header = proc.stdout.readline().split()
                if len(header) != 3:
                    raise BertCoreError(f"git could not read {path} in {self.path}")
                data = proc.stdout.read(int(header[2]))
                proc.stdout.read(1)  # the newline after each object
                yield path, data
        finally:
            proc.stdin.close()
            proc.wait()


def decode_text(data: bytes, where: str) -> str:
    """Bytes as text: UTF-8 (a byte-order mark dropped), else Latin-1 as older Gutenberg files are; a NUL byte
    means the file is not text at all, and the build stops rather than read a binary into the corpus."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise BertCoreError(f"{where} is not a text file (a NUL byte at offset {nul}); remove it from the source or "
                            "name a folder that holds only text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


_REUTERS = re.compile(r"(?:^|/)reut2-\d+\.json$")
_NEWSGROUPS = re.compile(r"(?:^|/)20news-bydate-(?:train|test)/([^/]+)/[^/]+$")
_BBC = re.compile(r"(?:^|/)bbc/([^/]+)/\d+\.txt$")
_NLTK = re.compile(r"(?:^|/)packages/corpora/([^/]+)\.zip$")


def detect_kind(tree: SourceTree) -> str:
    """The kind of a source, from the names of its files."""
    paths = [f.path for f in tree.files()]
    for kind, pattern in (("reuters", _REUTERS), ("newsgroups", _NEWSGROUPS), ("bbc", _BBC), ("nltk", _NLTK)):
        if any(pattern.search(p) for p in paths):
            return kind
    txt = [p for p in paths if p.lower().endswith(".txt")]
    if not txt:
        raise BertCoreError(f"source {tree.path} holds no text of a known kind (no .txt files, Reuters JSON, "
                            "20 Newsgroups or NLTK corpora); give a folder of text files")
    # A folder per author of Gutenberg books: look at a few files' heads for the licence's name.
    heads = [decode_text(data[:4000], p) for p, data in tree.read_many(txt[:5])]
    return "gutenberg" if any("Project Gutenberg" in h for h in heads) else "text"


def parse_source(spec: str) -> tuple[str | None, str]:
    """(kind or None, path) of a SOURCE argument: `PATH`, or `KIND:PATH` to name its kind."""
    head, sep, tail = spec.partition(":")
    if sep and head in KINDS:
        return head, tail
    return None, spec


def read_documents(tree: SourceTree, kind: str, name: str, skipped: dict) -> Iterator[SourceDocument]:
    """The documents of a source of `kind`, in path order. `skipped` counts the files passed over, by reason."""
    if kind not in KINDS:
        raise BertCoreError(f"unknown source kind {kind!r}; use one of {', '.join(KINDS)}")
    files = tree.files()

    def skip(reason: str, n: int = 1) -> None:
        skipped[reason] = skipped.get(reason, 0) + n

    pattern = {"gutenberg": re.compile(r"\.txt$", re.I), "text": re.compile(r"\.txt$", re.I),
               "reuters": _REUTERS, "newsgroups": _NEWSGROUPS, "bbc": _BBC, "nltk": _NLTK}[kind]
    wanted = []
    for f in files:
        if not pattern.search(f.path):
            skip("not a file of this kind")
        elif f.size is None:
            skip("absent from the copy (Git LFS or 4 MiB and over)")
        elif kind == "nltk" and _NLTK.search(f.path).group(1) not in NLTK_CORPORA:
            skip("an NLTK corpus not read (see NLTK_CORPORA)")
        else:
            wanted.append(f.path)
    for path, data in tree.read_many(wanted):
        if kind == "nltk":
            yield from _nltk_documents(name, path, data)
        elif kind == "reuters":
            yield from _reuters_documents(name, path, data)
        else:
            yield _file_document(kind, name, path, decode_text(data, f"{tree.path}/{path}"))


def _group(kind: str, path: str) -> str:
    for pattern in (_NEWSGROUPS, _BBC):
        m = pattern.search(path)
        if m and kind in ("newsgroups", "bbc"):
            return m.group(1)
    parts = path.split("/")
    return parts[-2] if len(parts) > 1 else "."


def _file_document(kind: str, name: str, path: str, text: str) -> SourceDocument:
    note = ""
    if kind == "gutenberg":
        language = gutenberg_language(text)
        text, marked = strip_gutenberg(text)
        if not marked:
            note = "no Gutenberg start and end markers"
        elif language is not None and not language.startswith("english"):
            note = f"not English (its header says {language})"
    elif kind == "newsgroups":
        text = newsgroup_body(text)
    paras = paragraphs(text)
    if kind == "bbc" and paras:
        paras[0] = paras[0].rstrip(".") + "."  # the headline, as a sentence of its own
    if not note and paras and not is_english(" ".join(paras[:200])):
        note = "not English (too few English function words)"
    return SourceDocument(source=name, group=_group(kind, path), name=path, paragraphs=paras, note=note)


def _reuters_documents(name: str, path: str, data: bytes) -> Iterator[SourceDocument]:
    try:
        stories = json.loads(decode_text(data, path))
    except json.JSONDecodeError as e:
        raise BertCoreError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}); is it a complete copy?") from e
    for story in stories if isinstance(stories, list) else []:
        body = story.get("body") if isinstance(story, dict) else None
        if not body:
            continue
        body = re.sub(r"\s*Reuter\s*\x03?\s*$", "", body)  # the wire's sign-off
        # Paragraphs in the wire copy start with an indented line; blank lines are rare.
        text = re.sub(r"\n(?=\s{2,}\S)", "\n\n", body)
        title = (story.get("title") or "").strip()
        paras = ([title.rstrip(".") + "."] if title else []) + paragraphs(text)
        newid = (story.get("attrs") or {}).get("newid", "?")
        yield SourceDocument(source=name, group="reuters", name=f"{path}#{newid}", paragraphs=paras)


def _nltk_documents(name: str, path: str, data: bytes) -> Iterator[SourceDocument]:
    corpus = _NLTK.search(path).group(1)
    member = re.compile(NLTK_CORPORA[corpus])
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as e:
        raise BertCoreError(f"{path} is not a zip archive ({e}); is it a complete copy?") from e
    for info in sorted(archive.infolist(), key=lambda i: i.filename):
        if info.is_dir() or not member.search(info.filename):
            continue
        text = decode_text(archive.read(info), f"{path}:{info.filename}")
        if corpus == "treebank":
            text = text.replace(".START", "")
        paras = paragraphs(text)
        if corpus == "webtext":
            # Chat logs and reviews: a line is an utterance, not a wrapped line of a paragraph.
            paras = [ln.strip() for ln in text.splitlines() if len(ln.split()) >= 3]
        yield SourceDocument(source=name, group=corpus, name=f"{path}:{info.filename}", paragraphs=paras)
