"""Seeded train / validation splits of fine-tuning data: the sizes checked once, with one message, and whole groups
dealt out (a passage's questions), for sentences, tagged sentences and questions alike."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Hashable, Sequence
from typing import TypeVar

from bert_core.errors import BertCoreError

T = TypeVar("T", bound="RowData")


class RowData:
    """Fine-tuning data (a dataclass) whose `ROWS` fields hold one entry a row (or None): its size, and a part of it
    by row indices, in their order, with everything else (label names, scheme) kept."""

    ROWS: tuple[str, ...] = ()
    source: str
    notes: list[str]

    def __len__(self) -> int:
        return len(getattr(self, self.ROWS[0]))

    def subset(self: T, indices: Sequence[int], source_suffix: str = "") -> T:
        picked = {f: None if (rows := getattr(self, f)) is None else [rows[i] for i in indices] for f in self.ROWS}
        return dataclasses.replace(self, **picked, source=self.source + source_suffix, notes=list(self.notes))


def split_data(data: T, train_size: int | None = None, val_size: int | None = None, *, seed: int = 0,
               val_fraction: float = 0.1, unit: str = "examples", groups: Sequence[Hashable] | None = None
               ) -> tuple[T, T]:
    """A seeded, disjoint (train, validation) pair of `data.subset`s, rows in order (by default `val_fraction` for
    validation). Rows sharing a key of `groups` (a passage's questions) stay on one side: groups are dealt out whole
    in a seeded order, to validation until it holds its number, then to training (all the rest by default)."""
    n = len(data)
    if groups is None:
        dealt = [[i] for i in range(n)]
    else:
        by_key: dict[Hashable, list[int]] = {}
        for i, key in enumerate(groups):
            by_key.setdefault(key, []).append(i)
        dealt = list(by_key.values())
        if len(dealt) < 2:
            raise BertCoreError(f"{data.source or 'the data'} has {len(dealt)} passage(s); a split that keeps "
                                "passages apart needs at least 2. Add more passages.")
    rest = train_size is None
    val_size = max(1, round(n * val_fraction)) if val_size is None else val_size
    train_size = max(1, n - val_size) if train_size is None else train_size
    if train_size < 1 or val_size < 1:
        raise BertCoreError(f"train and validation sizes must be at least 1 (got {train_size} and {val_size}).")
    if train_size + val_size > n:
        raise BertCoreError(f"asked for {train_size} training + {val_size} validation {unit} but "
                            f"{data.source or 'the data'} has only {n}. Ask for at most {n} in all.")
    random.Random(seed).shuffle(dealt)
    val: list[int] = []
    taken = 0
    while len(val) < val_size and taken < len(dealt) - 1:  # keep at least one group for training
        val += dealt[taken]
        taken += 1
    train: list[int] = []
    for group in dealt[taken:]:
        if len(train) >= train_size and not rest:
            break
        train += group
    if len(val) < val_size or not train or len(train) <= train_size - max(len(group) for group in dealt):
        raise BertCoreError(f"{data.source or 'the data'} cannot give {train_size} training and {val_size} validation "
                            f"{unit} with whole passages on each side ({n} {unit} on {len(dealt)} passages). "
                            f"Ask for fewer {unit}.")
    return data.subset(sorted(train), " (train)"), data.subset(sorted(val), " (validation)")
