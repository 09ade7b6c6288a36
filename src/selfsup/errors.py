"""The one error base: a UserError is a problem the user can fix, reported as one line `error: ...` (exit 2, no
traceback, nothing lost or overwritten). Every refusal of the lab derives from it (DataError, EvalError,
ObjectiveError, CheckpointError, NonFiniteLossError, ReportError, ...); anything else is a bug, shown with its
traceback. The bottom layer: it imports nothing of the lab."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix; its message is one line saying what is wrong and how to fix it."""


def error_line(err: BaseException) -> str:
    """A user error's message; one raised in a data-loader worker is re-raised by torch with the worker's
    traceback in its message ("Caught DataError in DataLoader worker process 0. Original Traceback ..."): the
    message is its last line, after the error's name."""
    text = str(err)
    if text.startswith("Caught ") and "\nOriginal Traceback" in text:
        text = text.rstrip().splitlines()[-1].split(": ", 1)[-1]
    return text
