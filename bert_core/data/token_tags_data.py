"""Tagged sentences for token classification (a chunk tag of CoNLL-2000, an entity tag of CoNLL-2003, a part of
speech a word): CoNLL files read with the checks an upload needs, the tag on each word's first WordPiece (-100
elsewhere, as Hugging Face's run_ner does), sentences too long split at word boundaries, span scores as conlleval
and seqeval read chunks, CoNLL-2000's majority baselines, batches. Pure and seeded."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bert_core.data.batching import read_upload
from bert_core.data.splits import RowData, split_data
from bert_core.errors import BertCoreError
from bert_core.model.bert import IGNORE_INDEX
from bert_core.model.tokenization import special_tokens_count

# "chunk" is the LAST column (chunk tags of CoNLL-2000, entity tags of CoNLL-2003); "pos" is the second column.
TAG_COLUMNS = ("chunk", "pos")
MAX_CONLL_BYTES = 50 * 1024 * 1024
# A file with more tokens than this and not one blank line is almost surely not one-token-a-line CoNLL with
# sentence breaks (the longest CoNLL-2000 sentence has 78 tokens); reading it as one "sentence" would hide that.
MAX_UNBROKEN_TOKENS = 300
# More distinct values than this means the column is not a tag set (a lemma column, a second word column);
# CoNLL-2000 has 23 chunk tags and 44 POS tags, rich morphological tag sets a few hundred.
MAX_TAGS = 1000
DOCSTART = "-DOCSTART-"
# Encoding this many sentences a call lets the Rust tokenizer work in parallel without holding the whole file twice.
_ENCODE_CHUNK = 2000

_IOB_TAG = re.compile(r"(?:O|[BI]-\S+)")
_IOBES_ONLY = re.compile(r"[ES]-\S+")
# Penn Treebank tags (NN, PRP$, -LRB-, punctuation) and Universal Dependencies tags (NOUN, PROPN): the shape of a
# part-of-speech column, to point a user who picked one as span tags at --tag-column.
_POS_LIKE = re.compile(r"[A-Z]{1,5}\$?|-[A-Z]{3,5}-|[^\w\s]{1,2}|\$")


@dataclass
class TaggedSentences(RowData):
    """Sentences as word lists, each word with a tag id into `tag_names` (and its part of speech when known)."""

    ROWS = ("words", "tags", "pos")
    words: list[list[str]]
    tags: list[list[int]]  # ids into tag_names, one per word
    tag_names: list[str]  # "O" first when present, then sorted
    scheme: str  # "iob": span tags (O, B-X, I-X; IOB1 or IOB2) scored by span F1; "plain": tags scored by accuracy
    # The part-of-speech column when the file has >= 3 columns and the tags are another column (the POS baseline).
    pos: list[list[str]] | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)
    tag_column: int = 0  # the 1-based column the tags came from (0 when built by hand)

    def __post_init__(self) -> None:
        if self.scheme not in ("iob", "plain"):
            raise BertCoreError(f"unknown tag scheme {self.scheme!r}; use 'iob' (span tags) or 'plain' (e.g. POS).")
        if len(self.tags) != len(self.words) or (self.pos is not None and len(self.pos) != len(self.words)):
            raise BertCoreError(
                f"{len(self.words)} sentences of words but {len(self.tags)} of tags"
                + ("" if self.pos is None else f" and {len(self.pos)} of POS tags")
                + "; give one tag list per sentence."
            )
        k = len(self.tag_names)
        for i, (w, t) in enumerate(zip(self.words, self.tags)):
            if len(w) != len(t) or (self.pos is not None and len(self.pos[i]) != len(w)):
                raise BertCoreError(f"sentence {i} has {len(w)} words but {len(t)} tags; give one tag per word.")
            if t and not (0 <= min(t) and max(t) < k):
                raise BertCoreError(f"sentence {i} has a tag id outside 0..{k - 1} (the {k} tag names).")

    @property
    def num_tags(self) -> int:
        return len(self.tag_names)

    @property
    def num_tokens(self) -> int:
        return sum(len(w) for w in self.words)

    def tag_strings(self, i: int) -> list[str]:
        return [self.tag_names[t] for t in self.tags[i]]

    def tag_counts(self) -> list[int]:
        counts = Counter(t for sentence in self.tags for t in sentence)
        return [counts[t] for t in range(self.num_tags)]


# -- reading -------------------------------------------------------------------------------------------------------


def read_conll(path_or_bytes: str | Path | bytes, tag_column: str | int = "chunk", name: str = "upload.txt"
               ) -> TaggedSentences:
    text, name, _ = read_upload(path_or_bytes, name, "CoNLL", MAX_CONLL_BYTES, "a CoNLL text file (e.g. train.txt)",
                                "Give a CoNLL file: one word and its tags a line, a blank line between sentences.",
                                "Use a sample of the sentences (fine-tuning a tiny BERT on a CPU needs a few "
                                "thousand).")
    return parse_conll(text, tag_column=tag_column, source=name)


def _column_index(tag_column: str | int, width: int, source: str) -> int:
    if isinstance(tag_column, str) and tag_column.strip().isdigit():
        tag_column = int(tag_column.strip())
    if isinstance(tag_column, str):
        wanted = tag_column.strip().lower()
        if wanted == "chunk":
            return width - 1
        if wanted == "pos":
            return 1
        raise BertCoreError(
            f"unknown tag column {tag_column!r}; use 'chunk' (the last column), 'pos' (the second) "
            "or a column number from 2."
        )
    if isinstance(tag_column, bool) or not isinstance(tag_column, int):
        raise BertCoreError(f"the tag column must be 'chunk', 'pos' or a column number, not {tag_column!r}.")
    if tag_column == 1:
        raise BertCoreError(f"column 1 of {source} holds the words; choose a tag column from 2 to {width}.")
    if not 2 <= tag_column <= width:
        raise BertCoreError(
            f"{source} has no column {tag_column}: its lines have {width} columns (the word, then tags in "
            f"{'column 2' if width == 2 else f'columns 2 to {width}'}). Choose one of those."
        )
    return tag_column - 1


def _split_lines(text: str, source: str) -> tuple[list[list[tuple[int, list[str]]]], int, int]:
    """(sentences as (1-based line, fields) lists, the column count, -DOCSTART- lines skipped) of a CoNLL text."""
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    sentences: list[list[tuple[int, list[str]]]] = []
    current: list[tuple[int, list[str]]] = []
    width = 0
    first_line = 0
    docstarts = 0
    for number, line in enumerate(lines, start=1):
        fields = line.replace("\t", " ").strip(" ").split(" ") if line.strip() else []
        if "" in fields:  # runs of separators; str.split() would also split inside words at other Unicode spaces
            fields = [f for f in fields if f]
        if not fields or fields[0] == DOCSTART:
            # Several blank lines are one break; -DOCSTART- (CoNLL-2003) is a document break, no sentence.
            docstarts += bool(fields)
            if current:
                sentences.append(current)
                current = []
            continue
        if not width:
            width, first_line = len(fields), number
            if width < 2:
                raise BertCoreError(
                    f"{source} line {number} has a single column ({fields[0]!r}); a CoNLL file has the word and "
                    "its tag(s) on each line, separated by spaces or tabs, a blank line between sentences."
                )
        elif len(fields) != width:
            raise BertCoreError(
                f"{source} line {number} has {len(fields)} columns but the file's lines have {width} "
                f"(from its first token line, line {first_line}); a CoNLL file has one token a line with the same "
                "columns, a blank line between sentences."
            )
        current.append((number, fields))
    if current:
        sentences.append(current)
    return sentences, width, docstarts


def _scheme_of(values: Counter, where: dict[str, int], column: int, by_name: bool, source: str) -> str:
    """'iob' or 'plain' for a column's tags; the default column ('chunk') must hold IOB tags."""
    bad = [v for v in values if not _IOB_TAG.fullmatch(v)]
    if not bad:
        return "iob"
    if not by_name:
        return "plain"
    first_bad = min(bad, key=lambda v: where[v])
    if any(_IOBES_ONLY.fullmatch(v) for v in bad) and all(_IOB_TAG.fullmatch(v) or _IOBES_ONLY.fullmatch(v)
                                                          for v in values):
        hint = ("these look like IOBES tags (E-, S-), which are not read here: convert them to IOB2 "
                "(S-X -> B-X, E-X -> I-X), or choose the column with --tag-column.")
    elif sum(n for v, n in values.items() if _POS_LIKE.fullmatch(v)) >= 0.95 * sum(values.values()):
        flag = "--tag-column pos" if column == 1 else f"--tag-column {column + 1}"
        hint = f"they look like part-of-speech tags: to tag those, use {flag} (scored by accuracy)."
    else:
        hint = ("span tags must be O, B-TYPE or I-TYPE (IOB1 or IOB2); choose another column with --tag-column "
                "(a column number tags any labels, scored by accuracy).")
    raise BertCoreError(
        f"unknown tag scheme in column {column + 1} of {source}: {first_bad!r} on line {where[first_bad]} is not "
        f"an IOB tag; {hint}"
    )


def parse_conll(text: str, tag_column: str | int = "chunk", source: str = "<text>") -> TaggedSentences:
    """Sentences of a CoNLL text (a token a line, a blank line between sentences). `tag_column` "chunk" takes the last
    column and needs IOB tags (IOB1 or IOB2, kept as written); "pos" the second, as plain tags; a 1-based column
    number is "iob" when all its tags are IOB, else plain."""
    if not isinstance(text, str):
        raise BertCoreError(f"parse_conll takes decoded text, not {type(text).__name__}; use read_conll for bytes.")
    if not text.strip():
        raise BertCoreError(f"{source} is empty. Give a CoNLL file: one word and its tags a line, "
                            "a blank line between sentences.")
    sentences, width, docstarts = _split_lines(text, source)
    if not sentences:
        raise BertCoreError(f"{source} has no sentences (only -DOCSTART- or blank lines). Give a CoNLL file with "
                            "one word and its tags a line.")
    tokens = sum(len(s) for s in sentences)
    if len(sentences) == 1 and tokens > MAX_UNBROKEN_TOKENS:
        raise BertCoreError(
            f"{source} has no blank lines between sentences ({tokens} token lines in one run, more than "
            f"{MAX_UNBROKEN_TOKENS}); a CoNLL file puts a blank line after each sentence."
        )
    by_name = isinstance(tag_column, str) and not tag_column.strip().isdigit()
    column = _column_index(tag_column, width, source)
    tag_lines = [(number, fields[column]) for sentence in sentences for number, fields in sentence]
    values = Counter(tag for _, tag in tag_lines)
    where = {tag: number for number, tag in reversed(tag_lines)}   # each tag's first line
    if len(values) < 2:
        only = next(iter(values))
        raise BertCoreError(
            f"column {column + 1} of {source} holds a single tag ({only!r}); a tagger needs at least two. "
            "Check that you chose the right column (--tag-column)."
        )
    if len(values) > MAX_TAGS:
        raise BertCoreError(
            f"column {column + 1} of {source} has {len(values)} distinct values (more than {MAX_TAGS}), so it does "
            "not look like tags. Choose the column that holds the tags (--tag-column)."
        )
    wants_iob = by_name and tag_column.strip().lower() == "chunk"
    scheme = "plain" if by_name and not wants_iob else _scheme_of(values, where, column, wants_iob, source)
    names = sorted(values, key=lambda name: (name != "O", name))   # "O" first
    index = {n: i for i, n in enumerate(names)}
    words = [[fields[0] for _, fields in s] for s in sentences]
    tag_strings = [[fields[column] for _, fields in s] for s in sentences]
    pos = [[fields[1] for _, fields in s] for s in sentences] if width >= 3 and column != 1 else None
    notes = [f"{len(sentences)} sentences, {tokens} tokens; tags from column {column + 1} of {width} "
             f"({len(names)} tags, scheme {scheme})"]
    if docstarts:
        notes.append(f"skipped {docstarts} -DOCSTART- line(s)")
    if scheme == "iob":
        # Chunks that open with I- (IOB1's way: B- only between two chunks of the same type).
        iob1 = sum(tags[start].startswith("I-") for tags in tag_strings for _, start, _ in iob_spans(tags))
        if iob1:
            notes.append(f"{iob1} chunk(s) open with I- (IOB1 style); kept as written: span scoring reads them "
                         "the conlleval way, so IOB1 and IOB2 score alike")
    return TaggedSentences(words=words, tags=[[index[t] for t in s] for s in tag_strings], tag_names=names,
                           scheme=scheme, pos=pos, source=source, notes=notes, tag_column=column + 1)


def split_sentences(data: TaggedSentences, train_size: int | None = None, val_size: int | None = None, *,
                    seed: int = 0, val_fraction: float = 0.1) -> tuple[TaggedSentences, TaggedSentences]:
    return split_data(data, train_size, val_size, seed=seed, val_fraction=val_fraction, unit="sentences")


# -- encoding ------------------------------------------------------------------------------------------------------


@dataclass
class TaggedExample:
    """One model input: a sentence, or one piece of a sentence too long for the model, as WordPiece ids."""

    input_ids: list[int]  # [CLS] pieces... [SEP]
    labels: list[int]  # the tag id on each word's first piece; -100 on other pieces and on [CLS]/[SEP]
    sentence: int  # index into the TaggedSentences
    first_word: int  # index of this piece's first word in that sentence
    num_words: int

    @property
    def token_type_ids(self) -> list[int]:
        return [0] * len(self.input_ids)

    @property
    def targets(self) -> dict:
        return {"labels": self.labels}


def _untruncated(tok):
    """The `tokenizers.Tokenizer` to encode words with: a copy without truncation or padding when the given one has
    them, since either would cut or pad the pieces that are counted per word here."""
    if tok.truncation is None and tok.padding is None:
        return tok
    copy = type(tok).from_str(tok.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def _word_pieces(words: list[list[str]], tokenizer) -> Iterator[list[list[int]]]:
    """Per sentence, the WordPiece ids of each word; a word the tokenizer drops (a control character) gets [UNK]."""
    tok = _untruncated(tokenizer.tokenizer)
    unk = tokenizer.unk_id
    for start in range(0, len(words), _ENCODE_CHUNK):
        batch = words[start : start + _ENCODE_CHUNK]
        for sentence, enc in zip(batch, tok.encode_batch(batch, is_pretokenized=True, add_special_tokens=False)):
            pieces: list[list[int]] = [[] for _ in sentence]
            for piece, word in zip(enc.ids, enc.word_ids):
                if word is not None:
                    pieces[word].append(piece)
            yield [p or [unk] for p in pieces]


def encode_tagged(data: TaggedSentences, tokenizer, max_length: int = 128) -> list[TaggedExample]:
    """Every sentence as `[CLS] pieces [SEP]`, its tags on each word's first piece (-100 elsewhere). A sentence too
    long is split at word boundaries into several examples, never cut, so every word is labelled exactly once; a
    single word longer than the whole budget keeps its first pieces (its label sits on the first anyway)."""
    limit = tokenizer.model_max_length
    if max_length < 8:
        raise BertCoreError(f"max length {max_length} is too short; use at least 8 (64-128 is typical).")
    if max_length > limit:
        raise BertCoreError(f"max length {max_length} is over the tokenizer's limit of {limit}; use at most {limit}.")
    budget = max_length - special_tokens_count(pair=False)
    cls_id, sep_id = tokenizer.cls_id, tokenizer.sep_id
    out: list[TaggedExample] = []

    def flush(s: int, first: int, ids: list[int], labels: list[int], count: int) -> None:
        out.append(TaggedExample([cls_id, *ids, sep_id], [IGNORE_INDEX, *labels, IGNORE_INDEX], s, first, count))

    for s, pieces in enumerate(_word_pieces(data.words, tokenizer)):
        tags = data.tags[s]
        ids: list[int] = []
        labels: list[int] = []
        first = 0
        for w, word in enumerate(pieces):
            word = word[:budget]
            if ids and len(ids) + len(word) > budget:
                flush(s, first, ids, labels, w - first)
                ids, labels, first = [], [], w
            ids += word
            labels += [tags[w]] + [IGNORE_INDEX] * (len(word) - 1)
        if pieces:
            flush(s, first, ids, labels, len(pieces) - first)
    return out


def words_predictions(data: TaggedSentences, examples: Sequence[TaggedExample],
                      example_tag_ids: Mapping[int, Sequence[int]] | Sequence[Sequence[int]]) -> list[list[int]]:
    """Per sentence of `data`, the predicted tag id of each word, from each example's predictions at its labelled
    positions (a mapping or a list by example index): split sentences come back whole, so they score as sentences."""
    items = example_tag_ids.items() if isinstance(example_tag_ids, Mapping) else enumerate(example_tag_ids)
    out: list[list[int | None]] = [[None] * len(w) for w in data.words]
    for e, predicted in items:
        if not 0 <= e < len(examples):
            raise BertCoreError(f"example {e} is not in the list of {len(examples)} encoded examples.")
        ex = examples[e]
        if len(predicted) != ex.num_words:
            raise BertCoreError(
                f"example {e} has {ex.num_words} labelled words but {len(predicted)} predictions; give one "
                "predicted tag per labelled position."
            )
        if ex.sentence >= len(out) or ex.first_word + ex.num_words > len(out[ex.sentence]):
            raise BertCoreError(f"example {e} does not belong to these sentences; encode them with encode_tagged.")
        out[ex.sentence][ex.first_word : ex.first_word + ex.num_words] = [int(t) for t in predicted]
    for s, sentence in enumerate(out):
        if None in sentence:
            raise BertCoreError(
                f"no prediction for word {sentence.index(None)} of sentence {s}; predict every example that "
                "encode_tagged made for these sentences."
            )
    return out  # type: ignore[return-value]


# -- scoring -------------------------------------------------------------------------------------------------------


def iob_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The chunks of one sentence's IOB tags as (type, start, end_exclusive), by conlleval's rules: a chunk starts at
    B-X, and at I-X after O or a chunk of another type (IOB1, or a broken IOB2)."""
    spans: list[tuple[str, int, int]] = []
    start, kind = -1, ""
    for i, tag in enumerate(tags):
        prefix, _, this = tag.partition("-") if tag[:2] in ("B-", "I-") else ("O", "", "")
        if start >= 0 and (prefix != "I" or this != kind):
            spans.append((kind, start, i))
            start = -1
        if prefix == "B" or (prefix == "I" and start < 0):
            start, kind = i, this
    if start >= 0:
        spans.append((kind, start, len(tags)))
    return spans


def _check_shapes(gold: Sequence[Sequence], predicted: Sequence[Sequence]) -> None:
    if len(gold) != len(predicted):
        raise BertCoreError(f"{len(gold)} gold sentences but {len(predicted)} predicted; give one per sentence.")
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise BertCoreError(f"sentence {i} has {len(g)} gold tags but {len(p)} predicted; give one per word.")


def _prf(correct: int, predicted: int, gold: int) -> dict[str, float]:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def span_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
    """Span precision, recall and F1, micro-averaged over all chunks as conlleval and seqeval's default mode, with
    the span counts and "per_type" scores (support: the gold chunks of that type)."""
    _check_shapes(gold, predicted)
    gold_n: Counter = Counter()
    pred_n: Counter = Counter()
    correct_n: Counter = Counter()
    for g, p in zip(gold, predicted):
        g_spans, p_spans = set(iob_spans(g)), set(iob_spans(p))
        gold_n.update(t for t, _, _ in g_spans)
        pred_n.update(t for t, _, _ in p_spans)
        correct_n.update(t for t, _, _ in g_spans & p_spans)
    out: dict = _prf(sum(correct_n.values()), sum(pred_n.values()), sum(gold_n.values()))
    out.update(gold_spans=sum(gold_n.values()), predicted_spans=sum(pred_n.values()),
               correct_spans=sum(correct_n.values()))
    out["per_type"] = {
        t: {**_prf(correct_n[t], pred_n[t], gold_n[t]), "support": gold_n[t]} for t in sorted(gold_n | pred_n)
    }
    return out


def token_accuracy(gold: Sequence[Sequence], predicted: Sequence[Sequence]) -> float:
    _check_shapes(gold, predicted)
    total = sum(len(g) for g in gold)
    right = sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
    return right / total if total else 0.0


def majority_baseline(train: TaggedSentences, val: TaggedSentences, key: str = "word") -> list[list[int]]:
    """Per validation word, the tag seen most often in `train` with its key, the word lower-cased or its part of
    speech (CoNLL-2000's baselines); an unseen key gets the most frequent tag, ties the lowest id."""
    if key not in ("word", "pos"):
        raise BertCoreError(f"unknown baseline key {key!r}; use 'word' or 'pos'.")
    if train.tag_names != val.tag_names:
        raise BertCoreError("the train and validation sentences have different tag names; split one dataset.")
    if key == "pos" and (train.pos is None or val.pos is None):
        raise BertCoreError(
            "the POS baseline needs a part-of-speech column (column 2 of a file with 3 or more columns) beside "
            "the tags; use key 'word'."
        )

    def keys(data: TaggedSentences) -> list[list[str]]:
        return data.pos if key == "pos" else [[w.lower() for w in s] for s in data.words]  # type: ignore[return-value]

    by_key: dict[str, list[int]] = {}
    overall = [0] * train.num_tags
    for ks, ts in zip(keys(train), train.tags):
        for k, t in zip(ks, ts):
            by_key.setdefault(k, [0] * train.num_tags)[t] += 1
            overall[t] += 1

    def best(counts: list[int]) -> int:
        return max(range(len(counts)), key=lambda t: (counts[t], -t))

    fallback = best(overall)
    choice = {k: best(c) for k, c in by_key.items()}
    return [[choice.get(k, fallback) for k in ks] for ks in keys(val)]
