"""checkpoint/inventory.py: the training-state inventory covers every category and renders."""

from __future__ import annotations

import json

import resumable_data as rd


def test_inventory_covers_every_category_and_renders(reference):
    inv = reference["objects"].state.inventory()
    cats = [e.category for e in inv]
    for needle in ("parameters", "optimizer moments", "master weights", "LR scheduler", "AMP grad scaler",
                   "accumulated gradients", "RNG: python", "RNG: numpy", "RNG: torch CPU", "RNG: CUDA", "data cursor",
                   "train/eval modes", "EMA", "callbacks", "metric stream", "counters", "lineage"):
        assert any(needle in c for c in cats), needle
    md = inv.to_markdown()
    assert md.startswith("| category | owner | serialization | restore | oracle | value |")
    assert len(md.splitlines()) == len(inv) + 2
    assert "next batch's record ids" in str(inv)
    assert rd.Inventory.from_dict(json.loads(json.dumps(inv.to_dict()))) == inv


def test_table_clips_cells_at_48_characters_or_prints_them_whole(reference):
    inv = reference["objects"].state.inventory()
    longest = max((getattr(e, f) for e in inv for f in ("owner", "serialization", "restore", "value")), key=len)
    assert len(longest) > 48
    assert str(inv) == inv.table() and "…" in str(inv) and longest not in str(inv)
    whole = inv.table(cell=None)  # what `resumable-data inspect --wide` prints
    assert longest in whole and "…" not in whole
    assert len(whole.splitlines()) == len(inv) + 2 and all(row == row.rstrip() for row in whole.splitlines())
