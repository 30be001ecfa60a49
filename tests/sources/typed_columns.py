"""A table holding every Arrow type Hugging Face ``datasets`` and Parquet produce, nulls at every
level, and the gather path each column takes over memory-mapped shards (shared by the gather tests)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["FAST_KINDS", "types_table"]


def types_table(n: int, seed: int = 11) -> pa.Table:
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 6, n)
    words = ["", "a", "bé", "word", "ünïcode", "x" * 40]
    img = pa.StructArray.from_arrays(
        [pa.array([rng.bytes(int(k)) for k in rng.integers(0, 50, n)], type=pa.binary()),
         pa.array([f"img/{i}.png" for i in range(n)])], names=["bytes", "path"])
    return pa.table({
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16, dtype=np.float32)), 16),
        "vec_bool": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 3) < 0.5), 3),
        "vec_str": pa.FixedSizeListArray.from_arrays(pa.array([words[k] for k in rng.integers(0, 6, n * 2)]), 2),
        "text": pa.array([words[k] * int(m) for k, m in zip(rng.integers(0, 6, n), rng.integers(0, 4, n))]),
        "ltext": pa.array([words[k] for k in rng.integers(0, 6, n)], type=pa.large_string()),
        "raw": pa.array([rng.bytes(int(k)) for k in rng.integers(0, 9, n)], type=pa.large_binary()),
        "image": img,
        "big": pa.array([list(range(int(k))) for k in lens], type=pa.large_list(pa.int64())),
        "nested": pa.array([[list(range(int(j))) for j in rng.integers(0, 4, int(k))] for k in lens],
                           type=pa.list_(pa.list_(pa.int32()))),
        "strs": pa.array([[words[j] for j in rng.integers(0, 6, int(k))] for k in lens],
                         type=pa.list_(pa.string())),
        "recs": pa.array([[{"a": int(j), "b": words[j]} for j in rng.integers(0, 6, int(k))] for k in lens],
                         type=pa.list_(pa.struct([("a", pa.int16()), ("b", pa.string())]))),
        "label": pa.array([words[k] for k in rng.integers(0, 6, n)]).dictionary_encode(),
        "when": pa.array(rng.integers(0, 10**12, n), type=pa.timestamp("us", tz="UTC")),
        "day": pa.array(rng.integers(0, 10**4, n).astype(np.int32), type=pa.date32()),
        "half": pa.array(rng.random(n).astype(np.float16)),
        "flag": pa.array(rng.random(n) < 0.3),
        "opt_text": pa.array([None if i % 7 == 0 else words[i % 6] for i in range(n)]),
        # nulls at every level (only some record batches hold any: rows 0..249 of each 500)
        "opt_int": pa.array([None if i % 500 < 250 and i % 3 == 0 else i for i in range(n)], type=pa.int32()),
        "opt_flag": pa.array([None if i % 11 == 0 else bool(i % 2) for i in range(n)]),
        "opt_vec": pa.array([None if i % 13 == 0 else [float(i), None if i % 4 == 0 else 0.5] for i in range(n)],
                            type=pa.list_(pa.float64(), 2)),
        "opt_items": pa.array([None if i % 9 == 0 else [None if j % 3 == 0 else j for j in range(int(k))]
                               for i, k in enumerate(lens)], type=pa.list_(pa.int64())),
        "opt_rec": pa.array([None if i % 5 == 0 else {"a": None if i % 2 else i, "b": words[i % 6]} for i in range(n)],
                            type=pa.struct([("a", pa.int16()), ("b", pa.string())])),
        "opt_label": pa.array([None if i % 6 == 0 else words[i % 6] for i in range(n)]).dictionary_encode(),
    })


FAST_KINDS = {"vec": "fixed_list", "vec_bool": "fixed_list", "vec_str": "fixed_list", "text": "bytes",
              "ltext": "bytes", "raw": "bytes", "image": "struct", "big": "list", "nested": "list",
              "strs": "list", "recs": "list", "label": "dictionary", "when": "fixed", "day": "fixed",
              "half": "fixed", "flag": "bool", "opt_text": "bytes", "opt_int": "fixed", "opt_flag": "bool",
              "opt_vec": "fixed_list", "opt_items": "list", "opt_rec": "struct", "opt_label": "dictionary"}
