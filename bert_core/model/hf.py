"""Hugging Face BERT folders (config.json + model.safetensors) read and written with our model classes: a folder we
save loads in transformers' class of the same name as it is, and a Hugging Face BERT folder (a bert-base-uncased
download; safetensors, or a `pytorch_model.bin` read with `weights_only=True`) loads into ours.
"""

from __future__ import annotations

import json
import pickle
import re
import warnings
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import load_file, save_file
from torch import nn
from torch.overrides import TorchFunctionMode

from bert_core.errors import BertCoreError
from bert_core.model.bert import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertLMHeadModel,
    pretraining_model,
)
from bert_core.model.config import BertConfig
from bert_core.model.files import CONVERT_PICKLE, require_checkpoint_folder

FINETUNE_HEADS = (BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering)
# Tied parameters are stored once, under the embedding / bias name, as Hugging Face's save_pretrained does.
TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")


class _NoInit(TorchFunctionMode):
    """Within it (on this thread only: torch's function modes are thread-local), the initialisers leave their
    tensor as it is. On the meta device they would do no work, yet the first one imports torch._dynamo: 3 to 4 s
    that the first page to take a live run's copy waited (issue 74)."""

    SKIPPED = frozenset({"normal_", "uniform_", "zero_", "zeros_", "ones_", "fill_", "constant_", "trunc_normal_",
                         "kaiming_uniform_", "xavier_uniform_"})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # A mode sees every callable torch dispatches, and not all have a name (a partial, a C++ overload).
        if getattr(func, "__name__", "") in self.SKIPPED:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def pretraining_model_from_bytes(config: BertConfig, blob: bytes) -> nn.Module:
    """A pretraining model of `config` holding the state dict that safetensors.torch.save wrote into `blob` (a
    training process's weights, sent to the server). Built on the meta device and given the blob's tensors as they
    are: a random initialisation that every weight then overwrote was most of the cost of the live run's copy that
    a class watching it shares (docs/benchmarks.md, issue 74)."""
    with torch.device("meta"), _NoInit():
        model = pretraining_model(config)
    tied = {}   # a parameter under several names (the decoder's weight and bias): one again after the load
    for name, param in model.named_parameters(remove_duplicate=False):
        tied.setdefault(id(param), []).append(name)
    model.load_state_dict(load_safetensors_bytes(blob), assign=True)   # strict: the blob holds every weight
    for first, *others in tied.values():
        for name in others:
            owner, _, attr = name.rpartition(".")
            setattr(model.get_submodule(owner), attr, model.get_parameter(first))
    return model


def save_pretrained(model: nn.Module, folder: str | Path, tokenizer=None, label_names=None) -> Path:
    """Write config.json + model.safetensors (+ tokenizer files) into `folder`; Hugging Face loads it as is."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    extra = {}
    if isinstance(model, (BertForSequenceClassification, BertForTokenClassification)):
        names = list(label_names) if label_names is not None else [f"LABEL_{i}" for i in range(model.num_labels)]
        if len(names) != model.num_labels:
            what, of = (("label names for a classifier", "labels") if isinstance(model, BertForSequenceClassification)
                        else ("tag names for a tagger", "tags"))
            raise BertCoreError(f"{len(names)} {what} with {model.num_labels} {of}")
        extra = {"id2label": {str(i): n for i, n in enumerate(names)}, "label2id": {n: i for i, n in enumerate(names)}}
    if isinstance(model, BertForSequenceClassification):
        # Ours, not Hugging Face's: which vector the classifier reads (model.LAST_TOKEN_POOLING). transformers'
        # BertForSequenceClassification always reads [CLS] through the pooler, so a "last" classifier loads there
        # with a fresh pooler (reported missing) and different logits: it loads as trained only here.
        extra["classifier_pooling"] = model.pooling
    if isinstance(model, (*FINETUNE_HEADS, BertLMHeadModel)):   # transformers builds the class it names
        extra = {"architectures": [type(model).__name__], **extra}
    model.config.save(folder, extra)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in TIED_KEYS}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save(folder)
    return folder


# Names used by older BERT checkpoints (TF conversions) for what is now LayerNorm.weight / LayerNorm.bias.
_LEGACY = {"LayerNorm.gamma": "LayerNorm.weight", "LayerNorm.beta": "LayerNorm.bias"}
_LEGACY_END = re.compile("(?:" + "|".join(map(re.escape, _LEGACY)) + ")$")   # from its keys: the two cannot disagree


def read_state_dict(folder: str | Path) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors: model.safetensors, else pytorch_model.bin with weights_only=True (no pickled code)."""
    folder = Path(folder)
    st_path, bin_path = folder / "model.safetensors", folder / "pytorch_model.bin"
    if st_path.is_file():
        try:
            state = load_file(str(st_path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise BertCoreError(f"could not read {st_path}: {exc}; the file is damaged or not safetensors") from None
    elif bin_path.is_file():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch warns about pickle protocols on stderr before refusing
                state = torch.load(bin_path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            text = " ".join(str(exc).split())
            found = re.search(r"WeightsUnpickler error: (.*?)(?: Check the documentation|$)", text)
            reason = (found.group(1) if found else text)[:200] or type(exc).__name__
            raise BertCoreError(f"{bin_path} holds more than tensors, so torch.load(..., weights_only=True) refused "
                                f"it ({reason}); a pickle can run code, so it is not loaded otherwise: "
                                f"{CONVERT_PICKLE}") from None
        except Exception as exc:  # noqa: BLE001 - torch raises many types on a damaged file; none may escape as a trace
            raise BertCoreError(f"could not read {bin_path} with torch.load(..., weights_only=True) "
                                f"({type(exc).__name__}: {exc}); the file is damaged, or {CONVERT_PICKLE}") from None
    else:
        raise BertCoreError(f"{folder} has no model.safetensors or pytorch_model.bin: not a checkpoint folder")
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise BertCoreError(f"the weights file in {folder} does not hold a dictionary of named tensors")
    return {_LEGACY_END.sub(lambda m: _LEGACY[m.group(0)], key): value for key, value in state.items()}


def _label_names(raw: dict, model_class) -> list[str] | None:
    """The label (or tag) names in a config.json (`raw`) saved with `model_class`; None for another kind."""
    id2label = raw.get("id2label")
    if not id2label or raw.get("architectures") != [model_class.__name__]:
        return None
    try:
        return [str(id2label[k]) for k in sorted(id2label, key=int)]
    except (TypeError, ValueError, AttributeError):
        return None  # label names that are not {"0": name, ...}: the classifier keeps generic LABEL_i names


def load_pretrained(folder: str | Path, model_class=None, num_labels: int | None = None,
                    strict_heads: bool = False, pooling: str | None = None) -> nn.Module:
    """A checkpoint folder (ours or Hugging Face's) loaded into `model_class` (default: the folder's pretraining
    class), in eval mode. Encoder weights must all be there; missing head weights (a bare `BertModel` folder, a new
    classifier) keep their initialisation unless `strict_heads`. `pooling`: a sentence classifier's reading
    (model.POOLING_KINDS; default: the folder's, else its kind's)."""
    folder = require_checkpoint_folder(folder)
    config = BertConfig.load(folder)  # validated, its memory included, before any tensor is allocated
    raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))  # what BertConfig keeps not: the heads'
    if model_class in (BertForSequenceClassification, BertForTokenClassification):
        names = _label_names(raw, model_class)
        if num_labels is None:
            num_labels = len(names) if names else 2
        if model_class is BertForTokenClassification:
            model = BertForTokenClassification(config, num_labels)
        else:   # the reading a saved classifier was trained with; else (a pretraining folder) its kind's default
            saved = raw.get("classifier_pooling") if raw.get("architectures") == [model_class.__name__] else None
            model = BertForSequenceClassification(config, num_labels,
                                                  pooling or (saved if isinstance(saved, str) else None))
        model.label_names = names if names and len(names) == num_labels else None
    else:
        model = pretraining_model(config) if model_class is None else model_class(config)
    state = read_state_dict(folder)
    if not any(k.startswith("bert.") for k in state):
        state = {"bert." + k: v for k, v in state.items()}  # a bare BertModel checkpoint
    expected = model.state_dict()
    if isinstance(model, FINETUNE_HEADS) and raw.get("architectures") != [type(model).__name__]:
        # A fine-tuning head is only taken from a folder of the same kind: a sentence classifier's
        # `classifier.weight` has a tagger's name and maybe its shape, not its meaning.
        state = {k: v for k, v in state.items() if k.startswith("bert.")}
    if isinstance(model, (BertForSequenceClassification, BertForTokenClassification)) \
            and state.get("classifier.weight") is not None \
            and state["classifier.weight"].shape != expected["classifier.weight"].shape:
        # A classifier (or tagger) with another label count: keep its encoder, start a fresh head.
        state = {k: v for k, v in state.items() if not k.startswith("classifier.")}
    usable = {k: v for k, v in state.items() if k in expected}
    for key, value in usable.items():
        if value.shape != expected[key].shape:
            raise BertCoreError(f"weight {key} has shape {tuple(value.shape)} in {folder} but the config "
                                f"implies {tuple(expected[key].shape)}")
        # A diverged run's weights would only give NaN predictions (and NaN losses on resume): refused by name.
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise BertCoreError(f"weight {key} in {folder} holds NaN or infinite values: the checkpoint is damaged "
                                "(saved from a run that diverged?); use an earlier checkpoint")
    missing = [k for k in expected if k not in usable and k not in TIED_KEYS]
    encoder_missing = [k for k in missing if k.startswith("bert.") and not k.startswith("bert.pooler.")]
    if encoder_missing or (strict_heads and missing):
        shown = ", ".join((encoder_missing or missing)[:5])
        raise BertCoreError(f"{folder} lacks {len(encoder_missing or missing)} weight(s) the model needs, e.g. {shown}")
    model.load_state_dict(usable, strict=False)
    model.missing_keys = missing  # for the UI: which heads were freshly initialised
    model.eval()
    return model
