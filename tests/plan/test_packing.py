"""Packing as pure functions: window index, segments, assembly; golden vectors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.plan.packing import IGNORE_INDEX, assemble, best_fit_bins, sequence_segments, window_counts


def pack_window(raw_docs, spec):
    """Pack one window of documents fully; returns the assembled rows."""
    raw_len = np.array([len(d) for d in raw_docs], dtype=np.int64)
    lengths = spec.doc_lengths(raw_len)
    count = int(window_counts(lengths, rd.Packing(spec.seq_len, spec.mode, window=len(raw_docs), eos_id=spec.eos_id))[0])
    seg = sequence_segments(lengths, spec, np.arange(count))
    flat = np.array([t for d in raw_docs for t in d], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(raw_len)])
    return assemble(spec, count, seg, flat, offsets, np.arange(len(raw_docs))), lengths


DOCS = st.lists(st.lists(st.integers(1, 999), min_size=1, max_size=40), min_size=1, max_size=30)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(docs=DOCS, seq_len=st.integers(2, 24), mode=st.sampled_from(["concat", "best_fit"]),
       eos=st.sampled_from([None, 0]), mask=st.booleans())
def test_every_token_once_in_document_order_with_correct_labels_and_positions(docs, seq_len, mode, eos, mask):
    spec = rd.Packing(seq_len, mode, eos_id=eos, mask_across_documents=mask)
    out, lengths = pack_window(docs, spec)
    ids, doc, pos, labels = out["input_ids"], out["document_ids"], out["position_ids"], out["labels"]
    for d, raw in enumerate(docs):
        expected = raw + ([eos] if eos is not None else [])
        where = np.argwhere(doc == d)
        order = np.argsort(pos[doc == d], kind="stable")
        assert ids[doc == d][order].tolist() == expected  # every token once, in order
        assert sorted(pos[doc == d].tolist()) == list(range(len(expected)))  # positions restart per document
        for r, c in where:  # the label of a token is the next token of its document
            p = pos[r, c]
            nxt = (r, c + 1) if c + 1 < seq_len else None
            if nxt is not None and doc[nxt] == d and pos[nxt] == p + 1:
                assert labels[r, c] == expected[p + 1]
            elif p + 1 == len(expected) and mask:
                assert labels[r, c] == IGNORE_INDEX  # a document boundary
            elif p + 1 == len(expected) and nxt is not None and doc[nxt] >= 0:
                assert labels[r, c] == ids[nxt]  # unmasked: the boundary's label is the next document's token
    assert (labels[doc < 0] == IGNORE_INDEX).all() and (ids[doc < 0] == spec.pad_id).all()
    assert out["real_tokens"].sum() == lengths.sum()
    if mode == "best_fit":
        assert len(ids) == int(window_counts(lengths, rd.Packing(seq_len, mode, window=10**6))[0])


def test_concat_labels_cross_sequences_within_a_document():
    spec = rd.Packing(4, "concat")
    out, _ = pack_window([[1, 2, 3, 4, 5, 6]], spec)
    assert out["input_ids"].tolist() == [[1, 2, 3, 4], [5, 6, 0, 0]]
    assert out["labels"].tolist() == [[2, 3, 4, 5], [6, -100, -100, -100]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3], [4, 5, 0, 0]]


def test_best_fit_is_best_fit_decreasing():
    spec = rd.Packing(10, "best_fit")
    doc, start, length, bins = best_fit_bins(np.array([6, 5, 4, 3, 2]), spec)
    # 6 -> bin0 (4 left); 5 -> bin1 (5 left); 4 -> bin0 (0 left, the tightest); 3 -> bin1 (2 left); 2 -> bin1
    assert list(zip(bins.tolist(), doc.tolist())) == [(0, 0), (0, 2), (1, 1), (1, 3), (1, 4)]
    doc, start, length, bins = best_fit_bins(np.array([23]), spec)  # an overlong document is split
    assert (start.tolist(), length.tolist()) == ([0, 10, 20], [10, 10, 3])


def test_window_counts_golden_vector():
    """A change here is a schema change: packed positions would move."""
    lengths = np.random.default_rng(7).integers(1, 300, 1000)
    concat = window_counts(lengths, rd.Packing(128, "concat", window=100))
    best = window_counts(lengths, rd.Packing(128, "best_fit", window=100))
    assert concat.tolist() == [-(-int(lengths[i:i + 100].sum()) // 128) for i in range(0, 1000, 100)]
    assert best.tolist() == GOLDEN_BEST_FIT


GOLDEN_BEST_FIT = [126, 117, 129, 119, 120, 123, 113, 131, 121, 119]


def test_efficiency_on_a_realistic_length_distribution():
    """Log-normal document lengths (median ~ 400 tokens): the default window packs tightly."""
    lengths = np.maximum(1, np.random.default_rng(0).lognormal(6.0, 1.0, 20_000).astype(np.int64))
    for mode, goal in [("concat", 0.995), ("best_fit", 0.98)]:
        spec = rd.Packing(2048, mode)
        counts = window_counts(lengths, spec)
        assert lengths.sum() / (counts.sum() * 2048) >= goal, mode


@pytest.mark.parametrize("kwargs, param", [
    (dict(seq_len=1), "seq_len"), (dict(seq_len=8, mode="greedy"), "mode"), (dict(seq_len=8, window=0), "window"),
    (dict(seq_len=8, tokens=""), "tokens"), (dict(seq_len=8, overlong="truncate"), "overlong"),
    (dict(seq_len=8, eos_id=1.5), "eos_id"),
])
def test_bad_specs_are_rejected(kwargs, param):
    with pytest.raises(rd.ConfigError, match=param):
        rd.Packing(**kwargs)


def test_spec_round_trip():
    spec = rd.Packing(64, "best_fit", window=7, eos_id=2, pad_id=1, overlong="error", mask_across_documents=False)
    assert rd.Packing.from_dict(spec.to_dict()) == spec
    with pytest.raises(rd.ResumeError, match="seq_len"):
        rd.Packing.from_dict({**spec.to_dict(), "seq_len": 1})


@pytest.mark.parametrize("mode", ["concat", "best_fit"])
def test_a_document_repeated_back_to_back_is_two_documents(mode):
    """A mixture repeats a small source's record: two adjacent copies share a record id but are two
    documents (labels masked at the seam, positions restart), not one that runs on."""
    spec = rd.Packing(8, mode)  # the record [11, 12, 13] twice
    lengths = spec.doc_lengths(np.array([3, 3]))
    count = int(window_counts(lengths, spec)[0])
    seg = sequence_segments(lengths, spec, np.arange(count))
    out = assemble(spec, count, seg, np.array([11, 12, 13, 11, 12, 13]), np.array([0, 3, 6]), np.array([5, 5]))
    assert out["input_ids"].tolist() == [[11, 12, 13, 11, 12, 13, 0, 0]]
    assert out["labels"].tolist() == [[12, 13, -100, 12, 13, -100, -100, -100]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 0, 0]]
