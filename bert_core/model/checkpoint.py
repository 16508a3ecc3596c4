"""Checkpoint folders: Hugging Face model files + tokenizer + trainer state + optimizer state, written atomically.

Layout of a folder:
    config.json, model.safetensors          (bert_core.model.hf.save_pretrained; loads in transformers as it is)
    tokenizer.json, vocab.txt, ...          (BertTokenizer.save)
    trainer_state.json                      (step, config, history, evals, data position, RNG states)
    optimizer.safetensors, optimizer.json   (AdamW tensors; hyperparameters and the tensor index)
Nothing is pickled: loading reads safetensors and JSON only, so a folder can never run code.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bert_core.errors import BertCoreError, is_disk_full
from bert_core.model.hf import load_pretrained, require_checkpoint_folder, save_pretrained
from bert_core.model.tokenization import BertTokenizer

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


# ---------------------------------------------------------------------------------------------- RNG states


def rng_state_to_json(rng: dict) -> dict:
    """torch/cuda generator states (uint8 tensors) as plain lists of ints."""
    out: dict = {"torch": rng["torch"].tolist()}
    if rng.get("cuda") is not None:
        out["cuda"] = [s.tolist() for s in rng["cuda"]]
    return out


def rng_state_from_json(d: dict) -> dict:
    """Inverse of rng_state_to_json."""
    out: dict = {"torch": torch.tensor(d["torch"], dtype=torch.uint8)}
    if d.get("cuda") is not None and torch.cuda.is_available() and len(d["cuda"]) == torch.cuda.device_count():
        out["cuda"] = [torch.tensor(s, dtype=torch.uint8) for s in d["cuda"]]
    elif torch.cuda.is_available():
        out["cuda"] = None
    return out


# ---------------------------------------------------------------------------------------------- optimizer


def save_optimizer_state(optimizer: torch.optim.Optimizer, folder) -> None:
    """Write optimizer.safetensors (per-parameter tensors) and optimizer.json (everything else)."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict] = {}
    for index, per_param in sd["state"].items():
        for name, value in per_param.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[name] = value
    meta = {"param_groups": sd["param_groups"], "scalars": scalars, "type": type(optimizer).__name__}
    save_file(tensors, str(Path(folder) / OPTIMIZER_TENSORS))
    write_json(Path(folder) / OPTIMIZER_META, meta)


def load_optimizer_state(optimizer: torch.optim.Optimizer, folder) -> None:
    """Load the state written by save_optimizer_state into an optimizer over the same parameters."""
    folder = Path(folder)
    if not (folder / OPTIMIZER_META).is_file() or not (folder / OPTIMIZER_TENSORS).is_file():
        raise BertCoreError(f"{folder} has no optimizer state ({OPTIMIZER_TENSORS}); it cannot be resumed exactly")
    meta = read_json(folder / OPTIMIZER_META)
    if not isinstance(meta, dict) or meta.get("type") != type(optimizer).__name__:
        found = meta.get("type") if isinstance(meta, dict) else type(meta).__name__
        raise BertCoreError(f"{folder / OPTIMIZER_META} holds {found} state, not {type(optimizer).__name__}")
    try:
        tensors = load_file(str(folder / OPTIMIZER_TENSORS))
    except (SafetensorError, OSError, ValueError) as e:
        raise BertCoreError(f"cannot read {folder / OPTIMIZER_TENSORS}: {e}; the optimizer state is damaged (restore "
                            "it from a backup, or start a new run with --init-from this folder)") from e
    for key, value in tensors.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise BertCoreError(f"{folder / OPTIMIZER_TENSORS} holds NaN or infinite values in {key}: the run "
                                "diverged before this save; use an earlier checkpoint")
    try:
        state: dict[int, dict] = {}
        for key, value in tensors.items():
            index, name = key.split(".", 1)
            state.setdefault(int(index), {})[name] = value
        for index, values in meta["scalars"].items():
            state.setdefault(int(index), {}).update(values)
        groups = meta["param_groups"]
        shapes = [len(g["params"]) for g in groups]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BertCoreError(f"{folder / OPTIMIZER_META} or {OPTIMIZER_TENSORS} is damaged ({type(e).__name__}: {e}); "
                            "restore it from a backup, or start a new run with --init-from this folder") from e
    if shapes != [len(g["params"]) for g in optimizer.param_groups]:
        raise BertCoreError(f"the optimizer state in {folder} belongs to a model of a different shape")
    try:
        optimizer.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise BertCoreError(f"cannot restore the optimizer state in {folder / OPTIMIZER_META}: {e}") from e


# ---------------------------------------------------------------------------------------------- atomic folders


def _aside_name(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.old")


def _recover(folder: Path) -> None:
    # A crash between the two renames of replace_folder leaves only the old copy, set aside: put it back.
    folder = Path(os.path.abspath(folder))
    if not folder.name:  # the root has no siblings to recover from
        return
    aside = _aside_name(folder)
    if not folder.exists() and aside.is_dir():
        os.replace(aside, folder)


def replace_folder(tmp: Path, folder: Path) -> None:
    """Move a finished temporary folder onto `folder`, keeping the old one whole until the new one is in place."""
    _recover(folder)
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


def _remove_leftovers(folder: Path) -> None:
    """Remove temporary folders that a killed save to `folder` left beside it (named .NAME.tmp-PID-xxxxxxxx, from a
    process that no longer runs): the next save to the same place cleans up after the one that died."""
    prefix = f".{folder.name}.tmp-"
    for path in folder.parent.glob(glob.escape(prefix) + "*"):
        found = re.fullmatch(r"(\d+)-[0-9a-f]{8}", path.name[len(prefix):])
        if found and path.is_dir() and not path.is_symlink() and not _pid_alive(int(found.group(1))):
            shutil.rmtree(path, ignore_errors=True)


def save_checkpoint(folder, model, tokenizer=None, trainer_state: dict | None = None, optimizer=None,
                    extra: dict | None = None, label_names=None) -> Path:
    """Write a checkpoint folder atomically: everything goes to a temporary sibling which then replaces `folder`.

    `extra` maps file names to JSON-able objects written beside the rest (e.g. metrics.json); `label_names` are a
    classifier's. If anything fails midway the temporary folder is removed and an existing `folder` is left as it
    was; a failed write (full disk, read-only folder) is a BertCoreError naming the path.
    """
    given = Path(folder)
    folder = Path(os.path.abspath(given))  # "." and "dir/.." have no name to put a sibling beside
    if not folder.name:
        raise BertCoreError(f"{given} is the root folder; give a folder to write the checkpoint into")
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(folder)
        tmp.mkdir()
        save_pretrained(model, tmp, tokenizer=tokenizer, label_names=label_names)
        if optimizer is not None:
            save_optimizer_state(optimizer, tmp)
        if trainer_state is not None:
            write_json(tmp / TRAINER_STATE, trainer_state)
        for name, obj in (extra or {}).items():
            write_json(tmp / name, obj)
        replace_folder(tmp, folder)
    except (OSError, SafetensorError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(given, e) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return given


def _first_os_error(e: Exception) -> Exception:
    """shutil.Error lists (source, target, "[Errno N] reason: path") for every file that failed: the first one as
    an OSError with its errno and reason (no paths), so a full disk reads as one."""
    if not isinstance(e, shutil.Error) or not e.args or not isinstance(e.args[0], list) or not e.args[0]:
        return e
    found = re.match(r"\[Errno (\d+)\] ([^:]+)", str(e.args[0][0][-1]))
    return OSError(int(found.group(1)), found.group(2)) if found else OSError(str(e.args[0][0][-1]))


def copy_checkpoint(source, folder) -> Path:
    """Copy a checkpoint folder to `folder` atomically, as save_checkpoint writes one: a failed copy (a full disk)
    removes its partial copy and leaves an existing `folder` as it was; the failure is a BertCoreError."""
    source, given = Path(source), Path(folder)
    folder = Path(os.path.abspath(given))
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(folder)
        shutil.copytree(source, tmp)
        replace_folder(tmp, folder)
    except (OSError, shutil.Error) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(given, _first_os_error(e)) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return given


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


def check_tokenizer_fits(tokenizer, config, folder) -> None:
    """Refuse a tokenizer with more ids than the model's embedding table: they would fail deep inside the model."""
    if tokenizer.vocab_size > config.vocab_size:
        raise BertCoreError(f"the tokenizer in {folder} has {tokenizer.vocab_size} tokens but the model only "
                            f"{config.vocab_size}: they do not belong together")


@dataclass
class Checkpoint:
    """What load_checkpoint found in a folder."""

    folder: Path
    model: Any
    tokenizer: Any
    trainer_state: dict | None


def load_checkpoint(folder, model_class=None, require_tokenizer: bool = False) -> Checkpoint:
    """Load model (safetensors), tokenizer and trainer state from a checkpoint folder; with `require_tokenizer`, a
    folder without one is refused (every command that reads text needs the tokenizer the model was trained with)."""
    folder = Path(folder)
    _recover(folder)
    require_checkpoint_folder(folder)
    kwargs = {"model_class": model_class} if model_class is not None else {}
    model = load_pretrained(folder, **kwargs)
    tokenizer = None
    if (folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file():
        tokenizer = BertTokenizer.load(folder)
        check_tokenizer_fits(tokenizer, model.config, folder)
    elif require_tokenizer:
        raise BertCoreError(f"{folder} has no tokenizer files (tokenizer.json or vocab.txt): copy the tokenizer the "
                            "model was trained with into the folder")
    state = read_json(folder / TRAINER_STATE) if (folder / TRAINER_STATE).is_file() else None
    if state is not None and not isinstance(state, dict):
        raise BertCoreError(f"{folder / TRAINER_STATE} holds {type(state).__name__}, not a JSON object; the checkpoint "
                            "folder is damaged")
    return Checkpoint(folder=folder, model=model, tokenizer=tokenizer, trainer_state=state)


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
