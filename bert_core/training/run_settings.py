"""A pretraining run's settings by one name each: a TrainConfig field (described on the field), or the run's own,
described here (its corpus, tokenizer, model size, dropout; the `train` command's --out, --resume...). Everything
that lists settings is made from these descriptions (docs/settings.md). Torch-free.
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
    Widget,
)
from bert_core.training.train_config import TRAIN_SETTINGS

# The BertConfig fields that set a model's size: a preset's, or given one by one (`train --layers ...`).
SIZE_SETTINGS = (
    Setting("num_hidden_layers", flag="--layers", help="number of layers (default: the preset's)", kind=int,
            limits=Limits(1, 512), cli_at=29, on_resume=NEW_RUN_ONLY,
            widget=Widget("train_layers", "Layers", range=(1, 12), group="size")),
    Setting("hidden_size", help="hidden size (default: the preset's)", kind=int, limits=Limits(8, 2**15), cli_at=30,
            on_resume=NEW_RUN_ONLY, widget=Widget("train_hidden", "Hidden size", range=(8, 768), step=8, group="size")),
    Setting("num_attention_heads", flag="--heads", help="attention heads (default: the preset's)", kind=int,
            limits=Limits(1, 2**12), cli_at=31, on_resume=NEW_RUN_ONLY,
            widget=Widget("train_heads", "Attention heads", range=(1, 16), group="size")),
    Setting("intermediate_size", help="feed-forward size (default: 4 x the hidden size)", kind=int,
            limits=Limits(8, 2**17), cli_at=32, on_resume=NEW_RUN_ONLY,
            widget=Widget("train_ffn", "Feed-forward size", range=(8, 3072), step=8, group="size")),
)
SIZE_FIELDS = tuple(s.name for s in SIZE_SETTINGS)

# The run's own settings: what it trains on, what it starts from, the model beyond its size, and where it goes.
# `command=NEVER`: the command that repeats a page run writes these itself (bert_core.training.comparison).
RUN_SETTINGS = (
    Setting("corpus", kind="list", metavar="SPEC", cli_at=1, on_resume=STAYS,
            help="toy | tinyshakespeare | wikitext-2 | brown | a text file; repeat for several (default toy); "
                 "or shards:DIR, a `corpus build` folder (docs/corpus.md), alone or beside text corpora "
                 "(--shard-share)",
            command=NEVER, widget=Widget("train_corpus", "Text to learn from", words=(
                ("toy", "Toy grammar (generated, instant)"), ("tinyshakespeare", "Tiny Shakespeare (1 MB)"),
                ("wikitext-2", "WikiText-2 (Wikipedia articles)"), ("upload", "Upload a text file"),
                ("paste", "Paste text")))),
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
    # The page offers the sizes a shared CPU server trains in minutes, or one of its own.
    Setting("preset", kind=str, choices=tuple(PRESETS), cli_at=5, label="size", on_resume=STAYS, command=NEVER,
            widget=Widget("train_preset", "Size preset",
                          options=(*(p for p in PRESETS if p not in ("medium", "base")), "custom"),
                          help="nano: 2 layers x 64; tiny: 2 x 128; mini: 4 x 256; small: 4 x 512"),
            help="model size (default {preset}); the recipe for the size sets the defaults marked 'the size's recipe' "
                 "(bert_core.training.recipes; shown when the run starts)"),
    Setting("vocab_size", kind=int, limits=Limits(100, 2**20), cli_at=6, label="vocabulary", on_resume=NEW_RUN_ONLY,
            command=NEVER, widget=Widget("train_vocab", "WordPiece vocabulary size", range=(100, 60_000), step=100),
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
    Setting("dropout", kind=float, limits=RATE, cli_at=33, label="dropout", on_resume=STAYS, command=NEVER,
            widget=Widget("train_dropout", "Dropout", range=(0.0, 0.9), step=0.05, group="model",
                          help="BERT uses 0.1. A model trained for minutes is far from overfitting, so 0 learns "
                               "faster."),
            help="hidden and attention dropout (default {dropout:g}; the BERT paper uses 0.1, which only slows a "
                 "model that is far from overfitting)"),
    Setting("initializer_range", kind=float, limits=POSITIVE, metavar="STD", cli_at=34, label="initial weight std",
            on_resume=STAYS, command=NEVER,
            widget=Widget("train_init", "Initial weight scale (std)", range=(0.001, 1.0), step=0.01, format="%.3f",
                          group="model",
                          help="BERT's initializer_range, 0.02, was chosen for hidden size 768. Small models start "
                               "with near-uniform attention and can sit on the 'predict the most frequent token' "
                               "plateau for a long time; try 0.1 and compare."),
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


def page_settings() -> tuple[Setting, ...]:
    """The settings the Train page shows, in the order of their descriptions (the run's own, then the config's
    fields): the order a group's widgets are drawn in and the address bar lists them."""
    return tuple(sorted((s for s in SETTINGS.values() if s.widget), key=lambda s: s.name in TRAIN_FIELDS))


def app_values() -> dict:
    """The values the app always uses for the config's settings that have no widget (it trains on its CPU)."""
    return {s.name: s.app for s in TRAIN_SETTINGS if s.app is not None}
