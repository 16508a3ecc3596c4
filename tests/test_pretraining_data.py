import json
import random

import pytest
import torch

from bert_core.data.corpora import Corpus, generate_toy_corpus
from bert_core.data.pretraining_data import (
    FAR_SENTENCES,
    IGNORE_INDEX,
    KEPT,
    MASKED,
    NOT_CHOSEN,
    NOTE_FAR,
    RANDOM,
    PretrainingData,
    create_nsp_instances,
    mask_tokens,
    truncate_seq_pair,
    unigram_baseline,
)
from bert_core.errors import BertCoreError
from bert_core.model.tokenization import train_tokenizer

PAD, CLS, SEP, MASK = 0, 2, 3, 4
SPECIALS = torch.tensor([0, 1, 2, 3, 4])


@pytest.fixture(scope="module")
def toy():
    corpus = generate_toy_corpus(num_documents=600, seed=1)
    return corpus, train_tokenizer(corpus.texts(), vocab_size=1000)


def synthetic_batch(rows=1600, width=128, seed=0):
    """[CLS] tokens [SEP] padded rows of random lengths: over 100k maskable tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 500, (rows, width), generator=g)
    lengths = torch.randint(20, width + 1, (rows,), generator=g)
    pos = torch.arange(width)[None, :]
    ids[pos >= lengths[:, None]] = PAD
    ids[:, 0] = CLS
    ids[torch.arange(rows), lengths - 1] = SEP
    ids[torch.arange(rows), lengths // 2] = SEP
    special = (ids == PAD) | (ids == CLS) | (ids == SEP)
    return ids, special


def test_masking_rates_and_80_10_10_split_over_100k_tokens():
    ids, special = synthetic_batch()
    n_real = int((~special).sum())
    assert n_real > 100_000
    m = mask_tokens(ids, special, torch.Generator().manual_seed(0), vocab_size=500, mask_id=MASK,
                    candidate_ids=torch.arange(5, 500))
    chosen = m.decisions != NOT_CHOSEN
    assert abs(chosen.sum().item() / n_real - 0.15) < 0.005
    n = chosen.sum().item()
    assert abs((m.decisions == MASKED).sum().item() / n - 0.8) < 0.015
    assert abs((m.decisions == RANDOM).sum().item() / n - 0.1) < 0.015
    assert abs((m.decisions == KEPT).sum().item() / n - 0.1) < 0.015


def test_special_and_padding_tokens_are_never_chosen_nor_used_as_replacements():
    ids, special = synthetic_batch(seed=1)
    m = mask_tokens(ids, special, torch.Generator().manual_seed(1), vocab_size=500, mask_id=MASK,
                    candidate_ids=torch.arange(5, 500))
    assert not (special & (m.decisions != NOT_CHOSEN)).any()
    assert torch.equal(m.input_ids[special], ids[special])
    replaced = m.input_ids[m.decisions == RANDOM]
    assert replaced.numel() > 1000 and not torch.isin(replaced, SPECIALS).any()
    assert (m.input_ids[m.decisions == MASKED] == MASK).all()
    assert torch.equal(m.input_ids[m.decisions == KEPT], ids[m.decisions == KEPT])
    assert torch.equal(m.original_ids, ids)


def test_labels_are_minus_100_exactly_where_not_chosen():
    ids, special = synthetic_batch(rows=300, seed=2)
    m = mask_tokens(ids, special, torch.Generator().manual_seed(2), vocab_size=500, mask_id=MASK,
                    candidate_ids=torch.arange(5, 500))
    chosen = m.decisions != NOT_CHOSEN
    assert ((m.mlm_labels == IGNORE_INDEX) == ~chosen).all()
    assert torch.equal(m.mlm_labels[chosen], ids[chosen])


def test_default_replacements_exclude_the_ids_at_special_positions():
    ids, special = synthetic_batch(rows=400, seed=3)
    m = mask_tokens(ids, special, torch.Generator().manual_seed(3), vocab_size=500, mask_id=MASK)
    assert not torch.isin(m.input_ids[m.decisions == RANDOM], torch.tensor([PAD, CLS, SEP, MASK])).any()


def test_same_generator_seed_same_masks():
    ids, special = synthetic_batch(rows=50, seed=4)
    a = mask_tokens(ids, special, torch.Generator().manual_seed(7), 500, MASK)
    b = mask_tokens(ids, special, torch.Generator().manual_seed(7), 500, MASK)
    c = mask_tokens(ids, special, torch.Generator().manual_seed(8), 500, MASK)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.decisions, b.decisions)
    assert not torch.equal(a.decisions, c.decisions)


def test_whole_word_masking_takes_every_piece_of_a_word():
    ids, special = synthetic_batch(rows=800, seed=5)
    g = torch.Generator().manual_seed(5)
    starts = torch.rand(ids.shape, generator=g) < 0.6  # 40% of tokens are "##" pieces
    m = mask_tokens(ids, special, torch.Generator().manual_seed(5), 500, MASK, candidate_ids=torch.arange(5, 500),
                    whole_word_starts=starts)
    chosen = m.decisions != NOT_CHOSEN
    real = ~special
    prev_real = torch.cat([torch.zeros(ids.shape[0], 1, dtype=torch.bool), real[:, :-1]], 1)
    prev_chosen = torch.cat([torch.zeros(ids.shape[0], 1, dtype=torch.bool), chosen[:, :-1]], 1)
    piece = real & ~starts & prev_real  # continues the word on its left
    assert (chosen[piece] == prev_chosen[piece]).all()
    rate = chosen.sum().item() / real.sum().item()
    assert 0.13 < rate <= 0.15


def test_bad_mask_rate_is_a_clear_error():
    ids, special = synthetic_batch(rows=2)
    with pytest.raises(BertCoreError, match="mask_rate must be between 0 and 1"):
        mask_tokens(ids, special, torch.Generator(), 500, MASK, mask_rate=1.5)


def test_truncation_trims_the_longer_side_until_it_fits():
    a, b = list(range(50)), list(range(100, 110))
    truncate_seq_pair(a, b, 30, random.Random(0))
    assert len(a) + len(b) == 30 and len(b) == 10
    assert a == list(range(a[0], a[0] + 20))  # a contiguous slice: trimmed from the front and the back
    assert 0 < a[0] < 30


def nsp_pairs(toy, n_min=10_000, max_seq_length=64):
    corpus, tok = toy
    token_docs = [tok.encode_batch(d) for d in corpus.documents]
    rng = random.Random(0)
    out = []
    while len(out) < n_min:
        out += create_nsp_instances(token_docs, tok, max_seq_length, 0.1, rng)
    return out, token_docs


def contiguous_in(part, whole):
    n = len(part)
    return any(whole[i: i + n] == part for i in range(len(whole) - n + 1))


def test_nsp_labels_are_balanced_over_10k_pairs(toy):
    pairs, _ = nsp_pairs(toy)
    share = sum(p.is_random_next for p in pairs) / len(pairs)
    assert abs(share - 0.5) < 0.03


def test_random_b_comes_from_another_document_and_real_b_follows_a(toy):
    pairs, token_docs = nsp_pairs(toy)
    _, tok = toy
    for p in pairs:
        sep = p.input_ids.index(tok.sep_id)
        a, b = p.input_ids[1:sep], p.input_ids[sep + 1:-1]
        assert p.token_type_ids == [0] * (sep + 1) + [1] * (len(b) + 1)
        assert len(p.input_ids) <= 64 and a and b
        (da, a0, a1), (db, b0, b1) = p.a_span, p.b_span
        assert contiguous_in(a, [t for s in token_docs[da][a0:a1] for t in s])
        assert contiguous_in(b, [t for s in token_docs[db][b0:b1] for t in s])
        if p.is_random_next:
            assert db != da
        else:
            assert db == da and b0 == a1


def test_single_document_corpus_takes_random_b_from_far_away(toy):
    corpus, tok = toy
    one = [[s for d in corpus.documents[:200] for s in tok.encode_batch(d)]]
    pairs = create_nsp_instances(one, tok, 64, 0.1, random.Random(1))
    randoms = [p for p in pairs if p.is_random_next]
    assert abs(len(randoms) / len(pairs) - 0.5) < 0.08
    for p in randoms:
        (_, a0, a1), (_, b0, b1) = p.a_span, p.b_span
        assert b0 >= a1 + FAR_SENTENCES or b1 <= a0 - FAR_SENTENCES
        assert p.note == NOTE_FAR
    for p in pairs:
        if not p.is_random_next:
            assert p.b_span[1] == p.a_span[2]


def test_tiny_single_document_still_gives_pairs(toy):
    _, tok = toy
    docs = [[tok.encode("the cat sits."), tok.encode("a dog runs."), tok.encode("the end.")]]
    pairs = create_nsp_instances(docs, tok, 32, 0.0, random.Random(0))
    assert pairs
    for p in pairs:
        if p.is_random_next:
            assert p.b_span[1] != p.a_span[2]
        else:
            assert p.b_span[1] == p.a_span[2]


def test_nsp_off_gives_single_segments_of_contiguous_text(toy):
    corpus, tok = toy
    token_docs = [tok.encode_batch(d) for d in corpus.documents[:50]]
    out = create_nsp_instances(token_docs, tok, 48, 0.0, random.Random(0), nsp=False)
    for d, doc in enumerate(token_docs):
        pieces = [p for p in out if p.a_span[0] == d]
        assert [t for p in pieces for t in p.input_ids[1:-1]] == [t for s in doc for t in s]
        assert all(p.input_ids.count(tok.sep_id) == 1 and set(p.token_type_ids) == {0} for p in pieces)
        assert all(not p.is_random_next and len(p.input_ids) <= 48 for p in pieces)


@pytest.fixture(scope="module")
def data_args(toy):
    corpus, tok = toy
    return dict(corpus=corpus, tokenizer=tok, max_seq_length=64, batch_size=16, seed=5)


def same_batch(x, y):
    return all(torch.equal(getattr(x, f), getattr(y, f)) for f in
               ("input_ids", "attention_mask", "token_type_ids", "mlm_labels", "next_sentence_label", "decisions"))


def test_batches_are_padded_to_their_longest_sequence(data_args):
    data = PretrainingData(**data_args)
    for _ in range(5):
        b = next(data)
        lengths = b.attention_mask.sum(1)
        assert b.input_ids.shape[1] == int(lengths.max())
        assert (b.input_ids[b.attention_mask == 0] == 0).all()
        assert b.num_tokens == int(lengths.sum())
        assert ((b.mlm_labels != IGNORE_INDEX) <= (b.attention_mask == 1)).all()


def test_same_seed_same_batches_and_other_seed_other_batches(data_args):
    a, b = PretrainingData(**data_args), PretrainingData(**data_args)
    c = PretrainingData(**{**data_args, "seed": 6})
    for _ in range(3):
        x, y, z = next(a), next(b), next(c)
        assert same_batch(x, y)
        assert not same_batch(x, z)


def test_restored_iterator_continues_exactly_across_an_epoch_boundary(data_args):
    full = PretrainingData(**data_args)
    n = full.batches_per_epoch
    reference = [next(full) for _ in range(n + 4)]
    first = PretrainingData(**data_args)
    for _ in range(n - 2):
        next(first)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = PretrainingData(**data_args)
    resumed.load_state_dict(state)
    for k in range(n - 2, n + 4):
        assert same_batch(next(resumed), reference[k])
    assert resumed.epoch == 1


def test_each_epoch_has_new_pairs_and_masks(data_args):
    data = PretrainingData(**data_args)
    first = next(data)
    data.load_state_dict({"epoch": 1, "position": 0})
    assert not same_batch(first, next(data))
    batches = [next(data) for _ in range(3)]
    assert not same_batch(batches[0], batches[1])


def test_eval_batches_are_fixed_for_a_seed(data_args):
    data = PretrainingData(**data_args)
    a, b = data.eval_batches(3, seed=1), data.eval_batches(3, seed=1)
    assert len(a) == 3 and all(same_batch(x, y) for x, y in zip(a, b))
    assert not same_batch(a[0], data.eval_batches(1, seed=2)[0])


def test_unigram_baseline_guesses_the_most_frequent_token():
    counts = torch.tensor([0, 0, 0, 0, 0, 10, 30, 60])
    labels = torch.full((1, 6), IGNORE_INDEX)
    labels[0, :4] = torch.tensor([7, 7, 6, 5])
    batch = type("B", (), {"mlm_labels": labels})
    result = unigram_baseline(counts, [batch])
    assert result["accuracy"] == 0.5 and result["token_id"] == 7
    probs = (counts.double() + 1.0) / (counts.sum() + 8)
    expected = torch.exp(-torch.log(probs[torch.tensor([7, 7, 6, 5])]).mean())
    assert abs(result["perplexity"] - float(expected)) < 1e-9


def test_corpus_smaller_than_a_batch_gives_one_short_batch(toy):
    corpus, tok = toy
    data = PretrainingData(Corpus("small", corpus.documents[:3]), tok, max_seq_length=64, batch_size=64)
    b1, b2 = next(data), next(data)
    assert len(b1) < 64 and data.epoch == 1 and len(b2) > 0


def test_pipeline_batches_keep_the_rates_and_never_touch_specials(toy):
    corpus, tok = toy
    data = PretrainingData(corpus, tok, max_seq_length=64, batch_size=64, seed=2)
    chosen = real = 0
    counts = torch.zeros(4)
    specials = torch.tensor(sorted(tok.special_ids))
    while real < 100_000:
        b = next(data)
        is_real = (b.attention_mask == 1) & ~torch.isin(b.original_ids, specials)
        picked = b.decisions != NOT_CHOSEN
        assert not (picked & ~is_real).any()
        assert not torch.isin(b.input_ids[b.decisions == RANDOM], specials).any()
        chosen += int(picked.sum())
        real += int(is_real.sum())
        counts += torch.bincount(b.decisions[picked], minlength=4)
    assert abs(chosen / real - 0.15) < 0.005
    assert torch.allclose(counts[1:] / counts[1:].sum(), torch.tensor([0.8, 0.1, 0.1]), atol=0.015)


def test_whole_word_masking_in_batches_keeps_words_together():
    corpus = generate_toy_corpus(num_documents=300, seed=4)
    tok = train_tokenizer(corpus.texts(), vocab_size=120)  # small: most words split into "##" pieces
    data = PretrainingData(corpus, tok, max_seq_length=64, batch_size=32, whole_word_masking=True)
    pieces_seen = 0
    for _ in range(5):
        b = next(data)
        chosen = b.decisions != NOT_CHOSEN
        cont = torch.tensor(tok.continuation_table())[b.original_ids]
        # A piece right after [CLS]/[SEP] (its word's start was truncated away) is a word of its own.
        prev_special = torch.isin(b.original_ids, torch.tensor(sorted(tok.special_ids)))
        cont[:, 1:] &= ~prev_special[:, :-1]
        prev_chosen = torch.cat([torch.zeros(len(b), 1, dtype=torch.bool), chosen[:, :-1]], 1)
        assert (chosen[cont] == prev_chosen[cont]).all()
        pieces_seen += int((chosen & cont).sum())
    assert pieces_seen > 100


def test_whole_word_masking_skips_a_word_that_would_overflow_and_goes_on_as_google_does():
    """Google's create_masked_lm_predictions skips a word that would take the count past the budget and keeps
    trying the words after it. So at the end no unchosen word still fits: for every word left out, the chosen
    count plus its length exceeds the budget (which is floor(n * rate) or one more, by stochastic rounding)."""
    ids, special = synthetic_batch(rows=400, seed=9)
    g = torch.Generator().manual_seed(9)
    starts = torch.rand(ids.shape, generator=g) < 0.4  # long words: many would overflow a small budget
    m = mask_tokens(ids, special, torch.Generator().manual_seed(9), 500, MASK, candidate_ids=torch.arange(5, 500),
                    whole_word_starts=starts)
    chosen = m.decisions != NOT_CHOSEN
    real = ~special
    checked = 0
    for row in range(ids.shape[0]):
        words, current = [], None
        for j in range(ids.shape[1]):
            if not real[row, j]:
                current = None
                continue
            if current is None or starts[row, j]:
                current = []
                words.append(current)
            current.append(j)
        used = int(chosen[row].sum())
        budget_floor = int(real[row].sum() * 0.15)
        for word in words:
            if not chosen[row, word[0]]:
                assert used + len(word) > budget_floor, (row, used, len(word), budget_floor)
                checked += 1
    assert checked > 1000
