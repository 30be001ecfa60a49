"""Strict readers for JSON-shaped state: every field checked for presence, type and range.

State comes from disk and may be forged; these helpers turn anything unexpected into one
``ResumeError`` (or the error class the caller names) that says which field, what it held and
what was expected. Nothing here ever evaluates or unpickles input.

:func:`check_json` is the purity check a state passes before any field is read: one walk that
accepts exactly what ``json.loads`` produces (dicts with str keys, lists, str, int, bool, None,
finite floats, nested at most :data:`MAX_JSON_DEPTH` deep) and names the first path holding
anything else. Stricter than ``json.dumps`` (which also takes NaN, infinities, tuples,
subclasses of str and int, and int, float, bool or None keys) and cheaper (no text is built):
O(nodes), one type lookup per node, the path built only on a refusal.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np

from resumable_data.errors import ConfigError, ResumableDataError, ResumeError, describe, shown

E = TypeVar("E", bound=enum.Enum)

# Absurdly large numbers are rejected rather than trusted: no cursor or count reaches 2**63.
MAX_INT = (1 << 63) - 1
#: The deepest nesting :func:`check_json` accepts (a loader state is at most 6 deep).
MAX_JSON_DEPTH = 32
_JSON_SCALARS = frozenset({str, int, bool, type(None)})
_ENUM_MEMBERS: dict[type, dict[Any, Any]] = {}  # per enum type, value -> member (what enum lookup does first)
_JSON_TEXT = (
    "plain JSON data (what json.loads returns: dicts with str keys, lists, str, int, bool, null and "
    f"finite floats, at most {MAX_JSON_DEPTH} levels deep)"
)


class _NotJson(Exception):
    """Internal: the walk met a value JSON does not hold; ``path`` is filled in on the way out."""

    def __init__(self, value: Any, why: str) -> None:
        super().__init__(why)
        self.value, self.why = value, why
        self.path: list[str | int] = []


def check_json(value: Any, where: str, *, error: type[ResumableDataError] = ResumeError) -> None:
    """``value`` must be exactly JSON data (see the module docs); else one ``error`` naming the
    path of the first offending value (``state.plan.seed``, ``state.skipped[3][2]``), its type
    and what was expected."""
    try:
        _walk(value, 0)
    except _NotJson as e:
        path = where + "".join(
            (f".{k}" if k.isidentifier() else f"[{k!r}]") if isinstance(k, str) else f"[{k}]" for k in reversed(e.path)
        )
        value = e.value if type(e.value) in _JSON_SCALARS or type(e.value) is float else type(e.value).__name__
        raise error(
            describe(
                path,
                value,
                f"{_JSON_TEXT}; found {e.why}",
                "pass state_dict()'s output (or json.loads of its text) unchanged",
            )
        ) from None


def _walk(v: Any, depth: int) -> None:
    t = type(v)
    if t is dict:
        for k, x in v.items():
            if type(k) is not str:
                raise _NotJson(k, f"a key of type {type(k).__name__}")
            tx = type(x)
            if tx in _JSON_SCALARS:
                continue
            try:
                if tx is float:
                    if x - x != 0.0:  # NaN and the infinities
                        raise _NotJson(x, "a non-finite float")
                elif depth < MAX_JSON_DEPTH:
                    _walk(x, depth + 1)
                else:
                    raise _NotJson(type(x).__name__, f"nesting deeper than {MAX_JSON_DEPTH}")
            except _NotJson as e:
                e.path.append(k)
                raise
    elif t is list:
        for x in v:
            tx = type(x)
            if tx in _JSON_SCALARS:
                continue
            try:
                if tx is float:
                    if x - x != 0.0:
                        raise _NotJson(x, "a non-finite float")
                elif depth < MAX_JSON_DEPTH:
                    _walk(x, depth + 1)
                else:
                    raise _NotJson(type(x).__name__, f"nesting deeper than {MAX_JSON_DEPTH}")
            except _NotJson as e:  # a refusal: the index found again (the success path keeps no counter)
                e.path.append(next(i for i, y in enumerate(v) if y is x))
                raise
    elif t is float:
        if v - v != 0.0:
            raise _NotJson(v, "a non-finite float")
    elif t not in _JSON_SCALARS:
        base = next((b.__name__ for b in (bool, int, float, str, dict, list) if isinstance(v, b)), None)
        raise _NotJson(
            v, f"a value of type {t.__name__}" + (f" (a subclass of {base}, not {base} itself)" if base else "")
        )


def expect_mapping(
    value: Any, where: str, keys: frozenset[str] | set[str], *, error: type[ResumableDataError] = ResumeError
) -> Mapping[str, Any]:
    """``value`` must be a mapping with exactly ``keys`` (no missing, no extra)."""
    if type(value) is dict and value.keys() == keys:  # the common case, in one comparison
        return value
    if not isinstance(value, Mapping):
        raise error(
            describe(where, type(value).__name__, "a JSON object (dict)", "pass the dict that state_dict() returned")
        )
    got = set(value)
    missing, extra = sorted(set(keys) - got), sorted(got - set(keys))
    if missing or extra:
        raise error(
            describe(
                where,
                f"keys missing {missing}, unexpected {extra}",
                f"exactly the keys {sorted(keys)}",
                "pass an unmodified state written by this package (or migrate it)",
            )
        )
    return value


def expect_int(
    value: Any, where: str, lo: int = 0, hi: int = MAX_INT, *, error: type[ResumableDataError] = ResumeError
) -> int:
    if type(value) is int and lo <= value <= hi:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(describe(where, value, "an integer", "pass an unmodified state"))
    if not lo <= value <= hi:
        raise error(describe(where, value, f"an integer in [{lo}, {hi}]", "pass an unmodified state"))
    return value


def expect_str(value: Any, where: str, *, max_len: int = 4096, error: type[ResumableDataError] = ResumeError) -> str:
    if not isinstance(value, str) or len(value) > max_len:
        raise error(describe(where, value, f"a string of at most {max_len} characters", "pass an unmodified state"))
    return value


def expect_bool(value: Any, where: str, *, error: type[ResumableDataError] = ResumeError) -> bool:
    if not isinstance(value, bool):
        raise error(describe(where, value, "true or false", "pass an unmodified state"))
    return value


def expect_enum(value: Any, enum_type: type[E], where: str, *, error: type[ResumableDataError] = ResumeError) -> E:
    members = _ENUM_MEMBERS.get(enum_type)
    if members is None:
        try:
            members = {m.value: m for m in enum_type}
        except TypeError:  # unhashable values: the metaclass call alone
            members = {}
        _ENUM_MEMBERS[enum_type] = members
    try:
        return members[value]  # what enum_type(value) finds first, without the metaclass call
    except (KeyError, TypeError):
        pass
    try:
        return enum_type(value)  # _missing_ hooks, and the refusal
    except (ValueError, TypeError):
        allowed = [m.value for m in enum_type]
        raise error(describe(where, value, f"one of {allowed}", "use one of the listed values")) from None


def field_int(
    d: Mapping[str, Any],
    key: str,
    where: str,
    lo: int = 0,
    hi: int = MAX_INT,
    *,
    error: type[ResumableDataError] = ResumeError,
) -> int:
    """``d[key]`` checked as :func:`expect_int` checks it, named ``where.key``; the name is built
    only on a refusal (the ``field_*`` readers keep string building off the success path)."""
    v = d[key]
    if type(v) is int and lo <= v <= hi:
        return v
    return expect_int(v, f"{where}.{key}", lo, hi, error=error)


def field_str(
    d: Mapping[str, Any], key: str, where: str, *, max_len: int = 4096, error: type[ResumableDataError] = ResumeError
) -> str:
    """``d[key]`` checked as :func:`expect_str` checks it, named ``where.key`` on a refusal."""
    v = d[key]
    if type(v) is str and len(v) <= max_len:
        return v
    return expect_str(v, f"{where}.{key}", max_len=max_len, error=error)


def field_enum(
    d: Mapping[str, Any], key: str, enum_type: type[E], where: str, *, error: type[ResumableDataError] = ResumeError
) -> E:
    """``d[key]`` as a member of ``enum_type`` (:func:`expect_enum`), named ``where.key`` on a refusal."""
    members = _ENUM_MEMBERS.get(enum_type)
    if members is not None and type(d[key]) is str:
        hit = members.get(d[key])
        if hit is not None:
            return hit
    return expect_enum(d[key], enum_type, f"{where}.{key}", error=error)


def expect_header(
    value: Mapping[str, Any],
    fmt: str,
    schema_version: int,
    where: str,
    *,
    error: type[ResumableDataError] = ResumeError,
    also: tuple[int, ...] = (),
) -> None:
    """Check the ``format`` name and integer ``schema_version`` of a state root: the current
    ``schema_version``, or an older one this reader still reads (``also``)."""
    if value.get("format") != fmt:
        raise error(
            describe(f"{where}['format']", value.get("format"), repr(fmt), "pass a state written by this component")
        )
    got = value.get("schema_version")
    if isinstance(got, bool) or not isinstance(got, int):
        raise error(describe(f"{where}['schema_version']", got, "an integer", "pass an unmodified state"))
    if got != schema_version and got not in also:
        raise error(
            describe(
                f"{where}['schema_version']",
                got,
                f"{schema_version} (saved {shown(got)} vs current {schema_version})",
                "load it with the resumable_data version that wrote it, or migrate it",
            )
        )


def coerce_enum(value: Any, enum_type: type[E], param: str) -> E:
    """Construction-time enum coercion, the package's one helper for it: a member or its value
    (``"strided"``) becomes the member; anything else is a ConfigError naming ``param``, the value
    and the allowed values."""
    return expect_enum(value, enum_type, param, error=ConfigError)


def check_int(value: Any, param: str, lo: int = 0, hi: int = MAX_INT) -> int:
    """Construction-time integer check (numpy integers accepted) with a ConfigError on bad input."""
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(describe(param, value, f"an integer in [{lo}, {hi}]", f"pass an integer {param} in range"))
    return value
