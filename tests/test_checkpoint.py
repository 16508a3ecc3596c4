import json

import pytest
import torch

from bert_core.errors import BertCoreError
from bert_core.model import checkpoint, files
from bert_core.model.bert import BertForPreTraining, param_groups
from bert_core.model.checkpoint import (
    load_checkpoint,
    load_optimizer_state,
    rng_state_from_json,
    rng_state_to_json,
    save_checkpoint,
    save_optimizer_state,
)
from bert_core.model.config import BertConfig


def _model(seed=0):
    torch.manual_seed(seed)
    return BertForPreTraining(BertConfig.preset("nano", vocab_size=50, max_position_embeddings=32,
                                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 50, (3, 12), generator=g)
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.3, ids, torch.full_like(ids, -100))
    labels[:, 1] = ids[:, 1]
    return ids, labels


def _train_some(model, optimizer, steps=3):
    for s in range(steps):
        ids, labels = _batch(s)
        out = model(input_ids=ids, labels=labels, next_sentence_label=torch.tensor([0, 1, 0]))
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_optimizer_state_roundtrips_through_safetensors_and_the_next_step_matches(tmp_path):
    model = _model()
    opt = torch.optim.AdamW(param_groups(model), lr=1e-3, eps=1e-6)
    _train_some(model, opt)
    save_optimizer_state(opt, tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"optimizer.safetensors", "optimizer.json"}

    twin = _model(seed=1)
    twin.load_state_dict(model.state_dict())
    twin_opt = torch.optim.AdamW(param_groups(twin), lr=5.0, eps=1.0)  # hyperparameters come from the file
    load_optimizer_state(twin_opt, tmp_path)
    assert twin_opt.param_groups[0]["lr"] == 1e-3 and twin_opt.param_groups[0]["eps"] == 1e-6
    _train_some(model, opt, steps=1)
    _train_some(twin, twin_opt, steps=1)
    for k, v in _weights(model).items():
        assert torch.equal(v, twin.state_dict()[k]), k


def test_optimizer_state_for_another_model_shape_is_refused(tmp_path):
    model = _model()
    opt = torch.optim.AdamW(param_groups(model), lr=1e-3)
    _train_some(model, opt, steps=1)
    save_optimizer_state(opt, tmp_path)
    other = BertForPreTraining(BertConfig.preset("nano", vocab_size=50, num_hidden_layers=1))
    with pytest.raises(BertCoreError):
        load_optimizer_state(torch.optim.AdamW(param_groups(other), lr=1e-3), tmp_path)


def test_rng_state_survives_json():
    torch.manual_seed(123)
    state = {"torch": torch.get_rng_state()}
    text = json.dumps(rng_state_to_json(state))
    expected = torch.rand(5)
    torch.manual_seed(999)
    torch.set_rng_state(rng_state_from_json(json.loads(text))["torch"])
    assert torch.equal(torch.rand(5), expected)


def test_checkpoint_folder_loads_in_transformers_and_back(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = _model()
    opt = torch.optim.AdamW(param_groups(model), lr=1e-3)
    _train_some(model, opt, steps=1)
    folder = save_checkpoint(tmp_path / "ckpt", model, trainer_state={"step": 1}, optimizer=opt)
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "trainer_state.json", "optimizer.safetensors"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)
    hf = transformers.BertForPreTraining.from_pretrained(folder)
    ids, _ = _batch(7)
    model.eval()
    with torch.no_grad():
        ours = model(input_ids=ids).mlm_logits
        theirs = hf(input_ids=ids).prediction_logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    loaded = load_checkpoint(folder)
    assert loaded.trainer_state == {"step": 1}
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.model.state_dict()[k]), k


def test_crash_during_save_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    folder = tmp_path / "ckpt"
    first = _model(seed=0)
    opt = torch.optim.AdamW(param_groups(first), lr=1e-3)
    save_checkpoint(folder, first, trainer_state={"step": 1}, optimizer=opt)

    second = _model(seed=5)

    def crash(*args, **kwargs):
        raise OSError("disk full (simulated)")

    # The model files of the new checkpoint are already written when the optimizer writer dies.
    monkeypatch.setattr(checkpoint, "save_optimizer_state", crash)
    with pytest.raises(BertCoreError, match="could not write .*simulated"):  # one line for the user, not a trace
        save_checkpoint(folder, second, trainer_state={"step": 2}, optimizer=opt)

    loaded = load_checkpoint(folder)
    assert loaded.trainer_state == {"step": 1}
    for k, v in first.state_dict().items():
        assert torch.equal(v, loaded.model.state_dict()[k]), k
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary folder left behind


def test_crash_between_the_two_renames_is_recovered_on_load(tmp_path, monkeypatch):
    folder = tmp_path / "ckpt"
    first = _model(seed=0)
    save_checkpoint(folder, first, trainer_state={"step": 1})
    real_replace = files.os.replace
    calls = []

    def replace_then_die(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # the old folder is aside, the new one not yet in place
            raise KeyboardInterrupt("killed (simulated)")
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", replace_then_die)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(folder, _model(seed=3), trainer_state={"step": 2})
    monkeypatch.setattr(files.os, "replace", real_replace)
    assert not folder.exists()
    loaded = load_checkpoint(folder)
    assert loaded.trainer_state == {"step": 1}
    for k, v in first.state_dict().items():
        assert torch.equal(v, loaded.model.state_dict()[k]), k


def test_loading_a_checkpoint_never_unpickles(tmp_path, monkeypatch):
    model = _model()
    opt = torch.optim.AdamW(param_groups(model), lr=1e-3)
    _train_some(model, opt, steps=1)
    save_checkpoint(tmp_path / "c", model, trainer_state={"step": 1}, optimizer=opt)

    def no_pickle(*args, **kwargs):
        raise AssertionError("torch.load called")

    monkeypatch.setattr(torch, "load", no_pickle)
    loaded = load_checkpoint(tmp_path / "c")
    load_optimizer_state(torch.optim.AdamW(param_groups(loaded.model), lr=1e-3), tmp_path / "c")


def test_missing_or_damaged_folders_give_clear_errors(tmp_path):
    with pytest.raises(BertCoreError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BertCoreError, match="not a checkpoint folder"):
        load_checkpoint(tmp_path / "empty")
    save_checkpoint(tmp_path / "c", _model(), trainer_state={"step": 1})
    (tmp_path / "c" / "trainer_state.json").write_text("{not json")
    with pytest.raises(BertCoreError, match="damaged"):
        load_checkpoint(tmp_path / "c")
