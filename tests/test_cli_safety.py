"""What the CLI writes is safe to share (issue 70): a full disk is one plain `error:` line in every command that
writes; every file of a checkpoint, an exported folder and a corpus has the modes the user's umask gives; a shard
index opens files inside its corpus folder only; and `--overwrite` removes only what the command wrote, even when
a user's file appears after the check (the bad-input table in test_bad_input.py refuses such folders up front)."""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import shutil
import stat
from pathlib import Path

import pytest
from safetensors import SafetensorError

from bert_core.cli.main import main
from bert_core.data.shards import ShardStream, open_index
from bert_core.errors import BertCoreError
from bert_core.model import files as files_module
from bert_core.model import checkpoint, hf

ROOT = Path(__file__).resolve().parent.parent
TOKENIZER = ROOT / "checkpoints" / "bert-tiny-english"
TRAIN = ["train", "--corpus", "toy", "--preset", "nano", "--vocab-size", "300", "--seq-len", "32", "--batch-size", "4",
         "--steps", "2", "--eval-batches", "1", "--device", "cpu", "--checkpoint-every", "0"]
FINETUNE = ["finetune", "--task", "toy", "--steps", "1", "--device", "cpu"]
BUILD = ["corpus", "build", "--tokenizer", str(TOKENIZER), "--no-default-references", "--heldout-fraction", "0.2"]


def _text_source(folder: Path) -> Path:
    folder.mkdir()
    rng = random.Random(0)
    words = "the a farmer walked to market with his dog and bought bread cheese apples before going home".split()
    for i in range(6):
        paras = [" ".join(rng.choice(words) for _ in range(40)).capitalize() + "." for _ in range(8)]
        (folder / f"doc{i}.txt").write_text("\n\n".join(paras) + "\n")
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A trained checkpoint (with optimizer state), a folder of text, and a corpus built from it."""
    root = tmp_path_factory.mktemp("cli_safety")
    assert main(TRAIN + ["--out", str(root / "ck")]) == 0
    src = _text_source(root / "src")
    assert main(BUILD + ["--out", str(root / "corpus"), f"text:{src}"]) == 0
    return {"root": root, "ck": root / "ck", "src": src, "corpus": root / "corpus"}


def _run(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _one_error_line(code, err) -> str:
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code not in (0, None) and len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else "dir" for p in sorted(folder.rglob("*"))}


# ---------------------------------------------------------------------------------------------- a full disk


def _safetensors_disk_full(*args, **kwargs):
    # What safetensors' Rust writer raises when the disk fills (measured on a full tmpfs, safetensors 0.8).
    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


def _os_disk_full(code=errno.ENOSPC, filename=None):
    def raise_it(*args, **kwargs):
        raise OSError(code, os.strerror(code), *([filename] if filename else []))
    return raise_it


@pytest.mark.parametrize("command", ["train", "resume", "export", "grow", "finetune", "heldout", "corpus build"])
def test_a_full_disk_is_one_plain_line_in_every_command_that_writes(command, world, tmp_path, capsys, monkeypatch):
    from bert_core.corpus.build import ShardWriter

    out = tmp_path / "out"
    ck = tmp_path / "ck"
    shutil.copytree(world["ck"], ck)
    argv, where = {
        "train": (lambda: monkeypatch.setattr(hf, "save_file", _safetensors_disk_full),
                  TRAIN + ["--out", str(out)]),
        "resume": (lambda: monkeypatch.setattr(hf, "save_file", _os_disk_full()),
                   ["train", "--resume", str(ck), "--steps", "3"]),
        "export": (lambda: monkeypatch.setattr(checkpoint, "save_file", _safetensors_disk_full),
                   ["export", "--checkpoint", str(ck), "--out", str(out), "--skip-eval"]),
        "grow": (lambda: monkeypatch.setattr(hf, "save_file", _safetensors_disk_full),
                 ["grow", "--checkpoint", str(ck), "--hidden-size", "128", "--layers", "4", "--out", str(out)]),
        "finetune": (lambda: monkeypatch.setattr(hf, "save_file", _os_disk_full(errno.EDQUOT)),
                     FINETUNE + ["--checkpoint", str(ck), "--out", str(out)]),
        "heldout": (lambda: monkeypatch.setattr(files_module.os, "replace", _os_disk_full()),
                    ["heldout", "--checkpoint", str(ck), "--out", str(out)]),
        "corpus build": (lambda: monkeypatch.setattr(ShardWriter, "_flush", _os_disk_full(filename=str(out))),
                         BUILD + ["--out", str(out), f"text:{world['src']}"]),
    }[command][::-1]
    before = _tree(tmp_path)
    where()
    code, err = _run(argv, capsys)
    line = _one_error_line(code, err)
    assert line.startswith(f"error: could not write {out if command != 'resume' else ck}: the disk is full (")
    assert "disk is full" in line and str(out if command != "resume" else ck) in line, line
    assert ("Disk quota exceeded" if command == "finetune" else "No space left on device") in line
    assert "MB free there" in line or "GB free there" in line, line   # the free space, known for a local disk
    assert "internal error" not in line and "report" not in line, line
    assert _tree(tmp_path) == before   # the old checkpoint whole; nothing half-written, no temporary folder left


def test_disk_full_words_name_the_folder_through_a_chain_of_causes(tmp_path):
    try:
        try:
            _safetensors_disk_full()
        except SafetensorError as e:
            raise RuntimeError("saving the model failed") from e
    except RuntimeError as e:
        line = files_module.disk_full_words(tmp_path / "new" / "run", e)
    assert line.startswith(f"could not write {tmp_path / 'new' / 'run'}: the disk is full (No space left on device")


# ---------------------------------------------------------------------------------------------- the umask


def _modes(folder: Path) -> dict:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")]}


@pytest.mark.parametrize("mask", [0o022, 0o002], ids=["umask 022", "umask 002"])
def test_every_file_written_has_the_modes_the_umask_gives(mask, world, tmp_path, capsys):
    old = os.umask(mask)
    try:
        ck, exported, grown, corpus = (tmp_path / n for n in ("ck", "exported", "grown", "corpus"))
        assert main(TRAIN + ["--out", str(ck)]) == 0
        assert main(["export", "--checkpoint", str(ck), "--out", str(exported), "--skip-eval"]) == 0
        assert main(["grow", "--checkpoint", str(ck), "--hidden-size", "128", "--layers", "4", "--out",
                     str(grown)]) == 0
        assert main(BUILD + ["--compress", "--out", str(corpus), f"text:{world['src']}"]) == 0
        next(ShardStream(corpus, seq_len=32, batch_size=2))   # unpacks the compressed shards beside themselves
        capsys.readouterr()
    finally:
        os.umask(old)
    assert {"model.safetensors", "optimizer.safetensors"} <= {p.name for p in ck.iterdir()}
    assert any(p.suffix == ".u16" for p in (corpus / "shards").iterdir())
    for folder in (ck, exported, grown, corpus):
        for name, mode in _modes(folder).items():
            want = 0o777 & ~mask if (folder / name).is_dir() else 0o666 & ~mask
            assert mode == want, (folder.name, name, oct(mode), oct(want))


# ---------------------------------------------------------------------------------------------- shard indexes


def _doctored(world, tmp_path, entry: str) -> Path:
    """A copy of the corpus whose first training shard's index entry is `entry` (a file of the same size)."""
    corpus = tmp_path / "corpus"
    shutil.copytree(world["corpus"], corpus)
    index = json.loads((corpus / "index.json").read_text())
    shard = next(s for s in index["shards"] if s["split"] == "train")
    shard["file"] = entry
    (corpus / "index.json").write_text(json.dumps(index))
    return corpus


def _outside(world, tmp_path) -> Path:
    """A file outside the corpus folder, of the size of its first training shard (so the size check passes)."""
    index = json.loads((world["corpus"] / "index.json").read_text())
    shard = next(s for s in index["shards"] if s["split"] == "train")
    secret = tmp_path / "secret.u16"
    secret.write_bytes((world["corpus"] / shard["file"]).read_bytes())
    return secret


@pytest.mark.parametrize("how", ["absolute", "dot-dot", "link"])
def test_a_shard_index_opens_files_inside_its_folder_only(how, world, tmp_path, capsys):
    secret = _outside(world, tmp_path)
    entry = {"absolute": str(secret), "dot-dot": "../secret.u16", "link": "shards/link.u16"}[how]
    corpus = _doctored(world, tmp_path, entry)
    if how == "link":
        (corpus / "shards" / "link.u16").symlink_to(secret)
    with pytest.raises(BertCoreError, match="not a file inside the corpus folder"):
        open_index(corpus)
    out = tmp_path / "run"
    code, err = _run(["train", "--corpus", f"shards:{corpus}", "--preset", "nano", "--seq-len", "32",
                      "--batch-size", "4", "--steps", "1", "--eval-batches", "1", "--device", "cpu", "--out",
                      str(out)], capsys)
    line = _one_error_line(code, err)
    assert "not a file inside the corpus folder" in line and repr(entry) in line, line
    assert not out.exists()


def test_a_corpus_folders_held_out_text_is_read_inside_it_only(world, tmp_path):
    from bert_core.data.corpora import shard_heldout_corpora

    corpus = tmp_path / "corpus"
    shutil.copytree(world["corpus"], corpus)
    secret = tmp_path / "secret.txt"
    secret.write_text("a line of the machine's own that must never be read as held-out text\n")
    (corpus / "heldout" / "zz-elsewhere.txt").symlink_to(secret)
    with pytest.raises(BertCoreError, match="leads outside the corpus folder"):
        shard_heldout_corpora(corpus)


def test_a_shard_index_may_name_a_link_that_stays_inside_its_folder(world, tmp_path):
    corpus = _doctored(world, tmp_path, "shards/alias.u16")
    index = json.loads((world["corpus"] / "index.json").read_text())
    first = next(s for s in index["shards"] if s["split"] == "train")["file"]
    (corpus / "shards" / "alias.u16").symlink_to(corpus / first)
    assert open_index(corpus)["shards"]


# ---------------------------------------------------------------------------------------------- --overwrite


def test_corpus_build_overwrite_replaces_a_corpus_and_keeps_a_file_that_appears_meanwhile(world, tmp_path, capsys,
                                                                                         monkeypatch, caplog):
    corpus = tmp_path / "corpus"
    shutil.copytree(world["corpus"], corpus)
    (corpus / "report.json").write_text("{}")   # so that the replacement shows
    assert main(BUILD + ["--out", str(corpus), "--overwrite", f"text:{world['src']}"]) == 0
    assert json.loads((corpus / "report.json").read_text())["sources"]
    capsys.readouterr()

    # A user's file inside the corpus is refused up front (test_bad_input's table) and again when the new corpus
    # replaces the old one, a build's hours later: here the first check is made to miss it.
    (corpus / "heldout" / "my-notes.txt").write_text("mine")
    code, err = _run(BUILD + ["--out", str(corpus), "--overwrite", f"text:{world['src']}"], capsys)
    assert "heldout/my-notes.txt" in _one_error_line(code, err)
    real = files_module.check_output_folder
    monkeypatch.setattr("bert_core.corpus.build.check_output_folder",
                        lambda folder, overwrite, **kw: real(tmp_path / "fresh", overwrite, **kw) and Path(folder))
    code, err = _run(BUILD + ["--out", str(corpus), "--overwrite", f"text:{world['src']}"], capsys)
    assert "did not write (heldout/my-notes.txt)" in _one_error_line(code, err)
    assert (corpus / "heldout" / "my-notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # no build left beside it

    # The last line of defence: even when the old folder is set aside with the user's file in it, only what a
    # build writes is removed, and the rest is kept where it was moved.
    monkeypatch.setattr(files_module, "_foreign_entries", lambda *a, **k: [])
    with caplog.at_level(logging.WARNING, logger="bert_core"):
        assert main(BUILD + ["--out", str(corpus), "--overwrite", f"text:{world['src']}"]) == 0
    aside = tmp_path / ".corpus.old"
    assert _tree(aside) == {"heldout": "dir", "heldout/my-notes.txt": b"mine"}
    assert "my-notes.txt" in caplog.text
    assert json.loads((corpus / "report.json").read_text())["sources"]


def test_overwrite_replaces_what_each_command_wrote(world, tmp_path, capsys):
    ck = tmp_path / "ck"
    shutil.copytree(world["ck"], ck)
    grown, exported, held = tmp_path / "grown", tmp_path / "exported", tmp_path / "held.txt"
    for argv in (["grow", "--checkpoint", str(ck), "--hidden-size", "128", "--layers", "4", "--out", str(grown)],
                 ["export", "--checkpoint", str(ck), "--out", str(exported), "--skip-eval"],
                 ["heldout", "--checkpoint", str(ck), "--out", str(held)]):
        assert main(argv) == 0
        assert main(argv + ["--overwrite"]) == 0, capsys.readouterr().err   # grow's growth.json is its own
    assert (grown / "growth.json").is_file()
    capsys.readouterr()


def test_a_refused_write_that_is_not_a_full_disk_does_not_ask_for_room(tmp_path):
    import errno

    from bert_core.model.files import write_error

    said = str(write_error(tmp_path / "ck", PermissionError(errno.EACCES, "Permission denied")))
    assert "Permission denied" in said and "space" not in said and "can write to" in said, said
