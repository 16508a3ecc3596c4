import copy
import math
import threading
import time

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.probes import ProbeStore
from bert_core.model.bert import BertForPreTraining
from bert_core.model.config import BertConfig
from bert_core.training.run_loop import history_stride
from bert_core.training.trainer import Trainer
from bert_core.training.optimization import lr_multiplier
from bert_core.training.pretraining_events import EvalEvent, StepEvent
from bert_core.training.train_config import TrainConfig

TIMING_FIELDS = ("tokens_per_s", "elapsed_s")


@pytest.fixture(scope="module")
def toy():
    """A small toy corpus split into train / held-out, and a tokenizer trained on the train part."""
    from bert_core.data.corpora import generate_toy_corpus, split_heldout
    from bert_core.model.tokenization import train_tokenizer

    corpus = generate_toy_corpus(num_documents=80, seed=0)
    train, held = split_heldout(corpus, fraction=0.2, seed=0)
    tokenizer = train_tokenizer(train.texts(), vocab_size=300)
    return train, held, tokenizer


def _data(toy, batch_size=4, seq=32, seed=0, **kw):
    from bert_core.data.pretraining_data import PretrainingData

    train, _, tokenizer = toy
    return PretrainingData(train, tokenizer, max_seq_length=seq, batch_size=batch_size, seed=seed, **kw)


def _eval_data(toy, batch_size=4, seq=32):
    from bert_core.data.pretraining_data import PretrainingData

    _, held, tokenizer = toy
    return PretrainingData(held, tokenizer, max_seq_length=seq, batch_size=batch_size, seed=0)


def _model(toy, dropout=0.1, seed=0):
    torch.manual_seed(seed)
    config = BertConfig.preset("nano", vocab_size=toy[2].vocab_size, max_position_embeddings=64,
                               hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return BertForPreTraining(config)


def _config(**kw):
    base = dict(batch_size=4, max_steps=20, learning_rate=3e-3, warmup_ratio=0.1, max_seq_length=32,
                eval_batches=2, device="cpu")
    base.update(kw)
    return TrainConfig(**base)


def _without_timing(history):
    out = []
    for e in history:
        d = dict(vars(e))
        for f in TIMING_FIELDS:
            d.pop(f)
        out.append(d)
    return out


# ---------------------------------------------------------------------------------------------- schedules


def test_linear_schedule_warms_up_then_decays_without_a_wasted_step():
    cfg = TrainConfig(max_steps=100, warmup_ratio=0.1)
    mults = [lr_multiplier(cfg, s) for s in range(100)]
    assert mults[0] == pytest.approx(0.1) and mults[9] == pytest.approx(1.0)
    assert all(a > b for a, b in zip(mults[10:], mults[11:]))
    assert 0 < mults[-1] < 0.02


def test_cosine_schedule_is_half_way_at_the_middle_of_the_decay():
    cfg = TrainConfig(max_steps=110, warmup_ratio=10 / 110, schedule="cosine")
    assert lr_multiplier(cfg, 10) == pytest.approx(1.0)
    assert lr_multiplier(cfg, 60) == pytest.approx(0.5)


def test_wsd_schedule_holds_the_peak_until_the_last_fifth_then_decays():
    cfg = TrainConfig(max_steps=1000, warmup_ratio=0.01, schedule="wsd")
    mults = [lr_multiplier(cfg, s) for s in range(1000)]
    assert mults[0] == pytest.approx(0.1) and mults[9] == pytest.approx(1.0)
    assert all(m == 1.0 for m in mults[9:800])
    assert mults[900] == pytest.approx(0.5, abs=0.01)
    assert all(a > b for a, b in zip(mults[800:], mults[801:]))
    assert 0 <= mults[-1] < 0.01
    assert lr_multiplier(cfg.replace(max_steps=2000), 900) == 1.0  # lengthened before its decay: still stable


def test_time_schedule_reaches_zero_exactly_at_the_end_of_the_budget():
    cfg = TrainConfig(max_steps=None, time_budget_s=60, schedule="time", warmup_ratio=0.1)
    assert lr_multiplier(cfg, 0, elapsed_s=3.0) == pytest.approx(0.5)
    assert lr_multiplier(cfg, 0, elapsed_s=6.0) == pytest.approx(1.0)
    assert lr_multiplier(cfg, 0, elapsed_s=33.0) == pytest.approx(0.5)
    assert lr_multiplier(cfg, 0, elapsed_s=60.0) == 0.0
    assert lr_multiplier(cfg, 0, elapsed_s=61.0) == 0.0


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(max_steps=None), "steps"),
        (dict(schedule="time"), "time budget"),
        (dict(schedule="bogus"), "schedule"),
        (dict(learning_rate=0), "learning_rate"),
        (dict(mask_rate=1.5), "mask_rate"),
        (dict(grad_accum=0), "grad_accum"),
        (dict(short_seq_length=8), "short_seq_length"),
        (dict(short_seq_length=256), "short_seq_length"),
        (dict(short_seq_fraction=1.0), "short_seq_fraction"),
    ],
)
def test_bad_train_config_is_refused_with_a_message(kw, match):
    with pytest.raises(BertCoreError, match=match):
        TrainConfig(**kw)


def test_train_config_round_trips_through_a_dict():
    cfg = TrainConfig(max_steps=None, time_budget_s=30.0, schedule="time", nsp=False)
    assert TrainConfig.from_dict({**cfg.to_dict(), "from_the_future": 1}) == cfg


# ---------------------------------------------------------------------------------------------- the loop


def test_step_events_split_mlm_accuracy_by_masking_decision(toy):
    model = _model(toy, dropout=0.0)
    reference = copy.deepcopy(model)
    data = _data(toy)
    first_batch = next(iter(_data(toy)))
    # fp32: the reference below is an fp32 forward (on a CPU with bfloat16 instructions "bf16" would autocast).
    trainer = Trainer(model, toy[2], data, _config(max_steps=1, precision="fp32"))
    trainer.run()
    assert trainer.state == "finished", trainer.error
    (event,) = trainer.history
    # The metrics are those of the weights before the update, on the batch the update used.
    reference.train()
    with torch.no_grad():
        out = reference(input_ids=first_batch.input_ids, attention_mask=first_batch.attention_mask,
                        token_type_ids=first_batch.token_type_ids, labels=first_batch.mlm_labels)
    positions = first_batch.mlm_labels != -100
    right = out.mlm_logits.argmax(-1) == first_batch.mlm_labels[positions]
    decisions = first_batch.decisions[positions]
    for code, field in ((1, "mlm_acc_masked"), (2, "mlm_acc_random"), (3, "mlm_acc_kept")):
        sel = decisions == code
        expected = right[sel].float().mean().item() if sel.any() else None
        assert getattr(event, field) == pytest.approx(expected), field
    assert event.mlm_acc == pytest.approx(right.float().mean().item())
    assert event.mlm_loss == pytest.approx(out.mlm_loss.item(), rel=1e-5)
    nsp = torch.nn.functional.cross_entropy(out.nsp_logits, first_batch.next_sentence_label)
    assert event.nsp_loss == pytest.approx(nsp.item(), rel=1e-5)
    assert event.tokens_seen == int(first_batch.attention_mask.sum())
    assert event.grad_norm > 0 and event.lr > 0


def test_resume_through_a_checkpoint_is_exact(toy, tmp_path):
    # Dropout is on: its RNG state has to travel through the checkpoint too.
    straight = Trainer(_model(toy), toy[2], _data(toy), _config(max_steps=20))
    straight.run()
    assert straight.state == "finished", straight.error

    first = Trainer(_model(toy), toy[2], _data(toy), _config(max_steps=20))
    first.callbacks.append(lambda e: first.stop() if isinstance(e, StepEvent) and e.step == 10 else None)
    first.run()
    assert first.state == "stopped" and first.step == 10
    first.save(tmp_path / "ckpt")
    del first
    resumed = Trainer.resume(tmp_path / "ckpt", _data(toy))
    resumed.run()
    assert resumed.state == "finished", resumed.error
    assert resumed.step == 20
    for k, v in straight.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[k], v, atol=1e-6, rtol=0, msg=k)
    assert _without_timing(resumed.history) == _without_timing(straight.history)


def _recording_data(toy, shapes, **kw):
    """Training data that records the shape of every batch it (or a resized copy of it) yields."""
    from bert_core.data.pretraining_data import PretrainingData

    class Recording(PretrainingData):
        def __next__(self):
            batch = super().__next__()
            shapes.append(tuple(batch.input_ids.shape))
            return batch

    train, _, tokenizer = toy
    return Recording(train, tokenizer, max_seq_length=32, batch_size=4, seed=0, **kw)


def test_short_sequences_first_then_the_full_length(toy):
    shapes = []
    config = _config(max_steps=10, short_seq_length=16, short_seq_fraction=0.4)
    trainer = Trainer(_model(toy), toy[2], _recording_data(toy, shapes), config)
    trainer.run()
    assert trainer.state == "finished", trainer.error
    assert len(shapes) == 10
    # The first 40% of the steps: 16-token sequences, 8 of them (as many tokens a step as 4 x 32); then 4 x 32.
    assert all(rows == 8 and width <= 16 for rows, width in shapes[:4]), shapes
    assert all(rows == 4 and width <= 32 for rows, width in shapes[4:]), shapes
    assert max(width for _, width in shapes[4:]) > 16


def test_a_short_length_not_shorter_than_the_sequence_is_no_phase(toy):
    shapes = []
    config = _config(max_steps=4, short_seq_length=32, short_seq_fraction=0.5)  # max_seq_length is 32 too
    trainer = Trainer(_model(toy), toy[2], _recording_data(toy, shapes), config)
    trainer.run()
    assert [rows for rows, _ in shapes] == [4] * 4 and trainer.batches.short_data is None


def test_short_phase_batch_size_can_be_set(toy):
    shapes = []
    config = _config(max_steps=4, short_seq_length=16, short_seq_fraction=0.5, short_seq_batch_size=3)
    Trainer(_model(toy), toy[2], _recording_data(toy, shapes), config).run()
    assert [rows for rows, _ in shapes] == [3, 3, 4, 4]


def test_resume_inside_the_short_phase_through_a_checkpoint_is_exact(toy, tmp_path):
    config = _config(max_steps=12, short_seq_length=16, short_seq_fraction=0.5)
    straight = Trainer(_model(toy), toy[2], _data(toy), config)
    straight.run()
    assert straight.state == "finished", straight.error

    first = Trainer(_model(toy), toy[2], _data(toy), config)
    first.callbacks.append(lambda e: first.stop() if isinstance(e, StepEvent) and e.step == 3 else None)
    first.run()
    assert first.step == 3
    first.save(tmp_path / "ckpt")
    resumed = Trainer.resume(tmp_path / "ckpt", _data(toy))
    resumed.run()
    assert resumed.state == "finished" and resumed.step == 12, resumed.error
    for k, v in straight.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[k], v, atol=1e-6, rtol=0, msg=k)
    assert _without_timing(resumed.history) == _without_timing(straight.history)


def test_a_run_extended_after_its_short_phase_never_goes_back_to_short_sequences(toy, tmp_path):
    config = _config(max_steps=6, short_seq_length=16, short_seq_fraction=0.5)
    first = Trainer(_model(toy), toy[2], _data(toy), config)
    first.run()
    first.save(tmp_path / "ckpt")
    shapes = []
    # Twice the steps: 6 of 12 done is under the fraction again, but the long phase has begun.
    more = Trainer.resume(tmp_path / "ckpt", _recording_data(toy, shapes), config_overrides={"max_steps": 12})
    more.run()
    assert more.state == "finished", more.error
    assert [rows for rows, _ in shapes] == [4] * 6


def test_history_is_thinned_evenly_and_resumes_exactly(toy, tmp_path):
    config = _config(max_steps=45, history_limit=8)
    straight = Trainer(_model(toy), toy[2], _data(toy), config)
    steps_seen = []
    straight.callbacks.append(lambda e: steps_seen.append(e.step) if isinstance(e, StepEvent) else None)
    straight.run()
    assert steps_seen == list(range(1, 46))  # every step is still reported to listeners
    # 45 steps, at most 8 kept: every 8th step (5 of them), plus the newest.
    assert [e.step for e in straight.history] == [8, 16, 24, 32, 40, 45]

    first = Trainer(_model(toy), toy[2], _data(toy), config)
    first.callbacks.append(lambda e: first.stop() if isinstance(e, StepEvent) and e.step == 19 else None)
    first.run()
    assert [e.step for e in first.history] == [4, 8, 12, 16, 19]
    first.save(tmp_path / "ckpt")
    resumed = Trainer.resume(tmp_path / "ckpt", _data(toy))
    resumed.run()
    assert _without_timing(resumed.history) == _without_timing(straight.history)


def test_history_limit_zero_keeps_every_step_and_bad_limits_are_refused(toy):
    assert [history_stride(10_000, 0), history_stride(100, 100), history_stride(101, 100)] == [1, 1, 2]
    with pytest.raises(BertCoreError, match="history_limit"):
        _config(history_limit=1)


def test_gradient_accumulation_gives_the_same_update_as_the_whole_batch(toy):
    # fp32: bf16 autocast (a CPU with bfloat16 instructions) rounds each micro-batch's matmuls differently.
    big = Trainer(_model(toy, dropout=0.0), toy[2], _data(toy, batch_size=8),
                  _config(max_steps=2, batch_size=8, precision="fp32"))
    big.run()
    small = Trainer(_model(toy, dropout=0.0), toy[2], _data(toy, batch_size=8),
                    _config(max_steps=2, batch_size=8, grad_accum=3, precision="fp32"))  # micro-batches: 3, 2, 3 rows
    small.run()
    assert big.state == small.state == "finished"
    for k, v in big.model.state_dict().items():
        torch.testing.assert_close(small.model.state_dict()[k], v, atol=1e-5, rtol=1e-4, msg=k)
    assert small.history[-1].mlm_loss == pytest.approx(big.history[-1].mlm_loss, rel=1e-5)


def test_a_huge_learning_rate_stops_with_a_message_and_keeps_the_last_good_checkpoint(toy, tmp_path):
    folder = tmp_path / "ckpt"
    good = Trainer(_model(toy), toy[2], _data(toy), _config(max_steps=2), checkpoint_dir=folder)
    good.run()
    saved = {k: v.clone() for k, v in good.model.state_dict().items()}
    doomed = Trainer.resume(folder, _data(toy), checkpoint_dir=folder,
                            config_overrides={"learning_rate": 1e30, "max_steps": 100, "max_grad_norm": 0.0})
    doomed.run()  # must not raise
    assert doomed.state == "failed"
    assert "learning rate" in doomed.error and "step" in doomed.error
    assert doomed.step < 100
    assert all(math.isfinite(e.loss) for e in doomed.history)
    from bert_core.model.checkpoint import load_checkpoint

    reloaded = load_checkpoint(folder)
    assert reloaded.trainer_state["step"] == 2
    for k, v in saved.items():
        assert torch.equal(reloaded.model.state_dict()[k], v), k
    doomed.run()  # a failed trainer stays failed
    assert doomed.state == "failed"


def test_stop_from_another_thread_returns_within_one_step_and_run_continues(toy):
    reached = threading.Event()
    trainer = Trainer(_model(toy), toy[2], _data(toy), _config(max_steps=400),
                      callbacks=[lambda e: reached.set() if isinstance(e, StepEvent) and e.step >= 3 else None])
    thread = threading.Thread(target=trainer.run)
    thread.start()
    assert reached.wait(60)
    trainer.stop()
    steps_at_stop = trainer.step
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert trainer.state == "stopped"
    assert trainer.step <= steps_at_stop + 1
    assert 0 < trainer.progress.fraction < 1

    trainer.config = trainer.config.replace(max_steps=trainer.step + 3)
    trainer.run()
    assert trainer.state == "finished"
    assert [e.step for e in trainer.history] == list(range(1, trainer.step + 1))


def test_held_out_evaluation_is_reported_beside_the_unigram_baseline_and_the_untrained_model(toy):
    trainer = Trainer(_model(toy), toy[2], _data(toy), _config(max_steps=6, eval_every=3),
                      eval_data=_eval_data(toy))
    seen = []
    trainer.callbacks.append(seen.append)
    trainer.run()
    assert [e.step for e in trainer.evals] == [0, 3, 6]
    assert all(isinstance(e, EvalEvent) and math.isfinite(e.perplexity) for e in trainer.evals)
    assert trainer.evals[0].perplexity == pytest.approx(math.exp(trainer.evals[0].mlm_loss))
    assert set(trainer.baselines) == {"unigram", "untrained"}
    assert 0 <= trainer.baselines["unigram"]["accuracy"] <= 1
    assert trainer.baselines["untrained"]["mlm_acc"] == trainer.evals[0].mlm_acc
    assert sum(isinstance(e, EvalEvent) for e in seen) == 3


def test_probe_snapshots_are_taken_at_chosen_steps_in_bounded_memory(toy):
    probes = ProbeStore(sentences=["the [MASK] sat on the mat ."], attention_sentence="the cat sat .",
                        top_k=3, max_snapshots=4)
    trainer = Trainer(_model(toy), toy[2], _data(toy), _config(max_steps=10, probe_every=1), probes=probes)
    trainer.run()
    snaps = probes.snapshots()
    assert len(snaps) <= 4
    assert snaps[0].step == 0 and snaps[-1].step == 10
    assert [s.step for s in snaps] == sorted(s.step for s in snaps)
    first = snaps[-1]
    assert len(first.predictions) == 1 and len(first.predictions[0][0]) == 3
    layers = trainer.model.config.num_hidden_layers
    assert first.attention.shape[:2] == (layers, trainer.model.config.num_attention_heads)
    assert first.attention.shape[2] == len(first.attention_tokens)


def test_readers_in_another_thread_get_consistent_snapshots(toy):
    trainer = Trainer(_model(toy), toy[2], _data(toy), _config(max_steps=15))
    thread = threading.Thread(target=trainer.run)
    thread.start()
    observed = []
    while thread.is_alive():
        history = trainer.history
        observed.append(len(history))
        assert [e.step for e in history] == list(range(1, len(history) + 1))
        trainer.progress  # noqa: B018 - must not raise mid-run
        time.sleep(0.01)
    thread.join()
    assert observed == sorted(observed)
    assert len(trainer.history) == 15
