"""Column types study of ``bench_loader`` (``--columns``): every Arrow type HF and Parquet produce.

For each column type (one column per dataset, ``records`` rows, values of a realistic size) the
same table is written twice: in Hugging Face's layout (``datasets.Dataset.save_to_disk``: an Arrow
*stream* of 1,000-row record batches; where ``datasets`` has no feature for the type, the same
layout written by pyarrow) and as Parquet (HF's ``to_parquet`` layout: 1,000-row row groups, 8
files). Then, as in ``bench_loader``'s paired ceiling, in one process and in alternating rounds:

* ``rd``: ``rd.DataLoader(rd.ArrowShards(folder), batch_size=256, shuffle=True, seed=0)``, 0 workers,
  default collate (numbers become tensors, anything else Python lists);
* ``ceiling``: the same record ids gathered by pyarrow's ``Table.take`` on a one-chunk memory-mapped
  copy of the same column, plus the same collate (``arrow_to_tensors``), in a bare loop;
* ``gather``: ``ArrowShards.take`` (rd's gather alone) against ``Table.take`` alone: the stricter
  figure, free of the collate's cost.

Ratios are per round (ceiling time / rd time: > 1 means rd is faster), median over rounds, after
``WARM`` batches (rd validates each record batch once, before its first use: a one-time cost the
bare ceiling does not pay). rd reads each round's steps first, then the ceiling reads the same ids
from its own file: each pays its own first page touches.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.data import DATA

BATCH = 256
WARM = 20
HF_ROWS = 1000
FILES = 8


def _column(kind: str, n: int, rng: np.random.Generator) -> pa.Array | pa.ChunkedArray:
    """The column ``kind`` of ``n`` records (the sizes a real dataset of that kind has)."""
    words = np.array(["the", "a", "data", "loader", "résumé", "token", "vector", "shard", "epoch", "naïve"])

    def text(k: int, lo: int, hi: int) -> list[str]:
        lens = rng.integers(lo, hi, k)
        pool = words[rng.integers(0, len(words), int(lens.sum()))]
        out, at = [], 0
        for m in lens:
            out.append(" ".join(pool[at:at + m]))
            at += m
        return out

    def lists(k: int, lo: int, hi: int, dtype) -> tuple[np.ndarray, np.ndarray]:
        lens = rng.integers(lo, hi, k)
        off = np.zeros(k + 1, dtype=np.int64)
        np.cumsum(lens, out=off[1:])
        return off, rng.integers(0, 50_000, int(off[-1])).astype(dtype)

    if kind == "fixed_size_list<float32>[16]":
        return pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16, dtype=np.float32)), 16)
    if kind == "list<int32> (tokens)":
        off, v = lists(n, 16, 257, np.int32)
        return pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), pa.array(v))
    if kind == "large_list<int64>":
        off, v = lists(n, 16, 257, np.int64)
        return pa.LargeListArray.from_arrays(pa.array(off), pa.array(v))
    if kind == "list<list<int32>>":
        inner_off, v = lists(n * 4, 4, 33, np.int32)
        inner = pa.ListArray.from_arrays(pa.array(inner_off.astype(np.int32)), pa.array(v))
        return pa.ListArray.from_arrays(pa.array(np.arange(0, n * 4 + 1, 4, dtype=np.int32)), inner)
    if kind == "string":
        return pa.array(text(n, 20, 120))
    if kind == "large_string":
        return pa.array(text(n, 20, 120), type=pa.large_string())
    if kind == "struct<bytes: binary, path: string> (HF Image)":
        chunks = []  # pieces of 100,000 images: a binary array's 32-bit offsets end at 2 GiB
        for start in range(0, n, 100_000):
            m = min(100_000, n - start)
            sizes = rng.integers(1_000, 4_000, m)
            blob = rng.bytes(int(sizes.sum()))
            off = np.zeros(m + 1, dtype=np.int32)
            np.cumsum(sizes, out=off[1:])
            data = pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(off), pa.py_buffer(blob)])
            paths = pa.array([f"images/{i:08d}.png" for i in range(start, start + m)])
            chunks.append(pa.StructArray.from_arrays([data, paths], names=["bytes", "path"]))
        return pa.chunked_array(chunks)
    if kind == "struct<label: int64, score: float32, name: string>":
        return pa.StructArray.from_arrays(
            [pa.array(rng.integers(0, 1000, n)), pa.array(rng.random(n, dtype=np.float32)),
             pa.array(text(n, 1, 4))], names=["label", "score", "name"])
    if kind == "dictionary<int32, string>":
        return pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 10, n).astype(np.int32)),
                                              pa.array([f"class-{i}" for i in range(10)]))
    if kind == "timestamp[us]":
        return pa.array(rng.integers(0, 2 * 10**15, n), type=pa.timestamp("us"))
    if kind == "bool":
        return pa.array(rng.random(n) < 0.5)
    if kind == "string with nulls":
        t = text(n, 20, 120)
        return pa.array([None if i % 10 == 0 else s for i, s in enumerate(t)])
    raise ValueError(kind)


KINDS = ["fixed_size_list<float32>[16]", "list<int32> (tokens)", "large_list<int64>", "list<list<int32>>",
         "string", "large_string", "struct<bytes: binary, path: string> (HF Image)",
         "struct<label: int64, score: float32, name: string>", "dictionary<int32, string>", "timestamp[us]",
         "bool", "string with nulls"]


def _slug(kind: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in kind.split(" (")[0])[:40]


def build(kind: str, n: int) -> dict:
    """Folders for ``kind`` (built once under ``benchmarks/data/columns-<n>/``)."""
    import resumable_data as rd

    base = DATA / f"columns-{n}" / _slug(kind)
    hf, parquet, one = base / "hf", base / "parquet", base / "onechunk.arrow"
    how = (base / "how.txt").read_text() if (base / "how.txt").is_file() else None
    if how is None:
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        table = pa.table({"col": _column(kind, n, np.random.default_rng(0))})
        try:
            import datasets

            datasets.disable_progress_bars()
            datasets.Dataset(table).save_to_disk(str(hf), num_shards=FILES)
            saved = pa.ipc.open_stream(str(next(hf.glob("*.arrow")))).schema.field("col").type
            if saved != table.schema.field("col").type:
                raise TypeError(f"datasets writes it as {saved}")
            how = "datasets.save_to_disk"
        except Exception as e:  # a type datasets has no feature for: the same layout by pyarrow
            shutil.rmtree(hf, ignore_errors=True)
            hf.mkdir()
            rows = -(-n // FILES)
            for k in range(FILES):
                part = table.slice(k * rows, rows)
                with pa.OSFile(str(hf / f"data-{k:05d}-of-{FILES:05d}.arrow"), "wb") as sink, \
                        pa.ipc.new_stream(sink, table.schema) as w:
                    for b in part.to_batches(max_chunksize=HF_ROWS):
                        w.write_batch(b)
            how = f"pyarrow stream, 1,000-row batches ({e})"
        parquet.mkdir()
        rows = -(-n // FILES)
        for k in range(FILES):
            pq.write_table(table.slice(k * rows, rows), parquet / f"part-{k:05d}.parquet", row_group_size=HF_ROWS)
        with pa.OSFile(str(one), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_batch(table.combine_chunks().to_batches()[0])
        (base / "how.txt").write_text(how)
    from resumable_data.sources.files import MANIFEST_NAME

    for d in (hf, parquet):
        if not (d / MANIFEST_NAME).is_file():
            rd.pin(d)
    return {"hf": hf, "parquet": parquet, "one": one, "how": how}


def measure(kind: str, n: int, layout: str, batches: int, rounds: int, warm: int = WARM) -> dict:
    """Paired rounds of rd vs the ceiling (and rd's gather vs ``Table.take``) for one layout."""
    import resumable_data as rd
    from resumable_data.loader.collate import arrow_to_tensors

    paths = build(kind, n)
    table = pa.ipc.open_file(pa.memory_map(str(paths["one"]), "r")).read_all()
    src = rd.ArrowShards(paths[layout])
    loader = rd.DataLoader(src, batch_size=BATCH, shuffle=True, seed=0)
    plan = loader.plan
    it = iter(loader)
    for _ in range(warm):  # every record batch touched is validated once (a one-time cost)
        next(it)
    step = warm
    wall: dict[str, list[float]] = {k: [] for k in ("rd", "ceil", "take", "src")}
    cpu: dict[str, list[float]] = {k: [] for k in wall}

    def timed(name: str, fn) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall[name].append(time.perf_counter() - t0)
        cpu[name].append(time.process_time() - c0)

    for _ in range(rounds):
        timed("rd", lambda: [next(it) for _ in range(batches)])
        ids = [plan.records(np.arange(*plan.step_span(s))) for s in range(step, step + batches)]
        step += batches
        timed("ceil", lambda: [arrow_to_tensors(table.take(i)) for i in ids])
        timed("take", lambda: [table.take(i) for i in ids])
        timed("src", lambda: [src.take(i) for i in ids])
    t_rd, t_ceil, t_take, t_src = wall["rd"], wall["ceil"], wall["take"], wall["src"]
    plan_kinds = [g.kind if g is not None else "fallback" for g in src._plan()] if layout == "hf" else ["(row groups)"]
    return {
        "kind": kind, "layout": layout, "written_by": paths["how"] if layout == "hf" else "pyarrow.parquet, 1,000-row row groups",
        "gather_path": plan_kinds[0],
        "rd_samples_per_s": batches * BATCH / statistics.median(t_rd),
        "ceiling_samples_per_s": batches * BATCH / statistics.median(t_ceil),
        "vs_ceiling": statistics.median([c / r for c, r in zip(t_ceil, t_rd)]),
        "gather_vs_take": statistics.median([a / b for a, b in zip(t_take, t_src)]),
        # CPU time of this process (0 workers: all of rd's work): robust to being descheduled
        "cpu_vs_ceiling": statistics.median([c / r for c, r in zip(cpu["ceil"], cpu["rd"])]),
        "cpu_gather_vs_take": statistics.median([a / b for a, b in zip(cpu["take"], cpu["src"])]),
        "take_us": statistics.median(t_take) / batches * 1e6, "rd_take_us": statistics.median(t_src) / batches * 1e6,
        "batches": batches, "rounds": rounds,
    }


def run(n: int, batches: int, rounds: int, parquet_batches: int) -> list[dict]:
    out = []
    for kind in KINDS:
        for layout in ("hf", "parquet"):
            # Parquet: a batch touches ~200 row groups, each decoded on first use (20 warm-up batches)
            r = measure(kind, n, layout, batches, rounds) if layout == "hf" else \
                measure(kind, n, layout, parquet_batches, 3, warm=20)
            print(f"[columns] {kind} / {layout}: rd {r['rd_samples_per_s']:,.0f} samples/s, vs ceiling "
                  f"{r['vs_ceiling']:.2f}x, gather vs take {r['gather_vs_take']:.2f}x ({r['gather_path']})", flush=True)
            out.append(r)
    return out


def markdown(rows: list[dict], n: int) -> str:
    lines = [f"# Column types: rd vs the ceiling, per Arrow type ({n:,} records, batch {BATCH}, 0 workers, shuffled)", "",
             "Each row: one column of that type. `vs ceiling`: rd.DataLoader (default collate) against "
             "pyarrow's one-chunk `Table.take` + the same collate on the same ids, alternating rounds in one "
             "process (median of per-round ratios; > 1: rd faster). `gather vs take`: `ArrowShards.take` "
             "against `Table.take` alone. HF layout: Arrow stream, 1,000-row record batches; Parquet: "
             "1,000-row row groups.", "",
             "`cpu`: the same ratios of this process's CPU time (robust to the process being descheduled "
             "on a loaded machine).", "",
             "| column type | layout | gather path | rd samples/s | ceiling samples/s | vs ceiling | gather vs take "
             "| vs ceiling, cpu | gather vs take, cpu |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['layout']} | {r['gather_path']} | {r['rd_samples_per_s']:,.0f} | "
                     f"{r['ceiling_samples_per_s']:,.0f} | {r['vs_ceiling']:.2f}x | {r['gather_vs_take']:.2f}x | "
                     f"{r['cpu_vs_ceiling']:.2f}x | {r['cpu_gather_vs_take']:.2f}x |")
    return "\n".join(lines) + "\n"


IMAGE = "struct<bytes: binary, path: string> (HF Image)"
_BUDGET_CHILD = r"""
import json, sys
from resumable_data.sources.decoded_units import process_units
if sys.argv[1] != "default":
    process_units().reserve(int(sys.argv[1]))  # what rd.ArrowShards(..., decoded_cache_bytes=N) asks for
from benchmarks import loader_columns as lc
r = lc.measure(lc.IMAGE, int(sys.argv[2]), "parquet", 10, 3, warm=20)
print(json.dumps(r))
"""


def image_budget(n: int, budget: int, rounds: int) -> str:
    """The HF ``Image`` column as Parquet (global shuffle) at the default decoded-unit budget and at
    ``budget``, each round a fresh process per budget (alternating order): the column whose decoded
    row groups exceed the default budget."""
    import json
    import os
    import subprocess
    import sys

    from benchmarks._common import write_results

    build(IMAGE, n)
    root = str(Path(__file__).resolve().parents[1])
    runs: dict[str, list[dict]] = {"default": [], str(budget): []}
    for r in range(rounds):
        for b in list(runs) if r % 2 == 0 else list(runs)[::-1]:
            env = dict(os.environ, PYTHONPATH=root)
            got = subprocess.run([sys.executable, "-c", _BUDGET_CHILD, b, str(n)], env=env, capture_output=True,
                                 text=True, cwd=root)
            if got.returncode:
                raise SystemExit(got.stderr[-3000:])
            runs[b].append(json.loads(got.stdout.strip().splitlines()[-1]))
            print(b, {k: runs[b][-1][k] for k in ("rd_samples_per_s", "vs_ceiling", "cpu_vs_ceiling")}, flush=True)
    lines = [f"# HF Image column as Parquet, global shuffle: decoded-unit budget ({n:,} records, batch {BATCH}, "
             f"0 workers, {rounds} fresh processes per budget)", "",
             "| decoded_cache_bytes | rd samples/s | ceiling samples/s | vs ceiling | vs ceiling, cpu |",
             "|---|---:|---:|---:|---:|"]
    for b, rs in runs.items():
        med = {k: statistics.median(x[k] for x in rs) for k in ("rd_samples_per_s", "ceiling_samples_per_s",
                                                                 "vs_ceiling", "cpu_vs_ceiling")}
        lines.append(f"| {b} | {med['rd_samples_per_s']:,.0f} | {med['ceiling_samples_per_s']:,.0f} | "
                     f"{med['vs_ceiling']:.3f}x | {med['cpu_vs_ceiling']:.3f}x |")
    md = "\n".join(lines) + "\n"
    write_results("columns_image_budget", {"records": n, "budget": budget, "runs": runs}, md)
    return md


_PARQUET_CHILD = r"""
import json, sys
from benchmarks import loader_columns as lc
import resumable_data
r = lc.measure(sys.argv[1], int(sys.argv[2]), "parquet", 10, 5, warm=20)
r["package"] = resumable_data.__file__
print(json.dumps(r))
"""


def parquet_before_after(
    before: str, n: int, rounds: int, kinds: list[str] | None = None, out: str = "columns_parquet"
) -> str:
    """Every column type (or those of ``kinds``) as Parquet (1,000-row row groups, global shuffle),
    the package at ``before`` (a checkout of an older commit) against this one, each measure a
    fresh process, the order alternating per round; the same benchmark code (this tree's)
    measures both. Written to ``benchmarks/results/<name>.md``."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from benchmarks._common import write_results

    root = str(Path(__file__).resolve().parents[1])
    shadow = tempfile.mkdtemp(prefix="rd-before-")  # only the package comes from ``before``
    os.symlink(os.path.join(os.path.abspath(before), "resumable_data"), os.path.join(shadow, "resumable_data"))
    # the child's first path entry is its working directory: the shadow's for ``before``
    trees = {"before": (f"{shadow}{os.pathsep}{root}", shadow), "after": (root, root)}
    runs: dict[str, dict[str, list[dict]]] = {k: {"before": [], "after": []} for k in kinds or KINDS}
    for kind in runs:
        build(kind, n)
        for r in range(rounds):
            for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                path, cwd = trees[name]
                got = subprocess.run([sys.executable, "-c", _PARQUET_CHILD, kind, str(n)],
                                     env=dict(os.environ, PYTHONPATH=path), capture_output=True, text=True, cwd=cwd)
                if got.returncode:
                    raise SystemExit(got.stderr[-3000:])
                runs[kind][name].append(json.loads(got.stdout.strip().splitlines()[-1]))
                want = os.path.join(shadow if name == "before" else root, "resumable_data")
                if not runs[kind][name][-1]["package"].startswith(want):  # the other tree's package was measured
                    raise SystemExit(f"{name}: measured {runs[kind][name][-1]['package']}, expected {want}")
            print(kind, {k: round(v[-1]["cpu_vs_ceiling"], 3) for k, v in runs[kind].items()}, flush=True)
    lines = [f"# Column types as Parquet (1,000-row row groups, {n:,} records, global shuffle, batch {BATCH}, "
             f"0 workers): before vs after, CPU ratio to the ceiling", "",
             f"`python -m benchmarks.loader_columns --parquet-before {before} --rounds {rounds}"
             + "".join(f" --kind '{k}'" for k in kinds or []) + f"{'' if out == 'columns_parquet' else ' --name ' + out}`"
             + ": per type, "
             f"{rounds} fresh processes each for the package at `before` and this one, alternating; each runs "
             "`measure(kind, n, 'parquet', 10, 5, warm=20)`; medians over the processes.", "",
             "| column type | before: CPU vs ceiling | after: CPU vs ceiling | before: rd samples/s "
             "| after: rd samples/s | after / before (rd samples/s) |",
             "|---|---:|---:|---:|---:|---:|"]
    for kind, got in runs.items():
        med = {k: {m: statistics.median(x[m] for x in v) for m in ("cpu_vs_ceiling", "rd_samples_per_s")}
               for k, v in got.items()}
        b, a = med["before"], med["after"]
        lines.append(f"| {kind} | {b['cpu_vs_ceiling']:.2f}x | {a['cpu_vs_ceiling']:.2f}x | "
                     f"{b['rd_samples_per_s']:,.0f} | {a['rd_samples_per_s']:,.0f} | "
                     f"{a['rd_samples_per_s'] / b['rd_samples_per_s']:.1f}x |")
    md = "\n".join(lines) + "\n"
    load = os.getloadavg()
    md += f"\nLoad average at the end of the run: {load[0]:.1f} (1 min), {load[1]:.1f} (5 min), {load[2]:.1f} (15 min).\n"
    write_results(out, {"records": n, "before": before, "runs": runs, "load_at_end": load}, md)
    return md


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="the HF Image column as Parquet at two decoded-unit budgets; "
                                 "with --parquet-before, every column type as Parquet before vs after a change")
    ap.add_argument("--image-budget", type=int, default=2_000_000_000)
    ap.add_argument("--parquet-before", metavar="TREE", help="a checkout of the commit to compare with")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kind", action="append", choices=KINDS, help="with --parquet-before: only this column type (repeatable)")
    ap.add_argument("--name", default="columns_parquet", help="with --parquet-before: the results file's name")
    a = ap.parse_args()
    if a.parquet_before:
        print(parquet_before_after(a.parquet_before, a.records, a.rounds, a.kind, a.name))
    else:
        print(image_budget(a.records, a.image_budget, a.rounds))
