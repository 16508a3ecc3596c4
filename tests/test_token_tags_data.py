"""Token classification data: reading CoNLL files and the errors a user can cause, first-WordPiece labels, splitting
long sentences, span scoring checked against seqeval, majority baselines, seeded batches."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from bert_core.data import token_tags_data as ttd
from bert_core.data.batching import collate, eval_batches, train_batches
from bert_core.data.token_tags_data import (
    MAX_UNBROKEN_TOKENS,
    TAG_COLUMNS,
    TaggedSentences,
    encode_tagged,
    iob_spans,
    majority_baseline,
    parse_conll,
    read_conll,
    span_scores,
    split_sentences,
    token_accuracy,
    words_predictions,
)
from bert_core.errors import BertCoreError
from bert_core.model.tokenization import BertTokenizer
from bert_core.paths import shared_data_dir

REPO = Path(__file__).resolve().parents[1]

SMALL = """The DT B-NP
dog NN I-NP
runs VBZ B-VP

A DT B-NP
run NN I-NP
. . O

run VB B-VP

RUN VB B-VP
the DT B-NP
zebra NN I-NP
. . O
"""

# CoNLL-2003's layout: 4 columns, -DOCSTART- lines, IOB1 entity tags (I-ORG opens an entity).
CONLL2003 = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O
. . O O

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER

"""


@pytest.fixture(scope="module")
def tokenizer() -> BertTokenizer:
    return BertTokenizer.load(REPO / "checkpoints" / "bert-tiny-english")


@pytest.fixture(scope="module")
def conll2000():
    """The CoNLL-2000 training file, parsed once; skipped when the shared data is absent."""
    folder = shared_data_dir()
    path = None if folder is None else folder / "conll2000" / "train.txt"
    if path is None or not path.is_file():
        pytest.skip("../shared/data/conll2000/train.txt is absent (set BERT_SHARED_DATA to point at it)")
    return read_conll(path)


def _error(text: str | bytes, tag_column="chunk") -> str:
    with pytest.raises(BertCoreError) as info:
        if isinstance(text, bytes):
            read_conll(text, tag_column, name="bad.txt")
        else:
            parse_conll(text, tag_column, source="bad.txt")
    return str(info.value)


# -- parsing -------------------------------------------------------------------------------------------------------


def test_parse_reads_words_tags_and_pos_with_o_first():
    data = parse_conll(SMALL, source="small.txt")
    assert len(data) == 4 and data.num_tokens == 11
    assert data.words[0] == ["The", "dog", "runs"] and data.words[2] == ["run"]
    assert data.tag_names == ["O", "B-NP", "B-VP", "I-NP"] and data.num_tags == 4
    assert data.tag_strings(1) == ["B-NP", "I-NP", "O"]
    assert data.tags[1] == [1, 3, 0]
    assert data.scheme == "iob" and data.tag_column == 3
    assert data.pos[0] == ["DT", "NN", "VBZ"]
    assert data.source == "small.txt"
    assert TAG_COLUMNS == ("chunk", "pos")


def test_crlf_tabs_blank_runs_bom_and_no_final_blank_line_are_fine():
    text = "\ufeffHe\tPRP\tB-NP\r\nran  VBD \t B-VP\r\n\r\n\r\n \t \r\n\r\nOk UH B-INTJ\r\n! . O"
    data = read_conll(text.encode("utf-8"))
    assert data.words == [["He", "ran"], ["Ok", "!"]]
    assert data.tag_strings(0) == ["B-NP", "B-VP"] and data.tag_strings(1) == ["B-INTJ", "O"]
    assert data.pos == [["PRP", "VBD"], ["UH", "."]]


def test_docstart_lines_are_skipped_and_iob1_tags_are_kept_with_a_note():
    data = parse_conll(CONLL2003)
    assert data.words == [["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn"]]
    assert data.tag_strings(0) == ["I-ORG", "O", "I-MISC", "O", "O"]  # as written, not converted
    assert data.tag_names == ["O", "I-MISC", "I-ORG", "I-PER"]
    assert data.scheme == "iob" and data.tag_column == 4
    assert data.pos[1] == ["NNP", "NNP"]
    assert any("-DOCSTART-" in n for n in data.notes)
    assert any("IOB1" in n and "3 chunk(s)" in n for n in data.notes)
    assert iob_spans(data.tag_strings(1)) == [("PER", 0, 2)]


def test_tag_column_choice():
    pos = parse_conll(SMALL, "pos")
    assert pos.scheme == "plain" and pos.pos is None and pos.tag_column == 2
    assert pos.tag_names == [".", "DT", "NN", "VB", "VBZ"]
    assert pos.tag_strings(0) == ["DT", "NN", "VBZ"]
    assert parse_conll(SMALL, 2).scheme == "plain"
    by_number = parse_conll(SMALL, 3)
    assert by_number.scheme == "iob" and by_number.tags == parse_conll(SMALL).tags
    assert parse_conll(SMALL, "3").tag_column == 3
    chunks = parse_conll(CONLL2003, 3)  # CoNLL-2003's chunk column; "chunk" means its last (entity) column
    assert chunks.scheme == "iob" and chunks.tag_strings(1) == ["B-NP", "I-NP"] and chunks.pos is not None
    assert parse_conll(CONLL2003, "POS").pos is None


# -- bad input -----------------------------------------------------------------------------------------------------


def test_empty_files_and_files_without_sentences_are_refused():
    assert "bad.txt is empty" in _error(b"")
    assert "bad.txt is empty" in _error(" \n\r\n\t\n")
    assert "has no sentences" in _error("-DOCSTART- -X- O O\n\n-DOCSTART- -X- O O\n")


def test_binary_undecodable_and_oversized_files_are_refused(monkeypatch, tmp_path):
    assert "looks binary" in _error(b"PK\x03\x04\x00\x00word NN B-NP\n")
    message = _error("café NN B-NP\n".encode("latin-1"))
    assert "not UTF-8" in message and "byte 3" in message
    monkeypatch.setattr(ttd, "MAX_CONLL_BYTES", 100)
    assert "the limit is 0 MB" in _error(b"a NN B-NP\n" * 20)
    big = tmp_path / "big.txt"
    big.write_bytes(b"a NN B-NP\n" * 20)
    with pytest.raises(BertCoreError, match="big.txt is 0 MB"):
        read_conll(big)


def test_missing_paths_and_folders_are_refused(tmp_path):
    with pytest.raises(BertCoreError, match="CoNLL file not found"):
        read_conll(tmp_path / "nope.txt")
    with pytest.raises(BertCoreError, match="is a folder"):
        read_conll(tmp_path)


def test_ragged_columns_name_the_line():
    message = _error("a DT B-NP\nb NN I-NP\n\nc B-VP\n")
    assert message.startswith("bad.txt line 4 has 2 columns but the file's lines have 3")
    assert "one token a line with the same columns" in message
    assert "single column" in _error("just\nwords\n")


def test_a_long_file_without_blank_lines_is_refused():
    ok = "".join(f"w{i} NN B-NP\n" for i in range(MAX_UNBROKEN_TOKENS))
    assert len(parse_conll(ok + "x NN O\n\ny NN O\n")) == 2
    message = _error(ok + "x NN O\n")
    assert "no blank lines between sentences" in message and str(MAX_UNBROKEN_TOKENS) in message


def test_bad_tag_columns_are_refused():
    assert "has no column 5" in _error(SMALL, 5)
    assert "column 1 of bad.txt holds the words" in _error(SMALL, 1)
    assert "unknown tag column 'ner'" in _error(SMALL, "ner")
    assert "must be 'chunk', 'pos' or a column number" in _error(SMALL, 2.0)
    assert "holds a single tag ('B-NP')" in _error("a DT B-NP\n\nb DT B-NP\n")


def test_non_iob_tags_in_the_chunk_column_are_an_unknown_tag_scheme():
    message = _error("The DT\ndog NN\n\nran VBD\n. .\n")  # a word/POS file: the last column is POS
    assert "unknown tag scheme" in message and "'DT' on line 1" in message and "--tag-column pos" in message
    message = _error("The B-NP DT\ndog I-NP NN\n")  # columns swapped: the POS tags sit in column 3
    assert "--tag-column 3" in message
    message = _error("EU S-ORG\nsays O\n\nBig B-LOC\nCity E-LOC\n")
    assert "'S-ORG' on line 1" in message and "IOBES" in message
    message = _error("good positive\nday positive\n\nbad negative\n")
    assert "'positive' on line 1" in message and "O, B-TYPE or I-TYPE" in message
    assert parse_conll("good x positive\n\nbad x negative\n", 3).scheme == "plain"  # a number takes any tags


# -- splits --------------------------------------------------------------------------------------------------------


def test_split_sentences_is_seeded_and_disjoint():
    data = TaggedSentences([[f"w{i}"] for i in range(50)], [[i % 2] for i in range(50)], ["O", "B-X"], "iob")
    train, val = split_sentences(data, seed=3)
    assert (len(train), len(val)) == (45, 5)
    assert not {w[0] for w in train.words} & {w[0] for w in val.words}
    again, _ = split_sentences(data, seed=3)
    assert again.words == train.words and split_sentences(data, seed=4)[0].words != train.words
    small_train, small_val = split_sentences(data, 10, 7, seed=1)
    assert (len(small_train), len(small_val)) == (10, 7) and small_val.source.endswith("(validation)")
    with pytest.raises(BertCoreError, match="has only 50"):
        split_sentences(data, 45, 10)
    with pytest.raises(BertCoreError, match="at least 1"):
        split_sentences(data, 0, 5)


def test_hand_made_sentences_are_checked():
    with pytest.raises(BertCoreError, match="sentence 0 has 2 words but 1 tags"):
        TaggedSentences([["a", "b"]], [[0]], ["O", "B-X"], "iob")
    with pytest.raises(BertCoreError, match="outside 0..1"):
        TaggedSentences([["a"]], [[2]], ["O", "B-X"], "iob")
    with pytest.raises(BertCoreError, match="unknown tag scheme"):
        TaggedSentences([["a"]], [[0]], ["O", "B-X"], "bio")


# -- encoding ------------------------------------------------------------------------------------------------------


def test_labels_sit_on_the_first_wordpiece_of_each_word(tokenizer):
    words = ["Unbelievably", "the", "U.S.", "pound", "\x07", "fell"]
    data = TaggedSentences([words], [[1, 2, 3, 4, 1, 2]], ["O", "B-A", "I-A", "B-B", "I-B"], "iob")
    [example] = encode_tagged(data, tokenizer)
    enc = tokenizer.tokenizer.encode(words, is_pretokenized=True, add_special_tokens=False)
    assert example.input_ids[0] == tokenizer.cls_id and example.input_ids[-1] == tokenizer.sep_id
    assert example.labels[0] == example.labels[-1] == -100
    # The tokenizer's own word_ids, with the control character it drops (word 4) given one [UNK] piece.
    word_ids = list(enc.word_ids)
    assert 4 not in word_ids
    cut = word_ids.index(5)
    word_ids[cut:cut] = [4]
    ids = enc.ids[:cut] + [tokenizer.unk_id] + enc.ids[cut:]
    assert example.input_ids[1:-1] == ids
    expected = [data.tags[0][w] if i == 0 or word_ids[i - 1] != w else -100 for i, w in enumerate(word_ids)]
    assert example.labels[1:-1] == expected
    assert word_ids.count(0) > 1 and word_ids.count(2) == 4  # "unbelievably" and "u . s ." span several pieces
    assert sum(label != -100 for label in example.labels) == len(words)
    assert (example.sentence, example.first_word, example.num_words) == (0, 0, 6)


def test_long_sentences_are_split_at_word_boundaries(tokenizer):
    rng = random.Random(0)
    vocab = ["the", "bank", "unbelievably", "rose", "3.5", "%", "in", "Antananarivo", "."]
    words = [[rng.choice(vocab) for _ in range(n)] for n in (200, 3, 40)]
    tags = [[rng.randrange(3) for _ in s] for s in words]
    data = TaggedSentences(words, tags, ["O", "B-X", "I-X"], "iob")
    examples = encode_tagged(data, tokenizer, max_length=16)
    assert all(len(e.input_ids) <= 16 and len(e.labels) == len(e.input_ids) for e in examples)
    labelled: dict[tuple[int, int], int] = {}
    for e in examples:
        positions = [lab for lab in e.labels if lab != -100]
        assert len(positions) == e.num_words >= 1
        for k in range(e.num_words):
            key = (e.sentence, e.first_word + k)
            assert key not in labelled
            labelled[key] = positions[k]
    assert labelled == {(s, w): tags[s][w] for s in range(3) for w in range(len(words[s]))}
    assert [e.sentence for e in examples].count(1) == 1 and [e.sentence for e in examples].count(0) > 10
    # Greedy: each piece of a split sentence could not take the next word too.
    for e, nxt in zip(examples, examples[1:]):
        if nxt.sentence == e.sentence:
            next_word = tokenizer.tokenizer.encode([words[e.sentence][nxt.first_word]], is_pretokenized=True,
                                                   add_special_tokens=False)
            assert len(e.input_ids) + len(next_word.ids) > 16
    predicted = {i: [lab for lab in e.labels if lab != -100] for i, e in enumerate(examples)}
    assert words_predictions(data, examples, predicted) == tags
    assert words_predictions(data, examples, list(predicted.values())) == tags


def test_a_word_longer_than_the_budget_keeps_its_first_pieces(tokenizer):
    data = TaggedSentences([["a", "Antananarivo" * 3, "b"]], [[0, 1, 0]], ["O", "B-X"], "iob")
    examples = encode_tagged(data, tokenizer, max_length=8)
    assert [(e.first_word, e.num_words) for e in examples] == [(0, 1), (1, 1), (2, 1)]
    assert len(examples[1].input_ids) == 8 and examples[1].labels[1] == 1 and set(examples[1].labels[2:]) == {-100}
    with pytest.raises(BertCoreError, match="too short"):
        encode_tagged(data, tokenizer, max_length=4)
    with pytest.raises(BertCoreError, match="over the tokenizer's limit"):
        encode_tagged(data, tokenizer, max_length=10_000)


def test_a_tokenizer_set_to_truncate_does_not_cut_words(tokenizer):
    raw = Tokenizer.from_str(tokenizer.tokenizer.to_str())
    raw.enable_truncation(max_length=3)
    cutting = BertTokenizer(raw)
    data = TaggedSentences([["unbelievably", "the", "Antananarivo", "rose"]], [[1, 0, 1, 0]], ["O", "B-X"], "iob")
    assert encode_tagged(data, cutting) == encode_tagged(data, tokenizer)
    assert raw.truncation is not None  # the caller's tokenizer is left as it was


def test_words_predictions_refuses_missing_or_misshapen_predictions(tokenizer):
    data = TaggedSentences([["a", "b"], ["c"]], [[0, 1], [1]], ["O", "B-X"], "iob")
    examples = encode_tagged(data, tokenizer)
    with pytest.raises(BertCoreError, match="no prediction for word 0 of sentence 1"):
        words_predictions(data, examples, {0: [0, 1]})
    with pytest.raises(BertCoreError, match="2 labelled words but 1 predictions"):
        words_predictions(data, examples, {0: [0], 1: [1]})
    with pytest.raises(BertCoreError, match="example 7 is not in the list"):
        words_predictions(data, examples, {7: [0]})


# -- scoring (expected values computed with seqeval 1.2.2's default mode, and identical to ours on 300 random
# -- tag sequences and on noisy predictions for the CoNLL-2000 file) ---------------------------------------------

GOLD = [["I-NP", "I-NP", "B-NP", "O", "I-VP", "I-PP", "I-NP"], ["B-NP", "I-NP", "B-ADJP", "O"], []]
PRED = [["B-NP", "I-NP", "I-NP", "O", "I-VP", "I-VP", "B-NP"], ["B-NP", "I-NP", "B-ADVP", "I-ADVP"], []]


def test_iob_spans_follow_conlleval():
    # seqeval's get_entities, with the end made exclusive.
    assert iob_spans(GOLD[0]) == [("NP", 0, 2), ("NP", 2, 3), ("VP", 4, 5), ("PP", 5, 6), ("NP", 6, 7)]
    assert iob_spans(PRED[0]) == [("NP", 0, 3), ("VP", 4, 6), ("NP", 6, 7)]
    assert iob_spans(PRED[1]) == [("NP", 0, 2), ("ADVP", 2, 4)]
    assert iob_spans(["B-NP", "I-VP", "I-VP", "B-NP", "I-NP"]) == [("NP", 0, 1), ("VP", 1, 3), ("NP", 3, 5)]
    assert iob_spans(["B-NP", "B-VP", "I-VP", "I-NP", "I-NP"]) == [("NP", 0, 1), ("VP", 1, 3), ("NP", 3, 5)]
    assert iob_spans(["O", "I-LOC", "B-LOC", "I-LOC"]) == [("LOC", 1, 2), ("LOC", 2, 4)]
    assert iob_spans([]) == []


def test_span_scores_match_seqeval():
    scores = span_scores(GOLD, PRED)
    assert scores["precision"] == pytest.approx(0.4)
    assert scores["recall"] == pytest.approx(0.2857142857142857)
    assert scores["f1"] == pytest.approx(1 / 3)
    assert (scores["gold_spans"], scores["predicted_spans"], scores["correct_spans"]) == (7, 5, 2)
    per = scores["per_type"]
    assert sorted(per) == ["ADJP", "ADVP", "NP", "PP", "VP"]
    assert per["NP"] == pytest.approx({"precision": 2 / 3, "recall": 0.5, "f1": 0.5714285714285715, "support": 4})
    assert per["ADVP"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    assert per["VP"]["support"] == per["PP"]["support"] == per["ADJP"]["support"] == 1 and per["VP"]["f1"] == 0
    # An exact match in IOB1 and IOB2 spellings of the same chunks scores 1.
    iob1 = [["I-NP", "I-NP", "O", "I-VP", "I-NP"]]
    assert span_scores(iob1, [["B-NP", "I-NP", "O", "B-VP", "B-NP"]])["f1"] == 1.0
    half = span_scores([["B-NP", "I-NP", "O", "B-VP", "I-VP"]], [["B-NP", "I-NP", "O", "B-VP", "O"]])
    assert (half["precision"], half["recall"], half["f1"]) == (0.5, 0.5, 0.5)
    assert span_scores([["O"]], [["O"]])["f1"] == 0.0


def test_token_accuracy_and_shape_checks():
    assert token_accuracy(GOLD, PRED) == pytest.approx(5 / 11)
    assert token_accuracy([[1, 2], [3]], [[1, 0], [3]]) == pytest.approx(2 / 3)
    assert token_accuracy([], []) == 0.0
    with pytest.raises(BertCoreError, match="2 gold sentences but 1 predicted"):
        span_scores(GOLD[:2], PRED[:1])
    with pytest.raises(BertCoreError, match="sentence 0 has 2 gold tags but 1 predicted"):
        token_accuracy([[1, 2]], [[1]])


def test_majority_baselines_on_a_hand_made_example():
    data = parse_conll(SMALL)  # tags: O=0, B-NP=1, B-VP=2, I-NP=3
    train, val = data.subset([0, 1, 2]), data.subset([3])
    assert val.words == [["RUN", "the", "zebra", "."]]
    # "run" was I-NP once and B-VP once: the tie goes to the lower id; "zebra" is unseen: the most frequent tag
    # overall (B-NP, I-NP and B-VP twice each: B-NP, the lowest id).
    assert majority_baseline(train, val) == [[2, 1, 1, 0]]
    assert majority_baseline(train, val, "pos") == [[2, 1, 3, 0]]
    no_pos = TaggedSentences(train.words, train.tags, train.tag_names, "iob")
    with pytest.raises(BertCoreError, match="needs a part-of-speech column"):
        majority_baseline(no_pos, val, "pos")
    with pytest.raises(BertCoreError, match="different tag names"):
        majority_baseline(train, parse_conll(SMALL, "pos"))
    with pytest.raises(BertCoreError, match="unknown baseline key"):
        majority_baseline(train, val, "lemma")


# -- batches -------------------------------------------------------------------------------------------------------


def _examples(tokenizer, n: int = 40):
    rng = random.Random(1)
    words = [[rng.choice(["the", "dog", "unbelievably", "ran", "."]) for _ in range(rng.randint(1, 12))]
             for _ in range(n)]
    data = TaggedSentences(words, [[rng.randrange(3) for _ in s] for s in words], ["O", "B-X", "I-X"], "iob")
    return encode_tagged(data, tokenizer)


def test_collate_pads_ids_mask_and_labels(tokenizer):
    examples = _examples(tokenizer)
    batch = collate(examples, [3, 0], pad_id=tokenizer.pad_id)
    longest = max(len(examples[3].input_ids), len(examples[0].input_ids))
    assert batch.input_ids.shape == batch.labels.shape == batch.attention_mask.shape == (2, longest)
    n = len(examples[0].input_ids)
    assert batch.input_ids[1, :n].tolist() == examples[0].input_ids
    assert batch.labels[1, :n].tolist() == examples[0].labels
    assert batch.attention_mask[1].sum().item() == n and set(batch.labels[1, n:].tolist()) <= {-100}
    assert batch.indices.tolist() == [3, 0] and batch.token_type_ids.abs().sum().item() == 0
    moved = batch.to("meta")
    assert moved.input_ids.device.type == "meta" and moved.indices.device.type == "cpu"


def test_train_batches_are_seeded_and_eval_batches_go_in_order(tokenizer):
    examples = _examples(tokenizer)

    def first(seed: int, count: int = 10) -> list[list[int]]:
        batches = train_batches(examples, 8, seed=seed, bucket_batches=2)
        return [next(batches).indices.tolist() for _ in range(count)]

    assert first(0) == first(0) and first(0) != first(1)
    epoch = [i for b in first(0, 5) for i in b]
    assert sorted(epoch) == list(range(40))  # one epoch: every example once
    evaluated = list(eval_batches(examples, batch_size=16))
    assert [b.indices.tolist() for b in evaluated] == [list(range(0, 16)), list(range(16, 32)), list(range(32, 40))]
    with pytest.raises(BertCoreError, match="batch size"):
        next(train_batches(examples, 0))
    with pytest.raises(BertCoreError, match="no examples"):
        next(train_batches([], 4))


# -- the real file -------------------------------------------------------------------------------------------------


def test_conll2000_parses_whole(conll2000):
    assert len(conll2000) == 8936 and conll2000.num_tokens == 211_727
    assert conll2000.scheme == "iob" and conll2000.tag_names[0] == "O" and conll2000.num_tags == 22
    assert conll2000.words[0][:3] == ["Confidence", "in", "the"]
    assert conll2000.tag_strings(0)[:3] == ["B-NP", "B-PP", "B-NP"]
    assert conll2000.pos[0][:3] == ["NN", "IN", "DT"]
    assert not any("IOB1" in n for n in conll2000.notes)  # CoNLL-2000 is IOB2


def test_conll2000_baselines_on_a_seeded_split(conll2000):
    train, val = split_sentences(conll2000, seed=0)
    assert (len(train), len(val)) == (8042, 894)
    gold = [val.tag_strings(i) for i in range(len(val))]
    scores = {}
    for key in ("pos", "word"):
        predicted = majority_baseline(train, val, key)
        scores[key] = span_scores(gold, [[val.tag_names[t] for t in s] for s in predicted])["f1"]
    # CoNLL-2000 reports 77.07 (POS) on its test split; seqeval gave the same F1 as ours on these predictions.
    assert scores["pos"] > 0.70
    assert scores["pos"] == pytest.approx(0.760707, abs=1e-6)
    assert scores["word"] == pytest.approx(0.696610, abs=1e-6)


def test_conll2000_encodes_with_aligned_labels(conll2000, tokenizer):
    part = conll2000.subset(range(300))
    examples = encode_tagged(part, tokenizer, max_length=32)
    assert len(examples) > len(part)  # some sentences need two pieces at 32 tokens
    predicted = {i: [lab for lab in e.labels if lab != -100] for i, e in enumerate(examples)}
    assert words_predictions(part, examples, predicted) == part.tags
    whole = [e for e in examples if e.first_word == 0 and e.num_words == len(part.words[e.sentence])]
    for e in whole[:50]:
        enc = tokenizer.tokenizer.encode(part.words[e.sentence], is_pretokenized=True, add_special_tokens=False)
        assert e.input_ids[1:-1] == enc.ids
        firsts = [i for i, w in enumerate(enc.word_ids) if i == 0 or enc.word_ids[i - 1] != w]
        assert [i for i, lab in enumerate(e.labels[1:-1]) if lab != -100] == firsts


def test_a_word_pos_file_read_as_chunks_points_at_the_pos_column(conll2000):
    lines = "\n\n".join("\n".join(f"{w} {p}" for w, p in zip(conll2000.words[i], conll2000.pos[i]))
                        for i in range(50))
    message = _error(lines)
    assert "unknown tag scheme" in message and "'NN' on line 1" in message and "--tag-column pos" in message
    assert parse_conll(lines, "pos").scheme == "plain"
