"""Units: FQN-keyed optimizer state, the AMP applied/skipped helper, the codec, the metric log's
idempotency policy, the inventory rendering and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint import codec
from resumable_data.checkpoint.optim import load_optimizer_state, optimizer_state, param_fqns


class Two(torch.nn.Module):
    def __init__(self, order="ab"):
        super().__init__()
        for name in order:  # registration order differs between processes
            setattr(self, name, torch.nn.Linear(3, 3))


def _adam(model, reverse=False):
    groups = [{"params": list(model.a.parameters()), "lr": 0.1}, {"params": list(model.b.parameters()), "lr": 0.2}]
    if reverse:
        groups = [{"params": list(reversed(g["params"])), "lr": g["lr"]} for g in reversed(groups)]
    return torch.optim.Adam(groups)


def test_optimizer_state_is_restored_by_name_whatever_the_construction_order():
    torch.manual_seed(0)
    m = Two("ab")
    opt = _adam(m)
    for _ in range(3):
        (m.a(torch.ones(1, 3)).sum() * 2 + m.b(torch.ones(1, 3)).sum()).backward()
        opt.step()
    saved = codec.decode(*codec.encode(optimizer_state(opt, param_fqns(("", m)))))
    m2 = Two("ba")
    m2.load_state_dict(m.state_dict())
    opt2 = _adam(m2, reverse=True)
    load_optimizer_state(opt2, param_fqns(("", m2)), saved)
    for name, p in m.named_parameters():
        q = dict(m2.named_parameters())[name]
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[p][k], opt2.state[q][k]), (name, k)
    assert {g["lr"] for g in opt2.param_groups if any(p is m2.a.weight for p in g["params"])} == {0.1}
    # a different partition into groups is refused with the fix
    opt3 = torch.optim.Adam(m2.parameters())
    with pytest.raises(rd.CompatibilityError, match="same partition of parameters"):
        load_optimizer_state(opt3, param_fqns(("", m2)), saved)


def test_scaler_step_reports_skipped_updates():
    m = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    loader_applied = []
    for poison in (False, True, False):
        opt.zero_grad()
        scaler.scale(m(torch.ones(1, 2)).sum()).backward()
        if poison:
            m.weight.grad[0, 0] = float("nan")
        before = m.weight.detach().clone()
        applied = rd.scaler_step(scaler, opt)
        loader_applied.append(applied)
        assert applied == (not torch.equal(before, m.weight.detach()))
    assert loader_applied == [True, False, True]
    assert rd.checkpoint.step_was_applied(8.0, 4.0) is False and rd.checkpoint.step_was_applied(8.0, 8.0) is True
    assert rd.scaler_step(None, opt) is True


def test_codec_round_trip_and_refusals():
    tree = {"a": torch.arange(4), "t": (1, 2.5, float("inf")), "ints": {3: "x"}, "l": [True, None, "s"]}
    j, tensors = codec.encode(tree)
    json.dumps(j)
    back = codec.decode(json.loads(json.dumps(j)), tensors)
    assert torch.equal(back["a"], tree["a"]) and back["t"] == tree["t"] and back["ints"] == {3: "x"}
    w = torch.zeros(3)
    _, shared = codec.encode({"x": w, "y": w})
    assert shared["x"].data_ptr() != shared["y"].data_ptr()
    with pytest.raises(rd.CheckpointError, match=r"obj.*never pickles"):
        codec.encode({"obj": object()})
    with pytest.raises(rd.CheckpointError, match="tensor file"):
        codec.decode({"a": 1}, {"stray": torch.zeros(1)})


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


def test_cli_inspect(reference, data_dir, tmp_path, capsys):
    from resumable_data.cli import main

    assert main(["inspect", str(reference["root"] / "save"), "--step", "14", "--data", str(data_dir)]) == 0
    out = capsys.readouterr().out
    for needle in ("recovery label:        faithful_continuation", "lineage:", "counters:", "attempted_updates=3",
                   "cursor:                committed=12 delivered=14", "microstep:             1 (inside an accumulation",
                   "next step:             14 (epoch 0", "next record ids:", "matches the pinned version",
                   "next lr, group 0", "inventory:", "RNG: torch CPU"):
        assert needle in out, needle
    other = tmp_path / "other"
    import _train as T

    T.write_data(other)
    (other / "extra.arrow").write_bytes((other / sorted(p.name for p in other.iterdir() if p.suffix == ".arrow")[0]).read_bytes())
    rd.pin(other)
    assert main(["inspect", str(reference["root"] / "save"), "--data", str(other), "--markdown"]) == 1
    assert "MISMATCH" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "nothing")]) == 2
    r = subprocess.run([sys.executable, "-m", "resumable_data.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "inspect" in r.stdout
