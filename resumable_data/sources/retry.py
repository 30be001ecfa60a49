"""Retries of transient storage failures: throttling, dropped connections, a store that is down.

Algorithm: every request a :class:`~resumable_data.sources.store.FileSystemStore` makes (stat,
listing, range read, opening a shard's metadata, reading a unit) runs through :func:`call`. A
failure is *transient* when :func:`is_transient` recognises it: throttling (HTTP 429, 503,
``SlowDown``), a server error (HTTP 500/502/504), or a network failure (connection refused, reset
or dropped mid-body, a timeout; the AWS SDK's ``NETWORK_CONNECTION`` with its curl code). A
transient failure is retried up to ``attempts`` times in all, waiting a "full jitter" exponential
backoff before each retry: ``uniform(0, min(max_delay, base_delay * 2**k))`` seconds before retry
``k + 1``, drawn from a private generator (never Python's global one). Anything else (a missing
object, a damaged footer) is raised at once: retrying cannot fix it. When the attempts run out the
last failure becomes one :class:`~resumable_data.StoreUnavailableError` naming the object, the
operation, the attempts and the fix; it is never reported as a damaged shard.

pyarrow's S3 client retries inside each request too (its own ``retry_strategy``: 3 attempts by
default); the attempts here wrap those.

Guarantee: a read either returns the bytes the store holds or raises; a retried read re-issues
the same request from the start, so nothing is spliced from two attempts. No read changes the
loader's cursor, so a :class:`~resumable_data.StoreUnavailableError` loses and repeats nothing:
iterating again when the store is back continues the stream exactly.

Cost: nothing on success. A store that stays down costs ``attempts`` tries and at most
``sum(min(max_delay, base_delay * 2**k))`` seconds of waiting over its ``attempts - 1`` waits (the
defaults: 6 tries, at most 7.75 s) before the error, plus what the tries themselves take: a request
that stalls waits out the client's own timeout first (pyarrow's S3 client on Linux: no byte for 3 s,
3 tries of its own), so a store that accepts connections and never sends a body is reported after
about a minute at the defaults; the error says the seconds spent. A body that trickles (at least a
byte a second) is bounded by no pyarrow timeout there: every remote read has rd's own deadline
(:func:`~.exact_reads.within_deadline`: ``Retries.read_limit``, a minute plus a second per 64 KiB by
default), a transient ``TimeoutError`` past it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from resumable_data.errors import ConfigError, StoreUnavailableError, describe

__all__ = ["DEFAULT_RETRIES", "Retries", "call", "is_transient", "unavailable"]

T = TypeVar("T")

K_ATTEMPTS = "attempts"
K_BASE_DELAY = "base_delay"
K_MAX_DELAY = "max_delay"
K_READ_DEADLINE = "read_deadline"
#: The longest ``read_deadline`` (about 31 years): a thread's join accepts at most ``threading.TIMEOUT_MAX``.
MAX_READ_DEADLINE = 10**9
K_MIN_READ_RATE = "min_read_rate"
_KEYS = (K_ATTEMPTS, K_BASE_DELAY, K_MAX_DELAY, K_READ_DEADLINE, K_MIN_READ_RATE)

# Substrings of the messages pyarrow's filesystems (AWS SDK, Google Cloud, curl) give transient
# failures. Matched case-insensitively against the exception text.
_TRANSIENT = (
    "http status 429",
    "http status 500",
    "http status 502",
    "http status 503",
    "http status 504",
    "slowdown",
    "slow_down",
    "slow down",
    "throttl",
    "service_unavailable",
    "serviceunavailable",
    "toomanyrequests",
    "too many requests",
    "requesttimeout",
    "request_timeout",
    "internal_failure",
    "network_connection",
    "curlcode",
    "could not connect",
    "couldn't connect",
    "connection refused",
    "connection reset",
    "connection aborted",
    "connection closed",
    "broken pipe",
    "timed out",
    "timeout was reached",
    "empty reply",
    "recv failure",
    "send failure",
    "unreachable",
    "temporarily unavailable",
)

#: pyarrow's S3 error for a body longer than the buffer it reads into (matched lowercased)
_OVERFLOW = "failed to flush response stream"

_jitter = random.Random()  # private: the global generators belong to the training process


@dataclass(frozen=True)
class Retries:
    """How transient storage failures are retried: ``attempts`` tries in all (1: never retry),
    full-jitter exponential backoff from ``base_delay`` seconds, each wait at most ``max_delay``.

    ``read_deadline`` and ``min_read_rate`` bound one remote read of ``n`` bytes to
    ``read_deadline + n / min_read_rate`` seconds (:meth:`read_limit`; the defaults: a minute plus a
    second per 64 KiB); past it the read is a transient ``TimeoutError``, retried like the others.
    Raise them for a store behind a slow link."""

    attempts: int = 6
    base_delay: float = 0.25
    max_delay: float = 8.0
    read_deadline: float = 60.0
    min_read_rate: int = 64 * 1024

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise ConfigError(
                describe("attempts", self.attempts, "an integer >= 1 (1: no retry)", "pass e.g. rd.Retries(attempts=6)")
            )
        for name in (K_BASE_DELAY, K_MAX_DELAY):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
                raise ConfigError(
                    describe(name, v, "a finite number of seconds >= 0", f"pass e.g. rd.Retries({name}=1.0)")
                )
        d = self.read_deadline
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 < d <= MAX_READ_DEADLINE:
            raise ConfigError(
                describe(
                    K_READ_DEADLINE,
                    d,
                    f"a number of seconds in (0, {MAX_READ_DEADLINE:.0e}] (one read's allowance before its bytes; "
                    "at most about 31 years: a longer wait overflows the thread join that enforces it)",
                    "pass e.g. rd.Retries(read_deadline=300.0)",
                )
            )
        if type(self.min_read_rate) is not int or not 1 <= self.min_read_rate <= 1 << 40:
            raise ConfigError(
                describe(
                    K_MIN_READ_RATE,
                    self.min_read_rate,
                    "an integer number of bytes a second in [1, 2**40] (the slowest body a read waits for)",
                    "pass e.g. rd.Retries(min_read_rate=16 * 1024)",
                )
            )

    def read_limit(self, nbytes: int) -> float:
        """The most seconds one remote read of ``nbytes`` bytes may take."""
        return min(self.read_deadline + nbytes / self.min_read_rate, threading.TIMEOUT_MAX)  # a longer join overflows

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (0-based): full jitter."""
        return _jitter.uniform(0.0, min(self.max_delay, self.base_delay * (2 ** min(retry, 62))))

    def worst_wait(self) -> float:
        """The most seconds of waiting before a store that stays down is reported."""
        return sum(min(self.max_delay, self.base_delay * 2**k) for k in range(self.attempts - 1))

    def to_dict(self) -> dict[str, Any]:
        """The policy as a JSON object ``{attempts, base_delay, max_delay, read_deadline, min_read_rate}``
        (how it travels to workers)."""
        return {k: getattr(self, k) for k in _KEYS}

    @classmethod
    def from_dict(cls, d: Any) -> Retries:
        """The policy ``d`` (from :meth:`to_dict`) describes.

        Raises :class:`rd.ConfigError` on other keys or values the constructor refuses."""
        if not isinstance(d, dict) or set(d) != set(_KEYS):
            raise ConfigError(
                describe(
                    "retries",
                    d,
                    f"an object with keys {list(_KEYS)}",
                    "pickle and unpickle with the same resumable_data version",
                )
            )
        return cls(*(d[k] for k in _KEYS))


#: What a remote store uses unless told otherwise.
DEFAULT_RETRIES = Retries()


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure a later retry may not see (throttling, network, server)."""
    if isinstance(exc, StoreUnavailableError):
        return True
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if not isinstance(exc, OSError) or isinstance(exc, (FileNotFoundError, PermissionError)):
        return False
    text = str(exc).lower()
    return any(t in text for t in _TRANSIENT)


def unavailable(
    what: str, operation: str, exc: BaseException, retries: Retries, elapsed: float | None = None
) -> StoreUnavailableError:
    """The error for a store that did not answer ``operation`` on ``what`` (``elapsed``: the seconds the
    attempts took in all, said where given: a request that stalls waits out the client's own timeout,
    and retries, before failing, well past the backoff)."""
    cause = f"{type(exc).__name__}: {exc}"
    if len(cause) > 300:
        cause = cause[:297] + "..."
    if _OVERFLOW in str(exc).lower():
        cause += (
            f" ({_OVERFLOW!r} is how pyarrow's S3 client reports an answer longer than the bytes asked: a store or "
            "proxy that ignores the Range header and sends the whole object, or an error answer (403, 404) to a "
            "small read; check that the endpoint serves ranged GETs and that the object is there and readable)"
        )
    backoff = f"about {retries.worst_wait():.1f} s of backoff"
    if elapsed is not None:
        backoff = f"{elapsed:.1f} s in all, up to {retries.worst_wait():.1f} s of it backoff"
    return StoreUnavailableError(
        f"{what!r}, {operation}: the store did not answer after {retries.attempts} attempt(s) "
        f"({backoff}): {cause}. The data is not known to be damaged "
        "and nothing was delivered from this read; fix: check the store's endpoint, network and "
        "credentials, then iterate again (or resume from the saved state) once it answers; to wait "
        "longer for a flaky store pass retries=rd.Retries(attempts=..., max_delay=...)"
        + (
            f", and for a slow link retries=rd.Retries(read_deadline=..., min_read_rate=...) (now "
            f"{retries.read_deadline:g} s plus a second per {retries.min_read_rate} bytes)"
            if isinstance(exc, TimeoutError)
            else ""
        )
    )


def call(
    retries: Retries, what: str, operation: str, fn: Callable[[], T], sleep: Callable[[float], Any] = time.sleep
) -> T:
    """``fn()``, retried on transient failures (module docstring); raises
    :class:`~resumable_data.StoreUnavailableError` when the attempts run out."""
    start = time.monotonic()
    for k in range(retries.attempts):
        try:
            return fn()
        except StoreUnavailableError:
            raise  # an inner call already spent its attempts
        except (Exception, RecursionError) as exc:
            if not is_transient(exc):
                raise
            if k + 1 == retries.attempts:
                raise unavailable(what, operation, exc, retries, time.monotonic() - start) from exc
            sleep(retries.delay(k))
    raise AssertionError("unreachable")  # pragma: no cover
