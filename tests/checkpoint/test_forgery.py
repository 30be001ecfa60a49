"""Forged checkpoints that pass every integrity check: each edited file is re-hashed into the
``COMMITTED`` marker (as the store computes it: size + xxh3-128) and, for state edits, the
state's own oracles are recomputed from the edited tree, so only the loader's validation can
refuse. Every refusal is an ``rd.ResumableDataError`` and leaves every training object (model,
gradients, modes, optimizer, scheduler, scaler, EMA, generators, loader, callback, metric log,
lineage) and the checkpoint folder's files exactly as they were (``test_restore.digest``).

Cases: generator states out of range (NumPy's legacy ``set_state`` does not bound the key
position: 10**6 crashed the process at the next draw), parts of the state dropped (``null``)
while the metadata says they were saved, GradScaler values outside its constructor's ranges,
repeated optimizer groups, ``meta.json`` edited apart from ``state.json`` or taken from another
save, ``inventory.json`` headers, negative progress counts under ``inspect``, and a plain
``Stateful`` whose state has a ``meta`` key of its own (it saved, then never loaded)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import torch
import xxhash

sys.path.insert(0, str(Path(__file__).parent))

import _train as T

import resumable_data as rd
from resumable_data import cli
from resumable_data.checkpoint.codec import encode
from resumable_data.checkpoint.store import TENSORS_METADATA, read_checkpoint
from tests.checkpoint.test_restore import MUTATIONS, digest, mutate, objects, paths
from tests.reliability._counts import count

META_FORMAT = "resumable_data.checkpoint_meta"


@pytest.fixture(scope="module")
def base(data_dir, tmp_path_factory):
    """Two checkpoints of one run: step 6 (mid-window: gradients saved, 2 uncommitted) and step 8."""
    tmp = tmp_path_factory.mktemp("forgery")
    o = objects(data_dir, tmp, "saved")
    T.train(o, total=6)
    o.cb.n = 17
    six = rd.save_checkpoint(tmp / "ckpt", o.state, keep_last=None)
    T.train(o, total=8)
    eight = rd.save_checkpoint(tmp / "other", o.state, keep_last=None)
    return {"tmp": tmp, "data": data_dir, "six": six, "eight": eight, "tree": read_checkpoint(six).tree}


def fresh(base, tmp_path, name="fresh"):
    return objects(base["data"], tmp_path, name, base["tmp"] / "metrics-saved.jsonl", seed=100, run_id="fresh")


def rehash(step: Path) -> None:
    """Re-hash every file into the marker, as ``store._fill`` computes it."""
    mk = json.loads((step / "COMMITTED").read_text())
    for n in mk["files"]:
        b = (step / n).read_bytes()
        mk["files"][n] = {"size": len(b), "xxh3_128": xxhash.xxh3_128_hexdigest(b)}
    (step / "COMMITTED").write_text(json.dumps(mk, sort_keys=True, indent=1) + "\n")


def dump(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, sort_keys=True, indent=1) + "\n")


def forge(src: Path, dest: Path, tree=None, *, oracles_of=None, files=None) -> Path:
    """A copy of the step directory ``src`` with ``tree`` as its state (tensors, state.json and its
    meta.json copy), the oracles recomputed by ``oracles_of`` (a TrainingState), ``files``
    ({name: JSON}) written over, and the marker re-hashed. Returns the step directory."""
    from safetensors.torch import save_file

    shutil.copytree(src, dest)
    if tree is not None:
        if oracles_of is not None:
            tree["oracles"] = {**oracles_of._oracles(tree, None), "next_batch": tree["oracles"]["next_batch"]}
        json_tree, tensors = encode(tree)
        save_file(tensors, str(dest / "tensors.safetensors"), metadata=TENSORS_METADATA)
        dump(dest / "state.json", json_tree)
        meta = json_tree.get("meta")
        dump(dest / "meta.json", meta if isinstance(meta, dict) and meta.get("format") == META_FORMAT else None)
    for name, obj in (files or {}).items():
        dump(dest / name, obj)
    rehash(dest)
    return dest


def folder(p: Path) -> dict:
    return {f.name: f.read_bytes() for f in sorted(p.iterdir())}


def refused(o, ckpt: Path, match: str | None = None) -> rd.ResumableDataError:
    before, files = digest(o), folder(ckpt)
    with pytest.raises(rd.ResumableDataError) as e:
        rd.load_checkpoint(ckpt, o.state)
    after = digest(o)
    assert after == before, [k for k in before if before[k] != after[k]]
    assert folder(ckpt) == files
    if match is not None:
        assert match in str(e.value), str(e.value)
    return e.value


def inspect(*argv: str) -> tuple[int, str]:
    """``resumable-data inspect ...`` in process: (exit status, stderr); any other exception fails."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = cli.main(["inspect", *argv])
    return rc, err.getvalue()


def at(tree, path, value):
    node = tree
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return tree


# -- generators -----------------------------------------------------------------------------------
RNG_CASES = [
    (("numpy", "pos"), 10**6, "rng.numpy.pos"),  # numpy accepted it; the next np.random draw crashed the process
    (("numpy", "pos"), 625, "rng.numpy.pos"),
    (("numpy", "pos"), -1, "rng.numpy.pos"),  # numpy accepted it and drew from memory before the keys
    (("numpy", "has_gauss"), 2, "rng.numpy.has_gauss"),
    (("numpy", "kind"), "PCG64", "rng.numpy.kind"),
    (("numpy", "cached_gaussian"), "0.5", "rng.numpy.cached_gaussian"),
    (("python", "gauss"), {"a": 1}, "rng.python.gauss"),  # random.gauss() returned the dict
    (("python", "gauss"), "x", "rng.python.gauss"),
    (("python", "version"), 2, "rng.python.version"),
    (("python", "state", 624), 700, "rng.python.state[624]"),
    (("python", "state", 0), 1 << 40, "rng.python.state[0]"),
]


@pytest.mark.parametrize("path,value,field", RNG_CASES, ids=[f"{'.'.join(map(str, c[0]))}={c[1]!r}" for c in RNG_CASES])
def test_generator_states_out_of_range_are_refused(base, tmp_path, path, value, field):
    o = fresh(base, tmp_path)
    tree = at(read_checkpoint(base["six"]).tree, ("rng", *path), value)
    ckpt = forge(base["six"], tmp_path / "c" / base["six"].name, tree, oracles_of=o.state)
    refused(o, ckpt, field)
    with pytest.raises(rd.CheckpointError, match=field.replace("[", r"\[").replace("]", r"\]")):
        rd.checkpoint.rng.restore(tree["rng"])  # the DCP layout's route restores through it too
    count("forged_checkpoint_rng", 1)


# -- parts dropped while the metadata says they were saved ----------------------------------------
@pytest.mark.parametrize(
    "key", ["model", "optimizer", "scheduler", "scaler", "ema", "gradients", "loader", "callbacks"]
)
def test_a_saved_part_set_to_null_is_refused(base, tmp_path, key):
    """``null`` restored nothing: the fresh object's values went on under a faithful label (gradients:
    the loader skipped the window's microbatches and their gradients were lost)."""
    o = fresh(base, tmp_path)
    tree = read_checkpoint(base["six"]).tree
    tree[key] = {} if key == "callbacks" else None
    ckpt = forge(base["six"], tmp_path / "c" / base["six"].name, tree, oracles_of=o.state)
    refused(o, ckpt, key)


# -- GradScaler values ----------------------------------------------------------------------------
SCALER_CASES = [
    ("scale", 0.0),
    ("scale", -8.0),
    ("scale", float("nan")),
    ("scale", float("inf")),
    ("growth_factor", 1.0),
    ("backoff_factor", 1.5),
    ("backoff_factor", 0.0),
    ("growth_interval", 2.5),  # accepted; GradScaler.update() raised at the next step
    ("growth_interval", 0),
    ("_growth_tracker", -1),
]


@pytest.mark.parametrize("key,value", SCALER_CASES)
def test_scaler_values_outside_its_constructors_ranges_are_refused(base, tmp_path, key, value):
    o = fresh(base, tmp_path)
    tree = at(read_checkpoint(base["six"]).tree, ("scaler", key), value)
    ckpt = forge(base["six"], tmp_path / "c" / base["six"].name, tree, oracles_of=o.state)
    refused(o, ckpt, f"scaler.{key}")


# -- optimizer groups -----------------------------------------------------------------------------
def test_a_repeated_optimizer_group_or_parameter_is_refused(base, tmp_path):
    """Groups are matched by their set of names: a repeated group won with its own settings (lr 5.0)."""
    o = fresh(base, tmp_path)
    tree = read_checkpoint(base["six"]).tree
    tree["optimizer"]["param_groups"].append({**tree["optimizer"]["param_groups"][0], "lr": 5.0})
    refused(o, forge(base["six"], tmp_path / "a" / base["six"].name, tree, oracles_of=o.state), "listed twice")
    tree = read_checkpoint(base["six"]).tree
    g = tree["optimizer"]["param_groups"][1]
    g["params"] = g["params"] + g["params"][:1]
    refused(o, forge(base["six"], tmp_path / "b" / base["six"].name, tree, oracles_of=o.state), "listed twice")


# -- meta.json: a copy of state.json's meta, from the same save -----------------------------------
def test_meta_json_edited_apart_from_the_state_is_refused_by_load_and_inspect(base, tmp_path):
    """inspect, --against and LoadedCheckpoint.meta read meta.json, the restore reads state.json's
    meta: an edit of one showed another checkpoint than the one restored."""
    o = fresh(base, tmp_path)
    meta = json.loads((base["six"] / "meta.json").read_text())
    cases = {
        "label": {**meta, "recovery_label": "warm_start"},
        "run": {**meta, "run_id": "someone-else"},
        "status": {**meta, "status": {**meta["status"], "next_step": 1000}},
        "null": None,
        "other-save": json.loads((base["eight"] / "meta.json").read_text()),
    }
    for name, forged in cases.items():
        ckpt = forge(base["six"], tmp_path / name / base["six"].name, files={"meta.json": forged})
        err = refused(o, ckpt)
        assert "meta.json" in str(err), (name, str(err))
        rc, msg = inspect(str(ckpt))
        assert rc == 2 and "meta.json" in msg and "Traceback" not in msg, (name, rc, msg)


def test_files_of_another_save_put_together_are_refused(base, tmp_path):
    """state.json, tensors and meta.json of step 8 under step 6's marker (re-hashed): the ids differ."""
    o = fresh(base, tmp_path)
    ckpt = tmp_path / "mixed" / base["six"].name
    shutil.copytree(base["six"], ckpt)
    for n in ("state.json", "meta.json", "tensors.safetensors", "inventory.json"):
        shutil.copy(base["eight"] / n, ckpt / n)
    rehash(ckpt)
    refused(o, ckpt, "checkpoint_id")
    rc, msg = inspect(str(ckpt))
    assert rc == 2 and "checkpoint_id" in msg


def test_meta_json_sweep_is_refused_everywhere(base, tmp_path):
    """Every key path of meta.json to depth 2 (status: 3) x every mutation, meta.json alone re-hashed:
    load refuses and changes nothing; inspect (alone and --against the run) exits 2, no traceback."""
    o = fresh(base, tmp_path)
    meta = json.loads((base["six"] / "meta.json").read_text())
    current = tmp_path / "current.json"
    current.write_text(json.dumps(o.state.meta().to_dict()))
    before = digest(o)
    n = 0
    for i, path in enumerate(paths(meta)):
        if len(path) > (3 if path[:1] == ("status",) else 2):
            continue
        for how in MUTATIONS[:-1]:  # nested_deep: test_restore's sweep (state.json) covers it
            bad = mutate(meta, path, how)
            if bad is None or bad == meta:
                continue
            n += 1
            ckpt = forge(base["six"], tmp_path / f"c{i}{how}" / base["six"].name, files={"meta.json": bad})
            with pytest.raises(rd.ResumableDataError):
                rd.load_checkpoint(ckpt, o.state)
            for argv in ([str(ckpt)], [str(ckpt), "--against", str(current)]):
                rc, msg = inspect(*argv)
                assert rc == 2 and "Traceback" not in msg, (path, how, argv, rc, msg)
            shutil.rmtree(ckpt.parent)
    assert digest(o) == before
    assert n > 100
    count("forged_meta_json", n)


# -- headers: format and schema_version -----------------------------------------------------------
HEADERS = [
    ("schema_version", lambda v: True),
    ("schema_version", lambda v: 1.0),
    ("schema_version", lambda v: "1"),
    ("schema_version", lambda v: 10**100),
    ("schema_version", lambda v: v + 1),  # a version newer than this reader
    ("schema_version", lambda v: None),
    ("format", lambda v: v + " "),
    ("format", lambda v: v.upper()),
    ("format", lambda v: None),
]
HEADER_IDS = ["true", "1.0", "'1'", "10**100", "newer", "null", "trailing-space", "upper", "format-null"]


@pytest.mark.parametrize("key,change", HEADERS, ids=HEADER_IDS)
def test_the_inventory_header_is_enforced_at_load(base, tmp_path, key, change):
    o = fresh(base, tmp_path)
    inv = json.loads((base["six"] / "inventory.json").read_text())
    ckpt = forge(
        base["six"], tmp_path / "c" / base["six"].name, files={"inventory.json": {**inv, key: change(inv[key])}}
    )
    refused(o, ckpt, f"inventory['{key}']")


@pytest.mark.parametrize("key,change", HEADERS, ids=HEADER_IDS)
def test_the_state_and_meta_headers_are_enforced_at_load(base, tmp_path, key, change):
    """state.json's header and its meta's (mirrored into meta.json), each forged consistently."""
    o = fresh(base, tmp_path)
    for part in ("state", "meta"):
        tree = read_checkpoint(base["six"]).tree
        node = tree if part == "state" else tree["meta"]
        node[key] = change(node[key])
        refused(o, forge(base["six"], tmp_path / part / base["six"].name, tree), key)


# -- inspect on consistent forgeries of the progress section --------------------------------------
@pytest.mark.parametrize(
    "path,value",
    [
        (("next_step",), -1),  # inspect raised struct.error computing the next step's records
        (("next_step",), 1 << 64),
        (("epoch_base", 0), -1),
        (("epoch_base", 0), 1 << 64),
        (("counters", "attempted_updates"), -5),
        (("accumulation", "uncommitted"), -1),
    ],
)
def test_inspect_refuses_progress_counts_out_of_range(base, tmp_path, path, value):
    tree = read_checkpoint(base["six"]).tree
    at(tree, ("meta", "status", *path), value)
    ckpt = forge(base["six"], tmp_path / "c" / base["six"].name, tree)
    rc, msg = inspect(str(ckpt))
    assert rc == 2 and f"status.{path[0]}" in msg and "Traceback" not in msg, (rc, msg)
    refused(fresh(base, tmp_path), ckpt, f"status.{path[0]}")


# -- a plain Stateful whose state has a "meta" key ------------------------------------------------
class WithMeta:
    def __init__(self, v: float):
        self.w = torch.full((3,), v)
        self.meta = {"note": "user data", "n": 3}

    def state_dict(self):
        return {"meta": self.meta, "w": self.w}

    def load_state_dict(self, sd):
        self.w, self.meta = sd["w"].clone(), dict(sd["meta"])


def test_a_plain_statefuls_own_meta_key_is_state_not_checkpoint_metadata(tmp_path):
    """It was written to meta.json and every load refused the checkpoint ('meta['format']=None')."""
    rd.save_checkpoint(tmp_path, WithMeta(2.0), step=1)
    back = WithMeta(0.0)
    info = rd.load_checkpoint(tmp_path, back)
    assert info.meta is None and torch.equal(back.w, torch.full((3,), 2.0)) and back.meta["note"] == "user data"
    rc, msg = inspect(str(tmp_path))
    assert rc == 0, msg


# -- tensors.safetensors: header and data forged, re-hashed ---------------------------------------
def _small(value: float):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    return rd.TrainingState(model=model, optimizer=opt, run_id="st")


def test_forged_tensor_files_are_refused_or_bit_identical(tmp_path):
    """Byte flips across the whole file (every byte of the header, every 7th of the data),
    truncations, and crafted header lengths: a CheckpointError, or (a flip inside the header's
    free-form metadata) the same tensors loaded."""
    import struct

    step = rd.save_checkpoint(tmp_path / "base", _small(1.5), step=1)
    orig = (step / "tensors.safetensors").read_bytes()
    hlen = struct.unpack("<Q", orig[:8])[0]
    variants = [bytes(orig[:i]) + bytes([orig[i] ^ x]) + orig[i + 1 :] for i in range(8 + hlen) for x in (0x01, 0xFF)]
    variants += [bytes(orig[:i]) + bytes([orig[i] ^ 0x80]) + orig[i + 1 :] for i in range(8 + hlen, len(orig), 7)]
    variants += [orig[:n] for n in range(0, len(orig), 11)]
    variants += [struct.pack("<Q", n) + orig[8:] for n in (0, 1, hlen - 1, hlen + 1, len(orig), 2**63, 2**64 - 1)]
    stats = {"refused": 0, "identical": 0}
    t = _small(-1.0)
    want = [p.detach().clone() for p in _small(1.5).model.parameters()]
    for i, data in enumerate(variants):
        d = tmp_path / "c" / step.name
        shutil.copytree(step, d)
        (d / "tensors.safetensors").write_bytes(data)
        rehash(d)
        before = [p.detach().clone() for p in t.model.parameters()]
        try:
            rd.load_checkpoint(d, t)
        except rd.ResumableDataError:
            stats["refused"] += 1
            assert all(torch.equal(a, b) for a, b in zip(before, t.model.parameters())), i
        else:
            stats["identical"] += 1
            assert all(torch.equal(a, b) for a, b in zip(want, t.model.parameters())), i
            t = _small(-1.0)
        shutil.rmtree(d.parent)
    assert stats["refused"] > len(variants) * 0.9, stats
    count("forged_tensor_files", len(variants))


def test_nan_scaler_scale_in_state_json_is_still_json(base):
    """(guard for the scaler cases above: state.json writes NaN the way json.loads reads it back)"""
    tree = at(read_checkpoint(base["six"]).tree, ("scaler", "scale"), float("nan"))
    assert math.isnan(json.loads(json.dumps(encode(tree)[0]))["scaler"]["scale"])


# -- the DCP layout (TrainingState.state_dict(): one JSON string + tensors) ------------------------
def _dcp(o, change):
    sd = o.state.state_dict()
    tree = json.loads(sd["json"])
    change(tree)
    return {**sd, "json": json.dumps(tree), "tensors": {k: v.detach().clone() for k, v in sd["tensors"].items()}}


@pytest.mark.parametrize(
    "name,change",
    [
        ("lr-string", lambda t: t["optimizer"]["param_groups"][0].update(lr="7")),  # opt.step() raised TypeError
        ("lr-missing", lambda t: t["optimizer"]["param_groups"][0].pop("lr")),
        ("amsgrad-string", lambda t: t["optimizer"]["param_groups"][1].update(amsgrad="yes")),
        ("extra-setting", lambda t: t["optimizer"]["param_groups"][1].update(zz=1)),
        ("repeated-group", lambda t: t["optimizer"]["param_groups"].append(dict(t["optimizer"]["param_groups"][0]))),
        ("stateless-string", lambda t: t["optimizer"].update(stateless="fc1.bias")),
    ],
)
def test_dcp_optimizer_group_settings_are_checked_before_anything_changes(base, tmp_path, name, change):
    """The file layout checked each group's settings against the live optimizer; the DCP layout
    loaded them unchecked (the moments are verified after the apply, the group settings were not)."""
    saved = objects(base["data"], tmp_path, "dcp-saved")
    T.train(saved, total=6)
    forged = _dcp(saved, change)
    o = fresh(base, tmp_path)
    before = digest(o)
    with pytest.raises(rd.ResumableDataError, match="optimizer"):
        o.state.load_state_dict(forged)
    assert digest(o) == before


def test_rng_bytes_outside_0_255_are_refused_not_wrapped():
    """torch.tensor(..., dtype=uint8) wrapped -1 to 255 and 256 to 0 (the DCP layout's generators)."""
    js = rd.checkpoint.rng.to_json(rd.checkpoint.rng.capture())
    for bad in (-1, 256, 1.5, True):
        forged = json.loads(json.dumps(js))
        forged["torch_cpu"][7] = bad
        with pytest.raises(rd.CheckpointError, match=r"rng\.torch_cpu"):
            rd.checkpoint.rng.from_json(forged)
    rd.checkpoint.rng.from_json(js)  # the unmodified state still reads


# -- objects other than a TrainingState -----------------------------------------------------------
def test_a_refused_load_into_a_plain_module_changes_nothing(tmp_path):
    """nn.Module.load_state_dict copies every matching tensor before it reports a size mismatch:
    the refused load left the first layer loaded."""
    a = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 3))
    with torch.no_grad():
        for p in a.parameters():
            p.fill_(7.0)
    rd.save_checkpoint(tmp_path, a, step=1)
    b = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 4)).eval()
    b[0].weight.grad = torch.ones(2, 2)
    before = {k: v.clone() for k, v in b.state_dict().items()}
    with pytest.raises(rd.CheckpointError, match="size mismatch"):
        rd.load_checkpoint(tmp_path, b)
    assert all(torch.equal(v, before[k]) for k, v in b.state_dict().items())
    assert not b.training and torch.equal(b[0].weight.grad, torch.ones(2, 2))
    c = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 3))
    rd.load_checkpoint(tmp_path, c)  # the matching module loads
    assert all(float(p.detach().flatten()[0]) == 7.0 for p in c.parameters())


class Raising:
    """A Stateful whose load_state_dict takes a label and raises a TypeError of its own midway."""

    def __init__(self):
        self.x, self.calls = 0, []

    def state_dict(self):
        return {"x": self.x}

    def load_state_dict(self, sd, label=None):
        self.calls.append(label)
        self.x = sd["x"]
        raise TypeError("a value it refuses")


def test_load_state_dict_is_called_once_and_rolled_back(tmp_path):
    """A TypeError from inside load_state_dict(tree, label=...) made a second call without label."""
    s = Raising()
    s.x = 5
    rd.save_checkpoint(tmp_path, s, step=1)
    t = Raising()
    with pytest.raises(rd.CheckpointError, match="a value it refuses"):
        rd.load_checkpoint(tmp_path, t)
    assert [c for c in t.calls if c is not None] == [rd.RecoveryLabel.FAITHFUL_CONTINUATION]
    assert t.x == 0


def test_dcp_a_deleted_oracle_does_not_hide_an_edit(base, tmp_path):
    """The DCP layout verifies the oracles after the apply and skipped a part whose oracle was missing
    (the file layout requires exactly its parts' oracles): an edited scaler with its oracle deleted loaded."""
    saved = objects(base["data"], tmp_path, "dcp-saved")
    T.train(saved, total=6)

    def change(t):
        t["scaler"]["scale"] = 123.0  # in range, but not what was saved
        del t["oracles"]["scaler"]

    forged = _dcp(saved, change)
    o = fresh(base, tmp_path)
    before = digest(o)
    with pytest.raises(rd.ResumableDataError, match="no saved oracle"):
        o.state.load_state_dict(forged)
    assert digest(o) == before  # rolled back


@pytest.mark.parametrize(
    "key,value",
    [("lr", float("nan")), ("lr", -0.1), ("eps", -1.0), ("betas", (1.5, 0.9)), ("weight_decay", -0.5)],
    ids=["lr-nan", "lr-negative", "eps-negative", "beta1-1.5", "weight_decay-negative"],
)
@pytest.mark.parametrize("layout", ["file", "dcp"])
def test_optimizer_settings_the_constructor_refuses_are_refused(base, tmp_path, key, value, layout):
    """Structure and flags were checked, ranges were not: a NaN learning rate loaded (every update NaN)."""
    o = fresh(base, tmp_path)
    if layout == "file":
        tree = read_checkpoint(base["six"]).tree
        tree["optimizer"]["param_groups"][0][key] = value
        refused(o, forge(base["six"], tmp_path / "c" / base["six"].name, tree, oracles_of=o.state), "AdamW() refuses")
    else:
        saved = objects(base["data"], tmp_path, "dcp-saved")
        T.train(saved, total=6)
        v = {"__tuple__": list(value)} if isinstance(value, tuple) else value
        forged = _dcp(saved, lambda t: t["optimizer"]["param_groups"][0].update({key: v}))
        before = digest(o)
        with pytest.raises(rd.CheckpointError, match=r"AdamW\(\) refuses"):
            o.state.load_state_dict(forged)
        assert digest(o) == before
