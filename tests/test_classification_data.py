"""Loading labelled CSVs for fine-tuning: formats, label mapping, the errors a user can cause, seeded splits."""

import pytest

from bert_core.data.classification_data import (
    MAX_CSV_BYTES,
    ClassificationData,
    csv_columns,
    encode_examples,
    load_classification_csv,
    split_train_val,
)
from bert_core.data.task_downloads import clean_ag_news_text
from bert_core.data.batching import collate, eval_batches, train_batches
from bert_core.errors import BertCoreError
from bert_core.model.tokenization import train_tokenizer


def _csv(text: str) -> bytes:
    return text.encode("utf-8")


def test_headed_csv_with_chosen_columns_maps_labels_to_contiguous_ids():
    data = load_classification_csv(
        _csv("id,review,stars\n1,great film,good\n2,dull film,bad\n3,fine acting,good\n"),
        text_columns="review",
        label_column="stars",
    )
    assert data.texts == ["great film", "dull film", "fine acting"]
    assert data.label_names == ["bad", "good"]
    assert data.labels == [1, 0, 1]
    assert data.num_labels == 2 and data.label_counts() == [1, 2]


def test_columns_are_found_by_common_names_when_not_chosen():
    data = load_classification_csv(_csv("Sentence,Label\nhello there,0\ngood bye,1\n"))
    assert data.text_columns == ("Sentence",) and data.label_column == "Label"


def test_integer_labels_sort_numerically_not_as_strings():
    data = load_classification_csv(_csv("label,text\n10,a\n2,b\n1,c\n"))
    assert data.label_names == ["1", "2", "10"]
    assert data.labels == [2, 1, 0]


def test_two_text_columns_join_with_a_period_or_stay_a_pair():
    raw = _csv("title,body,label\nRain,Wet streets,0\nSun,Dry fields,1\n")
    joined = load_classification_csv(raw, text_columns=["title", "body"], label_column="label")
    assert joined.texts == ["Rain . Wet streets", "Sun . Dry fields"] and joined.texts_b is None
    paired = load_classification_csv(raw, text_columns=["title", "body"], label_column="label", as_pair=True)
    assert paired.texts == ["Rain", "Sun"] and paired.texts_b == ["Wet streets", "Dry fields"]
    assert paired.example_text(0) == "Rain | Wet streets"


def test_ag_news_format_is_detected_without_a_header_and_unescaped(tmp_path):
    f = tmp_path / "news.csv"
    f.write_text(
        '"3","Oil #36;50 a barrel","Prices rose\\today, traders said ""wow"" &lt;b&gt;x&lt;/b&gt;"\n'
        '"1","Talks fail","Leaders met #151; and left"\n'
        '"2","Cup final","A late goal"\n'
        '"4","New chip","Faster chips"\n',
        encoding="utf-8",
    )
    data = load_classification_csv(f)
    assert data.text_columns == ("title", "description") and data.label_column == "class"
    assert data.label_names == ["1", "2", "3", "4"]  # no classes.txt beside it
    assert data.labels == [2, 0, 1, 3]
    assert data.texts[0] == 'Oil $50 a barrel . Prices rose today, traders said "wow" x'
    assert data.texts[1] == "Talks fail . Leaders met \u2014 and left"
    (tmp_path / "classes.txt").write_text("World\nSports\nBusiness\nSci/Tech\n")
    assert load_classification_csv(f).label_names == ["World", "Sports", "Business", "Sci/Tech"]
    assert csv_columns(f) == ["class", "title", "description"]


def test_clean_ag_news_text_leaves_plain_text_alone():
    assert clean_ag_news_text("Plain words, 3 of them.") == "Plain words, 3 of them."


def test_headerless_label_text_file_is_read_as_label_then_text():
    data = load_classification_csv(_csv("0,a bad film\n1,a good film\n"))
    assert data.texts == ["a bad film", "a good film"] and data.labels == [0, 1]


def test_shared_ag_news_file_loads_with_its_class_names(shared_data):
    data = load_classification_csv(shared_data / "ag_news" / "news.csv")
    assert len(data) == 6000
    assert data.label_names == ["World", "Sports", "Business", "Sci/Tech"]
    assert min(data.label_counts()) > 1000
    assert not any("\\" in t or "#39;" in t for t in data.texts)


def test_shared_polarity_file_loads_as_label_text(shared_data):
    data = load_classification_csv(shared_data / "sentence_polarity" / "polarity.csv")
    # 0 and 1 as the shared data's README documents them.
    assert len(data) == 9000 and data.label_names == ["negative", "positive"] and data.label_counts() == [4500, 4500]


def test_a_csvs_own_label_words_are_its_label_names_and_numbers_take_documented_names(tmp_path):
    words = load_classification_csv(_csv("label,text\nsports,a late goal\nbusiness,shares fell\nsports,a win\n"))
    assert words.label_names == ["business", "sports"] and words.labels == [1, 0, 1]
    folder = tmp_path / "sentence_polarity"
    folder.mkdir()
    (folder / "polarity.csv").write_text("label,text\n1,a joy\n0,a bore\n")
    assert load_classification_csv(folder / "polarity.csv").label_names == ["negative", "positive"]
    # The same numbers in any other file stay numbers; words in the polarity file stay words.
    (tmp_path / "polarity.csv").write_text("label,text\n1,a joy\n0,a bore\n")
    assert load_classification_csv(tmp_path / "polarity.csv").label_names == ["0", "1"]
    (folder / "polarity.csv").write_text("label,text\ngood,a joy\nbad,a bore\n")
    assert load_classification_csv(folder / "polarity.csv").label_names == ["bad", "good"]


def test_missing_column_names_the_columns_that_exist():
    with pytest.raises(BertCoreError, match=r"no label column 'sentiment'; the columns are: text, stars"):
        load_classification_csv(_csv("text,stars\na,1\nb,2\n"), label_column="sentiment")
    with pytest.raises(BertCoreError, match=r"no text column 'body'.*text, stars"):
        load_classification_csv(_csv("text,stars\na,1\nb,2\n"), text_columns="body", label_column="stars")


def test_unrecognised_label_column_asks_the_user_to_choose():
    with pytest.raises(BertCoreError, match=r"which column holds the labels; the columns are: words, score"):
        load_classification_csv(_csv("words,score\na,1\nb,2\n"))


def test_a_single_class_is_refused():
    with pytest.raises(BertCoreError, match=r"holds a single class \('pos'\).*at least two"):
        load_classification_csv(_csv("text,label\na,pos\nb,pos\n"))


def test_continuous_labels_are_refused_as_not_categorical():
    with pytest.raises(BertCoreError, match=r"continuous numbers \(e.g. 0.25\), not classes"):
        load_classification_csv(_csv("text,label\na,0.25\nb,0.5\nc,1\n"))


def test_integral_float_labels_are_categorical():
    assert load_classification_csv(_csv("text,label\na,1.0\nb,2.0\n")).label_names == ["1.0", "2.0"]


def test_too_many_distinct_labels_are_refused():
    rows = "".join(f"text {i},name{i}\n" for i in range(60))
    with pytest.raises(BertCoreError, match=r"60 distinct values \(more than 50\)"):
        load_classification_csv(_csv("text,label\n" + rows))


def test_empty_rows_are_an_error_naming_them_unless_dropped():
    raw = _csv("text,label\ngood,1\n,0\nbad,\n  ,1\nok,0\n")
    with pytest.raises(BertCoreError, match=r"3 row\(s\) of upload.csv have an empty text or label \(line 3, 4, 5\)"):
        load_classification_csv(raw)
    data = load_classification_csv(raw, drop_empty=True)
    assert data.texts == ["good", "ok"] and data.dropped_rows == 3
    assert "dropped 3 row(s)" in data.notes[0]


def test_blank_lines_between_rows_are_not_counted_as_empty_rows():
    assert len(load_classification_csv(_csv("text,label\na,0\n\nb,1\n\n"))) == 2


def test_over_size_file_is_refused(tmp_path):
    f = tmp_path / "big.csv"
    with open(f, "wb") as fh:
        fh.truncate(MAX_CSV_BYTES + 1)
    with pytest.raises(BertCoreError, match=r"big.csv is 50 MB; the limit is 50 MB"):
        load_classification_csv(f)
    with pytest.raises(BertCoreError, match=r"the limit is 50 MB"):
        load_classification_csv(b"a" * (MAX_CSV_BYTES + 1))


def test_binary_and_non_utf8_files_are_refused():
    with pytest.raises(BertCoreError, match=r"looks binary"):
        load_classification_csv(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    with pytest.raises(BertCoreError, match=r"not UTF-8 text \(byte 14"):
        load_classification_csv("text,label\ncaf\u00e9,1\nb,0\n".encode("latin-1"))


def test_empty_file_and_header_only_file_are_refused():
    with pytest.raises(BertCoreError, match=r"is empty"):
        load_classification_csv(b"  \n")
    with pytest.raises(BertCoreError, match=r"header but no data rows"):
        load_classification_csv(_csv("text,label\n"))


def test_ragged_row_is_named():
    with pytest.raises(BertCoreError, match=r"line 3 has 3 fields but the header has 2"):
        load_classification_csv(_csv("text,label\na,1\nb,0,extra\n"))


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(BertCoreError, match=r"CSV file not found"):
        load_classification_csv(tmp_path / "nope.csv")


def _numbers(n: int) -> ClassificationData:
    return ClassificationData(texts=[f"t{i}" for i in range(n)], labels=[i % 3 for i in range(n)],
                              label_names=["a", "b", "c"])


def test_split_is_seeded_disjoint_and_of_the_asked_sizes():
    data = _numbers(100)
    train, val = split_train_val(data, 50, 20, seed=7)
    again_train, again_val = split_train_val(data, 50, 20, seed=7)
    other_train, _ = split_train_val(data, 50, 20, seed=8)
    assert len(train) == 50 and len(val) == 20
    assert not set(train.texts) & set(val.texts)
    assert train.texts == again_train.texts and val.texts == again_val.texts
    assert train.texts != other_train.texts
    assert train.label_names == data.label_names


def test_split_larger_than_the_data_is_refused():
    with pytest.raises(BertCoreError, match=r"asked for 90 training \+ 20 validation examples but .* has only 100"):
        split_train_val(_numbers(100), 90, 20)


def test_batches_pad_to_the_longest_member_and_repeat_with_the_seed():
    tok = train_tokenizer(["the cat sat on the mat", "a dog ran far away from home today"] * 20, vocab_size=120)
    data = ClassificationData(texts=["the cat", "a dog ran far away from home today", "sat", "the mat"],
                              labels=[0, 1, 0, 1], label_names=["x", "y"])
    enc = encode_examples(data, tok, max_length=8)
    assert max(len(e.input_ids) for e in enc) == 8  # truncated to the max length
    batch = collate(enc, [0, 2])
    assert batch.input_ids.shape == (2, max(len(enc[0].input_ids), len(enc[2].input_ids)))
    assert batch.attention_mask.sum().item() == len(enc[0].input_ids) + len(enc[2].input_ids)
    assert (batch.input_ids[batch.attention_mask == 0] == tok.pad_id).all()
    first = [b.indices.tolist() for _, b in zip(range(4), train_batches(enc, 2, seed=3))]
    second = [b.indices.tolist() for _, b in zip(range(4), train_batches(enc, 2, seed=3))]
    assert first == second and sorted(sum(first[:2], [])) == [0, 1, 2, 3]
    seen = sorted(i for b in eval_batches(enc, batch_size=3, by_length=True) for i in b.indices.tolist())
    assert seen == [0, 1, 2, 3]


def test_too_short_max_length_is_refused():
    tok = train_tokenizer(["a b c d e f g"] * 5, vocab_size=100)
    with pytest.raises(BertCoreError, match=r"at least 8"):
        encode_examples(_numbers(3), tok, max_length=4)


def test_length_grouped_batches_cover_each_example_once_per_epoch_with_less_padding():
    tok = train_tokenizer([" ".join(["word"] * (i % 40 + 1)) for i in range(50)], vocab_size=100)
    data = ClassificationData(texts=[" ".join(["word"] * (i * 7 % 60 + 1)) for i in range(320)],
                              labels=[i % 2 for i in range(320)], label_names=["a", "b"])
    enc = encode_examples(data, tok, max_length=64)

    def epoch(bucket):
        batches = [b for _, b in zip(range(10), train_batches(enc, 32, seed=1, bucket_batches=bucket))]
        return batches, sum(b.input_ids.numel() for b in batches)

    grouped, grouped_cells = epoch(50)
    plain, plain_cells = epoch(1)
    assert sorted(i for b in grouped for i in b.indices.tolist()) == list(range(320))
    assert sorted(i for b in plain for i in b.indices.tolist()) == list(range(320))
    real = sum(len(e.input_ids) for e in enc)
    assert grouped_cells - real < (plain_cells - real) / 4
