"""Corpora as documents of sentences: the built-in toy stories, downloadable classics, and any UTF-8 text a user gives."""

from __future__ import annotations

import dataclasses
import math
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bert_core.data.downloads import fetch_corpus_text
from bert_core.data.toy_grammar import generate_toy_documents
from bert_core.errors import BertCoreError

MAX_INPUT_BYTES = 50 * 1024 * 1024
# A "sentence" longer than this (a file without punctuation, or one line of 50 MB) is cut at spaces into pieces
# of at most this many characters. No real sentence comes near it (the longest in the shared corpora is about
# 3,000), and a piece already fills a 512-token sequence, but it bounds the tokenizer's memory per call and the
# pair-building work per sentence, which grow with the sentence's length (a 50 MB line took gigabytes).
MAX_SENTENCE_CHARS = 10_000
TOY_CORPUS = "toy"   # the generated toy grammar, as a run records it
NAMED_CORPORA = (TOY_CORPUS, "tinyshakespeare", "wikitext-2", "brown")


@dataclass
class Corpus:
    """A named corpus: a list of documents, each a list of sentences (NSP pairs never cross a document)."""

    name: str
    documents: list[list[str]]
    source: str = ""

    @property
    def num_documents(self) -> int:
        return len(self.documents)

    @property
    def num_sentences(self) -> int:
        return sum(len(d) for d in self.documents)

    @property
    def num_words(self) -> int:
        return sum(len(s.split()) for d in self.documents for s in d)

    def texts(self) -> Iterator[str]:
        for doc in self.documents:
            yield from doc

    def __repr__(self) -> str:
        return (f"Corpus({self.name!r}, {self.num_documents} documents, {self.num_sentences} sentences, "
                f"{self.num_words} words)")


# -- sentence splitting ------------------------------------------------------------------------------
# Words ending in "." that rarely end a sentence. Compared lower-cased, without the final dot.
ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc e.g i.e cf al fig figs no nos vol vols ch chap sec approx dept est "
    "inc ltd co corp gen col lt sgt capt rev hon gov sen rep mt ft jan feb mar apr jun jul aug sep sept oct "
    "nov dec a.m p.m u.s u.k u.n ph.d b.a m.a".split()
)
_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s|$)")
_OPENERS = "\"'\u201c\u2018([`"


def split_sentences(paragraph: str) -> list[str]:
    """Split a paragraph into sentences by rule: at . ! ? before a capital, digit or quote, not after Mr./e.g./initials."""
    text = " ".join(paragraph.split())
    if not text:
        return []
    sentences, start = [], 0
    for m in _END.finditer(text):
        end = m.end()
        rest = text[end:].lstrip()
        if not rest:
            break
        word = text[text.rfind(" ", 0, m.start()) + 1: m.start()].lstrip(_OPENERS)
        standalone = m.start() > 0 and text[m.start() - 1] == " "  # tokenised text: "end of it ."
        if m.group().startswith(".") and m.group().rstrip("\"'\u201d\u2019)]") == "." and not standalone:
            if word.lower() in ABBREVIATIONS or re.fullmatch(r"[A-Za-z]", word) or re.fullmatch(r"([A-Za-z]\.)+[A-Za-z]", word):
                continue
        nxt = rest[0]
        if nxt.isupper() or nxt.isdigit() or nxt in _OPENERS or (standalone and nxt.isalpha()):
            sentences.append(text[start:end].strip())
            start = end
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


# -- user text ---------------------------------------------------------------------------------------
def _check_size(n_bytes: int, name: str) -> None:
    if n_bytes > MAX_INPUT_BYTES:
        raise BertCoreError(
            f"{name} is {n_bytes / 2**20:.1f} MB; the limit is {MAX_INPUT_BYTES // 2**20} MB. "
            "Use an excerpt of the text (a few MB is plenty to train a small BERT)."
        )


def _block_sentences(lines: list[str]) -> list[str]:
    # One-sentence-per-line files (Google's input format, Brown) keep their lines as sentences; prose
    # wrapped at a fixed width is joined first, so a sentence broken over two lines stays whole.
    ends = sum(1 for ln in lines if re.search(r"[.!?][\"'\u201d\u2019)\]]*\s*$", ln))
    if len(lines) > 1 and ends >= 0.9 * len(lines):
        return [s for ln in lines for s in split_sentences(ln)]
    return split_sentences(" ".join(lines))


def cap_sentence_length(sentences: list[str], limit: int = MAX_SENTENCE_CHARS) -> list[str]:
    """`sentences` with each one longer than `limit` characters cut at spaces (mid-word only when a word is longer)."""
    out = []
    for sentence in sentences:
        start = 0
        while len(sentence) - start > limit:
            cut = sentence.rfind(" ", start + 1, start + limit + 1)
            end = cut if cut > start else start + limit
            out.append(sentence[start:end])
            start = end + (1 if cut > start else 0)
        out.append(sentence[start:])
    return out


def documents_from_text(text: str) -> list[list[str]]:
    """Documents at blank lines, sentences by `split_sentences` (or one per line when the text is already so)."""
    # A line of other white space (a no-break space) does not end a document here: only an empty or blank line.
    return [sentences for lines in _blocks(text, r"\n[ \t\r\f\v]*\n") if (sentences := _block_sentences(lines))]


def _blocks(text: str, blank: str = r"\n\s*\n") -> Iterator[list[str]]:
    """The stripped non-empty lines of each block of `text` between blank lines (`blank`), empty blocks left out."""
    for block in re.split(blank, text.replace("\r\n", "\n")):
        lines = [ln.strip() for ln in block.split("\n") if ln.strip()]
        if lines:
            yield lines


_WIKI_TITLE = re.compile(r"^ ?= (?!=)(.+?) = ?$")
_WIKI_HEADING = re.compile(r"^ ?(= ){2,}.*(= ?){2,}$")


def _looks_like_wikitext(text: str) -> bool:
    head = text[:200_000].split("\n")
    return any(_WIKI_TITLE.match(ln) for ln in head) and any(_WIKI_HEADING.match(ln) for ln in head)


def wikitext_documents(text: str) -> list[list[str]]:
    """Articles of WikiText (raw or tokenised) as documents: split at ` = Title = ` lines, section headings dropped."""
    docs: list[list[str]] = []
    current: list[str] | None = None
    for line in text.lstrip("\ufeff").split("\n"):
        line = line.strip("\ufeff")
        if _WIKI_TITLE.match(line):
            if current:
                docs.append(current)
            current = []
            continue
        if not line.strip() or _WIKI_HEADING.match(line):
            continue
        # Undo WikiText's tokenisation marks ("3 @.@ 5", "well @-@ known") so the BERT tokenizer sees plain text.
        clean = line.replace(" @-@ ", "-").replace(" @.@ ", ".").replace(" @,@ ", ",").replace("<unk>", "[UNK]")
        if current is None:
            current = []
        current.extend(split_sentences(clean))
    if current:
        docs.append(current)
    return docs


def shakespeare_documents(text: str, speeches_per_document: int = 20) -> list[list[str]]:
    """Tiny Shakespeare (no scene marks) as documents of 20 consecutive speeches, each speech's sentences led by its
    speaker. One speech is too short to be a document (most are a line or two: NSP would nearly always be forced to
    "random"); a stretch of 20 is a piece of one conversation, and a random B comes from another stretch."""
    speeches = []
    for lines in _blocks(text):
        speaker = lines[0] if lines[0].endswith(":") and len(lines) > 1 else ""
        body = lines[1:] if speaker else lines
        sentences = split_sentences(" ".join(body))
        if sentences:
            if speaker:
                sentences[0] = f"{speaker} {sentences[0]}"
            speeches.append(sentences)
    return [[s for speech in speeches[i: i + speeches_per_document] for s in speech]
            for i in range(0, len(speeches), speeches_per_document)]


def corpus_from_text(text: str, name: str = "pasted") -> Corpus:
    """Corpus of pasted or loaded text: documents at blank lines (WikiText articles when it looks like WikiText)."""
    if not isinstance(text, str):
        raise BertCoreError(f"expected text (str), got {type(text).__name__}; pass bytes to corpus_from_bytes")
    _check_size(len(text.encode("utf-8", errors="replace")), f"the text {name!r}")
    if "\x00" in text:
        raise BertCoreError(f"{name!r} contains NUL characters, so it looks binary; give plain UTF-8 text")
    if not text.strip():
        raise BertCoreError(f"{name!r} is empty; give some text (a few paragraphs at least) or use the 'toy' corpus")
    docs = wikitext_documents(text) if _looks_like_wikitext(text) else documents_from_text(text)
    docs = [cap_sentence_length(doc) for doc in docs]
    if not docs:
        raise BertCoreError(f"{name!r} has no sentences; give some prose or use the 'toy' corpus")
    return Corpus(name=name, documents=docs, source=name)


def corpus_from_bytes(data: bytes, name: str = "upload") -> Corpus:
    """Corpus of uploaded bytes, after checking they are non-empty, not binary, UTF-8 and at most 50 MB."""
    if not data:
        raise BertCoreError(f"{name!r} is empty (0 bytes); upload a UTF-8 text file with some prose in it")
    _check_size(len(data), repr(name))
    if b"\x00" in data:
        raise BertCoreError(f"{name!r} looks like a binary file (it contains NUL bytes); upload plain UTF-8 text (.txt)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BertCoreError(
            f"{name!r} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "re-save it as UTF-8 (most editors offer this under 'Save as' / encoding)"
        ) from exc
    return corpus_from_text(text, name=name)


def corpus_from_file(path: str | Path, name: str | None = None) -> Corpus:
    path = Path(path).expanduser()
    if path.is_dir():
        raise BertCoreError(f"{path} is a folder; give a text file")
    if not path.is_file():
        raise BertCoreError(
            f"no such file: {path}; give a path to a UTF-8 text file, or a built-in corpus: {', '.join(NAMED_CORPORA)}"
        )
    _check_size(path.stat().st_size, str(path))
    return corpus_from_bytes(path.read_bytes(), name=name or path.stem)


# -- named corpora -----------------------------------------------------------------------------------
def generate_toy_corpus(num_documents: int = 2000, seed: int = 0) -> Corpus:
    return Corpus(name="toy", documents=generate_toy_documents(num_documents, seed),
                  source=f"toy grammar (bert_core.data.toy_grammar), seed {seed}")


# How a reader knows each corpus, in words a student understands (what it is, never its file's name): the named
# ones, and the files of the shared data folder by (folder, file). A split of WikiText-2 is WikiText-2 to a reader.
_WIKITEXT = "WikiText-2 (Wikipedia articles)"
_BROWN = "the Brown Corpus (American English texts of 1961)"
_SHAKESPEARE = "Tiny Shakespeare (Shakespeare's plays)"
CORPUS_LABELS = {"toy": "the toy grammar (generated)", "tinyshakespeare": _SHAKESPEARE, "wikitext-2": _WIKITEXT,
                 "brown": _BROWN}
_SHARED_FILE_LABELS = {
    **{("wikitext-2", split): _WIKITEXT for split in ("valid.txt", "train.txt", "test.txt")},
    ("brown", "brown.txt"): _BROWN,
    ("tinyshakespeare", "input.txt"): _SHAKESPEARE,
    ("movie_reviews", "reviews.txt"): "movie reviews",
    ("movie_plots", "plots.txt"): "film plot summaries from IMDb",
    ("news", "abc.txt"): "Australian ABC news stories",
    ("state_union", "addresses.txt"): "US presidents' State of the Union addresses",
}


def corpus_label(recorded: str) -> str:
    """A recorded corpus (a name, or the path a run was given) as a reader knows it: "WikiText-2 (Wikipedia
    articles)" for `../shared/data/wikitext-2/valid.txt`, "the Brown Corpus (...)" for `brown`; any other file by
    its name only ("the text file notes.txt"): never a folder of the machine that trained it."""
    text = str(recorded).strip()
    if text.lower() in CORPUS_LABELS:
        return CORPUS_LABELS[text.lower()]
    path = Path(text.replace("\\", "/"))
    known = _SHARED_FILE_LABELS.get((path.parent.name, path.name))
    if known:
        return known
    return f"the text file {path.name}" if path.name else "a text file"


# A shard folder of `corpus build` named as a corpus (`train --corpus shards:DIR`; a folder holding its index
# file is one too). Here, torch-free, so that the held-out tools read its held-out text as they read a corpus's.
SHARDS_PREFIX = "shards:"
SHARD_INDEX = "index.json"


def shard_folder(spec) -> Path | None:
    """The shard folder a corpus spec names (`shards:DIR`, or a folder holding index.json), else None."""
    text = str(spec).strip()
    if text.startswith(SHARDS_PREFIX):
        return Path(text[len(SHARDS_PREFIX):]).expanduser()
    path = Path(text).expanduser()
    return path if path.is_dir() and (path / SHARD_INDEX).is_file() else None


def shard_heldout_corpora(folder: str | Path) -> dict[str, Corpus]:
    """Each source's held-out documents of a shard folder (`heldout/<source>.txt`, written by the build)."""
    folder = Path(folder)
    texts = sorted((folder / "heldout").glob("*.txt"))
    if not texts:
        raise BertCoreError(f"{folder} has no held-out text (heldout/*.txt); rebuild it with `corpus build`")
    for t in texts:   # a corpus folder travels: a link in it must not make us read the machine's own files
        if not t.resolve().is_relative_to(folder.resolve()):
            raise BertCoreError(f"{t} leads outside the corpus folder {folder}; its held-out text must be files "
                                "inside it: rebuild the corpus or copy it again")
    return {t.stem: corpus_from_file(t, name=t.stem) for t in texts}


# How each downloadable corpus's text is cut into documents (Brown: Google's input format, one sentence a line and a
# blank line between texts).
_DOCUMENTS: dict[str, Callable[[str], list[list[str]]]] = {
    "tinyshakespeare": shakespeare_documents, "wikitext-2": wikitext_documents, "brown": lambda text: list(_blocks(text))}


def load_corpus(spec: str, *, seed: int = 0, cache_dir: str | Path | None = None,
                progress: Callable[[int, int | None], None] | None = None) -> Corpus:
    """Corpus by name (NAMED_CORPORA: all but `toy` downloaded once into the cache, `progress(done_bytes,
    total_bytes)` told) or a path to a UTF-8 text file."""
    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise BertCoreError(f"no corpus given; use one of {', '.join(NAMED_CORPORA)} or a path to a UTF-8 text file")
    key = str(spec).strip()
    if key.lower() == "toy":
        return generate_toy_corpus(seed=seed)
    if key.lower() in _DOCUMENTS:
        text, where = fetch_corpus_text(key.lower(), cache_dir=cache_dir, progress=progress)
        return Corpus(name=key.lower(), documents=_DOCUMENTS[key.lower()](text), source=where)
    path = Path(key).expanduser()
    if path.exists():
        return dataclasses.replace(corpus_from_file(path), source=str(path))
    raise BertCoreError(
        f"unknown corpus {key!r}: use one of {', '.join(NAMED_CORPORA)} or a path to an existing UTF-8 text file"
    )


# The share of each corpus's documents `train` holds out for evaluation by default (seeded, by document).
HELDOUT_FRACTION = 0.1


def heldout_choice(n: int, fraction: float, seed: int) -> set[int]:
    """The indices of `n` documents held out: a seeded `fraction` of them, at least one and never all (none of
    fewer than two)."""
    if n < 2:
        return set()
    return set(random.Random(seed).sample(range(n), min(n - 1, max(1, round(fraction * n)))))


def split_heldout(corpus: Corpus, fraction: float = 0.1, seed: int = 0) -> tuple[Corpus, Corpus]:
    """(train, held-out) by whole documents chosen with `seed`; a one-document corpus gives up a contiguous block."""
    if not 0.0 < fraction < 1.0:
        raise BertCoreError(f"held-out fraction must be between 0 and 1, got {fraction!r}")
    docs = corpus.documents
    if len(docs) >= 2:
        held_idx = heldout_choice(len(docs), fraction, seed)
        train = [d for i, d in enumerate(docs) if i not in held_idx]
        held = [d for i, d in enumerate(docs) if i in held_idx]
        how = f"{len(held)} of {len(docs)} documents held out (seed {seed})"
    else:
        sentences = docs[0] if docs else []
        if len(sentences) < 2:
            raise BertCoreError(f"corpus {corpus.name!r} has fewer than 2 sentences; it cannot be split for evaluation")
        n_held = min(len(sentences) - 1, max(1, math.ceil(fraction * len(sentences))))
        start = random.Random(seed).randint(0, len(sentences) - n_held)
        held = [sentences[start: start + n_held]]
        # The text either side of the held-out block becomes two documents: they are not contiguous any more.
        train = [part for part in (sentences[:start], sentences[start + n_held:]) if part]
        how = f"sentences {start}..{start + n_held - 1} of the only document held out (seed {seed})"
    return (Corpus(name=corpus.name, documents=train, source=f"{corpus.source}; train part, {how}"),
            Corpus(name=f"{corpus.name} (held out)", documents=held, source=f"{corpus.source}; {how}"))
