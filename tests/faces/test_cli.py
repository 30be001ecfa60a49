"""The command line a newcomer meets: ``pin`` (write, ``--dry-run``, ``--verify``), an example in
every ``--help``, ``inspect`` of a bare loader state and its 100-column layout (``--wide`` for
full tables), ``check-resume``'s advice on unpinned data, ``demo --quiet`` without progress bars,
and the resume helpers ``rd.latest_checkpoint`` / ``rd.resume_or_start``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import torch

import resumable_data as rd
from resumable_data.cli import COMMANDS, build_parser, main

sys.path.insert(0, str(Path(__file__).parents[1] / "checkpoint"))
import _train as T  # noqa: E402


def _shards(directory: Path, n: int = 200) -> Path:
    rd.write_arrow_shards(pa.table({"id": pa.array(range(n), pa.int64()), "x": pa.array(range(n), pa.int32())}),
                          directory, num_shards=4)
    return directory


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# -- pin -----------------------------------------------------------------------------------------
def test_pin_dry_run_writes_nothing_then_pin_and_verify(tmp_path, capsys):
    data = _shards(tmp_path / "data")
    before = sorted(p.name for p in data.iterdir())
    rc, out, _ = _cli(capsys, "pin", data, "--dry-run")
    expected = rd.pin(data, save=False).hash
    assert rc == 0 and f"version:   {expected}" in out and "nothing written" in out and "would be written" in out
    assert sorted(p.name for p in data.iterdir()) == before, "--dry-run wrote a file"

    rc, out, _ = _cli(capsys, "pin", data)
    assert rc == 0 and f"version:   {expected} (200 records, 4 shard(s)" in out and "(no manifest before)" in out
    assert rd.DatasetVersion.load(data).hash == expected
    rc, out, _ = _cli(capsys, "pin", data)
    assert rc == 0 and "unchanged" in out

    rc, out, _ = _cli(capsys, "pin", data, "--verify")
    assert rc == 0 and "every shard's content hash matches" in out
    shard = sorted(data.glob("*.arrow"))[1]
    raw = bytearray(shard.read_bytes())
    raw[-20] ^= 0xFF  # same size, other content
    shard.write_bytes(bytes(raw))
    manifest = (data / ".rd-manifest.json").read_bytes()
    rc, out, _ = _cli(capsys, "pin", data, "--verify")
    assert rc == 1 and out.startswith("MISMATCH") and shard.name in out
    assert (data / ".rd-manifest.json").read_bytes() == manifest, "--verify changed the manifest"


def test_pin_bad_input_exits_2_with_a_fix(tmp_path, capsys):
    rc, _, err = _cli(capsys, "pin", tmp_path / "missing")
    assert rc == 2 and "fix:" in err
    data = _shards(tmp_path / "data")
    rc, _, err = _cli(capsys, "pin", data, "--verify")  # no manifest yet
    assert rc == 2 and "rd-manifest.json" in err
    rc, _, err = _cli(capsys, "pin", data, "--workers", "0")
    assert rc == 2 and "--workers=0" in err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["pin", str(data), "--dry-run", "--verify"])  # one or the other


def test_pin_hash_size(tmp_path, capsys):
    data = _shards(tmp_path / "data")
    rc, out, _ = _cli(capsys, "pin", data, "--hash", "size")
    assert rc == 0 and "hash=size" in out
    rc, out, _ = _cli(capsys, "pin", data, "--verify")
    assert rc == 0 and "sizes, rows and schema match" in out


# -- --help --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_help_shows_an_example(name, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([name, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and f"resumable-data {name} " in out.split("examples:", 1)[1]


def test_top_level_help_lists_an_example_per_command(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    tail = capsys.readouterr().out.split("examples:", 1)[1]
    assert all(f"resumable-data {name}" in tail for name in COMMANDS)


# -- check-resume on unpinned data -----------------------------------------------------------------
def test_check_resume_on_unpinned_data_says_how_to_pin(tmp_path, capsys):
    data = _shards(tmp_path / "data")
    rc, _, err = _cli(capsys, "check-resume", data, "--steps", "4", "--interrupts", "1")
    assert rc == 2 and f"fix: pass --pin (pins it in place first), or run resumable-data pin {data}" in err
    assert "unpinned=" not in err
    assert not (data / ".rd-manifest.json").exists()
    assert _cli(capsys, "pin", data)[0] == 0
    rc, out, _ = _cli(capsys, "check-resume", data, "--batch-size", "8", "--shuffle", "--steps", "6",
                      "--interrupts", "2", "--workers", "0")
    assert rc == 0 and "bit-exact" in out


# -- inspect: a bare loader state, 100 columns ----------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    T.write_data(root / "data")
    o = T.build(root / "data", root / "m.jsonl")
    T.train(o, 14)
    rd.save_checkpoint(root / "ckpt", o.state)
    state = o.state.loader.state_dict()
    (root / "loader.json").write_text(json.dumps(state))
    current = T.build(root / "data", root / "m2.jsonl", run_id="current", seed=3, loader_seed=8)
    (root / "current.json").write_text(json.dumps(current.state.meta().to_dict()))
    return {"root": root, "data": root / "data", "state": state}


def test_inspect_a_bare_loader_state(saved, capsys):
    rc, out, _ = _cli(capsys, "inspect", saved["root"] / "loader.json", "--data", saved["data"], "--records", "100")
    assert rc == 0
    assert "loader state:" in out and "cursor:                committed=12 delivered=14 fetched=14" in out
    assert "uncommitted:           2 step(s) delivered but not committed" in out
    assert "sample seeding:        seed_per_sample 'eager', seeding version 3\n" in out  # schema 5, keyless
    assert "'skip' (continues at step 14)" in out
    assert "next step:             12 (epoch 0" in out and "matches the pinned version" in out
    # the record ids it predicts are what a loader resumed from that state delivers first
    fresh = T.build(saved["data"], saved["root"] / "m3.jsonl", run_id="fresh").state.loader
    fresh.load_state_dict(saved["state"], on_uncommitted="repeat")
    first = next(iter(fresh))
    ids = json.loads(out.split("next record ids:", 1)[1].split("\n", 1)[0].strip())
    assert ids == first["id"].tolist()
    assert max(map(len, out.splitlines())) <= 100


def test_inspect_names_version_2_for_a_keyless_schema_4_state(saved, tmp_path, capsys):
    """A schema-4 state without the record (written before seeding version 3) is a version-2 run."""
    assert saved["state"]["schema_version"] == 5 and "sample_seeding" not in saved["state"]
    (tmp_path / "v2.json").write_text(json.dumps({**saved["state"], "schema_version": 4}))
    rc, out, _ = _cli(capsys, "inspect", tmp_path / "v2.json")
    assert rc == 0
    assert ("sample seeding:        seed_per_sample 'eager', seeding version 2 (the seeding functions' formulas,\n"
            "                       before version 3)\n") in out


def test_inspect_names_the_seeding_of_a_state_saved_before_version_2(tmp_path, capsys):
    golden = json.loads((Path(__file__).parents[1] / "golden" / "seeding_v1.json").read_text())
    (tmp_path / "v1.json").write_text(json.dumps(golden["state"]))
    rc, out, _ = _cli(capsys, "inspect", tmp_path / "v1.json")
    assert rc == 0
    assert "sample seeding:        not recorded (a state written before seeding version 2): continues with" in out
    assert "seeding version 1" in out and max(map(len, out.splitlines())) <= 100


def test_inspect_refuses_a_json_that_is_not_a_loader_state(saved, tmp_path, capsys):
    other = tmp_path / "meta.json"
    other.write_text(json.dumps({"format": "something else"}))
    rc, _, err = _cli(capsys, "inspect", other)
    assert rc == 2 and "resumable_data.loader" in err and "fix:" in err
    (tmp_path / "broken.json").write_text("{")
    rc, _, err = _cli(capsys, "inspect", tmp_path / "broken.json")
    assert rc == 2 and "readable JSON" in err


def test_inspect_fits_100_columns_unless_wide(saved, capsys):
    args = ["inspect", saved["root"] / "ckpt", "--data", saved["data"], "--against", saved["root"] / "current.json"]
    rc, out, _ = _cli(capsys, *args)
    assert rc == 1  # the current run has another loader seed: refused
    assert max(map(len, out.splitlines())) <= 100
    assert "data_stream" in out and "refused" in out and "RNG: torch CPU" in out
    rc, wide, _ = _cli(capsys, *args, "--wide")
    assert rc == 1 and max(map(len, wide.splitlines())) > 100


# -- demo --quiet ----------------------------------------------------------------------------------
def test_demo_quiet_corpus_build_shows_no_bar(tmp_path, monkeypatch, capsys):
    import tqdm.auto

    from resumable_data.demo import build_stdlib_corpus

    seen = []
    real = tqdm.auto.tqdm

    def recording(*a, **kw):
        seen.append(kw.get("disable"))
        return real(*a, **kw)

    monkeypatch.setattr(tqdm.auto, "tqdm", recording)
    version = build_stdlib_corpus(tmp_path / "corpus", max_files=20, quiet=True)
    assert version.num_records == 20 and seen == [True]
    assert capsys.readouterr().err == ""


# -- rd.latest_checkpoint / rd.resume_or_start ------------------------------------------------------
def test_latest_checkpoint_and_resume_or_start(tmp_path):
    def state():
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        return rd.TrainingState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))

    root = tmp_path / "ckpt"
    assert rd.latest_checkpoint(root) is None and rd.list_checkpoints(root) == []
    fresh = state()
    assert rd.resume_or_start(root, fresh) == 0
    s = state()
    for step in (5, 10):
        with torch.no_grad():
            s.model.weight.add_(1.0)
        rd.save_checkpoint(root, s, step=step)
    (root / "step-000000000099").mkdir()  # an interrupted save: no COMMITTED marker
    assert rd.latest_checkpoint(root).name == "step-000000000010"
    assert [p.name for p in rd.list_checkpoints(root)] == ["step-000000000005", "step-000000000010"]
    target = state()
    assert rd.resume_or_start(root, target) == 10
    assert torch.equal(target.model.weight, s.model.weight)
    with pytest.raises(rd.ConfigError, match="directory"):
        rd.latest_checkpoint(root / "step-000000000010" / "COMMITTED")
    with pytest.raises(rd.ConfigError, match="directory"):
        rd.latest_checkpoint(42)


READ_UNIT_KW = dict(batch_size=8, shuffle=True, seed=5, shuffle_window=64, window_blocks=rd.WindowBlocks.READ_UNITS)


def _read_unit_state(data: Path, path: Path) -> dict:
    """Pin ``data``, run a read-unit window loader over it for 5 batches, write its state to ``path``."""
    rd.pin(data)
    loader = rd.DataLoader(rd.ArrowShards(data), **READ_UNIT_KW)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    path.write_text(json.dumps(state))
    return state


def test_inspect_a_read_unit_window_state_needs_and_uses_the_data(tmp_path, capsys):
    """A window shuffle over read units is a function of the files' unit layout: without --data
    inspect says so; with it, the predicted record ids are the ones a resumed loader delivers."""
    data = _shards(tmp_path / "data", 300)
    state = _read_unit_state(data, tmp_path / "loader.json")
    rc, out, _ = _cli(capsys, "inspect", tmp_path / "loader.json", "--wide")
    assert rc == 0 and "a window shuffle over read units" in out and "pass --data DIR to resolve its records" in out, out
    rc, out, _ = _cli(capsys, "inspect", tmp_path / "loader.json", "--data", data, "--records", "100")
    assert rc == 0
    resumed = rd.DataLoader(rd.ArrowShards(data), **READ_UNIT_KW)
    resumed.load_state_dict(state)
    ids = json.loads(out.split("next record ids:", 1)[1].split("\n", 1)[0].strip())
    assert ids == next(iter(resumed))["id"].tolist()


@pytest.mark.parametrize("other_rows", [300, 200, 400])
def test_inspect_a_read_unit_window_state_against_another_version_resolves_no_records(tmp_path, capsys, other_rows):
    """--data of another version has other units (and maybe other records): the record ids
    predicted from it are not the run's, so inspect names the mismatch and predicts none."""
    data, other = _shards(tmp_path / "data", 300), tmp_path / "other"
    rd.write_arrow_shards(pa.table({"id": pa.array(range(other_rows), pa.int64()),
                                    "x": pa.array(range(other_rows), pa.int32())}), other, num_shards=3)
    rd.pin(other)
    _read_unit_state(data, tmp_path / "loader.json")
    rc, out, err = _cli(capsys, "inspect", tmp_path / "loader.json", "--data", other, "--wide")
    assert rc == 1 and "MISMATCH" in out, (out, err)
    assert "next record ids" not in out and "not resolved" in out, out
    assert "window 64 over read units" in out


def test_check_resume_checks_the_window_over_read_units(tmp_path, capsys, monkeypatch):
    data = _shards(tmp_path / "data", 300)
    rd.pin(data)
    built, real = [], rd.DataLoader

    def spy(*a, **kw):
        built.append(kw.get("window_blocks"))
        return real(*a, **kw)

    monkeypatch.setattr(rd, "DataLoader", spy)
    rc, out, _ = _cli(capsys, "check-resume", data, "--batch-size", "8", "--shuffle", "--window", "64",
                      "--window-blocks", "read_units", "--steps", "8", "--interrupts", "2", "--workers", "0",
                      "--world-sizes", "1,2")
    assert rc == 0 and "window 64 over read units" in out and "bit-exact" in out, out
    assert built and set(built) == {"read_units"}  # every loader the check built reads the unit window
    rc, _, err = _cli(capsys, "check-resume", data, "--window-blocks", "read_units", "--steps", "4")
    assert rc == 2 and "--window-blocks" in err and "--window N" in err, err


def test_check_resume_takes_a_folder_pinned_into_the_cache_and_writes_nothing_into_it(tmp_path, capsys):
    """A folder rd.ArrowShards pinned into $RD_CACHE_DIR (a save_to_disk folder, a read-only one) is
    pinned: check-resume runs on it without --pin, and the refusal's no-write fix works as written."""
    data = _shards(tmp_path / "data")
    rc, _, err = _cli(capsys, "check-resume", data, "--steps", "4", "--interrupts", "1")
    assert rc == 2 and "save='cache'" in err
    fix = err.split('python -c "')[1].split('"')[0]
    exec(fix, {})  # the fix, as printed
    before = sorted(p.name for p in data.iterdir())
    rc, out, _ = _cli(capsys, "check-resume", data, "--batch-size", "8", "--shuffle", "--steps", "6",
                      "--interrupts", "2", "--workers", "0")
    assert rc == 0 and "bit-exact" in out
    assert sorted(p.name for p in data.iterdir()) == before and not (data / ".rd-manifest.json").exists()


def test_inspect_an_unpinned_dataset_folder_says_how_to_pin_and_the_fix_works(tmp_path, capsys, monkeypatch):
    """``inspect DIR`` on a folder of shards nothing pinned said "expected at least one complete
    checkpoint"; it says what the folder holds and how to pin it, and a folder pinned into the cache
    (the fix that writes nothing into it) is then inspected as a dataset, its files unchanged."""
    import subprocess

    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))
    data = _shards(tmp_path / "data")
    before = sorted(p.name for p in data.iterdir())
    rc, _, err = _cli(capsys, "inspect", data)
    assert rc == 2 and "4 shard file(s) that nothing pinned" in err and f"resumable-data pin {data}" in err
    fix = err.split("or without writing into it: ", 1)[1].strip()
    assert fix.startswith("python -c ")
    subprocess.run(fix.replace("python", sys.executable, 1), shell=True, check=True, cwd=tmp_path, timeout=120,
                   env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    rc, out, _ = _cli(capsys, "inspect", data)
    assert rc == 0 and "records:               200 in 4 shard(s)" in out
    assert sorted(p.name for p in data.iterdir()) == before


def test_a_closed_pipe_ends_the_command_without_a_traceback(saved, tmp_path):
    """``resumable-data inspect ... | head -1``: the reader closing the pipe is exit 141, not a
    ``BrokenPipeError`` traceback."""
    import os
    import subprocess

    root = Path(__file__).parents[2]
    script = ("import sys; from resumable_data.cli import main; "
              f"sys.exit(main(['inspect', {str(saved['root'] / 'loader.json')!r}, '--wide']))")
    read, write = os.pipe()
    os.close(read)  # nobody reads: the first flush fails
    proc = subprocess.run([sys.executable, "-c", script], stdout=write, stderr=subprocess.PIPE, text=True,
                          cwd=root, timeout=120, env={**os.environ, "PYTHONPATH": str(root)})
    os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr


# -- paths the operating system refuses, Ctrl-C --------------------------------------------------
@pytest.mark.parametrize("argv", [["inspect", "{long}"], ["pin", "{long}"], ["check-resume", "{long}"],
                                  ["demo", "--data", "{long}"]])
def test_a_path_too_long_for_the_os_is_a_message_naming_the_argument(saved, capsys, argv):
    long = "a" * 300  # one name over NAME_MAX (255): os.stat raises ENAMETOOLONG, not "not found"
    argv = [a.format(long=long, ckpt=saved["root"] / "ckpt") for a in argv]
    rc, out, err = _cli(capsys, *argv)
    flag = next((a for a in argv if a.startswith("--")), "checkpoint" if argv[0] == "inspect" else "data")
    assert rc == 2 and out == ""
    assert err.startswith(f"resumable-data {argv[0]}: {flag}={repr(long)[:197]}...: expected a path the operating system accepts "
                          "(File name too long); fix: shorten it"), err
    assert err.count("\n") == 1


def test_ctrl_c_is_a_short_message_and_exit_130(tmp_path, capsys, monkeypatch):
    import resumable_data.cli_pin as cli_pin

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(COMMANDS, "pin", COMMANDS["pin"].__class__("pin", "", cli_pin.configure, interrupted))
    rc, out, err = _cli(capsys, "pin", tmp_path)
    assert (rc, out, err) == (130, "", "resumable-data pin: interrupted (Ctrl-C)\n")

    def io_error(args):
        raise OSError(5, "Input/output error")  # a failed read names no path

    monkeypatch.setitem(COMMANDS, "pin", COMMANDS["pin"].__class__("pin", "", cli_pin.configure, io_error))
    rc, out, err = _cli(capsys, "pin", tmp_path)
    assert (rc, out) == (2, "") and err == ("resumable-data pin: the operating system refused a read or write "
                                            "(Input/output error); fix: check the paths passed (ls -l)\n")


@pytest.mark.parametrize("flags, flag, value, expected", [
    (["--packing-seq-len", "0", "--tokens", "x"], "--packing-seq-len", "0", "an integer in [2, 16777216]"),
    (["--packing-seq-len", "8", "--tokens", "x", "--packing-window", "0"], "--packing-window", "0",
     "an integer in [1, 16777216]"),
    (["--shuffle", "--window", "-5"], "--window", "-5", "an integer in [1, 9223372036854775807]"),
    (["--accumulation-steps", "0"], "--accumulation-steps", "0", "an integer in [1, 1048576]"),
    (["--seed", "-1"], "--seed", "-1", "an integer in [0, 18446744073709551615]"),
    (["--batch-size", str(2**40)], "--batch-size", str(2**40), "an integer in [1, 1073741824]"),
    (["--workers", "0,99999"], "--workers", "99999", "an integer in [0, 1024]"),
])
def test_check_resume_names_the_option_not_the_library_parameter(tmp_path, capsys, flags, flag, value, expected):
    """An option the loader refuses is named as typed (``--packing-seq-len``, not ``seq_len``), with
    a fix that works on the command line."""
    data = _shards(tmp_path / "data")
    rd.write_arrow_shards(pa.table({"x": pa.array([[1, 2, 3]] * 40, pa.list_(pa.int32()))}), tmp_path / "tok")
    rd.pin(data)
    rd.pin(tmp_path / "tok")
    where = tmp_path / ("tok" if "--tokens" in flags else "data")
    rc, out, err = _cli(capsys, "check-resume", where, "--steps", "3", "--interrupts", "1", *flags)
    lo, hi = expected[len("an integer in ["):-1].split(", ")
    assert (rc, err) == (2, f"resumable-data check-resume: {flag}={value}: expected {expected}; "
                            f"fix: pass {flag} N with {lo} <= N <= {hi}\n")
