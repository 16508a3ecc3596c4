"""Figures built once for everyone who looks at the same thing: a run's word map at a snapshot, drawn by each of
thirty viewers' Train pages every few seconds, was the largest cost of a viewer's page (43% of its script run in a
py-spy profile, docs/benchmarks.md). A figure is kept with its owner (a run's trainer or probe store, held weakly:
it goes with the run) under a key of what it shows; the pages only read it (app_drawing.plotly: in place and
idempotent)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from bert_core.inspect.figure_floor import projector_figure
from bert_core.inspect.figures import clear_of_toolbar


class FigureCache:
    """`get(owner, key, build)`: the figure `build()` made for this owner and key, made once; each owner keeps its
    `keep` latest. `builds` counts the builds (a test reads it)."""

    def __init__(self, keep: int = 8):
        self.keep = keep
        self.builds = 0
        self._lock = threading.Lock()
        self._built: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self, owner: Any, key: Hashable, build: Callable[[], Any]) -> Any:
        with self._lock:
            found = self._built.get(owner, {}).get(key)
        if found is not None:
            return found
        # Laid out for the projector and the toolbar now, once: the page's own pass then finds nothing to do.
        fig = clear_of_toolbar(projector_figure(build()))
        with self._lock:
            self.builds += 1
            entries = self._built.setdefault(owner, {})
            entries[key] = fig
            while len(entries) > self.keep:
                entries.pop(next(iter(entries)))
        return fig


SHARED_FIGURES = FigureCache()   # one per server process: every session's pages draw from it
