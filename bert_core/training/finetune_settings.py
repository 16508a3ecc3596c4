"""The settings of a fine-tuning race, each described once (bert_core.training.setting.Setting; docs/settings.md): a
FinetuneConfig field on the field, the race's own (its data, its models, what the command writes) in RACE_SETTINGS.
The `finetune` options (bert_core.cli.finetune), the Fine-tune page's settings widgets and the race's settings made
from them (`page_settings`) all read these descriptions, so no map between the page's names and the config's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from bert_core.data.task_downloads import TASKS
from bert_core.errors import BertCoreError
from bert_core.model.bert import POOLING_KINDS
from bert_core.model.config import MAX_BATCH, MAX_SEED, MAX_SEQ_LEN, PRESETS
from bert_core.training.setting import POSITIVE, RATE, Limits, Setting, Widget, described, settings_of
from bert_core.training.train_config import TrainConfig

BUILT_IN_TASKS = {"toy": "topic of a toy story sentence (sentence labels)",
                  "toy-order": "is a toy story sentence in its own word order or shuffled? (sentence labels; the "
                               "lesson's race, where pretraining must pay)",
                  "toy-qa": "who went where and what they found, in toy stories (answer spans), after its drills"}
# The toy QA task's budget where none is given: its drills, each until learnt (at most
# toy_qa_drills.DRILL_SHARES of it), then the stories for the rest; in steps, so that every machine trains the same
# run. Measured with the shipped mini in docs/benchmarks.md.
TOY_QA_STEPS = 8_000
# Every other task's budget where none is given, in steps for the same reason: a budget in seconds gave 28 steps and
# chunk F1 49 on a loaded 2-core machine where 1,500 steps give 92.5 (docs/benchmarks.md). 1,500 is the number of
# steps the shipped models were measured at on every kind of task (#28's protocol).
FINETUNE_STEPS = 1_500
# What each kind of task starts from when no flag or widget says otherwise, beside the learning rate, which comes
# from the model's size (finetune.finetune_learning_rate). Answer spans read a question and a passage: longer windows.
KIND_DEFAULTS: dict[str, dict] = {"labels": {}, "tags": {}, "spans": {"max_length": 256}}
SELECTION_FRACTION = 0.1  # of the training data, held back to pick the best step when keep_best is on

# The page's words for its budget (bert_core.app.app_widgets.setting_widget fills in "{suggested_lr}").
_STEPS_HELP = ("Each model trains this many optimizer steps: the same figures on a busy server as on a quiet one, only "
               "later.")
_BUDGET_HELP = ("A model still short of its steps after this long stops there, and the results say how many steps it "
                "got: a slow or busy machine's figures are those of fewer steps.")
_PAGE_LR_HELP = ("{suggested_lr} suits the active model: the rate it was pretrained at x 128 / hidden (1e-3 for the "
                 "tiny shipped model), or 1e-3 x (128 / hidden)² for a model that does not record it (about 3e-5 for "
                 "BERT-base)")
_LR_HELP = ("peak learning rate (default, within 2e-5 to 1e-3: a checkpoint made here, the rate it was pretrained at "
            "x 128 / hidden (1e-3 for the shipped tiny model, 5e-4 for a mini pretrained at 1e-3); any other, 1e-3 x "
            "(128 / hidden)^2 (2.8e-5 for BERT-base)")


@dataclass(frozen=True)
class FinetuneConfig:
    """Knobs of one fine-tuning run; the pretrained and the from-scratch run of a comparison share one. A described
    field is a `finetune` option (`cli_at`: its place in --help) and, with a `widget`, a Fine-tune page setting."""

    # The page's budget widgets are drawn in the order of these fields (steps, time cap, rate, batch).
    max_steps: int | None = described(
        None, flag="--steps", help=f"optimizer steps per model (default {FINETUNE_STEPS:,}; toy-qa: {TOY_QA_STEPS:,}): "
                                   "the same result on a quiet machine as on a busy one",
        kind=int, limits=Limits(1, 2**40), metavar="N", cli_at=17, one_of="length",
        widget=Widget("ft_steps", "Training steps per model", _STEPS_HELP, range=(1, 100_000), step=100,
                      group="budget"))
    time_budget_s: float | None = described(
        60.0, flag="--time-budget", help="training seconds per model, instead of a number of steps (the result then "
                                         "depends on the machine's speed and load)",
        kind=float, limits=POSITIVE, metavar="S", cli_at=16, one_of="length",
        widget=Widget("ft_budget", "Time cap per model (seconds)", _BUDGET_HELP, range=(1, 3_600), step=30,
                      group="budget"))
    learning_rate: float = described(
        1e-4, flag="--lr", help=_LR_HELP, kind=float, limits=POSITIVE, cli_at=18,
        widget=Widget("ft_lr", "Peak learning rate", _PAGE_LR_HELP, range=(1e-6, 1e-1), format="%.5f",
                      group="budget"))
    batch_size: int = described(32, help="", kind=int, limits=Limits(1, MAX_BATCH), cli_at=19,
                                widget=Widget("ft_batch", "Batch size", range=(1, 256), group="budget"))
    warmup_ratio: float = described(0.1, help="", kind=float, limits=RATE, cli_at=21)
    weight_decay: float = 0.01
    adam_eps: float = 1e-6
    max_grad_norm: float = 1.0
    max_length: int = described(
        128, help="tokens per example (default: the kind's: "
                  + ", ".join(f"{k} {v.get('max_length', 128)}" for k, v in KIND_DEFAULTS.items())
                  + "; or the model's positions if fewer)",
        kind=int, limits=Limits(8, MAX_SEQ_LEN), cli_at=20,
        widget=Widget("ft_maxlen", "Max length (tokens)", range=(16, 512), step=16, group="budget"))
    # Hidden and attention dropout while fine-tuning; None keeps the model's own setting. BERT fine-tuned with 0.1,
    # but our pretraining recipe turns dropout off, and on the shipped checkpoint 0.1 helped the from-scratch
    # twin more than the pretrained model (docs/benchmarks.md), so the default keeps the checkpoint's.
    dropout: float | None = described(
        None, help="hidden and attention dropout while fine-tuning (default: the checkpoint's own; BERT fine-tuned "
                   "with 0.1, the shipped checkpoint was pretrained with 0)", kind=float, limits=RATE, cli_at=22)
    # Layer-wise learning-rate decay (model.bert.param_groups).
    layer_decay: float = described(
        1.0, help="layer-wise learning-rate decay: each layer learns at this times the rate of the one above it, the "
                  "classifier at the full rate (default 1: one rate for all, as BERT fine-tuned)",
        kind=float, limits=Limits(0, 1, low_open=True), cli_at=23)
    # Keep the weights of the validation pass that scored best on a held-back SELECTION_FRACTION of the training
    # data (never on the validation set, which then stays an unbiased test of the kept weights).
    keep_best: bool = described(
        False, help="hold back 10%% of the training data and keep each model's weights from the validation pass that "
                    "scores best on it (the validation set stays unseen); pairs with longer runs",
        kind="switch", cli_at=24)
    eval_points: int = described(10, help="validation passes over the run (the accuracy curve)", kind=int,
                                 limits=Limits(1, 10**4), cli_at=26)   # plus one before the first step
    eval_batch_size: int = 128
    num_misclassified: int = 20
    seed: int = described(0, help="split, head initialisation, batches and dropout", kind=int,
                          limits=Limits(0, MAX_SEED), cli_at=15,
                          widget=Widget("ft_seed", "Seed (split, head, batches)", range=(0, 2**31 - 1), group="split"))
    device: str = described("auto", help="", kind=str, cli_at=27)
    # Validation passes always run in fp32, so a figure is the weights' own. fp16 would need a loss scaler, which
    # fine-tuning has not.
    precision: str = described(
        "bf16", help="the training steps' precision: bf16 autocast (default) on a CUDA GPU and on a CPU with bfloat16 "
                     "instructions, else fp32; validation always runs in fp32",
        kind=str, choices=("bf16", "fp32"), cli_at=28)

    def __post_init__(self):
        self.train_config()  # validates the shared fields with TrainConfig's messages
        for setting in settings_of(FinetuneConfig):   # the others by their descriptions (None: the default's)
            value = getattr(self, setting.name)
            if value is not None and (why := setting.refusal(value)) is not None:
                raise BertCoreError(why)

    def train_config(self) -> TrainConfig:
        """The pretraining TrainConfig with the same schedule, used for its learning-rate schedule."""
        return TrainConfig(
            batch_size=self.batch_size, learning_rate=self.learning_rate, warmup_ratio=self.warmup_ratio,
            max_steps=self.max_steps, time_budget_s=self.time_budget_s, schedule="linear",
            weight_decay=self.weight_decay, adam_eps=self.adam_eps, max_grad_norm=self.max_grad_norm,
            seed=self.seed, device=self.device, precision=self.precision,   # the schedule's: not max_length
        )

    def replace(self, **changes) -> "FinetuneConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def kind_config(kind: str) -> FinetuneConfig:
    """FinetuneConfig with a kind's defaults (KIND_DEFAULTS)."""
    if kind not in KIND_DEFAULTS:
        raise BertCoreError(f"unknown kind of task {kind!r}; the kinds are {', '.join(KIND_DEFAULTS)}")
    return FinetuneConfig(**KIND_DEFAULTS[kind])


def tag_column(text: str) -> str | int:
    """A CoNLL file's tag column as given: chunk, pos or a column number from 2."""
    if text in ("chunk", "pos"):
        return text
    number = int(text) if text.isdigit() else 0
    if number < 2:
        raise BertCoreError(f"use chunk, pos or a column number from 2, not {text!r}")
    return number


# The race's own settings: what it reads, what it starts from and races, and what the command writes. Each is a
# `finetune` option; the split's sizes are the page's too. Stored under these names, read by the CLI's spec_from_args.
RACE_SETTINGS = (
    Setting("checkpoint", kind="path", metavar="DIR", cli_at=1, one_of="model",
            help="pretrained checkpoint folder (default: the shipped one)"),
    Setting("scratch_preset", kind=str, choices=tuple(PRESETS), metavar="NAME", cli_at=2, one_of="model",
            help="no pretraining: a fresh model of this preset (nano tiny mini small medium base) with a tokenizer "
                 "trained on the training texts"),
    Setting("csv", kind="path", metavar="FILE", cli_at=3,
            help="labelled CSV: headed, AG News (class,title,description) or label,text"),
    Setting("conll", kind="path", metavar="FILE", cli_at=4,
            help="token tags: a CoNLL file (one `word ... tag` a line, a blank line between sentences), e.g. "
                 "CoNLL-2000 chunking; scored by chunk F1 beside its majority-tag baselines"),
    Setting("tag_column", kind=tag_column, metavar="COLUMN", cli_at=5,
            help="with --conll or --task conll2000: 'chunk' (the last column: chunk or entity tags, the default), "
                 "'pos' (the second column: part-of-speech tags) or a column number from 2"),
    Setting("squad", kind="path", metavar="FILE", cli_at=6,
            help="answer spans: a SQuAD v1.1 JSON file; passages longer than the model's input are read in "
                 "overlapping windows"),
    Setting("task", kind=str, choices=(*BUILT_IN_TASKS, *TASKS), cli_at=7,
            help="built-in offline task: " + "; ".join(f"{k}: {v}" for k, v in BUILT_IN_TASKS.items())
                 + "; or a real one, read from ../shared/data or fetched once from its public home (python -m "
                   "bert_core download NAME): " + "; ".join(f"{k}: {t.label}" for k, t in TASKS.items())),
    Setting("no_drills", kind="switch", cli_at=8,
            help="with --task toy-qa: train on the stories alone, without the drills before them (one kind of "
                 "question at a time: a name's sentence, where, the sentence by its place, who, what, who found); "
                 "the stories alone stay near 30%% exact match with the shipped models"),
    Setting("text_columns", flag="--text-column", kind="list", metavar="NAME", cli_at=9,
            help="text column (give twice to join two, e.g. title and description)"),
    Setting("label_column", kind=str, metavar="NAME", cli_at=10, help=""),
    Setting("pair", kind="switch", cli_at=11, help="feed two text columns as a sentence pair, not joined"),
    Setting("drop_empty", kind="switch", cli_at=12, help="skip rows with an empty text or label (counted)"),
    Setting("train_size", kind=int, limits=Limits(1), cli_at=13,
            help="training examples (default: all but the validation set)",
            widget=Widget("ft_train", "Training {unit}", range=(10, 100_000), step=100, group="split")),
    Setting("val_size", kind=int, limits=Limits(1), cli_at=14, help="validation examples (default: 10%%)",
            widget=Widget("ft_val", "Validation {unit}", "{val_help}", range=(10, 20_000), step=100, group="split")),
    Setting("pooling", kind=str, choices=POOLING_KINDS, cli_at=25,
            help="sentence labels: what the classifier reads: cls (the pooled [CLS], BERT's; the default for BERT), "
                 "last (the last token; the default for a GPT-style model) or mean (the mean of the tokens); a folder "
                 "saved with last or mean loads as trained only here"),
    Setting("out", kind="path", metavar="DIR", cli_at=29,
            help="write the classifier here (a Hugging Face folder: a new or empty folder, or an earlier classifier "
                 "with --overwrite); with --compare-scratch the from-scratch one goes to DIR/from-scratch. Ctrl-C or "
                 "kill stops the model in training after its step and saves what has run, a stopped model as the "
                 "model of its step"),
    Setting("overwrite", kind="switch", cli_at=30, help="replace the classifier already in --out"),
    Setting("scratch", flag="--compare-scratch", kind="switch", cli_at=31,
            help="also train the same architecture from scratch with the same budget"),
    Setting("compare", kind="paths", metavar="DIR", cli_at=32,
            help="also fine-tune from this checkpoint with the same data, budget and seed (repeat for several), e.g. "
                 "a GPT-style one beside a BERT: the race; a causal model's classifier reads the last token. With "
                 "--out its classifier goes to DIR/from-NAME"),
    Setting("baseline", kind="switch", cli_at=33,
            help="sentence labels: also fit TF-IDF + logistic regression (scikit-learn) on the same split, the "
                 "bag-of-words line to beat (token tags always get their majority-tag baselines)"),
    Setting("json", kind="switch", cli_at=34, help="print the results as JSON"),
)
CONFIG_SETTINGS = settings_of(FinetuneConfig)
# Every `finetune` option, in --help order.
FINETUNE_SETTINGS = tuple(sorted((*CONFIG_SETTINGS, *RACE_SETTINGS), key=lambda s: s.cli_at))
# The Fine-tune page's settings (the split's sizes and the config fields with a widget), in the order it draws them,
# and their widgets' keys (`ft_<name>`, also the URL parameters old links fill) by the setting each holds.
PAGE_SETTINGS = tuple(s for s in (*RACE_SETTINGS, *CONFIG_SETTINGS) if s.widget is not None)
PAGE_WIDGETS = {s.widget.key: s.name for s in PAGE_SETTINGS}


def page_settings(values: Mapping) -> dict:
    """The Fine-tune page's widget values (by widget key) as FinetuneConfig settings under their own names: steps
    decide (the same figures on a busy server as on a quiet one), the time cap in seconds cuts a model short only
    on a machine too slow for them (0 or absent: none); ten validation passes a model."""
    config_fields = {s.name: s for s in CONFIG_SETTINGS}
    settings = {name: values.get(key) for key, name in PAGE_WIDGETS.items() if name in config_fields}
    for name in ("max_steps", "time_budget_s"):   # steps alone, or seconds alone, as a test or a script gives them
        settings[name] = config_fields[name].kind(settings[name]) if settings[name] else None
    return {**settings, "learning_rate": float(settings["learning_rate"]), "eval_points": 10}
