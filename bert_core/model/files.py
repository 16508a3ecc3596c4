"""Checkpoint folders as files, without torch: their names, JSON read and written atomically, folders replaced
and copied atomically, the checks on an output path, and whether a folder holds a (whole) checkpoint.

The server's modules import these at their top: model/checkpoint.py and model/hf.py load torch, and the server
stays torch-free until a model is shown (tests/test_layers.py's TORCH_FREE). Those two modules re-export them.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import re
import shutil
import tempfile
import uuid
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator

from bert_core.errors import BertCoreError, is_disk_full

TRAINER_STATE = "trainer_state.json"
OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_META = "optimizer.json"
# Every name bert_core writes into a checkpoint or classifier folder: a folder holding anything else is the
# user's, and is never replaced.
CHECKPOINT_FILES = frozenset({
    "config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "tokenizer_config.json",
    "special_tokens_map.json", TRAINER_STATE, OPTIMIZER_TENSORS, OPTIMIZER_META, "metrics.json",
    "finetune_result.json",
})


def write_json(path, obj) -> None:
    """Write JSON with a trailing newline (NaN is refused: it is not JSON)."""
    Path(path).write_text(json.dumps(obj, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def write_text_atomic(path, text: str) -> Path:
    """Write a text file through a temporary sibling, so a failed write (full disk, read-only folder) leaves the
    old file whole; failures become a BertCoreError naming the file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise write_error(path, e) from e
    return path


def write_json_atomic(path, obj) -> Path:
    """write_json through a temporary sibling (see write_text_atomic)."""
    return write_text_atomic(path, json.dumps(obj, indent=1, allow_nan=False) + "\n")


def write_error(path, e: Exception) -> BertCoreError:
    """The one-line message for a failed write: the path, the system's reason, and that nothing was replaced."""
    reason = getattr(e, "strerror", None) or str(e)
    return BertCoreError(f"could not write {path}: {reason}; nothing there was replaced (free some space or "
                         "choose a writable folder)")


def read_json(path) -> Any:
    """Read a JSON file, turning a broken file into a BertCoreError that names it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BertCoreError(f"cannot read {path}: {e}; the checkpoint folder is damaged") from e

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")



# How to turn a pickled checkpoint into files that cannot run code; said whenever one is refused.
CONVERT_PICKLE = (
    "convert it to safetensors on a machine where you trust the file: "
    "transformers.BertForPreTraining.from_pretrained(FOLDER).save_pretrained(NEW_FOLDER, safe_serialization=True), "
    "or safetensors.torch.save_file(state_dict, 'model.safetensors') on its state dict"
)


def is_checkpoint_folder(folder: str | Path) -> bool:
    """True when `folder` holds a config.json and one of the weight files."""
    folder = Path(folder)
    return (folder / "config.json").is_file() and any((folder / f).is_file() for f in WEIGHT_FILES)


def is_whole_checkpoint(folder: str | Path) -> bool:
    """True when `folder` looks loadable without loading it: config.json is a JSON object, and model.safetensors is
    whole (its header parses and its tensors end where the file ends), or a pytorch_model.bin is there and not
    empty. A save cut short by a full disk fails this."""
    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            return False
        weights = folder / "model.safetensors"
        if not weights.is_file():
            return (folder / "pytorch_model.bin").is_file() and (folder / "pytorch_model.bin").stat().st_size > 0
        size = weights.stat().st_size
        with weights.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return False
            n = int.from_bytes(head, "little")
            if n > min(size - 8, 100 * 2**20):
                return False
            header = json.loads(f.read(n))
        ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
        return isinstance(header, dict) and 8 + n + max(ends, default=0) == size
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return False


def _file_kind(path: Path) -> str:
    """'pickle' (a pickle or torch.save's zip of one), 'zip', or 'other', from the first bytes; never unpickles."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
        if head[:1] == b"\x80":  # the PROTO opcode every pickle since protocol 2 starts with
            return "pickle"
        if head == b"PK\x03\x04":
            with zipfile.ZipFile(path) as z:
                return "pickle" if any(n.endswith("data.pkl") for n in z.namelist()) else "zip"
    except (OSError, zipfile.BadZipFile):
        pass
    return "other"


def require_checkpoint_folder(folder: str | Path) -> Path:
    """`folder` as a Path when it is a checkpoint folder; otherwise a BertCoreError that says what it is instead
    (missing, a pickle, a zip, a file inside a checkpoint, a folder without weights)."""
    folder = Path(folder)
    if folder.is_file():
        kind = _file_kind(folder)
        if kind == "pickle":
            raise BertCoreError(f"{folder} is a pickled PyTorch file, not a checkpoint folder; a pickle can run code "
                                f"when loaded, so it is not read: {CONVERT_PICKLE}, then give that folder")
        if kind == "zip":
            raise BertCoreError(f"{folder} is a zip archive: unpack it and give the folder that holds config.json")
        if folder.name in ("config.json", *WEIGHT_FILES):
            raise BertCoreError(f"{folder} is a file: give its folder, {folder.parent}")
        raise BertCoreError(f"{folder} is a file, not a checkpoint folder: give the folder that holds config.json "
                            "and model.safetensors")
    if not folder.is_dir():
        raise BertCoreError(f"checkpoint folder {folder} does not exist")
    if not is_checkpoint_folder(folder):
        raise BertCoreError(f"{folder} is not a checkpoint folder: it needs config.json and model.safetensors "
                            "(or pytorch_model.bin)")
    return folder



# ---------------------------------------------------------------------------------------------- atomic folders


def _aside_name(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.old")


def recover_folder(folder: Path) -> None:
    # A crash between the two renames of replace_folder leaves only the old copy, set aside: put it back.
    folder = Path(os.path.abspath(folder))
    if not folder.name:  # the root has no siblings to recover from
        return
    aside = _aside_name(folder)
    if not folder.exists() and aside.is_dir():
        os.replace(aside, folder)


def replace_folder(tmp: Path, folder: Path) -> None:
    """Move a finished temporary folder onto `folder`, keeping the old one whole until the new one is in place."""
    recover_folder(folder)
    aside = _aside_name(folder)
    if aside.exists():
        shutil.rmtree(aside)
    if folder.exists():
        os.replace(folder, aside)
    try:
        os.replace(tmp, folder)
    except OSError:
        if aside.exists() and not folder.exists():
            os.replace(aside, folder)  # the old checkpoint back in its place
        raise
    if aside.exists():
        shutil.rmtree(aside, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # this process's own save may be under way in another thread
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def remove_leftovers(folder: Path) -> None:
    """Remove temporary folders that a killed save to `folder` left beside it (named .NAME.tmp-PID-xxxxxxxx, from a
    process that no longer runs): the next save to the same place cleans up after the one that died."""
    prefix = f".{folder.name}.tmp-"
    for path in folder.parent.glob(glob.escape(prefix) + "*"):
        found = re.fullmatch(r"(\d+)-[0-9a-f]{8}", path.name[len(prefix):])
        if found and path.is_dir() and not path.is_symlink() and not _pid_alive(int(found.group(1))):
            shutil.rmtree(path, ignore_errors=True)

def _first_os_error(e: Exception) -> Exception:
    """shutil.Error lists (source, target, "[Errno N] reason: path") for every file that failed: the first one as
    an OSError with its errno and reason (no paths), so a full disk reads as one."""
    if not isinstance(e, shutil.Error) or not e.args or not isinstance(e.args[0], list) or not e.args[0]:
        return e
    found = re.match(r"\[Errno (\d+)\] ([^:]+)", str(e.args[0][0][-1]))
    return OSError(int(found.group(1)), found.group(2)) if found else OSError(str(e.args[0][0][-1]))


@contextlib.contextmanager
def folder_built_beside(folder, errors: tuple[type[BaseException], ...] = ()) -> Iterator[Path]:
    """Put a folder together in a temporary sibling of `folder` (the block writes into the path it is given) and
    move it into place whole when the block ends. If anything fails midway the temporary folder is removed and an
    existing `folder` is left as it was; a failed write (an OSError, or one of `errors`) is a BertCoreError naming
    the path."""
    given = Path(folder)
    folder = Path(os.path.abspath(given))  # "." and "dir/.." have no name to put a sibling beside
    if not folder.name:
        raise BertCoreError(f"{given} is the root folder; give a folder to write the checkpoint into")
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        remove_leftovers(folder)
        tmp.mkdir()
        yield tmp
        replace_folder(tmp, folder)
    except (OSError, shutil.Error, *errors) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(given, _first_os_error(e)) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def copy_checkpoint(source, folder) -> Path:
    """Copy a checkpoint folder to `folder` atomically, as save_checkpoint writes one: a failed copy (a full disk)
    removes its partial copy and leaves an existing `folder` as it was; the failure is a BertCoreError."""
    with folder_built_beside(folder) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
    return Path(folder)


# ---------------------------------------------------------------------------------------------- output paths


# What write_text_atomic (and older versions' metrics writer) leave behind when killed mid-write.
_OUR_TEMPORARY = re.compile(r"\..+\.tmp(-\d+-[0-9a-f]{8})?")


def _refuse_special(path: Path, raw: str, flag: str) -> Path:
    """The resolved `path`, after refusing an empty path, the root, and the current or home folder (or one that
    holds them): writing there could replace the user's own files."""
    if not raw.strip():
        raise BertCoreError(f"{flag} is empty; give the path to write to")
    resolved = path.expanduser().resolve()
    if resolved == Path(resolved.anchor):
        raise BertCoreError(f"{flag} {raw} is the root folder; give a new folder, e.g. runs/NAME")
    for name, special in (("the current folder", Path.cwd().resolve()), ("your home folder", Path.home().resolve())):
        if resolved == special or resolved in special.parents:
            raise BertCoreError(f"{flag} {raw} is {name} or holds it; give a new folder inside it, e.g. runs/NAME")
    return resolved


def _require_writable(path: Path, flag: str) -> None:
    """Refuse a destination whose nearest existing ancestor is a file or not writable, before any work is done.
    (As root, access() allows everything but a read-only mount; a write that still fails is caught when saving.)"""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise BertCoreError(f"{flag} {path}: {parent} is a file, so no folder can be made inside it")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BertCoreError(f"{flag} {path}: cannot write into {parent} (permission denied or a read-only disk); "
                            "choose a writable folder")


def _foreign_entries(folder: Path, subfolders: tuple[str, ...]) -> list[str]:
    """Names in `folder` (and its allowed subfolders) that bert_core does not write."""
    foreign = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and not entry.is_symlink() and entry.name in subfolders:
            foreign += [f"{entry.name}/{n}" for n in _foreign_entries(entry, ())]
        elif entry.is_file() and not entry.is_symlink() and (entry.name in CHECKPOINT_FILES
                                                             or _OUR_TEMPORARY.fullmatch(entry.name)):
            continue
        else:
            foreign.append(entry.name + ("/" if entry.is_dir() else ""))
    return foreign


def check_output_folder(folder, overwrite: bool = False, flag: str = "--out", subfolders: tuple[str, ...] = ()) -> Path:
    """Check, before any work, that a checkpoint may be written to `folder`; returns it as a Path.

    Refused: an empty path, the root, the current or home folder, an existing file, and a folder holding anything
    bert_core does not write (its files, plus the `subfolders` it writes, e.g. a classifier's from-scratch/).
    A folder that already holds a checkpoint is replaced only with `overwrite`.
    """
    raw = str(folder)
    resolved = _refuse_special(Path(raw), raw, flag)
    path = Path(raw).expanduser()
    if path.is_symlink() and not path.exists():
        raise BertCoreError(f"{flag} {raw} is a link to nothing; give a real folder")
    if path.exists() and not path.is_dir():
        raise BertCoreError(f"{flag} {raw} is an existing file; give a folder to write the checkpoint into")
    if path.is_dir() and any(path.iterdir()):
        foreign = _foreign_entries(path, subfolders)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise BertCoreError(f"{flag} {raw} holds files that bert_core did not write ({shown}); it is left alone: "
                                "give a new or empty folder")
        if not overwrite:
            raise BertCoreError(f"{flag} {raw} already holds a checkpoint; add --overwrite to replace it (or give "
                                "another folder)")
    _require_writable(resolved, flag)
    return path


def check_output_file(file, overwrite: bool = False, flag: str = "--out") -> Path:
    """Check, before any work, that a text file may be written at `file`; returns it as a Path.

    Refused: an empty path, the root, the current or home folder, an existing folder, and an existing file
    unless `overwrite`.
    """
    raw = str(file)
    resolved = _refuse_special(Path(raw), raw, flag)
    path = Path(raw).expanduser()
    if path.is_dir():
        raise BertCoreError(f"{flag} {raw} is a folder; give a file name, e.g. {Path(raw) / 'heldout.txt'}")
    if path.exists() and not overwrite:
        raise BertCoreError(f"{flag} {raw} already exists; add --overwrite to replace it (or give another name)")
    _require_writable(resolved, flag)
    return path

MEMORY_FOLDER = "/dev/shm"   # a folder in memory on Linux: where a download is put together when the disk is full


def zip_checkpoint(save: Callable[[Path], Any]) -> bytes:
    """Save a checkpoint folder with `save(folder)` into a temporary place and return it as zip bytes. When the
    temporary folder's disk is full, it is put together in memory (/dev/shm) instead: a download is then the one
    way to keep a model the server could not write."""
    try:
        return _zip_saved(save, None)
    except (OSError, BertCoreError) as exc:
        if not is_disk_full(exc) or not os.path.isdir(MEMORY_FOLDER):
            raise
        return _zip_saved(save, MEMORY_FOLDER)


def _zip_saved(save: Callable[[Path], Any], where: str | None) -> bytes:
    with tempfile.TemporaryDirectory(prefix="bert-explorer-", dir=where) as tmp:
        folder = Path(tmp) / "bert-checkpoint"
        save(folder)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    zf.write(path, Path("bert-checkpoint") / path.relative_to(folder))
        return buf.getvalue()
