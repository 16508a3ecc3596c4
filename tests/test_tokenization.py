import json
from pathlib import Path

import pytest

from bert_core.errors import BertCoreError
from bert_core.model.tokenization import BertTokenizer, train_tokenizer

SAMPLES = [
    "The quick brown fox jumps over the lazy dog.",
    "Héllo WÖRLD, naïve café-owners can't stop re-reading 3.14 things!",
    "Unbelievably, ROMEO's 中文 text\tis\u00a0here  [MASK] stays.",
    "",
]
TRAIN_TEXT = [
    "the quick brown fox jumps over the lazy dog .",
    "a naive cafe owner reads the paper again and again while the fox sleeps",
    "romeo and juliet meet at the cafe ; the owner is reading and rereading",
    "unbelievable things happen to believers who believe in the unbelievable",
] * 20


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TRAIN_TEXT, vocab_size=300, min_frequency=1)


def test_trained_vocabulary_puts_specials_first(tok):
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.special_ids == frozenset(range(5))
    assert tok.vocab_size == len(tok.tokenizer.get_vocab())


def test_normalizer_lowercases_and_strips_accents(tok):
    assert tok.encode("NAÏVE Café") == tok.encode("naive cafe")


def test_rare_words_split_into_continuation_pieces(tok):
    pieces = tok.tokenize("unbelievably")
    assert len(pieces) > 1 and all(p.startswith("##") for p in pieces[1:])
    assert tok.decode(tok.encode("unbelievably")) == "unbelievably"
    table = tok.continuation_table()
    assert [table[i] for i in tok.encode("unbelievably")] == [False] + [True] * (len(pieces) - 1)


def test_pair_encoding_has_cls_sep_and_token_types(tok):
    enc = tok.encode_pair("the fox", "the dog", max_length=32)
    a, b = tok.encode("the fox"), tok.encode("the dog")
    assert enc["input_ids"] == [tok.cls_id, *a, tok.sep_id, *b, tok.sep_id]
    assert enc["token_type_ids"] == [0] * (len(a) + 2) + [1] * (len(b) + 1)


def test_saved_tokenizer_gives_same_ids_in_transformers(tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    tok.save(tmp_path)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        assert (tmp_path / name).is_file()
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "BertTokenizer"
    hf = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
    assert hf.pad_token_id == tok.pad_id and hf.mask_token_id == tok.mask_id and hf.cls_token_id == tok.cls_id
    for text in SAMPLES:
        assert hf(text, add_special_tokens=False)["input_ids"] == tok.encode(text)
        assert hf(text)["input_ids"] == tok.encode_pair(text, None)["input_ids"]
    for max_length in (8, 11, 12, 64):
        ours = tok.encode_pair(SAMPLES[1], SAMPLES[2], max_length=max_length)
        theirs = hf(SAMPLES[1], SAMPLES[2], truncation=True, max_length=max_length)
        assert theirs["input_ids"] == ours["input_ids"]
        assert theirs["token_type_ids"] == ours["token_type_ids"]
    ids = tok.encode(SAMPLES[0])
    assert hf.decode(ids) == tok.decode(ids)


def test_reloaded_tokenizer_is_identical(tok, tmp_path):
    tok.save(tmp_path)
    again = BertTokenizer.load(tmp_path)
    assert again.vocab_size == tok.vocab_size
    for text in SAMPLES:
        assert again.encode(text) == tok.encode(text)


def test_vocab_txt_only_folder_loads_like_bert_base(tmp_path):
    transformers = pytest.importorskip("transformers")
    # bert-base-uncased layout: [PAD]=0, [unusedN], then [UNK]=100 [CLS]=101 [SEP]=102 [MASK]=103.
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += ["the", "fox", "dog", "jump", "##s", "##ed", "over", "lazy", ".", ",", "un", "##believ", "##able", "cafe"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizer.load(tmp_path)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
    assert 5 in tok.never_sample_ids  # [unused4] is never a random replacement
    hf = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
    for text in ["The fox jumps over the lazy dog.", "Unbelievable CAFÉ jumped, zebra!", "the [MASK] jumps."]:
        assert tok.encode(text) == hf(text, add_special_tokens=False)["input_ids"]
        assert tok.encode_pair(text, "the dog", 64)["input_ids"] == hf(text, "the dog")["input_ids"]
    assert tok.tokenize("unbelievable") == ["un", "##believ", "##able"]
    assert tok.encode("zebra") == [100]
    assert tok.encode("the [MASK] fox") == [104, 103, 105]


def test_folder_without_tokenizer_files_is_a_clear_error(tmp_path):
    with pytest.raises(BertCoreError, match="no tokenizer.json or vocab.txt"):
        BertTokenizer.load(tmp_path)


def test_vocabulary_without_specials_is_rejected(tmp_path):
    (tmp_path / "vocab.txt").write_text("[UNK]\nthe\nfox\n", encoding="utf-8")
    with pytest.raises(BertCoreError, match=r"lacks the special tokens \[PAD\], \[CLS\], \[SEP\], \[MASK\]"):
        BertTokenizer.load(tmp_path)


def test_training_on_no_text_is_a_clear_error():
    with pytest.raises(BertCoreError, match="no text to train the tokenizer on"):
        train_tokenizer(["", "   "], vocab_size=200)


def test_mask_token_typed_in_text_is_the_mask_id(tok):
    assert tok.encode("the [MASK] fox") == [tok.token_to_id("the"), tok.mask_id, tok.token_to_id("fox")]


_VOCAB_OF_TEXT = """
import hashlib, sys
from bert_core.data.corpora import generate_toy_corpus
from bert_core.model.tokenization import train_tokenizer
tok = train_tokenizer(generate_toy_corpus(num_documents=300, seed=1).texts(), vocab_size=400)
print(hashlib.sha256("\\n".join(tok.id_to_token(i) for i in range(tok.vocab_size)).encode()).hexdigest())
"""


def test_training_is_deterministic_across_processes():
    """Same text, same vocabulary, in fresh processes with different hash seeds (the `tokenizers` trainer was not)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    digests = set()
    for hash_seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(root)}
        done = subprocess.run([sys.executable, "-c", _VOCAB_OF_TEXT], capture_output=True, text=True, env=env,
                              timeout=120, check=True)
        digests.add(done.stdout.strip())
    assert len(digests) == 1


def test_learned_vocabulary_merges_the_most_frequent_pairs_first():
    from bert_core.model.tokenization import SPECIAL_TOKENS, learn_wordpiece_vocab

    vocab = learn_wordpiece_vocab({"low": 5, "lower": 2, "newest": 6, "widest": 3}, vocab_size=100, min_frequency=2)
    assert vocab[:5] == list(SPECIAL_TOKENS)
    alphabet = ["l", "n", "w", "##d", "##e", "##i", "##o", "##r", "##s", "##t", "##w"]
    assert sorted(vocab[5:5 + len(alphabet)]) == sorted(alphabet)
    merges = vocab[5 + len(alphabet):]
    # Worked by hand: ##e ##s and ##s ##t both occur 9 times (newest 6 + widest 3); the alphabetically first pair
    # wins, then ##es ##t (9); then ##o ##w and l ##o tie at 7 ("#" sorts before "l"), and so on.
    assert merges == ["##es", "##est", "##ow", "low", "##ew", "##ewest", "newest", "##dest", "##idest", "widest",
                      "##er", "lower"]
    # min_frequency 3: the pairs only "lower" (2 occurrences) has are never merged.
    assert learn_wordpiece_vocab({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 100, 3)[5 + len(alphabet):] == \
        merges[:-2]
    # The vocabulary size is a cap.
    assert len(learn_wordpiece_vocab({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 20, 2)) == 20
