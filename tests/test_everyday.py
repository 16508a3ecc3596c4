"""The everyday-English measure (bert_core.data.everyday_set, bert_core.inspect.everyday_measure) and `python -m
bert_core everyday`: the set's shape, transformers' own top-1/top-5 on the shipped folders equal to ours, the CLI's
table and JSON, a GPT's pairs without blanks, and bad input as one `error:` line."""

import json

import pytest
import torch

from bert_core.cli.main import main
from bert_core.data.everyday_set import MASK, load_blanks, load_everyday_pairs, parse_blanks
from bert_core.inspect.everyday_measure import TOP_K, everyday_report
from bert_core.inspect.grammar import PLL
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT

pytestmark = pytest.mark.slow  # measures two models, and measures them again in transformers

SHIPPED = DEFAULT_CHECKPOINT.parent
BERTS = ["bert-tiny-english", "bert-mini-english"]
TOPICS = {"home", "food and drink", "animals", "the body", "time", "days and months", "numbers", "places",
          "school and work", "weather", "family", "travel", "opposites"}


def _folder(name):
    folder = SHIPPED / name
    if not (folder / "config.json").is_file():
        pytest.skip(f"{folder} is not in this checkout")
    return folder


@pytest.fixture(scope="module", params=BERTS)
def measured(request):
    """A shipped BERT's folder and the measure's report on it."""
    folder = _folder(request.param)
    ckpt = load_checkpoint(folder, require_tokenizer=True)
    return folder, everyday_report(ckpt.model, ckpt.tokenizer)


def test_the_set_is_300_plain_sentences_on_thirteen_topics_and_36_pairs():
    blanks = load_blanks()
    assert len(blanks) >= 300
    per_topic = {t: sum(b.topic == t for b in blanks) for t in TOPICS}
    assert set(per_topic) == {b.topic for b in blanks} and min(per_topic.values()) >= 20, per_topic
    assert all(b.text.count(MASK) == 1 and b.answers and all(a == a.lower() for a in b.answers) for b in blanks)
    pairs = load_everyday_pairs()
    assert len(pairs) >= 30 and {p.kind for p in pairs} == {"agreement", "tense", "word order"}
    assert all(p.good != p.bad for p in pairs) and len({p.good for p in pairs}) == len(pairs)


def _transformers_ranks(folder) -> list[int | None]:
    """Each blank's rank of its first right word among the top 5, computed by transformers and tokenizers alone:
    the folder's tokenizer.json and BertForMaskedLM in float32 (the minis are stored in bfloat16), one sentence at
    a time, the [MASK] position's logits."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    model = transformers.BertForMaskedLM.from_pretrained(folder, dtype=torch.float32).eval()
    mask_id = tok.token_to_id("[MASK]")
    ranks = []
    for blank in load_blanks():
        ids = tok.encode(blank.text).ids
        assert ids.count(mask_id) == 1
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, ids.index(mask_id)]
        guesses = [tok.id_to_token(i) for i in logits.topk(TOP_K).indices.tolist()]
        ranks.append(next((r for r, g in enumerate(guesses, 1) if g in blank.answers), None))
    return ranks


def test_transformers_gives_the_same_top1_and_top5_on_the_shipped_folders(measured):
    folder, report = measured
    ranks = _transformers_ranks(folder)
    b = report["blanks"]
    assert b["sentences"] == len(ranks) == len(load_blanks())
    assert b["top1"] == sum(r == 1 for r in ranks)
    assert b["top5"] == sum(r is not None for r in ranks)
    assert [i["rank"] for i in b["items"]] == ranks
    assert 0 < b["top5"] < b["sentences"]  # a real model: some right, not all


def test_per_topic_and_within_vocabulary_figures_add_up(measured):
    folder, report = measured
    b = report["blanks"]
    assert sum(t["sentences"] for t in b["by_topic"].values()) == b["sentences"]
    assert sum(t["top5"] for t in b["by_topic"].values()) == b["top5"]
    # What "out of the vocabulary" counts, found with the folder's vocab.txt alone.
    vocab = set((folder / "vocab.txt").read_text().split("\n"))
    oov = [b for b in load_blanks() if not any(a in vocab for a in b.answers)]
    assert b["out_of_vocabulary"] == len(oov) > 0
    inside = b["within_vocabulary"]
    assert inside["sentences"] == b["sentences"] - len(oov) and inside["top5"] == b["top5"]
    assert all(i["rank"] is None for i in b["items"] if not i["in_vocabulary"])
    assert report["pairs"]["method"] == PLL and report["pairs"]["pairs"] == len(load_everyday_pairs())


def test_the_cli_prints_the_same_figures_as_json_and_as_a_table(measured, capsys):
    folder, report = measured
    assert main(["everyday", "--checkpoint", str(folder), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"checkpoint", "model", "blanks", "pairs", "top_k", "blanks_file", "pairs_file"} <= set(out)
    assert out["model"] == "bert" and out["top_k"] == TOP_K
    for key in ("sentences", "top1", "top5", "out_of_vocabulary", "by_topic", "within_vocabulary"):
        assert out["blanks"][key] == report["blanks"][key]
    assert {"topic", "text", "answers", "guesses", "rank", "in_vocabulary"} == set(out["blanks"]["items"][0])
    assert out["pairs"]["right"] == report["pairs"]["right"]
    assert set(out["pairs"]["by_kind"]) == {"agreement", "tense", "word order"}

    assert main(["everyday", "--checkpoint", str(folder)]) == 0
    text = capsys.readouterr().out
    b = report["blanks"]
    assert f"{100 * b['top5_share']:.2f}%" in text and "within the vocabulary" in text
    assert all(topic in text for topic in TOPICS)
    assert f"{report['pairs']['right']} of {report['pairs']['pairs']} right" in text


def test_each_prints_every_sentence_with_its_guesses(tmp_path, capsys):
    blanks = tmp_path / "mine.tsv"
    blanks.write_text("# mine\nplaces\tParis is the capital of [MASK].\tfrance\n"
                      "food\tI had an [MASK] for breakfast.\tegg\n")
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("agreement\tThe dogs bark.\tThe dogs barks.\n")
    argv = ["everyday", "--blanks", str(blanks), "--pairs", str(pairs)]
    assert main([*argv, "--each"]) == 0
    out = capsys.readouterr().out
    assert "Paris is the capital of [MASK].  guesses: " in out and "right: france" in out
    assert "(oov)  I had an [MASK] for breakfast." in out  # egg is not one piece of the shipped vocabulary
    assert "2 blanks, 1 minimal pairs" in out
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["blanks"]["sentences"] == 2 and set(out["blanks"]["by_topic"]) == {"places", "food"}
    assert out["blanks"]["out_of_vocabulary"] == 1 and out["pairs"]["pairs"] == 1


def test_a_gpt_gets_its_pairs_and_a_reason_instead_of_blanks(tmp_path, capsys):
    folder = _folder("gpt-tiny-english")
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("agreement\tThe dogs bark.\tThe dogs barks.\ntense\tI walked home yesterday.\t"
                     "I walk home yesterday.\n")
    assert main(["everyday", "--checkpoint", str(folder), "--pairs", str(pairs), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "gpt" and out["blanks"] is None and "cannot fill" in out["blanks_skipped"]
    assert out["pairs"]["pairs"] == 2 and out["pairs"]["method"] == "next-token log-likelihood"
    assert main(["everyday", "--checkpoint", str(folder), "--pairs", str(pairs)]) == 0
    assert "blanks: not measured" in capsys.readouterr().out


def _error_line(argv, capsys) -> str:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in captured.err, captured.err
    return lines[0]


BAD_FILES = [  # (flag, the file's bytes, words of the one error line)
    ("--blanks", b"home\tThe [MASK] sat on the [MASK].\tcat\n", "exactly one [MASK]"),
    ("--blanks", b"places\tParis is in [MASK].\tFrance\n", "lower-case"),
    ("--blanks", b"home\tI sleep in my [MASK].\tbed\nhome\tI sleep in my [MASK].\tbed\n", "appears twice"),
    ("--blanks", b"# nothing\n\n", "holds no rows"),
    ("--blanks", "food\tA caf\xe9 sells [MASK].\tcoffee\n".encode("latin-1"), "UTF-8"),
    ("--pairs", b"agreement\tThe dogs bark.\n", "line 1: expected 3 tab-separated fields"),
    ("--pairs", b"\x00\x01 binary\tstuff\tx\n", "binary"),
]


@pytest.mark.parametrize("flag, data, words", BAD_FILES)
def test_a_bad_set_file_is_one_error_line(flag, data, words, tmp_path, capsys):
    path = tmp_path / "set.tsv"
    path.write_bytes(data)
    assert words in _error_line(["everyday", flag, str(path)], capsys)


def test_a_missing_folder_or_file_is_one_error_line(tmp_path, capsys):
    assert "does not exist" in _error_line(["everyday", "--checkpoint", str(tmp_path / "missing")], capsys)
    assert "no such file" in _error_line(["everyday", "--blanks", str(tmp_path / "none.tsv")], capsys)


def test_a_classifier_without_a_language_model_head_is_one_error_line(tmp_path, capsys):
    from bert_core.model.bert import BertForSequenceClassification
    from bert_core.model.hf import save_pretrained

    ckpt = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    save_pretrained(BertForSequenceClassification(ckpt.model.config), tmp_path / "clf", ckpt.tokenizer,
                    label_names=["neg", "pos"])
    for argv in (["everyday"], ["fill-mask", "The cat sat on the [MASK]."], ["score", "--builtin"]):
        # fill-mask and score printed the fresh head's noise as the model's guesses and scores
        line = _error_line([*argv, "--checkpoint", str(tmp_path / "clf")], capsys)
        assert "no trained language-model head" in line, (argv, line)


def test_parse_blanks_keeps_each_right_word_once_in_its_order():
    (blank,) = parse_blanks("animals\tThe [MASK] barked.\tdog, puppy, dog\n")
    assert blank.answers == ("dog", "puppy") and blank.filled() == ["The dog barked.", "The puppy barked."]


def test_the_command_has_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["everyday", "--help"])
    assert exc.value.code == 0 and "usage: python -m bert_core everyday" in capsys.readouterr().out
