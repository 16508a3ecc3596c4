"""Reading and writing Hugging Face BERT checkpoint folders (config.json + model.safetensors) with our model classes.

A folder we save loads in `transformers.BertForPreTraining.from_pretrained(folder)` (or
`BertForSequenceClassification`) as it is, and a Hugging Face BERT folder (e.g. a user's bert-base-uncased
download, safetensors or a `pytorch_model.bin` read with `weights_only=True`) loads into ours.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from bert_core.config import BertConfig
from bert_core.errors import BertCoreError
from bert_core.model import BertForPreTraining, BertForSequenceClassification

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Tied parameters are stored once, under the embedding / bias name, as Hugging Face's save_pretrained does.
TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")


def is_checkpoint_folder(folder: str | Path) -> bool:
    """True when `folder` holds a config.json and one of the weight files."""
    folder = Path(folder)
    return (folder / "config.json").is_file() and any((folder / f).is_file() for f in WEIGHT_FILES)


def save_pretrained(model: nn.Module, folder: str | Path, tokenizer=None, label_names=None) -> Path:
    """Write config.json + model.safetensors (+ tokenizer files) into `folder`; Hugging Face loads it as is."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    extra = {}
    if isinstance(model, BertForSequenceClassification):
        names = list(label_names) if label_names is not None else [f"LABEL_{i}" for i in range(model.num_labels)]
        if len(names) != model.num_labels:
            raise BertCoreError(f"{len(names)} label names for a classifier with {model.num_labels} labels")
        extra = {
            "architectures": ["BertForSequenceClassification"],
            "id2label": {str(i): n for i, n in enumerate(names)},
            "label2id": {n: i for i, n in enumerate(names)},
        }
    model.config.save(folder, extra)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in TIED_KEYS}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save(folder)
    return folder


# Names used by older BERT checkpoints (TF conversions) for what is now LayerNorm.weight / LayerNorm.bias.
_LEGACY = [(re.compile(r"LayerNorm\.gamma$"), "LayerNorm.weight"), (re.compile(r"LayerNorm\.beta$"), "LayerNorm.bias")]


def read_state_dict(folder: str | Path) -> dict[str, torch.Tensor]:
    """Read a checkpoint's tensors: model.safetensors, else pytorch_model.bin with weights_only=True (no pickled code)."""
    folder = Path(folder)
    st_path, bin_path = folder / "model.safetensors", folder / "pytorch_model.bin"
    try:
        if st_path.is_file():
            state = load_file(str(st_path))
        elif bin_path.is_file():
            state = torch.load(bin_path, map_location="cpu", weights_only=True)
        else:
            raise BertCoreError(f"{folder} has no model.safetensors or pytorch_model.bin: not a checkpoint folder")
    except (SafetensorError, RuntimeError, OSError) as exc:
        raise BertCoreError(f"could not read the weights in {folder}: {exc}") from None
    if not isinstance(state, dict):
        raise BertCoreError(f"the weights file in {folder} does not hold a dictionary of tensors")
    renamed = {}
    for key, value in state.items():
        for pattern, new in _LEGACY:
            key = pattern.sub(new, key)
        renamed[key] = value
    return renamed


def _label_names(folder: Path) -> list[str] | None:
    raw = json.loads((folder / "config.json").read_text())
    id2label = raw.get("id2label")
    if not id2label or raw.get("architectures") != ["BertForSequenceClassification"]:
        return None
    return [id2label[k] for k in sorted(id2label, key=int)]


def load_pretrained(folder: str | Path, model_class=BertForPreTraining, num_labels: int | None = None,
                    strict_heads: bool = False) -> nn.Module:
    """Load a checkpoint folder (ours or Hugging Face's) into `model_class`, in eval mode.

    Encoder weights must all be present; head weights missing from the folder (a bare `BertModel` checkpoint, or
    a fresh classifier on a pretraining checkpoint) keep their BERT initialisation unless `strict_heads` is set.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise BertCoreError(f"{folder} is not a folder")
    if not is_checkpoint_folder(folder):
        raise BertCoreError(f"{folder} is not a checkpoint folder: it needs config.json and model.safetensors "
                            "(or pytorch_model.bin)")
    config = BertConfig.load(folder)
    if model_class is BertForSequenceClassification:
        names = _label_names(folder)
        if num_labels is None:
            num_labels = len(names) if names else 2
        model = BertForSequenceClassification(config, num_labels)
        model.label_names = names if names and len(names) == num_labels else None
    else:
        model = model_class(config)
    state = read_state_dict(folder)
    if not any(k.startswith("bert.") for k in state):
        state = {"bert." + k: v for k, v in state.items()}  # a bare BertModel checkpoint
    expected = model.state_dict()
    if isinstance(model, BertForSequenceClassification) and state.get("classifier.weight") is not None \
            and state["classifier.weight"].shape != expected["classifier.weight"].shape:
        # A classifier with another label count: keep its encoder, start a fresh head.
        state = {k: v for k, v in state.items() if not k.startswith("classifier.")}
    usable = {k: v for k, v in state.items() if k in expected}
    for key, value in usable.items():
        if value.shape != expected[key].shape:
            raise BertCoreError(f"weight {key} has shape {tuple(value.shape)} in {folder} but the config "
                                f"implies {tuple(expected[key].shape)}")
    missing = [k for k in expected if k not in usable and k not in TIED_KEYS]
    encoder_missing = [k for k in missing if k.startswith("bert.") and not k.startswith("bert.pooler.")]
    if encoder_missing or (strict_heads and missing):
        shown = ", ".join((encoder_missing or missing)[:5])
        raise BertCoreError(f"{folder} lacks {len(encoder_missing or missing)} weight(s) the model needs, e.g. {shown}")
    model.load_state_dict(usable, strict=False)
    model.missing_keys = missing  # for the UI: which heads were freshly initialised
    model.eval()
    return model
