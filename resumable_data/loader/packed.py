"""Packed batches: the rows of a packing plan filled with tokens, as torch tensors.

A batch of in-epoch sequence ids is located in the epoch's packing index (window, sequence in
window); each window touched is re-derived from its documents' lengths (the plan order gives
the documents, the offsets-only length index their sizes), and only the documents the requested
sequences overlap are read, in one vectorized ``take``. Output per batch, ``[B, seq_len]``:
``input_ids``, ``labels`` (``IGNORE_INDEX`` = -100 on padding and across documents), ``position_ids`` (restarting
at each document), ``document_ids`` (record id, -1 on padding), ``loss_mask``; and for
variable-length attention kernels ``cu_seqlens`` (int32, over the flattened batch; padding runs
are their own segments; a record repeated back to back is cut where its positions restart) with
``max_seqlen``. A null token id or a ``uint64`` id over ``2**63 - 1`` is refused at the batch that
reads it (``rd.ConfigError``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from resumable_data.loader.collate import list_lengths
from resumable_data.loader.packing_check import check_token_values
from resumable_data.plan.packing import IGNORE_INDEX, assemble, sequence_segments

__all__ = ["pack_sequences", "packed_documents", "packed_tokens", "window_segments"]


def window_segments(stream: Any, epoch: int, sequences: np.ndarray):
    """Yield (selector into ``sequences``, window docs, window doc lengths, segments)."""
    windows, within = stream.index(epoch).locate(sequences)
    for w in np.unique(windows):
        sel = np.flatnonzero(windows == w)
        docs = stream.window_docs(epoch, int(w))
        lengths = stream.spec.doc_lengths(stream.lengths[docs])
        yield sel, docs, lengths, sequence_segments(lengths, stream.spec, within[sel])


def packed_tokens(stream: Any, epoch: int, sequences: np.ndarray) -> int:
    """Real (non-padding) input tokens of ``sequences``, from lengths only (no token reads)."""
    total = 0
    L = stream.spec.seq_len
    for sel, _, _, (rows, _, _, lens, _) in window_segments(stream, epoch, sequences):
        per_row = np.bincount(rows, weights=lens, minlength=len(sel))
        total += int(np.minimum(per_row, L).sum())
    return total


def packed_documents(stream: Any, epoch: int, sequences: np.ndarray) -> np.ndarray:
    """Record ids of the documents ``sequences`` hold, in order of appearance, each once."""
    rows, cols, ids = [], [], []
    for sel, docs, _, (seg_rows, seg_docs, _, _, seg_cols) in window_segments(stream, epoch, sequences):
        rows.append(sel[seg_rows])
        cols.append(seg_cols)
        ids.append(docs[seg_docs])
    if not ids:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.concatenate(cols), np.concatenate(rows)))
    found = np.concatenate(ids)[order]
    _, first = np.unique(found, return_index=True)
    return found[np.sort(first)]


def pack_sequences(stream: Any, source: Any, epoch: int, sequences: np.ndarray) -> tuple[dict[str, Any], int]:
    """The packed batch of ``sequences`` (in-epoch ids), as numpy arrays, and its real-token count."""
    spec = stream.spec
    n = len(sequences)
    parts: dict[str, np.ndarray] = {}
    for sel, docs, _, (rows, seg_docs, starts, lens, cols) in window_segments(stream, epoch, sequences):
        needed = np.unique(seg_docs)
        column = source.take(docs[needed]).column(spec.tokens).combine_chunks()
        offsets = np.concatenate([[0], np.cumsum(list_lengths(column))]).astype(np.int64)
        flat = check_token_values(spec, column.flatten(), docs[needed], offsets)
        local = np.searchsorted(needed, seg_docs)
        out = assemble(spec, len(sel), (rows, local, starts, lens, cols), flat, offsets, docs[needed])
        for key, value in out.items():
            if key not in parts:
                parts[key] = np.empty((n,) + value.shape[1:], dtype=value.dtype if key != "input_ids" else np.int64)
            parts[key][sel] = value
    real = parts.pop("real_tokens")
    doc = parts["document_ids"]
    flat_doc = doc.reshape(-1)
    flat_pos = parts["position_ids"].reshape(-1)
    L = spec.seq_len
    # a segment starts at each row, each record id change, and where a document's positions restart
    # (a record repeated back to back, as an oversampled mixture source gives, is two documents)
    cut = (flat_doc[1:] != flat_doc[:-1]) | ((flat_doc[1:] >= 0) & (flat_pos[1:] != flat_pos[:-1] + 1))
    starts = np.flatnonzero((np.arange(flat_doc.size) % L == 0) | np.concatenate([[True], cut]))
    cu = np.append(starts, flat_doc.size).astype(np.int32)
    batch: dict[str, Any] = {k: np.ascontiguousarray(v) for k, v in parts.items()}
    batch["loss_mask"] = batch["labels"] != IGNORE_INDEX
    batch["cu_seqlens"] = cu
    batch["max_seqlen"] = int(np.diff(cu).max()) if cu.size > 1 else 0
    return batch, int(real.sum())
