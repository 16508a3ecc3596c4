"""A teacher-led lesson: what a teacher's page shows, under an unguessable class code, for every student who opened
the class link (`Lesson?follow=CODE`) to follow; and the teacher's view of the class, which only the teacher's own
link (`Lesson?teach=TOKEN`, a second token, never shown to students) opens.

In memory, server-wide, and small: the teacher's step, model (a shipped checkpoint's name, checked for its shape and
never a path, or a run's view id), live run, race and latest *Take one step* record; the view ids of the class's
runs; a seat per student browser (a hash, never the browser's id) with its step, whether it follows, when it was
last seen and the index of each answer it chose. No name and no text a student typed is kept. The oldest classes go
beyond `limit`; a restarted server forgets them (the teacher leads again and shares the new link).
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import os
import re
import secrets
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import segno

from bert_core.serve.runs import new_token

MAX_CLASSES = 500
MAX_SEATS = 300      # students a class counts (a lecture hall); the seat seen longest ago goes first
MAX_RUNS = 100       # runs a class lists; the oldest goes first
MAX_CHOICES = 8      # a lesson question has a handful of choices: a larger index is not an answer
SEEN_S = 30.0        # a seat silent this long (its tab closed) no longer counts as on the lesson
PUBLIC_URL_ENV = "BERT_EXPLORER_PUBLIC_URL"   # the address students reach this server by, for the class link

_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")
# A students' class code is typed off a projector by thirty people: six characters, no 0/O or 1/I/L to confuse
# (31^6, nearly 900 million codes). It lets its holder follow a class, never lead it: that is the teacher's long token.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
_CODE = re.compile(f"[{CODE_ALPHABET}]{{{CODE_LENGTH}}}")
_SHIPPED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SEAT = re.compile(r"[0-9a-f]{20}")


def _token(value) -> str | None:
    text = str(value or "")
    return text if _TOKEN.fullmatch(text) else None


def class_code(typed) -> str | None:
    """A class code as typed ("k7p-3qx", " K7P 3QX "), in its one written form ("K7P3QX"); None when it cannot be
    one."""
    text = re.sub(r"[\s-]", "", str(typed or "")).upper()
    return text if _CODE.fullmatch(text) else None


def class_qr_png(link: str) -> bytes:
    """The class link as a QR code (PNG, black on white, its quiet zone kept): phones open it from the projector."""
    buffer = io.BytesIO()
    segno.make(link, error="m").save(buffer, kind="png", scale=8, border=4)
    return buffer.getvalue()


def seat_of(code: str, visitor: str) -> str:
    """A student's seat in class `code`: a hash of the class and the browser's id, so that a reload keeps its seat
    and its answers while the class record never holds the browser's id."""
    return hashlib.sha256(f"{code}\0{visitor}".encode()).hexdigest()[:20]


@dataclass
class _Seat:
    step: str
    following: bool
    seen: float
    answers: dict[str, int] = field(default_factory=dict)


@dataclass
class _Class:
    teacher: str
    step: str
    version: int = 0
    model: tuple[str, str] | None = None
    run: str | None = None
    race: str | None = None
    step_record: Any = None
    runs: OrderedDict = field(default_factory=OrderedDict)
    seats: OrderedDict = field(default_factory=OrderedDict)
    shown: set = field(default_factory=set)


@dataclass(frozen=True)
class ClassState:
    """What a student's page reads of its class. `version` changes whenever anything else here does, so a page
    that polls redraws only then."""

    step: str
    version: int
    model: tuple[str, str] | None
    run: str | None
    step_record: Any
    shown: frozenset
    race: str | None = None


@dataclass(frozen=True)
class ClassReport:
    """The teacher's view: counts only. `on_step`: seats seen lately by step; `answers`: the current step's
    choices, counted over every seat that answered it."""

    code: str
    step: str
    following: int
    on_step: dict
    answers: tuple[int, ...]
    runs: tuple[str, ...]
    shown: bool


class LessonClasses:
    """Class code -> its record (see the module's docstring); the teacher's token -> its class code."""

    def __init__(self, steps: tuple[str, ...], limit: int = MAX_CLASSES):
        self.steps = tuple(steps)
        self.limit = limit
        self._lock = threading.Lock()
        self._classes: OrderedDict[str, _Class] = OrderedDict()
        self._teachers: dict[str, str] = {}
        # The classes that ended here (closed or dropped), so that their links say so (bounded like the classes).
        self._ended: OrderedDict[str, None] = OrderedDict()

    # -------------------------------------------------------------------------------------------- the teacher

    def lead(self, step: str) -> tuple[str, str]:
        """A new class at `step`: (the students' code, short enough to type; the teacher's token), unrelated."""
        teacher = new_token()
        with self._lock:
            code = self._new_code()
            self._classes[code] = _Class(teacher=teacher, step=step if step in self.steps else self.steps[0])
            self._teachers[teacher] = code
            while len(self._classes) > self.limit:
                old, dropped = self._classes.popitem(last=False)
                self._teachers.pop(dropped.teacher, None)
                self._note_ended(old)
        return code, teacher

    def _new_code(self) -> str:   # the caller holds the lock
        while True:   # a code never given twice while it is known here, live or ended
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            if code not in self._classes and code not in self._ended:
                return code

    def code_for_teacher(self, teacher: str | None) -> str | None:
        """The class whose teacher's token this is, or None (a students' code is not a teacher's token)."""
        with self._lock:
            return self._teachers.get(_token(teacher) or "")

    def close(self, code: str | None) -> None:
        """End class `code`: its students' pages say so, and its teacher's link no longer opens it."""
        with self._lock:
            found = self._classes.pop(str(code or ""), None)
            if found is not None:
                self._teachers.pop(found.teacher, None)
                self._note_ended(str(code))

    def _note_ended(self, code: str) -> None:   # the caller holds the lock
        self._ended[code] = None
        while len(self._ended) > self.limit:
            self._ended.popitem(last=False)

    def ended(self, code: str | None) -> bool:
        """True when class `code` was led on this server and has ended (its teacher stopped, or it was dropped);
        False for a code this server never gave (a mistyped or cut link, or another server's)."""
        with self._lock:
            return str(code or "") in self._ended

    def _set(self, code: str | None, name: str, value, same=lambda a, b: a == b) -> None:
        """Set the field `name` of class `code`; only a change moves its version and keeps the class longest."""
        with self._lock:
            found = self._classes.get(str(code or ""))
            if found is not None and not same(getattr(found, name), value):
                setattr(found, name, value)
                self._changed(str(code), found)

    def _changed(self, code: str, c: _Class) -> None:   # the caller holds the lock
        c.version += 1
        self._classes.move_to_end(code)

    def set_step(self, code: str, step: str) -> None:
        """Move class `code` to `step` (a step name of the lesson; anything else is ignored)."""
        if step in self.steps:
            self._set(code, "step", step)

    def set_model(self, code: str, model: tuple[str, str] | None) -> None:
        """The model the teacher's sidebar has: ("shipped", a checkpoint's name), ("run", the teacher's run's view
        id), or None for one that cannot be shared (an upload, a server folder)."""
        if model is not None:
            kind, value = model
            ok = (kind == "shipped" and _SHIPPED_NAME.fullmatch(str(value))) or (kind == "run" and _token(value))
            model = (kind, str(value)) if ok else None
        self._set(code, "model", model)

    def set_run(self, code: str, view_id: str | None) -> None:
        """The teacher's live run of the lesson (its view id), or None; it is one of the class's runs too."""
        view = _token(view_id)
        self.add_run(code, view)
        self._set(code, "run", view)

    def set_race(self, code: str, view_id: str | None) -> None:
        """The teacher's race of the lesson's last step (its view id), or None."""
        self._set(code, "race", _token(view_id))

    def set_step_record(self, code: str, record: Any) -> None:
        """The teacher's latest *Take one step* (a (StepRecord, vocabulary size) pair), or None."""
        self._set(code, "step_record", record, same=lambda a, b: a is b)

    def show_split(self, code: str, step: str, shown: bool = True) -> None:
        """Show (or hide again) the class's answer split of `step` on the students' pages."""
        if step not in self.steps:
            return
        with self._lock:
            c = self._classes.get(str(code or ""))
            if c is not None and (step in c.shown) != shown:
                (c.shown.add if shown else c.shown.discard)(step)
                self._changed(str(code), c)

    def report(self, teacher: str | None, now: float | None = None, choices: int = MAX_CHOICES) -> ClassReport | None:
        """The teacher's view of their class (by the teacher's token only: a students' code gets None)."""
        token = _token(teacher)
        now = time.time() if now is None else now
        with self._lock:
            code = self._teachers.get(token or "")
            c = self._classes.get(code or "")
            if c is None:
                return None
            lately = [s for s in c.seats.values() if now - s.seen <= SEEN_S]
            on_step = {step: sum(1 for s in lately if s.step == step) for step in self.steps}
            return ClassReport(code, c.step, sum(1 for s in lately if s.following), on_step,
                               _answer_counts(c, c.step, choices), tuple(c.runs), c.step in c.shown)

    # ------------------------------------------------------------------------------------------- the students

    def step(self, code: str | None) -> str | None:
        """The step class `code` is on, or None for a code this server does not know."""
        found = self.state(code)
        return found.step if found is not None else None

    def state(self, code: str | None) -> ClassState | None:
        """What a student's page shows of class `code`, or None for a code this server does not know."""
        if not code:
            return None
        with self._lock:
            c = self._classes.get(str(code))
            if c is None:
                return None
            return ClassState(c.step, c.version, c.model, c.run, c.step_record, frozenset(c.shown), c.race)

    def seen(self, code: str | None, seat: str, step: str, following: bool, now: float | None = None) -> None:
        """A student's page of class `code` is open at `step` (following the teacher or not)."""
        if step not in self.steps or not _SEAT.fullmatch(str(seat)):
            return
        now = time.time() if now is None else now
        with self._lock:
            c = self._classes.get(str(code or ""))
            if c is None:
                return
            kept = c.seats.pop(seat, None)
            c.seats[seat] = _Seat(step, bool(following), now, kept.answers if kept is not None else {})
            while len(c.seats) > MAX_SEATS:
                c.seats.popitem(last=False)

    def answer(self, code: str | None, seat: str, step: str, choice: int | None) -> None:
        """A student's chosen answer (its index) to `step`'s question, or None to take it back."""
        if step not in self.steps or not _SEAT.fullmatch(str(seat)):
            return
        if choice is not None and not (isinstance(choice, int) and 0 <= choice < MAX_CHOICES):
            return
        with self._lock:
            c = self._classes.get(str(code or ""))
            found = c.seats.get(seat) if c is not None else None
            if found is None:
                return
            if choice is None:
                found.answers.pop(step, None)
            else:
                found.answers[step] = choice

    def shown_split(self, code: str | None, step: str, choices: int) -> tuple[int, ...] | None:
        """The class's answer counts for `step` once the teacher has shown them on the students' pages; None
        before that (a student's page can never read them earlier)."""
        with self._lock:
            c = self._classes.get(str(code or ""))
            return _answer_counts(c, step, choices) if c is not None and step in c.shown else None

    def add_run(self, code: str | None, view_id: str | None) -> None:
        """A run started by someone of class `code` from the lesson's links (by its view id: watch-only)."""
        view = _token(view_id)
        if view is None:
            return
        with self._lock:
            c = self._classes.get(str(code or ""))
            if c is not None:
                c.runs[view] = None
                while len(c.runs) > MAX_RUNS:
                    c.runs.popitem(last=False)


def _answer_counts(c: _Class, step: str, choices: int) -> tuple[int, ...]:
    """How many of the class's seats chose each of `step`'s `choices` (at most MAX_CHOICES)."""
    counts = [0] * max(0, min(int(choices), MAX_CHOICES))
    for seat in c.seats.values():
        chosen = seat.answers.get(step)
        if chosen is not None and chosen < len(counts):
            counts[chosen] += 1
    return tuple(counts)


# ------------------------------------------------------------------------------------------------ the class link


_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str | None) -> bool:
    """True for an address that names the computer itself (localhost, 127.x, ::1, 0.0.0.0): another device that
    opens it reaches itself, not this server."""
    host = (host or "").strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def network_address() -> str | None:
    """This computer's address on its network (the one its default route leaves by), or None. A UDP socket's
    connect sends nothing: it only picks the outgoing interface."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.254.254.254", 1))
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if is_loopback(address) else address


@dataclass(frozen=True)
class ClassLinks:
    students: str
    teacher: str
    note: str | None = None          # why the students' link may not open on their devices, and what to do


def class_links(page_url: str | None, code: str, teacher: str, public_url: str | None = None,
                lan_address: str | None = None) -> ClassLinks:
    """The students' and the teacher's links of a class. The base is the operator's public address
    ($BERT_EXPLORER_PUBLIC_URL) when set, else the address the teacher's browser reached this page by
    (`page_url`, st.context.url). When that names the teacher's own computer (localhost), the note says that
    students' devices cannot open it, with this computer's network address to open instead."""
    page = urlsplit(page_url or "")
    page_name = page.path.rstrip("/").rsplit("/", 1)[-1] or "Lesson"
    public = (public_url or "").strip()
    note = None
    if public and re.match(r"https?://[^\s/?#]+", public):
        base = f"{public.split('?')[0].split('#')[0].rstrip('/')}/{page_name}"
    else:
        base = f"{page.scheme or 'http'}://{page.netloc or 'localhost'}{page.path or '/' + page_name}"
        if is_loopback(page.hostname):
            port = f":{page.port}" if page.port else ""
            where = (f" On this computer's network the page is at `{page.scheme or 'http'}://{lan_address}{port}"
                     f"{page.path}` (if the server listens on the network: `--server.address 0.0.0.0`): open it "
                     "there and lead the class from that address." if lan_address else "")
            note = (f"This address names your own computer ({page.hostname}): students' devices cannot open it."
                    f"{where} Or the server's operator sets `{PUBLIC_URL_ENV}` to the address students reach it "
                    "by.")
    return ClassLinks(f"{base}?follow={code}", f"{base}?teach={teacher}", note)


def public_url() -> str | None:
    """The operator's address for class links ($BERT_EXPLORER_PUBLIC_URL), or None."""
    return os.environ.get(PUBLIC_URL_ENV) or None
