"""What the Export page hands out: a run's per-step history and held-out evaluations as CSV, its configuration as
JSON, from a run of this session (live) or from a checkpoint's trainer_state.json; and all of it in one zip with
the checkpoint folder, the command that repeats the run and its figures (`run_bundle`)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from bert_core.inspect import figures
from bert_core.model.files import zip_checkpoint


@dataclass
class RunRecord:
    """A run's history rows, evaluation rows, baselines and configuration (model + training) as plain data."""

    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    baselines: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)  # the commands that made the model (metrics.json's)


def run_record(model_config=None, trainer=None, trainer_state: dict | None = None) -> RunRecord:
    """The record of a live `trainer` (a Trainer or its mirror) when given, else of a saved `trainer_state`."""
    if trainer is not None:
        history = [dataclasses.asdict(e) for e in trainer.history]
        evals = [dataclasses.asdict(e) for e in trainer.evals]
        train_config, baselines = trainer.config.to_dict(), dict(trainer.baselines)
        metadata = trainer.metadata or {}
    else:
        state = trainer_state or {}
        history, evals = list(state.get("history", [])), list(state.get("evals", []))
        train_config, baselines = state.get("train_config"), dict(state.get("baselines", {}))
        metadata = state.get("metadata") or {}
    config = {"model": model_config.to_hf_dict() if model_config is not None else None, "training": train_config}
    commands = [c for c in metadata.get("commands", []) if isinstance(c, str)]
    return RunRecord(history, evals, baselines, config, commands)


# The shared data folder's files that the shipped models' commands name (`../shared/data/...`): a clone of the
# project does not have that folder, so the Export page says what each file is and where to get it.
SHARED_FILES = {
    "wikitext-2/valid.txt": "WikiText-2's validation split in its tokenised form (wiki.valid.tokens of "
                            "wikitext-2-v1, Merity et al. 2016, CC BY-SA 3.0)",
    "brown/brown.txt": "the Brown Corpus as plain text; `--corpus brown` downloads it by name",
    "tinyshakespeare/input.txt": "Tiny Shakespeare; `--corpus tinyshakespeare` downloads it by name",
    "movie_reviews/reviews.txt": "Pang and Lee's polarity dataset v2.0 reviews (NLTK's movie_reviews), one sentence a "
                                 "line",
    "state_union/addresses.txt": "the State of the Union addresses of NLTK's state_union, a paragraph a line",
    "news/abc.txt": "NLTK's abc corpus (ABC rural and science news, 2006)",
    "movie_plots/plots.txt": "the objective half of Pang and Lee's subjectivity dataset v1.0 (IMDb plot sentences)",
    "conll2000/train.txt": "CoNLL-2000's chunking training split; `download conll2000` fetches it",
}
_SHARED_PATH = re.compile(r"(?:\.\./)+shared/data/([\w./-]+)")


def shared_data_notes(commands: list[str]) -> list[str]:
    """For each `../shared/data/...` file the commands name, a line saying what it is and where to get it: a
    clone of the project runs the commands once those files are where the commands say (or their paths changed)."""
    notes = []
    for rel in dict.fromkeys(m.group(1) for c in commands for m in _SHARED_PATH.finditer(c)):
        what = SHARED_FILES.get(rel, "a file of the project's shared data folder")
        notes.append(f"`../shared/data/{rel}`: {what}.")
    return notes


def rows_to_csv(rows: list[dict]) -> str:
    """Rows of one shape as CSV text with a header (empty text for no rows)."""
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


def history_label(history: list[dict]) -> str:
    """'N steps', or 'N of M steps' when a long run's history was thinned (TrainConfig.history_limit)."""
    last = history[-1].get("step", len(history)) if history else 0
    return f"{len(history):,} steps" if len(history) >= last else f"{len(history):,} of {last:,} steps"


def run_figures(record: RunRecord, smoothing: float = 0.0) -> dict:
    """The run's curves as the Train page draws them (name -> Plotly figure), for the bundle."""
    if not record.history and not record.evals:
        return {}
    causal = (record.config.get("training") or {}).get("objective") == "clm"
    drawn = {"loss": figures.loss_figure(record.history, record.evals, record.baselines, smoothing, causal),
             "accuracy": figures.accuracy_figure(record.history, record.evals, record.baselines, smoothing, causal)}
    if not causal:   # a GPT masks nothing: no figure of masking decisions
        drawn["accuracy-by-decision"] = figures.decision_accuracy_figure(record.history, smoothing)
    drawn["learning-rate"] = figures.rate_figure(record.history)
    return drawn


_BUNDLE_README = """A BERT explorer run, in one bundle.

checkpoint/          the model: Hugging Face's BertForPreTraining.from_pretrained("checkpoint") loads it, and
                     BertTokenizerFast.from_pretrained("checkpoint") its tokenizer; trainer_state.json is the run
command.txt          the command line(s) that made it (python -m bert_core train ...), oldest first
history.csv          one row per recorded training step (long runs keep every 2nd, 4th... step evenly)
evaluations.csv      the held-out evaluations
config.json          the model's and the training's settings
figures/NAME.json    the curves as Plotly figures (plotly.io.read_json), and as NAME.html (opens in a browser;
                     it loads plotly.js from its CDN)
"""


def run_bundle(save: Callable[[Path], Any], record: RunRecord, figures: Mapping[str, Any] | None = None) -> bytes:
    """One zip for a run: its checkpoint folder written by `save(folder)` (a folder `transformers` loads as it
    is), the history and evaluations as CSV, the configuration, the command that repeats it, and `figures`
    (name -> Plotly figure) as Plotly JSON and HTML. No PNGs: they would need kaleido, which is not a dependency."""
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(zip_checkpoint(save))) as saved, \
            zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for entry in saved.infolist():  # bert-checkpoint/NAME -> checkpoint/NAME
            zf.writestr("checkpoint/" + entry.filename.split("/", 1)[1], saved.read(entry))
        zf.writestr("README.txt", _BUNDLE_README)
        notes = [f"# {note}" for note in shared_data_notes(record.commands)]
        if notes:   # a clone has no ../shared/data: say what each named file is, as comments the shell ignores
            notes.insert(0, "# Files of the project's shared data folder (a fresh clone has none of them):")
        zf.writestr("command.txt", "\n".join(record.commands or ["(no command recorded for this model)"]) + "\n"
                    + "".join(f"{line}\n" for line in notes))
        zf.writestr("history.csv", rows_to_csv(record.history))
        zf.writestr("evaluations.csv", rows_to_csv(record.evals))
        zf.writestr("config.json", json.dumps({**record.config, "baselines": record.baselines}, indent=2))
        for name, fig in (figures or {}).items():
            zf.writestr(f"figures/{name}.json", fig.to_json())
            zf.writestr(f"figures/{name}.html", fig.to_html(include_plotlyjs="cdn", full_html=True))
    return buf.getvalue()


def checkpoint_saver(model, tokenizer, trainer_state: dict | None = None) -> Callable[[Path], Any]:
    """A `save(folder)` for `run_bundle` that writes a loaded model (a checkpoint opened in the sidebar)."""
    # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
    from bert_core.model.checkpoint import save_checkpoint

    return lambda folder: save_checkpoint(folder, model, tokenizer=tokenizer, trainer_state=trainer_state)
