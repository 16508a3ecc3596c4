"""The Train page's lesson: the settings a run starts from for a corpus and a size, by the run's own setting names
(TrainConfig's and BertConfig's fields, and the run's: corpus, vocab_size, preset, dropout).

On the toy corpus a size takes the toy lesson, on real text its real-text recipe
(bert_core.training.recipes.page_recipe); the rest are the lesson's fixed settings. Torch-free: the page draws its
settings before torch loads.
"""

from __future__ import annotations

from bert_core.training.recipes import page_recipe, preset_for_size

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
# The settings a size's recipe gives the page (recipes.page_recipe), besides its steps.
RECIPE_SETTINGS = ("batch_size", "learning_rate", "max_seq_length", "dropout", "initializer_range",
                   "short_seq_length", "short_seq_fraction", "short_seq_batch_size", "mask_rate", "grow_fraction")


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
    settings = {**LESSON, "corpus": corpus, "preset": asked, "max_steps": recipe["steps"],
                **{name: recipe[name] for name in RECIPE_SETTINGS}}
    if corpus != "toy":
        settings.update(REAL_TEXT)
    return settings
