"""The read amplification the read planner projects for read-ahead, without a store: how much of
a dataset the next epoch's first ``lookahead`` steps read, the units 40 consecutive steps read, and
Belady's fetches per unit over one epoch at 100%, 50% and 25% of the dataset (units of equal size).

Run: ``.venv/bin/python -m benchmarks.remote_amplification`` (a few seconds; writes nothing). Data:
an ``id`` column of 65,536 rows (``bench_remote``'s size) and of 524,288 rows (issue 26's), shards
of 8,192 rows in 1,024-row record batches; batch 256, seed 1, window shuffle
(``shuffle_window=10_000``), the same window over read units (``window_units``:
``window_blocks="read_units"``) and sequential; ``lookahead`` 64 (``rd.ReadAhead()``'s default).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa


def main() -> list[dict]:
    import resumable_data as rd
    from resumable_data.plan.reads import belady_misses, read_schedule

    logging.getLogger("resumable_data").setLevel(logging.ERROR)
    out = []
    for n in (65_536, 524_288):
        d = Path(tempfile.mkdtemp(prefix="rd-amplification-")) / "d"
        rd.write_arrow_shards(pa.table({"id": np.arange(n)}), d, num_shards=n // 8192, rows_per_batch=1024)
        src = rd.ArrowShards(d, unpinned="allow")
        starts = src.unit_starts()
        units = len(starts)
        for order, kw in (
            ("window", dict(shuffle=True, shuffle_window=10_000)),
            ("window_units", dict(shuffle=True, shuffle_window=10_000, window_blocks="read_units")),
            ("sequential", {}),
        ):
            ld = rd.DataLoader(src, batch_size=256, seed=1, sharding=rd.Sharding(1, 0), **kw)
            epoch = n // 256
            recs = [np.asarray(ld.step_info(s).records) for s in range(epoch + 64)]
            steps = read_schedule(0, recs[:epoch], starts).steps
            ones = np.ones(units, dtype=np.int64)
            row = {"rows": n, "order": order,
                   "next_epoch_lookahead": len(read_schedule(epoch, recs[epoch:], starts).order) / units,
                   "units_of_40_steps": float(np.mean([len(read_schedule(s, recs[s:s + 40], starts).order)
                                                      for s in range(0, epoch, max(1, epoch // 16))])) / units,
                   **{f"belady_{b}": belady_misses(steps, ones, int(units * b / 100)) / units for b in (100, 50, 25)}}
            out.append(row)
            print(row, flush=True)
    return out


if __name__ == "__main__":
    main()
