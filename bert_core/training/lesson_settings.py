"""The Train page's lesson: the settings a run starts from for a corpus and a size, by the run's own setting names
(TrainConfig's and BertConfig's fields, and the run's: corpus, vocab_size, preset, dropout).

On the toy corpus a size takes the toy lesson, on real text its real-text recipe
(bert_core.training.recipes.page_recipe); the rest are the lesson's fixed settings. Torch-free: the page draws its
settings before torch loads.
"""

from __future__ import annotations

from bert_core.model.config import PRESETS
from bert_core.training.recipes import (
    GROW_FROM,
    PAGE_STEP_S,
    Recipe,
    fraction_words,
    page_recipe,
    preset_for_size,
)
from bert_core.training.run_settings import page_settings
from bert_core.training.train_config import TRAIN_DEFAULTS

# The defaults train nano on the toy corpus past 50% held-out masked-token accuracy (unigram baseline ~8%) in
# under 30 seconds of one core, measured through this page on three seeds (benchmarks/app_bench.py --skip ...
# startup; docs/benchmarks.md, "The default Train run"). Every setting below then follows the chosen corpus and
# size (bert_core.training.recipes: the toy lesson's shape with each size's rates on toy, each size's real-text recipe
# on real text) until the user changes it.
LESSON = {"corpus": "toy", "vocab_size": 2000, "preset": "nano", "nsp": True, "seed": 0, "eval_every": 100,
          "probe_every": 100, "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
          "intermediate_size": 256}
# Real text has more words to learn, and its runs are longer: evaluations and probe snapshots further apart.
REAL_TEXT = {"vocab_size": 8000, "eval_every": 250, "probe_every": 250}


def lesson_settings(corpus: str = "toy", preset: str = "nano", hidden_size: int | None = None,
                    num_hidden_layers: int | None = None) -> dict:
    """The settings a run of `preset` on `corpus` starts from; a "custom" size (`hidden_size` x
    `num_hidden_layers`, the lesson's when None) takes the recipe of the preset nearest it."""
    sizes, asked = {}, preset
    if preset == "custom":
        sizes = {"hidden_size": LESSON["hidden_size"] if hidden_size is None else int(hidden_size),
                 "num_hidden_layers": LESSON["num_hidden_layers"] if num_hidden_layers is None
                 else int(num_hidden_layers)}
        preset = preset_for_size(sizes["hidden_size"], sizes["num_hidden_layers"])
    recipe = page_recipe(preset, toy=corpus == "toy", **sizes)
    # A size's recipe gives the page each setting the page shows (the described settings with a widget:
    # bert_core.training.run_settings; a recipe's other values are the CLI's), besides its steps.
    shown = [s.name for s in page_settings()]
    settings = {**LESSON, "corpus": corpus, "preset": asked, "max_steps": recipe["steps"],
                **{name: value for name, value in recipe.items() if name in shown}}
    if corpus != "toy":
        settings.update(REAL_TEXT)
    for name in shown:   # a setting shown that neither sets starts from the config's default
        if name not in settings and name in TRAIN_DEFAULTS:
            settings[name] = TRAIN_DEFAULTS[name]
    return settings


def settings_caption(values: dict, objective: str = "mlm") -> str:
    """The Train page's line under its settings: the recipe settings that Start will use, read from `values` (the
    fields' own values, by setting name: lesson_settings' names), and whether they are the ones the chosen corpus
    and size start from. Computed from the fields, so it never describes settings other than those on screen."""
    preset, corpus = values["preset"], values["corpus"]
    custom = preset == "custom"
    hidden = int(values["hidden_size"]) if custom else PRESETS[preset]["hidden_size"]
    layers = int(values["num_hidden_layers"]) if custom else PRESETS[preset]["num_hidden_layers"]
    grow = float(values["grow_fraction"])
    used = Recipe(preset="nano" if custom else preset, device="cpu",
                  initializer_range=float(values["initializer_range"]), learning_rate=float(values["learning_rate"]),
                  batch_size=int(values["batch_size"]), max_seq_length=int(values["max_seq_length"]),
                  short_seq_length=int(values["short_seq_length"]),
                  short_seq_batch_size=int(values["short_seq_batch_size"]),
                  short_seq_fraction=float(values["short_seq_fraction"]), dropout=float(values["dropout"]),
                  mask_rate=float(values["mask_rate"]), grow_fraction=grow,
                  grow_from_hidden=GROW_FROM[0] if grow else 0, grow_from_layers=GROW_FROM[1] if grow else 0)
    line = used.describe(hidden, layers)
    if objective == "clm":   # a GPT masks nothing: its mask rate is not used
        line = line.replace(f", mask rate {used.mask_rate:g}", "")
    start = lesson_settings(corpus, preset, values.get("hidden_size"), values.get("num_hidden_layers"))
    size = f"a custom {layers} x {hidden} model" if custom else preset
    origin = (f"the toy lesson's settings for {size}" if corpus == "toy" else
              f"the recipe for real text on a CPU for {size}")
    changed = [_LABELS[name] for name in _LABELS if _differs(values.get(name), start[name])]
    whence = (f"{origin} (bert_core.training.recipes)" if not changed else
              f"{origin}, except the {', '.join(changed)} you set")
    counted = ""
    if grow:
        cost = (f"about {fraction_words(PAGE_STEP_S[preset] / PAGE_STEP_S['nano'])} of a {preset} step's"
                if preset in PAGE_STEP_S and preset != "nano" else "a fraction of a grown step's")
        counted = (f" The page counts steps, not seconds: a 2 x 64 step costs {cost} time on one core, so most of "
                   "the steps go to the start size.")
    return f"Start uses: {line}. These are {whence}.{counted}"


# The settings the caption's line names, as a reader knows them (the page's field labels, shortened).
_LABELS = {"learning_rate": "peak learning rate", "initializer_range": "initial weight std",
           "batch_size": "batch size", "max_seq_length": "sequence length", "short_seq_length": "short length",
           "short_seq_fraction": "short share", "short_seq_batch_size": "short batch", "dropout": "dropout",
           "mask_rate": "mask rate", "grow_fraction": "growth share"}


def _differs(shown, start) -> bool:
    try:
        return abs(float(shown) - float(start)) > 1e-9
    except (TypeError, ValueError):
        return shown != start
