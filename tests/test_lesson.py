"""The lesson's parts without Streamlit: the guesses at chosen positions, one training step, each step's notice
against the numbers it is computed from, and the figures."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect import figures, lesson, lesson_figures
from bert_core.inspect.inspection import DECISION_NAMES, HeadSummary, mask_example, mask_padded, masking_stats
from bert_core.inspect.kit import padded_batch
from bert_core.inspect.inspection import CHOSEN, DecisionAccuracy, accuracy_by_decision, guesses_for_instance
from bert_core.model.bert import BertForPreTraining
from bert_core.model.config import BertConfig
from bert_core.model.tokenization import train_tokenizer

SENTENCES = ["the cat sat on the mat", "the dog ate the bone", "a bird flew over the house",
             "the children played in the garden", "my sister reads a book every night"]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(SENTENCES * 20, vocab_size=120, min_frequency=1)


def _model(tokenizer, **kw):
    torch.manual_seed(0)
    config = BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=32, **kw)
    return BertForPreTraining(config).eval()


@pytest.fixture(scope="module")
def pairs(tokenizer):
    out = []
    for i, a in enumerate(SENTENCES * 8):
        enc = tokenizer.encode_pair(a, SENTENCES[(i + 1) % len(SENTENCES)])
        out.append((enc["input_ids"], enc["token_type_ids"]))
    return out


def test_guesses_sit_where_the_masking_page_masks_and_say_what_the_model_saw(tokenizer, pairs):
    model = _model(tokenizer)
    ids, types = pairs[3]
    for seed in range(5):
        rows = mask_example(tokenizer, ids, types, seed=seed, mask_rate=0.3)
        chosen = [r for r in rows if r.decision in CHOSEN]
        guesses = guesses_for_instance(model, tokenizer, ids, types, seed=seed, mask_rate=0.3)
        assert [(g.position, g.decision, g.token, g.shown) for g in guesses] == \
            [(r.position, r.decision, r.token, r.shown) for r in chosen]
        for g in guesses:
            assert 0 <= g.original_probability <= g.guess_probability <= 1
            assert g.right == (g.guess == g.token)
            if g.decision == "kept":
                assert g.shown == g.token


def test_the_guess_is_the_models_argmax_at_that_position(tokenizer, pairs):
    model = _model(tokenizer)
    ids, types = pairs[0]
    guesses = guesses_for_instance(model, tokenizer, ids, types, seed=1, mask_rate=0.4)
    masked = torch.tensor([ids])
    for g in guesses:
        masked[0, g.position] = tokenizer.token_to_id(g.shown)
    with torch.no_grad():
        logits = model(input_ids=masked, token_type_ids=torch.tensor([types]),
                       attention_mask=torch.ones_like(masked)).mlm_logits[0]
    probs = torch.softmax(logits.float(), -1)
    for g in guesses:
        assert tokenizer.id_to_token(int(probs[g.position].argmax())) == g.guess
        assert g.guess_probability == pytest.approx(float(probs[g.position].max()), rel=1e-4)


def test_accuracy_by_decision_counts_the_masking_pages_decisions_and_batches_do_not_matter(tokenizer, pairs):
    model = _model(tokenizer)
    stats = masking_stats(tokenizer, [ids for ids, _ in pairs], seed=4)
    acc = accuracy_by_decision(model, tokenizer, pairs, seed=4)
    assert [acc[d].count for d in CHOSEN] == [stats["masked"], stats["random"], stats["kept"]]
    assert all(0 <= acc[d].right <= acc[d].count for d in CHOSEN)
    small = accuracy_by_decision(model, tokenizer, pairs, seed=4, batch_size=7)
    assert {d: (a.count, a.right) for d, a in small.items()} == {d: (a.count, a.right) for d, a in acc.items()}
    # The LM head run on the chosen positions only counts what the full [B, S, V] logits count.
    ids, types, attention = padded_batch(tokenizer.pad_id, pairs)
    result, _ = mask_padded(tokenizer, ids, attention, 4, 0.15)
    with torch.inference_mode():
        full = model(result.input_ids, attention, types, full_mlm_logits=True).mlm_logits.argmax(-1)
    for d in CHOSEN:
        code = next(c for c, name in DECISION_NAMES.items() if name == d)
        chosen = result.decisions == code
        assert acc[d].right == int(((full == ids) & chosen).sum()), d


def test_a_model_that_copies_its_input_gets_every_kept_token_and_no_masked_one(tokenizer, pairs):
    """Output logits = the input's one-hot (a model that only copies what it sees): kept 100%, [MASK] and random 0%."""

    class Copier(torch.nn.Module):
        config = SimpleNamespace(attention="bidirectional")

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, full_mlm_logits=True):
            logits = torch.nn.functional.one_hot(input_ids, tokenizer.vocab_size).float() * 10
            if not full_mlm_logits:   # the rows of the labelled positions, as BertForPreTraining gives them
                logits = logits[labels != -100]
            return SimpleNamespace(mlm_logits=logits)

    acc = accuracy_by_decision(Copier(), tokenizer, pairs, seed=2, mask_rate=0.3)
    assert acc["kept"].count > 0 and acc["kept"].accuracy == 1.0
    assert acc["[MASK]"].accuracy == 0.0
    assert acc["random"].accuracy <= 0.05   # a random replacement may draw the original token itself


def test_a_gpt_cannot_guess_masked_tokens(tokenizer, pairs):
    gpt = _model(tokenizer, attention="causal")
    with pytest.raises(BertCoreError, match="GPT"):
        guesses_for_instance(gpt, tokenizer, *pairs[0])
    with pytest.raises(BertCoreError, match="GPT"):
        accuracy_by_decision(gpt, tokenizer, pairs)


# ------------------------------------------------------------------------------------------------ one step

@pytest.fixture(scope="module")
def default_spec():
    from bert_core.training.train_spec import default_spec

    return default_spec()


def _trainer(spec, callbacks=()):
    from bert_core.serve.train_spec import build_trainer

    return build_trainer(spec, callbacks=callbacks)


def test_steps_taken_one_at_a_time_are_the_run_itself(default_spec):
    """Three presses of *Step once* leave the weights exactly where three steps of the run leave them: recording
    the gradients and weights changes nothing."""
    from bert_core.inspect.training_step import take_one_step

    stepped = _trainer(default_spec)
    records = [take_one_step(stepped) for _ in range(3)]
    assert [r.step for r in records] == [1, 2, 3]

    def stop_at_3(event):
        if getattr(event, "step", 0) == 3 and hasattr(event, "grad_norm"):
            run.stop()

    run = _trainer(default_spec, callbacks=[stop_at_3])
    run.run()
    assert run.step == 3 and run.state == "stopped"
    for (name, a), b in zip(stepped.model.state_dict().items(), run.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert [e.loss for e in stepped.history] == [e.loss for e in run.history]
    assert stepped.state == "idle"   # stepping leaves the run where it was: Start runs it on from step 3
    assert stepped.evals and stepped.evals[0].step == 0   # the evaluation before the first update, as a run makes


def test_one_step_records_the_batch_gradients_and_the_weights_that_moved(default_spec):
    from bert_core.inspect.training_step import TOP_CHANGES, take_one_step

    trainer = _trainer(default_spec)
    model = trainer.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    record = take_one_step(trainer)
    groups = [name for name, _ in record.layer_grad_norms]
    assert groups[:3] == ["embeddings", "layer 1", "layer 2"] and "LM head" in groups and "NSP head" in groups
    assert all(v > 0 for _, v in record.layer_grad_norms)
    # The parts' norms make up the whole gradient's norm (before clipping).
    assert math.sqrt(sum(v * v for _, v in record.layer_grad_norms)) == pytest.approx(record.grad_norm, rel=1e-4)
    assert len(record.changes) == TOP_CHANGES
    params = dict(model.named_parameters())
    for c in record.changes:
        assert c.before != c.after
        assert float(before[c.parameter][c.index]) == c.before
        assert float(params[c.parameter].detach()[c.index]) == c.after
        # Adam's first update moves a weight by about the learning rate (plus AdamW's decay of lr x wd x w).
        assert abs(c.change) <= record.learning_rate * 1.01 + 1e-9
    assert record.changed_weights <= record.total_weights == sum(p.numel() for p in params.values())
    assert record.rows == default_spec.train["batch_size"] or record.rows > 0
    shown = [r for r in record.example if r.decision != "not chosen"]
    assert shown and record.example[0].token == "[CLS]"
    assert record.mlm_loss == pytest.approx(trainer.history[-1].mlm_loss)


def test_a_finished_or_running_trainer_cannot_step(default_spec):
    from bert_core.inspect.training_step import take_one_step

    trainer = _trainer(default_spec)
    trainer._state = "finished"
    with pytest.raises(BertCoreError, match="no next step"):
        take_one_step(trainer)


def test_weight_names_say_which_token_position_or_layer():
    from bert_core.inspect.training_step import layer_group, weight_name

    tok = SimpleNamespace(id_to_token=lambda i: {5: "the"}[i])
    assert weight_name("bert.embeddings.word_embeddings.weight", (5, 3), tok) == "embedding of 'the' (dim 3)"
    # Layers and positions counted from 1, as every page counts them (the key's layer.1 is the second layer).
    assert weight_name("bert.embeddings.position_embeddings.weight", (7, 1), tok) == "embedding of position 8 (dim 1)"
    assert weight_name("bert.encoder.layer.1.attention.self.query.weight", (4, 17), tok) == \
        "layer 2 attention.self.query.weight[4, 17]"
    assert layer_group("bert.encoder.layer.12.output.dense.bias") == "layer 13"
    assert layer_group("bert.encoder.layer.0.output.dense.bias") == "layer 1"
    assert layer_group("cls.seq_relationship.weight") == "NSP head"
    assert layer_group("cls.predictions.transform.dense.weight") == "LM head"


# ------------------------------------------------------------------------------------------------ the steps

def test_the_steps_follow_the_pages_and_the_url_names_them():
    assert lesson.STEP_KEYS == ("tokens", "embedding", "masking", "step", "run", "layers", "attention", "attends",
                                "feed-forward", "predictions", "bert-or-gpt", "fine-tune")
    assert lesson.step_index("masking") == 2 and lesson.step_index("3") == 2
    for junk in (None, "", "0", "99", "../etc", "<script>"):
        assert lesson.step_index(junk) == 0
    for s in lesson.STEPS:
        assert 0 <= s.question.answer < len(s.question.choices) and s.question.reason
        assert len(s.text) < 600   # a few sentences, no wall of text


def test_an_answer_is_revealed_with_its_reason():
    q = lesson.STEPS[1].question
    assert lesson.answer_feedback(q, None) is None
    right, text = lesson.answer_feedback(q, q.answer)
    assert right and text.startswith("Right.") and q.reason in text
    wrong, text = lesson.answer_feedback(q, (q.answer + 1) % len(q.choices))
    assert not wrong and q.choices[q.answer] in text and q.reason in text


def _percentages(text: str) -> list[float]:
    return [float(x) / 100 for x in re.findall(r"(\d+(?:\.\d+)?)%", text)]


def test_the_masking_notice_says_the_measured_shares_and_accuracies(tokenizer, pairs):
    model = _model(tokenizer)
    stats = masking_stats(tokenizer, [ids for ids, _ in pairs], seed=0)
    acc = accuracy_by_decision(model, tokenizer, pairs, seed=0)
    text = lesson.notice_masking(stats, acc)
    got = _percentages(text)
    assert got[:4] == pytest.approx([round(stats[k], 3) for k in ("chosen_share", "masked_share", "random_share",
                                                                  "kept_share")], abs=1e-9)
    ranked = sorted(acc.values(), key=lambda a: a.accuracy, reverse=True)
    assert got[4:] == pytest.approx([round(a.accuracy, 2) for a in ranked], abs=1e-9)
    assert lesson.notice_masking(stats, None).count("%") == 4


def test_the_tokens_notice_counts_the_pieces_and_names_the_split_words():
    text = lesson.notice_tokens(["playing", "in", "gardens"], [["play", "##ing"], ["in"], ["garden", "##s"]], 8192)
    assert "3 words and marks became 5 word pieces" in text and "8,192" in text
    assert "2 of them were split" in text and "“playing” → play ##ing" in text and "more" not in text
    assert "single piece" in lesson.notice_tokens(["in"], [["in"]], 100)


def test_the_tokens_notice_counts_the_split_words_it_does_not_name():
    words = ["playing", "gardens", "walked", "quickly", "happiness"]
    text = lesson.notice_tokens(words, [[w[:3], "##" + w[3:]] for w in words], 8192)
    named = [w for w in words if f"“{w}”" in text]
    assert "5 of them were split" in text and len(named) == lesson.SPLIT_WORDS_SHOWN
    assert f"and {5 - lesson.SPLIT_WORDS_SHOWN} more" in text


def test_the_step_notice_reads_the_record():
    record = SimpleNamespace(step=1, mlm_loss=6.98, learning_rate=1.5e-5, causal=False, changed_weights=90,
                             total_weights=100, layer_grad_norms=[("embeddings", 1.9), ("layer 1", 0.1)],
                             changes=[SimpleNamespace(change=c) for c in (2e-5, -1e-5)])
    text = lesson.notice_step(record, 1045)
    assert "loss was 6.98" in text and f"{math.log(1045):.2f}" in text and "embeddings (1.9)" in text
    assert "90 of the model's 100 weights (90%)" in text and "Adam" not in text


def test_the_step_notice_says_why_adams_first_update_moves_every_weight_alike():
    record = SimpleNamespace(step=1, mlm_loss=6.98, learning_rate=1.5e-5, causal=False, changed_weights=90,
                             total_weights=100, layer_grad_norms=[],
                             changes=[SimpleNamespace(change=c) for c in (1.5e-5, -1.5e-5, 1.5e-5)])
    text = lesson.notice_step(record, 1045)
    assert "The 3 weights listed all moved by the same amount" in text and "Adam's first update" in text


def test_the_run_notice_finds_where_the_loss_went_under_the_unigram_line():
    evals = [SimpleNamespace(step=s, mlm_loss=v, mlm_acc=a) for s, v, a in
             [(0, 7.0, 0.0), (200, 5.5, 0.1), (400, 4.9, 0.3), (600, 3.0, 0.5)]]
    assert lesson.crossing_step(evals, 5.0) == 400
    text = lesson.notice_run(evals, 5.0)
    assert "7.00 at step 0" in text and "3.00 at step 600" in text and "under it at step 400" in text
    assert "50.0%" in text
    assert "not gone under" in lesson.notice_run(evals[:2], 5.0)
    assert lesson.notice_run([], 5.0) is None


def _head(layer, head, **shares):
    base = dict(to_cls=0.0, to_sep=0.0, to_previous=0.0, to_next=0.0, to_self=0.0)
    base.update(shares)
    return HeadSummary(layer=layer, head=head, entropy=1.0, normalized_entropy=0.5, **base)


def test_the_attention_notice_names_the_most_specialised_head():
    heads = [_head(0, 0, to_previous=0.4), _head(0, 1, to_sep=0.6), _head(1, 0, to_next=0.71), _head(1, 1)]
    text = lesson.notice_attention(heads)
    assert text.startswith("Head L2 H1 (layer 2, head 1) puts 71% of its attention on the next token")
    assert "1 of the 4 heads put half or more on [SEP]: L1 H2." in text


def test_the_attention_notice_names_every_head_it_counts_on_sep():
    heads = [_head(0, 0, to_sep=0.5), _head(0, 1, to_sep=0.49), _head(1, 0, to_sep=0.9), _head(1, 1, to_self=0.95)]
    text = lesson.notice_attention(heads)
    assert text.endswith(" 2 of the 4 heads put half or more on [SEP]: L1 H1, L2 H1."), text
    assert lesson.notice_attention([_head(0, 0, to_self=0.9)]).endswith("0 of the 1 heads put half or more on [SEP].")


def test_the_gpt_notice_counts_what_each_first_and_last_token_sees_and_names_them():
    tokens = ["[CLS]", "dogs", "[SEP]"]
    text = lesson.notice_bert_or_gpt([0.2, 0.3, 0.5], [1.0, 0.0, 0.0], [0.5, 0.005, 0.495], tokens, tokens)
    # Each count names the tokens it counts, counted from 1 as the figure's axes are.
    assert "GPT's [CLS] looks at 1 of the 3 tokens (1 [CLS]), as only itself can be seen" in text
    assert "GPT's last token looks at 2 of them (1 [CLS], 3 [SEP]), though every token up to itself" in text
    assert "BERT's [CLS] looks at 3 of 3 (every one)" in text and "over 1% of the attention" in text


def test_the_predictions_and_finetune_notices():
    text = lesson.notice_predictions([("barn", 0.12), ("woods", 0.05)], [("the", 0.05)])
    assert "“barn” at 12%" in text and "“the” at 5%" in text
    results = {"pretrained": _race_result(0.75), "tfidf": _race_result(0.76)}
    text = lesson.notice_finetune(results)
    assert "the pretrained model 75.0%" in text and "the bag of words 76.0%" in text and "Ahead: the bag" in text
    assert lesson.notice_finetune(None) is None


def test_the_race_notice_names_the_model_it_fine_tuned():
    results = {"pretrained": _race_result(0.96), "scratch": _race_result(0.59)}
    text = lesson.notice_finetune(results, "the model trained in this session")
    assert text.startswith("Your race (it fine-tuned the model trained in this session), held-out accuracy:"), text
    assert lesson.notice_finetune(results).startswith("Your race, held-out")


def test_the_summary_names_the_model_of_every_line_and_puts_a_side_trip_after_its_step():
    seen = {"fine-tune": lesson.Seen("the model trained in this session", "Your race: 96%."),
            "predictions" + lesson.SIDE_TRIP: lesson.Seen("bert-tiny-english", "The model's top guess is “paris”."),
            "tokens": lesson.Seen("bert-tiny-english", "Your 5 words became 6 word pieces."),
            "predictions": lesson.Seen("the model trained in this session", "The model's top guess is “barn”."),
            "run": lesson.Seen("the default run's nano BERT, as it trained", "Held-out loss 2.1.")}
    lines = lesson.notice_summary(seen).splitlines()
    assert lines == [
        "- **Tokens** (on bert-tiny-english). Your 5 words became 6 word pieces.",
        "- **A live run** (on the default run's nano BERT, as it trained). Held-out loss 2.1.",
        "- **Predictions** (on the model trained in this session). The model's top guess is “barn”.",
        "- **Predictions, side trip** (on bert-tiny-english). The model's top guess is “paris”.",
        "- **Fine-tuning against a bag of words** (on the model trained in this session). Your race\\: 96%."]
    # A model or a notice holding a visitor's text is shown as written, never as Markdown.
    hostile = lesson.notice_summary({"tokens": lesson.Seen("[run](http://x)", "“*a*” → *a*")})
    assert "[run](" not in hostile and "\\*a\\*" in hostile


def test_the_example_sentences_are_written_as_a_teacher_writes():
    from bert_core.model.tokenization import BertTokenizer

    for sentence in (lesson.EMBEDDING_SENTENCE, lesson.BERT_OR_GPT_SENTENCE):
        assert sentence[0].isupper() and sentence.endswith(".") and " ." not in sentence, sentence
    # The tokenizer lower-cases and splits the full stop off: a toy model reads them as its stories are written.
    tok = train_tokenizer(["the dog saw the cat .", "the dog sleeps in the barn after a long day ."] * 20,
                          vocab_size=80, min_frequency=1)
    assert isinstance(tok, BertTokenizer)
    assert tok.tokenize(lesson.EMBEDDING_SENTENCE) == tok.tokenize("the dog saw the cat .")
    assert tok.tokenize(lesson.EMBEDDING_SENTENCE).count("the") == 2   # the step's question: "the" comes twice


def test_a_new_step_opens_at_its_top():
    first, second = lesson.to_top_script(1), lesson.to_top_script(2)
    assert first != second   # a frame whose script changed is loaded again: each step opened scrolls afresh
    for script in (first, second):
        assert script.startswith("<script>") and script.endswith("</script>")
        assert "[data-testid=\"stMain\"]" in script and "scrollTop=0" in script and "scrollTo(0,0)" in script


def test_the_lesson_figures_show_their_numbers(tokenizer, pairs):
    model = _model(tokenizer)
    guesses = guesses_for_instance(model, tokenizer, *pairs[0], seed=0, mask_rate=0.4)
    fig = lesson_figures.guesses_figure(guesses)
    guess_text = fig.data[-1].text
    assert len(guess_text) == len(guesses)
    # Positions counted from 1 on hover, as every figure counts tokens ([CLS] is position 1).
    hovers = {h for trace in fig.data for h in (trace.hovertext or ()) if str(h).startswith("position ")}
    assert hovers == {f"position {g.position + 1}: the model saw {g.shown}; the token was {g.token}"
                      for g in guesses}, hovers
    rows = mask_example(tokenizer, *pairs[0], seed=0)
    boxes = [h for trace in figures.masking_figure(rows).data for h in trace.hovertext or ()]
    assert any(h.startswith("#1 [CLS] ") for h in boxes) and not any(h.startswith("#0 ") for h in boxes), boxes[:3]
    assert all(t.startswith(lesson_figures.RIGHT if g.right else lesson_figures.WRONG)
               for t, g in zip(guess_text, guesses))
    acc = {"[MASK]": DecisionAccuracy("[MASK]", 10, 3), "random": DecisionAccuracy("random", 4, 1),
           "kept": DecisionAccuracy("kept", 5, 5)}
    bars = lesson_figures.decision_accuracy_bars(acc)
    assert list(bars.data[0].y) == [0.3, 0.25, 1.0] and bars.data[0].text[2] == "100% of 5"
    grads = lesson_figures.layer_gradient_figure([("embeddings", 2.0), ("layer 1", 0.5)], 3)
    assert list(grads.data[0].y) == ["embeddings", "layer 1"] and "update 3" in grads.layout.title.text
    toks = lesson_figures.tokens_figure(["[CLS]", "play", "##ing", "[SEP]"], [0, 0, 0, 0])
    assert {t.name for t in toks.data} == {"special token", "sentence A"}
    assert sum(len(t.x) for t in toks.data if "text" in t.mode) == 4   # a box trace under each text trace


# ------------------------------------------------------------------------------------------------ B -> A

def _nsp_pairs(tokenizer):
    out = []
    for i, a in enumerate(SENTENCES * 4):
        random_next = i % 3 == 0
        b = SENTENCES[(i + 2) % len(SENTENCES)] if random_next else SENTENCES[(i + 1) % len(SENTENCES)]
        enc = tokenizer.encode_pair(a, b)
        out.append(SimpleNamespace(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"],
                                   is_random_next=random_next))
    return out


def test_b_to_a_is_the_share_one_pairs_attention_maps_give(tokenizer):
    from bert_core.inspect.inspection import attention_maps
    from bert_core.inspect.inspection import b_to_a_attention

    model = _model(tokenizer)
    pairs = _nsp_pairs(tokenizer)
    summary = b_to_a_attention(model, tokenizer, pairs, batch_size=5)
    assert summary.pairs_follow + summary.pairs_random == len(pairs) and summary.pairs_random == 7
    expected = {False: [], True: []}
    for i, a in enumerate(SENTENCES * 4):
        x = pairs[i]
        b = SENTENCES[(i + 2) % len(SENTENCES)] if x.is_random_next else SENTENCES[(i + 1) % len(SENTENCES)]
        result = attention_maps(model, tokenizer, a, b)
        types = torch.tensor(result.token_type_ids)
        words = ~torch.tensor(result.special_mask)
        a_cols, b_rows = (words & (types == 0)).numpy(), (words & (types == 1)).numpy()
        expected[x.is_random_next].append(result.attentions[:, :, b_rows][..., a_cols].sum(-1).mean(-1))
    assert summary.follows == pytest.approx(sum(expected[False]) / len(expected[False]), rel=1e-4)
    assert summary.random == pytest.approx(sum(expected[True]) / len(expected[True]), rel=1e-4)
    assert (summary.difference == summary.follows - summary.random).all()
    assert 0 < summary.uniform < 1


def test_b_to_a_needs_pairs_and_draws_both_panels(tokenizer):
    from bert_core.inspect.inspection import b_to_a_attention

    model = _model(tokenizer)
    single = tokenizer.encode_pair("the cat sat on the mat")
    with pytest.raises(BertCoreError, match="pairs"):
        b_to_a_attention(model, tokenizer, [SimpleNamespace(input_ids=single["input_ids"],
                                                            token_type_ids=single["token_type_ids"],
                                                            is_random_next=False)])
    summary = b_to_a_attention(model, tokenizer, _nsp_pairs(tokenizer))
    fig = lesson_figures.pair_attention_figure(summary)
    assert [t.z.shape if hasattr(t.z, "shape") else (len(t.z), len(t.z[0])) for t in fig.data] == [(2, 2), (2, 2)]
    assert fig.data[0].text[0][0] == f"{summary.follows[0, 0]:.0%}"
    assert "B follows A (13 pairs)" in fig.layout.annotations[0].text


def test_a_class_keeps_its_teachers_step_and_nothing_else():
    from bert_core.app.lesson_classes import LessonClasses

    classes = LessonClasses(lesson.STEP_KEYS, limit=3)
    code = classes.lead("tokens")[0]
    assert classes.step(code) == "tokens" and classes.state(code) is not None
    classes.set_step(code, "masking")
    assert classes.step(code) == "masking"
    classes.set_step(code, "../../etc/passwd")   # not a step: ignored
    classes.set_step("made-up", "run")          # not a class: nothing is created
    assert classes.step(code) == "masking" and classes.step("made-up") is None and classes.step(None) is None
    others = [classes.lead("run")[0] for _ in range(3)]
    assert classes.step(code) is None and all(classes.step(c) == "run" for c in others)   # the oldest is dropped


def test_the_decision_notice_says_what_the_last_steps_show():
    def steps(kept, masked, rand):
        return [SimpleNamespace(mlm_acc_kept=kept, mlm_acc_masked=masked, mlm_acc_random=rand)] * 60

    text = lesson.notice_decisions(steps(0.9, 0.3, 0.2))
    assert "last 50 steps: kept tokens 90% right, [MASK]ed ones 30%, random ones 20%" in text
    assert "easy ones" in text
    assert "barely easier" in lesson.notice_decisions(steps(0.62, 0.55, 0.5))
    assert lesson.notice_decisions([]) is None


def _race_result(accuracy, steps=300, asked=300):
    return SimpleNamespace(accuracy=accuracy, metric_names=("accuracy", "macro-F1"), steps=steps, steps_asked=asked,
                           cut_short=steps < asked)


def test_the_race_notice_says_by_how_much_pretraining_paid_or_did_not():
    paid = lesson.notice_finetune({"tfidf": _race_result(0.746), "pretrained": _race_result(0.96),
                                   "scratch": _race_result(0.592)})
    assert "Pretraining paid: the pretrained model beat the same model from scratch by 36.8 points and the bag of " \
           "words by 21.4 points." in paid
    lost = lesson.notice_finetune({"tfidf": _race_result(0.742), "pretrained": _race_result(0.744),
                                   "scratch": _race_result(0.976)})
    assert "did not pay" in lost and "Pretraining paid" not in lost and "Ahead: the same model from scratch" in lost
    short = lesson.notice_finetune({"pretrained": _race_result(0.9, steps=120), "scratch": _race_result(0.6)})
    assert "cut the pretrained model short" in short


def test_the_nsp_notice_reads_the_runs_own_figures():
    def evals(*accuracies):
        return [SimpleNamespace(step=100 * i, nsp_acc=a) for i, a in enumerate(accuracies)]

    history = [SimpleNamespace(nsp_loss=0.54)] * 10
    left = lesson.notice_nsp(evals(0.5, 0.5, 0.61, 0.64), history)
    assert "It left chance at step 200" in left and "64% at step 300" in left and "loss over the last steps 0.54" \
        in left and "ln 2 = 0.69" in left
    stuck = lesson.notice_nsp(evals(0.5, 0.52))
    assert "Still at chance" in stuck and "left chance" not in stuck
    assert lesson.notice_nsp(evals(0.5), nsp=False) is None and lesson.notice_nsp([]) is None


def test_every_question_that_states_a_fact_about_a_model_says_which_model():
    # BERT-base's [SEP] heads are BERT-base's: the question says so, and points at the notice for this model.
    attention = next(s for s in lesson.STEPS if s.key == "attention").question.text
    assert "In BERT-base" in attention and "this model" in attention
    tokens = next(s for s in lesson.STEPS if s.key == "tokens").question.text
    assert "might cut" in tokens and "the notice says what this one cut" in tokens
    race = next(s for s in lesson.STEPS if s.key == "fine-tune")
    assert "100%" not in race.question.text and "Run the lesson's race" in race.text
    assert lesson.LESSON_RACE["data"] == "toy_order" and lesson.LESSON_RACE["baseline"] is True


# ------------------------------------------------------------------------------------------------ the two inside steps


def _shipped():
    from bert_core.model.checkpoint import load_checkpoint
    from bert_core.paths import DEFAULT_CHECKPOINT

    if not (DEFAULT_CHECKPOINT / "config.json").is_file():
        pytest.skip("the shipped checkpoint is not in this checkout")
    return load_checkpoint(DEFAULT_CHECKPOINT, require_tokenizer=True)


def test_the_embedding_notice_says_the_parts_lengths_and_the_repeated_words_cosine():
    import numpy as np

    from bert_core.inspect.embeddings import embedding_parts, nearest_neighbours

    ckpt = _shipped()
    parts = embedding_parts(ckpt.model, ckpt.tokenizer, lesson.EMBEDDING_SENTENCE)
    near = nearest_neighbours(ckpt.model, ckpt.tokenizer, "dog", k=4)
    text = lesson.notice_embedding(parts, 2, near)
    assert parts.tokens[2] == "dog" and "Token 3 “dog”" in text
    assert f"token vector is {np.linalg.norm(parts.word[2]):.2f} long" in text
    assert f"position vector {np.linalg.norm(parts.position[2]):.2f}" in text
    a, b = parts.normed[1], parts.normed[4]
    cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert parts.tokens[1] == parts.tokens[4] == "the" and cosine < 0.999
    assert "positions 2 and 5" in text and f"cosine similarity is {cosine:.2f}" in text
    assert f"“{near[0][0]}”" in text
    alone = lesson.notice_embedding(embedding_parts(ckpt.model, ckpt.tokenizer, "dogs bark ."), 1)
    assert "positions" not in alone and "nearest" not in alone


def test_the_attends_notice_reads_the_heads_weights_and_the_undivided_softmax():
    from bert_core.inspect.attention_steps import attention_steps, with_temperature

    ckpt = _shipped()
    steps = attention_steps(ckpt.model, ckpt.tokenizer, lesson.EMBEDDING_SENTENCE, 1, 0, 2)
    undivided = with_temperature(steps, 1 / math.sqrt(steps.head_dim))
    # at a temperature of 1/sqrt(d) the what-if is the softmax of q.k itself
    expected = torch.tensor(steps.scores).double().softmax(-1).numpy()
    assert abs(undivided - expected).max() < 1e-5
    text = lesson.notice_attends(steps, undivided)
    top = int(steps.probs.argmax())
    assert f"go to token {top + 1} “{steps.tokens[top]}”" in text and f"{steps.probs[top]:.0%}" in text
    assert f"over {len(steps.tokens)} tokens sum to 1.00" in text
    assert f"its top token {undivided.max():.0%}" in text and undivided.max() >= steps.probs.max()


def test_the_attends_step_draws_the_values_and_their_weighted_sum_and_names_its_layer_and_head():
    import numpy as np

    from bert_core.inspect.attention_steps import attention_steps, with_temperature

    ckpt = _shipped()
    steps = attention_steps(ckpt.model, ckpt.tokenizer, lesson.EMBEDDING_SENTENCE, 0, 1, 3)
    values = lesson_figures.values_figure(steps)
    strips, summed = values.data
    # Every token's value, each labelled with its weight (tokens from 1), and their weighted sum: the model's own.
    assert np.allclose(np.asarray(strips.z), steps.v) and list(strips.y)[1] == f"2 the × {steps.probs[1]:.2f}"
    assert np.allclose(np.asarray(summed.z)[0], steps.probs @ steps.v, atol=1e-5)
    assert np.allclose(np.asarray(summed.z)[0], steps.model_context, atol=1e-4)
    for fig in (values, lesson_figures.attends_scores_figure(steps)):
        title = str(fig.layout.title.text).replace("<br>", " ")
        assert title.startswith("Layer 1, head 2") and "token 4 “saw”" in title.lower(), title
    text = lesson.notice_attends(steps, with_temperature(steps, 1 / math.sqrt(steps.head_dim)))
    assert "Token 4 “saw”, layer 1, head 2:" in text
    cos = [float(steps.context @ v / (np.linalg.norm(steps.context) * np.linalg.norm(v))) for v in steps.v]
    best = int(np.argmax(cos))
    assert (f"The weighted sum of the {len(steps.tokens)} values, {steps.head_dim} numbers (the bottom strip), is "
            f"most alike the value of token {best + 1} “{steps.tokens[best]}” (cosine similarity "
            f"{max(cos):.2f})") in text
