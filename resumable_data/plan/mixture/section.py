"""A saved mixture section: its keys, its schema versions and its validation (no plan built).

What it holds. The ``mixture`` part of a loader state: the source names and sizes, the declared
weight schedule (``[[step, [weight per source]], ...]``), the block size, whether blocks are
shuffled, and a data-change ``rebase`` (``[position, [records consumed per source]]``); at schema
2 also per-source token counts (progress, not identity: :mod:`.tokens`).

Guarantee. :func:`parse_section` reads nothing it has not checked: every key, type, length and
range is validated (a ``ResumeError`` naming the field, the value, what was expected and the fix)
before a :class:`MixtureSection` is returned; it never builds a plan and costs O(sources + segments).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from resumable_data._schema import MAX_INT, expect_int, expect_mapping, expect_str, field_int
from resumable_data.errors import ResumeError, describe
from resumable_data.plan.mixture.weights import WEIGHT_TEXT, is_weight
from resumable_data.plan.permutation import MAX_DOMAIN as MAX_POSITION

__all__ = ["EarlierRun", "MixtureSection", "PackedRebase", "Rebase", "parse_section"]

MIXTURE_SCHEMA_VERSION = 1
K_SCHEMA = "schema_version"
K_NAMES = "sources"
K_SIZES = "sizes"
K_SCHEDULE = "schedule"
K_BLOCK = "block"
K_SHUFFLE = "shuffle"
K_REBASE = "rebase"
#: Tokens consumed per source at the state's committed cursor (mixture schema 2 only: a loader
#: that counts tokens); progress, not identity (:mod:`resumable_data.plan.mixture.tokens`).
K_TOKENS = "tokens"
#: With ``tokens``: the list column they count (an unpacked loader's ``token_column``), and the
#: tokens among them that ``counters.tokens`` does not hold (records consumed before counting
#: began: a schema-1 resume), written when not 0.
K_TOKEN_COLUMN = "token_column"
K_TOKENS_BASE = "tokens_base"
TOKENS_KEYS = (K_TOKENS, K_TOKEN_COLUMN, K_TOKENS_BASE)
TOKENS_SCHEMA_VERSION = 2
#: A packed mixture changed its weights inside a loader epoch: the runs in force earlier in that
#: epoch (``[[position, [counts], [weights]], ...]``, see :class:`PackedRebase`); written only then,
#: at schema 3 (per-source tokens optional there).
K_EARLIER = "earlier"
EARLIER_SCHEMA_VERSION = 3
MAX_EARLIER = 64
_KEYS = frozenset({K_SCHEMA, K_NAMES, K_SIZES, K_SCHEDULE, K_BLOCK, K_SHUFFLE, K_REBASE})
MAX_SOURCES = 4096


@dataclass(frozen=True)
class Rebase:
    """A run that starts at ``position`` with ``counts[s]`` records of each source consumed
    (written by a ``data_change`` resume: the stream continues each source where it stood)."""

    position: int
    counts: tuple[int, ...]

    def to_list(self) -> list:
        return [self.position, list(self.counts)]


@dataclass(frozen=True)
class EarlierRun:
    """A run of the mixed stream in force before a packed mid-epoch rebase: from ``position`` (with
    ``counts[s]`` records of each source before it) under ``weights`` (as given), until the next
    run's position."""

    position: int
    counts: tuple[int, ...]
    weights: tuple[Any, ...]

    def to_list(self) -> list:
        return [self.position, list(self.counts), list(self.weights)]


@dataclass(frozen=True)
class PackedRebase(Rebase):
    """A packed mixture's rebase at a packing-window boundary inside a loader epoch: the current
    run starts at ``position``; ``earlier`` are the runs that hold the epoch's documents before it
    (their sequences were packed under them), oldest first."""

    earlier: tuple[EarlierRun, ...] = ()


@dataclass(frozen=True)
class MixtureSection:
    """A validated mixture section, typed: what :attr:`LoaderState.mixture
    <resumable_data.loader.state.LoaderState.mixture>` holds (None: not a mixture loader).

    ``schedule`` holds the weights as saved (numbers, not yet exact fractions: ``1`` and ``1.0``
    stay what they were, so :meth:`to_dict` writes the JSON it was read from, byte for byte); the
    earlier runs of a packed mid-epoch rebase are ``rebase.earlier`` (a :class:`PackedRebase`).
    ``tokens`` / ``token_column`` / ``tokens_base``: None when the key is absent. The schema
    version is not stored: it follows from the keys (:attr:`schema_version`)."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    #: ``(step, (weight per source, as given))`` per declared segment, in step order.
    schedule: tuple[tuple[int, tuple[Any, ...]], ...]
    block: int
    shuffle: bool
    rebase: Rebase | None = None
    tokens: tuple[int, ...] | None = None
    token_column: str | None = None
    tokens_base: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.rebase, PackedRebase) and not self.rebase.earlier:  # written as a plain rebase
            object.__setattr__(self, "rebase", Rebase(self.rebase.position, self.rebase.counts))

    @property
    def schema_version(self) -> int:
        """3 with earlier runs, 2 with per-source tokens, else 1 (what each key set is written at)."""
        if self.earlier:
            return EARLIER_SCHEMA_VERSION
        return TOKENS_SCHEMA_VERSION if self.tokens is not None else MIXTURE_SCHEMA_VERSION

    @property
    def earlier(self) -> tuple[EarlierRun, ...]:
        """The runs before a packed mid-epoch rebase, oldest first (empty: none)."""
        return self.rebase.earlier if isinstance(self.rebase, PackedRebase) else ()

    @property
    def segments(self) -> tuple[tuple[int, dict[str, Any]], ...]:
        """``(step, {source name: weight as given})`` per segment (what a ``WeightSchedule`` takes)."""
        return tuple((step, dict(zip(self.names, weights))) for step, weights in self.schedule)

    def without_tokens(self) -> MixtureSection:
        """The section without its per-source tokens (progress, not identity: a fingerprint's)."""
        return replace(self, tokens=None, token_column=None, tokens_base=None)

    def to_dict(self) -> dict[str, Any]:
        """The section as a state holds it (keys in the order rd has always written them)."""
        d: dict[str, Any] = {
            K_SCHEMA: self.schema_version,
            K_NAMES: list(self.names),
            K_SIZES: list(self.sizes),
            K_SCHEDULE: [[step, list(weights)] for step, weights in self.schedule],
            K_BLOCK: self.block,
            K_SHUFFLE: self.shuffle,
            K_REBASE: None if self.rebase is None else self.rebase.to_list(),
        }
        if self.earlier:
            d[K_EARLIER] = [r.to_list() for r in self.earlier]
        if self.tokens is not None:
            d[K_TOKENS] = list(self.tokens)
        if self.token_column is not None:
            d[K_TOKEN_COLUMN] = self.token_column
        if self.tokens_base is not None:
            d[K_TOKENS_BASE] = self.tokens_base
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "state.mixture") -> MixtureSection:
        """The validated contents of a saved mixture section ``d`` (a ``ResumeError`` on anything else)."""
        return parse_section(d, where)


def parse_section(d: Any, where: str = "state.mixture") -> MixtureSection:
    """The validated contents of a saved mixture section ``d`` (a ``ResumeError`` on anything else)."""
    version = d.get(K_SCHEMA) if isinstance(d, dict) else None
    if version == EARLIER_SCHEMA_VERSION:
        keys = _KEYS | {K_EARLIER} | {k for k in TOKENS_KEYS if k in d}
    elif version == TOKENS_SCHEMA_VERSION:
        keys = _KEYS | {K_TOKENS} | {k for k in (K_TOKEN_COLUMN, K_TOKENS_BASE) if k in d}
    else:
        keys = _KEYS
    expect_mapping(d, where, keys)
    if field_int(d, K_SCHEMA, where) not in (MIXTURE_SCHEMA_VERSION, TOKENS_SCHEMA_VERSION, EARLIER_SCHEMA_VERSION):
        raise ResumeError(
            describe(
                f"{where}.schema_version",
                d[K_SCHEMA],
                f"{MIXTURE_SCHEMA_VERSION}, {TOKENS_SCHEMA_VERSION} (with per-source tokens) or "
                f"{EARLIER_SCHEMA_VERSION} (a packed change of weights inside an epoch)",
                "load it with the resumable_data version that wrote it",
            )
        )
    names, sizes, sched = d[K_NAMES], d[K_SIZES], d[K_SCHEDULE]
    for key, v in ((K_NAMES, names), (K_SIZES, sizes), (K_SCHEDULE, sched)):
        if not isinstance(v, list) or not 0 < len(v) <= MAX_SOURCES:
            raise ResumeError(
                describe(f"{where}.{key}", v, f"a list of 1 to {MAX_SOURCES} entries", "pass an unmodified state")
            )
    # each list checked in one pass; the per-entry readers (and their names) only to word a refusal
    if not all(type(n) is str and len(n) <= 256 for n in names):
        names = [expect_str(n, f"{where}.sources[{i}]", max_len=256) for i, n in enumerate(names)]
    if not all(type(n) is int and 1 <= n <= MAX_INT for n in sizes):
        sizes = [expect_int(n, f"{where}.sizes[{i}]", 1) for i, n in enumerate(sizes)]
    if len(sizes) != len(names) or len(set(names)) != len(names):
        raise ResumeError(
            describe(f"{where}.sizes", sizes, "one size per distinct source name", "pass an unmodified state")
        )
    segs: list[tuple[int, tuple[Any, ...]]] = []
    for i, seg in enumerate(sched):
        if not (isinstance(seg, list) and len(seg) == 2 and isinstance(seg[1], list) and len(seg[1]) == len(names)):
            raise ResumeError(
                describe(f"{where}.schedule[{i}]", seg, "[step, [one weight per source]]", "pass an unmodified state")
            )
        step, weights = seg
        if not (type(step) is int and 0 <= step <= MAX_POSITION):
            expect_int(step, f"{where}.schedule[{i}][0]", 0, MAX_POSITION)
        for k, w in enumerate(weights):
            if not is_weight(w):
                raise ResumeError(
                    describe(f"{where}.schedule[{i}][1][{k}]", w, WEIGHT_TEXT, "pass an unmodified state")
                )
        segs.append((step, tuple(weights)))
    rb = d[K_REBASE]
    rebase: Rebase | None = None
    if rb is not None:
        if not (isinstance(rb, list) and len(rb) == 2 and isinstance(rb[1], list) and len(rb[1]) == len(names)):
            raise ResumeError(
                describe(
                    f"{where}.rebase", rb, "null or [position, [one count per source]]", "pass an unmodified state"
                )
            )
        rebase = Rebase(
            expect_int(rb[0], f"{where}.rebase[0]", 0, MAX_POSITION),
            tuple(expect_int(c, f"{where}.rebase[1][{i}]", 0, MAX_POSITION) for i, c in enumerate(rb[1])),
        )
        if sum(rebase.counts) != rebase.position:
            raise ResumeError(
                describe(
                    f"{where}.rebase",
                    rb,
                    "[position, counts] with the counts summing to the position (each position holds one record)",
                    "pass an unmodified state",
                )
            )
    if K_EARLIER in d:
        rebase = _packed_rebase(d[K_EARLIER], rebase, len(names), f"{where}.earlier")
    tokens = d.get(K_TOKENS, [])
    if not isinstance(tokens, list) or len(tokens) != (len(names) if K_TOKENS in d else 0):
        raise ResumeError(describe(f"{where}.tokens", tokens, "one token count per source", "pass an unmodified state"))
    if not all(type(t) is int and 0 <= t <= MAX_POSITION for t in tokens):
        for i, t in enumerate(tokens):
            expect_int(t, f"{where}.tokens[{i}]", 0, MAX_POSITION)
    column = expect_str(d[K_TOKEN_COLUMN], f"{where}.token_column", max_len=256) if K_TOKEN_COLUMN in d else None
    base = expect_int(d[K_TOKENS_BASE], f"{where}.tokens_base", 0, MAX_POSITION) if K_TOKENS_BASE in d else None
    shuffle = d[K_SHUFFLE]
    if not isinstance(shuffle, bool):
        raise ResumeError(describe(f"{where}.shuffle", shuffle, "true or false", "pass an unmodified state"))
    return MixtureSection(
        tuple(names),
        tuple(sizes),
        tuple(segs),
        field_int(d, K_BLOCK, where, 1, 1 << 24),
        shuffle,
        rebase,
        tuple(tokens) if K_TOKENS in d else None,
        column,
        base,
    )


def _packed_rebase(raw: Any, rebase: Rebase | None, sources: int, where: str) -> PackedRebase:
    """The section's rebase with its earlier runs (validated: 1 to 64 runs, increasing positions
    before the rebase's, counts summing to their position, one numeric weight per source)."""
    if rebase is None or not isinstance(raw, list) or not 0 < len(raw) <= MAX_EARLIER:
        raise ResumeError(
            describe(
                where,
                raw,
                f"1 to {MAX_EARLIER} runs [position, [counts], [weights]] before a rebase",
                "pass an unmodified state",
            )
        )
    runs: list[EarlierRun] = []
    for i, run in enumerate(raw):
        if not (
            isinstance(run, list) and len(run) == 3 and all(isinstance(x, list) and len(x) == sources for x in run[1:])
        ):
            raise ResumeError(
                describe(
                    f"{where}[{i}]",
                    run,
                    "[position, [one count per source], [one weight per source]]",
                    "pass an unmodified state",
                )
            )
        position = expect_int(run[0], f"{where}[{i}][0]", 0, MAX_POSITION)
        counts = tuple(expect_int(c, f"{where}[{i}][1][{k}]", 0, MAX_POSITION) for k, c in enumerate(run[1]))
        for k, w in enumerate(run[2]):
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
                raise ResumeError(
                    describe(f"{where}[{i}][2][{k}]", w, "a finite weight >= 0", "pass an unmodified state")
                )
        if not any(w > 0 for w in run[2]):
            raise ResumeError(
                describe(
                    f"{where}[{i}][2]",
                    run[2],
                    "weights with at least one > 0 (the run drew records)",
                    "pass an unmodified state",
                )
            )
        before = runs[-1].position if runs else -1
        if sum(counts) != position or not before < position < rebase.position:
            raise ResumeError(
                describe(
                    f"{where}[{i}]",
                    run,
                    f"counts summing to the position, positions increasing and below the rebase's {rebase.position}",
                    "pass an unmodified state",
                )
            )
        runs.append(EarlierRun(position, counts, tuple(run[2])))
    return PackedRebase(rebase.position, rebase.counts, tuple(runs))
