"""Tokens each source of a mixture has consumed, as a pure function of its consumed count.

Algorithm. Source ``s``'s ``q``-th record is record ``perm_e(q mod n_s)`` of its own epoch
``e = q // n_s`` (:mod:`.mixture`), whatever the weights, rebases or batch schedule, so the
tokens of its first ``c`` records are ``e * T_s + sum(len_s[perm_e(i)] for i < o)`` with
``e, o = divmod(c, n_s)`` and ``T_s`` the source's total: a prefix sum over the source's length
index (a list column's offsets, no token read) in its epoch's order. The prefix is evaluated in
chunks of the permutation; the last answer per source is memoized, so a later count in the same
epoch costs only the records in between (forward or backward, whichever is shorter, or from the
epoch's end), never a replay of the stream.

What counts: the non-padding tokens of the loader's ``token_column`` in those records (the list
lengths, as ``counters.tokens`` counts them); a record of a skipped step counts once its position
is passed, as ``consumed`` does.

A windowed source (:mod:`.order`'s window shuffle) sums the windows wholly inside a span from
its per-block token totals (a window holds the same records in any inner order), so only the two
partial windows at the span's ends are evaluated record by record.

Cost. O(S) per query plus O(min(delta, n_s - o, o)) permutation evaluations per source (windowed:
O(that / block + 2 windows)), where
``delta`` is the distance from the memoized count: a loader's consecutive states pay for the
records delivered in between; a cold query pays at most half an epoch of each source, which a
restore avoids by seeding the memo with the saved counts (:meth:`SourceTokens.seed`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from resumable_data.errors import ConfigError, describe
from resumable_data.plan.order import EpochOrder, Order, window_sum
from resumable_data.plan.permutation import MAX_DOMAIN as MAX_TOKENS

__all__ = ["SourceTokens"]

_CHUNK = 1 << 20  # permutation evaluations per vectorized chunk (bounds transient memory)


class SourceTokens:
    """Tokens consumed per source from the records consumed per source (see the module docs).

    ``plan``: the :class:`~resumable_data.plan.mixture.MixturePlan` whose source orders apply
    (only :meth:`~.MixturePlan.source_order`, ``sizes`` and ``shuffle`` are used, so a rebased
    plan gives the same answers); ``lengths``: each source's token count per record id."""

    def __init__(self, plan, lengths: Sequence[np.ndarray]) -> None:
        if len(lengths) != len(plan.sizes):
            raise ConfigError(
                describe(
                    "lengths",
                    len(lengths),
                    f"one length array per source ({len(plan.sizes)})",
                    "pass the token lengths of every source",
                )
            )
        self._plan = plan
        self._lengths = []
        for s, (n, ln) in enumerate(zip(plan.sizes, lengths)):
            ln = np.asarray(ln, dtype=np.int64)
            if ln.shape != (n,) or (n and int(ln.min()) < 0):
                raise ConfigError(
                    describe(
                        f"lengths[{s}]",
                        f"shape {ln.shape}",
                        f"{n} non-negative token counts",
                        "pass source.column_lengths(token_column)",
                    )
                )
            self._lengths.append(ln)
        self.totals = tuple(int(ln.sum()) for ln in self._lengths)
        self._memo: dict[int, tuple[int, int, int]] = {}  # source -> (epoch, offset, tokens before offset)
        self._block_sums: dict[int, np.ndarray] = {}  # windowed source -> its tokens per block

    def before(self, counts: Sequence[int] | np.ndarray) -> np.ndarray:
        """Tokens of each source's first ``counts[s]`` records (int64, one per source); a
        ``ConfigError`` when one would exceed ``2**62`` (:meth:`check_range` first)."""
        self.check_range(counts)
        out = np.empty(len(self._lengths), dtype=np.int64)
        for s, c in enumerate(int(x) for x in counts):
            e, o = divmod(c, self._plan.sizes[s])
            out[s] = e * self.totals[s] + self._prefix(s, e, o)
        return out

    def check_range(self, counts: Sequence[int] | np.ndarray) -> None:
        """``ConfigError`` unless every source's tokens through the end of the epoch its count
        is in stay within ``2**62`` (so :meth:`before` fits int64 there); O(S), no prefix."""
        if len(counts) != len(self._lengths):
            raise ConfigError(describe("counts", list(counts), f"{len(self._lengths)} counts", "pass one per source"))
        for s, c in enumerate(int(x) for x in counts):
            if c < 0:
                raise ConfigError(describe(f"counts[{s}]", c, "a count >= 0", "pass records consumed"))
            most = (c // self._plan.sizes[s] + 1) * self.totals[s]
            if most > MAX_TOKENS:
                raise ConfigError(
                    describe(
                        f"counts[{s}]",
                        c,
                        f"records whose tokens stay within 2**62 (up to {most} "
                        f"at {self.totals[s]} tokens an epoch of {self._plan.sizes[s]} records)",
                        "pass a position whose source epochs hold fewer than 2**62 tokens",
                    )
                )

    def seed(self, counts: Sequence[int], tokens: Sequence[int]) -> None:
        """Take ``tokens`` (a saved state's, at ``counts``) as known, so the next query costs the
        records in between, not a cold prefix; bounds-checked first (:meth:`check`)."""
        self.check(counts, tokens)
        for s, (c, t) in enumerate(zip(counts, tokens)):
            e, o = divmod(int(c), self._plan.sizes[s])
            self._memo[s] = (e, o, int(t) - e * self.totals[s])

    def check(self, counts: Sequence[int], tokens: Sequence[int]) -> None:
        """``ConfigError`` unless each source's ``tokens`` lies within the epoch its ``counts`` is in."""
        if len(counts) != len(self._lengths) or len(tokens) != len(self._lengths):
            raise ConfigError(describe("tokens", list(tokens), f"{len(self._lengths)} counts", "pass one per source"))
        for s, (c, t) in enumerate(zip(counts, tokens)):
            e = int(c) // self._plan.sizes[s]
            prefix = int(t) - e * self.totals[s]
            if not 0 <= prefix <= self.totals[s]:
                raise ConfigError(
                    describe(
                        f"tokens[{s}]",
                        int(t),
                        f"between {e * self.totals[s]} and "
                        f"{(e + 1) * self.totals[s]} ({c} records consumed, {self.totals[s]} tokens "
                        "an epoch)",
                        "pass an unmodified state",
                    )
                )

    def _prefix(self, s: int, e: int, o: int) -> int:
        """Tokens of in-epoch offsets ``[0, o)`` of source ``s``'s epoch ``e``."""
        n = self._plan.sizes[s]
        memo = self._memo.get(s)
        if memo is not None and memo[0] == e:
            _, o0, v0 = memo
            if abs(o - o0) <= min(o, n - o):
                v = v0 + self._sum(s, e, o0, o) if o >= o0 else v0 - self._sum(s, e, o, o0)
                self._memo[s] = (e, o, v)
                return v
        v = self._sum(s, e, 0, o) if o <= n - o else self.totals[s] - self._sum(s, e, o, n)
        self._memo[s] = (e, o, v)
        return v

    def _sum(self, s: int, e: int, a: int, b: int) -> int:
        """Tokens of in-epoch offsets ``[a, b)`` of source ``s``'s epoch ``e``."""
        ln = self._lengths[s]
        if not self._plan.shuffle:
            return int(ln[a:b].sum())
        perm = self._plan.source_order(s, e)
        spec = perm.spec if isinstance(perm, EpochOrder) else None
        if spec is not None and spec.kind is Order.WINDOW and b - a > 2 * spec.window:  # whole windows: block sums
            sums = self._block_sums.get(s)
            if sums is None:
                sums = self._block_sums[s] = np.add.reduceat(ln, np.arange(0, len(ln), spec.block)) if len(ln) else ln
            return window_sum(
                perm.n, spec, ln, sums, a, b, version_hash=perm.version_hash, seed=perm.seed, epoch=perm.epoch
            )
        total = 0
        for start in range(a, b, _CHUNK):
            offsets = np.arange(start, min(start + _CHUNK, b), dtype=np.int64)
            total += int(ln[perm.forward(offsets)].sum())
        return total
