"""rd with read-ahead against LitData and MosaicML Streaming, over the same S3 server at 30 ms.

Run: ``benchmarks/peers/setup_remote_peers.sh`` once (the peers' own venvs, CPU torch), then
``.venv/bin/python -m benchmarks.bench_remote_peers [--rows N] [--rounds R] [--latency-ms MS]``.

The same rows as :mod:`benchmarks.bench_remote` (``--rows``, default 65,536, of 256-512 int32 tokens
and an id), written by each tool's own writer into objects of about the same size (rd: Arrow IPC
shards of 8,192 rows in 1,024-row record batches, ~12.6 MB; LitData ``BinaryWriter`` and Streaming
``MDSWriter`` chunks of 12 MiB), uploaded to one moto server and read through
:class:`benchmarks.s3_proxy.S3Proxy` adding ``--latency-ms`` to every request. Batch 256; 0 and 2
workers; sequential and shuffled, each tool's own shuffle: rd ``shuffle_window=10_000`` (its order
for object stores), LitData ``shuffle=True`` (chunk order shuffled, samples within each chunk
shuffled), Streaming ``shuffle=True`` (its default ``py1e`` algorithm). rd reads with
``rd.ReadAhead(unit=...)`` for each ``--rd-units`` value (default ``auto,record_batch,shard``):
``rd`` is ``rd.ReadAhead()`` at its defaults (``unit=rd.ReadUnit.AUTO``; the unit it resolved to
is the ``rd chose`` column), ``rd_record_batch`` one ranged GET per record batch, ``rd_shard``
whole shard objects (as the peers read whole chunks); ``--rd-lookahead`` (default ``default``,
``rd.ReadAhead()``'s) times each of them at other ``lookahead=`` values too (``rd@128``: a window
of 128 steps; ``rd@bytes``: ``lookahead=None``, the window sized by bytes). ``--peers`` picks the peers. moto and the proxy run in a process
of their own (``--no-store-process``: in the benchmark's process, where their threads share the
GIL with rd's loader, a handicap the peers' subprocesses do not have). Each peer runs as a
subprocess of its own venv's python
(:mod:`benchmarks.peers.remote_peer`; its interpreter start and imports are outside the timing)
with a fresh local cache per run; in each round the three tools run one after the other for each
case (interleaved). Timed: one epoch's batches after the first (the steady state); the first
batch's time is reported apart. ``rd / peer``: median over rounds of the per-round ratio of those
rates; ``whole epoch``: the same ratio for the whole epoch, first batch included (LitData waits for
a whole chunk before its first sample).

A peer whose venv is missing is skipped with a message. Writes ``benchmarks/results/remote_peers.json``
and ``remote_peers.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._common import write_results
from benchmarks.bench_remote import BATCH, ROWS_PER_BATCH, ROWS_PER_SHARD, build_table, loader, run, s3
from benchmarks.s3_proxy import S3Proxy

PEERS = ("litdata", "streaming")
BUCKET = "peers"
ORDERS = {"sequential": "sequential", "shuffled": "window"}  # this benchmark's name -> bench_remote's order


def peer_python(name: str) -> Path | None:
    py = Path(f"/tmp/venv-{name}/bin/python")
    return py if py.exists() else None


def peer(name: str, *args: str, attempts: int = 2) -> dict:
    """One run of a peer's script; a run that fails is run again once (said on stdout), then raised."""
    script = Path(__file__).parent / "peers" / "remote_peer.py"
    for attempt in range(attempts):
        out = subprocess.run([str(peer_python(name)), str(script), *args], capture_output=True, text=True, timeout=900)
        if out.returncode == 0:
            return json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name} {args[0]} failed (attempt {attempt + 1} of {attempts}): {out.stderr.strip()[-300:]}", flush=True)
    raise RuntimeError(f"{name} {args[0]} failed {attempts} times:\n{out.stderr[-3000:]}")


class StoreProcess:
    """moto's server on ``port`` and an :class:`S3Proxy` adding ``latency_s`` in front of it, in a child
    process (the latency applies from the start: uploads go to moto directly)."""

    def __init__(self, port: int, latency_s: float) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        ours, theirs = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(port, latency_s, theirs, self._stop), daemon=True)
        self._proc.start()
        self.endpoint = ours.recv()

    def close(self) -> None:
        self._stop.set()
        self._proc.join(10)

    def stop(self) -> None:
        self.close()


def _serve(port: int, latency_s: float, conn, stop) -> None:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    proxy = S3Proxy(f"127.0.0.1:{port}", latency_s)
    conn.send(proxy.endpoint)
    stop.wait()
    proxy.close()
    server.stop()


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=65_536)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=30.0)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--rd-units", default="auto,record_batch,shard",
                    help="rd.ReadUnit values rd reads with (rd: auto, the default; rd_<unit> for the others)")
    ap.add_argument("--rd-lookahead", default="default",
                    help="rd.ReadAhead(lookahead=...) values, comma-separated: 'default' (rd.ReadAhead()'s), a step "
                         "count or 'bytes' (None: the window sized by bytes); each is timed with each --rd-units "
                         "value ('@N' or '@bytes' in the tool's name)")
    ap.add_argument("--store-process", action=argparse.BooleanOptionalAction, default=True,
                    help="run moto and the latency proxy in a process of their own (default): in rd's process "
                         "they share its GIL, which the peers' subprocesses do not")
    ap.add_argument("--rd-concurrency", default="16",
                    help="rd.ReadAhead(concurrency=...) values, comma-separated (other than 16: '/cN' in the name)")
    ap.add_argument("--peers", default=",".join(PEERS), help="the peers to run (litdata,streaming)")
    ap.add_argument("--results", default="remote_peers", help="name of the results files")
    args = ap.parse_args(argv)
    from moto.server import ThreadedMotoServer

    import resumable_data as rd

    wanted = [p for p in args.peers.split(",") if p]
    peers = [p for p in wanted if peer_python(p)]
    for p in wanted:
        if p not in peers:
            print(f"{p}: /tmp/venv-{p} is missing, skipped (run benchmarks/peers/setup_remote_peers.sh)", flush=True)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    if args.store_process:  # moto and the proxy in a process of their own, as the peers' reads are
        store = StoreProcess(port, args.latency_ms / 1e3)
        server = proxy = store
        endpoint = store.endpoint
    else:
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        proxy = S3Proxy(f"127.0.0.1:{port}")
        endpoint = proxy.endpoint
    direct_url, proxy_url = f"http://127.0.0.1:{port}", f"http://{endpoint}"
    direct, fs = s3(f"127.0.0.1:{port}"), s3(endpoint)
    results: list[dict] = []
    try:
        local = Path(tempfile.mkdtemp(prefix="rd-bench-peers-")) / "ipc"
        rd.write_arrow_shards(build_table(args.rows), local, num_shards=max(1, args.rows // ROWS_PER_SHARD),
                              rows_per_batch=ROWS_PER_BATCH)
        rd.pin(local)
        direct.create_dir(BUCKET)
        prefix = f"{BUCKET}/rd"
        for p in sorted(local.iterdir()):
            with direct.open_output_stream(f"{prefix}/{p.name}") as f:
                f.write(p.read_bytes())
        rd.pin(prefix, filesystem=direct)
        for name in peers:
            print(name, "write", peer(name, "write", "--tool", name, "--endpoint", direct_url, "--bucket", BUCKET,
                                      "--prefix", name, "--rows", str(args.rows)), flush=True)
        if not args.store_process:
            proxy.latency_s = args.latency_ms / 1e3
        steps = args.rows // BATCH - 1
        rds = {  # tool -> (unit, lookahead, concurrency)
            ("rd" if u == "auto" else f"rd_{u}") + ("" if la == "default" else f"@{la}")
            + ("" if c == "16" else f"/c{c}"):
            (rd.ReadUnit(u), rd.ReadAhead().lookahead if la == "default" else None if la == "bytes" else int(la), int(c))
            for u in args.rd_units.split(",") for la in args.rd_lookahead.split(",")
            for c in args.rd_concurrency.split(",")
        }
        for workers in (int(w) for w in args.workers.split(",")):
            for order, rd_order in ORDERS.items():
                rates: dict[str, list[float]] = {t: [] for t in (*rds, *peers)}
                firsts: dict[str, list[float]] = {t: [] for t in (*rds, *peers)}
                epochs: dict[str, list[float]] = {t: [] for t in (*rds, *peers)}  # samples/s, first batch included
                chose: set[str] = set()  # what rd.ReadUnit.AUTO resolved to (one value: the rule is pure)
                for _ in range(args.rounds):
                    for tool, (unit, lookahead, conc) in rds.items():
                        ld = loader(rd.ArrowShards(prefix, filesystem=fs), rd_order, workers,
                                    rd.ReadAhead(unit=unit, lookahead=lookahead, concurrency=conc))
                        if unit is rd.ReadUnit.AUTO:
                            chose.add(ld.read_ahead.unit.value)
                        first, t, ids = run(ld, steps)
                        del ld
                        assert len(ids) == (steps + 1) * BATCH
                        rates[tool].append(steps * BATCH / t)
                        firsts[tool].append(first)
                        epochs[tool].append(len(ids) / (first + t))
                    for name in peers:
                        flags = ["--shuffle"] if order == "shuffled" else []
                        r = peer(name, "read", "--tool", name, "--endpoint", proxy_url, "--bucket", BUCKET,
                                 "--prefix", name, "--workers", str(workers), *flags)
                        if r["distinct"] != args.rows:
                            raise RuntimeError(f"{name} delivered {r['distinct']} distinct rows of {args.rows}")
                        rates[name].append(r["samples_s"])
                        firsts[name].append(r["first_s"])
                        epochs[name].append(r["samples"] / (r["first_s"] + (r["samples"] - BATCH) / r["samples_s"]))
                row = {"order": order, "workers": workers, "rd_chose": ",".join(sorted(chose)),
                       **{f"{t}_samples_s": statistics.median(v) for t, v in rates.items()},
                       **{f"{t}_first_s": statistics.median(v) for t, v in firsts.items()},
                       **{f"{t}_vs_{p}": statistics.median(a / b for a, b in zip(rates[t], rates[p]))
                          for t in rds for p in peers},
                       **{f"{t}_vs_{p}_epoch": statistics.median(a / b for a, b in zip(epochs[t], epochs[p]))
                          for t in rds for p in peers},
                       "rounds": {t: v for t, v in rates.items()}, "epoch_rounds": epochs}
                results.append(row)
                print(row, flush=True)
    finally:
        proxy.close()
        server.stop()
    tools = [t for t in rds if f"{t}_samples_s" in (results[0] if results else {})]
    auto = "rd" in tools
    head = "| order | workers | " + ("rd chose | " if auto else "")
    head += " | ".join(f"{t} samples/s" for t in (*tools, *peers))
    head += " | " + " | ".join(f"{t} / {p}" for t in tools for p in peers)
    head += " | first batch s (" + " / ".join((*tools, *peers)) + ") | "
    head += " | ".join(f"{t} / {p}, whole epoch" for t in tools for p in peers) + " |"
    md = [f"# rd vs LitData and Streaming over S3 (moto behind S3Proxy at {args.latency_ms:g} ms; {args.rows} rows; "
          f"batch {BATCH}; median of {args.rounds} interleaved rounds; rd: rd.ReadAhead() with unit AUTO, "
          "rd_record_batch: record batches, rd_shard: whole shards)",
          "", head, "|" + "---|" * (3 + auto + len(tools) + len(peers) + 2 * len(tools) * len(peers))]
    for r in results:
        cells = [r["order"], str(r["workers"])] + ([r["rd_chose"]] if auto else [])
        cells += [f"{r[f'{t}_samples_s']:,.0f}" for t in (*tools, *peers)]
        cells += [f"{r[f'{t}_vs_{p}']:.2f}x" for t in tools for p in peers]
        cells.append(" / ".join(f"{r[f'{t}_first_s']:.2f}" for t in (*tools, *peers)))
        cells += [f"{r[f'{t}_vs_{p}_epoch']:.2f}x" for t in tools for p in peers]
        md.append("| " + " | ".join(cells) + " |")
    path = write_results(args.results, {"rows": results, "args": vars(args), "peers": peers}, "\n".join(md))
    print("\n".join(md))
    print(f"wrote {path}")
    return {"rows": results}


if __name__ == "__main__":
    main(sys.argv[1:])
