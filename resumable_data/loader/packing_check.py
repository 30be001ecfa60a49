"""A packing spec checked against its source before any batch: the token column, its ids, its documents.

Algorithm. :func:`check_packing` refuses what the packer cannot build from: a dataset other than an
``rd.ArrowShards`` (or ``rd.Mixture``), a ``collate_fn``, ``arrow_collate`` or sampler beside packing
(the packer builds the batch), a token column that is missing or not ``list<integer>``, an
``eos_id``/``pad_id`` that does not fit the column's dtype, an empty document, and (with
``overlong='error'``) a document longer than ``seq_len``. It returns every document's token length,
read from the offsets of the token column.

Guarantee. A packed loader that constructs will not fail on its data at the first batch for any of
these reasons; each refusal is a :class:`rd.ConfigError` naming the first record ids at fault.

Cost. One read of the token column's offsets (O(documents), no token data); the rest is O(1).

At each batch, :func:`check_token_values` refuses the token ids the packer reads that ``input_ids``
(int64) cannot hold: a null inside a token list, a ``uint64`` id of ``2**63`` or more (O(tokens read)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from resumable_data.errors import ConfigError, describe
from resumable_data.plan.packing import Overlong, Packing

__all__ = ["check_packing", "check_token_ids", "check_token_values"]


def check_packing(
    packing: Any,
    dataset: Any,
    collate_fn: Any,
    arrow_collate: Any,
    token_column: Any,
    positional: Any,
) -> np.ndarray:
    """Validate a packing spec against the source before any batch; returns the token lengths."""
    import pyarrow as pa

    from resumable_data.sources import ArrowShards  # sources import pyarrow only
    from resumable_data.sources.mixture import Mixture

    if not isinstance(packing, Packing):
        raise ConfigError(describe("packing", packing, "an rd.Packing", "pass rd.Packing(seq_len=...)"))
    if not isinstance(dataset, (ArrowShards, Mixture)):
        raise ConfigError(
            describe(
                "dataset",
                type(dataset).__name__,
                "an rd.ArrowShards when packing",
                "write the documents as Arrow shards and open them with rd.ArrowShards",
            )
        )
    for name, value in (("collate_fn", collate_fn), ("arrow_collate", arrow_collate), ("sampler", positional)):
        if value is not None:
            raise ConfigError(describe(name, value, "None when packing (the packer builds the batch)", f"drop {name}="))
    if token_column not in (None, packing.tokens):
        raise ConfigError(describe("token_column", token_column, f"None or {packing.tokens!r} when packing", "drop it"))
    names = dataset.schema.names
    if packing.tokens not in names:
        raise ConfigError(
            describe(
                "Packing.tokens",
                packing.tokens,
                f"one of the columns {names}",
                "pass rd.Packing(seq_len, tokens='<the list<int> token column>'), or make a token column from "
                "text with rd.prepare",
            )
        )
    t = dataset.schema.field(packing.tokens).type
    if not ((pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type)):
        raise ConfigError(
            describe(
                "Packing.tokens",
                packing.tokens,
                f"a list<integer> column (it is {t})",
                "tokenize into a list of integer ids",
            )
        )
    check_token_ids(packing, np.dtype(t.value_type.to_pandas_dtype()))
    lengths = dataset.column_lengths(packing.tokens)
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        raise ConfigError(
            describe(
                "documents",
                f"{empty.size} empty, first record ids {empty[:5].tolist()}",
                "documents with at least one token",
                "filter empty documents out before pinning",
            )
        )
    if packing.overlong is Overlong.ERROR:  # both modes: in concat too, a longer document is refused
        long = np.flatnonzero(packing.doc_lengths(lengths) > packing.seq_len)
        if long.size:
            raise ConfigError(
                describe(
                    "overlong",
                    "error",
                    f"no document longer than seq_len={packing.seq_len} "
                    f"({long.size} are, first record ids {long[:5].tolist()})",
                    "use overlong='split', a larger seq_len, or filter them",
                )
            )
    return lengths


def check_token_ids(packing: Packing, dtype: np.dtype) -> None:
    """``eos_id`` and ``pad_id`` become ``input_ids`` values of the token column's dtype: each must fit it
    (numpy would wrap 2**40 to 0 in int32 without a word)."""
    info = np.iinfo(dtype)
    for name, value in (("eos_id", packing.eos_id), ("pad_id", packing.pad_id)):
        if value is not None and not info.min <= value <= info.max:
            raise ConfigError(
                describe(
                    f"Packing.{name}",
                    value,
                    f"a token id that fits the token column's dtype {dtype} ([{info.min}, {info.max}])",
                    f"pass a {name} in that range (a token id of the tokenizer)",
                )
            )


def check_token_values(packing: Packing, values: Any, record_ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The token ids ``values`` (the flattened Arrow list values of the documents ``record_ids``,
    split by ``offsets``) as numpy; a null, a ``uint64`` id over ``2**63 - 1`` or a negative id is
    refused, naming the first record at fault (int64 ``input_ids`` would hold garbage or a wrapped
    id; a negative id indexes no embedding row, and ``-100`` would read as the ignore marker in
    ``labels``). Cost: a null count, then one vectorized ``min`` (signed) or ``max`` (``uint64``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    bad_mask = None
    if values.null_count:
        bad_mask, what = np.asarray(values.is_null()), f"{values.null_count} null token id(s)"
        expected, fix = "no null inside a token list", "drop or fill the nulls (pyarrow.compute.fill_null)"
    elif pa.types.is_uint64(values.type) and len(values) and pc.max(values).as_py() > np.iinfo(np.int64).max:
        big = np.asarray(values) > np.iinfo(np.int64).max
        bad_mask, what = big, f"token id {int(np.asarray(values)[big][0])}"
        expected, fix = (
            "token ids at most 2**63-1 (input_ids are int64)",
            "remap the ids into the tokenizer's vocabulary",
        )
    ids: np.ndarray = np.empty(0, dtype=np.int64)
    if bad_mask is None:
        ids = values.to_numpy(zero_copy_only=False)
        if ids.dtype.kind == "i" and ids.size and ids.min() < 0:
            bad_mask = ids < 0
            what = f"token id {int(ids[bad_mask][0])}"
            expected, fix = (
                "token ids of at least 0 (a negative id indexes no embedding row, and -100 is the "
                "ignore marker in labels)",
                "remap the ids into the tokenizer's vocabulary (pad documents with Packing.pad_id, not in the data)",
            )
    if bad_mask is not None:
        first = int(np.searchsorted(offsets, int(np.flatnonzero(bad_mask)[0]), side="right")) - 1
        raise ConfigError(
            describe(
                "Packing.tokens",
                packing.tokens,
                f"{expected} ({what}, first in record id {int(record_ids[first])})",
                fix,
            )
        )
    return ids
