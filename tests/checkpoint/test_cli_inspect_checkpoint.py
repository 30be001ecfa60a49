"""cli_inspect.py on a checkpoint directory: lineage, counters, cursor, next step, the data check and the inventory."""

from __future__ import annotations

import subprocess
import sys

import resumable_data as rd


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
