"""A teacher-led lesson: the step a teacher is on, under an unguessable class code, for every student who opened
the class link (`Lesson?follow=CODE`) to follow.

In memory, server-wide, and small: a code and a step name each, the oldest dropped beyond `limit` classes. Nothing
a visitor types is stored but a step name checked against the lesson's own (bert_core.inspect.lesson.STEP_KEYS).
A restarted server forgets its classes: the teacher presses *Lead a class* again and shares the new link.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from bert_core.serve.runs import new_token

MAX_CLASSES = 500


class LessonClasses:
    """Class code -> (the teacher's current step, when it was set)."""

    def __init__(self, steps: tuple[str, ...], limit: int = MAX_CLASSES):
        self.steps = tuple(steps)
        self.limit = limit
        self._lock = threading.Lock()
        self._classes: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def open(self, step: str) -> str:
        """A new class at `step`; returns its code."""
        code = new_token()
        self.set_step(code, step, create=True)
        return code

    def set_step(self, code: str, step: str, create: bool = False) -> None:
        """Move class `code` to `step` (a step name of the lesson; anything else is ignored)."""
        if step not in self.steps:
            return
        with self._lock:
            if code not in self._classes and not create:
                return
            self._classes[code] = (step, time.time())
            self._classes.move_to_end(code)
            while len(self._classes) > self.limit:
                self._classes.popitem(last=False)

    def step(self, code: str | None) -> str | None:
        """The step class `code` is on, or None for a code this server does not know."""
        if not code:
            return None
        with self._lock:
            found = self._classes.get(str(code))
        return found[0] if found else None
