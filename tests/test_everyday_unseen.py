"""The everyday-English set stays out of training: it is a default decontamination reference of `corpus build`, read
one sentence at a time with its blanks filled, and none of its sentences appears whole, by the build's own rule
(normalized words, hashed runs), in the shared corpora or the toy corpus."""

import numpy as np
import pytest

from bert_core.corpus.build import _reference_texts, default_references, load_reference, ngram_hashes
from bert_core.corpus.cleaning import normalized_words
from bert_core.data.everyday_set import BLANKS_FILE, PAIRS_FILE, load_blanks, load_everyday_pairs
from bert_core.data.toy_grammar import generate_toy_documents

pytestmark = pytest.mark.slow  # reads the shared corpora (15 s)

NGRAM = 13  # BuildSettings.ngram


def _sentences() -> list[str]:
    """Every sentence of the set as a model could meet it in text: each blank filled with each right word, and both
    sentences of each pair."""
    return ([s for blank in load_blanks() for s in blank.filled()]
            + [s for pair in load_everyday_pairs() for s in (pair.good, pair.bad)])


def _found_in(words: list[str], sentences: list[str]) -> list[str]:
    """The sentences whose words appear in `words` as a run: the build's rule with the run as long as the sentence
    (at most NGRAM words; a longer sentence is found by any of its NGRAM-word runs, as the build finds it)."""
    wanted: dict[int, dict[int, str]] = {}
    for s in sentences:
        w = normalized_words(s)
        n = min(NGRAM, len(w))
        for h in ngram_hashes(w, n).tolist():
            wanted.setdefault(n, {})[h] = s
    found = set()
    for n, by_hash in wanted.items():
        keys = np.array(sorted(by_hash), dtype=np.uint64)
        runs = ngram_hashes(words, n)
        hit = keys[np.minimum(np.searchsorted(keys, runs), len(keys) - 1)] == runs
        found |= {by_hash[int(h)] for h in np.unique(runs[hit])}
    return sorted(found)


def test_the_set_is_a_default_reference_read_one_filled_sentence_at_a_time():
    assert {str(BLANKS_FILE), str(PAIRS_FILE)} <= set(default_references())
    texts = _reference_texts(BLANKS_FILE, BLANKS_FILE.read_bytes())
    assert texts == [s for blank in load_blanks() for s in blank.filled()]
    assert "The dog barked at the mailman." in texts and not any("[MASK]" in t for t in texts)
    # Runs of the build's length are taken within a sentence, never across two; a long sentence gives them.
    ref = load_reference(str(BLANKS_FILE), NGRAM)
    long = [t for t in texts if len(normalized_words(t)) >= NGRAM]
    assert long and set(np.concatenate([ngram_hashes(normalized_words(t), NGRAM) for t in long]).tolist()) \
        == set(ref.hashes.tolist())
    pairs = load_reference(str(PAIRS_FILE), 5)
    assert ngram_hashes(normalized_words("The dogs barks at the cat next door."), 5)[0] in pairs.hashes


def test_the_check_finds_a_sentence_that_is_there():
    words = normalized_words("Once upon a time. The dog barked at the mailman. Then it slept.")
    assert _found_in(words, _sentences()) == ["The dog barked at the mailman."]
    assert _found_in(normalized_words("the dog barked at the postman"), _sentences()) == []


def test_no_sentence_appears_in_the_toy_corpus():
    words = [w for doc in generate_toy_documents() for w in normalized_words(" ".join(doc))]
    assert _found_in(words, _sentences()) == []


def test_no_sentence_appears_in_the_shared_corpora(shared_data):
    # Every text of the shared folder: what the shipped models read and what the project evaluates and fine-tunes
    # on, each read as the build reads a reference (CSV fields, CoNLL words, WikiText cut at <unk>).
    files = sorted(p for p in shared_data.rglob("*") if p.suffix in (".txt", ".csv") and p.name != "classes.txt")
    assert len(files) >= 7, files
    found = {}
    for path in files:
        words = [w for t in _reference_texts(path, path.read_bytes()) for w in normalized_words(t)]
        hits = _found_in(words, _sentences())
        if hits:
            found[path.name] = hits
    assert not found, found
