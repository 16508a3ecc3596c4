"""Checkpoint folders: Hugging Face model files + tokenizer + trainer state + optimizer state, written atomically.

Layout of a folder:
    config.json, model.safetensors          (bert_core.model.hf.save_pretrained; loads in transformers as it is)
    tokenizer.json, vocab.txt, ...          (BertTokenizer.save)
    trainer_state.json                      (step, config, history, evals, data position, RNG states)
    optimizer.safetensors, optimizer.json   (AdamW tensors; hyperparameters and the tensor index)
Nothing is pickled: loading reads safetensors and JSON only, so a folder can never run code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bert_core.errors import BertCoreError
from bert_core.model.files import (OPTIMIZER_META, OPTIMIZER_TENSORS, TRAINER_STATE, folder_built_beside, read_json,
                                   recover_folder, require_checkpoint_folder, write_json)
from bert_core.model.hf import load_pretrained, save_pretrained
from bert_core.model.tokenization import BertTokenizer


def rng_state_to_json(rng: dict) -> dict:
    """torch/cuda generator states (uint8 tensors) as plain lists of ints."""
    out: dict = {"torch": rng["torch"].tolist()}
    if rng.get("cuda") is not None:
        out["cuda"] = [s.tolist() for s in rng["cuda"]]
    return out


def rng_state_from_json(d: dict) -> dict:
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
    """Write a checkpoint folder atomically (files.folder_built_beside). `extra` maps file names to JSON-able
    objects written beside the rest (e.g. metrics.json); `label_names` are a classifier's."""
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
