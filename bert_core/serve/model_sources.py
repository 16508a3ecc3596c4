"""Where the explorer's models come from: checkpoint folders (ours or Hugging Face's) loaded and described for the
pages, which cache and pick among them (`bert_core.app`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_core.data.corpora import TOY_CORPUS, corpus_label
from bert_core.errors import BertCoreError
from bert_core.inspect.safe_text import markdown
from bert_core.model.files import is_checkpoint_folder, read_json
from bert_core.model.tokenization import BertTokenizer
from bert_core.paths import DEFAULT_CHECKPOINT
from bert_core.serve.app_storage import list_runs

CHECKPOINT_ENV = "BERT_EXPLORER_CHECKPOINT"        # overrides the shipped checkpoint (tests point it at a fixture)


def default_checkpoint() -> Path:
    """`$BERT_EXPLORER_CHECKPOINT`, else `bert_core.paths.DEFAULT_CHECKPOINT`."""
    env = os.environ.get(CHECKPOINT_ENV)
    return Path(env) if env else DEFAULT_CHECKPOINT


@dataclass
class ActiveModel:
    model: Any
    tokenizer: Any
    source: str
    path: Path | None = None
    description: str = ""
    trainer_state: dict | None = None
    step: int | None = None
    # A folder `grow` wrote has no trainer state: the rate its source's weights learnt at (growth.json).
    grown_rate: float | None = None

    @property
    def config(self):
        return self.model.config

    @property
    def short_name(self) -> str:
        """How a run list names it, never by a server path."""
        return self.path.name if self.path is not None else "the model trained in this session"

    @property
    def pretraining_rate(self) -> float | None:
        """The highest rate behind its weights, which finetune.finetune_learning_rate scales; None when unrecorded."""
        from bert_core.training.run_builder import pretraining_rate_of   # torch: not at the top (TORCH_FREE)

        return pretraining_rate_of(self.trainer_state) or self.grown_rate

    @property
    def corpora(self) -> tuple[str, ...]:
        """The corpora its training recorded, its start run's included."""
        meta = (self.trainer_state or {}).get("metadata", {})
        start = meta.get("init_from") if isinstance(meta.get("init_from"), dict) else {}
        return tuple(str(c) for c in (*(meta.get("corpora") or ()), *(start.get("corpora") or ())))

    @property
    def toy_only(self) -> bool:
        """All it has read is the toy grammar: it knows no English."""
        return bool(self.corpora) and all(c.lower() == TOY_CORPUS for c in self.corpora)

    @property
    def causal(self) -> bool:
        """A GPT-style model (causal attention): it continues text and cannot fill a [MASK]."""
        return self.model.config.attention == "causal"

    def unigram_counts(self) -> dict[int, int] | None:
        meta = (self.trainer_state or {}).get("metadata", {})
        counts = meta.get("unigram_counts")
        if counts:
            return {i: c for i, c in enumerate(counts) if c}
        return None


def shipped_checkpoints() -> dict[str, Path]:
    """The checkpoint folders shipped with the app by name: the default one first, then the others beside it."""
    default = default_checkpoint()
    parent = default.parent
    found = {p.name: p for p in (sorted(parent.iterdir()) if parent.is_dir() else [])
             if p.is_dir() and is_checkpoint_folder(p)}
    first = {default.name: found.pop(default.name)} if default.name in found else {}
    return {**first, **found}


def checkpoints_beside_default(exclude: str | Path | None = None) -> dict[str, Path]:
    """The models a page can set beside the active one: the shipped checkpoints, then the saved runs as "saved: NAME";
    less `exclude`, the active model's folder (or a saved run's name, which the sidebar records as its path)."""
    skip = Path(exclude).resolve() if exclude is not None else None
    found = shipped_checkpoints()
    found.update({f"saved: {run.name}": run.folder for run in list_runs() if run.name != str(exclude)})
    return {name: path for name, path in found.items() if path.resolve() != skip}


def folder_stamp(folder: Path) -> float:
    """The newest modification time in `folder` (a re-saved checkpoint gets a new stamp)."""
    stamps = [p.stat().st_mtime for p in folder.iterdir() if p.is_file()]
    return max(stamps) if stamps else 0.0


def load_folder(folder: str | Path) -> tuple[Any, Any, dict | None]:
    """Load (model, tokenizer, trainer_state or None) from a checkpoint folder, ours or a Hugging Face BERT."""
    # Imported here, not at the top: it loads torch, and the server imports this module without it (TORCH_FREE).
    from bert_core.model.hf import load_pretrained

    text = str(folder).strip()
    if not text:
        raise BertCoreError("type the path of a checkpoint folder")
    path = Path(text).expanduser()
    if not path.exists():
        raise BertCoreError(f"{path} does not exist: give the path of a checkpoint folder on the server")
    if not path.is_dir():
        raise BertCoreError(f"{path} is a file, not a folder: give the folder holding config.json")
    if not is_checkpoint_folder(path):
        raise BertCoreError(f"{path} is not a checkpoint folder: it needs config.json and model.safetensors "
                            "(or pytorch_model.bin) plus tokenizer files")
    model = load_pretrained(path)
    tokenizer = BertTokenizer.load(path)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise BertCoreError(f"the tokenizer in {path} has {tokenizer.vocab_size} tokens but the model only "
                            f"{model.config.vocab_size}: they do not belong together")
    state = None
    state_file = path / "trainer_state.json"
    if state_file.is_file():
        try:
            state = read_json(state_file)
        except Exception:  # noqa: BLE001 - a damaged state file only loses the history, not the model
            state = None
    return model, tokenizer, state


def _corpora(recorded) -> str:
    names = list(dict.fromkeys(markdown(corpus_label(c)) for c in recorded or ()))   # a file's name: Markdown
    if not names:
        return "unrecorded text"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def describe_checkpoint(name: str | Path, model, state: dict | None) -> str:
    """One paragraph on a checkpoint: sizes and recorded training. `name` is how the reader picked it; corpora and a
    start run are named as a reader knows them, never by the training machine's paths."""
    cfg = model.config
    n_params = sum(p.numel() for p in model.parameters())
    # A name (an uploaded file's) in a code span, which shows its text as written: only a ` could close it early.
    shown = str(name).replace("`", "'")
    text = (f"`{shown}`: {cfg.num_hidden_layers} layers, hidden size {cfg.hidden_size}, "
            f"{cfg.num_attention_heads} heads, vocabulary {cfg.vocab_size:,} ({n_params / 1e6:.1f}M parameters).")
    if state:
        meta = state.get("metadata", {})
        text += f" Trained for {state.get('step', 0):,} steps on {_corpora(meta.get('corpora'))}"
        if state.get("elapsed_s"):
            text += f" in {state['elapsed_s'] / 60:.0f} min"
        start = meta.get("init_from")
        if isinstance(start, dict):  # the time above is this run's only: name the run it started from
            steps = f" of {start['step']:,} steps" if isinstance(start.get("step"), int) else ""
            size = "`" + start["preset"].replace("`", "'") + "` " if isinstance(start.get("preset"), str) else ""
            on = f" on {_corpora(start['corpora'])}" if start.get("corpora") else ""
            text += f", continuing an earlier {size}run{steps}{on}"
        text += "."
    else:
        text += " No training record (e.g. a Hugging Face download)."
    return text
