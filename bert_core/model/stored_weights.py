"""A checkpoint folder for sharing: its weights stored in float16, half the bytes of float32.

A model that trained in float32 (or bf16 autocast over float32 weights) loses nothing measurable when its weights
are rounded to float16 for storage: float16 keeps 11 significant bits, a relative rounding error of at most 2^-11,
far below what training moved each weight by. The shipped tiny folders are stored so, which halved them
(docs/shipped-model.md measures the held-out cost: none); the minis were packaged in bfloat16 before this existed.

Loading casts back: bert_core's models hold float32 parameters, and `load_state_dict` copies float16 values into
them. transformers 5 loads a folder in the dtype its config names, else in its weights' dtype, so the folder's
config says `"dtype": "float32"`: the dtype to compute in, which the model trained in.

Only the weights change. The optimizer state is left out: a stored folder is for using and sharing, and a resume
from rounded weights would not be exact (`train --init-from` starts from it).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from bert_core.errors import BertCoreError
from bert_core.model.files import (CHECKPOINT_FILES, OPTIMIZER_META, OPTIMIZER_TENSORS, folder_built_beside, read_json,
                                   require_checkpoint_folder, write_json)
from bert_core.model.hf import read_state_dict

# The dtypes a folder's weights can be stored in; a name is also what transformers' config "dtype" takes.
# float16 keeps 3 more significant bits than bfloat16 and is the default; bfloat16 keeps float32's range, for weights
# beyond float16's 65,504 (and the minis, which a GPU run packaged in bfloat16: storing them again changes nothing).
STORAGE_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
COMPUTE_DTYPE = "float32"   # what every loader should compute in: the folder's config says so
# Files a stored folder leaves out: optimizer state resumes a run, and it would not resume exactly from rounded weights.
LEFT_OUT = frozenset({OPTIMIZER_TENSORS, OPTIMIZER_META})


def stored_state(state: dict[str, torch.Tensor], dtype: str) -> tuple[dict[str, torch.Tensor], dict]:
    """The floating tensors of `state` cast to `dtype` (others as they are), and what the rounding did: the largest
    absolute change and the largest change relative to a weight's magnitude, over weights not in the subnormal range.

    Refused: an unknown dtype, NaN or infinite weights, and weights beyond the dtype's range (they would become inf).
    """
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
    """Write the checkpoint folder `source` to `out` with its weights stored in `dtype`; returns the record that
    goes under "stored_weights" in the new folder's metrics.json (when the source has one).

    The folder is put together beside `out` and moved into place whole, so `out` may be `source` itself, and a
    failure (a full disk, a refused weight, a failing `check`) leaves `out` as it was. `check(tmp_folder, record)`,
    when given, runs on the finished folder before it replaces `out`; it may add to the record.
    """
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
