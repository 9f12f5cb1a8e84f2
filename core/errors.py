"""Errors that end a command with a one-line message and exit status 2.

Anything the user can fix (a flag, a config, a history, a host) raises
UserError; the CLI prints its message on one line, never a traceback.
"""


class UserError(Exception):
    """Bad input or an environment the harness cannot work in: exit 2."""

    exit_status = 2


class HistoryError(UserError):
    """A history that does not follow docs/history.md."""


def first_line(e: BaseException | str) -> str:
    """An exception's message (or a reason's text) on one line: its first, or
    the type's name when it says nothing. librdkafka's KafkaError carries its
    text in `.str()`."""
    args = getattr(e, "args", ())
    if args and hasattr(args[0], "str"):
        return args[0].str()
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
