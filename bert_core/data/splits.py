"""Seeded train / validation splits of fine-tuning data: the sizes checked once, with one message, for sentences,
tagged sentences and questions alike."""

from __future__ import annotations

import random

from bert_core.errors import BertCoreError

__all__ = ["split_sizes", "seeded_split"]


def split_sizes(n: int, train_size: int | None, val_size: int | None, *, val_fraction: float = 0.1,
                source: str = "", unit: str = "examples") -> tuple[int, int]:
    """(train, validation) sizes out of `n` items: by default `val_fraction` (at least 1) for validation and the
    rest for training; BertCoreError when a size is below 1 or the two ask for more than there is."""
    if val_size is None:
        val_size = max(1, round(n * val_fraction))
    if train_size is None:
        train_size = max(1, n - val_size)
    if train_size < 1 or val_size < 1:
        raise BertCoreError(f"train and validation sizes must be at least 1 (got {train_size} and {val_size}).")
    if train_size + val_size > n:
        raise BertCoreError(f"asked for {train_size} training + {val_size} validation {unit} but "
                            f"{source or 'the data'} has only {n}. Ask for at most {n} in all.")
    return train_size, val_size


def seeded_split(n: int, train_size: int | None, val_size: int | None, *, seed: int = 0, val_fraction: float = 0.1,
                 source: str = "", unit: str = "examples") -> tuple[list[int], list[int]]:
    """Disjoint sorted (train, validation) indices into `n` items, drawn by a seeded shuffle (split_sizes' sizes)."""
    train_size, val_size = split_sizes(n, train_size, val_size, val_fraction=val_fraction, source=source, unit=unit)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return sorted(order[val_size : val_size + train_size]), sorted(order[:val_size])
