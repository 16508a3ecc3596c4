"""The unigram plateau, told: a run whose [MASK] accuracy is still at "always guess the most frequent token"
after a good share of its budget says so, with the usual causes (docs/benchmarks.md, "The unigram plateau").

Overall accuracy is not enough to tell: it rises as the model learns to copy the 10% of chosen tokens that are
kept as they are, while the [MASK]ed positions, the ones that need context, stay at the unigram line. So the check
reads the training accuracy at [MASK] positions (next-token accuracy for a GPT-style run) over the newest steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# Checked once this share of the run is done: before it, a plateau is where every run starts.
CHECK_AFTER = 0.3
# "Still at the line": [MASK] accuracy below this multiple of the unigram baseline's accuracy.
LINE_MULTIPLE = 1.1
# Steps averaged (the newest ones): one step's accuracy over a few dozen masked tokens is noisy.
WINDOW = 50


def unigram_accuracy(baselines: Mapping | None) -> float | None:
    """The unigram baseline's held-out accuracy from a trainer's `baselines`, or None."""
    unigram = (baselines or {}).get("unigram") if isinstance(baselines, Mapping) else None
    value = unigram.get("accuracy") if isinstance(unigram, Mapping) else None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def recent_masked_accuracy(history: Sequence, window: int = WINDOW) -> float | None:
    """Mean training accuracy at [MASK] positions over the newest `window` steps (all positions when a run has
    no masking decisions: a GPT-style run)."""
    # A snapshot list already (RunLoop.history, the proxy's) of StepEvents; a GPT's have no mlm_acc_masked.
    values = [e.mlm_acc if e.mlm_acc_masked is None else e.mlm_acc_masked for e in history[-window:]]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if len(values) >= min(window, 10) else None


def plateau_warning(history: Sequence, baselines: Mapping | None, fraction_done: float | None,
                    causal: bool = False) -> str | None:
    """A plain warning when the run is still on the unigram plateau after CHECK_AFTER of its budget; else None."""
    if fraction_done is None or fraction_done < CHECK_AFTER:
        return None
    line, acc = unigram_accuracy(baselines), recent_masked_accuracy(history)
    if line is None or acc is None or acc >= LINE_MULTIPLE * line:
        return None
    where = "next-token" if causal else "[MASK]"
    return (f"after {fraction_done:.0%} of the run the model is still on the unigram plateau: its {where} accuracy "
            f"({acc:.1%} over the last steps) is no better than always guessing the most frequent token "
            f"({line:.1%}). Usual causes: a learning rate too high or too low for this size, initial weights too "
            "narrow (initializer_range), or too few steps or too little text for the model. The recipe for each "
            "size (bert_core.training.recipes) sets the first two; a longer budget or a smaller size gives more steps.")
