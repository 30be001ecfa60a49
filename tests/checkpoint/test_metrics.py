"""checkpoint/metrics.py: the metric log's idempotency policy across resumes."""

from __future__ import annotations

import json

import pytest

import resumable_data as rd


def test_metric_log_idempotency(tmp_path):
    path = tmp_path / "m.jsonl"
    log = rd.MetricLog(path, "r1")
    assert log.log(1, loss=0.5) == 1
    assert log.log(1, loss=0.5) == 0                  # a replayed step is not duplicated
    assert log.log(1, acc=0.9) == 1                   # another metric at the same step is new
    boundary = log.state_dict()
    log.log(2, loss=0.4)
    log.log(3, loss=0.3)
    # a resume restores the boundary: records past it move to the discarded file
    log2 = rd.MetricLog(path, "whatever")
    assert log2.load_state_dict(boundary) > 0 and log2.run_id == "r1"
    assert [r["step"] for r in log2.records()] == [1, 1]
    assert [r["step"] for r in map(json.loads, open(str(path) + ".discarded.jsonl"))] == [2, 3]
    assert log2.log(2, loss=0.4) == 1 and log2.log(1, loss=9.0) == 0
    # a torn last line (crash mid-append) is set aside at open
    with open(path, "ab") as f:
        f.write(b'{"run_id": "r1", "st')
    log3 = rd.MetricLog(path, "r1")
    assert path.read_bytes().endswith(b"\n") and len(log3.records()) == 3
    # a new run after a reset keeps the parent's records and tags its own
    log3.set_run("r2", "optimizer_reset")
    log3.log(2, loss=1.0)
    assert log3.records()[-1]["run_id"] == "r2" and log3.records()[-1]["label"] == "optimizer_reset"
    path.write_text("")
    with pytest.raises(rd.CheckpointError, match="records were lost"):
        rd.MetricLog(path, "r1").load_state_dict(boundary)
