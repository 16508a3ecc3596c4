"""A pretraining run's settings by one name each, from the command line to the config: a TrainConfig field (described
on the field: bert_core.training.train_config), or the run's own, described here (its corpus, tokenizer, model size,
dropout...; the `train` command's own: --out, --resume...).

Everything that lists settings is made from these descriptions (bert_core.training.setting; docs/settings.md): the
`train` options and their flags (`flag`, `setting`), the Train page's widgets (`widgets`), the settings a --resume
changes, keeps or refuses (`on_resume`), and the model's size fields. Torch-free.
"""

from __future__ import annotations

from bert_core.model.config import PRESETS
from bert_core.training.setting import (
    FRACTION,
    NEW_RUN_ONLY,
    NEVER,
    POSITIVE,
    RATE,
    STAYS,
    Limits,
    Setting,
)
from bert_core.training.train_config import TRAIN_SETTINGS

# The BertConfig fields that set a model's size: a preset's, or given one by one (`train --layers ...`).
SIZE_SETTINGS = (
    Setting("num_hidden_layers", flag="--layers", help="number of layers (default: the preset's)", kind=int,
            limits=Limits(1, 512), cli_at=29, widget="train_layers", widget_at=13, on_resume=NEW_RUN_ONLY),
    Setting("hidden_size", help="hidden size (default: the preset's)", kind=int, limits=Limits(8, 2**15), cli_at=30,
            widget="train_hidden", widget_at=14, on_resume=NEW_RUN_ONLY),
    Setting("num_attention_heads", flag="--heads", help="attention heads (default: the preset's)", kind=int,
            limits=Limits(1, 2**12), cli_at=31, widget="train_heads", widget_at=15, on_resume=NEW_RUN_ONLY),
    Setting("intermediate_size", help="feed-forward size (default: 4 x the hidden size)", kind=int,
            limits=Limits(8, 2**17), cli_at=32, widget="train_ffn", widget_at=16, on_resume=NEW_RUN_ONLY),
)
SIZE_FIELDS = tuple(s.name for s in SIZE_SETTINGS)

# The run's own settings: what it trains on, what it starts from, the model beyond its size, and where it goes.
# `command=NEVER`: the command that repeats a page run writes these itself (bert_core.training.comparison).
RUN_SETTINGS = (
    Setting("corpus", kind="list", metavar="SPEC", cli_at=1, widget="train_corpus", widget_at=1, on_resume=STAYS,
            help="toy | tinyshakespeare | wikitext-2 | brown | a text file; repeat for several (default toy); "
                 "or shards:DIR, a `corpus build` folder (docs/corpus.md), alone or beside text corpora "
                 "(--shard-share)",
            command=NEVER),
    Setting("shard_share", kind=float, limits=FRACTION, metavar="F", cli_at=1.5, on_resume=STAYS, command=NEVER,
            help="with a shards:DIR corpus beside text corpora: the share of the batches drawn from the shards, the "
                 "rest from the text corpora (default 0.5; each batch from one of the two, drawn by the seed), so "
                 "that a model continued on new text keeps reading the text it knew (docs/corpus.md)"),
    Setting("out", kind="path", cli_at=2, command=NEVER,
            help="checkpoint folder to write (required unless --resume); a new or empty folder, or an existing "
                 "checkpoint with --overwrite"),
    Setting("overwrite", kind="switch", cli_at=3, help="replace the checkpoint already in --out", command=NEVER),
    Setting("resume", kind="path", metavar="DIR", cli_at=4, help="continue the run saved in DIR (same corpora)",
            command=NEVER),
    Setting("preset", kind=str, choices=tuple(PRESETS), cli_at=5, widget="train_preset", widget_at=3,
            on_resume=STAYS, command=NEVER,
            help="model size (default {preset}); the recipe for the size sets the defaults marked 'the size's recipe' "
                 "(bert_core.training.recipes; shown when the run starts)"),
    Setting("vocab_size", kind=int, limits=Limits(100, 2**20), cli_at=6, widget="train_vocab", widget_at=2,
            label="vocabulary", on_resume=NEW_RUN_ONLY, command=NEVER,
            help="WordPiece vocabulary size to train (default {vocab_size})"),
    Setting("tokenizer", kind="path", cli_at=7, on_resume=NEW_RUN_ONLY, command=NEVER,
            help="use the tokenizer in this folder instead of training one"),
    Setting("init_from", kind="path", metavar="DIR", cli_at=8, on_resume=NEW_RUN_ONLY, command=NEVER,
            help="start from the weights, size and tokenizer of this checkpoint (a new run: new data order, optimizer "
                 "and schedule), e.g. to continue at a longer --seq-len as BERT's paper did"),
    Setting("copy_positions", kind=bool, cli_at=9, on_resume=NEW_RUN_ONLY, command=NEVER,
            help="with --init-from and a --seq-len longer than the checkpoint trained at: start the positions it "
                 "never trained as copies of those it did, repeated in order (Longformer's start, a deviation from "
                 "BERT's paper, which learnt them from their initial values; default on when the checkpoint records "
                 "its length)"),
    *SIZE_SETTINGS,
    Setting("dropout", kind=float, limits=RATE, cli_at=33, widget="train_dropout", widget_at=17, label="dropout",
            on_resume=STAYS, command=NEVER,
            help="hidden and attention dropout (default {dropout:g}; the BERT paper uses 0.1, which only slows a "
                 "model that is far from overfitting)"),
    Setting("initializer_range", kind=float, limits=POSITIVE, metavar="STD", cli_at=34, widget="train_init",
            widget_at=18, label="initial weight std", on_resume=STAYS, command=NEVER,
            help="std of the initial weights (default: the size's recipe, 0.1 x sqrt(64 / hidden size); "
                 "{initializer_range:g} for {preset}; BERT's 0.02 keeps a small model on the unigram plateau for "
                 "long)"),
    Setting("heldout_fraction", kind=float, limits=FRACTION, cli_at=42, on_resume=STAYS, command=NEVER,
            help="default {heldout_fraction:g}"),
    Setting("json", kind="switch", cli_at=45, help="print the final metrics as JSON on stdout", command=NEVER),
)

# Every run setting, the config's and the run's own, by name.
SETTINGS: dict[str, Setting] = {s.name: s for s in (*TRAIN_SETTINGS, *RUN_SETTINGS)}
TRAIN_FIELDS = frozenset(s.name for s in TRAIN_SETTINGS)
_SETTING_OF = {s.option: s.name for s in SETTINGS.values() if s.option}


def options() -> list[Setting]:
    """The settings `train` has an option for, in the order its --help lists them."""
    return sorted((s for s in SETTINGS.values() if s.option), key=lambda s: s.cli_at)


def flag(setting_name: str) -> str:
    """The `train` flag that sets a setting ('learning_rate' -> '--lr', 'mask_rate' -> '--mask-rate')."""
    described = SETTINGS.get(setting_name)
    return described.option if described is not None and described.option else "--" + setting_name.replace("_", "-")


def setting(flag_text: str) -> str:
    """The setting a `train` flag sets, the inverse of `flag` ('--lr' -> 'learning_rate')."""
    return _SETTING_OF.get(flag_text, flag_text.removeprefix("--").replace("-", "_"))


def on_resume(what: str) -> tuple[str, ...]:
    """The `train` options --resume treats as `what` (setting.CHANGES, STAYS, LENGTHENS, NEW_RUN_ONLY): the config's
    in field order (the order a resume records its changes in), then the run's own."""
    return tuple(s.name for s in SETTINGS.values() if s.on_resume == what and s.option)


def widgets() -> dict[str, str]:
    """The Train page's widgets: each key (also its URL parameter) and the setting it holds, in the address bar's
    order."""
    shown = sorted((s for s in SETTINGS.values() if s.widget), key=lambda s: s.widget_at)
    return {s.widget: s.name for s in shown}


def app_values() -> dict:
    """The values the app always uses for the config's settings that have no widget (it trains on its CPU)."""
    return {s.name: s.app for s in TRAIN_SETTINGS if s.app is not None}
