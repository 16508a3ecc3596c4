"""What each pretraining objective is made of, decided in one place and importable without torch (the Train page,
the comparison knobs and held-out scoring ask it before any model exists)."""

from __future__ import annotations

from bert_core.errors import BertCoreError

OBJECTIVES = ("mlm", "clm")
# The share of tokens BERT's masked LM chooses to predict (its paper's 15%): every default mask rate is this one.
MASK_RATE = 0.15


def objective_has_nsp(objective: str) -> bool:
    """Whether an objective can carry next-sentence prediction: BERT's masked LM can (on by default); a GPT's
    next-token objective reads one stream of text, so it has no sentence pairs to judge."""
    return objective == "mlm"


def objective_settings(objective: str) -> dict:
    """The TrainConfig fields an objective sets: a next-token (GPT) run has NSP off and masks nothing; BERT's keeps
    whatever NSP setting it is given."""
    if objective not in OBJECTIVES:
        raise BertCoreError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    return {"objective": objective} if objective_has_nsp(objective) else {"objective": objective, "nsp": False}
