"""Heads that follow syntax (bert_core.inspect.syntax_heads, data.treebank): the CoNLL-U reader on 33 sentences
composed and annotated by hand (tests/syntax_sentences.conllu) and on broken files, the word-piece alignment, a
head's accuracy and the fixed-offset baseline against cases worked by hand, the shipped BERT's batched reading
against the app's one-sentence attention, and the treebank's fetch, check and failure path (no network: files made
here)."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from bert_core.data import treebank
from bert_core.data.treebank import DependencySentence, fetch_treebank, local_treebank, parse_conllu, read_conllu
from bert_core.errors import BertCoreError
from bert_core.inspect import syntax_heads as syntax_heads_module
from bert_core.inspect.syntax_heads import (
    OFFSETS,
    head_label,
    offset_hits,
    predicted_heads,
    relation_groups,
    relation_rows,
    score,
    syntax_heads,
    syntax_heads_figure,
    word_attention,
)
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import REPO_ROOT

SENTENCES = Path(__file__).with_name("syntax_sentences.conllu")
SHIPPED = REPO_ROOT / "checkpoints"


def test_the_reader_takes_words_heads_and_relations_and_skips_multiword_tokens_and_empty_nodes():
    sentences = read_conllu(SENTENCES)
    assert len(sentences) == 33 and sum(len(s.words) for s in sentences) == 222
    assert sentences[0] == DependencySentence(("The", "cat", "sleeps", "."), (2, 3, 0, 3),
                                              ("det", "nsubj", "root", "punct"))
    # "don't" (ids 2-3) is two words, do and n't; the line of the token itself is not a word.
    assert sentences[14].words == ("I", "do", "n't", "know", ".") and sentences[14].heads == (4, 4, 4, 0, 4)
    # The gapping sentence's empty node (5.1) is no word: coffee still hangs on Kim, word 5.
    gapped = sentences[15]
    assert gapped.words == ("Sam", "likes", "tea", "and", "Kim", "coffee", ".")
    assert gapped.heads[5] == 5 and gapped.relations[5] == "orphan"
    assert "nsubj:pass" in sentences[5].relations and "obl:agent" in sentences[5].relations   # subtypes kept
    assert all(s.heads.count(0) == 1 for s in sentences)


@pytest.mark.parametrize("text, words", [
    ("1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_", "has 1 column"),                     # spaces, not tabs
    ("1\tHi\thi\tINTJ\t_\t_\t0\troot\t_", "has 9 columns"),
    ("1\tA\ta\tDET\t_\t_\t2\tdet\t_\t_\n3\tdog\tdog\tNOUN\t_\t_\t0\troot\t_\t_", "word id '3' should be 2"),
    ("1\tA\ta\tDET\t_\t_\t5\tdet\t_\t_\n2\tdog\tdog\tNOUN\t_\t_\t0\troot\t_\t_", "head 5 is not a word"),
    ("1\tA\ta\tDET\t_\t_\t_\tdet\t_\t_", "needs its head's number"),
    ("1\tA\ta\tDET\t_\t_\t0\t_\t_\t_", "needs its head's number"),
    ("# only a comment\n\n", "holds no CoNLL-U sentences"),
])
def test_a_malformed_file_gets_a_message_naming_its_line(text, words):
    with pytest.raises(BertCoreError, match=words):
        parse_conllu(text.replace("\t", " ") if "1 column" in words else text, "bad.conllu")


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "latin1.conllu"
    path.write_bytes("1\tcaf\xe9\tcaf\xe9\tNOUN\t_\t_\t0\troot\t_\t_\n".encode("latin-1"))
    with pytest.raises(BertCoreError, match="not UTF-8"):
        read_conllu(path)


def test_word_attention_sums_over_the_attended_words_pieces_and_averages_over_the_attending_words():
    # [CLS] the cat ##s [SEP]: five pieces, four words (cats is two pieces).
    att = torch.tensor([[0.2, 0.2, 0.2, 0.2, 0.2],
                        [0.1, 0.1, 0.5, 0.2, 0.1],
                        [0.0, 0.6, 0.1, 0.1, 0.2],
                        [0.2, 0.4, 0.2, 0.0, 0.2],
                        [0.0, 0.0, 0.0, 0.0, 1.0]])
    got = word_attention(att[None, None], [1, 1, 2, 1])[0, 0]
    # Worked by hand: the column of "cats" is pieces 2 and 3 added; its row the mean of rows 2 and 3.
    expected = torch.tensor([[0.2, 0.2, 0.4, 0.2],
                             [0.1, 0.1, 0.7, 0.1],
                             [0.1, 0.5, 0.2, 0.2],
                             [0.0, 0.0, 0.0, 1.0]])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got.sum(-1), torch.ones(4))   # rows still sum to 1
    # The strongest attention from each word between [CLS] and [SEP], itself and the specials left out:
    # "the" -> cats (word 2), "cats" -> the (word 1), though "cats" gives more to itself.
    assert predicted_heads(got).tolist() == [2, 1]


def test_the_fixed_offset_baseline_and_a_heads_accuracy_against_a_case_worked_by_hand():
    a = DependencySentence(("The", "dog", "barks"), (2, 3, 0), ("det", "nsubj", "root"))
    b = DependencySentence(("A", "cat", "saw", "the", "dog"), (2, 3, 0, 5, 3), ("det", "nsubj", "root", "det", "obj"))
    assert offset_hits(a)[OFFSETS.index(1)].tolist() == [True, True, False]
    assert offset_hits(b)[OFFSETS.index(-2)].tolist() == [False, False, False, False, True]
    # Two heads in one layer. Head 1 always picks the next word (last word: the one before); head 2 picks by hand.
    pa = np.array([[[2, 3, 2], [2, 1, 2]]])
    pb = np.array([[[2, 3, 4, 5, 4], [3, 3, 1, 5, 3]]])
    found = score([a, b], [pa, pb], min_count=1)
    assert found.relations == ["det", "nsubj", "obj"] and found.counts.tolist() == [3, 2, 1]
    assert found.words == 6 and found.sentences == 2
    # det: The->2, A->2, the->5. Head 1 right 3 of 3; head 2 right on The (2) and the (5), wrong on A (3): 2 of 3.
    # nsubj: dog->3, cat->3. Head 1: 2 of 2; head 2: dog picks 1, cat picks 3: 1 of 2. obj: dog->3. Head 1
    # picks 4, head 2 picks 3.
    np.testing.assert_allclose(found.accuracy[0], [[1, 1, 0], [2 / 3, 1 / 2, 1]])
    np.testing.assert_allclose(found.overall[0], [5 / 6, 4 / 6])
    # The baseline: offset +1 is right on every det and nsubj, offset -2 on the obj.
    np.testing.assert_allclose(found.baseline, [1, 1, 1])
    assert found.baseline_offset == [1, 1, -2]
    assert found.best_head(2) == (0, 1)
    assert not found.beats_baseline(0) and found.head_relations() == {}   # a tie is no lead
    # An object four words from its verb: no offset of up to three finds it, so head 2's pick is a lead, named.
    c = DependencySentence(("A", "cat", "saw", "the", "very", "big", "dog"), (2, 3, 0, 7, 6, 7, 3),
                           ("det", "nsubj", "root", "det", "advmod", "amod", "obj"))
    found = score([c], [np.array([[[2, 3, 2, 5, 6, 7, 6], [3, 3, 1, 7, 6, 7, 3]]])], min_count=1)
    r = found.relations.index("obj")
    assert found.baseline[r] == 0 and found.accuracy[0, 1, r] == 1 and found.beats_baseline(r)
    assert found.head_relations()[(0, 1)][0] == "obj"
    assert head_label(found, 0, 1).startswith("obj 100% (offset 0%)")


def test_rare_relations_join_their_base_relation_or_other():
    rels = ["nsubj"] * 5 + ["nsubj:pass"] * 2 + ["obj"] * 5 + ["csubj"] * 2 + ["csubj:pass"] * 3 + ["iobj"] * 1
    groups = relation_groups(rels, min_count=5)
    assert groups == {"nsubj": "nsubj", "nsubj:pass": "nsubj", "obj": "obj", "csubj": "csubj",
                      "csubj:pass": "csubj", "iobj": "other"}


def test_the_shipped_bert_read_in_batches_gives_what_its_one_sentence_attention_gives():
    from bert_core.inspect.inspection import attention_maps

    tiny = load_checkpoint(SHIPPED / "bert-tiny-english")
    sentences = read_conllu(SENTENCES)
    found = syntax_heads(tiny.model, tiny.tokenizer, sentences, min_count=10)
    cfg = tiny.model.config
    assert found.accuracy.shape[:2] == (cfg.num_hidden_layers, cfg.num_attention_heads)
    assert found.words == 222 - 33 and found.skipped == 0 and found.counts.sum() == found.words
    assert found.relations[-1] == "other" and set(found.relations) >= {"det", "nsubj", "punct", "obj"}
    assert ((0 <= found.accuracy) & (found.accuracy <= 1)).all()
    # Read alone through the app's own attention (no padding, no batch), every sentence gives each head the same
    # picks as the batches did; the unbelievably expensive restaurant's long words are one word each.
    batched = _batched_predictions(tiny, sentences)
    for sentence, in_batch in zip(sentences, batched):
        maps = attention_maps(tiny.model, tiny.tokenizer, " ".join(sentence.words))
        sizes = [1, *(len(tiny.tokenizer.tokenize(w)) for w in sentence.words), 1]
        assert sum(sizes) == len(maps.tokens)
        alone = predicted_heads(word_attention(torch.from_numpy(maps.attentions), sizes)).numpy()
        np.testing.assert_array_equal(alone, in_batch)
    assert sizes == [1, 1, 4, 1, 2, 1, 1, 1]
    fig = syntax_heads_figure(found)
    assert list(fig.data[0].y)[0] == "all words" and len(fig.data[0].y) == min(len(found.relations), 10) + 1
    assert [row["relation"] for row in relation_rows(found)] == found.relations
    assert fig.layout.font.size >= 12


def _batched_predictions(ck, sentences):
    """Each sentence's [L, H, n] predictions from syntax_heads itself (captured, not recomputed)."""
    from bert_core.inspect import syntax_heads as module

    kept = []
    real = module.score
    try:
        module.score = lambda ss, preds, *a, **k: kept.extend(preds) or real(ss, preds, *a, **k)
        module.syntax_heads(ck.model, ck.tokenizer, sentences, min_count=1)
    finally:
        module.score = real
    return kept


def _cache_with_remote(monkeypatch, sha256):
    monkeypatch.setattr(treebank, "UD_EWT", replace(treebank.UD_EWT, sha256=sha256))


def test_the_treebank_is_fetched_once_checked_and_then_read_from_the_cache(tmp_path, monkeypatch):
    from bert_core.data.downloads import sha256_of

    _cache_with_remote(monkeypatch, sha256_of(SENTENCES))
    cache, seen = tmp_path / "cache", []
    assert local_treebank(cache) is None
    path = fetch_treebank(cache, progress=lambda done, total: seen.append(done), url=SENTENCES.as_uri())
    assert path == cache / treebank.UD_EWT.filename and len(read_conllu(path)) == 33
    assert seen[-1] == SENTENCES.stat().st_size and local_treebank(cache) == path
    assert fetch_treebank(cache, url="http://127.0.0.1:9/nowhere") == path     # nothing fetched the second time


def test_a_fetched_file_with_another_digest_is_not_kept(tmp_path, monkeypatch):
    _cache_with_remote(monkeypatch, "0" * 64)
    with pytest.raises(BertCoreError, match="checksum mismatch"):
        fetch_treebank(tmp_path, url=SENTENCES.as_uri())
    assert local_treebank(tmp_path) is None and not list(tmp_path.iterdir())


def test_a_fetched_file_that_is_not_conllu_is_removed_so_the_next_try_starts_afresh(tmp_path, monkeypatch):
    _cache_with_remote(monkeypatch, None)
    page = tmp_path / "error.html"
    page.write_text("<html>rate limited</html>\n")
    with pytest.raises(BertCoreError, match="it was removed"):
        fetch_treebank(tmp_path / "cache", url=page.as_uri())
    assert local_treebank(tmp_path / "cache") is None
    assert fetch_treebank(tmp_path / "cache", url=SENTENCES.as_uri()).is_file()


def test_offline_the_fetch_says_so_and_leaves_nothing(tmp_path):
    with pytest.raises(BertCoreError, match="could not download.*on a machine that is online"):
        fetch_treebank(tmp_path / "cache", url="http://127.0.0.1:9/en_ewt-ud-dev.conllu")
    assert local_treebank(tmp_path / "cache") is None
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_the_attention_page_fetches_measures_and_names_the_heads(tmp_path, monkeypatch):
    """What heads do: the treebank absent, a Fetch button (offline: a message, no traceback); present, the toggle
    draws the figure with how much it measured, and the Head view's picker names a head that follows a relation."""
    from streamlit.testing.v1 import AppTest

    from bert_core.serve import model_sources

    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(SHIPPED / "bert-tiny-english"))
    monkeypatch.setenv("BERT_CORE_CACHE", str(tmp_path))
    monkeypatch.setattr(treebank, "UD_EWT", replace(treebank.UD_EWT, url="http://127.0.0.1:9/ud.conllu"))
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=300)
    at.run()
    at.switch_page("pages/3_Attention.py")
    at.session_state["att_tab"] = "What heads do"
    at.run()
    assert at.toggle(key="att_syntax").disabled and any(treebank.UD_EWT_LABEL in i.value for i in at.info)
    at.button(key="att_fetch_ud").click().run()
    assert not at.exception and any("could not download" in e.value for e in at.error)
    # The treebank in the cache (here the 33 test sentences under its name): measured when toggled on.
    (tmp_path / treebank.UD_EWT.filename).write_bytes(SENTENCES.read_bytes())
    at.run()
    at.toggle(key="att_syntax").set_value(True).run()
    assert not at.exception and not at.error
    assert any("Heads that follow syntax" in c.proto.spec for c in at.get("plotly_chart"))
    assert any("189 words of 33 sentences" in c.value for c in at.caption)
    at.session_state["att_tab"] = "Head view"
    at.run()
    # On 33 sentences no tiny head has a clear lead, so none is named; given one that has (L1 H2 on objects four
    # words from their verb, which no offset finds), the picker names it, and only it.
    assert not [o for o in at.selectbox(key="att_head").options if "follows" in str(o)]
    c = DependencySentence(("A", "cat", "saw", "the", "very", "big", "dog"), (2, 3, 0, 7, 6, 7, 3),
                           ("det", "nsubj", "root", "det", "advmod", "amod", "obj"))
    picks = np.array([[[2, 3, 2, 5, 6, 7, 6], [3, 3, 1, 7, 6, 7, 3]]] * 2)   # [2 layers, 2 heads, 7 words]
    monkeypatch.setattr(syntax_heads_module, "treebank_syntax_heads",
                        lambda *a: score([c], [picks], min_count=1))
    at.selectbox(key="att_layer").set_value(1).run()
    assert at.selectbox(key="att_head").options == ["1", "2 · follows obj 100% (offset 0%)"]
