"""A page's number setting as a link gives it (`?ft_batch=64`): held to its widget's range, or refused. Pure (no
Streamlit): bert_core.app.app_widgets reads every URL setting through `url_value`.

A number widget left to itself takes its minimum for a value out of its range, above as well as below (Streamlit's
number_input), or raises (its slider); and NaN passes every comparison. So the range is applied where the URL is
read, and the widget is drawn with the same range (`Within`)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

_WHOLE = re.compile(r"\s*[+-]?\d+\s*")


class LinkValueError(ValueError):
    """A link's value that a setting does not take; its message says why, never the value (a visitor's text)."""


class Within(NamedTuple):
    """A number widget's range (`st.number_input(label, *RANGE)`), also the cast its URL value is read with
    (`init_widget(key, default, RANGE)`). Whole numbers when both ends are ints."""

    lo: int | float
    hi: int | float

    def __call__(self, raw: Any) -> int | float:
        return url_number(raw, self.lo, self.hi)


def url_number(raw: Any, lo: int | float, hi: int | float) -> int | float:
    """`raw` (a URL's text) as a number held to [lo, hi], whole when both ends are ints. LinkValueError for text that
    is no number, NaN, an infinity, or a fraction where a whole number is asked."""
    text = str(raw).strip()
    whole = isinstance(lo, int) and isinstance(hi, int)
    try:
        value: int | float = int(text) if whole and _WHOLE.fullmatch(text) else float(text)
    except ValueError:
        raise LinkValueError("not a number") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LinkValueError("not a finite number")
        if whole:
            if not value.is_integer():
                raise LinkValueError("not a whole number")
            value = int(value)
    value = min(max(value, lo), hi)
    return value if whole else float(value)


def url_value(raw: Any, cast: Callable[[Any], Any]) -> Any:
    """`cast(raw)`, a URL setting's value; LinkValueError when it cannot be read or is not finite (NaN passes every
    range check). Any other failure (`int("abc")`, whose message repeats the text) becomes a plain one."""
    try:
        value = cast(raw)
    except LinkValueError:
        raise
    except (TypeError, ValueError, OverflowError):
        raise LinkValueError("not a value this setting takes") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise LinkValueError("not a finite number")
    return value


def one_of(choices: Iterable[Any], reason: str, to: Mapping[Any, Any] | None = None) -> Callable[[Any], Any]:
    """The cast of a link's choice among `choices`: the choice, or what `to` maps it to (the sidebar's
    `?model=session` names the radio's label); a LinkValueError saying `reason` for any other value (a page
    otherwise put its first choice in place of an unknown one without a word)."""
    table = {str(c): (to[c] if to is not None else c) for c in choices}

    def read(raw: Any) -> Any:
        if str(raw) in table:
            return table[str(raw)]
        raise LinkValueError(reason)

    return read
