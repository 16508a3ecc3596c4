"""bert_core: BERT from scratch in PyTorch, key-for-key compatible with Hugging Face, built to be watched while it learns."""

from bert_core.config import PRESETS, BertConfig
from bert_core.errors import BertCoreError

__all__ = ["BertConfig", "PRESETS", "BertCoreError"]
