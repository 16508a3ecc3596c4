"""Token tags end to end: the TokenTags kind learns, the CLI trains a tagger beside its baselines and saves a folder
transformers loads as BertForTokenClassification with the same logits, bad files are one error line, and the
Fine-tune page tags a held-out sentence."""

import random
from pathlib import Path

import pytest
import torch

from bert_core.data.token_tags_data import TaggedSentences, encode_tagged, parse_conll, split_sentences
from bert_core.model.bert import BertForPreTraining, BertForTokenClassification
from bert_core.model.config import BertConfig
from bert_core.model.hf import load_pretrained, save_pretrained
from bert_core.model.tokenization import train_tokenizer
from bert_core.training.finetune import finetune
from bert_core.training.finetune_settings import FinetuneConfig
from bert_core.training.token_tagging import PLAIN_METRICS, SPAN_METRICS, TokenTags, tag_words
from tests.app_fixtures import finish_page_run

transformers = pytest.importorskip("transformers")

NOUNS = ["farmer", "cow", "boat", "sailor", "book", "teacher", "train", "market", "owl", "tree"]
ADJECTIVES = ["big", "muddy", "red", "old", "quiet"]
VERBS = ["feeds", "sees", "paints", "sells", "likes"]
PREPOSITIONS = ["near", "in", "at", "behind"]


def synthetic_conll(n: int = 400, seed: int = 0) -> str:
    """Sentences `NP VP NP (PP NP) .` as a CoNLL-2000 file (word POS chunk): noun phrases of a determiner, maybe
    an adjective and a noun (B-NP I-NP...), a verb (B-VP), a preposition (B-PP), a full stop (O)."""
    rng = random.Random(seed)
    lines = []

    def np():
        words = [("the", "DT", "B-NP")]
        if rng.random() < 0.5:
            words.append((rng.choice(ADJECTIVES), "JJ", "I-NP"))
        words.append((rng.choice(NOUNS), "NN", "I-NP"))
        return words

    for _ in range(n):
        words = np() + [(rng.choice(VERBS), "VBZ", "B-VP")] + np()
        if rng.random() < 0.5:
            words += [(rng.choice(PREPOSITIONS), "IN", "B-PP")] + np()
        words.append((".", ".", "O"))
        lines += [" ".join(w) for w in words] + [""]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def chunks():
    return parse_conll(synthetic_conll(), source="synthetic.txt")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, chunks):
    """A nano pretraining checkpoint (untrained weights) with a tokenizer trained on the synthetic words."""
    folder = tmp_path_factory.mktemp("tagger-base")
    tokenizer = train_tokenizer([" ".join(w) for w in chunks.words], vocab_size=120)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=64))
    save_pretrained(model, folder, tokenizer=tokenizer)
    return folder


def test_a_tagger_learns_chunks_and_is_scored_by_chunk_f1(chunks, checkpoint):
    train, val = split_sentences(chunks, 300, 100, seed=0)
    task = TokenTags(train, val)
    assert task.metric_names == SPAN_METRICS and task.primary == 1
    model, tokenizer = task.head_from_checkpoint(checkpoint, seed=0)
    result = finetune(model, tokenizer, task=task, config=FinetuneConfig(
        max_steps=80, time_budget_s=None, batch_size=16, learning_rate=3e-3, max_length=32, eval_points=2,
        device="cpu"))
    assert result.kind == "tags" and result.metric_names == SPAN_METRICS
    first, last = result.evals[0], result.evals[-1]
    assert first.macro_f1 < 0.5 < 0.9 < last.macro_f1, (first, last)
    assert last.accuracy > 0.9
    assert result.details["per_type"]["NP"]["support"] > 100
    tagged = tag_words(result.model, tokenizer, "the big cow sees the teacher near the train .", result.label_names)
    assert [w.word for w in tagged][:3] == ["the", "big", "cow"]
    assert [w.tag for w in tagged][:4] == ["B-NP", "I-NP", "I-NP", "B-VP"]
    assert all(0 < w.probability <= 1 for w in tagged)


def test_tag_words_tags_every_word_of_a_sentence_longer_than_the_model_reads(chunks, checkpoint):
    task = TokenTags(*split_sentences(chunks, 50, 20, seed=1))
    model, tokenizer = task.head_from_checkpoint(checkpoint, seed=0)
    words = [w for sentence in chunks.words[:12] for w in sentence]  # about 100 words
    tagged = tag_words(model, tokenizer, words, task.label_names, max_length=16)
    one = TaggedSentences([words], [[0] * len(words)], task.label_names, "plain")
    assert len(encode_tagged(one, tokenizer, 16)) > 5  # the sentence is read in several pieces
    assert [w.word for w in tagged] == words
    assert {w.tag for w in tagged} <= set(task.label_names)


def test_plain_tags_are_scored_by_accuracy_and_macro_f1(chunks):
    pos = parse_conll(synthetic_conll(60), tag_column="pos")
    task = TokenTags(*split_sentences(pos, 40, 20, seed=0))
    assert task.metric_names == PLAIN_METRICS and task.primary == 0
    assert [b.name for b in task.baselines(0)] == ["word-majority"]  # the tags are the POS column: no POS baseline
    line = task.baselines(0)[0]
    assert line.run() is not None
    assert line.result.accuracy == pytest.approx(1.0)  # every word of this grammar has one part of speech


def test_cli_trains_a_tagger_beside_its_baselines_and_saves_what_transformers_loads(chunks, checkpoint, tmp_path,
                                                                                   capsys):
    from bert_core.cli.main import main

    conll = tmp_path / "chunks.txt"
    conll.write_text(synthetic_conll(200))
    out = tmp_path / "tagger"
    code = main(["finetune", "--checkpoint", str(checkpoint), "--conll", str(conll), "--steps", "3",
                 "--max-length", "32", "--device", "cpu", "--compare-scratch", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    table = captured.out.splitlines()
    assert "token accuracy" in table[0] and "chunk F1" in table[0]
    assert [line.split()[0] for line in table[1:5]] == ["word-majority", "pos-majority", "pretrained", "scratch"]
    assert "F1 per chunk type (pretrained" in captured.out
    assert "20 validation sentences" in captured.err
    for folder in (out, out / "from-scratch"):
        ref, info = transformers.BertForTokenClassification.from_pretrained(
            folder, attn_implementation="eager", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"]
        assert ref.config.id2label[0] == "O" and set(ref.config.id2label.values()) == set(chunks.tag_names)
        ours = load_pretrained(folder, BertForTokenClassification)
        ids = torch.tensor([[2, 10, 11, 12, 13, 3, 0], [2, 14, 15, 16, 3, 0, 0]])
        mask = (ids != 0).long()
        with torch.no_grad():
            diff = (ours(ids, mask).logits - ref.eval()(input_ids=ids, attention_mask=mask).logits).abs().max()
        assert diff <= 1e-5


@pytest.mark.parametrize("text, message", [
    ("The DT B-NP\ncow NN\n", "line 2 has 2 columns"),
    ("\n".join(f"w{i} NN B-NP" for i in range(400)), "no blank lines"),
    ("The DT NP\ncow NN VP\n\n", "unknown tag scheme"),
])
def test_cli_refuses_a_bad_conll_file_with_one_error_line(checkpoint, tmp_path, capsys, text, message):
    from bert_core.cli.main import main

    bad = tmp_path / "bad.txt"
    bad.write_text(text)
    code = main(["finetune", "--checkpoint", str(checkpoint), "--conll", str(bad), "--steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0], err


def test_the_page_fine_tunes_a_tagger_and_tags_a_held_out_sentence(shared_data, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BERT_SHARED_DATA", str(shared_data))
    script = str(Path(__file__).parent.parent / "pages" / "5_Fine-tune.py")
    at = AppTest.from_file(script, default_timeout=60)
    at.run()
    at.radio(key="ft_kind").set_value("tags").run()
    assert at.radio(key="ft_data").value == "conll2000"
    assert at.number_input(key="ft_lr").value == pytest.approx(1e-3)
    for key, value in (("ft_train", 200), ("ft_val", 50), ("ft_budget", 2)):
        at.number_input(key=key).set_value(value)
    at.checkbox(key="ft_baseline").check().run()
    next(b for b in at.button if "Run the race" in b.label).click().run()
    finish_page_run(at)
    assert not at.exception, at.exception
    table = next(d.value for d in at.dataframe if "run" in d.value.columns)
    assert list(table["run"])[:2] == ["each word's most frequent tag", "each POS tag's most frequent tag"]
    assert "chunk F1" in table.columns
    assert any(h.value == "Tag a sentence with each" for h in at.subheader)
    assert not at.error


def test_a_tag_column_without_a_conll_file_is_one_error_line(checkpoint, capsys):
    from bert_core.cli.main import main

    code = main(["finetune", "--checkpoint", str(checkpoint), "--task", "toy", "--tag-column", "pos", "--steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "--tag-column" in err[0] and "--conll" in err[0], err
