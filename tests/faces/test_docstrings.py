"""Every public class, function, method and property reachable from ``rd.__all__``,
``rd.testing``, ``rd.distributed`` and ``rd.integrations.*`` has a docstring of its own (not empty,
not whitespace, not the signature a dataclass writes for an undocumented class).

Methods are those a public class defines or inherits from a class in ``resumable_data`` (what a
framework base class defines is the framework's to document); dunder methods are skipped (a
class's docstring documents its constructor). An integration whose framework is not installed is
skipped, never passed silently: the skip names it."""

from __future__ import annotations

import enum
import importlib
import inspect
import sys

import pytest

import resumable_data as rd

FACES = ["resumable_data.testing", "resumable_data.distributed"]
INTEGRATIONS = ["lightning", "transformers", "accelerate", "torchtitan"]


def _empty(doc: object) -> bool:
    return not isinstance(doc, str) or not doc.strip()


def _class_doc_missing(cls: type) -> bool:
    doc = cls.__dict__.get("__doc__")
    if _empty(doc):
        return True
    generated = doc.startswith(f"{cls.__name__}(")  # a dataclass's signature, written for an undocumented class
    default_enum = issubclass(cls, enum.Enum) and doc.strip() == "An enumeration."
    return generated or default_enum


def _ours(obj: object) -> bool:
    return getattr(obj, "__module__", "").startswith("resumable_data")


def _member_doc(raw: object) -> tuple[bool, object]:
    """(is a documentable callable or property, its own docstring)."""
    if isinstance(raw, (staticmethod, classmethod)):
        raw = raw.__func__
    if isinstance(raw, property):
        return True, (raw.fget.__doc__ if raw.fget is not None else None) or raw.__doc__
    if inspect.isfunction(raw):
        return True, raw.__doc__
    return False, None


def missing_docstrings(module_names: list[str]) -> list[str]:
    """``module.name`` (and ``module.Class.member``) of every public object without a docstring."""
    out: list[str] = []
    seen: set[int] = set()
    for module_name in module_names:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if id(obj) in seen or not _ours(obj) or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            seen.add(id(obj))
            where = f"{module_name}.{name}"
            if inspect.isfunction(obj):
                if _empty(obj.__doc__):
                    out.append(where)
                continue
            if _class_doc_missing(obj):
                out.append(where)
            for member in sorted(dir(obj)):
                if member.startswith("_"):
                    continue
                owner = next((c for c in obj.__mro__ if member in c.__dict__), None)
                if owner is None or not _ours(owner):
                    continue
                documentable, doc = _member_doc(owner.__dict__[member])
                if documentable and _empty(doc):
                    out.append(f"{where}.{member}" + ("" if owner is obj else f" (from {owner.__qualname__})"))
    return out


def test_the_walk_can_fail():
    class Undocumented:
        def method(self):
            pass

    Undocumented.__module__ = "resumable_data.fake"
    fake = type(rd)("resumable_data._fake_for_test")
    fake.__all__ = ["Undocumented", "function"]
    fake.Undocumented = Undocumented

    def function():
        pass

    function.__module__ = "resumable_data.fake"
    fake.function = function
    sys.modules[fake.__name__] = fake
    try:
        assert missing_docstrings([fake.__name__]) == [
            "resumable_data._fake_for_test.Undocumented",
            "resumable_data._fake_for_test.Undocumented.method",
            "resumable_data._fake_for_test.function",
        ]
    finally:
        del sys.modules[fake.__name__]


def test_rd_testing_and_distributed_are_documented():
    missing = missing_docstrings(["resumable_data", *FACES])
    assert not missing, f"{len(missing)} public objects lack a docstring: {missing}"


@pytest.mark.parametrize("name", INTEGRATIONS)
def test_integrations_are_documented(name):
    module = f"resumable_data.integrations.{name}"
    try:
        importlib.import_module(module)
    except ImportError as e:
        pytest.skip(f"{module} needs its framework ({e}): pip install -c constraints.txt -e '.[integrations]'")
    missing = missing_docstrings([module])
    assert not missing, f"{len(missing)} public objects lack a docstring: {missing}"
