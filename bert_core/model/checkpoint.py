"""Checkpoint folders: Hugging Face model files + tokenizer + trainer state + optimizer state, written atomically.

Layout of a folder:
    config.json, model.safetensors          (bert_core.model.hf.save_pretrained; loads in transformers as it is)
    tokenizer.json, vocab.txt, ...          (BertTokenizer.save)
    trainer_state.json                      (step, config, history, evals, data position, RNG states)
    optimizer.safetensors, optimizer.json   (AdamW tensors; hyperparameters and the tensor index)
Nothing is pickled: loading reads safetensors and JSON only, so a folder can never run code. A folder for sharing
(`store_checkpoint`) holds its weights in float16 and no optimizer state.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bert_core.errors import BertCoreError
from bert_core.model.files import (CHECKPOINT_FILES, OPTIMIZER_META, OPTIMIZER_TENSORS, TRAINER_STATE,
                                   folder_built_beside, read_json, recover_folder, require_checkpoint_folder,
                                   write_json)
from bert_core.model.hf import load_pretrained, read_state_dict, save_pretrained
from bert_core.model.tokenization import BertTokenizer


def rng_state_to_json(rng: dict) -> dict:
    """torch/cuda generator states (uint8 tensors) as plain lists of ints."""
    out: dict = {"torch": rng["torch"].tolist()}
    if rng.get("cuda") is not None:
        out["cuda"] = [s.tolist() for s in rng["cuda"]]
    return out


def rng_state_from_json(d: dict) -> dict:
    """The inverse of rng_state_to_json, for this machine's CUDA devices."""
    out: dict = {"torch": torch.tensor(d["torch"], dtype=torch.uint8)}
    if d.get("cuda") is not None and torch.cuda.is_available() and len(d["cuda"]) == torch.cuda.device_count():
        out["cuda"] = [torch.tensor(s, dtype=torch.uint8) for s in d["cuda"]]
    elif torch.cuda.is_available():
        out["cuda"] = None
    return out


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


def save_checkpoint(folder, model, tokenizer=None, trainer_state: dict | None = None, optimizer=None,
                    extra: dict | None = None, label_names=None) -> Path:
    """Write a checkpoint folder atomically, with `extra` JSON files beside it (e.g. metrics.json)."""
    with folder_built_beside(folder, errors=(SafetensorError,)) as tmp:
        save_pretrained(model, tmp, tokenizer=tokenizer, label_names=label_names)
        if optimizer is not None:
            save_optimizer_state(optimizer, tmp)
        if trainer_state is not None:
            write_json(tmp / TRAINER_STATE, trainer_state)
        for name, obj in (extra or {}).items():
            write_json(tmp / name, obj)
    return Path(folder)


def check_tokenizer_fits(tokenizer, config, folder) -> None:
    """Refuse a tokenizer with more ids than the model's embedding table: they would fail deep inside the model."""
    if tokenizer.vocab_size > config.vocab_size:
        raise BertCoreError(f"the tokenizer in {folder} has {tokenizer.vocab_size} tokens but the model only "
                            f"{config.vocab_size}: they do not belong together")


@dataclass
class Checkpoint:
    folder: Path
    model: Any
    tokenizer: Any
    trainer_state: dict | None


def load_checkpoint(folder, model_class=None, require_tokenizer: bool = False) -> Checkpoint:
    """Load model (safetensors), tokenizer and trainer state from a checkpoint folder; with `require_tokenizer`, a
    folder without one is refused (every command that reads text needs the tokenizer the model was trained with)."""
    folder = Path(folder)
    recover_folder(folder)
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


# ---------------------------------------------------------------------------------------------- folders for sharing
# A folder's weights stored in float16, half the bytes of float32, for the `export` command. Rounding float32
# weights to float16 (11 significant bits, a relative error of at most 2^-11) costs nothing measurable: far below
# what training moved each weight by (docs/shipped-model.md; the shipped tiny folders are stored so, the minis in
# bfloat16). Loaders compute in float32: ours copy into float32 parameters, and the folder's config says
# `"dtype": "float32"` for transformers 5, which otherwise loads in the weights' dtype.
#
# The dtypes a folder's weights can be stored in; a name is also what transformers' config "dtype" takes.
# float16 keeps 3 more significant bits than bfloat16 and is the default; bfloat16 keeps float32's range, for weights
# beyond float16's 65,504 (and the minis, which a GPU run packaged in bfloat16: storing them again changes nothing).
STORAGE_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
COMPUTE_DTYPE = "float32"   # what every loader should compute in: the folder's config says so
# Files a stored folder leaves out: optimizer state resumes a run, and a run would not resume exactly from rounded
# weights (`train --init-from` starts from a stored folder instead).
LEFT_OUT = frozenset({OPTIMIZER_TENSORS, OPTIMIZER_META})


def stored_state(state: dict[str, torch.Tensor], dtype: str) -> tuple[dict[str, torch.Tensor], dict]:
    """The floating tensors of `state` cast to `dtype`, and the rounding's largest absolute and relative change
    (over weights not subnormal). Refused: an unknown dtype, NaN or infinite weights, and weights beyond its range."""
    if dtype not in STORAGE_DTYPES:
        raise BertCoreError(f"unknown weight dtype {dtype!r}; choose one of {', '.join(STORAGE_DTYPES)}")
    target = STORAGE_DTYPES[dtype]
    info = torch.finfo(target)
    out, largest_abs, largest_rel, count = {}, 0.0, 0.0, 0
    for name, value in state.items():
        if not value.is_floating_point():
            out[name] = value.contiguous()
            continue
        wide = value.detach().to(torch.float64)
        if not bool(torch.isfinite(wide).all()):
            raise BertCoreError(f"weight {name} holds NaN or infinite values: the checkpoint is damaged (saved from "
                                "a run that diverged?); store an earlier checkpoint")
        peak = float(wide.abs().max()) if wide.numel() else 0.0
        if peak > info.max:
            raise BertCoreError(f"weight {name} reaches {peak:.4g}, beyond {dtype}'s largest value {info.max:.4g}: "
                                f"it cannot be stored as {dtype}; keep float32")
        narrow = value.detach().to(target).contiguous()
        change = (narrow.to(torch.float64) - wide).abs()
        normal = wide.abs() >= info.tiny
        largest_abs = max(largest_abs, float(change.max()) if change.numel() else 0.0)
        if bool(normal.any()):
            largest_rel = max(largest_rel, float((change[normal] / wide.abs()[normal]).max()))
        out[name] = narrow
        count += value.numel()
    return out, {"dtype": dtype, "floating_weights": count, "largest_abs_change": largest_abs,
                 "largest_rel_change": largest_rel}


def _config_for_loaders(source: Path) -> dict:
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))  # require_checkpoint_folder read it
    config.pop("torch_dtype", None)   # transformers 4's name for the same key
    config["dtype"] = COMPUTE_DTYPE
    return config


def store_checkpoint(source, out, dtype: str = "float16", check=None) -> dict:
    """Write the checkpoint folder `source` to `out` (which may be `source`) with its weights stored in `dtype`;
    returns the record kept under "stored_weights" in its metrics.json. `check(tmp_folder, record)` runs on the
    finished folder before it replaces `out` (whole, so a failure leaves `out` as it was); it may add to the record."""
    source = require_checkpoint_folder(source)
    state = read_state_dict(source)
    stored, record = stored_state(state, dtype)
    before = (source / "model.safetensors").stat().st_size if (source / "model.safetensors").is_file() else None
    with folder_built_beside(out, owned=CHECKPOINT_FILES) as tmp:
        for entry in sorted(source.iterdir()):
            if entry.is_file() and entry.name in CHECKPOINT_FILES - LEFT_OUT - {"config.json", "model.safetensors"}:
                shutil.copy2(entry, tmp / entry.name)
        (tmp / "config.json").write_text(json.dumps(_config_for_loaders(source), indent=2) + "\n")  # as BertConfig.save
        save_file(stored, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        record.update(bytes_before=before, bytes_after=(tmp / "model.safetensors").stat().st_size)
        if check is not None:
            check(tmp, record)
        metrics_path = tmp / "metrics.json"
        if metrics_path.is_file():
            metrics = read_json(metrics_path)
            if isinstance(metrics, dict):
                metrics["stored_weights"] = record
                write_json(metrics_path, metrics)
    return record
