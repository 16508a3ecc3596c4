"""The grammar check (bert_core.inspect.grammar) and `python -m bert_core score`: scores equal transformers' on the
shipped folders, the per-token shares add up, and bad input is one `error:` line."""

import json
import re

import pytest
import torch

from bert_core.cli.main import main
from bert_core.inspect.grammar import (NEXT_TOKEN, PLL, compare_pair, parse_pairs, score_sentence, token_shares)
from bert_core.inspect.built_in_text import CATEGORIES, MINIMAL_PAIRS
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT

transformers = pytest.importorskip("transformers")

SHIPPED = DEFAULT_CHECKPOINT.parent
FOLDERS = ["bert-tiny-english", "bert-mini-english", "gpt-tiny-english", "gpt-mini-english"]
SENTENCES = ["the dogs bark at night .", "the dogs barks at night .", "she gave her friend a book ."]


@pytest.fixture(scope="module", params=FOLDERS)
def shipped(request):
    folder = SHIPPED / request.param
    if not (folder / "config.json").is_file():
        pytest.skip(f"{folder} is not in this checkout")
    return folder, load_checkpoint(folder, require_tokenizer=True)


def _reference_score(folder, tokenizer, text: str) -> float:
    """transformers' own score of `text`, written out the slow way: one forward pass per masked piece. The minis
    are stored in bfloat16; both sides compute in float32, as our loader does."""
    ids = [tokenizer.cls_id, *tokenizer.encode(text), tokenizer.sep_id]
    if "gpt" in folder.name:
        ref = transformers.BertLMHeadModel.from_pretrained(folder, dtype=torch.float32).eval()
        assert ref.config.is_decoder
        with torch.no_grad():
            logits = ref(torch.tensor([ids])).logits[0]
        return sum(float(logits[i].log_softmax(-1)[ids[i + 1]]) for i in range(len(ids) - 1))
    ref = transformers.BertForMaskedLM.from_pretrained(folder, dtype=torch.float32).eval()
    total = 0.0
    for i in range(1, len(ids) - 1):
        masked = list(ids)
        masked[i] = tokenizer.mask_id
        with torch.no_grad():
            logits = ref(torch.tensor([masked])).logits[0, i]
        total += float(logits.log_softmax(-1)[ids[i]])
    return total


def test_scores_equal_transformers_on_the_shipped_folders(shipped):
    folder, ckpt = shipped
    for text in SENTENCES:
        ours = score_sentence(ckpt.model, ckpt.tokenizer, text)
        assert ours.method == (NEXT_TOKEN if "gpt" in folder.name else PLL)
        assert ours.score == pytest.approx(_reference_score(folder, ckpt.tokenizer, text), abs=1e-4)


def test_the_cli_prints_the_same_scores_as_json(shipped, capsys):
    folder, ckpt = shipped
    assert main(["score", "--checkpoint", str(folder), SENTENCES[0], SENTENCES[1], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pair = out["pairs"][0]
    expected = compare_pair(ckpt.model, ckpt.tokenizer, SENTENCES[0], SENTENCES[1])
    assert pair["a"]["score"] == pytest.approx(expected.a.score, abs=1e-6)
    assert pair["b"]["score"] == pytest.approx(expected.b.score, abs=1e-6)
    assert pair["preferred"] == expected.preferred


def test_pll_masks_every_piece_but_cls_and_sep_and_gpt_scores_the_end():
    ckpt = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    s = score_sentence(ckpt.model, ckpt.tokenizer, "the cat sat .")
    assert s.tokens == ckpt.tokenizer.tokenize("the cat sat .") and all(lp < 0 for lp in s.log_probs)
    gpt = load_checkpoint(SHIPPED / "gpt-tiny-english", require_tokenizer=True)
    g = score_sentence(gpt.model, gpt.tokenizer, "the cat sat .")
    assert g.tokens == [*gpt.tokenizer.tokenize("the cat sat ."), "[SEP]"]


def test_scoring_leaves_a_training_model_in_training_mode():
    ckpt = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    ckpt.model.train()
    first = score_sentence(ckpt.model, ckpt.tokenizer, SENTENCES[0]).score
    assert ckpt.model.training
    assert score_sentence(ckpt.model, ckpt.tokenizer, SENTENCES[0]).score == first  # dropout was off


def test_token_shares_add_up_to_the_difference_and_single_out_the_changed_piece():
    ckpt = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    c = compare_pair(ckpt.model, ckpt.tokenizer, "the girl walks to school .", "the girl walk to school .")
    assert sum(s.difference for s in c.shares) == pytest.approx(c.difference, abs=1e-9)
    changed = [s for s in c.shares if not s.same_tokens]
    assert len(changed) == 1  # "walk ##s" against "walk": the ##s alone, the rest lined up piece by piece
    assert [t for s in c.shares for t in s.tokens_a] == c.a.tokens
    assert [t for s in c.shares for t in s.tokens_b] == c.b.tokens
    assert c.preferred == ("a" if c.difference > 0 else "b")
    same = compare_pair(ckpt.model, ckpt.tokenizer, "a cat .", "a cat .")
    assert same.preferred == "tie" and all(s.same_tokens and s.difference == 0 for s in token_shares(same.a, same.b))


def test_the_builtin_pairs_cover_every_category_and_differ_within_each_pair():
    assert len(MINIMAL_PAIRS) >= 30
    assert {p.category for p in MINIMAL_PAIRS} == set(CATEGORIES)
    assert all(p.good != p.bad and p.rule for p in MINIMAL_PAIRS)
    assert len({p.good for p in MINIMAL_PAIRS}) == len(MINIMAL_PAIRS)


def test_a_classifier_without_a_language_model_head_is_refused():
    from bert_core.errors import BertCoreError
    from bert_core.model.bert import BertForSequenceClassification

    ckpt = load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)
    with pytest.raises(BertCoreError, match="no language-model head"):
        score_sentence(BertForSequenceClassification(ckpt.model.config), ckpt.tokenizer, "a cat .")


def test_parse_pairs_skips_blank_and_comment_lines():
    assert parse_pairs("# good\tbad\n\na b\tc d\n") == [("a b", "c d")]


def _error_line(argv, capsys) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


def test_bad_input_is_one_error_line(tmp_path, capsys):
    ckpt = ["--checkpoint", str(DEFAULT_CHECKPOINT)]
    assert "empty" in _error_line(["score", *ckpt, "", "a cat ."], capsys)
    assert "positions" in _error_line(["score", *ckpt, "word " * 600], capsys)
    assert "no such file" in _error_line(["score", *ckpt, "--file", str(tmp_path / "missing.tsv")], capsys)
    binary = tmp_path / "pairs.bin"
    binary.write_bytes(b"\x00\x01\x02 binary\tstuff\n")
    assert "binary" in _error_line(["score", *ckpt, "--file", str(binary)], capsys)
    latin = tmp_path / "latin.tsv"
    latin.write_bytes("caf\xe9 .\tcafe .\n".encode("latin-1"))
    assert "UTF-8" in _error_line(["score", *ckpt, "--file", str(latin)], capsys)
    no_tab = tmp_path / "no_tab.tsv"
    no_tab.write_text("the dogs bark . the dogs barks .\n")
    assert "line 1" in _error_line(["score", *ckpt, "--file", str(no_tab)], capsys)
    assert "exactly one" in _error_line(["score", *ckpt], capsys)


def test_a_pairs_file_prints_scores_and_the_preferred_sentence(tmp_path, capsys):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("the dogs bark .\tthe dogs barks .\nhe ate an apple .\the ate a apple .\n")
    assert main(["score", "--checkpoint", str(DEFAULT_CHECKPOINT), "--file", str(pairs)]) == 0
    out = capsys.readouterr().out
    assert out.count("prefers ") == 2 and "of 2 pairs" in out


def test_the_built_in_pairs_are_written_as_a_teacher_would_write_them():
    # Capitalised, no space before a full stop: the shipped tokenizers lower-case and split punctuation, so the
    # scores are those of the lower-case, spaced text they replaced (checked on all four shipped tokenizers).
    for pair in MINIMAL_PAIRS:
        for sentence in (pair.good, pair.bad):
            assert sentence[0].isupper() and sentence[-1] in ".?!" and not re.search(r" [.,?!;:]", sentence), sentence
