import json
import os

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.files import MANIFEST_NAME
from resumable_data.sources.manifests import cached_manifest
from resumable_data.sources.store import store_for


def test_pin_writes_manifest_and_is_deterministic(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path, num_shards=3, rows_per_batch=100)
    v1 = rd.pin(tmp_path)
    v2 = rd.pin(tmp_path)
    assert v1 == v2 and v1.hash == v2.hash
    assert (tmp_path / MANIFEST_NAME).is_file()
    assert v1.num_records == 1000
    assert [s.path for s in v1.shards] == ["shard-00000.arrow", "shard-00001.arrow", "shard-00002.arrow"]
    assert all(len(s.content_hash) == 32 for s in v1.shards)
    assert sum(s.num_rows for s in v1.shards) == 1000
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_same_bytes_elsewhere_same_hash(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path / "a", num_shards=2)
    rd.write_arrow_shards(table, tmp_path / "b", num_shards=2)
    assert rd.pin(tmp_path / "a").hash == rd.pin(tmp_path / "b").hash


def test_recursive_discovery_sorted(tmp_path, table):
    rd.write_arrow_shards(table.slice(0, 500), tmp_path / "z", num_shards=1)
    rd.write_arrow_shards(table.slice(500), tmp_path / "a" / "b", num_shards=1)
    v = rd.pin(tmp_path)
    assert [s.path for s in v.shards] == ["a/b/shard-00000.arrow", "z/shard-00000.arrow"]


def test_changes_change_hash(tmp_path, table, make_table):
    d = tmp_path / "d"
    rd.write_arrow_shards(table, d, num_shards=2)
    base = rd.pin(d).hash
    # explicit order differs from the sorted order
    files = sorted(d.glob("*.arrow"))
    assert rd.pin(files).hash != base  # explicit list vs discovered directory: selection is hashed
    assert rd.pin(list(reversed(files))).hash != rd.pin(files).hash
    # changed schema (same rows, another type)
    e = tmp_path / "e"
    rd.write_arrow_shards(table.set_column(1, "id", table.column("id").cast(pa.int32())), e, num_shards=2)
    assert rd.pin(e).hash != base
    # changed row split
    f = tmp_path / "f"
    rd.write_arrow_shards(table, f, num_shards=3)
    assert rd.pin(f).hash != base
    # size mode differs from content mode and covers sizes only
    assert rd.pin(d, hash="size").hash != base
    assert rd.pin(d, hash=rd.HashMode.SIZE).hash_mode is rd.HashMode.SIZE
    assert all(s.content_hash is None for s in rd.DatasetVersion.load(d).shards)


def test_one_changed_byte_changes_content_hash_not_size_hash(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path, num_shards=2)
    content, size = rd.pin(tmp_path).hash, rd.pin(tmp_path, hash="size").hash
    p = tmp_path / "shard-00001.arrow"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    assert rd.pin(tmp_path).hash != content
    assert rd.pin(tmp_path, hash="size").hash == size


def test_mixed_schema_rejected_naming_shard(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path / "x", num_shards=1)
    rd.write_arrow_shards(table.drop_columns(["score"]), tmp_path / "y", num_shards=1)
    with pytest.raises(rd.ConfigError, match="y/shard-00000.arrow"):
        rd.pin(tmp_path)


def test_bad_inputs(tmp_path, table):
    with pytest.raises(rd.ConfigError, match="hash="):
        rd.pin(tmp_path, hash="sha256")
    with pytest.raises(rd.ConfigError, match="path="):
        rd.pin(tmp_path / "missing")
    with pytest.raises(rd.ConfigError, match="path="):
        rd.pin(tmp_path)  # empty directory
    with pytest.raises(rd.ConfigError, match="path="):
        rd.pin([])


def test_manifest_is_sorted_json_with_format(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path, num_shards=2, format="parquet")
    v = rd.pin(tmp_path)
    d = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert d["format"] == "resumable_data.dataset_version" and d["schema_version"] == 4
    assert d["hash"] == v.hash and d["hash_mode"] == "content"
    assert "metadata" not in d["schema"]


def test_a_file_that_is_not_a_shard_gives_one_fix_that_works(tmp_path, table):
    """A CSV named .arrow in a never-pinned folder: one fix (not the pinned-data fix nested inside it)."""
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "part-0.arrow").write_text("id,text\n1,hello\n" * 50)
    with pytest.raises(rd.ConfigError) as e:
        rd.pin(folder)
    msg = str(e.value)
    assert msg.startswith("shard=") and msg.count("fix:") == 1 and "verify(level=" not in msg, msg
    assert "must not be named" in msg
    (folder / "part-0.arrow").rename(folder / "part-0.csv")  # the fix: a file that is not a shard, renamed
    rd.write_arrow_shards(table, str(folder / "shards"))
    assert rd.pin(folder).num_records == table.num_rows


def test_a_file_uri_pins_the_folder_it_names(tmp_path, table):
    rd.write_arrow_shards(table, str(tmp_path / "d"), num_shards=2)
    version = rd.pin((tmp_path / "d").as_uri())
    assert version.num_records == table.num_rows and (tmp_path / "d" / MANIFEST_NAME).exists()


@pytest.mark.parametrize(
    ("save", "folder", "cache"),
    [
        (True, True, False),
        (rd.PinSave.AUTO, True, False),
        ("auto", True, False),
        ("folder", True, False),
        (rd.PinSave.FOLDER, True, False),
        ("cache", False, True),
        (rd.PinSave.CACHE, False, True),
        (False, False, False),
        ("none", False, False),
        (rd.PinSave.NONE, False, False),
        (np.bool_(False), False, False),
    ],
)
def test_save_maps_bools_strings_and_pin_save_to_where_the_manifest_goes(tmp_path, table, save, folder, cache):
    d = tmp_path / "d"
    rd.write_arrow_shards(table, d, num_shards=2)
    version = rd.pin(d, save=save)
    in_cache = cached_manifest(store_for(None), str(d.resolve()), [s.path for s in version.shards])
    assert ((d / MANIFEST_NAME).exists(), in_cache.exists()) == (folder, cache)
    assert version == rd.pin(d, save=False)


def test_save_for_a_list_of_files_goes_to_the_cache_and_folder_is_refused(tmp_path, table):
    rd.write_arrow_shards(table, tmp_path, num_shards=2)
    files = sorted(tmp_path.glob("*.arrow"))
    for save in (True, rd.PinSave.AUTO, "cache", rd.PinSave.CACHE):
        rd.pin(files, save=save)
        assert not (tmp_path / MANIFEST_NAME).exists()
    for save in ("folder", rd.PinSave.FOLDER):
        with pytest.raises(rd.ConfigError) as e:
            rd.pin(files, save=save)
        msg = str(e.value)
        assert msg.startswith("save=") and "'folder'" in msg and "rd.PinSave.CACHE" in msg and "fix:" in msg, msg


@pytest.mark.parametrize("save", ["Folder", "yes", "", None, 1, 0, 2.0, [True]])
def test_save_refuses_other_values_naming_save_the_value_what_is_expected_and_a_fix(tmp_path, table, save):
    rd.write_arrow_shards(table, tmp_path, num_shards=1)
    with pytest.raises(rd.ConfigError) as e:
        rd.pin(tmp_path, save=save)
    msg = str(e.value)
    assert msg.startswith(f"save={save!r}"), msg
    assert "rd.PinSave" in msg and "'cache'" in msg and "True, False" in msg, msg
    assert "fix: pass save=rd.PinSave.CACHE" in msg, msg
    assert not (tmp_path / MANIFEST_NAME).exists()
    assert rd.pin(tmp_path, save=rd.PinSave.CACHE).num_records == table.num_rows  # the fix works
    assert not (tmp_path / MANIFEST_NAME).exists()
