"""The everyday-English set (issue 71): fill-in-the-blank sentences and minimal pairs written for this project.

Plain sentences a teacher types first ("Paris is the capital of [MASK].", "The [MASK] barked at the mailman."),
across thirteen everyday topics, each with the words a fair judge accepts; and minimal pairs of agreement, tense and
word order. They live in `everyday/` beside this module as two tab-separated files (format in their first lines and
in everyday/README.md), are read by `python -m bert_core everyday` (bert_core.inspect.everyday_measure) and are
never training text: both files are default decontamination references of `corpus build`
(bert_core.corpus.build.default_references), read through `reference_texts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bert_core.errors import BertCoreError

EVERYDAY_DIR = Path(__file__).resolve().parent / "everyday"
BLANKS_FILE = EVERYDAY_DIR / "everyday_blanks.tsv"
PAIRS_FILE = EVERYDAY_DIR / "everyday_pairs.tsv"
MASK = "[MASK]"
MAX_FILE_BYTES = 1_000_000  # a set of a few thousand rows at most; anything larger is the wrong file


@dataclass(frozen=True)
class Blank:
    """One sentence with exactly one [MASK], its topic, and the lower-case words that count as right there."""

    topic: str
    text: str
    answers: tuple[str, ...]

    def filled(self) -> list[str]:
        """The sentence with its blank filled by each right word in turn."""
        return [self.text.replace(MASK, word) for word in self.answers]


@dataclass(frozen=True)
class EverydayPair:
    """A good sentence and its broken twin, and the kind of rule they differ by."""

    kind: str
    good: str
    bad: str


def _rows(text: str, name: str, fields: int, what: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) of every row; blank lines and lines starting with # are skipped."""
    if "\x00" in text:
        raise BertCoreError(f"{name} contains NUL characters, so it looks binary; give a UTF-8 text file with {what}")
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in line.split("\t")]
        if len(parts) != fields or not all(parts):
            raise BertCoreError(f"{name}, line {number}: expected {fields} tab-separated fields ({what}), got "
                                f"{len(parts)}: {line[:60]!r}")
        rows.append((number, parts))
    if not rows:
        raise BertCoreError(f"{name} holds no rows: write one a line, {what}")
    return rows


def parse_blanks(text: str, name: str = "the blanks file") -> tuple[Blank, ...]:
    """Blanks from `topic<TAB>sentence with one [MASK]<TAB>right, words` rows."""
    blanks, seen = [], set()
    for number, (topic, sentence, answers) in _rows(text, name, 3, "topic, sentence with one [MASK], right words"):
        where = f"{name}, line {number}"
        if sentence.count(MASK) != 1:
            raise BertCoreError(f"{where}: the sentence must hold exactly one {MASK} (upper-case), it holds "
                                f"{sentence.count(MASK)}: {sentence[:60]!r}")
        words = tuple(w.strip() for w in answers.split(","))
        bad = [w for w in words if not w or w != w.lower() or len(w.split()) != 1]
        if bad:
            raise BertCoreError(f"{where}: right words are single lower-case words separated by commas, not {bad}")
        if sentence in seen:
            raise BertCoreError(f"{where}: the sentence {sentence[:60]!r} appears twice")
        seen.add(sentence)
        blanks.append(Blank(topic, sentence, tuple(dict.fromkeys(words))))
    return tuple(blanks)


def parse_everyday_pairs(text: str, name: str = "the pairs file") -> tuple[EverydayPair, ...]:
    """Minimal pairs from `kind<TAB>good sentence<TAB>bad sentence` rows."""
    return tuple(EverydayPair(*parts) for _, parts in _rows(text, name, 3, "kind, good sentence, bad sentence"))


def _read(path) -> str:
    path = Path(path)
    if not path.is_file():
        raise BertCoreError(f"{path}: no such file (give a tab-separated UTF-8 file; see {EVERYDAY_DIR / 'README.md'})")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise BertCoreError(f"{path} is over {MAX_FILE_BYTES // 1_000_000} MB; a set holds a few thousand rows at most")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BertCoreError(f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at {e.start}); save it as "
                            "UTF-8") from None


def load_blanks(path=BLANKS_FILE) -> tuple[Blank, ...]:
    """The blanks of a file (the project's own set by default)."""
    return parse_blanks(_read(path), str(path))


def load_everyday_pairs(path=PAIRS_FILE) -> tuple[EverydayPair, ...]:
    """The minimal pairs of a file (the project's own set by default)."""
    return parse_everyday_pairs(_read(path), str(path))


def reference_texts(file_name: str, text: str) -> list[str] | None:
    """What the decontamination check reads of one of the set's files: each sentence on its own, every blank filled
    with each right word (a run never crosses from one sentence into the next); None for any other file."""
    if file_name == BLANKS_FILE.name:
        return [s for blank in parse_blanks(text, file_name) for s in blank.filled()]
    if file_name == PAIRS_FILE.name:
        return [s for pair in parse_everyday_pairs(text, file_name) for s in (pair.good, pair.bad)]
    return None
