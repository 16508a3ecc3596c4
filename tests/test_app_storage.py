"""The app's files on a public server (bert_core.serve.app_storage): saved runs under names the app makes, per-session
scratch folders that go away with their session, size caps, and checkpoint zips unpacked safely."""

import io
import json
import os
import shutil
import stat
import time
import zipfile
from pathlib import Path

import pytest

from bert_core.errors import BertCoreError
from bert_core.serve import app_storage


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> content): what a hostile input must leave as it was."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tests.app_fixtures import train_nano_checkpoint

    return train_nano_checkpoint(tmp_path_factory.mktemp("ckpt") / "nano-toy", steps=1)


@pytest.fixture
def decoy(tmp_path) -> Path:
    """Somebody else's folder beside the runs folder: it must never change."""
    folder = tmp_path / "decoy"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("mine")
    (folder / "sub" / "data.bin").write_bytes(os.urandom(64))
    return folder


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "runs"
    monkeypatch.setenv(app_storage.RUNS_DIR_ENV, str(folder))
    return folder


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(app_storage.SCRATCH_DIR_ENV, str(tmp_path / "scratch"))
    return app_storage.scratch_root()


HOSTILE_NAMES = ["", ".", "..", "/", "~", "~/x", "../decoy", "../../etc", "/etc/passwd", "decoy/../..", "a/b",
                 "\x00", "con", "-rf", ".hidden", "ünïcødé näme", "x" * 300, "C:\\Windows", "${HOME}", "$(rm -rf /)"]


@pytest.mark.parametrize("text", HOSTILE_NAMES)
def test_run_names_are_plain_folder_names(text):
    name = app_storage.run_name(text)
    assert name and len(name) <= app_storage.MAX_NAME
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in name), name
    assert not name.startswith((".", "-"))


@pytest.mark.parametrize("text", HOSTILE_NAMES)
def test_saving_under_any_typed_name_stays_in_the_runs_folder(text, runs, decoy, checkpoint):
    from bert_core.model.checkpoint import load_checkpoint

    before = snapshot(decoy.parent / "decoy")
    ckpt = load_checkpoint(checkpoint)
    folder = app_storage.save_run(lambda f: _copy_checkpoint(checkpoint, f), text, owner="session-a")
    assert folder.parent == runs and folder.is_dir()
    assert (folder / "model.safetensors").read_bytes() == (checkpoint / "model.safetensors").read_bytes()
    assert snapshot(decoy) == before
    assert [r.name for r in app_storage.list_runs()] == [folder.name]
    assert ckpt.model is not None


def _copy_checkpoint(src: Path, dest: Path) -> None:
    """A save function like the training job's (which replaces the folder it is given)."""
    from bert_core.model.files import replace_folder

    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.mkdir()
    for p in src.iterdir():
        (tmp / p.name).write_bytes(p.read_bytes())
    replace_folder(tmp, dest)


def test_a_name_taken_by_another_session_gets_a_new_folder_and_the_same_session_replaces_its_own(runs, checkpoint):
    first = app_storage.save_run(lambda f: _copy_checkpoint(checkpoint, f), "lesson", owner="a")
    other = app_storage.save_run(lambda f: _copy_checkpoint(checkpoint, f), "lesson", owner="b")
    again = app_storage.save_run(lambda f: _copy_checkpoint(checkpoint, f), "lesson", owner="a")
    assert (first.name, other.name, again.name) == ("lesson", "lesson-2", "lesson")
    # A folder somebody put there by hand (no owner record) is never taken over, even by name.
    (runs / "manual").mkdir()
    (runs / "manual" / "keep.txt").write_text("keep")
    mine = app_storage.save_run(lambda f: _copy_checkpoint(checkpoint, f), "manual", owner="a")
    assert mine.name == "manual-2" and (runs / "manual" / "keep.txt").read_text() == "keep"
    assert {r.name for r in app_storage.list_runs()} == {"lesson", "lesson-2", "manual-2"}
    assert app_storage.saved_run_folder("lesson-2") == runs / "lesson-2"
    with pytest.raises(BertCoreError, match="no saved run"):
        app_storage.saved_run_folder("manual")


def test_a_link_in_the_runs_folder_is_never_followed(runs, decoy, checkpoint):
    runs.mkdir(parents=True)
    (runs / "lesson").symlink_to(decoy, target_is_directory=True)
    before = snapshot(decoy)
    folder = app_storage.save_run(lambda f: _copy_checkpoint(checkpoint, f), "lesson", owner="a")
    assert folder.name == "lesson-2" and snapshot(decoy) == before


def test_a_failed_save_is_a_message(runs):
    def full_disk(folder):
        raise OSError(28, "No space left on device")

    with pytest.raises(BertCoreError, match="disk is full: nothing was saved"):
        app_storage.save_run(full_disk, "x", owner="a")


@pytest.mark.parametrize("public", [True, False])
def test_a_save_cut_short_by_a_full_disk_leaves_nothing_and_names_no_path(runs, checkpoint, monkeypatch, public):
    """Issue #34: a save that fails midway (the disk fills while the weights are written, here through the same
    copy a released run's save makes) leaves no folder, lists nothing, and in public mode names no server path."""
    from bert_core.model import files as files_module

    if public:
        monkeypatch.setenv(app_storage.PUBLIC_ENV, "1")
    real_copytree = shutil.copytree

    def copy_until_full(src, dst, **kw):
        if Path(src).name == "model.safetensors":   # half the weights, then the disk is full
            Path(dst).write_bytes(Path(src).read_bytes()[: Path(src).stat().st_size // 2])
            raise OSError(28, "No space left on device", str(dst))
        return shutil.copy2(src, dst, **kw)

    monkeypatch.setattr(files_module.shutil, "copytree",
                        lambda src, dst, **kw: real_copytree(src, dst, copy_function=copy_until_full, **kw))
    earlier = app_storage.save_run(lambda f: _copy_checkpoint(checkpoint, f), "kept", owner="a")
    before = snapshot(earlier)
    for name in ("new", "kept"):   # a new name, and this session's earlier save under its name
        with pytest.raises(BertCoreError) as info:
            app_storage.save_run(lambda f: files_module.copy_checkpoint(checkpoint, f), name, owner="a")
        message = str(info.value)
        assert message.startswith("the server's disk is full: nothing was saved"), message
        assert str(runs) not in message and "/tmp" not in message
    assert sorted(p.name for p in runs.iterdir()) == ["kept"], "no partial or staging folder is left"
    assert snapshot(earlier) == before, "the earlier save is whole"
    assert [r.name for r in app_storage.list_runs()] == ["kept"]


def test_a_folder_that_would_not_load_is_never_listed(runs, checkpoint):
    good = app_storage.save_run(lambda f: _copy_checkpoint(checkpoint, f), "good", owner="a")
    for name, damage in (("cut", lambda f: os.truncate(f / "model.safetensors", 1000)),
                         ("empty-config", lambda f: (f / "config.json").write_text("")),
                         ("no-weights", lambda f: (f / "model.safetensors").unlink())):
        folder = app_storage.save_run(lambda f: _copy_checkpoint(checkpoint, f), name, owner="a")
        damage(folder)
    shutil.copytree(good, runs / ".saving-0123")   # a save under way is not offered either
    assert [r.name for r in app_storage.list_runs()] == ["good"]
    assert app_storage.sweep_stale_saves() == [], "a save under way is left alone"
    assert app_storage.sweep_stale_saves(now=time.time() + 2 * 3600) == [runs / ".saving-0123"]


def test_the_runs_folder_keeps_under_its_cap_dropping_the_oldest(runs, checkpoint, monkeypatch):
    size = app_storage.folder_size(checkpoint)
    monkeypatch.setattr(app_storage, "_env_mb", lambda name, default: 2 * size + size // 2)  # room for two runs
    saved = []
    for i in range(4):
        saved.append(app_storage.save_run(lambda f: _copy_checkpoint(checkpoint, f), f"r{i}", owner="a"))
        os.utime(saved[-1], (1000 + i, 1000 + i))
    names = {r.name for r in app_storage.list_runs()}
    assert names == {"r2", "r3"}, names


# ---------------------------------------------------------------------------------------------- scratch


def test_session_scratch_is_per_session_and_refuses_odd_ids(scratch):
    a = app_storage.write_session_file("3f2a-uuid-a", "corpus.txt", b"hello")
    b = app_storage.write_session_file("3f2a-uuid-b", "corpus.txt", b"there")
    assert a.parent != b.parent and a.read_bytes() == b"hello" and a.parent.parent == scratch
    for odd in ["../x", "a/b", ".", "..", "/", "x" * 500, "$$ID-1f\x00"]:  # ids are hashed into plain names
        folder = app_storage.session_scratch(odd)
        assert folder.parent == scratch and folder.name.isalnum()
    with pytest.raises(BertCoreError):
        app_storage.session_scratch("")
    with pytest.raises(ValueError):
        app_storage.write_session_file("s", "../corpus.txt", b"x")


def test_scratch_folders_of_ended_sessions_are_removed_after_the_grace_period(scratch):
    app_storage.write_session_file("alive", "corpus.txt", b"x")
    app_storage.write_session_file("gone", "corpus.txt", b"x")
    app_storage.write_session_file("unknown", "corpus.txt", b"x")
    liveness = {"alive": True, "gone": False, "unknown": None}
    janitor = app_storage.ScratchJanitor(liveness.get, grace_s=5.0)
    assert janitor.sweep(now=100.0) == []
    assert janitor.sweep(now=104.0) == []
    assert janitor.sweep(now=105.5) == ["gone"]
    assert sorted(p.name for p in scratch.iterdir()) == sorted(
        app_storage.session_scratch(s, create=False).name for s in ("alive", "unknown"))


def test_the_scratch_area_is_capped_oldest_session_first(scratch, monkeypatch):
    monkeypatch.setattr(app_storage, "_env_mb", lambda name, default: 250)
    folders = {}
    for i, sid in enumerate(["old", "mid", "new"]):
        folders[sid] = app_storage.write_session_file(sid, "corpus.txt", b"x" * 100).parent
        os.utime(folders[sid], (1000 + i, 1000 + i))
    app_storage.enforce_scratch_cap(keep=folders["new"])
    assert sorted(p.name for p in scratch.iterdir()) == sorted([folders["mid"].name, folders["new"].name])


def test_scratch_areas_of_dead_servers_are_swept(scratch, tmp_path):
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = scratch.parent / f"server-{dead.pid}"
    (stale / "sid").mkdir(parents=True)
    live = scratch.parent / f"server-{os.getppid()}"
    live.mkdir(parents=True, exist_ok=True)
    removed = app_storage.sweep_dead_servers()
    assert stale in removed and not stale.exists() and live.exists()


# ---------------------------------------------------------------------------------------------- zips


def _zip(entries: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buf.getvalue()


def _checkpoint_entries(checkpoint: Path, prefix: str = "") -> dict[str, bytes]:
    return {prefix + p.name: p.read_bytes() for p in checkpoint.iterdir() if p.is_file()}


@pytest.mark.parametrize("prefix", ["", "bert-checkpoint/"])
def test_a_zipped_checkpoint_unpacks_and_loads(checkpoint, tmp_path, prefix):
    from bert_core.serve.model_sources import load_folder

    entries = _checkpoint_entries(checkpoint, prefix)
    entries[prefix + "run.sh"] = b"#!/bin/sh\nrm -rf /\n"   # not a checkpoint file: skipped
    entries[prefix + ".bashrc"] = b"evil"
    folder = app_storage.extract_checkpoint_zip(_zip(entries), tmp_path / "out")
    assert not (folder / "run.sh").exists() and not (folder / ".bashrc").exists()
    model, tokenizer, state = load_folder(folder)
    assert state["step"] == 1 and tokenizer.vocab_size <= model.config.vocab_size


@pytest.mark.parametrize("make, message", [
    (lambda c: b"", "empty"),
    (lambda c: b"PK\x03\x04 not really a zip", "not a zip"),
    (lambda c: os.urandom(2000), "not a zip"),
    (lambda c: _zip({"notes.txt": b"hello"}), "no config.json"),
    (lambda c: _zip({"config.json": b"{}"}), "no model.safetensors"),
    (lambda c: _zip({**_checkpoint_entries(c), "../../evil.txt": b"x"}), "unsafe path"),
    (lambda c: _zip({**_checkpoint_entries(c), "/etc/evil.txt": b"x"}), "unsafe path"),
    (lambda c: _zip(_checkpoint_entries(c), links={"vocab.txt": "/etc/passwd"}), "link"),
    (lambda c: _zip({**_checkpoint_entries(c), "model.safetensors": b"\0" * 3_000_000}), "more than"),
])
def test_bad_zips_are_refused_with_a_message_and_write_nothing_outside(checkpoint, tmp_path, decoy, make, message):
    before = snapshot(decoy)
    with pytest.raises(BertCoreError, match=message):
        app_storage.extract_checkpoint_zip(make(checkpoint), tmp_path / "x" / "out", max_bytes=2_500_000)
    assert not (tmp_path / "x" / "out").exists()
    assert not (tmp_path / "evil.txt").exists() and snapshot(decoy) == before


def test_a_zip_that_lies_about_its_sizes_is_cut_off(checkpoint, tmp_path):
    data = bytearray(_zip({**_checkpoint_entries(checkpoint), "metrics.json": b"{" + b" " * 5_000_000 + b"}"}))
    # Rewrite the claimed size of metrics.json (local header and central directory) to 10 bytes.
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo("metrics.json")
    claimed = info.file_size.to_bytes(4, "little")
    data = bytes(data).replace(claimed, (10).to_bytes(4, "little"))
    with pytest.raises(BertCoreError):
        app_storage.extract_checkpoint_zip(data, tmp_path / "out", max_bytes=1_000_000)
    assert not (tmp_path / "out").exists()


def test_uploads_go_to_the_session_scratch_and_replace_the_previous_one(checkpoint, scratch):
    data = _zip(_checkpoint_entries(checkpoint))
    first = app_storage.unpack_uploaded_checkpoint("sess", data)
    assert first.parent == app_storage.session_scratch("sess", create=False)
    assert app_storage.unpack_uploaded_checkpoint("sess", data) == first
    other = dict(_checkpoint_entries(checkpoint))
    other["metrics.json"] = json.dumps({"x": 1}).encode()
    second = app_storage.unpack_uploaded_checkpoint("sess", _zip(other))
    assert second != first and not first.exists()
    # A grown folder's record (the rate its weights learnt at) comes along; other files do not.
    grown = {**_checkpoint_entries(checkpoint), "growth.json": b'{"pretraining_rate": 0.001}', "notes.txt": b"x"}
    third = app_storage.unpack_uploaded_checkpoint("sess", _zip(grown))
    assert (third / "growth.json").is_file() and not (third / "notes.txt").exists()


@pytest.mark.parametrize("value, public", [("1", True), ("true", True), ("0", False), ("", False), ("no", False)])
def test_public_mode_setting(monkeypatch, value, public):
    monkeypatch.setenv(app_storage.PUBLIC_ENV, value)
    assert app_storage.public_mode() is public
