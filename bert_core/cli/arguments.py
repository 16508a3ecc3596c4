"""argparse types for the numbers and paths every `python -m bert_core` command takes: a bad value is refused by
argparse itself, as one `error: argument --x: ...` line, before any work starts. The bounds are sanity limits, not
tuning advice."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from bert_core.model.config import MAX_SEED
from bert_core.training import setting
from bert_core.training.setting import Limits


def int_arg(low: int, high: int | None = None):
    """An argparse type: a whole number in [low, high]."""
    return limits_arg(int, Limits(low, high))


def float_arg(low: float, high: float | None = None, low_open: bool = False, high_open: bool = False):
    """An argparse type: a finite number in the interval from low to high (open at either end when asked)."""
    return limits_arg(float, Limits(low, high, low_open, high_open))


def limits_arg(kind, limits: Limits):
    """An argparse type for a setting's described values (bert_core.training.setting): a whole number (`kind` int)
    or a finite number within its `limits`, refused in the words a config uses for them (Limits.words)."""
    whole = kind is int

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r} (expected a "
                                             f"{'whole number' if whole else 'number'})") from None
        if not (whole or math.isfinite(value)) or not limits.holds(value):
            raise argparse.ArgumentTypeError(f"must be {'' if whole else 'a finite number '}{limits.words(whole)}, "
                                             f"got {value if whole else text}")
        return value

    return parse


def path_arg(text: str) -> Path:
    """An argparse type: a path that is not empty (Path("") would silently mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the path is empty")
    return Path(text)


SEED = int_arg(0, MAX_SEED)
FRACTION = limits_arg(float, setting.FRACTION)  # (0, 1): mask rate, held-out fraction
