"""Labelled text for fine-tuning: CSV loading with checks, the AG News and polarity formats, seeded splits, toy tasks.
Rows with an empty text or label are an error naming them (a silent drop would hide a broken export), unless
`drop_empty`."""

from __future__ import annotations

import csv
import io
import math
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bert_core.data.batching import read_upload
from bert_core.data.corpora import generate_toy_corpus
from bert_core.data.splits import RowData, split_data
from bert_core.data.task_downloads import clean_ag_news_text
from bert_core.data.toy_grammar import TOPICS
from bert_core.errors import BertCoreError

MAX_CSV_BYTES = 50 * 1024 * 1024
# More distinct labels than this means the column is not a class label (an id, a score, a text column).
MAX_CLASSES = 50
# Column names taken as the label / text when the caller does not choose, in order of preference.
LABEL_COLUMN_NAMES = ("label", "labels", "class", "category", "target", "sentiment", "topic", "y")
TEXT_COLUMN_NAMES = ("text", "sentence", "review", "content", "document", "body", "description")
AG_NEWS_COLUMNS = ("class", "title", "description")
# What the numbers of a shared data file's label column mean, from the shared data's README (folder/file ->
# names of 0, 1, ...): the sentence-polarity file writes 0 and 1. AG News names its classes in a classes.txt
# beside the file instead. A CSV whose labels are words keeps its own words.
DOCUMENTED_LABEL_NAMES = {("sentence_polarity", "polarity.csv"): ("negative", "positive")}
PAIR_JOINER = " . "


@dataclass
class ClassificationData(RowData):
    """Texts (optionally sentence pairs) with integer labels 0..K-1 and a name for each label."""

    ROWS = ("texts", "labels", "texts_b")
    texts: list[str]
    labels: list[int]
    label_names: list[str]
    texts_b: list[str] | None = None  # second segment when two columns are fed as a sentence pair
    source: str = ""
    text_columns: tuple[str, ...] = ()
    label_column: str = ""
    dropped_rows: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    def label_counts(self) -> list[int]:
        counts = Counter(self.labels)
        return [counts[y] for y in range(self.num_labels)]

    def example_text(self, i: int) -> str:
        if self.texts_b is None:
            return self.texts[i]
        return f"{self.texts[i]} | {self.texts_b[i]}"


def _read_csv(path_or_bytes: str | Path | bytes, name: str) -> tuple[str, str, Path | None]:
    return read_upload(path_or_bytes, name, "CSV", MAX_CSV_BYTES, "a .csv file",
                       "Give a CSV with a text column and a label column.",
                       "Use a sample of the rows (fine-tuning a tiny BERT on a CPU needs a few thousand).")


def _is_int(cell: str) -> bool:
    return re.fullmatch(r"[+-]?\d+", cell.strip()) is not None


def _headerless_columns(rows: list[list[str]]) -> list[str] | None:
    """Column names for a file without a header (AG News's class,title,description; `label,text`), else None."""
    sample = rows[:200]
    width = len(sample[0])
    if width not in (2, 3) or not all(len(r) == width and _is_int(r[0]) for r in sample):
        return None
    return list(AG_NEWS_COLUMNS) if width == 3 else ["label", "text"]


def _class_names_beside(path: Path | None, count: int) -> list[str] | None:
    if path is None:
        return None
    classes = path.parent / "classes.txt"
    if not classes.is_file():
        documented = DOCUMENTED_LABEL_NAMES.get((path.parent.name, path.name))
        return list(documented) if documented is not None and len(documented) == count else None
    lines = classes.read_text(encoding="utf-8", errors="replace").splitlines()
    names = [line.strip() for line in lines if line.strip()]
    return names if len(names) == count else None


def _pick_column(columns: list[str], wanted: str | int, role: str) -> int:
    if isinstance(wanted, int) or (isinstance(wanted, str) and wanted.isdigit() and wanted not in columns):
        index = int(wanted)
        if 0 <= index < len(columns):
            return index
    else:
        lowered = [c.lower() for c in columns]
        if wanted in columns:
            return columns.index(wanted)
        if wanted.lower() in lowered:
            return lowered.index(wanted.lower())
    raise BertCoreError(
        f"no {role} column {wanted!r}; the columns are: {', '.join(columns)}. Choose one of those."
    )


def _default_columns(columns: list[str], text_columns, label_column) -> tuple[list[int], int]:
    lowered = [c.lower() for c in columns]
    if label_column is None:
        found = [lowered.index(n) for n in LABEL_COLUMN_NAMES if n in lowered]
        if not found:
            raise BertCoreError(
                f"cannot tell which column holds the labels; the columns are: {', '.join(columns)}. "
                "Choose the label column (--label-column)."
            )
        label_index = found[0]
    else:
        label_index = _pick_column(columns, label_column, "label")
    if text_columns is None:
        others = [i for i in range(len(columns)) if i != label_index]
        if "title" in lowered and "description" in lowered:
            text_indices = [lowered.index("title"), lowered.index("description")]
        elif len(others) == 1:
            text_indices = others
        else:
            named = [lowered.index(n) for n in TEXT_COLUMN_NAMES if n in lowered and lowered.index(n) != label_index]
            if not named:
                raise BertCoreError(
                    f"cannot tell which column holds the text; the columns are: {', '.join(columns)}. "
                    "Choose the text column(s) (--text-column)."
                )
            text_indices = named[:1]
    else:
        if isinstance(text_columns, (str, int)):
            text_columns = [text_columns]
        text_indices = [_pick_column(columns, c, "text") for c in text_columns]
        if not 1 <= len(text_indices) <= 2:
            raise BertCoreError(f"choose one or two text columns, not {len(text_indices)}.")
    if label_index in text_indices:
        raise BertCoreError(f"column {columns[label_index]!r} cannot be both the text and the label; choose another.")
    return text_indices, label_index


def _label_ids(values: list[str], column: str, path: Path | None) -> tuple[list[int], list[str]]:
    distinct = sorted(set(values))
    if len(distinct) < 2:
        raise BertCoreError(
            f"the label column {column!r} holds a single class ({distinct[0]!r}); a classifier needs at least two. "
            "Check that you chose the right column, or add examples of the other classes."
        )
    numbered = all(_is_int(v) for v in distinct)
    if numbered:
        ordered = sorted(distinct, key=int)
    else:
        try:
            floats = [float(v) for v in distinct]
        except ValueError:
            floats = None
        if floats is not None and all(math.isfinite(f) for f in floats):
            fractional = [v for v, f in zip(distinct, floats) if f != round(f)]
            if fractional:
                raise BertCoreError(
                    f"the label column {column!r} holds continuous numbers (e.g. {fractional[0]}), not classes. "
                    "Fine-tuning here classifies categories: bin the values into classes, or choose another column."
                )
            ordered = sorted(distinct, key=float)
        else:
            ordered = distinct
    if len(ordered) > MAX_CLASSES:
        raise BertCoreError(
            f"the label column {column!r} has {len(ordered)} distinct values (more than {MAX_CLASSES}), "
            "so it does not look like class labels. Choose the column that holds the categories."
        )
    names = [str(v) for v in ordered]
    beside = _class_names_beside(path, len(ordered)) if numbered else None
    if beside is not None and [int(v) for v in ordered] in (list(range(1, len(names) + 1)), list(range(len(names)))):
        names = beside
    index = {v: i for i, v in enumerate(ordered)}
    return [index[v] for v in values], names


def load_classification_csv(
    path_or_bytes: str | Path | bytes,
    text_columns: str | int | list | tuple | None = None,
    label_column: str | int | None = None,
    *,
    as_pair: bool = False,
    drop_empty: bool = False,
    name: str = "upload.csv",
) -> ClassificationData:
    """Read a labelled CSV (headed, AG News's headerless class/title/description, or `label,text`) with checks. Two
    text columns are joined, or kept as a pair (`as_pair`); labels become ids 0..K-1 in sorted order, named by the
    column's values, or for numbered classes by a `classes.txt` beside the file or DOCUMENTED_LABEL_NAMES."""
    text, name, path = _read_csv(path_or_bytes, name)
    columns, body, headerless = _table(text, name)
    ag_news = headerless == list(AG_NEWS_COLUMNS)
    text_indices, label_index = _default_columns(columns, text_columns, label_column)
    for line, row in body:
        if len(row) != len(columns):
            raise BertCoreError(
                f"{name} line {line} has {len(row)} fields but the {'format' if headerless else 'header'} has "
                f"{len(columns)} ({', '.join(columns)}). Check the quoting of that row."
            )
    clean = clean_ag_news_text if ag_news else (lambda s: " ".join(s.split()))
    texts_a, texts_b, raw_labels, empty_lines = _examples(body, text_indices, label_index, clean, as_pair)
    notes = _empty_rows_notes(empty_lines, name, drop_empty)
    if not raw_labels:
        raise BertCoreError(f"{name} has no row with both a text and a label.")
    labels, names = _label_ids(raw_labels, columns[label_index], path)
    if ag_news:
        notes.append("AG News format: headerless class,title,description; title and description joined")
    return ClassificationData(texts=texts_a, labels=labels, label_names=names,
                              texts_b=texts_b if (as_pair and len(text_indices) == 2) else None, source=name,
                              text_columns=tuple(columns[i] for i in text_indices), label_column=columns[label_index],
                              dropped_rows=len(empty_lines), notes=notes)


def _table(text: str, name: str) -> tuple[list[str], list[tuple[int, list[str]]], list[str] | None]:
    """(column names, data rows with their 1-based line numbers, the format's column names when headerless)."""
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise BertCoreError(f"{name} is not a well-formed CSV ({exc}). Check its quoting.") from None
    numbered = [(i + 1, r) for i, r in enumerate(rows) if any(cell.strip() for cell in r)]  # 1-based line rows
    if not numbered:
        raise BertCoreError(f"{name} has no rows. Give a CSV with a text column and a label column.")
    headerless = _headerless_columns([r for _, r in numbered])
    if headerless:
        return headerless, numbered, headerless
    header = [c.strip() for c in numbered[0][1]]
    if len(header) < 2:
        raise BertCoreError(
            f"{name} has a single column ({header[0]!r}); it needs a text column and a label column, "
            "separated by commas, with a header row naming them."
        )
    if len(numbered) < 2:
        raise BertCoreError(f"{name} has a header but no data rows.")
    return header, numbered[1:], None


def _examples(body: list[tuple[int, list[str]]], text_indices: list[int], label_index: int,
              clean: Callable[[str], str], as_pair: bool) -> tuple[list[str], list[str], list[str], list[int]]:
    texts_a, texts_b, raw_labels, empty_lines = [], [], [], []
    for line, row in body:
        parts = [clean(row[i]) for i in text_indices]
        label = row[label_index].strip()
        if not label or not any(parts):
            empty_lines.append(line)
            continue
        if as_pair and len(parts) == 2:
            texts_a.append(parts[0])
            texts_b.append(parts[1])
        else:
            texts_a.append(PAIR_JOINER.join(p for p in parts if p))
        raw_labels.append(label)
    return texts_a, texts_b, raw_labels, empty_lines


def _empty_rows_notes(empty_lines: list[int], name: str, drop_empty: bool) -> list[str]:
    if not empty_lines:
        return []
    shown = ", ".join(map(str, empty_lines[:10])) + (" ..." if len(empty_lines) > 10 else "")
    if not drop_empty:
        raise BertCoreError(
            f"{len(empty_lines)} row(s) of {name} have an empty text or label (line {shown}). "
            "Fill them in, or drop them (--drop-empty, or the 'drop empty rows' box in the app)."
        )
    return [f"dropped {len(empty_lines)} row(s) with an empty text or label (line {shown})"]


def csv_columns(path_or_bytes: str | Path | bytes, name: str = "upload.csv") -> list[str]:
    """The column names of a CSV (AG News's fixed names when headerless), for column pickers."""
    text, name, _ = _read_csv(path_or_bytes, name)
    rows = [r for r in csv.reader(io.StringIO(text[:200_000], newline="")) if any(c.strip() for c in r)]
    if not rows:
        raise BertCoreError(f"{name} has no rows.")
    headerless = _headerless_columns(rows[:-1] or rows)  # the last row of a truncated read may be cut
    return headerless or [c.strip() for c in rows[0]]


def split_train_val(data: ClassificationData, train_size: int | None = None, val_size: int | None = None, *,
                    seed: int = 0, val_fraction: float = 0.1) -> tuple[ClassificationData, ClassificationData]:
    train, val = split_data(data, train_size, val_size, seed=seed, val_fraction=val_fraction)
    if len(set(train.labels)) < 2:
        raise BertCoreError("the training split holds a single class; use more examples or another seed.")
    return train, val


@dataclass
class LabelledExample:
    """One example as `[CLS] a [SEP] (b [SEP])` ids and token types, with its label id (batching.collate's record)."""

    input_ids: list[int]
    token_type_ids: list[int]
    label: int

    @property
    def targets(self) -> dict:
        return {"labels": self.label}


def encode_examples(data: ClassificationData, tokenizer, max_length: int = 128) -> list[LabelledExample]:
    """Tokenize every example, truncated to `max_length` tokens."""
    if max_length < 8:
        raise BertCoreError(f"max length {max_length} is too short; use at least 8 (64-128 is typical).")
    return [LabelledExample(**tokenizer.encode_pair(a, None if data.texts_b is None else data.texts_b[i], max_length),
                            label=data.labels[i]) for i, a in enumerate(data.texts)]


def _topic_words() -> dict[str, str]:
    words = {}
    for topic, parts in TOPICS.items():
        for key in ("places", "adjectives"):
            words.update((w, topic) for w in parts[key])
        for key in ("people", "things", "verbs"):
            words.update((w, topic) for pair in parts[key] for w in pair)
    return words


def _toy_stories(task: str, seed: int, num_examples: int, offset: int) -> tuple[list[list[str]], random.Random]:
    """(a toy task's stories, from the toy grammar at a seed of their own: not the pretraining corpus's seed 0; the
    generator that picks from them)."""
    if num_examples < 20:
        raise BertCoreError(f"the toy {task} task needs at least 20 examples, got {num_examples}")
    return generate_toy_corpus(num_documents=num_examples, seed=offset + seed).documents, random.Random(seed)


def toy_topic_task(seed: int = 0, num_examples: int = 3000) -> ClassificationData:
    """The built-in offline task: name the topic (farm, sea, castle...) of a toy story from one of its middle sentences
    (between the introduction and the closing, so that the clue is a word or two pretraining has seen in context)."""
    stories, rng = _toy_stories("topic", seed, num_examples, 10_000)
    names = sorted(TOPICS)
    topic_of = _topic_words()
    texts, labels = [], []
    for story in stories:
        votes = Counter(topic_of[word] for sentence in story for word in re.findall(r"[a-z]+", sentence.lower())
                        if word in topic_of)
        middle = story[1:-1] or story
        texts.append(rng.choice(middle))
        labels.append(names.index(max(votes, key=votes.get)))
    return ClassificationData(texts=texts, labels=labels, label_names=names,
                              source=f"toy story topics (seed {seed})", text_columns=("sentence",),
                              label_column="topic")


ORDER_LABELS = ["story order", "shuffled"]


def _order_text(words: list[str]) -> str:
    """A toy sentence's words as one sentence: lower case but the first letter, one final full stop. The story
    sentences and their shuffles are written the same way, so that only the order of the words tells them apart."""
    text = " ".join(w.lower() for w in words)
    return text[:1].upper() + text[1:] + "."


def toy_order_task(seed: int = 0, num_examples: int = 3000) -> ClassificationData:
    """The built-in task where pretraining must pay: is a toy story sentence in its own word order, or are its words
    shuffled (half the examples, by the seed)? Both hold the same words, so a bag of words cannot tell them apart: a
    model must know the order the stories' words come in, which pretraining on them teaches."""
    stories, rng = _toy_stories("word-order", seed, num_examples, 20_000)
    texts, labels = [], []
    for story in stories:
        words = re.findall(r"[A-Za-z']+", rng.choice(story))
        shuffled = rng.random() < 0.5 and len(set(words)) > 1
        if shuffled:
            order = words[:]
            while order == words:
                rng.shuffle(order)
            words = order
        texts.append(_order_text(words))
        labels.append(int(shuffled))
    return ClassificationData(texts=texts, labels=labels, label_names=list(ORDER_LABELS),
                              source=f"toy story sentences, in order or shuffled (seed {seed})",
                              text_columns=("sentence",), label_column="order")
