"""``window_blocks=rd.WindowBlocks.READ_UNITS``: the window shuffle over an ``rd.ArrowShards``'
record batches through the drop-in loader: the plan's order, every unit inside one window,
bit-exact resume at other worker counts, the state's record, refusals with rd errors."""

import json

import numpy as np
import pytest
import torch

import resumable_data as rd
from resumable_data.plan import ReadUnits
from resumable_data.plan.unit_window import unit_window_records
from tests.loader.conftest import N_RECORDS, Augmented, canon
from tests.loader.dataloader.test_resume import TOTAL, interrupted, run

BATCH = 8
UNITS = dict(shuffle=True, seed=11, shuffle_window=40, window_blocks=rd.WindowBlocks.READ_UNITS)


def _loader(source, workers=0, **kw):
    extra = dict(num_workers=workers, persistent_workers=True) if workers else {}
    return rd.DataLoader(source, batch_size=BATCH, **{**UNITS, **kw}, **extra)


def test_the_loader_delivers_the_unit_window_order(shards):
    loader = _loader(shards)
    ids = torch.cat([b["id"] for b in loader]).numpy()
    units = ReadUnits.of(shards.unit_starts(), len(shards))
    want = unit_window_records(units, 40, np.arange(N_RECORDS), version_hash=loader.plan.version_hash, seed=11, epoch=0)
    assert ids.tolist() == want.tolist()
    # 157 records in 3 shards of 20-row batches: units of 20 and the shards' short tails
    sizes = np.diff(np.append(shards.unit_starts(), len(shards)))
    assert len(set(sizes.tolist())) > 1


def test_each_unit_is_delivered_within_one_window(shards):
    ids = torch.cat([b["id"] for b in _loader(shards)]).numpy()
    unit_of = np.searchsorted(shards.unit_starts(), ids, side="right") - 1
    first = {u: i for i, u in reversed(list(enumerate(unit_of.tolist())))}
    last = {u: i for i, u in enumerate(unit_of.tolist())}
    # a unit's records are contiguous in windows of ~40 records: its span stays under two windows
    assert max(last[u] - first[u] for u in first) < 80
    default = torch.cat([b["id"] for b in _loader(shards, window_blocks=rd.WindowBlocks.RECORDS)]).numpy()
    unit_d = np.searchsorted(shards.unit_starts(), default, side="right") - 1
    spans = [np.ptp(np.flatnonzero(unit_d == u)) for u in np.unique(unit_d)]
    assert max(spans) >= 80  # the record-block default spreads a unit over windows far apart


@pytest.mark.parametrize("workers", [(0, 2, 0), (2, 0, 2)])
def test_bit_exact_resume_at_other_worker_counts(shards, workers):
    make = lambda w: _loader(shards, w)
    reference = run(make(0), TOTAL, False)
    for points in ([3, 20, 33], [1, 19, 40]):
        got = interrupted(make, points, workers, False, "repeat")
        assert got == reference, f"diverged with interrupts at {points}"


def test_the_state_records_the_blocks_and_other_blocks_are_refused(shards):
    loader = _loader(shards)
    it = iter(loader)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["plan"]["order"] == {"kind": "window", "window": 40, "block": 0, "blocks": "read_units"}
    other = _loader(shards, window_blocks=rd.WindowBlocks.RECORDS)
    before = canon(other.state_dict())
    with pytest.raises(rd.ResumeError, match="order") as info:
        other.load_state_dict(state)
    assert canon(other.state_dict()) == before  # a refused load changes nothing
    # one reason, whose fix (the same window_blocks) works: the unit layout the state records is
    # the blocks' consequence, and its fix ("read the records in the units the run was trained
    # on") sent a reader looking for changed files
    assert "window_blocks" in str(info.value) and "unit_layout" not in str(info.value)
    assert str(info.value).count("\n  - ") == 1, str(info.value)
    fixed = _loader(shards)
    fixed.load_state_dict(state)
    back = _loader(shards)
    with pytest.raises(rd.ResumeError, match="order") as info:
        back.load_state_dict(json.loads(json.dumps(other.state_dict())))
    assert "unit_layout" not in str(info.value)


def test_the_string_spelling_is_accepted(shards):
    a = [canon(b) for b in _loader(shards, window_blocks="read_units")]
    assert a == [canon(b) for b in _loader(shards)]


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(shuffle_window=None), "window_blocks"),
        (dict(window_blocks="pages"), "window_blocks"),
    ],
)
def test_bad_window_blocks_are_config_errors(shards, kw, match):
    with pytest.raises(rd.ConfigError, match=match):
        _loader(shards, **kw)


def test_a_dataset_without_read_units_is_refused_naming_the_option():
    with pytest.raises(rd.ConfigError, match="window_blocks") as e:
        _loader(Augmented())
    assert "drop window_blocks" in str(e.value)


@pytest.mark.parametrize("workers", [(0, 2), (2, 0)])
def test_packed_batches_over_read_units_resume_bit_exact(shards, workers):
    """Packing reads the documents in the plan's order: the read-unit window reaches it too."""

    def make(w):
        return _loader(shards, w, packing=rd.Packing(16, window=32, eos_id=0), token_column="tokens")

    reference = run(make(0), TOTAL, False)
    default = run(
        _loader(shards, packing=rd.Packing(16, window=32, eos_id=0), token_column="tokens", window_blocks="records"),
        30,
        False,
    )
    assert reference[:30] != default  # the blocks change which documents are packed together
    got = interrupted(make, [4, 17], workers, False, "repeat")
    assert got == reference


class _UserUnits(Augmented):
    """A user's map-style dataset that declares read units (rd.plan.HasReadUnits)."""

    def __init__(self, starts):
        super().__init__()
        self.starts = starts

    def unit_starts(self):
        return self.starts


def test_a_user_dataset_with_read_units_gets_the_unit_window():
    starts = np.arange(0, N_RECORDS, 10)
    loader = _loader(_UserUnits(starts))
    got = torch.cat([b["record"] for b in loader]).numpy()
    units = ReadUnits.of(starts, N_RECORDS)
    want = unit_window_records(units, 40, np.arange(N_RECORDS), version_hash=loader.plan.version_hash, seed=11, epoch=0)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("starts", [np.arange(0, N_RECORDS, 10) + 0.5, None, [[0, 10]], ["0", "10"]])
def test_a_user_dataset_with_unit_starts_of_another_type_is_a_config_error(starts):
    """Floats were truncated (another layout than the dataset's), None raised a TypeError."""
    with pytest.raises(rd.ConfigError, match="unit starts"):
        _loader(_UserUnits(starts))


def test_a_resume_over_another_unit_layout_of_the_same_version_is_exact_or_refused():
    """A user dataset declares its version (dataset_version=) and read units; the next run reads
    the same records in other units (its reader chunks them otherwise). Resuming must continue
    the saved order exactly or refuse with an rd error, never deliver another order."""

    def make(starts):
        return _loader(_UserUnits(starts), dataset_version="v1")

    a, b = np.arange(0, N_RECORDS, 10), np.arange(0, N_RECORDS, 25)
    reference = [canon(x)["record"] for x in make(a)]
    first = make(a)
    it = iter(first)
    got = [canon(next(it))["record"] for _ in range(5)]
    state = json.loads(json.dumps(first.state_dict()))
    resumed = make(b)
    try:
        resumed.load_state_dict(state)
    except rd.ResumableDataError:
        return  # refused: fine
    rest = [canon(x)["record"] for x in resumed]
    assert got + rest == reference


class _UnitStartsArray(Augmented):
    """A dataset whose ``unit_starts`` is an array attribute, not the method HasReadUnits names."""

    unit_starts = np.arange(0, N_RECORDS, 10)


def test_a_dataset_whose_unit_starts_is_not_a_method_is_a_config_error():
    with pytest.raises(rd.ConfigError, match="unit_starts|window_blocks"):
        _loader(_UnitStartsArray())


def test_window_blocks_over_a_mixture_is_refused_with_a_fix_that_works(tmp_path):
    from tests.mixture_data import WEIGHTS, open_sources, write_sources

    mix = rd.Mixture(open_sources(write_sources(tmp_path)), weights=WEIGHTS)
    with pytest.raises(rd.ConfigError, match="window_blocks") as e:
        rd.DataLoader(mix, batch_size=4, seed=0, window_blocks=rd.WindowBlocks.READ_UNITS)
    assert "shuffle_window" not in str(e.value).split("fix:", 1)[1]


@pytest.mark.parametrize(
    "order",
    [
        {"blocks": 1},
        {"blocks": None},
        {"blocks": ["read_units"]},
        {"blocks": "pages"},
        {"blocks": "records"},  # the default is written by omission only
        {"kind": "global"},
        {"kind": "sequential"},
        {"block": 4},
        {"window": 0},
        {"window": -1},
        {"window": True},
        {"window": 1 << 70},
        {"window": 41},  # a valid order, not this loader's
    ],
)
def test_a_forged_read_unit_order_is_refused_and_changes_nothing(shards, order):
    loader = _loader(shards)
    it = iter(loader)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    state["plan"]["order"].update(order)
    target = _loader(shards)
    before = json.dumps(target.state_dict(), sort_keys=True)
    with pytest.raises(rd.ResumeError):
        target.load_state_dict(state)
    assert json.dumps(target.state_dict(), sort_keys=True) == before
    assert [canon(b) for b in target][:3] == [canon(b) for b in _loader(shards)][:3]  # still at its start


def test_a_record_block_state_given_read_unit_blocks_is_refused(shards):
    loader = _loader(shards, window_blocks=rd.WindowBlocks.RECORDS)
    next(iter(loader))
    state = json.loads(json.dumps(loader.state_dict()))
    state["plan"]["order"]["blocks"] = "read_units"  # block stays > 0: no such order
    target = _loader(shards)
    before = json.dumps(target.state_dict(), sort_keys=True)
    with pytest.raises(rd.ResumeError, match="window_blocks"):
        target.load_state_dict(state)
    assert json.dumps(target.state_dict(), sort_keys=True) == before


def _odd_layout(root, layout):
    """A pinned folder of ``layout``: one unit, 1-row units, empty record batches (IPC file and
    stream), Parquet row groups of uneven sizes (one empty), an empty shard, a HF save_to_disk."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    def tab(n, off=0):
        return pa.table({"id": pa.array(np.arange(off, off + n, dtype=np.int64))})

    root.mkdir()
    empty = pa.RecordBatch.from_pylist([], schema=tab(0).schema)
    cuts = [(0, 0), (0, 10), (10, 10), (10, 15), (15, 15), (15, 60), (60, 60)]
    if layout == "one_unit":
        pq.write_table(tab(50), root / "a.parquet", row_group_size=1000)
    elif layout == "one_row_units":
        pq.write_table(tab(30), root / "a.parquet", row_group_size=1)
    elif layout in ("empty_batches_file", "empty_batches_stream"):
        new = ipc.new_file if layout == "empty_batches_file" else ipc.new_stream
        with new(str(root / "a.arrow"), tab(0).schema) as w:
            for a, b in cuts:
                w.write_batch(tab(b - a, a).to_batches()[0] if b > a else empty)
    elif layout == "uneven_row_groups":
        with pq.ParquetWriter(str(root / "a.parquet"), tab(0).schema) as w:
            off = 0
            for k in [1, 50, 3, 17, 0, 2, 90]:
                w.write_table(tab(k, off), row_group_size=max(k, 1))
                off += k
    elif layout == "empty_shard":
        pq.write_table(tab(0), root / "a.parquet")
        pq.write_table(tab(20), root / "b.parquet", row_group_size=7)
    elif layout == "hf_save_to_disk":
        datasets = pytest.importorskip("datasets")
        datasets.Dataset.from_dict({"id": list(range(100))}).save_to_disk(str(root / "hf"), num_shards=3)
        root = root / "hf"
    rd.pin(root)
    return root


#: layout -> units holding records (empty batches / row groups / shards hold none)
LAYOUTS = {"one_unit": 1, "one_row_units": 30, "empty_batches_file": 3, "empty_batches_stream": 3,
           "uneven_row_groups": 6, "empty_shard": 3, "hf_save_to_disk": 3}


@pytest.mark.parametrize("window", [1, 40, 10**6])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_odd_layouts_deliver_the_unit_window_and_resume_exactly(tmp_path, layout, window):
    src = rd.ArrowShards(_odd_layout(tmp_path / layout, layout))
    n = len(src)
    assert len(src.unit_starts()) == LAYOUTS[layout]

    def make():
        return rd.DataLoader(src, batch_size=4, shuffle=True, seed=7, shuffle_window=window,
                             window_blocks=rd.WindowBlocks.READ_UNITS, tail="partial")

    reference = [b["id"].tolist() for b in make()]
    units = ReadUnits.of(src.unit_starts(), n)
    want = unit_window_records(units, window, np.arange(n), version_hash=make().plan.version_hash, seed=7, epoch=0)
    assert sum(reference, []) == want.tolist() and sorted(want.tolist()) == list(range(n))
    first = make()
    it = iter(first)
    got = [next(it)["id"].tolist() for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict()))
    resumed = make()
    resumed.load_state_dict(state)
    assert got + [b["id"].tolist() for b in resumed] == reference


@pytest.mark.parametrize("tail", ["wrap", "drop", "continuous"])
def test_elastic_resumes_onto_other_world_sizes_are_bit_exact(shards, tail):
    """rd.testing's harness: interrupted runs resume onto world sizes 1, 2 and 4 (same global batch)."""
    from resumable_data.testing import check_resume

    def make(**kw):
        return rd.DataLoader(shards, batch_size=8 // kw["sharding"].world_size, tail=tail, **UNITS, **kw)

    report = check_resume(make, steps=30, interrupts=3, num_workers=(0,), world_sizes=(1, 2, 4))
    assert report.ok, str(report)
    assert make(sharding=rd.Sharding(2, 0)).plan.order.blocks is rd.WindowBlocks.READ_UNITS


def test_a_batch_ramp_over_read_units_resumes_bit_exact(shards):
    def make(w):
        extra = dict(num_workers=w, persistent_workers=True) if w else {}
        return rd.DataLoader(shards, batch_size=rd.BatchRamp(2, 2, 60, 8), **UNITS, **extra)

    reference = run(make(0), TOTAL, False)
    assert len({b["id"][2] for b in reference}) > 1  # the batch grows (shapes differ)
    assert interrupted(make, [2, 9, 31], (0, 0), False, "repeat") == reference


@pytest.mark.parametrize("workers", [0, 2])
def test_a_data_change_onto_another_unit_layout_continues_in_the_new_units(tmp_path, workers):
    """label='data_change' onto the same records in other units (another version): the stream
    continues at the same step in the new version's unit window, as its step_info says."""
    import pyarrow as pa

    table = pa.table({"id": pa.array(np.arange(N_RECORDS, dtype=np.int64))})
    rd.write_arrow_shards(table, tmp_path / "a", num_shards=3, rows_per_batch=20)
    rd.write_arrow_shards(table, tmp_path / "b", num_shards=2, rows_per_batch=7, format="parquet")
    rd.pin(tmp_path / "a")
    rd.pin(tmp_path / "b")
    first = _loader(rd.ArrowShards(tmp_path / "a"))
    it = iter(first)
    for _ in range(5):
        next(it)
    state = json.loads(json.dumps(first.state_dict()))
    b = rd.ArrowShards(tmp_path / "b")
    resumed = _loader(b, workers)
    with pytest.raises(rd.ResumeError):
        resumed.load_state_dict(state)  # a changed dataset needs the label
    resumed.load_state_dict(state, label="data_change")
    got = [x["id"].tolist() for x in resumed]
    assert len(got) == len(range(5, -(-N_RECORDS // BATCH)))
    assert got == [resumed.step_info(s).records.tolist() for s in range(5, 5 + len(got))]
    units = ReadUnits.of(b.unit_starts(), N_RECORDS)
    assert sum(got, []) == unit_window_records(units, 40, np.arange(5 * BATCH, N_RECORDS),
                                               version_hash=resumed.plan.version_hash, seed=11, epoch=0).tolist()


def test_a_training_state_checkpoint_resumes_the_unit_window_and_refuses_other_blocks(shards, tmp_path):
    reference = [canon(b) for b in _loader(shards)]
    loader = _loader(shards)
    it = iter(loader)
    got = [canon(next(it)) for _ in range(5)]
    rd.save_checkpoint(tmp_path / "ck", rd.TrainingState(model=torch.nn.Linear(1, 1), loader=loader), step=5)
    other = _loader(shards, window_blocks=rd.WindowBlocks.RECORDS)
    with pytest.raises(rd.ResumableDataError, match="order"):
        rd.load_checkpoint(tmp_path / "ck", rd.TrainingState(model=torch.nn.Linear(1, 1), loader=other))
    resumed = _loader(shards)
    rd.load_checkpoint(tmp_path / "ck", rd.TrainingState(model=torch.nn.Linear(1, 1), loader=resumed))
    assert got + [canon(b) for b in resumed] == reference
