"""Strict readers for JSON-shaped state: every field checked for presence, type and range.

State comes from disk and may be forged; these helpers turn anything unexpected into one
``ResumeError`` (or the error class the caller names) that says which field, what it held and
what was expected. Nothing here ever evaluates or unpickles input.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np

from resumable_data.errors import ConfigError, ResumableDataError, ResumeError, describe

E = TypeVar("E", bound=enum.Enum)

# Absurdly large numbers are rejected rather than trusted: no cursor or count reaches 2**63.
MAX_INT = (1 << 63) - 1


def expect_mapping(
    value: Any, where: str, keys: frozenset[str] | set[str], *, error: type[ResumableDataError] = ResumeError
) -> Mapping[str, Any]:
    """``value`` must be a mapping with exactly ``keys`` (no missing, no extra)."""
    if not isinstance(value, Mapping):
        raise error(describe(where, type(value).__name__, "a JSON object (dict)", "pass the dict that state_dict() returned"))
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


def expect_int(value: Any, where: str, lo: int = 0, hi: int = MAX_INT, *, error: type[ResumableDataError] = ResumeError) -> int:
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
    try:
        return enum_type(value)
    except (ValueError, TypeError):
        allowed = [m.value for m in enum_type]  # type: ignore[attr-defined]
        raise error(describe(where, value, f"one of {allowed}", "use one of the listed values")) from None


def expect_header(
    value: Mapping[str, Any], fmt: str, schema_version: int, where: str, *, error: type[ResumableDataError] = ResumeError
) -> None:
    """Check the ``format`` name and integer ``schema_version`` of a state root."""
    if value.get("format") != fmt:
        raise error(describe(f"{where}['format']", value.get("format"), repr(fmt), "pass a state written by this component"))
    got = value.get("schema_version")
    if isinstance(got, bool) or not isinstance(got, int):
        raise error(describe(f"{where}['schema_version']", got, "an integer", "pass an unmodified state"))
    if got != schema_version:
        raise error(
            describe(
                f"{where}['schema_version']",
                got,
                f"{schema_version} (saved {got} vs current {schema_version})",
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
