"""The package's error hierarchy.

Every error derives from :class:`ResumableDataError`, so ``except rd.ResumableDataError`` catches
all of them. Messages follow one rule: name the parameter, show the value, say what was expected
and how to fix it. Use :func:`describe` to build such a message consistently.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConfigTypeError",
    "DamagedShardError",
    "DatasetIntegrityError",
    "NotRegularFileError",
    "ResumableDataError",
    "ResumeError",
    "StoreUnavailableError",
    "UsageError",
    "WorkerError",
    "describe",
]


class ResumableDataError(Exception):
    """Base class of every error raised by ``resumable_data``."""


class ConfigError(ResumableDataError, ValueError):
    """An argument or option is invalid; raised at construction, before any batch."""


class ConfigTypeError(ConfigError, TypeError):
    """An argument of the wrong kind (not merely a bad value), where torch raises ``TypeError``:
    e.g. a ``multiprocessing_context`` that is neither a start method's name nor a context."""


class NotRegularFileError(ConfigError):
    """A path rd was about to read is a FIFO, socket, device or directory, not a regular file
    (rd never opens one, so it cannot block on a pipe or read a device)."""


class DatasetIntegrityError(ResumableDataError):
    """The data on disk does not match its pinned :class:`~resumable_data.DatasetVersion`."""


class DamagedShardError(DatasetIntegrityError):
    """A shard whose bytes do not parse or validate: its bytes are the problem, unlike a store
    refusing a request or cutting a body short (errors of their own, naming the object and their
    own fix), which callers must not report as a file to remove or rewrite."""


class StoreUnavailableError(ResumableDataError, ConnectionError):
    """The storage holding the shards did not answer (down, unreachable, refusing connections, or
    throttling past the retries): the data is not known to be damaged. Nothing was delivered from
    the failed read, so the loader's cursor is unchanged: iterate again (or resume from a saved
    state) once the store is back and the stream continues exactly where it stopped."""


class ResumeError(ResumableDataError):
    """A saved state cannot be restored faithfully (or is malformed); nothing was changed."""


class UsageError(ResumableDataError, RuntimeError):
    """An rd object was used out of order: e.g. ``commit()`` with nothing delivered, a superseded
    iterator, ``rd.sample_context()`` called outside a fetch. The object is unchanged; the message
    says which call, in which state, and the order that works."""


class WorkerError(ResumableDataError, RuntimeError):
    """A loader worker process died (killed, out of memory, crashed) while batches were in flight.

    The loader's cursor still counts only the batches that reached the training loop, so the state
    saved after this error resumes exactly; ``__cause__`` holds torch's own error.
    """


def shown(value: object) -> str:
    """``repr(value)``, or what it is when Python refuses to print it (an int past the digit limit
    of ``str()``, ``sys.set_int_max_str_digits``): every message can name any value."""
    try:
        return repr(value)
    except ValueError:
        return f"<an integer of {value.bit_length()} bits>" if isinstance(value, int) else f"<a {type(value).__name__}>"


def describe(param: str, value: object, expected: str, fix: str) -> str:
    """One error sentence: ``param=value: expected ...; fix: ...``."""
    shown_ = shown(value)
    if len(shown_) > 200:
        shown_ = shown_[:197] + "..."
    return f"{param}={shown_}: expected {expected}; fix: {fix}"
