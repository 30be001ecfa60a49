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
