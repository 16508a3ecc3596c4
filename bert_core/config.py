"""`BertConfig`: the model's hyperparameters under Hugging Face's config.json key names, plus named presets."""

from __future__ import annotations

import dataclasses
import json
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
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise BertCoreError(f"{name} must be a positive whole number, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise BertCoreError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}): each head gets hidden_size / heads dimensions"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise BertCoreError(f"{name} must be in [0, 1), got {value!r}")
        if not self.initializer_range > 0:
            raise BertCoreError(f"initializer_range must be positive, got {self.initializer_range!r}")
        if not self.layer_norm_eps > 0:
            raise BertCoreError(f"layer_norm_eps must be positive, got {self.layer_norm_eps!r}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise BertCoreError(
                f"pad_token_id ({self.pad_token_id}) must be a token id below vocab_size ({self.vocab_size})"
            )
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            raise BertCoreError(f"hidden_act must be one of {', '.join(SUPPORTED_ACTIVATIONS)}, got {self.hidden_act!r}")
        if self.attention not in ATTENTION_KINDS:
            raise BertCoreError(f"attention must be 'bidirectional' or 'causal', got {self.attention!r}")

    @property
    def head_dim(self) -> int:
        """Dimensions per attention head (hidden_size / num_attention_heads)."""
        return self.hidden_size // self.num_attention_heads

    def replace(self, **changes) -> "BertConfig":
        """Return a copy with some fields changed (validated again)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise BertCoreError(f"unknown BertConfig field(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, **overrides) -> "BertConfig":
        """Return the named size (nano, tiny, mini, small, medium, base) with intermediate = 4H, plus overrides."""
        if name not in PRESETS:
            raise BertCoreError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        sizes = dict(PRESETS[name])
        sizes["intermediate_size"] = 4 * sizes["hidden_size"]
        sizes.update(overrides)
        return cls(**sizes)

    def to_hf_dict(self) -> dict:
        """Return the `config.json` contents Hugging Face's `BertConfig` reads."""
        d = dataclasses.asdict(self)
        attention = d.pop("attention")
        d.update(model_type="bert", architectures=["BertForPreTraining"], tie_word_embeddings=True)
        if attention != "bidirectional":
            # Hugging Face ignores unknown keys; ours reads it back. A causal BERT has no HF twin.
            d["attention"] = attention
        return d

    @classmethod
    def from_hf_dict(cls, d: dict) -> "BertConfig":
        """Build a config from a Hugging Face `config.json` dict, ignoring keys BERT's encoder does not use."""
        if d.get("model_type", "bert") != "bert":
            raise BertCoreError(f"this is a {d.get('model_type')!r} model, not a BERT; only BERT checkpoints load here")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if kwargs.get("pad_token_id") is None:
            kwargs.pop("pad_token_id", None)
        return cls(**kwargs)

    def save(self, folder: str | Path, extra: dict | None = None) -> Path:
        """Write `config.json` into `folder` (with optional extra keys, e.g. labels) and return its path."""
        path = Path(folder) / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        d = self.to_hf_dict()
        d.update(extra or {})
        path.write_text(json.dumps(d, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, folder_or_file: str | Path) -> "BertConfig":
        """Read a `config.json` (or the one inside a folder)."""
        path = Path(folder_or_file)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise BertCoreError(f"no config.json at {path}: is this a checkpoint folder?")
        try:
            d = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BertCoreError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(d, dict):
            raise BertCoreError(f"{path} must hold a JSON object")
        return cls.from_hf_dict(d)
