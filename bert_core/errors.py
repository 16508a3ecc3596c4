"""The one exception type for mistakes a user can make (bad file, bad setting, bad folder)."""


class BertCoreError(ValueError):
    """A user-caused error whose message says what went wrong and what to do instead.

    The CLI prints it as one line and exits with status 2; the app shows it on the page.
    """
