"""The base of every error paddle_edo raises on purpose: bad input (a value, an id, a file, a setting) or
a run that cannot go on. Its message names the layer, key or file, the value, and what is allowed, so
the tools print it as one ``error:`` line; anything else that escapes them is a bug and keeps its
traceback. Each kind also derives from the built-in exception a caller would catch for it."""
from __future__ import annotations


class EdoError(Exception):
    """An error paddle_edo raised on purpose, with a message meant for the user."""


class EdoValueError(EdoError, ValueError):
    """A bad value: a setting, a shape, a file's content."""


class DataError(EdoValueError):
    """Bad data: the message names the file (and line, column) or field and the bad value."""


class EdoTypeError(EdoError, TypeError):
    """A value of the wrong kind (float ids, an optimizer a table cannot train with)."""


class EdoIndexError(EdoError, IndexError):
    """An id outside a table's range."""


class EdoKeyError(EdoError, KeyError):
    """A name that is not there (a task, a row that is not resident)."""

    def __str__(self) -> str:  # the message, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


class EdoRuntimeError(EdoError, RuntimeError):
    """Something that cannot run as asked (a mode, a missing compiler, a missing optimizer binding)."""


class DivergedError(EdoRuntimeError):
    """The loss became NaN or infinite: raised before a checkpoint is written, so the last one stays."""


class StoreUnavailableError(EdoError, ConnectionError):
    """A store of served tables cannot be reached now (a Redis server down or restarting): the service
    answers 503 and tries again at the next request."""


class EdoFileNotFoundError(EdoError, FileNotFoundError):
    """A file or folder that should be there is not."""


class EdoDeprecationWarning(FutureWarning):
    """A spelling that still works for one release and then goes (a FutureWarning, so users see it)."""
