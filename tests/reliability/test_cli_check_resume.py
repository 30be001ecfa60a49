"""``resumable-data check-resume``: 0 when bit-exact, 1 on a divergence, 2 on bad input."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.cli import main
from tests.reliability._counts import count
from tests.reliability.conftest import write_corpus


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("cli-check") / "data")


@pytest.mark.parametrize("argv, expect", [
    (["--batch-size", "6", "--shuffle", "--seed", "3", "--steps", "24", "--interrupts", "3", "--workers", "0",
      "--world-sizes", "1,2", "--tokens", "tokens"], ["global shuffle, seed 3, tail wrap", "x2", "bit-exact"]),
    (["--batch-size", "4", "--shuffle", "--window", "16", "--packing-seq-len", "16", "--packing-mode", "best_fit",
      "--packing-window", "8", "--tokens", "tokens", "--steps", "20", "--interrupts", "2", "--workers", "0",
      "--commit", "explicit", "--accumulation-steps", "2"],
     ["packed best_fit seq_len 16", "window 16", "commit explicit x2", "bit-exact"]),
])
def test_bit_exact_pipelines_exit_0(pinned, capsys, argv, expect):
    assert main(["check-resume", str(pinned), *argv]) == 0
    out = capsys.readouterr().out
    for text in expect:
        assert text in out, out
    count("cli_checks")


def test_two_workers_eos_strided_sharding_and_a_non_elastic_loader(pinned, capsys, monkeypatch):
    """--workers 0,2 (the harness's default counts), --eos-id and --sharding-policy reach the loaders;
    --no-elastic checks each world size on its own and the report says why."""
    import resumable_data.testing as testing

    seen = []
    check = testing.check_resume

    def spy(make, **kw):
        seen.append(kw)
        loader = make(num_workers=0, sharding=rd.Sharding(2, 1, kw["sharding_policy"]))
        state = loader.state_dict()
        seen.append((state["packing"]["eos_id"], state["layout"], state["elastic"]))
        return check(make, **kw)

    monkeypatch.setattr(testing, "check_resume", spy)
    argv = ["--batch-size", "4", "--shuffle", "--packing-seq-len", "16", "--packing-window", "8", "--tokens", "tokens",
            "--eos-id", "1000", "--sharding-policy", "strided", "--steps", "12", "--interrupts", "2",
            "--workers", "0,2", "--world-sizes", "1,2"]
    assert main(["check-resume", str(pinned), *argv]) == 0
    out = capsys.readouterr().out
    assert "eos 1000" in out and "sharding strided" in out and "[w2 x" in out and "bit-exact" in out, out
    assert seen[0]["num_workers"] == (0, 2) and seen[0]["sharding_policy"] == "strided"
    assert seen[1] == (1000, {"world_size": 2, "policy": "strided"}, True)
    assert "note:" not in out
    seen.clear()
    assert main(["check-resume", str(pinned), *argv, "--no-elastic"]) == 0
    out = capsys.readouterr().out
    assert seen[1][2] is False and "not elastic" in out and "note: world-size changes skipped" in out, out
    assert "[w0 x1]" in out and "x2]" in out
    count("cli_checks", 2)


def test_a_history_dependent_pipeline_exits_1(pinned, capsys, monkeypatch):
    """The source's ``take`` leaks a hidden counter into the batch: resumes cannot reproduce it."""
    calls = {"n": 0}
    take = rd.ArrowShards.take

    def leaky(self, ids):
        calls["n"] += 1
        t = take(self, ids)
        return t.set_column(0, "id", pa.array([calls["n"]] * t.num_rows, type=pa.int64()))

    monkeypatch.setattr(rd.ArrowShards, "take", leaky)
    # the default collate reads through take_numpy; None sends the loader to take (as for columns
    # take_numpy cannot serve), so the leak reaches the batch
    monkeypatch.setattr(rd.ArrowShards, "take_numpy", lambda self, ids, pad_value=0: None)
    assert main(["check-resume", str(pinned), "--steps", "12", "--interrupts", "2", "--workers", "0"]) == 1
    out = capsys.readouterr().out
    assert "DIVERGED" in out and "key 'id'" in out, out


@pytest.mark.parametrize("argv, message", [
    (["--world-sizes", "1,3", "--batch-size", "8"], "divisors of the global --batch-size 8"),
    (["--window", "8"], "--shuffle"),
    (["--packing-seq-len", "1", "--tokens", "tokens"], "--packing-seq-len=1: expected an integer in [2,"),
    (["--packing-seq-len", "16", "--tokens", "id"], "list<integer>"),
    (["--eos-id", "3"], "--packing-seq-len as well"),
])
def test_bad_options_exit_2(pinned, capsys, argv, message):
    assert main(["check-resume", str(pinned), *argv]) == 2
    assert message in capsys.readouterr().err


def test_unpinned_or_damaged_data_exits_2(tmp_path, pinned, capsys):
    rd.write_arrow_shards(pa.table({"id": list(range(10))}), tmp_path / "raw", num_shards=1)
    assert main(["check-resume", str(tmp_path / "raw")]) == 2
    assert "pinned" in capsys.readouterr().err
    shard = sorted(p for p in pinned.rglob("*") if p.is_file() and p.name != rd.sources.MANIFEST_NAME)[0]
    backup = shard.read_bytes()
    try:
        shard.write_bytes(backup[:-10])
        assert main(["check-resume", str(pinned)]) == 2
    finally:
        shard.write_bytes(backup)


def test_the_console_script(pinned):
    """The installed entry point, in a fresh process: argument errors exit 2 too."""
    ok = subprocess.run([sys.executable, "-m", "resumable_data.cli", "check-resume", str(pinned), "--steps", "8",
                         "--interrupts", "1", "--workers", "0"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "bit-exact" in ok.stdout, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "resumable_data.cli", "check-resume", str(pinned), "--workers", "x"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "comma-separated integers" in bad.stderr
    policy = subprocess.run([sys.executable, "-m", "resumable_data.cli", "check-resume", str(pinned),
                             "--sharding-policy", "diagonal"], capture_output=True, text=True, timeout=120)
    assert policy.returncode == 2 and "invalid choice: 'diagonal'" in policy.stderr


def test_pin_flag_pins_an_unpinned_folder_in_place_then_checks(tmp_path, capsys):
    """The refusal's fix works as printed: --pin pins the folder (its hidden manifest only; the
    readers still read it) and the check runs; without it, exit 2 naming --pin."""
    import pyarrow.parquet as pq

    raw = tmp_path / "raw"
    rd.write_arrow_shards(pa.table({"id": list(range(40))}), raw, num_shards=2, format="parquet")
    assert main(["check-resume", str(raw), "--steps", "6", "--interrupts", "1", "--workers", "0"]) == 2
    assert "pass --pin" in capsys.readouterr().err
    assert main(["check-resume", str(raw), "--pin", "--steps", "6", "--interrupts", "1", "--workers", "0"]) == 0
    out = capsys.readouterr().out
    assert "pinned:" in out and "bit-exact" in out, out
    assert (raw / rd.sources.MANIFEST_NAME).is_file()
    assert pq.read_table(raw).column("id").to_pylist() == list(range(40))
