"""`BertConfig`: the model's hyperparameters under Hugging Face's config.json key names, plus named presets."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from bert_core.errors import BertCoreError

# Sizes from Turc et al. (2019), "Well-Read Students Learn Better" (the official small BERTs), and BERT-base.
# L = layers, H = hidden size, A = attention heads; the feed-forward size is always 4H.
PRESETS: dict[str, dict[str, int]] = {
    "nano": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2),
    "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2),
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4),
    "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8),
    "medium": dict(num_hidden_layers=8, hidden_size=512, num_attention_heads=8),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12),
}

# Sanity limits on a run's settings (not tuning advice): the CLI's argument types and the configs both check them.
MAX_SEED = 2**32 - 1  # numpy's legacy seeding takes 32 bits; torch and random take more
MAX_BATCH = 65536
MAX_SEQ_LEN = 8192

# BERT's feed-forward layer is four times as wide as the hidden size (Vaswani et al.; every BERT size keeps it).
FEED_FORWARD_MULTIPLE = 4


def feed_forward_width(hidden_size: int) -> int:
    return FEED_FORWARD_MULTIPLE * hidden_size


# Sizes far beyond any published BERT (the largest: vocabularies of 250k, hidden 4096, 48 layers, 8192 positions).
# A value past them is a typo or a damaged config.json; refusing it names the field, where the memory check
# below would only name the total.
SIZE_LIMITS = {
    "vocab_size": 2**22,
    "hidden_size": 2**15,
    "num_hidden_layers": 512,
    "num_attention_heads": 2**12,
    "intermediate_size": 2**17,
    "max_position_embeddings": 2**17,
    "type_vocab_size": 2**10,
}
WEIGHT_BYTES = 4  # fp32
# Loading holds the weights twice for a moment (the tensors read from the file and the model's own); training
# holds weights, gradients and AdamW's two moments.
LOAD_BYTES_PER_PARAMETER = 2 * WEIGHT_BYTES
TRAIN_BYTES_PER_PARAMETER = 4 * WEIGHT_BYTES
# Share of the machine's memory a model may claim: the rest is for the data, the tokenizer, Python and the OS.
MEMORY_FRACTION = 0.8

ATTENTION_KINDS = ("bidirectional", "causal")
SUPPORTED_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")


@dataclass(frozen=True)
class BertConfig:
    """BERT's hyperparameters; the field names are exactly the keys of a Hugging Face BERT `config.json`."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    # Teaching switch, not in the BERT paper: "causal" gives every token a GPT-style mask (it sees only
    # itself and the tokens before it), so a student can compare what each kind of attention learns.
    attention: str = "bidirectional"

    def __post_init__(self) -> None:
        for name, limit in SIZE_LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise BertCoreError(f"{name} must be a positive whole number, got {value!r}")
            if value > limit:
                raise BertCoreError(f"{name} is {value:,}, beyond any BERT (at most {limit:,} here); "
                                    "check the size settings or the config.json")
        if self.hidden_size % self.num_attention_heads:
            raise BertCoreError(f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                                f"({self.num_attention_heads}): each head gets hidden_size / heads dimensions")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise BertCoreError(f"{name} must be in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise BertCoreError(f"{name} must be a positive finite number, got {value!r}")
        if isinstance(self.pad_token_id, bool) or not isinstance(self.pad_token_id, int) \
                or not 0 <= self.pad_token_id < self.vocab_size:
            raise BertCoreError(f"pad_token_id ({self.pad_token_id}) must be a token id below vocab_size "
                                f"({self.vocab_size})")
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            raise BertCoreError(f"hidden_act must be one of {', '.join(SUPPORTED_ACTIVATIONS)}, got "
                                f"{self.hidden_act!r}")
        if self.attention not in ATTENTION_KINDS:
            raise BertCoreError(f"attention must be 'bidirectional' or 'causal', got {self.attention!r}")
        self.check_memory()

    def num_parameters(self) -> int:
        """Parameters of a BertForPreTraining of this size (the decoder weight is tied to the word embeddings)."""
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        embeddings = (v + self.max_position_embeddings + self.type_vocab_size) * h + 2 * h
        layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
        heads = (h * h + h) + (h * h + h) + 2 * h + v + (2 * h + 2)  # pooler, MLM transform + bias, NSP
        return embeddings + self.num_hidden_layers * layer + heads

    def check_memory(self, training: bool = False, batch_size: int = 0, seq_len: int = 0) -> None:
        """Refuse a size whose weights (and, when `training`, gradients, AdamW state and the activations of a
        `batch_size` x `seq_len` step) would not fit in this machine's memory, before anything is allocated."""
        params = self.num_parameters()
        need = params * (TRAIN_BYTES_PER_PARAMETER if training else LOAD_BYTES_PER_PARAMETER)
        if training and batch_size and seq_len:
            need += activation_bytes(self, batch_size, seq_len)
        limit = machine_memory_bytes()
        if limit is not None and need > MEMORY_FRACTION * limit:
            what = "training" if training else "loading"
            raise BertCoreError(f"this model has {params:,} parameters; {what} it needs about {_gb(need)}, more than "
                                f"{MEMORY_FRACTION:.0%} of this machine's {_gb(limit)} of memory: choose a smaller "
                                f"size (hidden_size {self.hidden_size}, {self.num_hidden_layers} layers, vocab_size "
                                f"{self.vocab_size:,}, max_position_embeddings {self.max_position_embeddings:,})"
                                + (" or a smaller batch / sequence length" if training and batch_size else ""))

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def replace(self, **changes) -> "BertConfig":
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise BertCoreError(f"unknown BertConfig field(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)

    def growth_start(self, hidden_size: int, num_hidden_layers: int) -> "BertConfig":
        """The narrower, shallower model that grows into this one (`TrainConfig.grow_fraction`;
        bert_core.model.growth): heads of this model's size (fewer of them), its feed-forward ratio, and an initial
        std wider by the width rule (muP's fan-in: std ~ 1/sqrt(hidden)), as a model of that width starts."""
        if (hidden_size, num_hidden_layers) == (self.hidden_size, self.num_hidden_layers):
            raise BertCoreError(f"a {num_hidden_layers} x {hidden_size} model is already that size: there is nothing "
                                "to grow (grow_fraction 0)")
        if self.hidden_size % hidden_size or self.num_hidden_layers % num_hidden_layers:
            raise BertCoreError(f"a {self.num_hidden_layers} x {self.hidden_size} model grows from a size that "
                                f"divides it, not {num_hidden_layers} x {hidden_size}")
        factor = self.hidden_size // hidden_size
        if self.num_attention_heads % factor or self.intermediate_size % factor:
            raise BertCoreError(f"{self.num_attention_heads} heads of {self.hidden_size} do not split into "
                                f"{factor} (the heads keep their size when the model grows)")
        std = float(f"{self.initializer_range * (self.hidden_size / hidden_size) ** 0.5:.2g}")
        return self.replace(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                            num_attention_heads=self.num_attention_heads // factor,
                            intermediate_size=self.intermediate_size // factor, initializer_range=std)

    @classmethod
    def preset(cls, name: str, **overrides) -> "BertConfig":
        """The named size (nano, tiny, mini, small, medium, base) with intermediate = 4H, plus overrides."""
        if name not in PRESETS:
            raise BertCoreError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        sizes = PRESETS[name]
        return cls(**{**sizes, "intermediate_size": feed_forward_width(sizes["hidden_size"]), **overrides})

    def to_hf_dict(self) -> dict:
        d = dataclasses.asdict(self)
        attention = d.pop("attention")
        d.update(model_type="bert", architectures=["BertForPreTraining"], tie_word_embeddings=True)
        if attention == "causal":
            # Hugging Face's name for the same switch: its BertModel masks causally when is_decoder is true.
            d["is_decoder"] = True
        return d

    @classmethod
    def from_hf_dict(cls, d: dict) -> "BertConfig":
        """Build a config from a Hugging Face `config.json` dict, ignoring keys BERT's encoder does not use."""
        if d.get("model_type", "bert") != "bert":
            raise BertCoreError(f"this is a {d.get('model_type')!r} model, not a BERT; only BERT checkpoints load here")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if d.get("is_decoder") is True:
            kwargs.setdefault("attention", "causal")  # older folders of ours wrote "attention": "causal" instead
        if kwargs.get("pad_token_id") is None:
            kwargs.pop("pad_token_id", None)
        return cls(**kwargs)

    def save(self, folder: str | Path, extra: dict | None = None) -> Path:
        """Write `config.json` into `folder`, with `extra` keys (e.g. labels)."""
        path = Path(folder) / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**self.to_hf_dict(), **(extra or {})}, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, folder_or_file: str | Path) -> "BertConfig":
        path = Path(folder_or_file)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise BertCoreError(f"no config.json at {path}: is this a checkpoint folder?")
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise BertCoreError(f"{path} is not valid JSON: {exc}") from None
        except OSError as exc:
            raise BertCoreError(f"cannot read {path}: {exc.strerror or exc}") from None
        if not isinstance(d, dict):
            raise BertCoreError(f"{path} must hold a JSON object")
        return cls.from_hf_dict(d)


def activation_bytes(config: BertConfig, batch_size: int, seq_len: int) -> int:
    """A low estimate of the activations one training step keeps for its backward pass (fp32): per layer and
    token a few hidden-size vectors, the feed-forward's inner activations and each head's attention row. Low on
    purpose: the check refuses what cannot fit, never a run that might."""
    per_token = 4 * config.hidden_size + config.intermediate_size + config.num_attention_heads * seq_len
    return WEIGHT_BYTES * batch_size * seq_len * config.num_hidden_layers * per_token


@functools.lru_cache(maxsize=1)
def machine_memory_bytes() -> int | None:
    """Physical memory, or the container's limit when lower (cgroup v2 or v1); None when unknown."""
    sizes = []
    try:
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            sizes.append(int(text))  # "max" (no limit) and v1's huge sentinel fall out at min() below
    return min(sizes) if sizes else None


def _gb(n: float) -> str:
    return f"{n / 2**30:,.1f} GB" if n >= 2**30 else f"{n / 2**20:,.0f} MB"
