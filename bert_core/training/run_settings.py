"""A pretraining run's settings by one name each, from the command line to the config: a TrainConfig field, a
BertConfig field, or the run's own (corpus, vocab_size, preset, dropout...).

The CLI's parser stores each `train` flag's value under the setting's name, and `comparison.train_command` writes the
command that repeats an app run from the same names. Most flags are the name in dashes; SHORT_FLAGS lists the few that
users type shorter, and it is the only map between the two. Torch-free.
"""

from __future__ import annotations

# The BertConfig fields that set a model's size: a preset's, or given one by one (`train --layers ...`).
SIZE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")

# The `train` flags that are not their setting's name in dashes: users type them, so they stay as they are.
SHORT_FLAGS = {
    "learning_rate": "--lr",
    "warmup_ratio": "--warmup",
    "max_steps": "--steps",
    "time_budget_s": "--time-budget",
    "max_seq_length": "--seq-len",
    "short_seq_length": "--short-seq-len",
    "checkpoint_every_s": "--checkpoint-every",
    "num_hidden_layers": "--layers",
    "num_attention_heads": "--heads",
}
_SETTING_OF = {flag_text: name for name, flag_text in SHORT_FLAGS.items()}


def flag(setting_name: str) -> str:
    """The `train` flag that sets a setting ('learning_rate' -> '--lr', 'mask_rate' -> '--mask-rate')."""
    return SHORT_FLAGS.get(setting_name, "--" + setting_name.replace("_", "-"))


def setting(flag_text: str) -> str:
    """The setting a `train` flag sets, the inverse of `flag` ('--lr' -> 'learning_rate')."""
    return _SETTING_OF.get(flag_text, flag_text.removeprefix("--").replace("-", "_"))
