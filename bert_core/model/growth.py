"""Growing a trained BERT into a wider and deeper one, so a bigger model starts where a smaller one got to.

Width (Net2Net, Chen, Goodfellow and Shlens 2016; bert2BERT, Chen et al. 2022): every hidden, intermediate and
attention unit is copied `factor` times. A layer that reads copied units splits each weight among the copies at
random (the shares of one weight sum to 1), so the wider model computes exactly the small model's function:
- the residual stream of the grown model is the small one's repeated `factor` times, so LayerNorm sees the same
  mean and variance and its output is repeated too;
- the heads are repeated with the hidden units (the head size stays), so each copy of a head attends as its original;
- the tied output embeddings would multiply the logits by `factor`, so the MLM head's LayerNorm is scaled by
  1 / factor.
The random shares (not an even 1 / factor) make the copies differ in what they pass on, so their gradients differ
and training pulls them apart; even shares would leave them copies forever.

Depth (progressive stacking, Gong et al. 2019): the grown layers are the trained ones repeated in order
(2 -> 4 layers gives 0, 1, 0, 1). This is not function-preserving: the shipped model stacked to 4 layers starts
at 2.4% masked-token accuracy (from 33%) but is back at 28% after 300 steps, where a deep model from random weights
is still at the unigram line (docs/benchmarks.md, "Growing mini from the trained tiny").

Everything else (vocabulary, positions, head size, activation, the objective) stays the small model's.

Length (Beltagy, Peters and Cohan 2020, Longformer): a model trained on sequences of N tokens has never trained its
positions from N on. Continuing it at a longer length, as BERT's paper did (128 then 512), can start those positions
as copies of the trained ones, repeated in order, instead of their initial random values: the model then reads a
longer sequence as a run of the windows it knows, and learns the rest from there (`copy_trained_positions`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from bert_core.errors import BertCoreError
from bert_core.model.checkpoint import load_checkpoint
from bert_core.model.config import BertConfig
from bert_core.model.files import read_json, write_json
from bert_core.model.hf import save_pretrained

# How unevenly one weight is shared among its copies: each share is (1 + u) / factor with u in [-SPLIT_NOISE,
# SPLIT_NOISE] and the shares' mean removed, so they still sum to 1.
SPLIT_NOISE = 0.5

_LAYER = re.compile(r"^(bert\.encoder\.layer\.)(\d+)(\..*)$")


def grown_config(small: BertConfig, hidden_size: int, num_hidden_layers: int) -> BertConfig:
    """The grown model's config: `small`'s, `factor` times wider (heads included) and with the layers asked for."""
    if hidden_size % small.hidden_size or hidden_size < small.hidden_size:
        raise BertCoreError(f"a model of hidden size {small.hidden_size} grows to a whole multiple of it, "
                            f"not {hidden_size}")
    if num_hidden_layers < small.num_hidden_layers or num_hidden_layers % small.num_hidden_layers:
        raise BertCoreError(f"{small.num_hidden_layers} layers grow to a whole multiple of them, "
                            f"not {num_hidden_layers}")
    factor = hidden_size // small.hidden_size
    return small.replace(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                         num_attention_heads=small.num_attention_heads * factor,
                         intermediate_size=small.intermediate_size * factor)


def _shares(shape: tuple[int, ...], factor: int, generator: torch.Generator) -> torch.Tensor:
    """`factor` random shares of each weight of `shape` that sum to exactly 1 per weight."""
    u = (torch.rand((factor, *shape), generator=generator, dtype=torch.float64) * 2 - 1) * SPLIT_NOISE
    shares = (1 + u - u.mean(dim=0, keepdim=True)) / factor
    shares[-1] = 1 - shares[:-1].sum(dim=0)  # the last takes the rounding, so the sum is 1 in float64
    return shares


def _widen(name: str, w: torch.Tensor, factor: int, generator: torch.Generator) -> torch.Tensor:
    """One tensor of the small model as the wide model holds it (see the module's docstring)."""
    if not name.startswith(("bert.", "cls.")):
        raise BertCoreError(f"only a pretraining checkpoint grows (BERT or GPT-style); {name!r} is a fine-tuned head")
    w64 = w.double()
    if name.endswith("embeddings.weight") or name == "cls.predictions.decoder.weight":
        out = w64.repeat(1, factor)  # (vocabulary, positions or token types) x hidden: the rows stay
    elif name in ("cls.predictions.bias", "cls.predictions.decoder.bias") or name == "cls.seq_relationship.bias":
        out = w64.clone()  # one per word or NSP label
    elif name.startswith("cls.predictions.transform.LayerNorm"):
        out = w64.repeat(factor) / factor  # the tied decoder reads factor copies: scale each back
    elif w.dim() == 1:  # the biases and LayerNorm parameters of repeated units
        out = w64.repeat(factor)
    else:  # a Linear weight (out, in): repeat the output units (not NSP's two labels), split inputs among copies
        out_factor = 1 if name.startswith("cls.seq_relationship") else factor
        tall = w64.repeat(out_factor, 1)
        shares = _shares(tuple(tall.shape), factor, generator)
        out = torch.cat([tall * shares[i] for i in range(factor)], dim=1)
    return out.to(w.dtype)


def grow_state_dict(state: dict[str, torch.Tensor], small: BertConfig, hidden_size: int, num_hidden_layers: int,
                    seed: int = 0) -> tuple[dict[str, torch.Tensor], BertConfig]:
    """(the grown state dict, its config) from a small model's Hugging Face state dict (any pretraining class)."""
    big = grown_config(small, hidden_size, num_hidden_layers)
    factor = hidden_size // small.hidden_size
    generator = torch.Generator().manual_seed(seed)
    wide = {name: _widen(name, w, factor, generator) for name, w in sorted(state.items())}
    grown: dict[str, torch.Tensor] = {}
    for name, w in wide.items():
        m = _LAYER.match(name)
        if not m:
            grown[name] = w
            continue
        layer = int(m.group(2))
        for copy in range(num_hidden_layers // small.num_hidden_layers):
            grown[f"{m.group(1)}{layer + copy * small.num_hidden_layers}{m.group(3)}"] = w.clone()
    return grown, big


def grow_model(model: torch.nn.Module, target: BertConfig, seed: int = 0) -> torch.nn.Module:
    """A new model of `target`'s size grown from `model` (in memory, the same class and device): what a run that
    starts small (`TrainConfig.grow_fraction`) trains on with."""
    state = {name: w.detach().to("cpu", torch.float32) for name, w in model.state_dict().items()}
    grown, config = grow_state_dict(state, model.config, target.hidden_size, target.num_hidden_layers, seed=seed)
    if config.replace(initializer_range=target.initializer_range) != target:
        raise BertCoreError(f"{model.config.num_hidden_layers} x {model.config.hidden_size} does not grow into the "
                            "model asked for (its heads, feed-forward or other settings differ)")
    device = next(model.parameters()).device
    big = type(model)(target)
    big.load_state_dict(grown)  # strict: every key of the grown model, and no other
    return big.to(device)


def repeated_positions(table: torch.Tensor, trained_length: int) -> torch.Tensor:
    """A position table whose row p is row p mod trained_length of `table`: the trained rows, repeated in order."""
    if trained_length < 1:
        raise BertCoreError(f"a trained length of {trained_length} positions cannot seed the others")
    reps = -(-table.shape[0] // trained_length)
    return table[:trained_length].repeat(reps, 1)[:table.shape[0]]


def copy_trained_positions(model: torch.nn.Module, trained_length: int) -> int:
    """Overwrite, in place, the position embeddings from `trained_length` on with the trained ones repeated in
    order; returns how many were overwritten."""
    table = model.bert.embeddings.position_embeddings.weight
    if trained_length >= table.shape[0]:   # nothing past the trained rows (a length below 1 raises below)
        return 0
    with torch.no_grad():
        table[trained_length:] = repeated_positions(table, trained_length)[trained_length:]
    return table.shape[0] - trained_length


GROWTH_RECORD = "growth.json"


def grow_checkpoint(source, out, hidden_size: int, num_hidden_layers: int, seed: int = 0,
                    pretraining_rate: float | None = None, heldout: dict | None = None) -> dict:
    """Write the grown model of the checkpoint folder `source` (with its tokenizer) into the new folder `out`, and
    return what was done (growth.json); `train --init-from out` trains it on. What the source recorded of its
    weights' history goes along, since the grown folder has no trainer state: `pretraining_rate`, the highest rate
    behind them, for the fine-tuning rule (grown_pretraining_rate), and `heldout`, the documents they never saw,
    so that a run continuing the folder keeps them out of training and `heldout` can write them out."""
    ckpt = load_checkpoint(source, require_tokenizer=True)
    small = ckpt.model
    config = grown_config(small.config, hidden_size, num_hidden_layers)
    save_pretrained(grow_model(small, config, seed=seed), out, tokenizer=ckpt.tokenizer)
    record = {"grown_from": str(source), "from_size": {"hidden_size": small.config.hidden_size,
                                                     "num_hidden_layers": small.config.num_hidden_layers},
              "hidden_size": hidden_size, "num_hidden_layers": num_hidden_layers,
              "num_attention_heads": config.num_attention_heads, "seed": seed,
              "method": "width: Net2Net copies with random shares (function-preserving); depth: progressive "
                        "stacking (Gong et al. 2019)"}
    if pretraining_rate is not None:
        record["pretraining_rate"] = pretraining_rate
    if heldout is not None:
        record["heldout"] = heldout
    write_json(Path(out) / GROWTH_RECORD, record)
    return record


def growth_record(folder) -> dict:
    """What `grow` recorded in a folder it wrote (growth.json); {} for any other folder or an unreadable record."""
    path = Path(folder) / GROWTH_RECORD
    try:
        record = read_json(path) if path.is_file() else None
    except BertCoreError:
        return {}
    return record if isinstance(record, dict) else {}


def grown_pretraining_rate(folder) -> float | None:
    """The rate a grown folder's weights learnt at, as `grow` recorded it: the folder has no trainer_state.json, and
    its weights are its source's, copied and repeated, so the fine-tuning rule (finetune.finetune_learning_rate)
    and a `train --init-from` of it go by the source's rate. Without it the rule falls back to the size alone,
    4x below: the mini widened to 512 fine-tuned at 6.25e-5 where 2.5e-4 suits it (docs/benchmarks.md, "A larger
    size"). None for a folder `grow` did not write, or a record that cannot be read."""
    rate = growth_record(folder).get("pretraining_rate")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        return None
    return float(rate)
