"""Checkpoint folders: Hugging Face model files + tokenizer + trainer state + optimizer state, written atomically.

Layout of a folder:
    config.json, model.safetensors          (bert_core.hf.save_pretrained; loads in transformers as it is)
    tokenizer.json, vocab.txt, ...          (BertTokenizer.save)
    trainer_state.json                      (step, config, history, evals, data position, RNG states)
    optimizer.safetensors, optimizer.json   (AdamW tensors; hyperparameters and the tensor index)
Nothing is pickled: loading reads safetensors and JSON only, so a folder can never run code.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from bert_core.errors import BertCoreError

TRAINER_STATE = "trainer_state.json"
OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_META = "optimizer.json"


def write_json(path, obj) -> None:
    """Write JSON with a trailing newline (NaN is refused: it is not JSON)."""
    Path(path).write_text(json.dumps(obj, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def read_json(path) -> Any:
    """Read a JSON file, turning a broken file into a BertCoreError that names it."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
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
    if meta.get("type") != type(optimizer).__name__:
        raise BertCoreError(f"{folder} holds {meta.get('type')} state, not {type(optimizer).__name__}")
    tensors = load_file(str(folder / OPTIMIZER_TENSORS))
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    for index, values in meta["scalars"].items():
        state.setdefault(int(index), {}).update(values)
    groups = meta["param_groups"]
    if [len(g["params"]) for g in groups] != [len(g["params"]) for g in optimizer.param_groups]:
        raise BertCoreError(f"the optimizer state in {folder} belongs to a model of a different shape")
    try:
        optimizer.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError, RuntimeError) as e:
        raise BertCoreError(f"cannot restore the optimizer state in {folder}: {e}") from e


# ---------------------------------------------------------------------------------------------- atomic folders


def _aside_name(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.old")


def _recover(folder: Path) -> None:
    # A crash between the two renames of replace_folder leaves only the old copy, set aside: put it back.
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
    os.replace(tmp, folder)
    if aside.exists():
        shutil.rmtree(aside, ignore_errors=True)


def save_checkpoint(folder, model, tokenizer=None, trainer_state: dict | None = None, optimizer=None, extra: dict | None = None) -> Path:
    """Write a checkpoint folder atomically: everything goes to a temporary sibling which then replaces `folder`.

    `extra` maps file names to JSON-able objects written beside the rest (e.g. metrics.json).
    If anything fails midway the temporary folder is removed and an existing `folder` is left as it was.
    """
    from bert_core.hf import save_pretrained

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        tmp.mkdir()
        save_pretrained(model, tmp, tokenizer=tokenizer)
        if optimizer is not None:
            save_optimizer_state(optimizer, tmp)
        if trainer_state is not None:
            write_json(tmp / TRAINER_STATE, trainer_state)
        for name, obj in (extra or {}).items():
            write_json(tmp / name, obj)
        replace_folder(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


@dataclass
class Checkpoint:
    """What load_checkpoint found in a folder."""

    folder: Path
    model: Any
    tokenizer: Any
    trainer_state: dict | None


def load_checkpoint(folder, model_class=None) -> Checkpoint:
    """Load model (safetensors), tokenizer and trainer state from a checkpoint folder."""
    from bert_core.hf import is_checkpoint_folder, load_pretrained

    folder = Path(folder)
    _recover(folder)
    if not folder.is_dir():
        raise BertCoreError(f"checkpoint folder {folder} does not exist")
    if not is_checkpoint_folder(folder):
        raise BertCoreError(f"{folder} is not a checkpoint folder (it needs config.json and model weights)")
    kwargs = {"model_class": model_class} if model_class is not None else {}
    model = load_pretrained(folder, **kwargs)
    tokenizer = None
    if (folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file():
        from bert_core.tokenization import BertTokenizer

        tokenizer = BertTokenizer.load(folder)
    state = read_json(folder / TRAINER_STATE) if (folder / TRAINER_STATE).is_file() else None
    return Checkpoint(folder=folder, model=model, tokenizer=tokenizer, trainer_state=state)
