"""What the pages use of the hosting of a Train-page run (tests/test_layers.py lists the modules a page may import),
and the words the Train page says about runs. The jobs themselves are `thread_job`'s and `training_process`'s; which
one a run gets is `job_factory`'s.
"""

from __future__ import annotations

from bert_core.serve.job_factory import PROCESS_ENV  # noqa: F401 - re-exported
from bert_core.serve.job_base import SLOTS_ENV as MAX_TRAININGS_ENV  # noqa: F401 - re-exported

# A Train-page run's spec and what the page makes it from (bert_core.training.train_spec), and what the server does
# with it (bert_core.serve.train_spec); pages import them from here (tests/test_layers.py lists the modules a page may
# import), as the tests and benchmarks do.
from bert_core.serve.train_spec import (  # noqa: F401 - re-exported
    build_trainer,
    corpus_text,
    default_probes,
    page_corpus,
    preview_corpus,
    save_start_weights,
    spec_with_change,
)
from bert_core.training.train_spec import (  # noqa: F401 - re-exported
    PAGE_SETTINGS,
    WIDGETS,
    TrainSpec,
    default_spec,
    page_spec,
    page_values_of,
    validate_spec,
    widget_defaults,
)


def format_duration(seconds) -> str:
    """'…' for unknown, '42s', '3m 05s': how the pages show elapsed time and time left."""
    if seconds is None:
        return "…"
    seconds = int(seconds)
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# The Train page's objective choice, mapped onto TrainSpec.train (TrainConfig's objective and nsp).
OBJECTIVE_LABELS = {"mlm": "BERT: masked LM + NSP", "clm": "GPT: next token"}
OBJECTIVE_HELP = ("BERT hides 15% of the tokens and predicts them from both sides (and, with NSP, whether B follows "
                  "A); GPT predicts every next token from the tokens before it, with causal attention. Same "
                  "encoder, data and budget: only what is predicted, and from what, differs.")
# Said beside a GPT run's charts, which are named next-token figures.
NEXT_TOKEN_NOTE = ("A GPT-style run: the loss and accuracy are next-token figures (every position predicts the token "
                   "after it, seeing only the tokens before), not masked-token ones, so they do not compare one for "
                   "one with a BERT's; there are no masking decisions to split them by, and no NSP.")
