"""What the commands write on the terminal beside their results: a progress bar, and figures as people read them."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    """A one-line progress bar on stderr; on a non-terminal (a log file) it prints a line every `log_every_s`."""

    def __init__(self, stream=None, width: int = 30, log_every_s: float = 30.0):
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = self.stream.isatty()
        self.log_every_s = log_every_s
        self._last = 0.0
        self._shown = False

    def update(self, fraction: float, text: str = "", force: bool = False) -> None:
        """Redraw the bar at `fraction` done with `text` beside it (at most every 0.2 s on a terminal)."""
        now = time.monotonic()
        if not force and now - self._last < (0.2 if self.tty else self.log_every_s):
            return
        self._last = now
        fraction = min(max(fraction, 0.0), 1.0)
        filled = int(round(fraction * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"[{bar}] {100 * fraction:5.1f}% {text}"
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(100))
            self._shown = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line, so that what is printed next starts on its own."""
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()


def fmt_seconds(s: float | None) -> str:
    """'1:05' or '2:01:05' for a duration in seconds; '?' when unknown."""
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def percent(x) -> str:
    """A fraction as '42.00%'; 'n/a' when there is none."""
    return "n/a" if x is None else f"{100 * x:.2f}%"


def one_line(e) -> str:
    """An exception's (or an error's) message on one line (some libraries' messages span several)."""
    return " ".join(str(e).split()) or type(e).__name__
