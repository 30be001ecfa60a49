"""The loader's versioned state: a plan fingerprint, a cursor, counters and skipped ranges.

Schema (``format = "resumable_data.loader"``, integer ``schema_version``): a JSON object with
exactly the keys below (plus ``mixture``, with its own ``schema_version``, in the state of an
``rd.Mixture`` loader only, so other states are unchanged: typed as
:class:`~resumable_data.plan.mixture.section.MixtureSection`, which writes back the JSON it was
read from byte for byte); every value is checked for type and range on load, so a forged or
malformed state raises :class:`~resumable_data.ResumeError` and nothing else. Loading never
unpickles. Typical size: 500-700 bytes, independent of dataset size, window and worker count.

``cursor`` holds three step counters, ``committed <= delivered <= fetched``: batches whose
gradients went into an update (or were deliberately skipped), batches yielded to the training
loop, and batches handed to workers (prefetch, for audit only: they are always fetched again).

``end_of_pass`` (schema 2) is true when the state was taken inside a pass right after that
epoch's last batch, before the pass ended (``StopIteration``): torch's ``StatefulDataLoader``
semantics, so a resume from it first runs an empty pass (the rest of that epoch) and the next
``iter()`` starts the next epoch; a state taken after the loop has ``end_of_pass`` false and
resumes into the whole next epoch. Schema 1 states (no ``end_of_pass``) are still accepted and
read as ``end_of_pass = false`` (what they meant: the resume starts the next epoch).

``batch_origin`` (schema 3) is where a declared global-batch change on resume started the
current segment, ``{"step", "position", "epoch_first_step"}`` (:class:`~resumable_data.plan.BatchOrigin`):
progress, not identity (not among the fingerprint keys a checkpoint compares). ``sample_seeding``
(schema 4) is ``{"mode", "version"}``, the ``seed_per_sample`` mode and the seeding version
(:class:`~resumable_data.loader.seeding.sample_seeding.SeedingRecord`). rd writes schema 5, which omits
defaults: no ``sample_seeding`` key means ``{"mode": "eager", "version": 3}``, no ``batch_origin``
key means none; schema 4 is the same with ``{"mode": "eager", "version": 2}`` as the keyless
record (written before seeding version 3). Schemas 2 and 3 (written before the seeding record: 3 with a batch schedule, the
``continuous`` tail or a batch origin, its ``batch_origin`` required, null when none) have no
record and continue with seeding version 1 under the loader's mode. Schemas 1-5 are read. A fingerprint holds the mode only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from resumable_data._schema import (
    MAX_INT,
    expect_bool,
    expect_enum,
    expect_header,
    expect_int,
    expect_mapping,
    expect_str,
    field_enum,
    field_int,
)
from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.seeding.sample_seeding import (
    DEFAULT_SEEDING,
    SCHEMA_DEFAULT_SEEDING,
    SeedingRecord,
    fingerprint_mode,
    fingerprint_section,
)
from resumable_data.loader.skips import SkipIndex
from resumable_data.plan import BatchOrigin, Plan, ShardingPolicy, Tail
from resumable_data.plan.mixture.section import MixtureSection
from resumable_data.plan.packing import Packing

__all__ = [
    "FORMAT",
    "SCHEMA_VERSION",
    "CommitMode",
    "CounterView",
    "Counters",
    "Cursor",
    "Layout",
    "LoaderState",
    "OnBatchChange",
    "OnUncommitted",
    "SkippedRange",
    "first_unskipped",
    "skipped_before",
]

FORMAT = "resumable_data.loader"
SCHEMA_VERSION = 5
#: Older schema versions this version reads (see the module docs).
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5)
MAX_SKIPPED_RANGES = 10_000

K_FORMAT = "format"
K_SCHEMA = "schema_version"
K_PLAN = "plan"
K_LAYOUT = "layout"
K_ELASTIC = "elastic"
K_COMMIT = "commit"
K_ACCUMULATION = "accumulation_steps"
K_PACKING = "packing"
K_PINNED = "pinned"
K_CURSOR = "cursor"
K_COUNTERS = "counters"
K_SKIPPED = "skipped"
K_LABEL = "recovery_label"
K_SAMPLER = "sampler"
K_EPOCH_BASE = "epoch_base"
K_END_OF_PASS = "end_of_pass"
#: Only in states of an ``rd.Mixture`` loader (:class:`~resumable_data.plan.mixture.section.MixtureSection`;
#: its resume checks: :mod:`resumable_data.loader.mixture.state`).
K_MIXTURE = "mixture"
K_BATCH_ORIGIN = "batch_origin"
K_SAMPLE_SEEDING = "sample_seeding"
#: The keys that identify the stream (no progress): what a checkpoint's ``data`` section holds.
FINGERPRINT_KEYS = (K_PLAN, K_LAYOUT, K_ELASTIC, K_COMMIT, K_ACCUMULATION, K_PACKING, K_PINNED, K_SAMPLER)
_KEYS = frozenset(
    {
        K_FORMAT,
        K_SCHEMA,
        K_PLAN,
        K_LAYOUT,
        K_ELASTIC,
        K_COMMIT,
        K_ACCUMULATION,
        K_PACKING,
        K_PINNED,
        K_SAMPLER,
        K_EPOCH_BASE,
        K_CURSOR,
        K_COUNTERS,
        K_SKIPPED,
        K_LABEL,
        K_END_OF_PASS,
    }
)
_KEYS_V1 = _KEYS - {K_END_OF_PASS}
_KEYS_V3 = _KEYS | {K_BATCH_ORIGIN}
#: The keys a state of each readable schema holds, without and with a mixture section (schema >= 2).
#: Schema 4-5 keys that are omitted when they hold the default (see the module docs) are added
#: to its set when present.
_KEYS_OF = {
    1: (_KEYS_V1, _KEYS_V1),
    2: (_KEYS, _KEYS | {K_MIXTURE}),
    3: (_KEYS_V3, _KEYS_V3 | {K_MIXTURE}),
    4: (_KEYS, _KEYS | {K_MIXTURE}),
    5: (_KEYS, _KEYS | {K_MIXTURE}),
}
_OPTIONAL_V4 = frozenset({K_BATCH_ORIGIN, K_SAMPLE_SEEDING})
_CURSOR_KEYS = frozenset({"committed", "delivered", "fetched"})
_COUNTER_ORDER = ("attempted_updates", "applied_updates", "skipped_updates", "samples", "tokens")
_COUNTER_KEYS = frozenset(_COUNTER_ORDER)
_LAYOUT_KEYS = frozenset({"world_size", "policy"})


class CommitMode(str, enum.Enum):
    """When a delivered batch counts as committed."""

    #: Once the loop asks for the next batch or calls ``state_dict()`` (what torch users expect).
    AUTO = "auto"
    #: Only when the loop calls ``loader.commit()``.
    EXPLICIT = "explicit"


class OnBatchChange(str, enum.Enum):
    """What a resume does when the current global batch (or schedule) differs from the saved one."""

    #: Refuse the state, naming saved vs current batch (the default).
    REFUSE = "refuse"
    #: Continue at the committed sample position with the current batch, as a new segment: no
    #: sample lost, none repeated; labelled ``elastic_reshard``.
    CONTINUE = "continue"


class OnUncommitted(str, enum.Enum):
    """What a resume does with batches that were delivered but never committed."""

    #: Deliver them again.
    REPEAT = "repeat"
    #: Treat them as consumed and record the skipped range.
    SKIP = "skip"


@dataclass(frozen=True)
class Cursor:
    """Step counters: ``committed <= delivered <= fetched``."""

    committed: int = 0
    delivered: int = 0
    fetched: int = 0

    def to_dict(self) -> dict[str, int]:
        """The cursor as the state's JSON object ``{committed, delivered, fetched}``."""
        return {"committed": self.committed, "delivered": self.delivered, "fetched": self.fetched}

    @classmethod
    def from_dict(cls, d: Any, where: str = "cursor") -> Cursor:
        """The cursor ``d`` (from :meth:`to_dict`) describes; ``where`` names it in errors.

        Raises :class:`rd.ResumeError` on other keys, a non-integer or negative count, or counts not
        ordered ``committed <= delivered <= fetched``."""
        expect_mapping(d, where, _CURSOR_KEYS)
        c, dl, f = field_int(d, "committed", where), field_int(d, "delivered", where), field_int(d, "fetched", where)
        if not c <= dl <= f:
            raise ResumeError(describe(where, d, "committed <= delivered <= fetched", "pass an unmodified state"))
        return cls(c, dl, f)


@dataclass(frozen=True)
class Counters:
    """Counted (not derivable) training progress; see ``DataLoader.counters`` for the definitions."""

    attempted_updates: int = 0
    applied_updates: int = 0
    skipped_updates: int = 0
    samples: int = 0
    tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "attempted_updates": self.attempted_updates,
            "applied_updates": self.applied_updates,
            "skipped_updates": self.skipped_updates,
            "samples": self.samples,
            "tokens": self.tokens,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str = "counters") -> Counters:
        expect_mapping(d, where, _COUNTER_KEYS)
        vals = [field_int(d, k, where) for k in _COUNTER_ORDER]
        if vals[1] + vals[2] != vals[0]:
            raise ResumeError(
                describe(where, d, "applied_updates + skipped_updates == attempted_updates", "pass an unmodified state")
            )
        return cls(*vals)


@dataclass(frozen=True)
class CounterView:
    """Training progress, each counter defined (they diverge on AMP overflow and on skips).

    * ``attempted_updates``: ``commit()`` calls, i.e. optimizer steps tried;
    * ``applied_updates``: those with ``applied=True``; ``skipped_updates``: those with ``applied=False``
      (AMP found inf/nan gradients); ``attempted == applied + skipped``;
    * ``microbatches``: committed steps (batches whose gradients were used), skipped steps excluded;
    * ``samples``: global samples in those steps (all ranks, ``drop``/``wrap`` tails included);
    * ``tokens``: non-padding tokens in those steps, all ranks (of ``token_column``; 0 when unset);
    * ``skipped_steps``: steps below the committed cursor that were skipped on purpose.
    """

    attempted_updates: int
    applied_updates: int
    skipped_updates: int
    microbatches: int
    samples: int
    tokens: int
    skipped_steps: int

    def to_dict(self) -> dict[str, int]:
        """The counters as a JSON object, one integer per field."""
        return dict(vars(self))


@dataclass(frozen=True)
class SkippedRange:
    """Steps ``[start, stop)`` that are never delivered, and why."""

    start: int
    stop: int
    reason: str

    def to_list(self) -> list:
        return [self.start, self.stop, self.reason]

    @classmethod
    def from_list(cls, v: Any, where: str, index: int | None = None) -> SkippedRange:
        """A saved ``[start, stop, reason]``; named ``where`` (``where[index]`` with ``index``) on a refusal."""
        if type(v) is list and len(v) == 3:  # the common case, checked in one pass (names built on a refusal)
            start, stop, reason = v
            if (
                type(start) is int
                and type(stop) is int
                and 0 <= start < stop <= MAX_INT
                and type(reason) is str
                and len(reason) <= 1000
            ):
                return cls(start, stop, reason)
        if index is not None:
            where = f"{where}[{index}]"
        if not isinstance(v, list) or len(v) != 3:
            raise ResumeError(describe(where, v, "[start, stop, reason]", "pass an unmodified state"))
        start = expect_int(v[0], f"{where}[0]")
        stop = expect_int(v[1], f"{where}[1]", start + 1)
        return cls(start, stop, expect_str(v[2], f"{where}[2]", max_len=1000))


def first_unskipped(skipped: tuple[SkippedRange, ...] | list[SkippedRange], step: int) -> int:
    """The first step at or after ``step`` that no skipped range covers (ranges may overlap or chain).
    O(R log R); a caller asking often keeps a :class:`~resumable_data.loader.skips.SkipIndex`."""
    return SkipIndex((r.start, r.stop) for r in skipped).first_unskipped(step)


def skipped_before(skipped: tuple[SkippedRange, ...] | list[SkippedRange], step: int) -> int:
    """How many distinct steps below ``step`` the skipped ranges cover (overlaps count once)."""
    return SkipIndex((r.start, r.stop) for r in skipped).skipped_before(step)


@dataclass(frozen=True)
class Layout:
    """The data-parallel layout a state was written under. No rank: the state is the same on
    every rank (the cursor is global), so ``torch.distributed.checkpoint`` may keep one copy."""

    world_size: int = 1
    policy: ShardingPolicy = ShardingPolicy.CONTIGUOUS

    def to_dict(self) -> dict[str, Any]:
        return {"world_size": self.world_size, "policy": self.policy.value}

    @classmethod
    def from_dict(cls, d: Any, where: str = "layout") -> Layout:
        expect_mapping(d, where, _LAYOUT_KEYS)
        return cls(field_int(d, "world_size", where, 1, 1 << 20), field_enum(d, "policy", ShardingPolicy, where))


@dataclass(frozen=True)
class LoaderState:
    """Everything a :class:`~resumable_data.DataLoader` needs to continue, and its fingerprint."""

    plan: Plan
    layout: Layout
    elastic: bool
    commit: CommitMode
    accumulation_steps: int
    #: The packing spec (:class:`rd.Packing`), typed; None when unpacked.
    packing: Packing | None
    pinned: bool
    sampler: str | None = None
    epoch_base: tuple[int, int] = (0, 0)
    cursor: Cursor = field(default_factory=Cursor)
    counters: Counters = field(default_factory=Counters)
    skipped: tuple[SkippedRange, ...] = ()
    recovery_label: RecoveryLabel = RecoveryLabel.FAITHFUL_CONTINUATION
    #: Taken after an epoch's last batch, inside the pass (see the module docs).
    end_of_pass: bool = False
    #: An ``rd.Mixture``'s section (names, sizes, schedule, block, rebase, per-source tokens), typed;
    #: None otherwise.
    mixture: MixtureSection | None = None
    #: The seeding mode and version (schema 4); None: a state written before it (version 1).
    sample_seeding: SeedingRecord | None = None

    @property
    def schema_version(self) -> int:
        """The schema this state is written at: the lowest that expresses it (see the module docs)."""
        p = self.plan
        if self.sample_seeding is not None:
            return SCHEMA_VERSION
        return 3 if p.schedule is not None or p.origin is not None or p.tail is Tail.CONTINUOUS else 2

    def to_dict(self) -> dict[str, Any]:
        """The state as the JSON dict ``loader.state_dict()`` returns (``format``, ``schema_version``,
        plan, layout, cursor, counters, skips, label; optional sections only when present)."""
        version = self.schema_version
        d = {
            K_FORMAT: FORMAT,
            K_SCHEMA: version,
            K_PLAN: replace(self.plan, origin=None).to_dict(),
            K_LAYOUT: self.layout.to_dict(),
            K_ELASTIC: self.elastic,
            K_COMMIT: self.commit.value,
            K_ACCUMULATION: self.accumulation_steps,
            K_PACKING: None if self.packing is None else self.packing.to_dict(),
            K_PINNED: self.pinned,
            K_SAMPLER: self.sampler,
            K_EPOCH_BASE: list(self.epoch_base),
            K_CURSOR: self.cursor.to_dict(),
            K_COUNTERS: self.counters.to_dict(),
            K_SKIPPED: [r.to_list() for r in self.skipped],
            K_LABEL: self.recovery_label.value,
            K_END_OF_PASS: self.end_of_pass,
            **({} if self.mixture is None else {K_MIXTURE: self.mixture.to_dict()}),
        }
        if version == 3 or self.plan.origin is not None:
            d[K_BATCH_ORIGIN] = None if self.plan.origin is None else self.plan.origin.to_dict()
        if self.sample_seeding is not None and self.sample_seeding != DEFAULT_SEEDING:  # version 5
            d[K_SAMPLE_SEEDING] = self.sample_seeding.to_dict()
        return d

    def next_step(self, *, rewound: bool = False) -> int:
        """The step a resume from this state delivers first: ``cursor.delivered`` (``committed``
        when the uncommitted window is rewound), past any skipped range."""
        return first_unskipped(self.skipped, self.cursor.committed if rewound else self.cursor.delivered)

    def counter_view(self) -> CounterView:
        """Every counter at this state's committed cursor, the derived ones included."""
        c, k = self.cursor.committed, self.counters
        return CounterView(
            k.attempted_updates,
            k.applied_updates,
            k.skipped_updates,
            c - skipped_before(self.skipped, c),
            k.samples,
            k.tokens,
            skipped_before(self.skipped, c),
        )

    def mixture_section(self) -> MixtureSection:
        """The ``rd.Mixture`` section (``ResumeError`` when this is not a mixture loader's state)."""
        if self.mixture is None:
            raise ResumeError(
                "state.mixture is missing: the state is not of an rd.Mixture loader; fix: pass a mixture loader's state"
            )
        return self.mixture

    @property
    def uncommitted(self) -> int:
        """Steps delivered but not committed."""
        return self.cursor.delivered - self.cursor.committed

    def fingerprint_dict(self) -> dict[str, Any]:
        """The keys that identify the stream (what a checkpoint's metadata compares), no progress; the seeding mode, no version."""
        d = self.to_dict()
        out = {k: d[k] for k in FINGERPRINT_KEYS if k in d}
        if self.mixture is not None:  # its per-source tokens are progress, not identity (earlier runs: identity)
            out[K_MIXTURE] = self.mixture.without_tokens().to_dict()
        return out | fingerprint_section(self.sample_seeding)

    @classmethod
    def from_fingerprint(cls, data: Any, epoch_base: tuple[int, int] = (0, 0)) -> LoaderState:
        """The state a checkpoint's ``data`` section (:meth:`fingerprint_dict`) describes, at
        ``epoch_base`` with no progress; validated like :meth:`from_dict`, the seeding mode too (not kept)."""
        if not isinstance(data, dict):
            raise ResumeError(
                describe("data", type(data).__name__, "the loader fingerprint of a checkpoint", "pass meta.data")
            )
        fingerprint_mode(data)  # the fingerprint records no seeding version, so there is no record to keep
        progress = {
            K_FORMAT: FORMAT,
            K_SCHEMA: 3,
            K_EPOCH_BASE: list(epoch_base),  # no seeding record: schema 3
            K_CURSOR: Cursor().to_dict(),
            K_COUNTERS: Counters().to_dict(),
            K_SKIPPED: [],
            K_LABEL: RecoveryLabel.FAITHFUL_CONTINUATION.value,
            K_END_OF_PASS: False,
            K_BATCH_ORIGIN: None,
        }
        mixture = {K_MIXTURE: data[K_MIXTURE]} if K_MIXTURE in data else {}
        return cls.from_dict({**progress, **{k: data.get(k) for k in FINGERPRINT_KEYS}, **mixture})

    @classmethod
    def from_dict(cls, d: Any) -> LoaderState:
        """Parse and validate a state; any problem raises :class:`ResumeError`."""
        if not isinstance(d, dict):
            raise ResumeError(
                describe("state", type(d).__name__, "a dict from DataLoader.state_dict()", "pass that dict")
            )
        version = d.get(K_SCHEMA)
        if type(version) is not int or version not in READABLE_SCHEMA_VERSIONS:
            version = SCHEMA_VERSION
        if d.get(K_FORMAT) == FORMAT and K_SCHEMA in d and (type(d[K_SCHEMA]) is not int or d[K_SCHEMA] != version):
            expect_header(d, FORMAT, SCHEMA_VERSION, "state")  # a clear version message first (1.0, True, 4)
        raw_mixture = d.get(K_MIXTURE)
        keys = _KEYS_OF[version][K_MIXTURE in d]
        expect_mapping(d, "state", keys if version < 4 else keys | (_OPTIONAL_V4 & d.keys()))
        if K_MIXTURE in d and not isinstance(raw_mixture, dict):
            raise ResumeError(
                describe("state.mixture", raw_mixture, "a mixture section object", "pass an unmodified state")
            )
        expect_header(d, FORMAT, version, "state")
        packing = _packing(d[K_PACKING])
        try:
            plan = Plan.from_dict(d[K_PLAN], "state.plan", packed=packing is not None)
            if plan.origin is not None:
                raise ResumeError(
                    describe(
                        "state.plan.origin",
                        plan.origin.to_dict(),
                        "absent (a batch origin is state.batch_origin)",
                        "pass an unmodified state",
                    )
                )
            raw_origin = d.get(K_BATCH_ORIGIN)
            if raw_origin is not None:
                plan = replace(plan, origin=BatchOrigin.from_dict(raw_origin, "state.batch_origin"))
        except ConfigError as e:  # constructor checks on forged values are resume errors here
            raise ResumeError(f"state is inconsistent: {e}") from None
        if version < 3 and (plan.schedule is not None or plan.tail is Tail.CONTINUOUS):
            raise ResumeError(
                describe(
                    "state.schema_version",
                    version,
                    "3 for a state with a batch schedule or the continuous tail",
                    "pass an unmodified state",
                )
            )
        raw_skipped = d[K_SKIPPED]
        if not isinstance(raw_skipped, list) or len(raw_skipped) > MAX_SKIPPED_RANGES:
            raise ResumeError(
                describe(
                    "state.skipped",
                    f"{type(raw_skipped).__name__}",
                    f"a list of at most {MAX_SKIPPED_RANGES} ranges",
                    "pass an unmodified state",
                )
            )
        skipped = tuple(SkippedRange.from_list(v, "state.skipped", i) for i, v in enumerate(raw_skipped))
        return cls(
            plan=plan,
            layout=Layout.from_dict(d[K_LAYOUT], "state.layout"),
            elastic=expect_bool(d[K_ELASTIC], "state.elastic"),
            commit=expect_enum(d[K_COMMIT], CommitMode, "state.commit"),
            accumulation_steps=expect_int(d[K_ACCUMULATION], "state.accumulation_steps", 1, 1 << 20),
            packing=packing,
            pinned=expect_bool(d[K_PINNED], "state.pinned"),
            epoch_base=_epoch_base(d[K_EPOCH_BASE]),
            sampler=None if d[K_SAMPLER] is None else expect_str(d[K_SAMPLER], "state.sampler", max_len=1000),
            cursor=Cursor.from_dict(d[K_CURSOR], "state.cursor"),
            counters=Counters.from_dict(d[K_COUNTERS], "state.counters"),
            skipped=skipped,
            recovery_label=expect_enum(d[K_LABEL], RecoveryLabel, "state.recovery_label"),
            end_of_pass=expect_bool(d[K_END_OF_PASS], "state.end_of_pass") if version >= 2 else False,
            mixture=None if raw_mixture is None else MixtureSection.from_dict(raw_mixture, "state.mixture"),
            sample_seeding=None
            if version < 4
            else SeedingRecord.from_dict(d[K_SAMPLE_SEEDING])
            if K_SAMPLE_SEEDING in d
            else SCHEMA_DEFAULT_SEEDING[version],
        )


def _packing(v: Any) -> Packing | None:
    """The state's packing spec, validated (:meth:`rd.Packing.from_dict`, every key), or None."""
    if v is None:
        return None
    if not isinstance(v, dict):
        raise ResumeError(describe("state.packing", v, "null or a packing spec object", "pass an unmodified state"))
    try:
        return Packing.from_dict(v, "state.packing")
    except ConfigError as e:  # constructor checks on forged values are resume errors here
        raise ResumeError(f"state is inconsistent: {e}") from None


def _epoch_base(v: Any) -> tuple[int, int]:
    if not isinstance(v, list) or len(v) != 2:
        raise ResumeError(
            describe("state.epoch_base", v, "[epoch, first step of that epoch]", "pass an unmodified state")
        )
    return expect_int(v[0], "state.epoch_base[0]"), expect_int(v[1], "state.epoch_base[1]")
