"""Checkpoint folders as files, without torch: JSON written atomically, folders replaced atomically, the checks
on an output path, and whether a folder holds a (whole) checkpoint. Torch-free, so that the server may import it
at its top (tests/test_layers.py's TORCH_FREE)."""

from __future__ import annotations

import codecs
import contextlib
import errno
import fnmatch
import glob
import io
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator

from bert_core.errors import BertCoreError, is_disk_full, os_reason

log = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"
OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_META = "optimizer.json"
TOKENIZER_FILES = frozenset({"tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"})
# Every name bert_core writes into a checkpoint or classifier folder: a folder holding anything else is the
# user's, and is never replaced. (growth.json: what `grow` recorded, model.growth.GROWTH_RECORD.)
CHECKPOINT_FILES = frozenset({
    "config.json", "model.safetensors", *TOKENIZER_FILES, TRAINER_STATE, OPTIMIZER_TENSORS, OPTIMIZER_META,
    "metrics.json", "finetune_result.json", "growth.json",
})


def write_json(path, obj) -> None:
    """Write JSON with a trailing newline (NaN is refused: it is not JSON)."""
    Path(path).write_text(json.dumps(obj, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def write_text_atomic(path, text: str) -> Path:
    """Write a text file through a temporary sibling, so that a failed write leaves the old file whole."""
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
    return write_text_atomic(path, json.dumps(obj, indent=1, allow_nan=False) + "\n")


def write_error(path, e: BaseException) -> BertCoreError:
    """A failed write's message: the path, the system's reason, and that nothing was replaced."""
    if is_disk_full(e):
        return BertCoreError(f"{disk_full_words(path, e)}; nothing there was replaced: free some space, or choose a "
                             "folder on another disk")
    # Permission, a read-only disk, a name too long...: room is not the cure.
    return BertCoreError(f"could not write {path}: {os_reason(e)}; nothing there was replaced (choose a folder this "
                         "user can write to)")


def disk_free_mb(path) -> float | None:
    """Free megabytes on the disk that holds `path` (or its nearest existing parent); None when unknown."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free / 2**20
    except OSError:
        return None


def disk_full_words(path, error: BaseException) -> str:
    """'could not write PATH: the disk is full (No space left on device; 1.5 MB free there)', whichever library
    met it (an OSError, safetensors' SafetensorError, a message that crossed a pipe)."""
    chain = []
    while isinstance(error, BaseException) and len(chain) < 10:
        chain.append(error)
        error = error.__cause__ or error.__context__
    quota = any((isinstance(e, OSError) and e.errno == errno.EDQUOT) or "quota" in str(e).lower() for e in chain)
    reason = "Disk quota exceeded" if quota else "No space left on device"
    if path is None:
        return f"could not write a file: the disk is full ({reason})"
    free = disk_free_mb(path)
    room = ("" if free is None else f"; {free:,.1f} MB free there" if free < 10_000
            else f"; {free / 1024:,.1f} GB free there")
    return f"could not write {path}: the disk is full ({reason}{room})"


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
    folder = Path(folder)
    return (folder / "config.json").is_file() and any((folder / f).is_file() for f in WEIGHT_FILES)


def is_whole_checkpoint(folder: str | Path) -> bool:
    """Whether `folder` looks loadable without loading it (a save cut short by a full disk does not): config.json
    is a JSON object, and model.safetensors's tensors end where the file ends, or a pytorch_model.bin is not empty."""
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
    """`folder` as a Path when it is a checkpoint folder; otherwise a BertCoreError that says what it is instead."""
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


def _umask() -> int:
    # Linux says it without changing it; os.umask() must set one to read it, which races with other threads.
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def plain_file_mode() -> int:
    """The mode a plain open() gives a new file, for files written through mkstemp (0600)."""
    return 0o666 & ~_umask()


def _honour_umask(folder: Path) -> None:
    """Give everything in `folder` the modes a plain open() or mkdir() would: safetensors writes 0600 files, which
    every other user of a shared folder or a container volume could not read."""
    mask = _umask()
    for root, _dirs, names in os.walk(folder):
        os.chmod(root, 0o777 & ~mask)
        for name in names:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~mask)


def _discard(aside: Path, owned) -> list[str]:
    """Remove a folder set aside: whole, or only what `owned` names; returns what was left, the user's."""
    if owned is None:
        shutil.rmtree(aside, ignore_errors=True)
        return []
    if aside.is_symlink():   # `folder` was a link: the link goes, what it points to stays as it was
        aside.unlink()
        return []
    left = _sort_out(aside, owned, remove=True)
    if not left:
        aside.rmdir()
    return left


def replace_folder(tmp: Path, folder: Path, owned=None) -> None:
    """Move a finished temporary folder onto `folder`, keeping the old one whole until the new one is in place.
    With `owned` (as for check_output_folder), an old `folder` holding anything else is refused, and only what
    `owned` names is removed of it: a build takes hours, and a user's file may appear meanwhile."""
    recover_folder(folder)
    aside = _aside_name(folder)
    if owned is not None and (folder.is_symlink() or folder.exists()):
        foreign = _foreign_entries(folder, owned) if folder.is_dir() else [f"{folder.name} itself is a file"]
        if foreign:
            raise _foreign_error(str(folder), foreign)
    if aside.exists() and _discard(aside, owned):
        raise BertCoreError(f"{aside} (a copy set aside by an earlier save) holds files that bert_core did not write; "
                            "move them away, then try again")
    _honour_umask(tmp)
    if folder.exists():
        os.replace(folder, aside)
    try:
        os.replace(tmp, folder)
    except OSError:
        if aside.exists() and not folder.exists():
            os.replace(aside, folder)  # the old checkpoint back in its place
        raise
    if aside.exists():
        left = _discard(aside, owned)
        if left:
            log.warning("%s holds files that bert_core did not write (%s): they were kept there", aside, _shown(left))


def pid_alive(pid: int) -> bool:
    """Whether process `pid` may still run, so that a folder named by it is left alone. Asked only on POSIX: on
    Windows os.kill(pid, 0) ends the process, so there every pid counts as alive."""
    if pid == os.getpid() or os.name != "posix":
        return True  # this process's own save may be under way in another thread
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def remove_leftovers(folder: Path) -> None:
    """Remove the temporary folders (.NAME.tmp-PID-xxxxxxxx) that a killed save to `folder` left beside it."""
    prefix = f".{folder.name}.tmp-"
    for path in folder.parent.glob(glob.escape(prefix) + "*"):
        found = re.fullmatch(r"(\d+)-[0-9a-f]{8}", path.name[len(prefix):])
        if found and path.is_dir() and not path.is_symlink() and not pid_alive(int(found.group(1))):
            shutil.rmtree(path, ignore_errors=True)


def _first_os_error(e: Exception) -> Exception:
    """The first failure a shutil.Error lists, as an OSError with its errno, so that a full disk reads as one."""
    if not isinstance(e, shutil.Error) or not e.args or not isinstance(e.args[0], list) or not e.args[0]:
        return e
    found = re.match(r"\[Errno (\d+)\] ([^:]+)", str(e.args[0][0][-1]))
    return OSError(int(found.group(1)), found.group(2)) if found else OSError(str(e.args[0][0][-1]))


@contextlib.contextmanager
def folder_built_beside(folder, errors: tuple[type[BaseException], ...] = (), owned=None) -> Iterator[Path]:
    """Yield a temporary sibling of `folder` to write into, moved into place whole when the block ends
    (replace_folder). A failure leaves `folder` as it was; a failed write (an OSError, one of `errors`, a full
    disk) is a BertCoreError naming the path."""
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
        replace_folder(tmp, folder, owned)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, (OSError, shutil.Error, *errors)) or (
                isinstance(e, Exception) and not isinstance(e, BertCoreError) and is_disk_full(e)):
            raise write_error(given, _first_os_error(e)) from e
        raise


def copy_checkpoint(source, folder) -> Path:
    """Copy a checkpoint folder to `folder` atomically, as save_checkpoint writes one."""
    with folder_built_beside(folder) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
    return Path(folder)


# ---------------------------------------------------------------------------------------------- output paths


# What write_text_atomic (and older versions' metrics writer) leave behind when killed mid-write.
_OUR_TEMPORARY = re.compile(r"\..+\.tmp(-\d+-[0-9a-f]{8})?")


def _refuse_special(path: Path, raw: str, flag: str) -> Path:
    """The resolved `path`, once not empty, the root, or the current or home folder (or one holding them)."""
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
    """Refuse a destination whose nearest existing ancestor is a file or not writable (as root, access() allows
    all but a read-only mount: a write that still fails is caught when saving)."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise BertCoreError(f"{flag} {path}: {parent} is a file, so no folder can be made inside it")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BertCoreError(f"{flag} {path}: cannot write into {parent} (permission denied or a read-only disk); "
                            "choose a writable folder")


def _owns(owned: frozenset, parts: tuple[str, ...], folder: bool = False) -> bool:
    """Whether the patterns `owned` ("sub/*.txt") name the file at `parts`, or with `folder`, a folder they lie in."""
    for pattern in owned:
        steps = pattern.split("/")
        if (len(steps) > len(parts) if folder else len(steps) == len(parts)) and all(
                fnmatch.fnmatchcase(part, step) for part, step in zip(parts, steps)):
            return True
    return False


def _made_by(owned, entry: Path, parts: tuple[str, ...]) -> str | None:
    """"folder" or "file" when `owned` names `entry` (at `parts`) or it is a temporary file of ours; None when it
    is the user's (a link always is)."""
    if entry.is_symlink():
        return None
    if entry.is_dir():
        return "folder" if _owns(owned, parts, folder=True) else None
    return "file" if entry.is_file() and (_owns(owned, parts) or _OUR_TEMPORARY.fullmatch(entry.name)) else None


def _foreign_entries(folder: Path, owned) -> list[str]:
    """Paths in `folder` that the patterns `owned` do not name (nor a temporary file of ours): the user's."""
    return _sort_out(folder, owned)


def _sort_out(folder: Path, owned, prefix: tuple[str, ...] = (), remove: bool = False) -> list[str]:
    """The user's paths in `folder`; with `remove`, what `owned` names is removed too (and folders left empty): the
    last line of defence, whatever the check before the work found."""
    foreign = []
    for entry in sorted(folder.iterdir()):
        parts = (*prefix, entry.name)
        kind = _made_by(owned, entry, parts)
        if kind == "folder":
            inside = _sort_out(entry, owned, parts, remove)
            if remove and not inside:
                entry.rmdir()
            foreign += inside
        elif kind == "file" and remove:
            entry.unlink()
        elif kind is None:
            foreign.append("/".join(parts) + ("/" if entry.is_dir() else ""))
    return foreign


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _foreign_error(where: str, foreign: list[str]) -> BertCoreError:
    return BertCoreError(f"{where} holds files that bert_core did not write ({_shown(foreign)}); it is left alone: "
                         "give a new or empty folder")


def check_output_folder(folder, overwrite: bool = False, flag: str = "--out", subfolders: tuple[str, ...] = (),
                        owned=CHECKPOINT_FILES, holds: str = "a checkpoint") -> Path:
    """`folder` as a Path, once checked before any work that a writer may write it (every --out goes through here).
    `owned`: fnmatch patterns of what the writer writes ("shards/*.u16"), also in each of `subfolders`. Refused: an
    empty path, the root, the current or home folder, a file, a folder holding anything else (the user's), and
    without `overwrite` one that already holds what the writer writes (`holds`)."""
    raw = str(folder)
    resolved = _refuse_special(Path(raw), raw, flag)
    path = Path(raw).expanduser()
    if path.is_symlink() and not path.exists():
        raise BertCoreError(f"{flag} {raw} is a link to nothing; give a real folder")
    if path.exists() and not path.is_dir():
        raise BertCoreError(f"{flag} {raw} is an existing file; give a folder to write {holds} into")
    if path.is_dir() and any(path.iterdir()):
        patterns = {*owned, *(f"{glob.escape(sub)}/{name}" for sub in subfolders for name in owned)}
        foreign = _foreign_entries(path, patterns)
        if foreign:
            raise _foreign_error(f"{flag} {raw}", foreign)
        if not overwrite:
            raise BertCoreError(f"{flag} {raw} already holds {holds}; add --overwrite to replace it (or give "
                                "another folder)")
    _require_writable(resolved, flag)
    return path


def check_output_file(file, overwrite: bool = False, flag: str = "--out") -> Path:
    """`file` as a Path, once checked before any work that a text file may be written there. Refused: an empty
    path, the root, the current or home folder, a folder, an existing file without `overwrite`, and even with it a
    file that is not UTF-8 text (weights, a pickle, a device): never ours. A link is replaced, not written through."""
    raw = str(file)
    resolved = _refuse_special(Path(raw), raw, flag)
    path = Path(raw).expanduser()
    if path.is_dir():
        raise BertCoreError(f"{flag} {raw} is a folder; give a file name, e.g. {Path(raw) / 'heldout.txt'}")
    if path.exists() and not overwrite:
        raise BertCoreError(f"{flag} {raw} already exists; add --overwrite to replace it (or give another name)")
    if path.exists() and not path.is_symlink() and not _is_text_file(path):
        raise BertCoreError(f"{flag} {raw} is not a text file (bert_core writes plain text there): it is left alone; "
                            "give another name")
    _require_writable(resolved, flag)
    return path


def _is_text_file(path: Path, head: int = 1 << 16) -> bool:
    """Whether `path` is a regular file whose first bytes are UTF-8 text without NUL bytes."""
    if not path.is_file():
        return False
    try:
        with path.open("rb") as f:
            data = f.read(head)
        codecs.getincrementaldecoder("utf-8")().decode(data, final=False)   # a character cut at the end is fine
    except (OSError, UnicodeDecodeError):
        return False
    return b"\0" not in data


MEMORY_FOLDER = "/dev/shm"   # a folder in memory on Linux: where a download is put together when the disk is full


def zip_checkpoint(save: Callable[[Path], Any]) -> bytes:
    """The folder `save(folder)` writes, as zip bytes; put together in memory (/dev/shm) when the temporary
    folder's disk is full: a download is then the one way to keep a model the server could not write."""
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
