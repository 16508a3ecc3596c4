import re

import pytest

from bert_core.data.corpora import generate_toy_corpus, split_heldout
from bert_core.data.pretraining_data import PretrainingData
from bert_core.data.toy_grammar import FEMALE_NAMES, MALE_NAMES, TOPICS
from bert_core.errors import BertCoreError
from bert_core.model.tokenization import train_tokenizer
from tests.toy_words import toy_vocabulary


@pytest.fixture(scope="module")
def corpus():
    return generate_toy_corpus(num_documents=1500, seed=0)


def words(sentence):
    return re.findall(r"[a-z]+|[.,]", sentence.lower())


def test_same_seed_same_corpus_and_other_seed_other_corpus():
    assert generate_toy_corpus(50, seed=3).documents == generate_toy_corpus(50, seed=3).documents
    assert generate_toy_corpus(50, seed=3).documents != generate_toy_corpus(50, seed=4).documents


def test_vocabulary_has_several_hundred_words_and_nothing_else(corpus):
    used = {w for s in corpus.texts() for w in words(s)}
    assert used <= toy_vocabulary()
    assert len(used) >= 400


def test_stories_have_several_sentences(corpus):
    lengths = [len(d) for d in corpus.documents]
    assert min(lengths) >= 5 and max(lengths) <= 9
    assert all(s.endswith(".") and s[0].isupper() for s in corpus.texts())


def test_every_pronoun_agrees_with_the_named_hero(corpus):
    for doc in corpus.documents:
        hero = re.search(r"\b(" + "|".join(MALE_NAMES + FEMALE_NAMES) + r")\b", doc[0]).group(1)
        gender = "m" if hero in MALE_NAMES else "f"
        pronouns = {w for s in doc for w in words(s) if w in {"he", "him", "his", "she", "her"}}
        assert pronouns <= ({"he", "him", "his"} if gender == "m" else {"she", "her"}), doc


def test_subject_verb_agreement_across_relative_clause(corpus):
    singular = {s for t in TOPICS.values() for s, _ in t["people"]}
    plural = {p for t in TOPICS.values() for _, p in t["people"]}
    checked = 0
    for sentence in corpus.texts():
        m = re.match(r"The (\w+) who (\w+) .* (is|are) \w+\.$", sentence)
        if not m:
            continue
        noun, verb, be = m.groups()
        assert (noun in plural) == (be == "are") and (noun in singular) == (be == "is"), sentence
        assert verb.endswith("s") == (noun in singular) or verb in {"cross", "press"}, sentence
        checked += 1
    assert checked > 100


def test_each_story_keeps_to_one_topic(corpus):
    topic_of = {}
    for name, t in TOPICS.items():
        for w in t["places"] + t["adjectives"] + [x for pair in t["people"] + t["things"] for x in pair]:
            topic_of.setdefault(w, set()).add(name)
    for doc in corpus.documents:
        topics = set.intersection(*[topic_of[w] for s in doc for w in words(s) if w in topic_of])
        assert len(topics) == 1, doc


def test_unigram_baseline_is_below_15_percent(corpus):
    train, held = split_heldout(corpus, 0.1, seed=0)
    tok = train_tokenizer(train.texts(), vocab_size=1000)
    data = PretrainingData(train, tok, max_seq_length=128, batch_size=32, seed=0)
    held_data = PretrainingData(held, tok, max_seq_length=128, batch_size=32, seed=0)
    baseline = data.unigram_baseline(held_data.eval_batches(seed=1))
    assert 0.05 < baseline["accuracy"] < 0.15
    assert baseline["num_predictions"] > 1000
    assert baseline["perplexity"] > 20


def test_bad_document_count_is_a_clear_error():
    with pytest.raises(BertCoreError, match="num_documents must be a positive whole number"):
        generate_toy_corpus(0)
