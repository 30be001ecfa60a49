"""``make demo``: build a pinned Arrow corpus, interrupt a packed, shuffled, multi-worker loader
at a random step, resume it from its JSON state in a fresh loader, and prove that every batch
after the interruption is bit-identical to an uninterrupted run. The exit code says so.

The corpus needs no network: the Python standard library's own source files, tokenized as bytes
(token = byte + 1, 0 is EOS), written as Arrow IPC shards and pinned. ``--data DIR`` uses your own
pinned directory instead (it needs a ``list<int>`` column, ``--tokens NAME``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import xxhash

import resumable_data as rd

__all__ = ["build_stdlib_corpus", "main"]


def build_stdlib_corpus(directory: Path, max_files: int = 600) -> rd.DatasetVersion:
    """Tokenize the standard library's ``.py`` files as bytes into pinned Arrow shards."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / rd.sources.MANIFEST_NAME).exists():
        return rd.DatasetVersion.load(directory)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 0)[:max_files]
    from tqdm.auto import tqdm

    docs, names = [], []
    for path in tqdm(files, desc="tokenizing the standard library", unit="file", delay=0.5):
        data = np.frombuffer(path.read_bytes(), dtype=np.uint8).astype(np.int32) + 1
        docs.append(data)
        names.append(path.name)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int32)
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(docs)))
    rd.write_arrow_shards(pa.table({"path": pa.array(names), "tokens": tokens}), directory, num_shards=4)
    return rd.pin(directory)


def digest(batch: dict) -> str:
    """xxh3-64 over every tensor's dtype, shape and bytes, in key order."""
    h = xxhash.xxh3_64()
    for key in sorted(batch):
        value = batch[key]
        if hasattr(value, "numpy"):
            arr = value.numpy()
            h.update(f"{key}:{arr.dtype}:{arr.shape}".encode())
            h.update(np.ascontiguousarray(arr).tobytes())
        else:
            h.update(f"{key}:{value!r}".encode())
    return h.hexdigest()


def make_loader(src: rd.ArrowShards, tokens: str, num_workers: int) -> rd.DataLoader:
    return rd.DataLoader(
        src, batch_size=8, shuffle=True, seed=2024, shuffle_window=256, num_workers=num_workers,
        packing=rd.Packing(512, "concat", window=64, tokens=tokens, eos_id=0),
        commit="explicit", accumulation_steps=2,
        **({"persistent_workers": True} if num_workers else {}),
    )


def run(loader: rd.DataLoader, steps: int) -> list[str]:
    """A training loop's view: deliver ``steps`` batches, committing each accumulation window."""
    out: list[str] = []
    while len(out) < steps:
        for batch in loader:
            out.append(digest(batch))
            if loader.microstep_is_last:
                loader.commit(applied=True)
            if len(out) == steps:
                break
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="resumable-data demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="a pinned Arrow directory (default: the stdlib corpus)")
    parser.add_argument("--tokens", default="tokens", help="its list<int> token column")
    parser.add_argument("--steps", type=int, default=120, help="steps in the run (default 120)")
    parser.add_argument("--seed", type=int, default=None, help="picks the interruption step (default: random)")
    parser.add_argument("--workdir", type=Path, default=Path("demo_output"))
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    corpus = args.data or args.workdir / "corpus"
    if args.data is None:
        build_stdlib_corpus(corpus)
    src = rd.ArrowShards(corpus)
    print(f"dataset  {corpus}  {len(src):,} documents, version {src.version.hash[:16]}...")

    reference = run(make_loader(src, args.tokens, num_workers=2), args.steps)
    print(f"uninterrupted run: {len(reference)} steps with 2 workers")

    stop = random.Random(args.seed).randrange(1, args.steps)
    first = make_loader(src, args.tokens, num_workers=2)
    seen = run(first, stop)
    state = first.state_dict()
    state_path = args.workdir / "loader_state.json"
    state_path.parent.mkdir(parents=True, exist_ok=True)
    state_path.write_text(json.dumps(state, indent=1))
    del first  # "preempted": the process that held the loader is gone
    cur = state["cursor"]
    print(f"interrupted at step {stop}: cursor committed={cur['committed']} delivered={cur['delivered']} "
          f"fetched={cur['fetched']} ({len(json.dumps(state))} bytes of JSON in {state_path})")

    resumed = make_loader(src, args.tokens, num_workers=0)
    resumed.load_state_dict(json.loads(state_path.read_text()), on_uncommitted="repeat")
    seen = seen[: cur["committed"]] + run(resumed, args.steps - cur["committed"])
    print(f"resumed with 0 workers ({resumed.recovery_label.value}), repeating "
          f"{cur['delivered'] - cur['committed']} uncommitted batch(es)")

    diverged = next((i for i, (a, b) in enumerate(zip(reference, seen)) if a != b), None)
    ok = diverged is None and len(seen) == len(reference)
    c = resumed.counters
    print(f"counters: {c.microbatches} microbatches, {c.applied_updates} updates, {c.samples} sequences, "
          f"{c.tokens:,} real tokens")
    verdict = "BIT-IDENTICAL" if ok else f"DIVERGED at step {diverged}"
    print(f"every batch after the resume vs the uninterrupted run: {verdict} "
          f"({len(seen)} batch digests compared in order, {time.perf_counter() - t0:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
