"""Where the app keeps what it writes, and what it says when it cannot: on a Space under /data when the Space has
persistent storage (a writable /data), else under the user's home (the image sets BERT_EXPLORER_DATA); on a laptop
beside app.py as before. A folder the server may not write in is told as such, not as a full disk."""

import errno
from pathlib import Path

from bert_core.paths import REPO_ROOT, app_data_dir
from bert_core.serve.app_storage import runs_dir
from bert_core.serve.run_records import record_failure, state_dir
from bert_core.serve.run_scheduler import release_failure

ROOT = Path(__file__).resolve().parent.parent


def _clear(monkeypatch):
    for name in ("BERT_EXPLORER_DATA", "BERT_EXPLORER_RUNS_DIR", "BERT_EXPLORER_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)


def test_a_laptop_keeps_its_runs_beside_the_app(monkeypatch):
    _clear(monkeypatch)
    assert app_data_dir() == REPO_ROOT
    assert runs_dir() == REPO_ROOT / "runs" / "app" and state_dir() == REPO_ROOT / "runs" / "app-state"


def test_persistent_storage_when_the_space_has_it(monkeypatch, tmp_path):
    _clear(monkeypatch)
    data, home = tmp_path / "data", tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("BERT_EXPLORER_DATA", f"{data}:{home}")
    assert runs_dir() == home / "runs" / "app"            # no /data: the user's home
    assert state_dir() == home / "runs" / "app-state"
    data.mkdir()
    assert runs_dir() == data / "runs" / "app"            # a writable /data: persistent storage
    assert state_dir() == data / "runs" / "app-state"
    monkeypatch.setenv("BERT_EXPLORER_RUNS_DIR", str(tmp_path / "mine"))
    assert runs_dir() == tmp_path / "mine"                # the operator's own setting still wins


def test_a_data_entry_that_is_not_a_writable_folder_is_passed_over(monkeypatch, tmp_path):
    _clear(monkeypatch)
    (tmp_path / "a-file").write_text("x")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setattr("os.access", lambda path, mode: Path(path) != tmp_path / "read-only")
    (tmp_path / "read-only").mkdir()
    monkeypatch.setenv("BERT_EXPLORER_DATA", f"{tmp_path / 'a-file'}::{tmp_path / 'read-only'}:{home}")
    assert app_data_dir() == home
    monkeypatch.setenv("BERT_EXPLORER_DATA", f"{tmp_path / 'read-only'}")
    assert app_data_dir() == REPO_ROOT                    # nothing usable: the default


def test_a_folder_the_server_may_not_write_in_is_not_told_as_a_full_disk(tmp_path):
    denied = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "run.json"))
    said = record_failure(denied)
    assert "Permission denied" in said and "writable by the user the server runs as" in said
    assert "room" not in said and "full" not in said and str(tmp_path) not in said
    full = record_failure(OSError(errno.ENOSPC, "No space left on device"))
    assert "disk is full" in full and "as soon as there is room" in full
    read_only = record_failure(OSError(errno.EROFS, "Read-only file system"))
    assert "writable" in read_only and "room" not in read_only
    released = release_failure(denied, tmp_path)
    assert "Permission denied" in released and "free space" not in released and "writable" in released
    assert "free space" in release_failure(OSError(errno.ENOSPC, "No space left on device"), tmp_path)


def test_the_image_makes_its_app_folder_as_its_user_before_workdir():
    """BuildKit keeps the owner of a folder that exists before `COPY --chown`: the Dockerfile must make the app
    folder the user's itself (benchmarks/space_image.sh checks the built image the same way)."""
    lines = [x.strip() for x in (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()]
    workdir = next(i for i, x in enumerate(lines) if x.startswith("WORKDIR"))
    folder = lines[workdir].split()[1]
    made = [x for x in lines[:workdir] if x.startswith("RUN") and folder in x]
    assert any(f"-o user" in x or "chown user" in x or "chown -R user" in x for x in made), made
    env = " ".join(x for x in lines if x.startswith("ENV"))
    assert "BERT_EXPLORER_DATA=/data:/home/user" in env
