"""The app's files, and what a visitor may do with them: public mode, the app's runs folder, per-session scratch
folders, and uploaded checkpoint zips.

A public server (`BERT_EXPLORER_PUBLIC=1`: a Space, a classroom) serves strangers, so no text a visitor types becomes
a server path: saved runs get a name the app makes and never replace another session's folder; a checkpoint is
opened by uploading a zip (size caps, no links, no paths outside the target) or picking one of the app's runs.
What a session writes for itself lives in its scratch folder, removed when it ends, under a total cap (oldest first).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from bert_core.errors import BertCoreError, is_disk_full, os_reason
from bert_core.model.files import is_checkpoint_folder, is_whole_checkpoint, pid_alive, replace_folder
from bert_core.paths import app_data_dir

log = logging.getLogger("bert_core.app")

PUBLIC_ENV = "BERT_EXPLORER_PUBLIC"            # 1: a public server (no server paths typed by visitors)
RUNS_DIR_ENV = "BERT_EXPLORER_RUNS_DIR"        # where the app saves runs (default <app>/runs/app)
RUNS_CAP_ENV = "BERT_EXPLORER_RUNS_MB"         # total size of saved runs; the oldest go first beyond it
SCRATCH_DIR_ENV = "BERT_EXPLORER_SCRATCH_DIR"  # parent of the per-session scratch folders (default: system temp)
SCRATCH_CAP_ENV = "BERT_EXPLORER_SCRATCH_MB"   # total size of all sessions' scratch folders
UPLOAD_CAP_ENV = "BERT_EXPLORER_UPLOAD_MB"     # largest checkpoint zip a visitor may upload (compressed and not)
DEFAULT_RUNS_CAP_MB = 2000
DEFAULT_SCRATCH_CAP_MB = 1000
DEFAULT_UPLOAD_CAP_MB = 200

OWNER_FILE = "app_run.json"   # in a saved run: its name, when it was saved, and a hash of the saving session
MAX_NAME = 40
# What a checkpoint zip may bring: the files of our checkpoint folders and of a Hugging Face BERT folder. Anything
# else in the archive is skipped, so an upload can never add an executable, a link or a dotfile.
CHECKPOINT_FILES = frozenset({
    "config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json", "vocab.txt", "tokenizer_config.json",
    "special_tokens_map.json", "trainer_state.json", "metrics.json", "growth.json",
})
MAX_ZIP_MEMBERS = 1000


def _env_mb(name: str, default: int) -> int:
    try:
        value = int(float(os.environ.get(name, "") or default))
    except ValueError:
        return default * 2**20
    return max(1, value) * 2**20


def public_mode() -> bool:
    """True when the operator declared a public server (`BERT_EXPLORER_PUBLIC=1`): no server paths from visitors."""
    return os.environ.get(PUBLIC_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def upload_cap_bytes() -> int:
    return _env_mb(UPLOAD_CAP_ENV, DEFAULT_UPLOAD_CAP_MB)


def folder_size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _drop_oldest(folders: list[Path], max_bytes: int, keep: Path | None = None) -> list[Path]:
    """Remove the least recently modified folders until their total size is at most `max_bytes`; never `keep`."""
    sized = []
    for f in folders:
        try:
            sized.append((f.stat().st_mtime, f, folder_size(f)))
        except OSError:
            continue
    total = sum(s for _, _, s in sized)
    removed = []
    for _, folder, size in sorted(sized, key=lambda t: t[0]):
        if total <= max_bytes:
            break
        if keep is not None and folder.resolve() == keep.resolve():
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
        total -= size
    return removed


# ---------------------------------------------------------------------------------------------- saved runs


def runs_dir() -> Path:
    """`BERT_EXPLORER_RUNS_DIR`, default `runs/app` under `paths.app_data_dir()`."""
    env = os.environ.get(RUNS_DIR_ENV, "").strip()
    if env:
        return Path(env)
    return app_data_dir() / "runs" / "app"


def run_name(text: str) -> str:
    """A folder name from what a visitor typed: ASCII letters, digits, '-' and '_', at most 40, never empty or
    starting with '.' ('..', '/etc', '~' and '' all become plain names)."""
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    name = re.sub(r"[^a-z0-9_-]+", "-", ascii_text.lower()).strip("-_")[:MAX_NAME].strip("-_")
    return name or "run"


def _owner_hash(owner: str) -> str:
    return hashlib.sha256(("bert-explorer-run:" + owner).encode()).hexdigest()


def _owned_by(folder: Path, owner: str) -> bool:
    try:
        record = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("owner") == _owner_hash(owner)


def _write_owner(folder: Path, owner: str, name: str) -> None:
    (folder / OWNER_FILE).write_text(json.dumps({"name": name, "owner": _owner_hash(owner), "saved": time.time()}),
                                     encoding="utf-8")


def reserve_run_folder(name_text: str, owner: str, runs: Path | None = None) -> Path:
    """`runs/<run_name(name_text)>`, or -2, -3... when another session saved that name; created at once (two
    sessions saving one name get two folders) and marked as this session's."""
    runs = runs_dir() if runs is None else runs
    try:
        runs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BertCoreError(f"the app cannot write its runs folder ({exc.strerror}); ask the operator to set "
                            f"{RUNS_DIR_ENV} to a writable folder") from None
    base = run_name(name_text)
    for i in range(1, 10_000):
        candidate = runs / (base if i == 1 else f"{base}-{i}")
        try:
            candidate.mkdir()
        except FileExistsError:
            if candidate.is_dir() and not candidate.is_symlink() and _owned_by(candidate, owner):
                return candidate
            continue
        except OSError as exc:
            raise BertCoreError(f"could not create a folder for the run ({exc.strerror})") from None
        _write_owner(candidate, owner, candidate.name)
        return candidate
    raise BertCoreError("too many saved runs with this name: choose another name")


STAGING_PREFIX = ".saving-"   # a save under way (or cut short): never listed, swept when the server starts


def without_paths(text: str) -> str:
    """`text` without the server's absolute paths on a public server; as it is on the user's own machine."""
    if not public_mode():
        return text
    return re.sub(r"""(?<![\w.])(?:[A-Za-z]:)?[/\\][^\s'"(),;]*[^\s'"(),;.:]""", "(a server folder)", text)


def save_failure(exc: BaseException) -> str:
    if is_disk_full(exc):
        return ("the server's disk is full: nothing was saved. Download the run as a zip instead (*Prepare "
                "download*), or ask the operator to free space.")
    reason = os_reason(exc)
    return f"could not save the run ({without_paths(reason)}): nothing was saved."


def save_run(save: Callable[[Path], object], name_text: str, owner: str, runs: Path | None = None) -> Path:
    """Save a run with `save(folder)` under a name the app makes (reserve_run_folder), then drop the oldest other
    runs beyond the cap. Atomic: written into a hidden staging folder, checked whole, then renamed into place; a
    failed save leaves nothing behind."""
    runs = runs_dir() if runs is None else runs
    folder = reserve_run_folder(name_text, owner, runs)
    fresh = not is_whole_checkpoint(folder)   # a name just reserved, not this session's earlier save
    staging = runs / f"{STAGING_PREFIX}{secrets.token_hex(8)}"
    try:
        save(staging)
        _write_owner(staging, owner, folder.name)
        if not is_whole_checkpoint(staging):
            raise BertCoreError("the saved files are incomplete")
        replace_folder(staging, folder)
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, nothing half-written stays behind
        shutil.rmtree(staging, ignore_errors=True)
        if fresh:
            shutil.rmtree(folder, ignore_errors=True)
        log.warning("saving a run failed: %s", os_reason(exc))
        raise BertCoreError(save_failure(exc)) from None
    removed = _drop_oldest([p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()],
                           _env_mb(RUNS_CAP_ENV, DEFAULT_RUNS_CAP_MB), keep=folder)
    for old in removed:
        log.warning("removed the old saved run %s (the runs folder is over %s)", old.name, RUNS_CAP_ENV)
    return folder


@dataclass(frozen=True)
class SavedRun:
    name: str
    folder: Path
    saved: float


def list_runs(runs: Path | None = None) -> list[SavedRun]:
    """The app's saved runs that hold a whole checkpoint, newest first."""
    runs = runs_dir() if runs is None else runs
    if not runs.is_dir():
        return []
    found = []
    for folder in runs.iterdir():
        if folder.name.startswith(".") or folder.is_symlink() or not folder.is_dir():
            continue
        if not is_whole_checkpoint(folder):
            continue
        try:
            record = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))
            found.append(SavedRun(folder.name, folder, float(record.get("saved", 0.0))))
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return sorted(found, key=lambda r: -r.saved)


def saved_run_folder(name: str, runs: Path | None = None) -> Path:
    for run in list_runs(runs):
        if run.name == name:
            return run.folder
    raise BertCoreError(f"there is no saved run called {name!r} (it may have been removed to make room)")


# ---------------------------------------------------------------------------------------------- session scratch


def scratch_root() -> Path:
    """`<temp>/bert-explorer/server-<pid>`, one folder per session inside."""
    base = os.environ.get(SCRATCH_DIR_ENV, "").strip() or os.path.join(tempfile.gettempdir(), "bert-explorer")
    return Path(base) / f"server-{os.getpid()}"


_SESSIONS: dict[str, str] = {}   # scratch folder name -> session id, for this server process's janitor
_SESSIONS_LOCK = threading.Lock()


def session_scratch(session_id: str, create: bool = True) -> Path:
    """A browser session's scratch folder, named by a hash of its id (no id becomes a path)."""
    if not session_id:
        raise BertCoreError("no session id")
    name = hashlib.sha256(("bert-explorer-session:" + session_id).encode()).hexdigest()[:32]
    folder = scratch_root() / name
    if create:
        with _SESSIONS_LOCK:
            _SESSIONS[name] = session_id
        folder.mkdir(parents=True, exist_ok=True)
        os.utime(folder)  # its age orders the cap's removals: a session that writes is a recent one
    return folder


def remove_session_scratch(session_id: str) -> None:
    folder = session_scratch(session_id, create=False)
    shutil.rmtree(folder, ignore_errors=True)
    with _SESSIONS_LOCK:
        _SESSIONS.pop(folder.name, None)


def enforce_scratch_cap(keep: Path | None = None) -> list[Path]:
    root = scratch_root()
    if not root.is_dir():
        return []
    folders = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    return _drop_oldest(folders, _env_mb(SCRATCH_CAP_ENV, DEFAULT_SCRATCH_CAP_MB), keep=keep)


STALE_STAGING_S = 3600.0   # a save's staging folder this old belongs to a server that died while saving


def sweep_stale_saves(runs: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove the staging folders of saves cut short by a server that died meanwhile."""
    runs = runs_dir() if runs is None else runs
    now = time.time() if now is None else now
    removed = []
    for folder in runs.glob(f"{STAGING_PREFIX}*") if runs.is_dir() else ():
        try:
            if folder.is_dir() and not folder.is_symlink() and now - folder.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        except OSError:
            continue
    return removed


def sweep_dead_servers() -> list[Path]:
    """Remove the scratch areas of server processes killed before they could clean up."""
    base = scratch_root().parent
    removed = []
    if not base.is_dir():
        return removed
    for folder in base.glob("server-*"):
        pid = folder.name.removeprefix("server-")
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def write_session_file(session_id: str, name: str, data: bytes) -> Path:
    """Write `data` as `name` (one the app chooses) in the session's scratch folder, within the cap."""
    if "/" in name or name.startswith("."):
        raise ValueError(name)
    folder = session_scratch(session_id)
    path = folder / name
    path.write_bytes(data)
    enforce_scratch_cap(keep=folder)
    if not path.exists():
        raise BertCoreError("the server's scratch space is full; try a smaller file")
    return path


class ScratchJanitor:
    """Removes the scratch folders of sessions gone for `grace_s` (`is_alive` None: cannot tell, nothing removed)."""

    def __init__(self, is_alive: Callable[[str], bool | None], grace_s: float = 5.0, poll_s: float = 2.0):
        self.is_alive = is_alive
        self.grace_s = grace_s
        self.poll_s = poll_s
        self._gone_since: dict[str, float] = {}

    def sweep(self, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        removed = []
        with _SESSIONS_LOCK:
            sessions = list(_SESSIONS.values())
        for sid in sessions:
            alive = self.is_alive(sid)
            if alive is None or alive:
                self._gone_since.pop(sid, None)
                continue
            if now - self._gone_since.setdefault(sid, now) >= self.grace_s:
                remove_session_scratch(sid)
                self._gone_since.pop(sid, None)
                removed.append(sid)
        return removed

    def run_forever(self) -> None:
        while True:
            time.sleep(self.poll_s)
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - the janitor must outlive one bad sweep
                log.exception("scratch sweep failed")


_JANITOR: threading.Thread | None = None
_JANITOR_LOCK = threading.Lock()


def start_janitor(is_alive: Callable[[str], bool | None]) -> None:
    """Start, once per server process, the janitor's thread (after the sweeps of dead servers' leftovers)."""
    global _JANITOR
    with _JANITOR_LOCK:
        if _JANITOR is not None and _JANITOR.is_alive():
            return
        sweep_dead_servers()
        sweep_stale_saves()
        janitor = ScratchJanitor(is_alive)
        _JANITOR = threading.Thread(target=janitor.run_forever, name="bert-scratch-janitor", daemon=True)
        _JANITOR.start()


def carry_run_files(spec, folder_key: str):
    """A copy of a run's spec whose scratch files (uploaded or pasted corpus, start weights) are copied into another
    run's scratch folder, which outlives the first run's; files outside the scratch area stay where they are."""
    root = scratch_root().resolve()
    target = session_scratch(folder_key)
    changes = {}
    corpus = Path(spec.corpus)
    if corpus.is_file() and root in corpus.resolve().parents:
        shutil.copy2(corpus, target / "corpus.txt")
        changes["corpus"] = str(target / "corpus.txt")
    if spec.init_from and root in Path(spec.init_from).resolve().parents:
        shutil.copytree(spec.init_from, target / "start-weights", dirs_exist_ok=True)
        changes["init_from"] = str(target / "start-weights")
    enforce_scratch_cap(keep=target)
    return dataclasses.replace(spec, **changes) if changes else spec


# ---------------------------------------------------------------------------------------------- checkpoint zips


def _is_link(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _member_path(info: zipfile.ZipInfo) -> PurePosixPath:
    raw = info.filename.replace("\\", "/")
    path = PurePosixPath(raw)
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw) or ".." in path.parts or "\x00" in raw:
        raise BertCoreError(f"the zip holds an unsafe path ({info.filename!r}); zip the checkpoint folder itself")
    return path


def extract_checkpoint_zip(data: bytes, dest: Path, max_bytes: int | None = None) -> Path:
    """Unpack a zipped checkpoint folder (its files at the top or in one folder) into `dest`, new; returns it. Only
    CHECKPOINT_FILES are written; links, paths outside the target and more than `max_bytes` (compressed, or as
    actually read) are refused."""
    max_bytes = upload_cap_bytes() if max_bytes is None else max_bytes
    if not data:
        raise BertCoreError("the uploaded file is empty")
    if len(data) > max_bytes:
        raise BertCoreError(f"the zip is {len(data) / 2**20:.0f} MB; the limit is {max_bytes / 2**20:.0f} MB")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as exc:
        raise BertCoreError(f"the upload is not a zip archive ({exc}); zip the checkpoint folder and upload "
                            "the .zip") from None
    if len(infos) > MAX_ZIP_MEMBERS:
        raise BertCoreError(f"the zip holds {len(infos)} entries; a checkpoint folder has about ten")
    wanted: dict[PurePosixPath, zipfile.ZipInfo] = {}
    for info in infos:
        path = _member_path(info)
        if _is_link(info):
            raise BertCoreError(f"the zip holds a link ({info.filename!r}); links are not accepted")
        if info.is_dir() or path.name not in CHECKPOINT_FILES or len(path.parts) > 2:
            continue
        wanted[path] = info
    configs = sorted((p for p in wanted if p.name == "config.json"), key=lambda p: len(p.parts))
    if not configs:
        raise BertCoreError("the zip holds no config.json: zip a checkpoint folder (config.json, model.safetensors "
                            "and tokenizer files)")
    top = configs[0].parent
    chosen = {p.name: info for p, info in wanted.items() if p.parent == top}
    if sum(i.file_size for i in chosen.values()) > max_bytes:
        raise BertCoreError(f"the checkpoint unpacks to more than {max_bytes / 2**20:.0f} MB")
    dest.mkdir(parents=True, exist_ok=False)
    written = 0
    try:
        for name, info in chosen.items():
            with archive.open(info) as src, open(dest / name, "wb") as out:
                while chunk := src.read(1 << 20):
                    written += len(chunk)
                    if written > max_bytes:  # the sizes in a zip's directory are only claims
                        raise BertCoreError(f"the checkpoint unpacks to more than {max_bytes / 2**20:.0f} MB")
                    out.write(chunk)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise BertCoreError(f"the zip could not be unpacked ({exc})") from None
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    if not is_checkpoint_folder(dest):
        shutil.rmtree(dest, ignore_errors=True)
        raise BertCoreError("the zip holds config.json but no model.safetensors (or pytorch_model.bin) beside it")
    return dest


def unpack_uploaded_checkpoint(session_id: str, data: bytes) -> Path:
    """Unpack an uploaded checkpoint zip into the session's scratch folder, once per distinct upload."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    folder = session_scratch(session_id) / f"upload-{digest}"
    if folder.is_dir():
        return folder
    for old in session_scratch(session_id).glob("upload-*"):
        shutil.rmtree(old, ignore_errors=True)  # one uploaded checkpoint per session at a time
    extract_checkpoint_zip(data, folder)
    enforce_scratch_cap(keep=session_scratch(session_id))
    return folder
