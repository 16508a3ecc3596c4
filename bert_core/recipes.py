"""The default pretraining recipe for real text, as plain values (no torch import): `training.default_recipe()`
builds the CLI's defaults from it, and the app's Train page shows it for every corpus but the toy one.

Chosen with benchmarks/time_to_quality.py at the 5-minute budget of a lesson (figures, commands and the machine
in docs/benchmarks.md, "Time to quality"). At that budget the model is far from overfitting, so it pays to take
many small steps: the nano preset (2 layers, hidden 64: about twice the steps of tiny in the same time), batch
16, a high peak rate and no dropout (a deviation from the paper's 0.1). Two settings break the unigram plateau
("The unigram plateau" in docs/benchmarks.md): initial weights with std 0.1 (a deviation from BERT's 0.02,
chosen for hidden size 768) and short sequences first (TrainConfig's short_seq_length, a deviation from the
paper's 128-then-512). A 25% mask rate was tried and lost.
"""

REAL_TEXT_RECIPE = {
    "preset": "nano",
    "dropout": 0.0,
    "initializer_range": 0.1,
    "batch_size": 16,
    "learning_rate": 2e-3,
    "max_seq_length": 128,
    "short_seq_length": 32,
    "short_seq_fraction": 0.5,
}
