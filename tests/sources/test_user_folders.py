"""rd never writes into a user's data folder by surprise (issue 13).

After every rd call on a Parquet folder (open unpinned, pin, verify, take) pyarrow, pandas and
Hugging Face ``datasets`` still read the folder and give the same rows; only an explicit
``rd.pin(dir)`` adds a file (the hidden ``.rd-manifest.json``, which those readers skip); a list
of files never pins into its common parent; a read-only folder works.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_data as rd
from resumable_data.sources.files import LEGACY_MANIFEST_NAME, MANIFEST_NAME


def _folder(d: Path) -> pa.Table:
    d.mkdir(parents=True)
    t = pa.table({"id": pa.array(range(60), type=pa.int64()), "text": [f"r{i}" for i in range(60)]})
    pq.write_table(t.slice(0, 30), d / "part-0.parquet", row_group_size=10)
    pq.write_table(t.slice(30), d / "part-1.parquet", row_group_size=10)
    return t


def _listing(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*")):
        h.update(p.relative_to(d).as_posix().encode() + b"\0")
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def _readers_agree(d: Path, t: pa.Table, tmp_path: Path, monkeypatch) -> None:
    assert pq.read_table(d).sort_by("id").to_pylist() == t.to_pylist()
    pd = pytest.importorskip("pandas")
    assert pd.read_parquet(d).sort_values("id").to_dict("records") == t.to_pylist()
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    ds = datasets.load_dataset("parquet", data_dir=str(d), cache_dir=str(tmp_path / "hf" / "ds"))
    assert sorted(ds["train"].to_list(), key=lambda r: r["id"]) == t.to_pylist()


def test_rd_calls_leave_the_folder_readable_and_unchanged(tmp_path, monkeypatch):
    d = tmp_path / "pq"
    t = _folder(d)
    before = _listing(d)
    src = rd.ArrowShards(d)  # unpinned: auto-pinned into the cache
    assert src.pinned and _listing(d) == before
    assert src.take([0, 59, 31]).to_pylist() == t.take([0, 59, 31]).to_pylist()
    src.version.verify("content")
    assert _listing(d) == before
    _readers_agree(d, t, tmp_path, monkeypatch)
    assert rd.ArrowShards(d, unpinned="error").version == src.version  # the cache finds it
    assert rd.DatasetVersion.load(d) == src.version

    pinned = rd.pin(d)  # explicit: the hidden manifest, and only that, appears in the folder
    assert sorted(p.name for p in d.iterdir()) == [MANIFEST_NAME, "part-0.parquet", "part-1.parquet"]
    assert pinned == src.version
    rd.ArrowShards(d).version.verify("content")
    assert rd.ArrowShards(d).take([5]).to_pylist() == t.take([5]).to_pylist()
    _readers_agree(d, t, tmp_path, monkeypatch)


def test_a_file_list_never_pins_into_its_common_parent(tmp_path):
    d = tmp_path / "pq"
    _folder(d)
    before = _listing(tmp_path)
    files = [d / "part-1.parquet", d / "part-0.parquet"]
    v = rd.pin(files)
    assert _listing(tmp_path) == before and v.selection is rd.sources.Selection.FILES
    assert rd.ArrowShards(files, unpinned="error").version == v
    with pytest.raises(rd.ConfigError, match="save='folder'"):
        rd.pin(files, save="folder")


def test_legacy_manifest_name_is_still_read(tmp_path):
    d = tmp_path / "pq"
    _folder(d)
    v = rd.pin(d)
    (d / MANIFEST_NAME).rename(d / LEGACY_MANIFEST_NAME)
    assert rd.ArrowShards(d, unpinned="error").version == v


@pytest.fixture
def read_only(tmp_path):
    d = tmp_path / "ro"
    t = _folder(d)
    for p in d.iterdir():
        p.chmod(0o444)
    d.chmod(0o555)
    if os.access(d, os.W_OK):  # root writes anyway
        d.chmod(0o755)
        pytest.skip("running as root: a 0o555 folder stays writable")
    yield d, t
    d.chmod(stat.S_IRWXU)


def test_a_read_only_folder_works(read_only):
    d, t = read_only
    src = rd.ArrowShards(d)
    assert src.pinned and src.take([1, 40]).to_pylist() == t.take([1, 40]).to_pylist()
    assert rd.pin(d, save="cache") == src.version
    with pytest.raises(rd.ConfigError, match=r"save='cache'"):
        rd.pin(d)  # asked to write into the folder, which it cannot


def test_a_read_only_folder_works_as_root_without_dac_override(tmp_path):
    """As root (where 0o555 stays writable) the read-only test runs again in a subprocess whose
    capabilities lack CAP_DAC_OVERRIDE (``setpriv``), so the check is never only skipped."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("not root (the read-only test runs itself) or no setpriv")
    caps = "-dac_override,-dac_read_search"
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run(["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", sys.executable, "-m",
                        "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--basetemp",
                        str(tmp_path / "bt"), f"{__file__}::test_a_read_only_folder_works"],
                       capture_output=True, text=True, env=env, cwd=root, timeout=300)
    if "Operation not permitted" in r.stderr:
        pytest.skip(f"setpriv cannot drop capabilities here: {r.stderr.strip()[:200]}")
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]


def test_a_hive_partitioned_folder_is_refused_and_the_fix_keeps_its_columns(tmp_path):
    """Partition columns live in ``key=value`` directory names; reading the files alone would drop
    them, so the folder is refused (opening and pinning), nothing is written, and the fix the
    message names gives rows with the column."""
    import glob

    import pyarrow.dataset as pads

    folder = tmp_path / "hive"
    table = pa.table({"x": pa.array(range(40), type=pa.int64()), "year": [2020 + i % 2 for i in range(40)]})
    pq.write_to_dataset(table, folder, partition_cols=["year"])
    before = _listing(folder)
    with pytest.raises(rd.ConfigError, match=r"hive-style partition.*\['year'\].*write_arrow_shards"):
        rd.ArrowShards(folder)
    with pytest.raises(rd.ConfigError, match=r"hive-style partition.*\['year'\]"):
        rd.pin(folder)
    assert _listing(folder) == before
    out = tmp_path / "flat"
    rd.write_arrow_shards(pads.dataset(str(folder), partitioning="hive").to_table(), out, rows_per_batch=1024)
    src = rd.ArrowShards(out, unpinned="allow")
    rows = src.take(list(range(len(src)))).to_pylist()
    assert sorted((r["x"], r["year"]) for r in rows) == [(i, 2020 + i % 2) for i in range(40)]
    files = sorted(glob.glob(str(folder / "*" / "*.parquet")))
    listed = rd.ArrowShards(files, unpinned="allow")  # the opt-out: the files without the column
    assert len(listed) == 40 and "year" not in listed.take([0]).column_names
