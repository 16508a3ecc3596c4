"""bert_core: BERT from scratch in PyTorch, key-for-key compatible with Hugging Face, built to be watched while it learns.

Wings, each importing only those below it: cli (the command line) and serve (the app's server) at the top, then
inspect (looking inside a model), training (the run loop and what runs in it), data (text to tensors), and model
(config, the BERT, tokenizer, Hugging Face folders, checkpoints). errors and paths sit at the ground.
"""

from bert_core.errors import BertCoreError
from bert_core.model.config import PRESETS, BertConfig

__all__ = ["BertConfig", "PRESETS", "BertCoreError"]
