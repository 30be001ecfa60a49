"""The training-state inventory: one entry per state category, each with owner, serialization
form, restore action and oracle (a check whose value is computed now).

:meth:`TrainingState.inventory` builds it from the live objects; a checkpoint stores it as
``inventory.json`` so ``resumable-data inspect`` can show it without the training code, and a
restore recomputes the oracles and compares them with the saved ones. Rendering: ``str()`` gives
an aligned text table, :meth:`Inventory.to_markdown` a Markdown table.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from resumable_data._schema import expect_header, expect_mapping, expect_str
from resumable_data.checkpoint.errors import CheckpointError

__all__ = ["INVENTORY_FORMAT", "INVENTORY_SCHEMA_VERSION", "Inventory", "InventoryEntry"]

INVENTORY_FORMAT = "resumable_data.inventory"
INVENTORY_SCHEMA_VERSION = 1
K_ENTRIES = "entries"
FIELDS = ("category", "owner", "serialization", "restore", "oracle", "value")


@dataclass(frozen=True)
class InventoryEntry:
    """One state category."""

    category: str
    owner: str
    serialization: str
    restore: str
    oracle: str
    value: str

    def to_dict(self) -> dict[str, str]:
        return {f: getattr(self, f) for f in FIELDS}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> InventoryEntry:
        expect_mapping(d, where, set(FIELDS), error=CheckpointError)
        return cls(*(expect_str(d[f], f"{where}.{f}", max_len=4096, error=CheckpointError) for f in FIELDS))


@dataclass(frozen=True)
class Inventory:
    """The training-state inventory: one :class:`InventoryEntry` per state category, iterable and
    indexed by category (``inventory["optimizer"]``; a missing category raises ``KeyError``)."""

    entries: tuple[InventoryEntry, ...]

    def __iter__(self) -> Iterator[InventoryEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, category: str) -> InventoryEntry:
        for e in self.entries:
            if e.category == category:
                return e
        raise KeyError(category)

    def to_dict(self) -> dict[str, Any]:
        """The inventory as ``inventory.json``'s JSON object (``format``, ``schema_version``, ``entries``)."""
        return {
            "format": INVENTORY_FORMAT,
            "schema_version": INVENTORY_SCHEMA_VERSION,
            K_ENTRIES: [e.to_dict() for e in self.entries],
        }

    @classmethod
    def from_dict(cls, d: Any) -> Inventory:
        """The inventory ``d`` (from :meth:`to_dict`) describes.

        Raises :class:`rd.CheckpointError` on another format or schema version, other keys, or an entry
        that is not an object of strings."""
        expect_mapping(d, "inventory", {"format", "schema_version", K_ENTRIES}, error=CheckpointError)
        expect_header(d, INVENTORY_FORMAT, INVENTORY_SCHEMA_VERSION, "inventory", error=CheckpointError)
        if not isinstance(d[K_ENTRIES], list):
            raise CheckpointError("inventory.entries: expected a list; fix: pass an unmodified checkpoint")
        return cls(tuple(InventoryEntry.from_dict(e, f"inventory.entries[{i}]") for i, e in enumerate(d[K_ENTRIES])))

    def to_markdown(self) -> str:
        """The inventory as a Markdown table, one row per category (``|`` and newlines in cells escaped)."""

        def cell(s: str) -> str:
            return s.replace("|", "\\|").replace("\n", " ")

        rows = ["| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
        rows += ["| " + " | ".join(cell(getattr(e, f)) for f in FIELDS) + " |" for e in self.entries]
        return "\n".join(rows)

    def table(self, cell: int | None = 48) -> str:
        """The inventory as a plain-text table, one row per category; each cell clipped to ``cell``
        characters (with ``…``), or whole with ``cell=None`` (``resumable-data inspect --wide``)."""
        longest = {f: max([len(f)] + [len(getattr(e, f)) for e in self.entries]) for f in FIELDS}
        widths = {f: w if cell is None else min(cell, w) for f, w in longest.items()}

        def clip(s: str, w: int) -> str:
            return s if len(s) <= w else s[: w - 1] + "…"

        line = "  ".join(f.ljust(widths[f]) for f in FIELDS)
        out = [line, "  ".join("-" * widths[f] for f in FIELDS)]
        out += ["  ".join(clip(getattr(e, f), widths[f]).ljust(widths[f]) for f in FIELDS) for e in self.entries]
        return "\n".join(row.rstrip() for row in out)

    def __str__(self) -> str:
        return self.table()
