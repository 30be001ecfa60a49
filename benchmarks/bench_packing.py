"""Sequence packing: efficiency, throughput, index build cost and resume latency.

Side by side in one run, on the same documents in the same order:
* ``rd.Packing`` concat and best_fit (default window) against a greedy carry-over packer (the
  common hand-written one: a token buffer cut into ``seq_len`` chunks, its tail carried over);
* the per-epoch window index for 10 million documents: time and peak memory (tracemalloc);
* time from ``load_state_dict`` to the first batch at packed sequence 10 and at sequence 10
  million (epoch ~150 of the corpus), against a fresh loader's first batch.
Run: ``python -m benchmarks.bench_packing [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import tracemalloc

import numpy as np
import pyarrow as pa

import resumable_data as rd
from benchmarks._common import timed, write_results
from resumable_data.loader.stream import PackedStream
from resumable_data.plan import OrderSpec, Plan
from resumable_data.plan.packing import window_counts

SEQ_LEN = 2048


def lognormal_lengths(n: int, seed: int = 0) -> np.ndarray:
    """Document lengths from a log-normal fit of web text (median ~ 400 tokens, long tail)."""
    return np.clip(np.random.default_rng(seed).lognormal(6.0, 1.1, n), 8, 32_768).astype(np.int64)


def greedy_carry_over(src: rd.ArrowShards, order: np.ndarray, seq_len: int, batch: int = 8, chunk: int = 256) -> int:
    """The common hand-written packer, as a loader: read documents in order, append them to a
    token buffer, cut ``seq_len + 1`` windows into (input_ids, labels) batches, carry the rest
    over. Its state is the buffer itself: resuming it means saving the buffer or replaying."""
    import torch

    buf = np.empty(0, dtype=np.int64)
    rows, tokens = [], 0
    for i in range(0, len(order), chunk):
        column = src.take(order[i:i + chunk]).column("tokens").combine_chunks()
        buf = np.concatenate([buf, column.flatten().to_numpy().astype(np.int64)])
        while len(buf) >= seq_len + 1:
            rows.append(buf[: seq_len + 1])
            buf = buf[seq_len:]
            if len(rows) == batch:
                block = np.stack(rows)
                _ = torch.from_numpy(block[:, :-1].copy()), torch.from_numpy(block[:, 1:].copy())
                tokens += block[:, :-1].size
                rows = []
    return tokens + len(buf)


def build_corpus(root: str, n_docs: int) -> rd.ArrowShards:
    lengths = lognormal_lengths(n_docs, seed=1)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pa.array(np.random.default_rng(2).integers(1, 50_000, int(lengths.sum())).astype(np.int32))
    table = pa.table({"tokens": pa.ListArray.from_arrays(pa.array(offsets), values)})
    rd.write_arrow_shards(table, root, num_shards=4)
    rd.pin(root)
    return rd.ArrowShards(root)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_known_args(argv)[0]
    res: dict = {}
    os.environ.setdefault("RD_CACHE_DIR", tempfile.mkdtemp(prefix="rd-bench-cache-"))

    # 1. efficiency on a realistic length distribution (lengths only)
    lengths = lognormal_lengths(200_000 if not args.quick else 50_000)
    eff = {}
    for mode in ("concat", "best_fit"):
        counts = window_counts(lengths, rd.Packing(SEQ_LEN, mode))
        eff[mode] = float(lengths.sum() / (counts.sum() * SEQ_LEN))
    n_greedy = -(-int(lengths.sum()) // SEQ_LEN)
    eff["greedy_carry_over"] = float(lengths.sum() / (n_greedy * SEQ_LEN))
    res["efficiency"] = eff

    # 2. index build for 10M documents (global shuffle): time and peak traced memory
    n_index = 10_000_000 if not args.quick else 1_000_000
    big = lognormal_lengths(n_index, seed=3)
    index_res = {}
    for mode in ("concat", "best_fit"):
        plan = Plan(n_index, 8, "bench-index", 0, OrderSpec("global"))
        stream = PackedStream(plan, rd.Packing(SEQ_LEN, mode), big, pinned=False, progress=False)
        tracemalloc.start()
        t0 = time.perf_counter()
        stream.index(0)
        dt = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        index_res[mode] = {"seconds": dt, "peak_bytes": peak, "index_bytes": stream.index(0).cumulative.nbytes,
                           "lengths_bytes": big.nbytes}
    res["index_build"] = {"documents": n_index, **index_res}

    # 3. throughput over real Arrow shards: rd concat / best_fit vs the greedy packer
    with tempfile.TemporaryDirectory() as root:
        src = build_corpus(root, 20_000 if not args.quick else 5_000)
        tput = {}
        for mode in ("concat", "best_fit"):
            loader = rd.DataLoader(src, batch_size=8, packing=rd.Packing(SEQ_LEN, mode), shuffle=True, seed=0)
            len(loader)  # build the epoch index outside the timing

            def run(loader=loader):
                loader.reset()
                for _ in loader:
                    pass
                return loader.counters.tokens

            t = timed(run, repeats=3)
            tput[mode] = {"tokens_per_s": run() / t["median"], **t}
        order = rd.Plan(len(src), 1, src.version.hash, 0, OrderSpec("global")).records(np.arange(len(src)))
        t = timed(lambda: greedy_carry_over(src, order, SEQ_LEN), repeats=3)
        tput["greedy_carry_over"] = {"tokens_per_s": greedy_carry_over(src, order, SEQ_LEN) / t["median"], **t}
        res["throughput"] = tput

        # 4. resume latency at sequence 10 vs 10 million
        spec = rd.Packing(SEQ_LEN, "concat")
        probe = rd.DataLoader(src, batch_size=8, packing=spec, shuffle=True, seed=0)
        per_epoch = probe._stream.index(0).num_sequences
        target = 10_000_000 if not args.quick else 1_000_000
        states = {}
        for seq in (10, target):
            step = seq // 8
            state = probe.state_dict()
            epoch, first = probe._ledger.locate(step)  # setup, not timed
            state["cursor"] = {"committed": step, "delivered": step, "fetched": step}
            state["epoch_base"] = [epoch, first]
            states[seq] = state

        def fresh():
            ld = rd.DataLoader(src, batch_size=8, packing=spec, shuffle=True, seed=0)
            next(iter(ld))

        def resumed(seq):
            ld = rd.DataLoader(src, batch_size=8, packing=spec, shuffle=True, seed=0)
            ld.load_state_dict(states[seq])
            next(iter(ld))

        lat = {"fresh": timed(fresh, repeats=5)}
        for seq in states:
            lat[f"sequence_{seq}"] = timed(lambda seq=seq: resumed(seq), repeats=5)
        res["resume"] = {"sequences_per_epoch": per_epoch, "target": target, **lat}

    r = res["resume"]
    ratio = r[f"sequence_{target}"]["median"] / r["sequence_10"]["median"]
    ib = res["index_build"]
    md = "\n".join([
        f"| packing (seq_len {SEQ_LEN}) | concat | best_fit | greedy carry-over | goal |",
        "|---|---|---|---|---|",
        f"| efficiency (real / all tokens) | {eff['concat']:.2%} | {eff['best_fit']:.2%} | {eff['greedy_carry_over']:.2%} "
        "| >= 99.5% concat, >= 98% best_fit |",
        f"| tokens/s, one core, real Arrow shards | {tput['concat']['tokens_per_s'] / 1e6:.1f} M | "
        f"{tput['best_fit']['tokens_per_s'] / 1e6:.1f} M | {tput['greedy_carry_over']['tokens_per_s'] / 1e6:.1f} M | >= 5 M concat |",
        f"| window index, {ib['documents']:,} documents, s | {ib['concat']['seconds']:.2f} | {ib['best_fit']['seconds']:.2f} | "
        "n/a (no index: resume replays) | < 10 |",
        f"| index peak traced memory / stored index, MB | {ib['concat']['peak_bytes'] / 1e6:.0f} / {ib['concat']['index_bytes'] / 1e6:.2f} | "
        f"{ib['best_fit']['peak_bytes'] / 1e6:.0f} / {ib['best_fit']['index_bytes'] / 1e6:.2f} | | index O(documents / window) |",
        f"| document lengths the loader holds (8 B per document), MB | {ib['concat']['lengths_bytes'] / 1e6:.0f} | "
        f"{ib['best_fit']['lengths_bytes'] / 1e6:.0f} | | |",
        f"| first batch after resume at sequence {target:,} / at sequence 10 | {ratio:.2f}x | | | <= 1.5 |",
        f"| first batch after resume at sequence 10 / fresh start | {r['sequence_10']['median'] / r['fresh']['median']:.2f}x | | | |",
    ])
    res["resume_ratio"] = ratio
    write_results("packing", res, md)
    print(md)
    return res


if __name__ == "__main__":
    main()
