"""Where the project's files live: the shipped checkpoint, the shared data folder, the user cache."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CHECKPOINTS_DIR = REPO_ROOT / "checkpoints"
# The pretrained model the app opens by default (trained by `python -m bert_core train`, see its metrics.json).
DEFAULT_CHECKPOINT = CHECKPOINTS_DIR / "bert-tiny-english"


def shared_data_dir() -> Path | None:
    """Return the folder of shared real text (`$BERT_SHARED_DATA` or `../shared/data`), or None when absent.

    The data is never committed to this repository; tests that need it skip when this returns None.
    """
    env = os.environ.get("BERT_SHARED_DATA")
    candidate = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


def cache_dir() -> Path:
    """Return the user cache folder for downloaded corpora (`$BERT_CORE_CACHE` overrides it)."""
    env = os.environ.get("BERT_CORE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bert_core"
