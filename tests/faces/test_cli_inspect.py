"""``resumable-data inspect``: the compatibility table against the current run's metadata
(``--against``, ``--label``) and the dataset check's depth (``--verify size|cached|content``), driven through
the CLI's ``main`` (and once as a subprocess), asserting table rows and exit codes."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.cli import main

sys.path.insert(0, str(Path(__file__).parents[1] / "checkpoint"))
import _train as T  # noqa: E402

CATEGORIES = ["recovery label", "dataset", "data_stream", "sample_seeding", "layout", "model_config", "architecture", "weights",
              "feature_schema", "optimizer", "scheduler", "scaler", "ema", "callbacks", "software",
              "transition_rule"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A checkpoint taken mid-window (step 14) and the metadata of an identically built current run."""
    root = tmp_path_factory.mktemp("inspect")
    T.write_data(root / "data")
    o = T.build(root / "data", root / "m.jsonl")
    T.train(o, 14)
    rd.save_checkpoint(root / "ckpt", o.state)
    same = T.build(root / "data", root / "m2.jsonl", run_id="current", seed=3)
    return {"root": root, "data": root / "data", "ckpt": root / "ckpt", "same": same.state.meta().to_dict()}


def _current(run, name, meta=None, **build):
    """Write the current run's metadata (``TrainingState.meta().to_dict()``) to a JSON file."""
    if meta is None:
        o = T.build(run["data"], run["root"] / f"m-{name}.jsonl", run_id="current", seed=3, **build)
        meta = o.state.meta().to_dict()
    p = run["root"] / f"{name}.json"
    p.write_text(json.dumps(meta))
    return p


def _inspect(capsys, *argv):
    rc = main(["inspect", *map(str, argv), "--wide"])  # full cells; the 100-column layout: test_cli.py
    return rc, capsys.readouterr().out


def _table(out):
    """{category: (verdict, saved, current, difference)} from the compatibility table."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("compatibility:"))
    assert re.split(r"\s{2,}", lines[start + 1].strip()) == ["category", "verdict", "saved", "current", "difference"]
    rows = {}
    for line in lines[start + 3:]:
        if not line.startswith("  ") or line.startswith("  refused and warned") or line.startswith("  - "):
            break
        cells = re.split(r"\s{2,}", line.strip())
        assert len(cells) == 5, line
        rows[cells[0]] = tuple(cells[1:])
    assert list(rows) == CATEGORIES
    return rows


def test_identical_current_run_is_ok_in_every_row(run, capsys):
    rc, out = _inspect(capsys, run["ckpt"], "--against", _current(run, "same", run["same"]))
    assert rc == 0
    assert "compatibility:         allowed under label='faithful_continuation'" in out and "0 refused" in out
    rows = _table(out)
    assert all(v[0] == "ok" and v[3] == "-" for v in rows.values()), rows
    assert rows["data_stream"][1:3] == ("seed 7, global, batch 4, accum 4, unpacked",) * 2
    assert rows["sample_seeding"][1:3] == ("seed_per_sample 'eager'",) * 2
    assert rows["model_config"][1] == '{"dropout":0.3,"hidden":24}'
    assert rows["recovery label"][1:3] == ("faithful_continuation (saved run)", "faithful_continuation (resume as)")
    assert "refused and warned differences" not in out


def test_refused_rows_name_saved_and_current_and_exit_1(run, capsys):
    rc, out = _inspect(capsys, run["ckpt"], "--against", _current(run, "seed-config", loader_seed=8),
                       "--label", "faithful_continuation")
    assert rc == 1
    rows = _table(out)
    assert rows["data_stream"] == ("refused", "7", "8", "data.plan.seed")
    assert {k for k, v in rows.items() if v[0] != "ok"} == {"data_stream"}
    assert "- [error] data.plan.seed: saved 7 vs current 8 (data_stream); fix: build the loader as saved" in out
    # a model with another width: config, weights and EMA refused, the rest untouched
    rc, out = _inspect(capsys, run["ckpt"], "--against", _current(run, "wider", hidden=32))
    rows = _table(out)
    assert rc == 1
    assert rows["model_config"] == ("refused", "24", "32", "model.config.hidden")
    assert rows["weights"][0] == "refused" and rows["weights"][3].endswith("(+6 more)")
    assert rows["ema"][0] == "refused" and rows["dataset"][0] == "ok" and rows["optimizer"][0] == "ok"


def test_the_label_decides_refused_or_allowed(run, capsys):
    current = _current(run, "lr", lr=1e-3)
    rc, out = _inspect(capsys, run["ckpt"], "--against", current)
    assert rc == 1
    assert _table(out)["optimizer"] == ("refused", "0.003", "0.001", "optimizer.param_groups.0.base_lr (+1 more)")
    assert "fix: build the optimizer as saved, or resume with label='optimizer_reset'" in out
    rc, out = _inspect(capsys, run["ckpt"], "--against", current, "--label", "optimizer_reset")
    assert rc == 0
    rows = _table(out)
    assert rows["optimizer"][0] == "allowed" and rows["recovery label"][0:3] == (
        "allowed", "faithful_continuation (saved run)", "optimizer_reset (resume as)")


def test_software_patch_is_a_warning_minor_is_refused(run, capsys):
    meta = copy.deepcopy(run["same"])
    major, minor, patch = meta["software"]["torch"].split(".")[:3]
    meta["software"]["torch"] = f"{major}.{minor}.{int(patch) + 1}"
    rc, out = _inspect(capsys, run["ckpt"], "--against", _current(run, "patch", meta))
    assert rc == 0 and _table(out)["software"][0] == "warning"
    assert "- [warning] software.torch:" in out and "install the saved versions" in out
    meta["software"]["torch"] = f"{major}.{int(minor) + 1}.0"
    rc, out = _inspect(capsys, run["ckpt"], "--against", _current(run, "minor", meta))
    assert rc == 1 and _table(out)["software"][0] == "refused"


def test_against_a_checkpoint_directory_and_unreadable_input(run, capsys):
    rc, out = _inspect(capsys, run["ckpt"], "--against", run["ckpt"])
    assert rc == 0 and all(v[0] == "ok" for v in _table(out).values())
    bad = run["root"] / "bad.json"
    bad.write_text("{not json")
    rc = main(["inspect", str(run["ckpt"]), "--against", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and "--against" in err and "fix: write it with json.dump(state.meta().to_dict(), f)" in err
    meta = dict(run["same"], schema_version=9)
    rc = main(["inspect", str(run["ckpt"]), "--against", str(_current(run, "v9", meta))])
    assert rc == 2 and "schema_version" in capsys.readouterr().err


@pytest.mark.parametrize("what", ["empty folder", "dataset folder", "loader state", "unreadable file", "missing"])
def test_against_anything_but_a_run_s_metadata_names_against_and_the_fix(run, capsys, what):
    """Each refusal of ``--against`` names it and says what it takes; an I/O error is one of them.
    The checkpoint reader's own fix ("load another checkpoint") is not repeated inside it."""
    if what == "unreadable file" and not Path("/proc/self/mem").exists():
        pytest.skip("needs /proc/self/mem (Linux): a regular file whose read fails with EIO")
    path = {"empty folder": run["root"] / "empty", "dataset folder": run["data"],
            "loader state": run["root"] / "loader-state.json", "unreadable file": Path("/proc/self/mem"),
            "missing": run["root"] / "missing.json"}[what]
    (run["root"] / "empty").mkdir(exist_ok=True)
    (run["root"] / "loader-state.json").write_text(json.dumps({"format": "resumable_data.loader"}))
    rc = main(["inspect", str(run["ckpt"]), "--against", str(path)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"resumable-data inspect: --against={str(path)!r}: expected the current run's metadata "
                          "(a JSON file of TrainingState.meta().to_dict(), or a checkpoint directory; "), err
    assert err.endswith("fix: write it with json.dump(state.meta().to_dict(), f), or pass a checkpoint directory\n")
    assert err.count("fix:") == 1, err
    if what == "missing":
        assert "checkpoint directory; no such file or directory); fix:" in err


@pytest.mark.parametrize("mode", [False, "lazy"], ids=["off", "lazy"])
def test_seeding_mode_difference_is_refused_unless_the_stream_starts_afresh(run, capsys, mode):
    """A checkpoint of an eager run against a current off / lazy loader: the sample_seeding row is
    refused (exit 1) under the labels that restore the loader, noted under warm_start and a warning
    under data_change (exit 0: both start a fresh stream)."""
    current = "off" if mode is False else "lazy"
    path = _current(run, f"seeding-{current}", seed_per_sample=mode)
    rc, out = _inspect(capsys, run["ckpt"], "--against", path, "--label", "warm_start")
    assert rc == 0 and _table(out)["sample_seeding"][0] == "allowed", _table(out)
    for label in ("faithful_continuation", "elastic_reshard", "optimizer_reset"):
        rc, out = _inspect(capsys, run["ckpt"], "--against", path, "--label", label)
        assert rc == 1, label
        rows = _table(out)
        assert rows["sample_seeding"] == ("refused", "'eager'", repr(current), "data.seed_per_sample")
        assert {k for k, v in rows.items() if v[0] != "ok"} - {"recovery label"} == {"sample_seeding"}, rows
        assert (f"- [error] data.seed_per_sample: saved 'eager' vs current {current!r} (sample_seeding); fix: build "
                "the loader with seed_per_sample=rd.SampleSeeding.EAGER (the saved mode") in out
        assert "or resume with label='data_change'" in out
    rc, out = _inspect(capsys, run["ckpt"], "--against", path, "--label", "data_change")
    assert rc == 0 and _table(out)["sample_seeding"][0] == "warning"
    assert f"- [warning] data.seed_per_sample: saved 'eager' vs current {current!r}" in out


def test_metadata_without_the_seeding_mode_compares_clean(run, capsys):
    """Metadata written before contract v2 has no data.seed_per_sample: the row says so and is ok."""
    meta = copy.deepcopy(run["same"])
    del meta["data"]["seed_per_sample"]
    rc, out = _inspect(capsys, run["ckpt"], "--against", _current(run, "no-mode", meta))
    assert rc == 0
    rows = _table(out)
    assert all(v[0] == "ok" for v in rows.values()), rows
    assert rows["sample_seeding"] == ("ok", "seed_per_sample 'eager'", "not recorded (older metadata)", "-")


@pytest.mark.parametrize("bad", ["sometimes", True])
def test_forged_seeding_mode_exits_2_naming_it(run, capsys, bad):
    meta = copy.deepcopy(run["same"])
    meta["data"]["seed_per_sample"] = bad
    rc = main(["inspect", str(run["ckpt"]), "--against", str(_current(run, "forged-mode", meta))])
    captured = capsys.readouterr()
    assert rc == 2 and "compatibility:" not in captured.out
    assert f"current meta.data.seed_per_sample={bad!r}: expected one of ['eager', 'lazy', 'off']" in captured.err


def test_as_a_subprocess_refused_exits_1(run):
    current = _current(run, "sub", loader_seed=8)
    r = subprocess.run([sys.executable, "-m", "resumable_data.cli", "inspect", str(run["ckpt"]), "--against",
                        str(current)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert re.search(r"^  data_stream\s+refused\s+7\s+8\s+data\.plan\.seed$", r.stdout, re.M)


def test_same_size_content_change_is_caught_by_verify_cached_and_content(run, tmp_path, capsys, monkeypatch):
    # the same records with one token changed, written the same way: every shard keeps its size,
    # row count and schema; the pinned manifest (content hashes) is the original one
    edited = tmp_path / "data"
    shutil.copytree(run["data"], edited)
    table = rd.ArrowShards(run["data"]).take(list(range(T.N_RECORDS)))
    tokens = table.column("tokens").to_pylist()
    tokens[0][0] = tokens[0][0] % (T.VOCAB - 1) + 1 if tokens[0][0] != 1 else 2
    table = table.set_column(table.schema.get_field_index("tokens"), "tokens",
                             pa.array(tokens, type=table.schema.field("tokens").type))
    rewritten = tmp_path / "rewritten"
    rd.write_arrow_shards(table, rewritten, num_shards=3)
    changed = 0
    for f in sorted(rewritten.glob("*.arrow")):
        assert f.stat().st_size == (edited / f.name).stat().st_size, f.name
        changed += f.read_bytes() != (edited / f.name).read_bytes()
        shutil.copy(f, edited / f.name)
    assert changed == 1
    rc, out = _inspect(capsys, run["ckpt"], "--data", edited)
    assert rc == 0
    assert re.search(r"^dataset: +matches the pinned version \w+ \(158 records; sizes, rows and schema match; "
                     r"content not checked: --verify cached or content\)$", out, re.M)
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "rd-cache"))  # a cache that saw neither folder
    rc, out = _inspect(capsys, run["ckpt"], "--data", run["data"], "--verify", "cached")
    assert rc == 0 and "content verified" in out, out
    rc, out = _inspect(capsys, run["ckpt"], "--data", edited, "--verify", "cached")
    assert rc == 1, out
    assert re.search(r"^dataset: +MISMATCH \(cached check\): files differ from the pinned manifest: ", out, re.M)
    rc, out = _inspect(capsys, run["ckpt"], "--data", edited, "--verify", "content")
    assert rc == 1
    assert re.search(r"^dataset: +MISMATCH \(content check\): files differ from the pinned manifest: ", out, re.M)
    assert re.search(r"shard-0000\d\.arrow", out.split("MISMATCH", 1)[1].split("\n\n")[0])
    rc, out = _inspect(capsys, run["ckpt"], "--data", run["data"], "--verify", "content")
    assert rc == 0 and "content verified: every shard's hash matches" in out


@pytest.mark.parametrize("argv, named", [
    (["--against", "x.json"], "--against"), (["--step", "3"], "--step"), (["--verify", "content"], "--verify"),
    (["--label", "warm_start"], "--label"), (["--data", "elsewhere"], "--data"),
])
def test_options_a_dataset_folder_does_not_use_are_refused_not_ignored(run, capsys, argv, named):
    """``inspect DATASET --against X`` printed the dataset report and exit 0: the option was ignored."""
    rc = main(["inspect", str(run["data"]), *argv])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.startswith(f"resumable-data inspect: {named}="), err
    assert "when inspecting a pinned dataset folder" in err and f"fix: drop {named}, or pass a checkpoint directory" in err
    assert main(["inspect", str(run["data"])]) == 0  # the fix, followed


def test_options_a_loader_state_file_does_not_use_are_refused(run, capsys, tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"format": "resumable_data.loader"}))
    rc = main(["inspect", str(state), "--against", str(run["ckpt"])])
    _, err = capsys.readouterr()
    assert rc == 2 and err.startswith("resumable-data inspect: --against=") and "a loader state file" in err


def test_wide_prints_the_inventory_cells_whole(run, capsys):
    # README: "in 100 columns (--wide: full tables)"; the inventory under --wide clipped every cell
    # at 48 characters ("data cursor, sampler, shuffle, augmentation keys" lost its record ids,
    # the counters their values) while the default 100-column blocks printed them whole
    inv = rd.Inventory.from_dict(json.loads((rd.latest_checkpoint(run["ckpt"]) / "inventory.json").read_text()))
    longest = max((getattr(e, f) for e in inv.entries for f in ("owner", "serialization", "restore", "value")), key=len)
    assert len(longest) > 48
    rc, out = _inspect(capsys, run["ckpt"])
    assert rc == 0
    inventory = out.split("\ninventory:\n", 1)[1]
    assert longest in inventory and "…" not in inventory
    assert all(line == line.rstrip() for line in inventory.splitlines())
    assert "…" in str(inv)  # the Python str() keeps its 48-character cells


@pytest.mark.parametrize("argv, named, needs", [
    (["--verify", "content"], "--verify", "--data"), (["--label", "warm_start"], "--label", "--against"),
])
def test_an_option_that_applies_only_beside_another_is_refused_alone(run, capsys, argv, named, needs):
    # attack43: 'inspect CKPT --verify content' (no --data) printed the report, exit 0: --verify ignored
    rc = main(["inspect", str(run["ckpt"]), *argv])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.startswith(f"resumable-data inspect: {named}="), err
    assert f"only beside {needs}" in err and f"fix: add {needs} " in err
    follow = ["--data", str(run["data"])] if needs == "--data" else ["--against", str(_current(run, "same", run["same"]))]
    assert main(["inspect", str(run["ckpt"]), *argv, *follow]) in (0, 1)  # the fix, followed: a report
    assert capsys.readouterr().out.startswith("checkpoint:")


def test_a_step_directory_with_another_step_is_refused(run, capsys):
    # attack43: 'inspect CKPT/step-N --step M' showed step N unsaid (and rd.load_checkpoint loaded it)
    step_dir = rd.latest_checkpoint(run["ckpt"])
    rc = main(["inspect", str(step_dir), "--step", "3"])
    _, err = capsys.readouterr()
    assert rc == 2 and err.startswith("resumable-data inspect: step=3: expected None or the step of the checkpoint"), err
    assert f"pass the parent directory with step=3 ({str(run['ckpt'])!r})" in err
