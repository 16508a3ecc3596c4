import pytest

from bert_core.data.corpora import (
    MAX_INPUT_BYTES,
    Corpus,
    corpus_from_bytes,
    corpus_from_text,
    load_corpus,
    split_heldout,
    split_sentences,
)
from bert_core.errors import BertCoreError


@pytest.mark.parametrize("paragraph, expected", [
    ("Mr. Smith met Dr. Jones at 3.30 p.m. on Monday. They talked.", ["Mr. Smith met Dr. Jones at 3.30 p.m. on Monday.", "They talked."]),
    ("We ate fruit, e.g. apples and pears. It cost $4.50! Really?", ["We ate fruit, e.g. apples and pears.", "It cost $4.50!", "Really?"]),
    ('"Stop," she said. "Now!" He stopped.', ['"Stop," she said.', '"Now!"', "He stopped."]),
    ("J. K. Rowling wrote it. The U.S. Army came.", ["J. K. Rowling wrote it.", "The U.S. Army came."]),
    ('He said "go home." Then he left. (This is quoted.) Next.', ['He said "go home."', "Then he left.", "(This is quoted.)", "Next."]),
    ("the end . the beginning ? yes .", ["the end .", "the beginning ?", "yes ."]),
    ("  no final stop  ", ["no final stop"]),
    ("", []),
])
def test_sentence_splitter_handles_abbreviations_decimals_and_quotes(paragraph, expected):
    assert split_sentences(paragraph) == expected


def test_pasted_text_splits_documents_at_blank_lines_and_joins_wrapped_lines():
    text = "The cat sat on\nthe mat. It purred.\n\n\n  \nA second document here.\r\nIt has two sentences.\n"
    corpus = corpus_from_text(text)
    assert corpus.documents == [["The cat sat on the mat.", "It purred."],
                                ["A second document here.", "It has two sentences."]]
    assert corpus.num_sentences == 4 and corpus.num_words == 16 and list(corpus.texts())[1] == "It purred."


def test_one_sentence_per_line_text_keeps_its_lines():
    corpus = corpus_from_text("First line ends here .\nSecond one too , with a comma .\nThird ?\n\nNext text .\nAgain .")
    assert corpus.documents == [["First line ends here .", "Second one too , with a comma .", "Third ?"],
                                ["Next text .", "Again ."]]


def test_uploaded_bytes_with_bom_are_read_as_utf8():
    corpus = corpus_from_bytes("\ufeffCafé au lait. Très bon.".encode("utf-8"), name="notes.txt")
    assert corpus.documents == [["Café au lait.", "Très bon."]] and corpus.name == "notes.txt"


def test_empty_upload_is_rejected():
    with pytest.raises(BertCoreError, match=r"'notes.txt' is empty \(0 bytes\); upload a UTF-8 text file"):
        corpus_from_bytes(b"", name="notes.txt")


def test_blank_text_is_rejected():
    with pytest.raises(BertCoreError, match=r"'pasted' is empty; give some text .* or use the 'toy' corpus"):
        corpus_from_text(" \n\t\n ")


def test_binary_upload_is_rejected():
    with pytest.raises(BertCoreError, match=r"looks like a binary file \(it contains NUL bytes\); upload plain UTF-8"):
        corpus_from_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", name="image.png")


def test_non_utf8_upload_is_rejected_with_the_offending_byte():
    data = "Ein schöner Tag.".encode("latin-1")
    with pytest.raises(BertCoreError, match=r"is not UTF-8 text \(byte 0xf6 at offset 7\); re-save it as UTF-8"):
        corpus_from_bytes(data, name="tag.txt")


def test_oversize_upload_is_rejected():
    with pytest.raises(BertCoreError, match=r"is 50.0 MB; the limit is 50 MB. Use an excerpt"):
        corpus_from_bytes(b"a" * (MAX_INPUT_BYTES + 1), name="big.txt")


def test_oversize_file_is_rejected_before_reading(tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(MAX_INPUT_BYTES + 2**20)  # sparse: no real disk use
    with pytest.raises(BertCoreError, match=r"is 51.0 MB; the limit is 50 MB"):
        load_corpus(str(big))


def test_pasted_text_with_nul_characters_is_rejected():
    with pytest.raises(BertCoreError, match="contains NUL characters"):
        corpus_from_text("abc\x00def")


def test_missing_path_and_unknown_name_are_clear_errors(tmp_path):
    with pytest.raises(BertCoreError, match=r"unknown corpus 'shakespear': use one of toy, tinyshakespeare"):
        load_corpus("shakespear")
    with pytest.raises(BertCoreError, match="is a folder; give a text file"):
        load_corpus(str(tmp_path))
    with pytest.raises(BertCoreError, match="no corpus given"):
        load_corpus("  ")


def test_file_path_loads_as_a_corpus(tmp_path):
    path = tmp_path / "story.txt"
    path.write_text("Once upon a time. The end.\n\nAnother tale. It ends.\n", encoding="utf-8")
    corpus = load_corpus(str(path))
    assert corpus.name == "story" and corpus.num_documents == 2 and corpus.source == str(path)


def test_toy_spec_is_seeded():
    assert load_corpus("toy", seed=1).documents == load_corpus("toy", seed=1).documents
    assert load_corpus("toy", seed=1).documents != load_corpus("toy", seed=2).documents


def test_heldout_split_is_by_whole_documents_and_seeded():
    corpus = Corpus("c", [[f"doc {i} sentence {j}." for j in range(3)] for i in range(100)])
    train, held = split_heldout(corpus, 0.1, seed=3)
    assert len(held.documents) == 10 and len(train.documents) == 90
    assert not {s for d in train.documents for s in d} & {s for d in held.documents for s in d}
    assert sorted(train.documents + held.documents) == sorted(corpus.documents)
    assert split_heldout(corpus, 0.1, seed=3)[1].documents == held.documents
    assert split_heldout(corpus, 0.1, seed=4)[1].documents != held.documents


def test_single_document_gives_up_a_contiguous_block():
    corpus = Corpus("one", [[f"sentence {j}." for j in range(200)]])
    train, held = split_heldout(corpus, 0.1, seed=0)
    block = held.documents[0]
    assert len(held.documents) == 1 and len(block) == 20
    start = int(block[0].split()[1][:-1])
    assert block == [f"sentence {j}." for j in range(start, start + 20)]
    assert sum(train.documents, []) == [s for s in corpus.documents[0] if s not in block]


def test_bad_heldout_fraction_and_tiny_corpus_are_clear_errors():
    with pytest.raises(BertCoreError, match="held-out fraction must be between 0 and 1"):
        split_heldout(Corpus("c", [["a."], ["b."]]), 1.0)
    with pytest.raises(BertCoreError, match="fewer than 2 sentences"):
        split_heldout(Corpus("c", [["a."]]), 0.5)


def test_shared_wikitext_file_splits_into_articles(shared_data):
    corpus = load_corpus(str(shared_data / "wikitext-2" / "valid.txt"))
    assert corpus.num_documents == 60
    first = corpus.documents[0]
    assert first[0].startswith("Homarus gammarus , known as the European lobster")
    assert not any("= =" in s or "@" in s for d in corpus.documents for s in d)
    assert any("0.7" in s for s in first)


def test_brown_is_one_sentence_per_line_with_texts_as_documents(shared_data):
    corpus = load_corpus("brown")
    assert corpus.num_documents == 450 and corpus.num_words > 1_000_000
    assert corpus.documents[0][0].startswith("The Fulton County Grand Jury said Friday")


def test_tinyshakespeare_documents_are_stretches_of_dialogue(shared_data):
    corpus = load_corpus("tinyshakespeare")
    assert all(len(d) >= 5 for d in corpus.documents[:-1])
    assert corpus.documents[0][0] == "First Citizen: Before we proceed any further, hear me speak."
