"""Extractive QA data: SQuAD reading and its errors, the toy task, passage splits, the sliding window, the best span
from logits, the official SQuAD v1.1 scores and seeded batches."""

import json

import pytest
import torch
from tokenizers import Tokenizer

from bert_core.data import answer_spans_data as qa
from bert_core.data.answer_spans_data import (
    QAData,
    QAExample,
    best_answers,
    encode_qa,
    exact_match_score,
    f1_score,
    load_squad,
    normalize_answer,
    parse_squad,
    split_by_passage,
    squad_metrics,
    toy_qa_task,
)
from bert_core.data.batching import collate, eval_batches, train_batches
from bert_core.data.toy_grammar import TOPICS
from bert_core.errors import BertCoreError
from bert_core.model.tokenization import BertTokenizer

DENVER = ("Super Bowl 50 was an American football game won by the Denver Broncos, champion of the American Football "
          "Conference (AFC), over the National Football Conference (NFC) champion Carolina Panthers.")


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer.load("checkpoints/bert-tiny-english")


def squad(**overrides) -> dict:
    """A small valid SQuAD v1.1 object: two articles, three passages, five questions."""
    obj = {"version": "1.1", "data": [
        {"title": "Super_Bowl_50", "paragraphs": [
            {"context": DENVER, "qas": [
                {"id": "q1", "question": "Which team won?",
                 "answers": [{"text": "Denver Broncos", "answer_start": DENVER.index("Denver")},
                             {"text": "Broncos", "answer_start": DENVER.index("Broncos")}]},
                {"id": "q2", "question": "Who lost?",
                 "answers": [{"text": "Carolina Panthers", "answer_start": DENVER.index("Carolina")}]}]},
            {"context": "The game was played in Santa Clara.", "qas": [
                {"id": "q3", "question": "Where was it played?",
                 "answers": [{"text": "Santa Clara", "answer_start": 23}]}]},
        ]},
        {"title": "Rivers", "paragraphs": [
            {"context": "The Rhine flows into the North Sea.", "qas": [
                {"id": "q4", "question": "Where does the Rhine flow?",
                 "answers": [{"text": "the North Sea", "answer_start": 21}]},
                {"id": "q5", "question": "Which river?", "answers": [{"text": "Rhine", "answer_start": 4}]}]},
        ]},
    ]}
    obj.update(overrides)
    return obj


# -- SQuAD files -----------------------------------------------------------------------------------------------------

def test_a_squad_file_is_read_with_titles_answers_and_notes(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(squad()), encoding="utf-8")
    data = load_squad(path)
    assert len(data) == 5 and data.source == "dev.json" and data.num_passages == 3
    first = data.examples[0]
    assert (first.id, first.question, first.title) == ("q1", "Which team won?", "Super_Bowl_50")
    assert first.answers == ["Denver Broncos", "Broncos"] and first.answer_starts == [DENVER.index("Denver"),
                                                                                       DENVER.index("Broncos")]
    assert data.examples[0].context == data.examples[1].context == DENVER
    assert data.examples[4].title == "Rivers" and data.notes == ["5 questions on 3 passages from 2 articles"]
    # bytes (an upload), JSON text and an already parsed dict read the same
    for again in (load_squad(path.read_bytes(), name="up.json"), parse_squad(path.read_text()), parse_squad(squad())):
        assert again.examples == data.examples


def test_answers_off_by_whitespace_are_forgiven_and_trimmed():
    obj = squad()
    answer = obj["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]
    answer["text"], answer["answer_start"] = " Santa Clara ", 22  # the space before "Santa" and one past the end
    data = parse_squad(obj)
    assert data.examples[2].answers == ["Santa Clara"] and data.examples[2].answer_starts == [23]


def test_squad_v2_unanswerable_questions_are_skipped_and_counted():
    obj = squad(version="v2.0")
    obj["data"][1]["paragraphs"][0]["qas"].append(
        {"id": "q6", "question": "Who built the Rhine?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "Rhine", "answer_start": 4}]})
    obj["data"][1]["paragraphs"][0]["qas"][0]["is_impossible"] = False
    data = parse_squad(obj, source="v2.json")
    assert [e.id for e in data.examples] == ["q1", "q2", "q3", "q4", "q5"]
    assert any("skipped 1 unanswerable" in n for n in data.notes)
    only_impossible = {"data": [{"paragraphs": [{"context": "x y", "qas": [
        {"id": "a", "question": "?", "answers": [], "is_impossible": True}]}]}]}
    with pytest.raises(BertCoreError, match=r"no answerable questions \(all 1 are SQuAD v2 unanswerable"):
        parse_squad(only_impossible)


def _broken(change) -> dict:
    obj = squad()
    change(obj)
    return obj


@pytest.mark.parametrize("raw, message", [
    (b'{"data": [', r"upload\.json is not valid JSON \(line 1, column 11"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00", r"looks binary"),
    (b'{"data": "caf\xe9"}', r"not UTF-8 text \(byte 13"),
    (b"   \n", r"upload\.json is empty"),
    (b"[1, 2]", r"not in SQuAD format: the top level should be an object with a 'data' list .* it is a list"),
    (b'{"version": "1.1"}', r"an object without a 'data' field"),
])
def test_files_that_are_not_squad_json_are_refused_clearly(raw, message):
    with pytest.raises(BertCoreError, match=message):
        load_squad(raw)


def test_a_file_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(qa, "MAX_SQUAD_BYTES", 1000)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(squad()) + " " * 2000)
    with pytest.raises(BertCoreError, match=r"big\.json is 0 MB; the limit is 0 MB"):
        load_squad(path)
    with pytest.raises(BertCoreError, match=r"the limit is"):
        load_squad(path.read_bytes())


def test_missing_paths_and_folders_are_refused(tmp_path):
    with pytest.raises(BertCoreError, match="SQuAD file not found"):
        load_squad(tmp_path / "nope.json")
    with pytest.raises(BertCoreError, match="is a folder"):
        load_squad(tmp_path)


def _set(path, value):
    def change(obj):
        target = obj
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return change


QA0 = ("data", 0, "paragraphs", 0, "qas", 0)


@pytest.mark.parametrize("change, message", [
    (_set(("data", 0, "paragraphs", 0, "context"), KeyError),
     r"data\[0\]\.paragraphs\[0\] has no 'context' field"),
    (_set(("data", 1, "paragraphs"), "none"), r"data\[1\]\.paragraphs should be a list, not a string"),
    (_set(("data", 0, "paragraphs", 1), 7), r"data\[0\]\.paragraphs\[1\] should be an object, not a number"),
    (_set((*QA0, "answers", 0, "answer_start"), "177"),
     r"data\[0\]\.paragraphs\[0\]\.qas\[0\] \(id 'q1'\)\.answers\[0\]\.answer_start should be a whole number, "
     r"not a string"),
    (_set((*QA0, "question"), KeyError), r"qas\[0\] \(id 'q1'\) has no 'question' field"),
    (_set((*QA0, "id"), None), r"qas\[0\] has no 'id'"),
    (_set(("data", 1, "paragraphs", 0, "qas", 1, "id"), "q4"), r"qas\[1\] \(id 'q4'\) repeats the id of "
                                                                 r"data\[1\]\.paragraphs\[0\]\.qas\[0\]"),
    (_set((*QA0, "answers"), []), r"\(id 'q1'\) has no answers"),
    (_set((*QA0, "question"), "  "), r"data\[0\]\.paragraphs\[0\]\.qas\[0\] \(id 'q1'\) has an empty question"),
    (_set(("data", 0, "paragraphs", 1, "context"), " \n"), r"data\[0\]\.paragraphs\[1\] has an empty context"),
    (_set((*QA0, "answers", 0, "text"), ""), r"answers\[0\] has an empty answer text"),
    (_set((*QA0, "answers", 0, "answer_start"), 5000), r"answer_start 5000 is outside its context"),
    (_set(("data",), []), r"has no answerable questions\. Give"),
])
def test_each_mistake_in_a_squad_file_is_named_where_it_is(change, message):
    with pytest.raises(BertCoreError, match=message):
        parse_squad(_broken(change), source="train.json")


def test_an_answer_not_at_its_answer_start_says_what_is_there_instead():
    start = DENVER.index("Denver") - 4  # points at "the Denver", as a shifted export would
    obj = _broken(_set((*QA0, "answers", 0, "answer_start"), start))
    with pytest.raises(BertCoreError) as err:
        parse_squad(obj, source="train.json")
    assert str(err.value) == (
        f"train.json: data[0].paragraphs[0].qas[0] (id 'q1').answers[0]: answer 'Denver Broncos' is not at "
        f"answer_start {start} of its context (found 'the Denver Bro'); fix answer_start or the text.")


# -- the toy task ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def toy():
    return toy_qa_task(seed=0, num_stories=120)


def test_toy_task_is_deterministic_for_a_seed_and_differs_across_seeds(toy):
    assert toy_qa_task(seed=0, num_stories=120).examples == toy.examples
    assert toy_qa_task(seed=1, num_stories=120).examples != toy.examples
    assert toy_qa_task(seed=0, num_stories=30).examples == toy.examples[: len(toy_qa_task(0, 30))]


def test_toy_answers_are_spans_at_their_starts_with_unique_ids_and_topic_titles(toy):
    assert len({e.id for e in toy.examples}) == len(toy)
    assert toy.num_passages == 120
    for e in toy.examples:
        assert len(e.answers) == 1 and e.context[e.answer_starts[0]:][: len(e.answers[0])] == e.answers[0]
        assert e.title in TOPICS and e.question.endswith("?")
    kinds = {e.question.split()[0] for e in toy.examples}
    assert kinds == {"Where", "What", "Who", "Which"}


def test_toy_stories_have_several_characters_so_names_must_be_matched_to_places(toy):
    by_story: dict[str, list[QAExample]] = {}
    for e in toy.examples:
        by_story.setdefault(e.context, []).append(e)
    for story, questions in by_story.items():
        people = {e.answers[0] for e in questions if e.question.startswith("Who")}
        assert 2 <= len(people) <= 4 and len(questions) == 4 * len(people)
        places = [e.answers[0] for e in questions if e.question.startswith(("Where", "Which"))]
        assert len(set(places)) == len(places)  # "Who went to the barn?" has one answer
        assert 3 <= story.count(".") <= 11


def test_each_toy_answer_is_marked_in_the_sentence_that_answers_its_question(toy):
    """A name that appears twice ("Leo went to the valley. Leo found a stone.") is marked where the question's
    place or find is: a label at the other sentence's name would teach reading the wrong sentence."""
    for e in toy.examples:
        if e.question.startswith("Who"):
            start = e.answer_starts[0]
            end = e.context.find(".", start)
            sentence = e.context[start:end]
            named = e.question.split(" the ", 1)[1].rstrip("?")
            assert named in sentence, (e.question, sentence)


def test_toy_task_refuses_too_few_stories():
    with pytest.raises(BertCoreError, match="at least 2 stories"):
        toy_qa_task(num_stories=1)


# -- passage splits --------------------------------------------------------------------------------------------------

def test_split_by_passage_keeps_passages_apart_and_is_seeded(toy):
    train, val = split_by_passage(toy, seed=3)
    assert not {e.context for e in train.examples} & {e.context for e in val.examples}
    assert len(train) + len(val) == len(toy)
    assert round(len(toy) * 0.1) <= len(val) < round(len(toy) * 0.1) + 16  # whole stories, at most 4x4 questions
    assert train.source.endswith("(train)") and val.source.endswith("(validation)")
    again = split_by_passage(toy, seed=3)
    assert again[0].examples == train.examples and again[1].examples == val.examples
    assert split_by_passage(toy, seed=4)[1].examples != val.examples
    small_train, small_val = split_by_passage(toy, 100, 50, seed=3)
    assert 100 <= len(small_train) < 116 and 50 <= len(small_val) < 66
    assert not {e.context for e in small_train.examples} & {e.context for e in small_val.examples}


def test_split_by_passage_errors(toy):
    with pytest.raises(BertCoreError, match="at most"):
        split_by_passage(toy, len(toy), 10)
    one_passage = parse_squad(squad()).subset([0, 1])
    with pytest.raises(BertCoreError, match="has 1 passage"):
        split_by_passage(one_passage)
    two_passages = QAData([QAExample(f"{c}{i}", "Who?", c * 5, [c], [0]) for c in "ab" for i in range(3)])
    with pytest.raises(BertCoreError, match="with whole passages on each side"):
        split_by_passage(two_passages, 1, 4)  # the validation side can only take one passage, 3 questions


# -- the sliding window ----------------------------------------------------------------------------------------------

LONG = " ".join(f"On day {i} the {['red', 'blue', 'green'][i % 3]} ship sailed past the Lighthouse of Pharos."
                for i in range(14))


def _long_data() -> QAData:
    answers = ["Lighthouse of Pharos", "day 7", "green ship"]
    starts = [LONG.index("Lighthouse of Pharos"), LONG.index("day 7"), LONG.index("green ship")]
    return QAData([QAExample(f"x{i}", q, LONG, [a], [s]) for i, (q, a, s) in enumerate(
        zip(["Which lighthouse?", "When did it sail?", "Which ship?"], answers, starts))])


def test_sliding_window_overlaps_by_doc_stride_covers_the_context_and_labels_the_answer(tokenizer):
    data = _long_data()
    max_length, stride = 40, 10
    features = encode_qa(data, tokenizer, max_length=max_length, doc_stride=stride)
    context = tokenizer.tokenizer.encode(LONG, add_special_tokens=False)
    for index, example in enumerate(data.examples):
        mine = [f for f in features if f.example == index]
        assert len(mine) >= 5
        q_len = len(tokenizer.encode(example.question))
        windows = []
        for f in mine:
            assert len(f.input_ids) <= max_length
            assert f.input_ids[0] == tokenizer.cls_id and f.input_ids[q_len + 1] == tokenizer.sep_id
            assert f.input_ids[-1] == tokenizer.sep_id
            assert f.token_type_ids == [0] * (q_len + 2) + [1] * (len(f.input_ids) - q_len - 2)
            assert f.offsets[: q_len + 2] == [None] * (q_len + 2) and f.offsets[-1] is None
            windows.append(f.offsets[q_len + 2: -1])
        # consecutive windows share exactly doc_stride tokens; together they cover every context token in order
        for a, b in zip(windows, windows[1:]):
            assert a[-stride:] == b[:stride] and len(a) == max_length - q_len - 3
        covered = windows[0] + [o for w in windows[1:] for o in w[stride:]]
        assert covered == [tuple(o) for o in context.offsets]
        # the answer's tokens map back to its text in the windows that hold it whole, and to [CLS] elsewhere
        begin, end = example.answer_starts[0], example.answer_starts[0] + len(example.answers[0])
        labelled = 0
        for f in mine:
            spans = [o for o in f.offsets if o is not None]
            whole = spans[0][0] <= begin and end <= spans[-1][1]
            if whole:
                labelled += 1
                s, e = f.start_position, f.end_position
                assert 0 < s <= e and LONG[f.offsets[s][0]:f.offsets[e][1]] == example.answers[0]
            else:
                assert (f.start_position, f.end_position) == (0, 0)
        assert labelled >= 1


def test_sliding_window_matches_the_tokenizers_librarys_own_stride(tokenizer):
    fast = Tokenizer.from_str(tokenizer.tokenizer.to_str())  # a copy: truncation settings stay off the shared one
    fast.enable_truncation(40, stride=10, strategy="only_second")
    encoding = fast.encode("Which lighthouse?", LONG)
    expected = [encoding.ids] + [o.ids for o in encoding.overflowing]
    features = encode_qa(_long_data().subset([0]), tokenizer, max_length=40, doc_stride=10)
    assert [f.input_ids for f in features] == expected


def test_an_answer_cut_by_a_window_edge_is_labelled_only_in_the_next_window(tokenizer):
    question = "Which lighthouse?"
    q_len = len(tokenizer.encode(question))
    window = 40 - q_len - 3
    offsets = tokenizer.tokenizer.encode(LONG, add_special_tokens=False).offsets
    begin, end = offsets[window - 2][0], offsets[window + 1][1]  # four tokens across the first window's edge
    answer = LONG[begin:end]
    data = QAData([QAExample("cut", question, LONG, [answer], [begin])])
    features = encode_qa(data, tokenizer, max_length=40, doc_stride=10)
    assert (features[0].start_position, features[0].end_position) == (0, 0)  # holds only half of it
    second = features[1]
    assert second.start_position == q_len + 2 + (window - 2) - (window - 10)
    assert second.end_position == second.start_position + 3
    assert LONG[second.offsets[second.start_position][0]:second.offsets[second.end_position][1]] == answer
    assert all((f.start_position, f.end_position) == (0, 0) for f in features[2:])


def test_a_short_context_gives_one_feature_and_a_too_small_max_length_is_refused(tokenizer, toy):
    short = toy.subset(range(8))
    features = encode_qa(short, tokenizer)
    assert [f.example for f in features] == list(range(8))
    for f, e in zip(features, short.examples):
        assert e.context[f.offsets[f.start_position][0]:f.offsets[f.end_position][1]] == e.answers[0]
    with pytest.raises(BertCoreError, match=r"max_length=16 is too small: a question of \d+ tokens"):
        encode_qa(short, tokenizer, max_length=16, doc_stride=8)
    with pytest.raises(BertCoreError, match="longer than the model's 512 positions"):
        encode_qa(short, tokenizer, max_length=1024)
    long_question = QAData([QAExample("q", "why " * 200 + "?", LONG, ["day 7"], [LONG.index("day 7")])])
    cut = encode_qa(long_question, tokenizer, max_length=64, doc_stride=8, max_question_tokens=20)
    assert all(f.token_type_ids.count(0) == 22 for f in cut)


# -- best answers from logits ----------------------------------------------------------------------------------------

def test_best_answers_picks_the_best_allowed_span_across_features(tokenizer):
    data = _long_data().subset([0])
    features = encode_qa(data, tokenizer, max_length=40, doc_stride=10)
    assert len(features) >= 3
    starts = [[-10.0] * len(f.input_ids) for f in features]
    ends = [[-10.0] * len(f.input_ids) for f in features]

    def begins(f, char):  # the token of feature f that begins at character `char`
        return next(i for i, o in enumerate(features[f].offsets) if o is not None and o[0] == char)

    def ending(f, char):  # the token of feature f that ends at character `char`
        return next(i for i, o in enumerate(features[f].offsets) if o is not None and o[1] == char)

    # feature 0: a fair span "On day 0" (score 6)
    starts[0][begins(0, 0)], ends[0][ending(0, len("On day 0"))] = 3.0, 3.0
    # feature 1 (which alone holds day 2): the best allowed span "green ship" (score 8) ...
    green = LONG.index("green ship")
    starts[1][begins(1, green)], ends[1][ending(1, green + len("green ship"))] = 4.0, 4.0
    # ... a higher end before both high starts (end < start), and a high pair more than 5 tokens apart
    ends[1][ending(1, green - len(" the "))] = 9.5  # the "2" of "day 2"
    sailed = green + len("green ship ")
    starts[1][begins(1, sailed)] = 9.0
    last = max(i for i, o in enumerate(features[1].offsets) if o is not None)
    ends[1][last] = 9.0
    # the question tokens carry the highest logits of all, and must be ignored
    starts[1][1] = ends[1][1] = 50.0
    got = best_answers(data, features, starts, ends, max_answer_tokens=5)["x0"]
    assert got["text"] == "green ship" and (got["start_char"], got["end_char"]) == (green, green + len("green ship"))
    assert got["score"] == pytest.approx(8.0)
    # without the cap the long span wins; tensors (padded wider than a feature) are accepted too
    width = max(len(f.input_ids) for f in features) + 3
    pad = lambda rows: torch.tensor([r + [99.0] * (width - len(r)) for r in rows])  # noqa: E731
    loose = best_answers(data, features, pad(starts), pad(ends), max_answer_tokens=30)["x0"]
    assert loose["score"] == pytest.approx(18.0)
    assert loose["text"] == "sailed past the Lighthouse of Pharos. On day 3 the red"
    assert loose["text"] == LONG[loose["start_char"]:loose["end_char"]]


def test_best_answers_falls_back_to_a_full_search_and_checks_its_inputs(tokenizer, toy):
    data = toy.subset([0])
    features = encode_qa(data, tokenizer)
    n = len(features[0].input_ids)
    starts, ends = [list(range(n))], [[float(-i) for i in range(n)]]  # top starts all after top ends
    got = best_answers(data, features, starts, ends, n_best=2)[data.examples[0].id]
    assert got["end_char"] > got["start_char"] and got["text"]
    with pytest.raises(BertCoreError, match="has 2 rows but there are 1 features"):
        best_answers(data, features, starts * 2, ends)
    with pytest.raises(BertCoreError, match="shorter than its"):
        best_answers(data, features, [[0.0]], ends)


# -- SQuAD v1.1 scores -----------------------------------------------------------------------------------------------

def test_normalize_answer_follows_the_official_script():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an ant, a bee and THE theatre") == "ant bee and theatre"
    assert normalize_answer("well-known") == "wellknown"  # punctuation is removed, not turned into spaces
    assert normalize_answer("“curly” quotes") == "“curly” quotes"  # only ASCII punctuation, as in the script


@pytest.mark.parametrize("prediction, gold, em, f1", [
    ("the Denver Broncos", "Denver Broncos", 1.0, 1.0),
    ("Broncos", "Denver Broncos", 0.0, 2 / 3),  # precision 1, recall 1/2
    ("Denver Broncos defeated", "Denver Broncos", 0.0, 0.8),  # precision 2/3, recall 1
    ("Broncos, Denver", "Denver Broncos", 0.0, 1.0),  # token bags match, order does not count
    ("cat cat", "cat", 0.0, 2 / 3),  # repeats count: precision 1/2, recall 1
    ("Panthers", "Denver Broncos", 0.0, 0.0),
    ("the", "a", 1.0, 0.0),  # both normalize to nothing: v1.1's F1 is 0 there
])
def test_exact_match_and_f1_worked_examples(prediction, gold, em, f1):
    assert exact_match_score(prediction, gold) == em
    assert f1_score(prediction, gold) == pytest.approx(f1)


def test_squad_metrics_take_the_best_gold_answer_and_count_missing_predictions_as_zero():
    data = parse_squad(squad())
    predictions = {"q1": "Broncos", "q2": "the Carolina", "q3": {"text": "Santa Clara, California"}, "q4": "Rhine"}
    got = squad_metrics(data, predictions)
    # q1 matches its second gold answer exactly; q2 F1 2/3; q3 F1 0.8; q4 F1 0; q5 missing
    assert got["exact_match"] == pytest.approx(1 / 5)
    assert got["f1"] == pytest.approx((1 + 2 / 3 + 0.8 + 0 + 0) / 5)
    perfect = squad_metrics(data, {e.id: e.answers[0] for e in data.examples})
    assert perfect == {"exact_match": 1.0, "f1": 1.0}


# -- batches ---------------------------------------------------------------------------------------------------------

def test_collate_pads_and_masks(tokenizer, toy):
    features = encode_qa(toy.subset(range(6)), tokenizer)
    batch = collate(features, [0, 5, 2], pad_id=0)
    longest = max(len(features[i].input_ids) for i in (0, 5, 2))
    assert batch.input_ids.shape == (3, longest) and batch.indices.tolist() == [0, 5, 2]
    for row, i in enumerate([0, 5, 2]):
        n = len(features[i].input_ids)
        assert batch.input_ids[row, :n].tolist() == features[i].input_ids and batch.input_ids[row, n:].eq(0).all()
        assert batch.attention_mask[row].sum() == n
        assert batch.token_type_ids[row, :n].tolist() == features[i].token_type_ids
        assert (batch.start_positions[row], batch.end_positions[row]) == (features[i].start_position,
                                                                          features[i].end_position)
    moved = batch.to("cpu")
    assert moved.indices is batch.indices and torch.equal(moved.input_ids, batch.input_ids)


def test_training_batches_are_seeded_and_endless_and_eval_batches_go_in_order(tokenizer, toy):
    features = encode_qa(toy.subset(range(40)), tokenizer)

    def take(seed, count):
        it = train_batches(features, 8, seed=seed)
        return [next(it).indices.tolist() for _ in range(count)]

    first = take(0, 12)  # 40 features / 8 = 5 batches an epoch: more than two epochs
    assert first == take(0, 12) and first != take(1, 12)
    epoch = sorted(i for b in first[:5] for i in b)
    assert epoch == list(range(40)) and sorted(i for b in first[5:10] for i in b) == epoch
    assert first[:5] != first[5:10]  # each epoch is a fresh shuffle
    evals = list(eval_batches(features, batch_size=16))
    assert [b.indices.tolist() for b in evals] == [list(range(0, 16)), list(range(16, 32)), list(range(32, 40))]
    with pytest.raises(BertCoreError, match="batch size"):
        next(train_batches(features, 0))
