"""What a source argument resolves to (sources/arrow/resolve.py): a folder without shards and a path
that does not exist are refused with what is there instead and a fix that works when followed."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

import resumable_data as rd


def test_an_empty_folder_says_so_and_the_fix_works(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    with pytest.raises(rd.ConfigError, match=r"^path_or_files=.*it is empty; fix: write the dataset into it"):
        rd.ArrowShards(folder)
    rd.write_arrow_shards(pa.table({"a": [1, 2, 3]}), str(folder))  # the fix
    assert len(rd.ArrowShards(folder, unpinned="allow")) == 3


def test_a_folder_of_csv_names_the_files_and_the_conversion_works(tmp_path):
    folder = tmp_path / "csv"
    folder.mkdir()
    (folder / "data.csv").write_text("id,text\n1,a\n2,b\n")
    (folder / ".hidden").write_text("x")
    with pytest.raises(rd.ConfigError, match=r"it holds 1 file\(s\), none a shard: 'data.csv'; fix: .*read_csv"):
        rd.ArrowShards(folder)
    rd.write_arrow_shards(pacsv.read_csv(folder / "data.csv"), str(folder))  # the fix, as written
    assert rd.ArrowShards(folder, unpinned="allow")[1]["text"] == "b"


def test_a_missing_relative_path_names_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(rd.ConfigError, match=r"nothing exists there \(relative to the working directory") as e:
        rd.ArrowShards("no/such/data")
    assert repr(os.getcwd()) in str(e.value)
    with pytest.raises(rd.ConfigError, match=r"nothing exists there; fix: pass the folder"):
        rd.ArrowShards(tmp_path / "absent")
