"""A Hugging Face ``save_to_disk`` folder stays readable by rd after HF's own calls (issue 28).

``.shuffle()``, ``.select()``, ``.flatten_indices()`` and ``.map()`` on a ``load_from_disk``
dataset write ``cache-*.arrow`` into the dataset's folder; rd reads the folder as HF defines it
(``state.json``'s data files), so the version is unchanged and a saved state resumes bit-exact.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

import resumable_data as rd

datasets = pytest.importorskip("datasets")

N = 3000


def _save(path) -> None:
    feats = datasets.Features({"x": datasets.Value("int64"),
                               "v": datasets.Sequence(datasets.Value("float32"), length=4)})
    ds = datasets.Dataset.from_dict({"x": list(range(N)), "v": [[i / 7.0] * 4 for i in range(N)]},
                                    features=feats)
    ds.save_to_disk(str(path), max_shard_size="40KB")  # several data files


def _loader(path) -> rd.DataLoader:
    return rd.DataLoader(rd.ArrowShards(path), batch_size=64, shuffle=True, seed=3)


def _batches(it, k):
    return [next(it) for _ in range(k)]


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_hf_cache_files_do_not_change_the_version_and_resume_is_exact(tmp_path):
    folder = tmp_path / "ds"
    _save(folder)
    data_files = sorted(p.name for p in folder.glob("*.arrow"))
    assert len(data_files) > 1
    version = rd.ArrowShards(folder).version.hash
    before = _loader(folder)
    it = iter(before)
    _batches(it, 5)
    state = json.loads(json.dumps(before.state_dict()))
    expected = _batches(it, 30)  # the uninterrupted run: steps 5..34

    loaded = datasets.load_from_disk(str(folder))
    shuffled = loaded.shuffle(seed=1)
    loaded.select([5, 3, 1])
    shuffled.flatten_indices()
    loaded.map(lambda r: {"y": r["x"] * 2})
    cache = sorted(p.name for p in folder.glob("cache-*.arrow"))
    assert len(cache) >= 3, os.listdir(folder)  # HF did write into the folder

    src = rd.ArrowShards(folder)
    assert src.version.hash == version
    assert len(src) == N and [s.path for s in src.version.shards] == data_files
    resumed = _loader(folder)
    resumed.load_state_dict(state)
    got = _batches(iter(resumed), 30)
    for a, b in zip(got, expected, strict=True):  # every remaining batch, in order
        _same(a, b)


def test_state_json_lists_a_missing_file(tmp_path):
    folder = tmp_path / "ds"
    _save(folder)
    victim = sorted(folder.glob("data-*.arrow"))[-1]
    victim.rename(folder / "moved.bin")
    with pytest.raises(rd.ConfigError, match=r"state\.json.*" + victim.name + ".*missing"):
        rd.ArrowShards(folder, unpinned="allow")


def test_state_json_that_lists_a_file_twice_is_refused(tmp_path):
    """Found by the attack sweep (every byte of state.json flipped): "data-00001" -> "data-00000" made HF read
    the first shard twice while rd silently read the folder without the second shard (a third of the rows)."""
    folder = tmp_path / "ds"
    _save(folder)
    state = json.loads((folder / "state.json").read_text())
    names = [f["filename"] for f in state["_data_files"]]
    assert len(names) >= 2
    state["_data_files"][1]["filename"] = names[0]
    (folder / "state.json").write_text(json.dumps(state))
    with pytest.raises(rd.ConfigError, match=r"state\.json.*" + re.escape(names[0]) + ".*more than once"):
        rd.ArrowShards(folder, unpinned="allow")


def test_load_dataset_cache_folder_leaves_out_cache_files(tmp_path):
    # load_dataset's cache layout: dataset_info.json beside <name>-train.arrow, no state.json
    folder = tmp_path / "ds"
    _save(folder)
    (folder / "state.json").unlink()
    (folder / "cache-0123456789abcdef.arrow").write_bytes(sorted(folder.glob("data-*.arrow"))[0].read_bytes())
    (folder / "cache-0123456789abcdef_00001_of_00002.arrow").write_bytes(b"junk")
    src = rd.ArrowShards(folder, unpinned="allow")
    assert len(src) == N


def test_a_foreign_state_json_changes_nothing(tmp_path):
    folder = tmp_path / "ds"
    _save(folder)
    (folder / "dataset_info.json").unlink()
    (folder / "state.json").write_text(json.dumps({"step": 3}))
    (folder / "cache-0123456789abcdef.arrow").write_bytes(sorted(folder.glob("data-*.arrow"))[0].read_bytes())
    src = rd.ArrowShards(folder, unpinned="allow")
    assert len(src) > N  # not HF's state.json, no dataset_info.json: every shard file is read


def test_remote_folder_leaves_hf_cache_files_out_as_a_local_one_does(tmp_path):
    """Through ``filesystem=`` (the object-store path) a save_to_disk folder with HF's cache files
    pins and opens as HF defines it: before, the remote listing kept ``cache-*.arrow`` as shards and
    ``rd.pin`` refused the folder (an ``indices`` cache file's schema) or changed its version."""
    import pyarrow.fs as pafs

    folder = tmp_path / "ds"
    _save(folder)
    data_files = sorted(p.name for p in folder.glob("data-*.arrow"))
    loaded = datasets.load_from_disk(str(folder))
    loaded.shuffle(seed=1).flatten_indices()  # an `indices: uint64` cache file and a data-schema one
    loaded.map(lambda r: {"y": r["x"] * 2})
    assert len(list(folder.glob("cache-*.arrow"))) >= 2
    local = rd.pin(folder, save=False)
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())  # a FileSystemStore, no network
    remote = rd.pin("ds", filesystem=fs, save=False)
    assert [s.path for s in remote.shards] == data_files
    assert remote.hash == local.hash
    src = rd.ArrowShards("ds", filesystem=fs, unpinned="allow")
    assert len(src) == N
