"""Fixtures: pinned Arrow shards with a token list column, and one uninterrupted reference run
of the small training loop (``_train.py``) that saves checkpoints at many stop points (mid-window,
right after a skipped AMP step, across the epoch boundary) under both accumulation policies; and the
same for packed sequences of those shards."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import _train as T  # noqa: E402

import resumable_data as rd  # noqa: E402

# microbatch counts at which the reference run checkpoints. Updates close at multiples of 4;
# updates 2 and 5 (at 12 and 24) are skipped by the scaler; the epoch turns at 40.
SAVE_STOPS = [1, 8, 12, 14, 24, 41]
REWIND_STOPS = [3, 14, 27, 41]
# packed (``_train.build(packed=True)``): an epoch is 15 steps, so the epoch turns at 15, 30 and 45;
# the window 28..31 straddles the turn at 30 (31: mid-window in the next epoch; a rewind repeats 28..30).
PACKED_SAVE_STOPS = [1, 12, 15, 24, 31]
PACKED_REWIND_STOPS = [3, 15, 31]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt-data") / "shards"
    T.write_data(d)
    return d


def _reference(root, data_dir, save_stops, rewind_stops, **build):
    o = T.build(data_dir, root / "metrics.jsonl", **build)

    def on_step(o):
        s = o.loader.cursor.delivered
        if s in save_stops:
            o.state.oracles()  # computing the oracles must not perturb training either
            rd.save_checkpoint(root / "save", o.state, keep_last=None)
        if s in rewind_stops:
            o.state.accumulation = rd.AccumulationPolicy.REWIND
            rd.save_checkpoint(root / "rewind", o.state, keep_last=None)
            o.state.accumulation = rd.AccumulationPolicy.SAVE_GRADIENTS
        return False

    batches = T.train(o, on_step=on_step)
    summary = json.loads(json.dumps(T.summary(o)))
    return {"root": root, "batches": {str(k): v for k, v in batches.items()}, "summary": summary,
            "metrics": (root / "metrics.jsonl").read_text(), "objects": o}


@pytest.fixture(scope="session")
def reference(tmp_path_factory, data_dir):
    return _reference(tmp_path_factory.mktemp("reference"), data_dir, SAVE_STOPS, REWIND_STOPS)


@pytest.fixture(scope="session")
def packed_reference(tmp_path_factory, data_dir):
    """The same loop over packed sequences (``_train.build(packed=True)``) of the same shards."""
    return _reference(tmp_path_factory.mktemp("packed-reference"), data_dir, PACKED_SAVE_STOPS,
                      PACKED_REWIND_STOPS, packed=True)


def metric_copies(reference, tag, n):
    out = []
    for i in range(n):
        p = reference["root"] / f"metrics-{tag}-{i}.jsonl"
        shutil.copy(reference["root"] / "metrics.jsonl", p)
        out.append(p)
    return out
