"""The model against Hugging Face `transformers` (the reference), number for number, and its own invariants."""

import json

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.model.bert import (
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    param_groups,
)
from bert_core.model.config import BertConfig
from bert_core.model.files import is_checkpoint_folder
from bert_core.model.hf import load_pretrained, save_pretrained

transformers = pytest.importorskip("transformers")

PARITY_CONFIGS = [
    dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
         max_position_embeddings=40),
    dict(vocab_size=211, hidden_size=48, num_hidden_layers=3, num_attention_heads=3, intermediate_size=96,
         max_position_embeddings=64, layer_norm_eps=1e-7),
    dict(vocab_size=150, hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
         max_position_embeddings=32, type_vocab_size=3, hidden_act="gelu"),
]


def make_batch(config: BertConfig, batch=3, seq=17, seed=0, padded=True):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, config.vocab_size, (batch, seq), generator=g)
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, seq // 2:] = 1
    attention_mask = torch.ones_like(input_ids)
    if padded:  # rows of different real lengths, padded at the end
        for row, length in enumerate([seq, seq - 5, seq - 9][:batch]):
            attention_mask[row, length:] = 0
            input_ids[row, length:] = config.pad_token_id
            token_type_ids[row, length:] = 0
    labels = torch.full_like(input_ids, -100)
    chosen = (torch.rand(input_ids.shape, generator=g) < 0.3) & attention_mask.bool()
    chosen[:, 1] = True
    labels[chosen] = input_ids[chosen]
    nsp = torch.randint(0, 2, (batch,), generator=g)
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids), labels, nsp


def hf_model_from(folder, cls):
    return cls.from_pretrained(folder, attn_implementation="eager").eval()


def assert_close(a, b, tol=1e-5):
    assert a.shape == b.shape
    diff = (a.float() - b.float()).abs().max().item()
    assert diff <= tol, f"max abs difference {diff}"


@pytest.mark.parametrize("direction", ["ours_to_hf", "hf_to_ours"])
@pytest.mark.parametrize("cfg", PARITY_CONFIGS, ids=["padded", "three-layers", "one-layer-three-types"])
def test_pretraining_outputs_match_transformers(tmp_path, cfg, direction):
    config = BertConfig(**cfg)
    torch.manual_seed(1)
    if direction == "ours_to_hf":
        ours = BertForPreTraining(config).eval()
        # Non-trivial biases and LayerNorms so that a swapped or missing parameter shows up.
        with torch.no_grad():
            for p in ours.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        save_pretrained(ours, tmp_path)
        ref = hf_model_from(tmp_path, transformers.BertForPreTraining)
    else:
        hf_config = transformers.BertConfig(**cfg)
        ref = transformers.BertForPreTraining(hf_config).eval()
        with torch.no_grad():
            for p in ref.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        ref.save_pretrained(tmp_path)
        ours = load_pretrained(tmp_path)
        ref = hf_model_from(tmp_path, transformers.BertForPreTraining)
    inputs, labels, nsp = make_batch(config)
    with torch.no_grad():
        out = ours(**inputs, labels=labels, next_sentence_label=nsp, output_attentions=True,
                   output_hidden_states=True, full_mlm_logits=True)
        hf = ref(**inputs, labels=labels, next_sentence_label=nsp, output_attentions=True, output_hidden_states=True)
    assert_close(out.mlm_logits, hf.prediction_logits)
    assert_close(out.nsp_logits, hf.seq_relationship_logits)
    assert len(out.attentions) == len(hf.attentions) == config.num_hidden_layers
    for a, b in zip(out.attentions, hf.attentions):
        assert_close(a, b)
    assert len(out.hidden_states) == len(hf.hidden_states) == config.num_hidden_layers + 1
    for a, b in zip(out.hidden_states, hf.hidden_states):
        assert_close(a, b)
    assert_close(out.loss, hf.loss)


def test_saved_folder_loads_in_transformers_without_missing_or_unexpected_keys(tmp_path):
    config = BertConfig.preset("nano", vocab_size=120)
    save_pretrained(BertForPreTraining(config), tmp_path)
    _, info = transformers.BertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == set() or not info["missing_keys"]
    assert not info["unexpected_keys"]
    assert is_checkpoint_folder(tmp_path)


def test_state_dict_keys_are_hugging_faces():
    cfg = PARITY_CONFIGS[0]
    ours = BertForPreTraining(BertConfig(**cfg))
    ref = transformers.BertForPreTraining(transformers.BertConfig(**cfg))
    assert list(ours.state_dict().keys()) == list(ref.state_dict().keys())


def test_decoder_is_tied_to_word_embeddings_and_bias():
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=50))
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias


def test_classifier_logits_match_transformers(tmp_path):
    config = BertConfig(**PARITY_CONFIGS[1])
    torch.manual_seed(3)
    ours = BertForSequenceClassification(config, num_labels=4).eval()
    save_pretrained(ours, tmp_path, label_names=["World", "Sports", "Business", "Sci/Tech"])
    ref, info = transformers.BertForSequenceClassification.from_pretrained(
        tmp_path, attn_implementation="eager", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert ref.config.id2label[2] == "Business"
    inputs, _, _ = make_batch(config)
    labels = torch.tensor([0, 3, 2])
    with torch.no_grad():
        out = ours(**inputs, labels=labels)
        hf = ref.eval()(**inputs, labels=labels)
    assert_close(out.logits, hf.logits)
    assert_close(out.loss, hf.loss)
    back = load_pretrained(tmp_path, BertForSequenceClassification)
    assert back.num_labels == 4 and back.label_names[3] == "Sci/Tech"
    with torch.no_grad():
        assert_close(back(**inputs).logits, out.logits, 0)


@pytest.mark.parametrize("direction", ["ours_to_hf", "hf_to_ours"])
def test_tagger_logits_and_loss_match_transformers(tmp_path, direction):
    config = BertConfig(**PARITY_CONFIGS[1])
    tags = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
    torch.manual_seed(4)
    if direction == "ours_to_hf":
        ours = BertForTokenClassification(config, num_labels=5).eval()
        save_pretrained(ours, tmp_path, label_names=tags)
        ref, info = transformers.BertForTokenClassification.from_pretrained(
            tmp_path, attn_implementation="eager", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"]
        assert ref.config.id2label == dict(enumerate(tags))
    else:
        hf_config = transformers.BertConfig(**PARITY_CONFIGS[1], num_labels=5, id2label=dict(enumerate(tags)))
        transformers.BertForTokenClassification(hf_config).save_pretrained(tmp_path)
        ref = transformers.BertForTokenClassification.from_pretrained(tmp_path, attn_implementation="eager")
        ours = load_pretrained(tmp_path, BertForTokenClassification, strict_heads=True)
        assert ours.num_labels == 5 and ours.label_names == tags
    inputs, _, _ = make_batch(config)
    labels = torch.randint(0, 5, inputs["input_ids"].shape, generator=torch.Generator().manual_seed(1))
    labels[inputs["attention_mask"] == 0] = -100
    labels[:, ::3] = -100  # a word's later WordPieces are not scored
    with torch.no_grad():
        out = ours(**inputs, labels=labels)
        hf = ref.eval()(**inputs, labels=labels)
    assert_close(out.logits, hf.logits)
    assert_close(out.loss, hf.loss)
    back = load_pretrained(tmp_path, BertForTokenClassification)
    assert back.label_names == tags
    with torch.no_grad():
        assert_close(back(**inputs).logits, out.logits, 0)


@pytest.mark.parametrize("direction", ["ours_to_hf", "hf_to_ours"])
def test_question_answering_logits_and_loss_match_transformers(tmp_path, direction):
    config = BertConfig(**PARITY_CONFIGS[0])
    torch.manual_seed(5)
    if direction == "ours_to_hf":
        ours = BertForQuestionAnswering(config).eval()
        save_pretrained(ours, tmp_path)
        ref, info = transformers.BertForQuestionAnswering.from_pretrained(
            tmp_path, attn_implementation="eager", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"]
    else:
        transformers.BertForQuestionAnswering(transformers.BertConfig(**PARITY_CONFIGS[0])).save_pretrained(tmp_path)
        ref = transformers.BertForQuestionAnswering.from_pretrained(tmp_path, attn_implementation="eager")
        ours = load_pretrained(tmp_path, BertForQuestionAnswering, strict_heads=True)
    inputs, _, _ = make_batch(config)
    # The last pair lies past the sequence: clamped and ignored, as transformers does.
    start, end = torch.tensor([3, 0, 40]), torch.tensor([5, 0, 41])
    with torch.no_grad():
        out = ours(**inputs, start_positions=start, end_positions=end)
        hf = ref.eval()(**inputs, start_positions=start, end_positions=end)
    assert_close(out.start_logits, hf.start_logits)
    assert_close(out.end_logits, hf.end_logits)
    assert_close(out.loss, hf.loss)


def test_a_fine_tuning_head_is_taken_only_from_a_folder_of_its_own_kind(tmp_path):
    config = BertConfig.preset("nano", vocab_size=80)
    save_pretrained(BertForSequenceClassification(config, num_labels=3), tmp_path)
    tagger = load_pretrained(tmp_path, BertForTokenClassification, num_labels=3)
    assert "classifier.weight" in tagger.missing_keys  # same name and shape, another meaning: a fresh head
    assert "bert.encoder.layer.0.output.dense.weight" not in tagger.missing_keys


def test_classifier_from_pretraining_checkpoint_keeps_encoder(tmp_path):
    config = BertConfig.preset("nano", vocab_size=80)
    pre = BertForPreTraining(config)
    save_pretrained(pre, tmp_path)
    clf = load_pretrained(tmp_path, BertForSequenceClassification, num_labels=3)
    assert torch.equal(clf.bert.encoder.layer[0].attention.self.query.weight,
                       pre.bert.encoder.layer[0].attention.self.query.weight)
    assert "classifier.weight" in clf.missing_keys


def test_sdpa_path_matches_explicit_path():
    config = BertConfig(**PARITY_CONFIGS[0])
    model = BertForPreTraining(config).eval()
    inputs, labels, _ = make_batch(config)
    with torch.no_grad():
        fast = model(**inputs, output_hidden_states=True)
        slow = model(**inputs, output_hidden_states=True, output_attentions=True)
    mask = inputs["attention_mask"].bool()
    assert_close(fast.mlm_logits[mask], slow.mlm_logits[mask])
    assert_close(fast.nsp_logits, slow.nsp_logits)


def test_sparse_mlm_loss_equals_dense_loss():
    config = BertConfig(**PARITY_CONFIGS[1])
    model = BertForPreTraining(config).eval()
    inputs, labels, nsp = make_batch(config)
    with torch.no_grad():
        sparse = model(**inputs, labels=labels, next_sentence_label=nsp)
        dense = model(**inputs, labels=labels, next_sentence_label=nsp, full_mlm_logits=True)
    assert sparse.mlm_logits.shape == (int((labels != -100).sum()), config.vocab_size)
    assert abs(sparse.mlm_loss.item() - dense.mlm_loss.item()) <= 1e-6
    assert_close(sparse.mlm_logits, dense.mlm_logits[sparse.mlm_positions], 1e-6)


def test_sparse_mlm_gradients_equal_dense_gradients():
    config = BertConfig(**PARITY_CONFIGS[0], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(config)
    inputs, labels, nsp = make_batch(config)
    grads = []
    for full in (False, True):
        model.zero_grad()
        model(**inputs, labels=labels, next_sentence_label=nsp, full_mlm_logits=full).loss.backward()
        grads.append(model.bert.embeddings.word_embeddings.weight.grad.clone())
    assert_close(grads[0], grads[1], 1e-6)


def test_sparse_mlm_gradients_equal_dense_gradients_for_every_parameter():
    """The sparse head (decoder on the labelled rows) against the full logits, padded rows included: every
    parameter's gradient, the tied word-embedding matrix's (decoder + lookup) among them; also with only the NSP
    loss back-propagated."""
    config = BertConfig(**PARITY_CONFIGS[0], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = BertForPreTraining(config).double()
    inputs, labels, nsp = make_batch(config)
    for loss_name in ("loss", "nsp_loss"):
        grads = []
        for full in (False, True):
            model.zero_grad(set_to_none=True)
            out = model(**inputs, labels=labels, next_sentence_label=nsp, full_mlm_logits=full)
            getattr(out, loss_name).backward()
            grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        assert grads[0].keys() == grads[1].keys()
        for name in grads[0]:  # the loss is taken in float32, hence the tolerance
            torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-6, atol=1e-7, msg=name)


def test_nothing_masked_gives_zero_loss_not_nan():
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=50))
    ids = torch.randint(5, 50, (2, 8))
    out = model(ids, labels=torch.full_like(ids, -100))
    assert out.mlm_loss.item() == 0.0
    out.loss.backward()


@pytest.mark.parametrize("kind", ["causal", "bidirectional"])
def test_causal_mask_hides_the_future_and_bidirectional_does_not(kind):
    config = BertConfig.preset("nano", vocab_size=60, attention=kind)
    model = BertForPreTraining(config).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 60, (1, 12), generator=g)
    j = 7
    changed = ids.clone()
    changed[0, j] = (ids[0, j] + 1 - 5) % 55 + 5
    with torch.no_grad():
        a = model(ids, output_hidden_states=True).hidden_states[-1]
        b = model(changed, output_hidden_states=True).hidden_states[-1]
    before = (a[0, :j] - b[0, :j]).abs().max().item()
    if kind == "causal":
        assert before == 0.0
    else:
        assert before > 1e-4


def test_appended_padding_leaves_real_positions_unchanged():
    config = BertConfig(**PARITY_CONFIGS[1])
    model = BertForPreTraining(config).eval()
    inputs, _, _ = make_batch(config, batch=1, padded=False)
    pad = 9
    padded = {
        "input_ids": torch.cat([inputs["input_ids"], torch.zeros(1, pad, dtype=torch.long)], 1),
        "token_type_ids": torch.cat([inputs["token_type_ids"], torch.zeros(1, pad, dtype=torch.long)], 1),
        "attention_mask": torch.cat([inputs["attention_mask"], torch.zeros(1, pad, dtype=torch.long)], 1),
    }
    n = inputs["input_ids"].shape[1]
    with torch.no_grad():
        for attn in (False, True):
            a = model(**inputs, output_attentions=attn)
            b = model(**padded, output_attentions=attn)
            assert_close(a.mlm_logits, b.mlm_logits[:, :n])
            assert_close(a.nsp_logits, b.nsp_logits)


def test_nano_overfits_one_batch():
    torch.manual_seed(0)
    config = BertConfig.preset("nano", vocab_size=100, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForPreTraining(config)
    inputs, labels, nsp = make_batch(config, batch=4, seq=16)
    opt = torch.optim.AdamW(param_groups(model), lr=3e-3)
    for _ in range(300):
        opt.zero_grad()
        out = model(**inputs, labels=labels, next_sentence_label=nsp)
        out.loss.backward()
        opt.step()
    assert out.mlm_loss.item() < 0.1


def test_weight_decay_groups_exclude_exactly_biases_and_layernorm():
    model = BertForPreTraining(BertConfig(**PARITY_CONFIGS[1]))
    decay, no_decay = param_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    ids = {id(p): n for n, p in model.named_parameters()}
    decayed = {ids[id(p)] for p in decay["params"]}
    not_decayed = {ids[id(p)] for p in no_decay["params"]}
    assert decayed.isdisjoint(not_decayed)
    assert decayed | not_decayed == set(ids.values())
    for name in ids.values():
        is_bias_or_norm = name.endswith(".bias") or ".LayerNorm." in name
        assert (name in not_decayed) == is_bias_or_norm, name
    assert "cls.predictions.bias" in not_decayed
    assert "bert.embeddings.word_embeddings.weight" in decayed


def test_initialisation_follows_bert():
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=3000))
    w = model.bert.encoder.layer[0].intermediate.dense.weight
    assert abs(w.std().item() - 0.02) < 0.001 and abs(w.mean().item()) < 0.001
    assert torch.all(model.bert.encoder.layer[1].output.dense.bias == 0)
    ln = model.bert.encoder.layer[0].output.LayerNorm
    assert torch.all(ln.weight == 1) and torch.all(ln.bias == 0)
    assert torch.all(model.bert.embeddings.word_embeddings.weight[0] == 0)  # [PAD] row, as Hugging Face


@pytest.mark.parametrize("changes, field", [
    (dict(hidden_size=30, num_attention_heads=4), "divisible"),
    (dict(num_hidden_layers=0), "num_hidden_layers"),
    (dict(vocab_size=-5), "vocab_size"),
    (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob"),
    (dict(attention_probs_dropout_prob=-0.1), "attention_probs_dropout_prob"),
    (dict(attention="sideways"), "attention"),
])
def test_invalid_config_names_the_field(changes, field):
    with pytest.raises(BertCoreError, match=field):
        BertConfig.preset("nano").replace(**changes)


def test_presets_have_the_published_sizes():
    mini = BertConfig.preset("mini")
    assert (mini.num_hidden_layers, mini.hidden_size, mini.num_attention_heads, mini.intermediate_size) == \
        (4, 256, 4, 1024)
    base = BertConfig.preset("base")
    assert base == BertConfig()
    with pytest.raises(BertCoreError, match="unknown preset"):
        BertConfig.preset("gigantic")


def test_config_json_round_trip_and_transformers_reads_it(tmp_path):
    config = BertConfig.preset("tiny", vocab_size=999, layer_norm_eps=1e-6)
    config.save(tmp_path)
    assert BertConfig.load(tmp_path) == config
    hf = transformers.BertConfig.from_pretrained(tmp_path)
    assert (hf.hidden_size, hf.vocab_size, hf.layer_norm_eps) == (128, 999, 1e-6)
    causal = config.replace(attention="causal")
    causal.save(tmp_path)
    assert BertConfig.load(tmp_path).attention == "causal"


def test_loading_a_folder_that_is_not_a_checkpoint_says_so(tmp_path):
    with pytest.raises(BertCoreError, match="not a checkpoint"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(BertCoreError, match="not a BERT"):
        load_pretrained(tmp_path)


def test_pytorch_bin_checkpoint_loads_with_weights_only(tmp_path):
    cfg = PARITY_CONFIGS[0]
    ref = transformers.BertForPreTraining(transformers.BertConfig(**cfg)).eval()
    ref.config.save_pretrained(tmp_path)
    torch.save(ref.state_dict(), tmp_path / "pytorch_model.bin")
    ours = load_pretrained(tmp_path)
    inputs, _, _ = make_batch(BertConfig(**cfg))
    with torch.no_grad():
        assert_close(ours(**inputs).mlm_logits, ref(**inputs).prediction_logits)


def test_too_long_input_is_a_clear_error():
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=50, max_position_embeddings=8))
    with pytest.raises(BertCoreError, match="longer than the model's 8 positions"):
        model(torch.ones(1, 9, dtype=torch.long))
