"""Three small pinned token sources for the mixture tests (ids encode the source: 1000*s + row)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import resumable_data as rd

SIZES = {"web": 120, "code": 60, "math": 11}
BASE = {"web": 1000, "code": 2000, "math": 3000}
WEIGHTS = {"web": 0.5, "code": 0.3, "math": 0.2}


def write_sources(root) -> dict[str, str]:
    out = {}
    for name, n in SIZES.items():
        rng = np.random.default_rng(BASE[name])
        lengths = rng.integers(1, 12, n)
        toks = [list(range(BASE[name] * 100 + 20 * i, BASE[name] * 100 + 20 * i + int(k))) for i, k in enumerate(lengths)]
        table = pa.table({"id": pa.array(np.arange(n) + BASE[name], pa.int64()), "tokens": pa.array(toks, pa.list_(pa.int64()))})
        d = root / name
        rd.write_arrow_shards(table, d, num_shards=2)
        rd.pin(d)
        out[name] = str(d)
    return out


def open_sources(dirs) -> dict[str, rd.ArrowShards]:
    return {name: rd.ArrowShards(d) for name, d in dirs.items()}


def source_of(ids: np.ndarray) -> np.ndarray:
    return np.asarray(ids) // 1000 - 1
