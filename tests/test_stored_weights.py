"""`python -m bert_core export`: a folder whose weights are stored in float16 (bert_core.model.checkpoint.store_checkpoint)
loads as float32 here and in transformers, predicts what the float32 folder predicts, and re-measures the held-out
figures its metrics.json records on the stored weights."""

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from bert_core.cli.main import main
from bert_core.errors import BertCoreError
from bert_core.model.checkpoint import load_checkpoint
from bert_core.model.checkpoint import stored_state
from bert_core.paths import DEFAULT_CHECKPOINT

TEXT = "the jury said the [MASK] was conducted fairly ."


@pytest.fixture(scope="module")
def trained(toy_file, tmp_path_factory):
    """A folder written by `train` (4 steps of a nano model): float32 weights, optimizer state, an "eval" record."""
    out = tmp_path_factory.mktemp("stored") / "run"
    argv = ["train", "--corpus", str(toy_file), "--preset", "nano", "--vocab-size", "300", "--seq-len", "32",
            "--batch-size", "4", "--steps", "4", "--eval-batches", "2", "--device", "cpu", "--out", str(out)]
    assert main(argv) == 0
    return out


def _dtypes(folder):
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return {f.get_tensor(k).dtype for k in f.keys()}


def _logits(folder):
    ckpt = load_checkpoint(folder)
    ids = torch.tensor([ckpt.tokenizer.encode_pair(TEXT)["input_ids"]])
    with torch.no_grad():
        return ckpt.model.eval()(input_ids=ids, full_mlm_logits=True).mlm_logits, ckpt


def test_rounding_is_within_float16s_precision_and_refuses_what_it_cannot_hold():
    state = {"w": torch.randn(64, 64) * 0.05, "ids": torch.arange(5)}
    stored, record = stored_state(state, "float16")
    assert stored["w"].dtype == torch.float16 and stored["ids"].dtype == torch.int64
    assert 0 < record["largest_rel_change"] <= 2 ** -11 and record["floating_weights"] == 64 * 64
    assert torch.allclose(stored["w"].float(), state["w"], rtol=2 ** -11, atol=2 ** -24)  # subnormals: half their spacing
    with pytest.raises(BertCoreError, match="beyond float16's largest value"):
        stored_state({"w": torch.tensor([70000.0])}, "float16")
    assert stored_state({"w": torch.tensor([70000.0])}, "bfloat16")[0]["w"].dtype == torch.bfloat16
    with pytest.raises(BertCoreError, match="NaN or infinite"):
        stored_state({"w": torch.tensor([1.0, float("nan")])}, "float16")
    with pytest.raises(BertCoreError, match="unknown weight dtype"):
        stored_state(state, "int8")


def test_an_exported_folder_is_half_the_size_loads_as_float32_and_predicts_the_same(trained, tmp_path, capsys):
    out = tmp_path / "shared"
    assert main(["export", "--checkpoint", str(trained), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "stored as float16" in printed and "held-out masked token accuracy" in printed
    assert _dtypes(out) == {torch.float16}
    before, after = (d / "model.safetensors" for d in (trained, out))
    assert after.stat().st_size < 0.55 * before.stat().st_size
    names = {p.name for p in out.iterdir()}
    assert "optimizer.safetensors" not in names and "optimizer.json" not in names, "a stored folder does not resume"
    assert {"tokenizer.json", "vocab.txt", "trainer_state.json", "metrics.json"} <= names
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    a, _ = _logits(trained)
    b, ckpt = _logits(out)
    assert next(ckpt.model.parameters()).dtype == torch.float32
    assert torch.allclose(a, b, rtol=1e-2, atol=1e-2)
    # 4 steps from random weights leave near-ties, which a rounding may flip; a trained model's: docs/shipped-model.md
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.9
    # The recorded evaluation is measured again on the stored weights, with commands that name the new folder.
    metrics = json.loads((out / "metrics.json").read_text())
    record, again = metrics["stored_weights"], metrics["eval"]
    assert record["dtype"] == "float16" and record["eval_measured_on"] == "the stored weights"
    assert record["eval_before"]["masked_tokens"] == again["masked_tokens"]
    assert again["commands"][1] == f"python -m bert_core eval --checkpoint {out} --text-file heldout.txt"
    text_file = tmp_path / "heldout.txt"
    assert main(["heldout", "--checkpoint", str(out), "--out", str(text_file)]) == 0
    assert main(["eval", "--checkpoint", str(out), "--text-file", str(text_file), "--json"]) == 0
    reproduced = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert reproduced["masked_token_accuracy"] == pytest.approx(again["masked_token_accuracy"], rel=1e-6)


def test_transformers_loads_an_exported_folder_in_float32_as_it_is(trained, tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "shared"
    assert main(["export", "--checkpoint", str(trained), "--out", str(out), "--skip-eval"]) == 0
    ref, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert {p.dtype for p in ref.parameters()} == {torch.float32}, "the config's dtype says what to compute in"
    ours, ckpt = _logits(out)
    ids = torch.tensor([ckpt.tokenizer.encode_pair(TEXT)["input_ids"]])
    with torch.no_grad():
        theirs = ref.eval()(input_ids=ids).prediction_logits
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    # --skip-eval keeps the figures before, and says what they were measured on.
    record = json.loads((out / "metrics.json").read_text())["stored_weights"]
    assert record["eval_measured_on"] == "the weights before export"


def test_in_place_needs_overwrite_and_a_refused_export_changes_nothing(tmp_path, capsys):
    folder = tmp_path / "tiny"
    shutil.copytree(DEFAULT_CHECKPOINT, folder)
    original = (folder / "model.safetensors").read_bytes()
    assert main(["export", "--checkpoint", str(folder), "--out", str(folder), "--skip-eval"]) == 2
    assert capsys.readouterr().err.startswith("error: --out is the checkpoint folder itself")
    # A weight float16 cannot hold: one error line, and the folder is as it was.
    state = load_file(str(folder / "model.safetensors"))
    name = next(k for k, v in state.items() if v.is_floating_point())
    state[name] = state[name].float()  # the shipped folder is float16 already: widened, it holds the large value
    state[name].view(-1)[0] = 1e6
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    huge = (folder / "model.safetensors").read_bytes()
    assert main(["export", "--checkpoint", str(folder), "--out", str(folder), "--overwrite", "--skip-eval"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: weight") and "beyond float16" in err and err.count("\n") == 1
    assert (folder / "model.safetensors").read_bytes() == huge
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tiny.tmp")], "no half-made folder is left"
    (folder / "model.safetensors").write_bytes(original)
    assert main(["export", "--checkpoint", str(folder), "--out", str(folder), "--overwrite", "--skip-eval"]) == 0
    assert _dtypes(folder) == {torch.float16}


def test_bad_input_is_one_error_line(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", "--checkpoint", str(empty), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    damaged = tmp_path / "damaged"
    shutil.copytree(DEFAULT_CHECKPOINT, damaged)
    (damaged / "model.safetensors").write_bytes(b"\x00" * 100)
    assert main(["export", "--checkpoint", str(damaged), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "damaged" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["bert-tiny-english", "gpt-tiny-english", "bert-mini-english", "gpt-mini-english"])
def test_the_shipped_folders_are_stored_in_16_bits_and_load_in_float32_everywhere(name):
    folder = DEFAULT_CHECKPOINT.parent / name
    metrics = json.loads((folder / "metrics.json").read_text())
    expected = torch.float16 if "tiny" in name else torch.bfloat16
    assert _dtypes(folder) == {expected} and metrics["stored_weights"]["dtype"] == str(expected).split(".")[1]
    assert metrics["stored_weights"]["eval_measured_on"] == "the stored weights"
    assert (folder / "model.safetensors").stat().st_size < 12 * 1024 * 1024
    transformers = pytest.importorskip("transformers")
    cls = transformers.BertLMHeadModel if name.startswith("gpt") else transformers.BertForPreTraining
    assert {p.dtype for p in cls.from_pretrained(folder).parameters()} == {torch.float32}
