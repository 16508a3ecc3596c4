"""The one exception type for mistakes a user can make (bad file, bad setting, bad folder)."""


class BertCoreError(ValueError):
    """A user-caused error whose message says what went wrong and what to do instead: the CLI prints it as one
    line and exits with status 2; the app shows it on the page."""


# What a full disk (or a spent quota) says: as an errno, or as the words an error message carries once it has crossed
# a pipe from a training process as text.
_DISK_FULL_ERRNOS = (28, 122)   # ENOSPC, EDQUOT
_DISK_FULL_WORDS = ("No space left on device", "Disk quota exceeded", "disk is full")


def is_disk_full(error: BaseException | str | None) -> bool:
    """True when `error` (an exception, its causes, or a message) says the disk is full."""
    seen = 0
    while isinstance(error, BaseException) and seen < 10:
        if isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS:
            return True
        if any(w in str(error) for w in _DISK_FULL_WORDS):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return isinstance(error, str) and any(w in error for w in _DISK_FULL_WORDS)


def os_reason(error: BaseException) -> str:
    """An error's reason in words: an OSError's own ("No space left on device"), else its message."""
    return error.strerror if isinstance(error, OSError) and error.strerror else str(error)
