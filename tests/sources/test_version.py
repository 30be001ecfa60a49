import json

import pytest

import resumable_data as rd
from resumable_data.sources.files import MANIFEST_NAME


@pytest.fixture
def pinned(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path, num_shards=3, rows_per_batch=128)
    return rd.pin(tmp_path)


def test_load_roundtrip(pinned, tmp_path):
    v = rd.DatasetVersion.load(tmp_path)
    assert v == pinned
    assert rd.DatasetVersion.from_dict(v.to_dict()) == v
    v.verify("size")
    v.verify(rd.VerifyLevel.CONTENT)


def test_tampered_manifest_refused(pinned, tmp_path):
    path = tmp_path / MANIFEST_NAME
    d = json.loads(path.read_text())
    d["shards"][0]["num_rows"] += 1
    d["num_records"] += 1
    path.write_text(json.dumps(d))
    with pytest.raises(rd.DatasetIntegrityError, match="hash"):
        rd.DatasetVersion.load(tmp_path)


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(schema_version=5), "schema_version=5.*saved 5"),
    (lambda d: d.update(schema_version=1), "manifest keys"),  # a schema-4 body is not schema 1
    (lambda d: d.update(schema_version=2), "layout"),  # nor schema 2 (its layouts have no digests key)
    (lambda d: d.update(schema_version=3), "layout"),  # nor schema 3 (its layouts have no meta key)
    (lambda d: d["shards"][0]["layout"]["units"][0].__setitem__(2, 7), "layout"),
    (lambda d: d["shards"][0]["layout"]["units"][0].__setitem__(0, 10**9), "layout"),
    (lambda d: d.update(format="other"), "format="),
    (lambda d: d.pop("schema"), "manifest keys"),
    (lambda d: d.update(num_records=-1), "num_records"),
    (lambda d: d["shards"][0].update(path="../x.arrow"), "path"),
    (lambda d: d["shards"][0].update(size="12"), "size"),
    (lambda d: d.update(hash_mode="md5"), "hash_mode"),
])
def test_malformed_manifest_rejected(pinned, tmp_path, edit, match):
    d = pinned.to_dict()
    edit(d)
    with pytest.raises(rd.DatasetIntegrityError, match=match):
        rd.DatasetVersion.from_dict(d)


def test_not_json_and_missing(tmp_path):
    with pytest.raises(rd.ConfigError, match="directory="):
        rd.DatasetVersion.load(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text("{nope")
    with pytest.raises(rd.DatasetIntegrityError, match="JSON"):
        rd.DatasetVersion.load(tmp_path)
