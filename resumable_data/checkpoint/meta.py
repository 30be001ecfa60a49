"""Checkpoint metadata: what a checkpoint *is*, separately from the tensors it holds.

A :class:`CheckpointMeta` names everything that decides whether a checkpoint may be resumed
under a recovery label (:func:`~resumable_data.check_compatible` compares two of them): model
configuration, parameter/buffer names with shapes and dtypes, module tree, feature-schema (or
tokenizer) fingerprint, optimizer type and per-group settings, scheduler class, its schedule's
fingerprint and convention (what one ``scheduler.step()`` means), scaler settings, EMA presence
and layout, callback names, the data plan, layout and seeding mode, software versions, a user recovery spec
(transition rules such as a learning-rate formula), and the lineage (run id, checkpoint id,
parent). A separate ``status`` section records progress (counters, cursor, microstep, next LR of
each group, module modes); it is shown by ``resumable-data inspect`` and never compared.

Typed sections. Each section is kept as the JSON object it writes (the contract walks those trees
and ``meta.json`` stays byte for byte what it was); ``meta.sections`` (a
:class:`~resumable_data.checkpoint.sections.MetaSections`) is the typed form every reader uses
(``inspect``, the contract's fixes), built and validated when the meta is made or loaded: a forged
section raises then, before anything is restored.

Format: JSON, ``format = "resumable_data.checkpoint_meta"``, integer ``schema_version``; an
unknown version is refused on load. Cost: building it walks ``named_parameters``/``named_modules``
once (no tensor data is read); parsing validates the sections readers use (tens of microseconds).
"""

from __future__ import annotations

import enum
import json
import platform
import time
import uuid
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from types import CodeType
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import xxhash

from resumable_data._schema import expect_enum, expect_header, expect_mapping, expect_str
from resumable_data._version import __version__
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.sections import MetaSections, SchedulerConvention
from resumable_data.checkpoint.status import CheckpointStatus
from resumable_data.checkpoint.torch_compat import SCHEDULER_PROGRESS_KEYS
from resumable_data.errors import ConfigError, describe
from resumable_data.labels import RecoveryLabel

__all__ = [
    "META_FORMAT",
    "META_SCHEMA_VERSION",
    "CheckpointMeta",
    "SchedulerConvention",
    "fingerprint",
    "module_meta",
    "module_modes",
    "new_id",
    "scheduler_meta",
    "software_versions",
]

META_FORMAT = "resumable_data.checkpoint_meta"
META_SCHEMA_VERSION = 1

K_FORMAT = "format"
K_SCHEMA = "schema_version"
K_RUN_ID = "run_id"
K_CHECKPOINT_ID = "checkpoint_id"
K_PARENT = "parent_checkpoint_id"
K_LABEL = "recovery_label"
K_MODEL = "model"
K_FEATURES = "feature_schema"
K_OPTIMIZER = "optimizer"
K_SCHEDULER = "scheduler"
K_SCALER = "scaler"
K_EMA = "ema"
K_CALLBACKS = "callbacks"
K_DATA = "data"
K_LAYOUT = "layout"
K_SOFTWARE = "software"
K_SPEC = "recovery_spec"
K_STATUS = "status"
#: Sections compared by the compatibility contract, in report order.
COMPARED = (
    K_MODEL,
    K_FEATURES,
    K_OPTIMIZER,
    K_SCHEDULER,
    K_SCALER,
    K_EMA,
    K_CALLBACKS,
    K_DATA,
    K_LAYOUT,
    K_SOFTWARE,
    K_SPEC,
)
_KEYS = frozenset((K_FORMAT, K_SCHEMA, K_RUN_ID, K_CHECKPOINT_ID, K_PARENT, K_LABEL, K_STATUS) + COMPARED)


def new_id() -> str:
    """A fresh run / checkpoint id (uuid4 hex)."""
    return uuid.uuid4().hex


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=repr).encode()


def fingerprint(obj: Any) -> str:
    """A content fingerprint (``xxh3_128:<hex>``) of a feature schema or tokenizer.

    Accepts a JSON-like mapping/list (a vocabulary ``{token: id}`` or ``[token, ...]``: a reordered
    vocabulary gives another fingerprint, not only a resized one), ``str``/``bytes``, a
    ``pyarrow.Schema``, or an object with ``get_vocab()`` (Hugging Face tokenizers; its class and
    special tokens are included)."""
    if obj is None:
        raise ConfigError(describe("feature_schema", None, "a schema, vocabulary or tokenizer", "pass one or omit it"))
    if isinstance(obj, bytes):
        data = obj
    elif isinstance(obj, str):
        data = obj.encode()
    elif isinstance(obj, _Vocabulary):
        vocab = obj.get_vocab()
        special = getattr(obj, "all_special_tokens", None)
        data = _canonical({"class": type(obj).__name__, "vocab": vocab, "special": list(special or [])})
    elif type(obj).__module__.startswith("pyarrow") and isinstance(obj, _ArrowText):
        data = obj.to_string(show_field_metadata=True, show_schema_metadata=True).encode()
    elif isinstance(obj, (Mapping, list, tuple)):
        data = _canonical(obj)
    else:
        raise ConfigError(
            describe(
                "feature_schema",
                type(obj).__name__,
                "a mapping, list, str, bytes, pyarrow.Schema or a tokenizer with get_vocab()",
                "pass the vocabulary or schema itself",
            )
        )
    return "xxh3_128:" + xxhash.xxh3_128_hexdigest(data)


def _tensor_meta(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}


def module_meta(module: torch.nn.Module, config: Any = None) -> dict[str, Any]:
    """Parameters and persistent buffers (shape, dtype), the module tree (class names), config."""
    sd = module.state_dict(keep_vars=True)
    params = {n for n, _ in module.named_parameters(remove_duplicate=False)}
    return {
        "config": _jsonable(config, "config"),
        "parameters": {k: _tensor_meta(v) for k, v in sd.items() if k in params},
        "buffers": {k: _tensor_meta(v) for k, v in sd.items() if k not in params and isinstance(v, torch.Tensor)},
        "modules": {n or "<root>": type(m).__qualname__ for n, m in module.named_modules()},
    }


def module_modes(module: torch.nn.Module) -> dict[str, bool]:
    return {n: bool(m.training) for n, m in module.named_modules()}


@runtime_checkable
class _Vocabulary(Protocol):
    """A tokenizer (Hugging Face's): its vocabulary as a mapping."""

    def get_vocab(self) -> Mapping[str, int]: ...


@runtime_checkable
class _ArrowText(Protocol):
    """A pyarrow object with a full text form (``pyarrow.Schema``)."""

    def to_string(self, *, show_field_metadata: bool, show_schema_metadata: bool) -> str: ...


@runtime_checkable
class _Code(Protocol):
    """Python code with its bytecode, closure and defaults (a function, a lambda, a bound method)."""

    __code__: CodeType
    __closure__: tuple[Any, ...] | None
    __defaults__: tuple[Any, ...] | None


@runtime_checkable
class _Lambdas(Protocol):
    """A scheduler that keeps its schedule functions in a list (torch's ``LambdaLR``, ``MultiplicativeLR``)."""

    lr_lambdas: list[Any]


@runtime_checkable
class _OneLambda(Protocol):
    """A scheduler with a single schedule function (torch's own keep a list, ``lr_lambdas``)."""

    lr_lambda: Any


def _code_fingerprint(fn: Any) -> str:
    """Best-effort fingerprint of a schedule function: bytecode, constants, closure values, defaults."""
    if isinstance(fn, _Code):  # a function, a lambda or a bound method
        code = fn.__code__
        cells = []
        for c in fn.__closure__ or ():
            try:
                cells.append(repr(c.cell_contents))
            except ValueError:
                cells.append("<empty>")
        parts = [code.co_code.hex(), repr(code.co_consts), repr(code.co_names), repr(cells), repr(fn.__defaults__)]
        return xxhash.xxh3_64_hexdigest("|".join(parts).encode())
    try:
        attrs = vars(fn)
    except TypeError:  # no __dict__: its repr
        return xxhash.xxh3_64_hexdigest(repr(fn).encode())
    return xxhash.xxh3_64_hexdigest(_canonical({"class": type(fn).__qualname__, **attrs}))


def scheduler_meta(scheduler: Any, convention: SchedulerConvention) -> dict[str, Any]:
    """Class, convention and a fingerprint of the schedule (lambdas included: the transition rule)."""
    fns: list[Any] | None = None
    if isinstance(scheduler, _Lambdas):
        fns = scheduler.lr_lambdas
    elif isinstance(scheduler, _OneLambda):
        fns = [scheduler.lr_lambda]
    settings = {k: _jsonable(v, k) for k, v in scheduler.state_dict().items() if k not in SCHEDULER_PROGRESS_KEYS}
    return {
        "type": f"{type(scheduler).__module__}.{type(scheduler).__qualname__}",
        "convention": convention.value,
        "settings": settings,
        "schedule": [_code_fingerprint(f) for f in fns] if fns else None,
    }


def _jsonable(v: Any, where: str) -> Any:
    try:
        return json.loads(json.dumps(v, default=_json_default))
    except (TypeError, ValueError) as e:
        raise ConfigError(
            describe(where, type(v).__name__, f"JSON-serializable data ({e})", "pass plain data")
        ) from None


def _json_default(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, enum.Enum):
        return v.value
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def software_versions() -> dict[str, str]:
    out = {
        "python": platform.python_version(),
        "torch": torch.__version__.split("+")[0],
        "numpy": np.__version__,
        "resumable_data": __version__,
    }
    try:
        import safetensors

        out["safetensors"] = safetensors.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


@dataclass(frozen=True)
class CheckpointMeta:
    """Metadata of one checkpoint (or of the current run, to compare with one)."""

    run_id: str
    checkpoint_id: str | None = None
    parent_checkpoint_id: str | None = None
    recovery_label: RecoveryLabel = RecoveryLabel.FAITHFUL_CONTINUATION
    model: dict | None = None
    feature_schema: dict | None = None
    optimizer: dict | None = None
    scheduler: dict | None = None
    scaler: dict | None = None
    ema: dict | None = None
    callbacks: list = field(default_factory=list)
    data: dict | None = None
    layout: dict = field(default_factory=lambda: {"world_size": 1})
    software: dict = field(default_factory=software_versions)
    recovery_spec: dict | None = None
    status: CheckpointStatus = field(default_factory=CheckpointStatus)
    #: The name errors give this meta (``"saved meta"``, ``"current meta"``); not stored.
    where: InitVar[str] = "meta"
    #: The sections readers use, typed and validated (built here; see the module docs).
    sections: MetaSections = field(init=False, compare=False, repr=False)

    def __post_init__(self, where: str) -> None:
        object.__setattr__(
            self, "recovery_label", expect_enum(self.recovery_label, RecoveryLabel, "recovery_label", error=ConfigError)
        )
        if not isinstance(self.status, CheckpointStatus):
            raise ConfigError(
                describe(
                    "status",
                    type(self.status).__name__,
                    "an rd CheckpointStatus",
                    "pass CheckpointStatus(...) (extra= for progress rd does not know)",
                )
            )
        object.__setattr__(self, "sections", MetaSections.parse(self, where))

    def to_dict(self) -> dict[str, Any]:
        """The metadata as ``meta.json``'s JSON object (``format``, ``schema_version`` and every field)."""
        return {
            K_FORMAT: META_FORMAT,
            K_SCHEMA: META_SCHEMA_VERSION,
            K_RUN_ID: self.run_id,
            K_CHECKPOINT_ID: self.checkpoint_id,
            K_PARENT: self.parent_checkpoint_id,
            K_LABEL: self.recovery_label.value,
            K_MODEL: self.model,
            K_FEATURES: self.feature_schema,
            K_OPTIMIZER: self.optimizer,
            K_SCHEDULER: self.scheduler,
            K_SCALER: self.scaler,
            K_EMA: self.ema,
            K_CALLBACKS: list(self.callbacks),
            K_DATA: self.data,
            K_LAYOUT: self.layout,
            K_SOFTWARE: self.software,
            K_SPEC: self.recovery_spec,
            K_STATUS: self.status.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Any, where: str = "meta") -> CheckpointMeta:
        """Parse and validate; an unknown ``schema_version`` or malformed field raises CheckpointError
        (a malformed ``data`` section: ResumeError, module docs). ``where`` names it in errors."""
        if isinstance(d, CheckpointMeta):
            return d
        if not isinstance(d, Mapping):
            raise CheckpointError(
                describe(where, type(d).__name__, "a dict from CheckpointMeta.to_dict()", "pass that dict")
            )
        expect_header(d, META_FORMAT, META_SCHEMA_VERSION, where, error=CheckpointError)
        expect_mapping(d, where, _KEYS, error=CheckpointError)

        def opt_str(k: str) -> str | None:
            return None if d[k] is None else expect_str(d[k], f"{where}.{k}", max_len=256, error=CheckpointError)

        def opt_dict(k: str) -> dict | None:
            v = d[k]
            if v is not None and not isinstance(v, dict):
                raise CheckpointError(
                    describe(f"{where}.{k}", type(v).__name__, "null or a JSON object", "pass an unmodified checkpoint")
                )
            return v

        callbacks = d[K_CALLBACKS]
        if not isinstance(callbacks, list) or not all(isinstance(c, str) for c in callbacks):
            raise CheckpointError(
                describe(f"{where}.callbacks", callbacks, "a list of names", "pass an unmodified checkpoint")
            )
        for k in (K_LAYOUT, K_SOFTWARE, K_STATUS):
            if not isinstance(d[k], dict):
                raise CheckpointError(
                    describe(f"{where}.{k}", type(d[k]).__name__, "a JSON object", "pass an unmodified checkpoint")
                )
        return cls(
            run_id=expect_str(d[K_RUN_ID], f"{where}.run_id", max_len=256, error=CheckpointError),
            checkpoint_id=opt_str(K_CHECKPOINT_ID),
            parent_checkpoint_id=opt_str(K_PARENT),
            recovery_label=expect_enum(d[K_LABEL], RecoveryLabel, f"{where}.recovery_label", error=CheckpointError),
            model=opt_dict(K_MODEL),
            feature_schema=opt_dict(K_FEATURES),
            optimizer=opt_dict(K_OPTIMIZER),
            scheduler=opt_dict(K_SCHEDULER),
            scaler=opt_dict(K_SCALER),
            ema=opt_dict(K_EMA),
            callbacks=list(callbacks),
            data=opt_dict(K_DATA),
            layout=d[K_LAYOUT],
            software=d[K_SOFTWARE],
            recovery_spec=opt_dict(K_SPEC),
            status=CheckpointStatus.from_dict(d[K_STATUS], f"{where}.status"),
            where=where,
        )


def now() -> float:
    return time.time()
