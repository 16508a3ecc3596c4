"""argparse types for the numbers and paths every `python -m bert_core` command takes.

A bad value is refused by argparse itself, as one `error: argument --x: ...` line, before any work starts; every
subcommand's module in this wing uses the same types. The bounds are sanity limits, not
tuning advice.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from bert_core.model.config import MAX_BATCH, MAX_SEED, MAX_SEQ_LEN  # noqa: F401  (the bounds the types use)
from bert_core.training import setting
from bert_core.training.setting import Limits


def int_arg(low: int, high: int | None = None):
    """An argparse type: a whole number in [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r} (expected a whole number)") from None
        if value < low or (high is not None and value > high):
            bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    return parse


def float_arg(low: float, high: float | None = None, low_open: bool = False, high_open: bool = False):
    """An argparse type: a finite number in the interval from low to high (open at either end when asked)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid float value: {text!r} (expected a number)") from None
        too_low = value <= low if low_open else value < low
        too_high = high is not None and (value >= high if high_open else value > high)
        if not math.isfinite(value) or too_low or too_high:
            left, right = "(" if low_open else "[", ")" if high_open or high is None else "]"
            bounds = f"in {left}{low:g}, {'inf' if high is None else f'{high:g}'}{right}"
            raise argparse.ArgumentTypeError(f"must be a finite number {bounds}, got {text}")
        return value

    return parse


def path_arg(text: str) -> Path:
    """An argparse type: a path that is not empty (Path("") would silently mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the path is empty")
    return Path(text)


def limits_arg(kind, limits: Limits):
    """An argparse type for a setting's described values (bert_core.training.setting): a whole number (`kind` int)
    or a finite number within its `limits`."""
    if kind is int:
        return int_arg(int(limits.low), None if limits.high is None else int(limits.high))
    return float_arg(limits.low, limits.high, low_open=limits.low_open, high_open=limits.high_open)


SEED = int_arg(0, MAX_SEED)
POSITIVE = limits_arg(float, setting.POSITIVE)
NON_NEGATIVE = limits_arg(float, setting.NON_NEGATIVE)
FRACTION = limits_arg(float, setting.FRACTION)  # (0, 1): mask rate, held-out fraction
RATE = limits_arg(float, setting.RATE)  # [0, 1): dropout, warmup
