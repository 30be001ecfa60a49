"""Untrusted input: forged and fuzzed loader states, tampered checkpoint directories and damaged
datasets give only ``rd.ResumableDataError`` subclasses, in bounded memory, and never execute
anything (a pickle payload carries a canary that would create a file if it ran)."""

from __future__ import annotations

import copy
import json
import pickle
import shutil
import tracemalloc
from pathlib import Path

import pytest
import torch
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.loader.state import SCHEMA_VERSION
from tests.loader.conftest import json_paths
from tests.reliability._counts import count
from tests.reliability.conftest import write_corpus


class Canary:
    """Unpickling this creates ``path`` (what an attacker's payload would do, harmlessly)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def payload(canary: Path) -> bytes:
    return pickle.dumps({"cursor": Canary(canary)}, protocol=4)


def deep(n: int = 100_000):
    out: list = []
    for _ in range(n):
        out = [out]
    return out


def loader(source, **kw):
    return rd.DataLoader(source, batch_size=6, shuffle=True, seed=5, commit="explicit", accumulation_steps=2, **kw)


@pytest.fixture
def saved(corpus):
    ld = loader(corpus)
    it = iter(ld)
    for _ in range(3):
        next(it)
        if ld.microstep_is_last:
            ld.commit()
    return ld.state_dict()


def rejects(source, state, canary: Path, budget_mb: float = 64.0) -> None:
    """Loading ``state`` raises an rd error, allocates under ``budget_mb``, runs no payload."""
    ld = loader(source)
    tracemalloc.start()
    try:
        with pytest.raises(rd.ResumableDataError):
            ld.load_state_dict(state, on_uncommitted="repeat")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < budget_mb * 2**20, f"loading a forged state allocated {peak / 2**20:.1f} MiB"
    assert not canary.exists(), "the payload ran"
    assert ld.cursor.delivered == 0  # nothing changed
    count("fuzz_cases")


def forged(saved, canary):
    big = 10**6
    cases = {
        "pickle bytes": payload(canary),
        "pickle text in a field": {**saved, "plan": payload(canary).decode("latin1")},
        "pickle bytes in a field": {**saved, "packing": payload(canary)},
        "a Canary object in a field": {**saved, "sampler": Canary(canary)},
        "deep nesting (1e5)": {**saved, "packing": deep()},
        "deep nesting in the cursor": {**saved, "cursor": deep()},
        "huge string (50 MB)": {**saved, "sampler": "x" * (50 * 2**20)},
        "huge skipped list (1e6)": {**saved, "skipped": [[0, 1, "x"]] * big},
        "huge integer (10**4000)": {**saved, "plan": {**saved["plan"], "seed": 10**4000}},
        "integer past str()'s digit limit (10**5000)": {**saved, "plan": {**saved["plan"], "seed": 10**5000}},
        "future schema version": {**saved, "schema_version": SCHEMA_VERSION + 1},
        "schema 1 with a schema 2 key": {**saved, "schema_version": 1},
        "schema version as string": {**saved, "schema_version": "1"},
        "schema version as bool": {**saved, "schema_version": True},
        "negative cursor": {**saved, "cursor": {"committed": -1, "delivered": 0, "fetched": 0}},
        "cursor beyond int64": {**saved, "cursor": {"committed": 2**64, "delivered": 2**64, "fetched": 2**64}},
        "float cursor": {**saved, "cursor": {"committed": 1.0, "delivered": 2, "fetched": 3}},
        "bool counters": {**saved, "counters": {**saved["counters"], "applied_updates": True}},
        "list instead of dict": [saved],
        "string": json.dumps(saved),
        "NaN seed": {**saved, "plan": {**saved["plan"], "seed": float("nan")}},
        "negative world size": {**saved, "layout": {"world_size": -2, "policy": "contiguous"}},
        "unknown order": {**saved, "plan": {**saved["plan"], "order": {"kind": "exec", "window": None}}},
        "epoch_base forged": {**saved, "epoch_base": [7, 3]},
    }
    return cases


def test_forged_states(corpus, saved, tmp_path):
    canary = tmp_path / "canary"
    for name, state in forged(saved, canary).items():
        # memory stays within 16 MiB plus a small multiple of the input's JSON size:
        # load_state_dict's JSON check makes one serialized copy of the state
        try:
            size = len(json.dumps(state)) / 2**20
        except (TypeError, ValueError, RecursionError):
            size = 0.0
        budget = 16 + 2.5 * size
        try:
            rejects(corpus, state, canary, budget)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_a_huge_cursor_is_refused_at_load(corpus, saved):
    """A cursor whose positions overflow int64 must be refused by load_state_dict (an rd error),
    not accepted and then fail in the first batch with OverflowError."""
    state = copy.deepcopy(saved)
    big = 2**62
    state["cursor"] = {"committed": big, "delivered": big, "fetched": big}
    state["epoch_base"] = [big // 17, (big // 17) * 17]
    ld = loader(corpus)
    with pytest.raises(rd.ResumeError, match="below 2\\*\\*62"):  # at load, not at the first batch
        ld.load_state_dict(state, on_uncommitted="repeat")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8) | st.binary(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)


@settings(derandomize=True, max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_states(corpus, saved, tmp_path_factory, data):
    """Random JSON (and bytes) at a random place, several places at once, or keys removed."""
    bad = copy.deepcopy(saved)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in json_paths(bad) if p]
        path = data.draw(st.sampled_from(paths))
        target = bad
        for k in path[:-1]:
            target = target[k]
        if data.draw(st.booleans()) and isinstance(target, dict):
            del target[path[-1]]
        else:
            target[path[-1]] = data.draw(JSON)
    if bad == saved:
        return
    ld = loader(corpus)
    try:
        ld.load_state_dict(bad, on_uncommitted="repeat")
    except rd.ResumableDataError:
        pass
    else:  # accepted: it must then behave (the first batch comes, or the epoch has ended)
        for _ in zip(range(2), ld):
            pass
    count("fuzz_cases")


# -- checkpoints ------------------------------------------------------------------------------------
def _forge(step_dir: Path, name: str, data: bytes, marker: bool) -> None:
    (step_dir / name).write_bytes(data)
    if marker:  # a consistent forgery: the COMMITTED marker re-hashed to match
        mk = json.loads((step_dir / "COMMITTED").read_text())
        mk["files"][name] = {"size": len(data), "xxh3_128": xxhash.xxh3_128_hexdigest(data)}
        (step_dir / "COMMITTED").write_text(json.dumps(mk))


def _ckpt(tmp_path: Path, corpus) -> Path:
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 2)
    s = rd.TrainingState(model=m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1), loader=loader(corpus), run_id="u")
    rd.save_checkpoint(tmp_path / "good", s, step=1)
    return tmp_path / "good"


def _fresh(corpus):
    m = torch.nn.Linear(4, 2)
    return rd.TrainingState(model=m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1), loader=loader(corpus), run_id="u")


@pytest.mark.parametrize("name", ["state.json", "meta.json", "inventory.json", "tensors.safetensors", "COMMITTED"])
@pytest.mark.parametrize("marker", [False, True], ids=["marker-untouched", "marker-forged"])
def test_checkpoint_files_replaced_by_pickles(tmp_path, corpus, name, marker):
    good = _ckpt(tmp_path, corpus)
    canary = tmp_path / "canary"
    d = tmp_path / "bad"
    shutil.copytree(good, d)
    step = d / "step-000000000001"
    data = pickle.dumps(Canary(canary)) if name != "tensors.safetensors" else _torch_pickle(canary)
    _forge(step, name, data, marker and name != "COMMITTED")
    with pytest.raises(rd.ResumableDataError):
        rd.load_checkpoint(d, _fresh(corpus))
    assert not canary.exists()
    count("fuzz_cases")


def _torch_pickle(canary: Path) -> bytes:
    import io

    buf = io.BytesIO()
    torch.save({"weight": Canary(canary)}, buf)
    return buf.getvalue()


@pytest.mark.parametrize("name", ["state.json", "meta.json", "inventory.json", "COMMITTED"])
def test_checkpoint_deep_json(tmp_path, corpus, name):
    """10**5 nested arrays in a checkpoint's JSON (marker forged to match)."""
    good = _ckpt(tmp_path, corpus)
    d = tmp_path / "bad"
    shutil.copytree(good, d)
    _forge(d / "step-000000000001", name, ("[" * 100_000 + "]" * 100_000).encode(), name != "COMMITTED")
    count("fuzz_cases")
    with pytest.raises(rd.ResumableDataError):
        rd.load_checkpoint(d, _fresh(corpus))



def test_checkpoint_loader_state_forged_inside(tmp_path, corpus):
    """A consistent forgery of state.json whose loader cursor is negative: a CheckpointError/ResumeError."""
    good = _ckpt(tmp_path, corpus)
    step = good / "step-000000000001"
    tree = json.loads((step / "state.json").read_text())
    text = json.dumps(tree)
    assert '"committed": 0' in text
    _forge(step, "state.json", text.replace('"committed": 0', '"committed": -5').encode(), True)
    with pytest.raises(rd.ResumableDataError):
        rd.load_checkpoint(good, _fresh(corpus))
    count("fuzz_cases")


# -- datasets ---------------------------------------------------------------------------------------
MANIFEST = rd.sources.MANIFEST_NAME  # ".rd-manifest.json" (hidden from other readers; issue 13)


def _damage(d: Path, how: str) -> None:
    shards = sorted(p for p in d.rglob("*") if p.is_file() and p.name != MANIFEST)
    if how == "corrupted byte":
        data = bytearray(shards[1].read_bytes())
        data[len(data) // 2] ^= 0x01
        shards[1].write_bytes(bytes(data))
    elif how == "truncated":
        shards[0].write_bytes(shards[0].read_bytes()[:-100])
    elif how == "swapped":
        a, b = shards[0].read_bytes(), shards[1].read_bytes()
        shards[0].write_bytes(b)
        shards[1].write_bytes(a)
    elif how == "extra shard":
        shutil.copy(shards[0], shards[0].with_name("zz-extra" + shards[0].suffix))
    elif how == "missing shard":
        shards[2].unlink()
    elif how == "manifest edited":
        m = json.loads((d / MANIFEST).read_text())
        m["num_records"] += 1
        (d / MANIFEST).write_text(json.dumps(m))
    elif how == "manifest deep JSON":
        (d / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    elif how == "manifest replaced by a pickle":
        (d / MANIFEST).write_bytes(pickle.dumps(Canary(d / "canary")))
    elif how == "same-size rewrite":  # one id changed in place: same sizes, rows and schema
        data = bytearray(shards[0].read_bytes())
        i = data.find((5).to_bytes(8, "little"))
        data[i:i + 8] = (6).to_bytes(8, "little")
        shards[0].write_bytes(bytes(data))


DAMAGE = ["corrupted byte", "truncated", "swapped", "extra shard", "missing shard", "manifest edited",
          "manifest deep JSON", "manifest replaced by a pickle", "same-size rewrite"]


@pytest.mark.parametrize("verify", ["content", None])
@pytest.mark.parametrize("how", DAMAGE)
def test_damaged_datasets_are_refused_before_a_sample(tmp_path, how, verify, saved):
    """verify=None: the default settings (issue 13: a same-size rewrite or swap used to pass)."""
    d = write_corpus(tmp_path / "data")
    _damage(d, how)
    yielded = []
    with pytest.raises(rd.ResumableDataError):
        src = rd.ArrowShards(d, verify="content") if verify else rd.ArrowShards(d)
        ld = loader(src)
        ld.load_state_dict(saved, on_uncommitted="repeat")  # another version than the saved one
        yielded.extend(ld)
    assert yielded == [] and not (d / "canary").exists()
    count("fault_cases")


def test_a_consistently_re_pinned_dataset_is_refused_by_the_saved_state(tmp_path, corpus_dir, saved):
    """Tampered shards re-pinned (a manifest forged to match) pass verification, but the version
    hash differs from the one in the state: load_state_dict refuses before any batch."""
    d = tmp_path / "data"
    shutil.copytree(corpus_dir, d)
    shard = sorted(p for p in d.rglob("*.arrow"))[0] if list(d.rglob("*.arrow")) else \
        sorted(p for p in d.rglob("*") if p.is_file() and p.name != MANIFEST)[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    (d / MANIFEST).unlink()
    rd.pin(d)
    src = rd.ArrowShards(d, verify="content")
    with pytest.raises(rd.ResumeError, match="dataset_version"):
        loader(src).load_state_dict(saved, on_uncommitted="repeat")
    count("fault_cases")
