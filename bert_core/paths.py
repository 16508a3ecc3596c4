"""Where the project's files live: the shipped checkpoint, the shared data folder, the user cache."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CHECKPOINTS_DIR = REPO_ROOT / "checkpoints"
# The pretrained model the app opens by default (trained by `python -m bert_core train`, see its metrics.json).
DEFAULT_CHECKPOINT = CHECKPOINTS_DIR / "bert-tiny-english"
# Where a server's app keeps what it writes (runs, their records, saved runs): folders separated by ":", the first
# writable one wins. The Space's image sets "/data:/home/user", so that a Space with persistent storage (mounted
# at /data) keeps its runs across restarts, and one without writes in the user's home; unset, beside app.py.
APP_DATA_ENV = "BERT_EXPLORER_DATA"


def shared_data_dir() -> Path | None:
    """The folder of shared real text (`$BERT_SHARED_DATA` or `../shared/data`, never committed), or None."""
    env = os.environ.get("BERT_SHARED_DATA")
    candidate = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


def app_data_dir() -> Path:
    """The folder under which the app keeps its runs: the first existing folder of `$BERT_EXPLORER_DATA` that this
    user may write in, else this checkout (the laptop's default: `runs/` beside app.py)."""
    for entry in os.environ.get(APP_DATA_ENV, "").split(os.pathsep):
        folder = Path(entry.strip()).expanduser() if entry.strip() else None
        if folder is not None and folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
            return folder
    return REPO_ROOT


def cache_dir() -> Path:
    """The user cache folder for downloads (`$BERT_CORE_CACHE` overrides it)."""
    env = os.environ.get("BERT_CORE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bert_core"
