"""The `train` command under torchrun: two gloo processes with batch b each == one process with batch 2b."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [pytest.mark.slow, pytest.mark.long]  # long checks (`--long`): two torchrun processes per test

REPO = Path(__file__).resolve().parent.parent


def _torchrun() -> str | None:
    beside = Path(sys.executable).with_name("torchrun")
    return str(beside) if beside.exists() else shutil.which("torchrun")


@pytest.fixture(scope="module")
def toy_files(tmp_path_factory):
    """A small toy corpus as a text file (blank line between documents) and a tokenizer folder trained on it."""
    from bert_core.data.corpora import generate_toy_corpus
    from bert_core.model.tokenization import train_tokenizer

    folder = tmp_path_factory.mktemp("ddp")
    corpus = generate_toy_corpus(num_documents=60, seed=1)
    text = "\n\n".join("\n".join(doc) for doc in corpus.documents) + "\n"
    (folder / "toy.txt").write_text(text)
    train_tokenizer(corpus.texts(), vocab_size=300).save(folder / "tok")
    return folder


def _train(toy_files, out: Path, batch_size: int, nproc: int | None, own_tokenizer: bool = False, steps: int = 2):
    args = [
        "-m", "bert_core", "train", "--corpus", str(toy_files / "toy.txt"),
        "--preset", "nano", "--seq-len", "32", "--batch-size", str(batch_size), "--steps", str(steps), "--lr", "1e-2",
        "--dropout", "0", "--device", "cpu", "--eval-batches", "1", "--checkpoint-every", "0", "--out", str(out),
        # fp32: on a CPU with bfloat16 instructions training autocasts to bf16 (training.distributed), whose rounding
        # differs between a batch of 2b and two of b; what is checked here is DDP's averaging, to 1e-5.
        "--precision", "fp32",
    ]
    args += ["--vocab-size", "300"] if own_tokenizer else ["--tokenizer", str(toy_files / "tok")]
    if nproc is None:
        cmd = [sys.executable, *args]
    else:
        cmd = [_torchrun(), "--standalone", f"--nproc_per_node={nproc}", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_two_gloo_processes_with_batch_b_match_one_process_with_batch_2b(toy_files, tmp_path):
    if _torchrun() is None:
        pytest.skip("torchrun is not installed")
    _train(toy_files, tmp_path / "single", batch_size=8, nproc=None)
    ddp = _train(toy_files, tmp_path / "ddp", batch_size=4, nproc=2)
    single_w = load_file(str(tmp_path / "single" / "model.safetensors"))
    ddp_w = load_file(str(tmp_path / "ddp" / "model.safetensors"))
    assert single_w.keys() == ddp_w.keys()
    for key, value in single_w.items():
        torch.testing.assert_close(ddp_w[key], value, atol=1e-5, rtol=0, msg=key)
    # Only rank 0 wrote, and the run really was distributed.
    import json

    state = json.loads((tmp_path / "ddp" / "trainer_state.json").read_text())
    assert state["world_size"] == 2 and state["step"] == 2
    single_state = json.loads((tmp_path / "single" / "trainer_state.json").read_text())
    for a, b in zip(state["history"], single_state["history"]):
        assert a["tokens_seen"] == b["tokens_seen"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        # Adam hides a uniformly scaled gradient from the weights; the norm shows it.
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    assert "world size 2" in ddp.stderr


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_ranks_train_on_the_tokenizer_of_rank_0(toy_files, tmp_path):
    # WordPiece training is not deterministic run to run; if each rank trained its own, the ranks' batches
    # would differ and the Trainer's first-batch fingerprint check would stop the run.
    if _torchrun() is None:
        pytest.skip("torchrun is not installed")
    _train(toy_files, tmp_path / "ddp", batch_size=4, nproc=2, own_tokenizer=True, steps=1)
    assert (tmp_path / "ddp" / "tokenizer.json").is_file()
