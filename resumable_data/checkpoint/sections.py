"""Typed views of a checkpoint's metadata sections: what ``inspect`` and the contract read.

A :class:`~resumable_data.checkpoint.meta.CheckpointMeta` keeps each section as the JSON object
it writes (so ``meta.json`` stays byte for byte what it was, and the compatibility contract walks
the same trees); :class:`MetaSections` is the one typed object every consumer reads instead of
string keys. It is built from those objects when the meta is made or loaded
(``CheckpointMeta.sections``) and validated then: a forged or malformed section raises before
anything is read, so a load stays all-or-nothing, and nothing is ever unpickled.

Algorithm: one parser per section; each checks the keys its readers use (presence, type, range)
and leaves the others to the section's JSON. The ``data`` section is the loader fingerprint: it
is parsed as a :class:`~resumable_data.loader.state.LoaderState` at no progress
(:meth:`LoaderState.from_fingerprint`), its ``seed_per_sample`` mode first (a forged one is an
:class:`~resumable_data.ResumeError` naming ``<where>.data.seed_per_sample``, as the contract
documents; the loader fingerprint's other problems are ``ResumeError`` too, renamed from the
loader's ``state.…`` to ``<where>.data.…``). The other sections
raise :class:`CheckpointError` naming ``<where>.<section>.<key>``.

Guarantee: a :class:`MetaSections` exists only for metadata whose read sections are well formed;
``to_dict`` is not defined here on purpose (the meta's JSON is the serialized form). Cost: one
walk over the keys read plus the loader-fingerprint validation (a plan, a layout, a mixture
section): about 50 microseconds for a real checkpoint's meta; the parameter names are copied into
tuples, no tensor is read.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.errors import ResumeError, describe
from resumable_data.loader.seeding.sample_seeding import SampleSeeding, fingerprint_mode
from resumable_data.loader.state import LoaderState

__all__ = [
    "DataSection",
    "EmaSection",
    "FeatureSection",
    "MetaSections",
    "ModelSection",
    "OptimizerSection",
    "ScalerSection",
    "SchedulerConvention",
    "SchedulerSection",
]

# keys of the sections' JSON objects (CheckpointMeta's writers use the same spelling)
K_CONFIG = "config"
K_PARAMETERS = "parameters"
K_BUFFERS = "buffers"
K_MODULES = "modules"
K_ROOT = "<root>"
K_TYPE = "type"
K_PARAM_GROUPS = "param_groups"
K_PARAMS = "params"
K_CONVENTION = "convention"
K_ENABLED = "enabled"
K_FINGERPRINT = "fingerprint"
K_KIND = "kind"
K_WORLD_SIZE = "world_size"
K_TORCH = "torch"
K_PYTHON = "python"

_FIX = "pass an unmodified checkpoint (meta.json) or TrainingState.meta().to_dict() of the current run"


def _bad(where: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(describe(where, value, expected, _FIX))


def _obj(v: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise _bad(where, type(v).__name__, "a JSON object")
    return v


def _str(d: Mapping[str, Any], key: str, where: str) -> str:
    if key not in d:
        raise _bad(where, sorted(d), f"the key {key!r}")
    v = d[key]
    if type(v) is not str:
        raise _bad(f"{where}.{key}", v, "a string")
    return v


def _names(v: Any, where: str) -> tuple[str, ...]:
    """The keys of an object of names (parameters, buffers), in order."""
    return tuple(str(k) for k in _obj(v, where))


class SchedulerConvention(str, enum.Enum):
    """What one ``scheduler.step()`` call means; recorded because the counters diverge on AMP skips."""

    #: Once per optimizer update that was applied (skipped AMP steps do not advance the schedule).
    APPLIED_UPDATE = "applied_update"
    #: Once per attempted update, applied or skipped (torch's usual loop: ``scaler.step``; ``sched.step``).
    ATTEMPTED_UPDATE = "attempted_update"
    #: Once per microbatch.
    MICROBATCH = "microbatch"
    #: By the number of tokens consumed.
    TOKEN = "token"
    #: Once per epoch.
    EPOCH = "epoch"


@dataclass(frozen=True)
class ModelSection:
    """``meta.model``: the config, parameter and buffer names, and the module tree."""

    config: Any
    parameters: tuple[str, ...]
    buffers: tuple[str, ...]
    #: module name (``<root>`` for the model itself) -> class name
    modules: Mapping[str, str]

    @property
    def root(self) -> str | None:
        """The model's own class name (None when the tree is not recorded)."""
        return self.modules.get(K_ROOT)

    @classmethod
    def from_dict(cls, d: Any, where: str = "meta.model") -> ModelSection:
        d = _obj(d, where)
        for k in (K_CONFIG, K_PARAMETERS, K_BUFFERS, K_MODULES):
            if k not in d:
                raise _bad(where, sorted(d), f"the keys {[K_CONFIG, K_PARAMETERS, K_BUFFERS, K_MODULES]}")
        modules = _obj(d[K_MODULES], f"{where}.{K_MODULES}")
        for name, kind in modules.items():
            if type(kind) is not str:
                raise _bad(f"{where}.{K_MODULES}.{name}", kind, "a class name (string)")
        return cls(
            d[K_CONFIG],
            _names(d[K_PARAMETERS], f"{where}.{K_PARAMETERS}"),
            _names(d[K_BUFFERS], f"{where}.{K_BUFFERS}"),
            dict(modules),
        )


@dataclass(frozen=True)
class FeatureSection:
    """``meta.feature_schema``: the fingerprint of the tokenizer / feature schema and its kind."""

    fingerprint: str
    kind: Any = None

    @classmethod
    def from_dict(cls, d: Any, where: str = "meta.feature_schema") -> FeatureSection:
        d = _obj(d, where)
        return cls(_str(d, K_FINGERPRINT, where), d.get(K_KIND))


@dataclass(frozen=True)
class OptimizerSection:
    """``meta.optimizer``: the optimizer's class and the parameter names of each group."""

    type: str
    #: per param group, the names of its parameters
    groups: tuple[tuple[str, ...], ...]

    @classmethod
    def from_dict(cls, d: Any, where: str = "meta.optimizer") -> OptimizerSection:
        d = _obj(d, where)
        kind = _str(d, K_TYPE, where)
        raw = d.get(K_PARAM_GROUPS, [])
        if not isinstance(raw, list):
            raise _bad(f"{where}.{K_PARAM_GROUPS}", type(raw).__name__, "a list of group settings")
        groups = []
        for i, g in enumerate(raw):
            g = _obj(g, f"{where}.{K_PARAM_GROUPS}[{i}]")
            names = g.get(K_PARAMS, [])
            if not isinstance(names, list) or not all(type(n) is str for n in names):
                raise _bad(f"{where}.{K_PARAM_GROUPS}[{i}].{K_PARAMS}", names, "a list of parameter names")
            groups.append(tuple(names))
        return cls(kind, tuple(groups))


@dataclass(frozen=True)
class SchedulerSection:
    """``meta.scheduler``: the scheduler's class and its convention (what one ``step()`` means)."""

    type: str
    #: a :class:`SchedulerConvention` value
    convention: str

    @classmethod
    def from_dict(cls, d: Any, where: str = "meta.scheduler") -> SchedulerSection:
        d = _obj(d, where)
        convention = _str(d, K_CONVENTION, where)
        if convention not in {c.value for c in SchedulerConvention}:
            raise _bad(f"{where}.{K_CONVENTION}", convention, f"one of {[c.value for c in SchedulerConvention]}")
        return cls(_str(d, K_TYPE, where), convention)


@dataclass(frozen=True)
class ScalerSection:
    """``meta.scaler``: the grad scaler's class and whether it was enabled."""

    type: str
    enabled: bool

    @classmethod
    def from_dict(cls, d: Any, where: str = "meta.scaler") -> ScalerSection:
        d = _obj(d, where)
        enabled = d.get(K_ENABLED)
        if type(enabled) is not bool:
            raise _bad(f"{where}.{K_ENABLED}", enabled, "true or false")
        return cls(_str(d, K_TYPE, where), enabled)


@dataclass(frozen=True)
class EmaSection:
    """``meta.ema``: the EMA's class."""

    type: str

    @classmethod
    def from_dict(cls, d: Any, where: str = "meta.ema") -> EmaSection:
        return cls(_str(_obj(d, where), K_TYPE, where))


@dataclass(frozen=True)
class DataSection:
    """``meta.data``, the loader fingerprint: the stream it describes, typed, and the seeding mode."""

    #: the fingerprint as a loader state at no progress (plan, layout, accumulation, packing, mixture)
    loader: LoaderState
    #: the loader's ``seed_per_sample`` mode; None in metadata written before contract v2
    seed_per_sample: SampleSeeding | None

    @classmethod
    def from_dict(cls, d: Any, where: str = "meta.data") -> DataSection:
        mode = fingerprint_mode(d, where)  # first: its error names the side (saved / current)
        try:
            loader = LoaderState.from_fingerprint(d)
        except ResumeError as e:  # the loader names the fingerprint "state" (or "data"): name it here
            msg = str(e)
            for name in ("state", "data"):
                if msg.startswith(name) and msg[len(name) : len(name) + 1] in (".", "=", ":"):
                    raise ResumeError(where + msg[len(name) :]) from None
            raise ResumeError(f"{where}: {msg}") from None
        return cls(loader, mode)


@dataclass(frozen=True)
class MetaSections:
    """Every section a consumer reads, typed (None where the meta records none)."""

    model: ModelSection | None
    features: FeatureSection | None
    optimizer: OptimizerSection | None
    scheduler: SchedulerSection | None
    scaler: ScalerSection | None
    ema: EmaSection | None
    data: DataSection | None
    #: the run's data-parallel world size (``meta.layout.world_size``)
    world_size: int

    @classmethod
    def parse(cls, meta: Any, where: str = "meta") -> MetaSections:
        """The sections of ``meta`` (a :class:`CheckpointMeta`), validated; ``where`` prefixes errors."""

        def opt(parse: Any, v: Any, key: str) -> Any:
            return None if v is None else parse(v, f"{where}.{key}")

        layout = _obj(meta.layout, f"{where}.layout")
        world = layout.get(K_WORLD_SIZE)
        if type(world) is not int or world < 1:
            raise _bad(f"{where}.layout.{K_WORLD_SIZE}", world, "a positive integer")
        return cls(
            model=opt(ModelSection.from_dict, meta.model, "model"),
            features=opt(FeatureSection.from_dict, meta.feature_schema, "feature_schema"),
            optimizer=opt(OptimizerSection.from_dict, meta.optimizer, "optimizer"),
            scheduler=opt(SchedulerSection.from_dict, meta.scheduler, "scheduler"),
            scaler=opt(ScalerSection.from_dict, meta.scaler, "scaler"),
            ema=opt(EmaSection.from_dict, meta.ema, "ema"),
            data=opt(DataSection.from_dict, meta.data, "data"),
            world_size=world,
        )
