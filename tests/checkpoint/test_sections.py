"""The typed metadata sections (``meta.sections``): built when a meta is made or loaded, equal to
the JSON they come from, meta.json unchanged byte for byte, and a forged section refused on load
(naming it) before anything is restored."""

from __future__ import annotations

import copy
import json

import _train as T
import pytest

import resumable_data as rd
from resumable_data.checkpoint import read_checkpoint
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.meta import CheckpointMeta
from resumable_data.checkpoint.sections import MetaSections
from resumable_data.checkpoint.store import META_JSON, _json_bytes
from resumable_data.loader.seeding.sample_seeding import SampleSeeding


@pytest.fixture(scope="module")
def ckpt(reference):
    return reference["root"] / "save"


def _step_dir(ckpt, step):
    return read_checkpoint(ckpt, step).path


@pytest.mark.parametrize("step", [1, 14, 41])
def test_meta_json_reads_back_byte_for_byte_and_its_sections_match_the_json(ckpt, step):
    on_disk = (_step_dir(ckpt, step) / META_JSON).read_bytes()
    d = json.loads(on_disk)
    meta = CheckpointMeta.from_dict(d)
    assert _json_bytes(meta.to_dict()) == on_disk  # the format is unchanged
    sec = meta.sections
    assert isinstance(sec, MetaSections)
    plan = d["data"]["plan"]
    assert (sec.data.loader.plan.num_records, sec.data.loader.plan.global_batch) == (
        plan["num_records"],
        plan["global_batch"],
    )
    assert sec.data.loader.plan.version_hash == plan["dataset_version"]
    assert sec.data.loader.accumulation_steps == d["data"]["accumulation_steps"]
    assert sec.data.seed_per_sample is SampleSeeding(d["data"]["seed_per_sample"])
    assert sec.data.loader.layout.policy.value == d["data"]["layout"]["policy"]
    assert sec.world_size == d["layout"]["world_size"]
    assert sec.model.parameters == tuple(d["model"]["parameters"]) and sec.model.buffers == tuple(d["model"]["buffers"])
    assert sec.model.root == d["model"]["modules"]["<root>"] and sec.model.config == d["model"]["config"]
    assert sec.optimizer.type == d["optimizer"]["type"]
    assert sec.optimizer.groups == tuple(tuple(g["params"]) for g in d["optimizer"]["param_groups"])
    assert (sec.scheduler.type, sec.scheduler.convention) == (d["scheduler"]["type"], d["scheduler"]["convention"])
    assert (sec.scaler.type, sec.scaler.enabled) == (d["scaler"]["type"], d["scaler"]["enabled"])
    assert sec.features.fingerprint == d["feature_schema"]["fingerprint"]
    assert (sec.ema is None) == (d["ema"] is None)
    assert read_checkpoint(ckpt, step).meta.sections == sec  # the store builds the same typed object


def test_a_meta_without_a_loader_or_model_has_empty_sections():
    meta = CheckpointMeta(run_id="r")
    assert meta.sections == MetaSections(None, None, None, None, None, None, None, 1)
    assert CheckpointMeta.from_dict(meta.to_dict()).sections == meta.sections


FORGED = [
    (("model",), {"parameters": {}}, CheckpointError, r"meta\.model="),
    (("model", "modules"), {"": 3}, CheckpointError, r"meta\.model\.modules\.="),
    (("optimizer", "type"), 3, CheckpointError, r"meta\.optimizer\.type=3"),
    (("optimizer", "param_groups"), [{"params": [1]}], CheckpointError, r"meta\.optimizer\.param_groups\[0\]\.params"),
    (("scheduler", "convention"), "sometimes", CheckpointError, r"meta\.scheduler\.convention='sometimes'"),
    (("scaler", "enabled"), "yes", CheckpointError, r"meta\.scaler\.enabled='yes'"),
    (("feature_schema", "fingerprint"), None, CheckpointError, r"meta\.feature_schema\.fingerprint=None"),
    (("layout", "world_size"), 0, CheckpointError, r"meta\.layout\.world_size=0"),
    (("data", "seed_per_sample"), "EAGER", rd.ResumeError, r"meta\.data\.seed_per_sample='EAGER'"),
    (("data", "plan", "num_records"), -1, rd.ResumeError, r"meta\.data\.plan\.num_records=-1"),
    (("data", "accumulation_steps"), "2", rd.ResumeError, r"meta\.data\.accumulation_steps='2'"),
]


def _forge(d, path, value):
    d = copy.deepcopy(d)
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return d


@pytest.mark.parametrize("path, value, error, match", FORGED, ids=[".".join(f[0]) for f in FORGED])
def test_a_forged_section_is_an_rd_error_naming_it_and_nothing_is_restored(
    ckpt, data_dir, tmp_path, path, value, error, match
):
    raw = read_checkpoint(ckpt, 14)
    forged = _forge(raw.meta.to_dict(), path, value)
    with pytest.raises(error, match=match) as e:
        CheckpointMeta.from_dict(forged)
    assert "fix: " in str(e.value)
    with pytest.raises(error, match="saved " + match):
        CheckpointMeta.from_dict(forged, "saved meta")
    with pytest.raises(error, match="current " + match):
        rd.check_compatible(raw.meta, forged)
    o = T.build(data_dir, tmp_path / "m.jsonl", run_id="new", seed=5)
    before = T.tensor_digest(o.model.state_dict().items())
    with pytest.raises(error, match="saved " + match):
        o.state.load_state_dict(dict(raw.tree, meta=forged))
    assert T.tensor_digest(o.model.state_dict().items()) == before, "nothing may change before a refusal"
    assert o.loader.cursor.delivered == 0
