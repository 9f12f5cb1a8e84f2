"""Errors that end a command with a one-line message and exit status 2.

Anything the user can fix (a flag, a config, a history, a host) raises
UserError; the CLI prints its message on one line, never a traceback.
"""


class UserError(Exception):
    """Bad input or an environment the harness cannot work in: exit 2."""

    exit_status = 2


class HistoryError(UserError):
    """A history that does not follow docs/history.md."""
