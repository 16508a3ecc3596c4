"""Cleaning of pretraining text from public collections (issue 60): pure functions on strings, no files.

Project Gutenberg books carry a licence header and footer, hard-wrapped lines, illustration and transcriber
notes; some are not in English. Newsgroup posts carry mail headers, quoted replies and signatures. What each
function removes is what a model should not spend its budget learning to predict.
"""

from __future__ import annotations

import itertools
import re

# The markers of the Gutenberg licence around a book's text, in the styles used from 1990s to today's files.
_START = re.compile(
    r"^\s*\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG.*$"
    r"|^\s*\*END\*THE SMALL PRINT!.*$", re.I | re.M)
_END = re.compile(
    r"^\s*\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG.*$"
    r"|^\s*End of (?:the )?Project Gutenberg.*$", re.I | re.M)
_LANGUAGE = re.compile(r"^Language:\s*(.+?)\s*$", re.M)
# Credits lines right after the start marker ("Produced by ...", "E-text prepared by ...") name volunteers.
_CREDITS = re.compile(r"^\s*(?:Produced by|E-?text prepared by|Transcribed by|This e-?text was|"
                      r"Prepared by|Scanned by)\b.*$", re.I)


def strip_gutenberg(text: str) -> tuple[str, bool]:
    """(the book's text between the Gutenberg start and end markers, whether both were found); without them the text
    comes back whole: a caller decides whether an unmarked file is a book at all."""
    start = _START.search(text)
    end = _END.search(text, start.end() if start else 0)
    if start is None or end is None:
        return text, False
    return text[start.end():end.start()], True


def gutenberg_language(text: str) -> str | None:
    """The `Language:` line of a Gutenberg header (lower-cased), or None when the header has none."""
    m = _LANGUAGE.search(text[:20_000])
    return m.group(1).strip().lower() if m else None


# Lines a reader of the printed book never read as text: picture captions, notes by transcribers, page
# furniture. Bracketed notes can run over several lines; those are cut by `_BRACKET_NOTE` on the whole paragraph.
_NOTE_WORDS = r"(?:Illustration|Transcriber'?s?\s+Note|Transcriber|Footnote|Sidenote|Note of transcriber|Errata)"
_BRACKET_NOTE = re.compile(r"\[\s*" + _NOTE_WORDS + r"[^\]]*\]", re.I)
_SEPARATOR = re.compile(r"^[\s*_=\-#~.·•]*$")
_ITALIC = re.compile(r"(?<![A-Za-z0-9])_([^_\n]+)_(?![A-Za-z0-9])")
_SPACES = re.compile(r"\s+")


def paragraphs(text: str, min_words: int = 1) -> list[str]:
    """The text's paragraphs (blocks between blank lines), hard-wrapped lines rejoined with single spaces.

    A word hyphenated at a line's end ("fore-\\nseeable") is rejoined without the hyphen only when the next line
    starts in lower case, as a compositor's break would. Illustration, transcriber and footnote notes in brackets,
    separator lines and credit lines are dropped; `_italics_` lose their underscores."""
    out = []
    for block in re.split(r"\n[ \t\r\f\v]*\n", text.replace("\r\n", "\n").replace("\r", "\n")):
        block = _BRACKET_NOTE.sub(" ", block)
        lines = [ln.strip() for ln in block.split("\n")]
        lines = [ln for ln in lines if ln and not _SEPARATOR.match(ln) and not _CREDITS.match(ln)]
        if not lines:
            continue
        joined = lines[0]
        for ln in lines[1:]:
            if joined.endswith("-") and not joined.endswith("--") and ln[:1].islower() and joined[-2:-1].isalpha():
                joined = joined[:-1] + ln
            else:
                joined = joined + " " + ln
        joined = _SPACES.sub(" ", _ITALIC.sub(r"\1", joined)).strip()
        # An unclosed "[Illustration: ..." that ran to the paragraph's end.
        if re.match(r"\[\s*" + _NOTE_WORDS, joined, re.I):
            continue
        if joined and len(joined.split()) >= min_words:
            out.append(joined)
    return out


# The commonest English function words: prose in English has about 40-50% of its words among them, French or
# German prose under 10%, so a share under ENGLISH_MIN_SHARE marks a book in another language.
_ENGLISH = frozenset(
    "the of and to a in that is was he for it with as his on be at by i had not are but from or have an they "
    "which you were her she there would their we him been has when who will no more if out so said what up its "
    "about into them than can only other my me could our your these do any then this".split())
ENGLISH_MIN_SHARE = 0.2
_WORD = re.compile(r"[a-z0-9]+")


def is_english(text: str, sample_words: int = 5000) -> bool:
    """Whether at least ENGLISH_MIN_SHARE of the first `sample_words` words are common English function words."""
    words = _WORD.findall(text[: sample_words * 12].lower())[:sample_words]
    return bool(words) and sum(w in _ENGLISH for w in words) / len(words) >= ENGLISH_MIN_SHARE


def normalized_words(text: str) -> list[str]:
    """Lower-cased runs of letters and digits: the words compared for duplicates and contamination, so that
    tokenised copies (`it 's`, `@-@`) match the raw text they came from."""
    return _WORD.findall(text.lower())


_HEADER = re.compile(r"^[A-Za-z][A-Za-z0-9-]*:\s")
_QUOTE_INTRO = re.compile(r"(?:writes|wrote|says|said)\s*:\s*$", re.I)


def newsgroup_body(post: str) -> str:
    """A 20 Newsgroups post without its mail headers, quoted lines (`>`, `|`), the lines that introduce a quote
    ("In article <...> x writes:") and the signature after a `-- ` line: only what the poster wrote.

    The copy in spark-ml-dashboard stores each post on one line with tabs for line breaks; both forms are read."""
    text = post.replace("\r\n", "\n")
    if "\n" not in text.strip("\n") and "\t" in text:
        text = text.replace("\t", "\n")
    lines = text.split("\n")
    i = 0
    while i < len(lines) and lines[i].strip() and (_HEADER.match(lines[i]) or lines[i][:1] in " \t"):
        i += 1  # header lines, and their continuation lines that start with white space
    body = itertools.takewhile(lambda ln: ln.rstrip() != "--", lines[i:])
    return "\n".join(ln for ln in body
                     if not ln.strip().startswith((">", "|", ":")) and not _QUOTE_INTRO.search(ln.strip()))
