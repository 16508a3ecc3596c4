"""Bad input to every CLI command, as a table of cases in the spirit of a fuzzing corpus.

Every case must end in exactly one `error:` line on stderr and a non-zero exit, never a traceback; no pickle may
run (each pickle here would create a marker file when unpickled); and nothing that existed before may change
(every file under the test's folder is snapshotted, path and bytes, before and after), nor may anything new appear
there. Cases run in-process through `bert_core.cli.main.main` (fast); a few run as real `python -m bert_core`
processes to prove that no traceback escapes the interpreter either.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bert_core.cli.main import main
from bert_core.model import files as files_module
from bert_core.model import hf

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out

REPO = Path(__file__).resolve().parent.parent
# Sentences of the toy grammar's kind, so a model trained on `toy` has the words.
ONE_SENTENCE = "The cat sat on the mat.\n"
TWO_SENTENCES = "The cat sat on the mat. The dog ran in the park.\n"


class _Marker:
    """Unpickling this creates the marker file: the proof that a pickle ran."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path(self.path).touch, ())


def _copy_checkpoint(src: Path, dst: Path, drop=()) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if f.is_file() and f.name not in drop:
            shutil.copy(f, dst / f.name)
    return dst


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One tiny trained checkpoint and a folder of damaged copies, pickles and bad text files built from it."""
    root = tmp_path_factory.mktemp("bad_input")
    marker = root.parent / f"{root.name}-PWNED"
    ck = root / "ck"
    argv = ["train", "--corpus", "toy", "--preset", "nano", "--vocab-size", "300", "--seq-len", "32",
            "--batch-size", "4", "--steps", "2", "--eval-batches", "1", "--device", "cpu", "--checkpoint-every", "0",
            "--out", str(ck)]
    assert main(argv) == 0
    bad = root / "bad"
    bad.mkdir()

    raw_pickle = pickle.dumps(_Marker(marker))
    (bad / "evil.pkl").write_bytes(raw_pickle)
    torch.save(_Marker(marker), bad / "evil.pt")  # torch's zip format around the same pickle
    for name, payload in (("pickle_bin", raw_pickle), ("torch_bin", (bad / "evil.pt").read_bytes())):
        folder = _copy_checkpoint(ck, bad / name, drop={"model.safetensors"})
        (folder / "pytorch_model.bin").write_bytes(payload)

    for name, change in (
        ("huge_hidden", {"hidden_size": 65536, "num_attention_heads": 1}),
        ("billion_positions", {"max_position_embeddings": 10**9}),
        ("huge_vocab", {"vocab_size": 2**23}),
        # Each size within its own limit, together some 6.6e12 parameters: refused by memory on any machine.
        ("too_big_for_memory", {"hidden_size": 32768, "num_attention_heads": 64, "num_hidden_layers": 512,
                                "intermediate_size": 131072}),
    ):
        folder = _copy_checkpoint(ck, bad / name)
        _edit_json(folder / "config.json", lambda d, change=change: d.update(change))
    _copy_checkpoint(ck, bad / "config_not_json")
    (bad / "config_not_json" / "config.json").write_text("{not json")

    folder = _copy_checkpoint(ck, bad / "nan_weights")
    state = load_file(str(folder / "model.safetensors"))
    key = sorted(state)[3]
    state[key] = torch.full_like(state[key], float("nan"))
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    folder = _copy_checkpoint(ck, bad / "nan_optimizer")
    opt = load_file(str(folder / "optimizer.safetensors"))
    first = sorted(opt)[0]
    opt[first] = torch.full_like(opt[first], float("inf"))
    save_file(opt, str(folder / "optimizer.safetensors"))

    _copy_checkpoint(ck, bad / "no_tokenizer", drop={"tokenizer.json", "vocab.txt", "tokenizer_config.json",
                                                     "special_tokens_map.json"})
    _copy_checkpoint(ck, bad / "damaged_weights")
    (bad / "damaged_weights" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    _copy_checkpoint(ck, bad / "damaged_optimizer")
    (bad / "damaged_optimizer" / "optimizer.safetensors").write_bytes(b"not safetensors at all")
    _copy_checkpoint(ck, bad / "optimizer_json_types")
    _edit_json(bad / "optimizer_json_types" / "optimizer.json", lambda d: d.update(scalars=[1, 2]))
    for name, change in (
        ("state_step_abc", lambda d: d.update(step="abc")),
        ("state_config_types", lambda d: d["train_config"].update(batch_size="32")),
        ("state_rng", lambda d: d.update(rng={"torch": [1, 2, 3]})),
        ("state_history", lambda d: d.update(history=[{"step": 1}])),
        ("state_heldout", lambda d: d["metadata"].update(heldout="all of it")),
        ("state_list", lambda d: d.clear()),
    ):
        folder = _copy_checkpoint(ck, bad / name)
        _edit_json(folder / "trainer_state.json", change)
    (bad / "state_list" / "trainer_state.json").write_text("[1, 2, 3]")
    _copy_checkpoint(ck, bad / "metrics_split")
    _edit_json(bad / "metrics_split" / "metrics.json", lambda d: d.update(heldout_split={"seed": "x", "corpora": [1]}))
    folder = _copy_checkpoint(ck, bad / "ck_with_notes")
    (folder / "notes.txt").write_text("my notes")

    user = root / "user_files"
    user.mkdir()
    (user / "thesis.txt").write_text("years of work")
    (user / "data.csv").write_text("a,b\n1,2\n")
    (root / "a_file.txt").write_text("not a folder")
    (root / "one.txt").write_text(ONE_SENTENCE)
    (root / "two.txt").write_text(TWO_SENTENCES)
    (root / "not_utf8.txt").write_bytes(b"The cat \xff\xfe sat.\n")
    (root / "not_utf8.csv").write_bytes(b"text,label\nthe cat \xff sat,a\nthe dog ran,b\n")
    (root / "one_row.csv").write_text("text,label\nthe cat sat,a\n")
    cwd = root / "cwd"
    cwd.mkdir()
    (cwd / "keep_me.txt").write_text("the user's own file in the current folder")
    return {"root": root, "ck": ck, "bad": bad, "user": user, "marker": marker, "cwd": cwd}


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under `folder` with a digest of its bytes (folders as "dir")."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        out[rel] = "dir" if path.is_dir() else hashlib.sha1(path.read_bytes()).hexdigest()
    return out


def run_cli(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own one-line errors
        code = e.code
    return code, capsys.readouterr().err


def assert_one_error_line(code, err, words=()):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert code not in (0, None), err
    assert "Traceback" not in err, err
    assert len(errors) == 1, err
    for w in words:
        assert w.lower() in errors[0].lower(), (w, errors[0])
    return errors[0]


BIG = str(2**70)
# (argv with {placeholders}, words the error line must hold). {ck}: the good checkpoint; {bad}: the folder of
# damaged ones; {root}: the test folder; {user}: a folder of the user's own files; {new}: a path that must not
# appear. Train and finetune cases say --device cpu so that memory checks do not depend on a GPU being there.
TRAIN_ON = ["train", "--preset", "nano", "--vocab-size", "300", "--seq-len", "32", "--batch-size", "4", "--steps", "1",
            "--device", "cpu"]  # + "--corpus", a bad one (--corpus repeats: with toy beside it, it would train)
TRAIN = TRAIN_ON + ["--corpus", "toy"]
FINETUNE_ON = ["finetune", "--steps", "1", "--device", "cpu"]  # + "--csv", a bad one
FINETUNE = FINETUNE_ON + ["--task", "toy"]
CASES = [
    # -- pickles: refused by content, with the way to convert them; never unpickled
    (["fill-mask", "--checkpoint", "{bad}/pickle_bin", "a [MASK] b"], ["weights_only=True", "safetensors"]),
    (["fill-mask", "--checkpoint", "{bad}/torch_bin", "a [MASK] b"], ["weights_only=True", "save_pretrained"]),
    (["fill-mask", "--checkpoint", "{bad}/evil.pkl", "a [MASK] b"], ["pickle", "safetensors"]),
    (["eval", "--checkpoint", "{bad}/pickle_bin", "--text-file", "{root}/two.txt"], ["weights_only=True"]),
    (["eval", "--checkpoint", "{bad}/evil.pt", "--text-file", "{root}/two.txt"], ["pickle"]),
    (FINETUNE + ["--checkpoint", "{bad}/pickle_bin"], ["weights_only=True"]),
    (FINETUNE + ["--checkpoint", "{bad}/evil.pkl"], ["pickle"]),
    (TRAIN + ["--init-from", "{bad}/torch_bin", "--out", "{new}"], ["weights_only=True"]),
    (["train", "--resume", "{bad}/pickle_bin"], ["weights_only=True"]),
    (["train", "--resume", "{bad}/evil.pkl"], ["pickle"]),
    (["heldout", "--checkpoint", "{bad}/evil.pkl", "--out", "{new}"], ["pickle"]),
    (["eval", "--checkpoint", "{ck}", "--text-file", "{bad}/evil.pkl"], ["binary"]),
    (TRAIN_ON + ["--corpus", "{bad}/evil.pt", "--out", "{new}"], ["binary"]),
    (FINETUNE_ON + ["--checkpoint", "{ck}", "--csv", "{bad}/evil.pkl"], ["binary"]),
    (TRAIN + ["--tokenizer", "{bad}/evil.pkl", "--out", "{new}"], ["is a file"]),
    # -- sizes that cannot be allocated: refused from config.json / the options, before any tensor exists
    (["fill-mask", "--checkpoint", "{bad}/huge_hidden", "a [MASK] b"], ["hidden_size", "65,536"]),
    (["eval", "--checkpoint", "{bad}/billion_positions", "--text-file", "{root}/two.txt"], ["max_position_embeddings"]),
    (["fill-mask", "--checkpoint", "{bad}/huge_vocab", "a [MASK] b"], ["vocab_size"]),
    (["fill-mask", "--checkpoint", "{bad}/too_big_for_memory", "a [MASK] b"], ["parameters", "memory"]),
    (FINETUNE + ["--checkpoint", "{bad}/too_big_for_memory"], ["memory"]),
    (TRAIN + ["--init-from", "{bad}/huge_hidden", "--out", "{new}"], ["hidden_size"]),
    (["train", "--resume", "{bad}/too_big_for_memory"], ["memory"]),
    (TRAIN + ["--preset", "base", "--batch-size", "65536", "--seq-len", "512", "--out", "{new}"], ["memory"]),
    (FINETUNE + ["--scratch-preset", "base", "--batch-size", "65536", "--max-length", "512"], ["memory"]),
    (["bench", "--preset", "base", "--seq-len", "8192", "--batch-size", "65536"], ["memory"]),
    # -- paths that are no place to read or write
    (["fill-mask", "--checkpoint", "/", "a [MASK] b"], ["not a checkpoint folder"]),
    (["fill-mask", "--checkpoint", "", "a [MASK] b"], ["empty"]),
    (["eval", "--checkpoint", "", "--text-file", "{root}/two.txt"], ["empty"]),
    (TRAIN + ["--out", ""], ["empty"]),
    (TRAIN + ["--out", "."], ["current folder"]),
    (TRAIN + ["--out", "/"], ["root"]),
    (TRAIN + ["--out", "{root}/cwd/.."], ["current folder"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--out", "."], ["current folder"]),
    (["heldout", "--checkpoint", "{ck}", "--out", "."], ["current folder"]),
    (["heldout", "--checkpoint", "{ck}", "--out", "/"], ["root"]),
    (["heldout", "--checkpoint", "", "--out", "{new}"], ["empty"]),
    # -- outputs that hold what the CLI did not write
    (TRAIN + ["--out", "{user}"], ["did not write", "thesis.txt"]),
    (TRAIN + ["--out", "{root}/a_file.txt"], ["existing file"]),
    (TRAIN + ["--out", "{root}/a_file.txt/sub"], ["is a file"]),
    (TRAIN + ["--out", "{ck}"], ["--overwrite"]),
    (["train", "--resume", "{bad}/ck_with_notes", "--steps", "3"], ["did not write", "notes.txt"]),
    (["train", "--resume", "{ck}", "--out", "{bad}/nan_weights", "--steps", "3"], ["--overwrite"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--out", "{root}/a_file.txt"], ["existing file"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--out", "{user}"], ["did not write"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--out", "{ck}"], ["--overwrite"]),
    (["heldout", "--checkpoint", "{ck}", "--out", "{user}"], ["is a folder"]),
    (["heldout", "--checkpoint", "{ck}", "--out", "{user}/thesis.txt"], ["--overwrite"]),
    # -- --overwrite replaces what the command wrote, never a folder of the user's: every command that takes it
    (TRAIN + ["--out", "{user}", "--overwrite"], ["did not write", "thesis.txt"]),
    (["train", "--resume", "{ck}", "--out", "{user}", "--overwrite", "--steps", "3"], ["did not write"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--out", "{user}", "--overwrite"], ["did not write", "thesis.txt"]),
    (["export", "--checkpoint", "{ck}", "--out", "{user}", "--overwrite", "--skip-eval"], ["did not write"]),
    (["grow", "--checkpoint", "{ck}", "--hidden-size", "128", "--layers", "4", "--out", "{user}", "--overwrite"],
     ["did not write", "data.csv"]),
    (["corpus", "build", "text:{root}/cwd", "--tokenizer", "{ck}", "--no-default-references", "--out", "{user}",
      "--overwrite"], ["did not write", "thesis.txt"]),
    (["corpus", "build", "text:{root}/cwd", "--tokenizer", "{ck}", "--no-default-references", "--out", ".",
      "--overwrite"], ["current folder"]),
    (["corpus", "build", "text:{root}/cwd", "--tokenizer", "{ck}", "--no-default-references", "--out",
      "{root}/a_file.txt", "--overwrite"], ["existing file"]),
    (["corpus", "build", "text:{root}/cwd", "--tokenizer", "{ck}", "--no-default-references", "--out", "{ck}",
      "--overwrite"], ["did not write", "config.json"]),
    (["heldout", "--checkpoint", "{ck}", "--out", "{user}", "--overwrite"], ["is a folder"]),
    (["heldout", "--checkpoint", "{ck}", "--out", "{ck}/model.safetensors", "--overwrite"], ["not a text file"]),
    # -- damaged checkpoints: the file at fault is named, the folder left as it was
    (["train", "--resume", "{bad}/damaged_optimizer", "--steps", "3"], ["optimizer.safetensors"]),
    (["train", "--resume", "{bad}/optimizer_json_types", "--steps", "3"], ["optimizer.json"]),
    (["train", "--resume", "{bad}/state_step_abc", "--steps", "3"], ["trainer_state.json", "step"]),
    (["train", "--resume", "{bad}/state_config_types", "--steps", "3"], ["trainer_state.json", "batch_size"]),
    (["train", "--resume", "{bad}/state_rng", "--steps", "3"], ["trainer_state.json", "rng"]),
    (["train", "--resume", "{bad}/state_history", "--steps", "3"], ["trainer_state.json", "history"]),
    (["train", "--resume", "{bad}/state_heldout", "--steps", "3"], ["trainer_state.json", "heldout"]),
    (["train", "--resume", "{bad}/state_list", "--steps", "3"], ["trainer_state.json"]),
    (TRAIN + ["--init-from", "{bad}/state_step_abc", "--out", "{new}"], ["trainer_state.json"]),
    (["fill-mask", "--checkpoint", "{bad}/state_list", "a [MASK] b"], ["trainer_state.json"]),
    (["train", "--resume", "{bad}/no_tokenizer", "--steps", "3"], ["tokenizer"]),
    (["fill-mask", "--checkpoint", "{bad}/no_tokenizer", "a [MASK] b"], ["tokenizer"]),
    (["eval", "--checkpoint", "{bad}/no_tokenizer", "--text-file", "{root}/two.txt"], ["tokenizer"]),
    (FINETUNE + ["--checkpoint", "{bad}/no_tokenizer"], ["tokenizer"]),
    (TRAIN + ["--init-from", "{bad}/no_tokenizer", "--out", "{new}"], ["tokenizer"]),
    (["eval", "--checkpoint", "{bad}/damaged_weights", "--text-file", "{root}/two.txt"], ["model.safetensors"]),
    (["fill-mask", "--checkpoint", "{bad}/config_not_json", "a [MASK] b"], ["config.json"]),
    (["heldout", "--checkpoint", "{bad}/metrics_split", "--out", "{new}"], ["metrics.json", "damaged"]),
    # -- NaN or infinite numbers in weights or optimizer state: refused at load, naming the tensor
    (["fill-mask", "--checkpoint", "{bad}/nan_weights", "a [MASK] b"], ["NaN", "weight"]),
    (["eval", "--checkpoint", "{bad}/nan_weights", "--text-file", "{root}/two.txt"], ["NaN"]),
    (FINETUNE + ["--checkpoint", "{bad}/nan_weights"], ["NaN"]),
    (["train", "--resume", "{bad}/nan_weights", "--steps", "3"], ["NaN"]),
    (TRAIN + ["--init-from", "{bad}/nan_weights", "--out", "{new}"], ["NaN"]),
    (["train", "--resume", "{bad}/nan_optimizer", "--steps", "3"], ["optimizer.safetensors", "NaN"]),
    # -- too little text: how much is needed
    (TRAIN_ON + ["--corpus", "{root}/two.txt", "--out", "{new}"], ["few dozen sentences"]),
    (["eval", "--checkpoint", "{ck}", "--text-file", "{root}/one.txt"], ["too short"]),
    (FINETUNE_ON + ["--checkpoint", "{ck}", "--csv", "{root}/one_row.csv"], ["at least two"]),
    # -- text that is not UTF-8 (argv bytes arrive as lone surrogates)
    (["fill-mask", "--checkpoint", "{ck}", "a \udcff [MASK] b"], ["UTF-8", "0xff"]),
    (TRAIN + ["--device", "cp\udce9u", "--out", "{new}"], ["--device", "UTF-8"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--label-column", "l\udcffabel"], ["UTF-8"]),
    (["eval", "--checkpoint", "{ck}", "--text-file", "{root}/not_utf8.txt"], ["UTF-8"]),
    (TRAIN_ON + ["--corpus", "{root}/not_utf8.txt", "--out", "{new}"], ["UTF-8"]),
    (FINETUNE_ON + ["--checkpoint", "{ck}", "--csv", "{root}/not_utf8.csv"], ["UTF-8"]),
    # -- a folder where a file is expected, a file where a folder is
    (["eval", "--checkpoint", "{ck}", "--text-file", "{user}"], ["is a folder"]),
    (TRAIN_ON + ["--corpus", "{user}", "--out", "{new}"], ["is a folder"]),
    (FINETUNE_ON + ["--checkpoint", "{ck}", "--csv", "{user}"], ["is a folder"]),
    (["fill-mask", "--checkpoint", "{ck}/config.json", "a [MASK] b"], ["give its folder"]),
    (["eval", "--checkpoint", "{root}/a_file.txt", "--text-file", "{root}/two.txt"], ["is a file"]),
    (["heldout", "--checkpoint", "{ck}/model.safetensors", "--out", "{new}"], ["is a file"]),
    # -- numbers out of range, refused before any work
    (TRAIN + ["--seed", BIG, "--out", "{new}"], ["--seed"]),
    (TRAIN + ["--seed", "-1", "--out", "{new}"], ["--seed"]),
    (TRAIN + ["--checkpoint-every", "nan", "--out", "{new}"], ["--checkpoint-every", "finite"]),
    (TRAIN + ["--checkpoint-every", "-1", "--out", "{new}"], ["--checkpoint-every"]),
    (["train", "--corpus", "toy", "--time-budget", "inf", "--out", "{new}"], ["--time-budget", "finite"]),
    (["train", "--corpus", "toy", "--time-budget", "0", "--out", "{new}"], ["--time-budget"]),
    (TRAIN + ["--vocab-size", "0", "--out", "{new}"], ["--vocab-size"]),
    (TRAIN + ["--lr", "0", "--out", "{new}"], ["--lr"]),
    (TRAIN + ["--lr", "nan", "--out", "{new}"], ["--lr"]),
    (TRAIN + ["--lr", "inf", "--out", "{new}"], ["--lr"]),
    (TRAIN + ["--mask-rate", "1", "--out", "{new}"], ["--mask-rate"]),
    (TRAIN + ["--batch-size", "0", "--out", "{new}"], ["--batch-size"]),
    (TRAIN + ["--seq-len", "8", "--out", "{new}"], ["--seq-len"]),
    (TRAIN + ["--seq-len", "4096", "--out", "{new}"], ["--seq-len", "tokenizer"]),
    (TRAIN + ["--warmup", "1", "--out", "{new}"], ["--warmup"]),
    (TRAIN + ["--dropout", "1", "--out", "{new}"], ["--dropout"]),
    (TRAIN + ["--heldout-fraction", "0", "--out", "{new}"], ["--heldout-fraction"]),
    (TRAIN + ["--eval-batches", "0", "--out", "{new}"], ["--eval-batches"]),
    (TRAIN + ["--grad-accum", "0", "--out", "{new}"], ["--grad-accum"]),
    (TRAIN + ["--steps", "0", "--out", "{new}"], ["--steps"]),
    (TRAIN + ["--max-grad-norm", "-1", "--out", "{new}"], ["--max-grad-norm"]),
    (TRAIN + ["--weight-decay", "inf", "--out", "{new}"], ["--weight-decay"]),
    (TRAIN + ["--initializer-range", "0", "--out", "{new}"], ["--initializer-range"]),
    (TRAIN + ["--history-limit", "1", "--out", "{new}"], ["history_limit"]),
    (TRAIN + ["--preset", "gigantic", "--out", "{new}"], ["--preset"]),
    (["train", "--resume", "{ck}", "--seq-len", "64"], ["--seq-len", "--init-from"]),
    (["train", "--resume", "{ck}", "--lr", "-1"], ["--lr"]),
    (["eval", "--checkpoint", "{ck}", "--text-file", "{root}/two.txt", "--seed", "-1"], ["--seed"]),
    (["eval", "--checkpoint", "{ck}", "--text-file", "{root}/two.txt", "--batches", "0"], ["--batches"]),
    (["eval", "--checkpoint", "{ck}", "--text-file", "{root}/two.txt", "--batch-size", "0"], ["--batch-size"]),
    (["eval", "--checkpoint", "{ck}", "--text-file", "{root}/two.txt", "--seq-len", "4"], ["--seq-len"]),
    (["eval", "--checkpoint", "{ck}", "--text-file", "{root}/two.txt", "--mask-rate", "0"], ["--mask-rate"]),
    (["fill-mask", "--checkpoint", "{ck}", "--top-k", "0", "a [MASK] b"], ["--top-k"]),
    (["fill-mask", "--checkpoint", "{ck}", "--top-k", "-3", "a [MASK] b"], ["--top-k"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--lr", "0"], ["--lr"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--steps", "0"], ["--steps"]),
    (["finetune", "--task", "toy", "--checkpoint", "{ck}", "--time-budget", "inf"], ["--time-budget"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--batch-size", "0"], ["--batch-size"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--max-length", "4"], ["--max-length"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--max-length", "4096"], ["--max-length", "positions"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--seed", BIG], ["--seed"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--dropout", "1"], ["--dropout"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--warmup-ratio", "1"], ["--warmup-ratio"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--eval-points", "0"], ["--eval-points"]),
    (FINETUNE + ["--checkpoint", "{ck}", "--train-size", "0"], ["--train-size"]),
    (["bench", "--rounds", "0"], ["--rounds"]),
    (["bench", "--batch-size", "0"], ["--batch-size"]),
    (["bench", "--vocab-size", "3"], ["--vocab-size"]),
    (["bench", "--mask-rate", "1.5"], ["--mask-rate"]),
    (["bench", "--seq-len", "0"], ["--seq-len"]),
    (["bench", "--threads", "-1"], ["--threads"]),
]


def _fill(argv, world, new):
    values = {"ck": world["ck"], "bad": world["bad"], "root": world["root"], "user": world["user"], "new": new}
    return [a.format(**values) if "{" in a else a for a in argv]


@pytest.mark.parametrize("argv, words", CASES, ids=[" ".join(a[:1] + a[-4:])[:80] for a, _ in CASES])
def test_bad_input_gives_one_error_line_and_changes_nothing(argv, words, world, capsys, monkeypatch):
    monkeypatch.chdir(world["cwd"])  # "--out ." must meet the user's folder, never the repository
    new = world["root"] / "new-output"
    before = snapshot(world["root"])
    code, err = run_cli(_fill(argv, world, new), capsys)
    assert_one_error_line(code, err, words)
    assert not world["marker"].exists(), "a pickle was unpickled"
    assert snapshot(world["root"]) == before  # nothing changed, nothing new (new-output included)


def test_a_full_disk_on_save_is_one_line_and_the_previous_checkpoint_stays_whole(world, tmp_path, capsys,
                                                                                  monkeypatch):
    target = _copy_checkpoint(world["ck"], tmp_path / "run")
    before = snapshot(tmp_path)

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(hf, "save_file", disk_full)
    code, err = run_cli(TRAIN + ["--out", str(target), "--overwrite"], capsys)
    line = assert_one_error_line(code, err, ["No space left on device", str(target)])
    assert "could not write" in line
    assert snapshot(tmp_path) == before  # the old checkpoint whole, no temporary folder left beside it
    # finetune --out and heldout --out meet the same full disk with the same kind of line.
    code, err = run_cli(FINETUNE + ["--checkpoint", str(world["ck"]), "--out", str(tmp_path / "clf")], capsys)
    assert_one_error_line(code, err, ["No space left on device"])
    real_replace = os.replace
    monkeypatch.setattr(files_module.os, "replace", disk_full)
    try:
        code, err = run_cli(["heldout", "--checkpoint", str(world["ck"]), "--out", str(tmp_path / "h.txt")], capsys)
    finally:
        monkeypatch.setattr(files_module.os, "replace", real_replace)
    assert_one_error_line(code, err, ["No space left on device", "h.txt"])
    assert snapshot(tmp_path) == before


def test_a_read_only_output_folder_is_refused_before_any_work(world, tmp_path, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() == 0:
        # chmod does not stop root; a read-only mount is what access() reports here, so simulate its answer.
        real_access = os.access
        monkeypatch.setattr(files_module.os, "access",
                            lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    else:
        locked.chmod(0o555)
    try:
        for argv in (TRAIN + ["--out", str(locked / "run")],
                     FINETUNE + ["--checkpoint", str(world["ck"]), "--out", str(locked / "clf")],
                     ["heldout", "--checkpoint", str(world["ck"]), "--out", str(locked / "h.txt")]):
            code, err = run_cli(argv, capsys)
            assert_one_error_line(code, err, ["cannot write into", str(locked)])
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


def test_eval_reads_a_long_single_line_in_pieces(world, tmp_path, capsys):
    from bert_core.data.corpora import MAX_SENTENCE_CHARS, load_corpus

    words = "the cat sat on the mat and the dog ran in the park "
    text_file = tmp_path / "one_line.txt"
    text_file.write_text(words * 20_000)  # about 1 MB, no sentence end, no line break
    corpus = load_corpus(str(text_file))
    assert max(len(s) for d in corpus.documents for s in d) <= MAX_SENTENCE_CHARS
    assert corpus.num_sentences >= 100
    code, err = run_cli(["eval", "--checkpoint", str(world["ck"]), "--text-file", str(text_file), "--batches", "2",
                         "--batch-size", "4", "--json"], capsys)
    assert code == 0, err


def test_the_nan_guard_keeps_a_good_checkpoint_and_resume_takes_a_new_learning_rate(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["train", "--corpus", "toy", "--preset", "nano", "--vocab-size", "300", "--seq-len", "32",
            "--batch-size", "4", "--eval-batches", "1", "--device", "cpu", "--checkpoint-every", "3600"]
    code, err = run_cli(base + ["--steps", "30", "--lr", "1e6", "--out", str(out)], capsys)
    line = assert_one_error_line(code, err, ["loss became", "lower it", "--resume", "--lr"])
    assert str(out) in line
    # The checkpoint written before the first update is there (the timed one would come after an hour).
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["step"] == 0 and state["train_config"]["learning_rate"] == 1e6
    code, err = run_cli(["train", "--resume", str(out), "--lr", "1e-3", "--steps", "3"], capsys)
    assert code == 0, err
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["step"] == 3 and state["train_config"]["learning_rate"] == 1e-3
    assert state["metadata"]["resumed_with"] == [{"step": 0, "changes": {"learning_rate": 1e-3, "max_steps": 3,
                                                                         "time_budget_s": None}}]
    assert all(e["lr"] <= 1e-3 for e in state["history"])


def test_a_killed_save_leaves_a_temporary_folder_that_the_next_save_removes(world, tmp_path, capsys):
    run = _copy_checkpoint(world["ck"], tmp_path / "run")
    leftover = tmp_path / ".run.tmp-999999999-0123abcd"  # a pid above any pid_max: its process is gone
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"half")
    unrelated = tmp_path / ".other.tmp-999999999-0123abcd"
    unrelated.mkdir()
    code, err = run_cli(["train", "--resume", str(run), "--steps", "3"], capsys)
    assert code == 0, err
    assert not leftover.exists() and unrelated.exists()


def test_an_unexpected_exception_is_one_internal_error_line(world, capsys, monkeypatch):
    import bert_core.cli.reading

    def boom(*args, **kwargs):
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(bert_core.cli.reading, "fill_mask", boom)  # where the command looks it up
    code, err = run_cli(["fill-mask", "--checkpoint", str(world["ck"]), "a [MASK] b"], capsys)
    line = assert_one_error_line(code, err, ["internal error", "RuntimeError", "something broke", "report"])
    assert code == 1, line


def test_a_crash_inside_the_training_loop_is_one_line_without_the_logged_traceback(world, tmp_path, capsys,
                                                                                    monkeypatch):
    from bert_core.training.trainer import Trainer

    def boom(self):
        raise RuntimeError("the loop broke")

    monkeypatch.setattr(Trainer, "_train_step", boom)
    code, err = run_cli(TRAIN + ["--out", str(tmp_path / "run")], capsys)
    assert_one_error_line(code, err, ["the loop broke"])


def _python_m(args, cwd):
    return subprocess.run([sys.executable, "-m", "bert_core", *args], cwd=cwd, capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("args, words", [
    (["fill-mask", "--checkpoint", "{bad}/pickle_bin", "a [MASK] b"], ["weights_only=True"]),
    (["fill-mask", "--checkpoint", "{ck}", b"a \xff [MASK] b"], ["UTF-8"]),
    (["train", "--corpus", "{root}/two.txt", "--preset", "nano", "--vocab-size", "300", "--steps", "1", "--out",
      "{new}"], ["few dozen sentences"]),
    (["train", "--steps", "1", "--out", "."], ["current folder"]),
])
def test_python_dash_m_never_prints_a_traceback(args, words, world):
    new = world["root"] / "new-output"
    argv = [a if isinstance(a, bytes) else _fill([a], world, new)[0] for a in args]
    before = snapshot(world["root"])
    done = _python_m(argv, cwd=world["cwd"])
    err = done.stderr.decode("utf-8", "backslashreplace")
    assert_one_error_line(done.returncode, err, words)
    assert not world["marker"].exists()
    assert snapshot(world["root"]) == before
