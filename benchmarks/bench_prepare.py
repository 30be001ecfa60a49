"""Tokenizing a corpus into shards: ``rd.prepare`` against ``datasets.map`` + ``save_to_disk``.

Side by side in one run, interleaved rounds, on the same corpus and the same tokenizer:

* ``rd.prepare(..., num_proc=1)`` and ``num_proc=2`` (scaling 1 -> 2 processes);
* Hugging Face ``datasets``: ``Dataset.from_file(...).map(batched=True, num_proc=2)`` with the
  same tokenizer's ``encode_batch`` (a fresh fingerprint each round, so nothing is read from its
  cache), then ``save_to_disk`` (what a user does to keep the result);
* optionally LitData ``optimize()`` and datatrove's ``DocumentTokenizer``, each in its own venv
  (``/tmp/venv-litdata``, ``/tmp/venv-datatrove``) when it exists: ``--peers``.

Corpus: the Python standard library's own ``.py`` sources read from this interpreter (no
download), cut to ``--mb`` megabytes, one document per file, written once as one Arrow IPC stream
file (what ``datasets`` reads) which both tools read. Tokenizer: byte-level BPE, 8,000 tokens,
trained here on the corpus by ``tokenizers``. Every tool's output token count is checked equal.
Figures: tokens/s (median of the rounds), and the per-round ratios (median, min..max).

Run: ``python -m benchmarks.bench_prepare [--quick] [--rounds N] [--mb MB] [--peers]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

import resumable_data as rd
from benchmarks._common import QUICK, write_results

VOCAB = 8_000


def corpus_texts(mb: float) -> list[str]:
    root = Path(os.__file__).parent
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    texts, total = [], 0
    for f in files:
        t = f.read_text(encoding="utf-8", errors="replace")
        texts.append(t)
        total += len(t.encode("utf-8"))
        if total >= mb * 1e6:
            break
    return texts


def train(texts: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts[: max(50, len(texts) // 4)],
                            trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["[UNK]"], show_progress=False))
    return tok


def run_rd(src: Path, out: Path, tok, num_proc: int) -> int:
    res = rd.prepare(src, out, tokenizer=tok, num_proc=num_proc, bytes_per_shard=max(1, _size(src) // 16),
                     progress=False)
    return res.tokens


def run_datasets(src_file: Path, out: Path, tok_path: Path, round_: int) -> int:
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_file(str(src_file))
    mapped = ds.map(_hf_tokenize, batched=True, num_proc=2, remove_columns=["text"],
                    fn_kwargs={"tok_path": str(tok_path)}, new_fingerprint=f"bench-{round_}-{time.time_ns()}",
                    cache_file_name=str(out.parent / f"hf-cache-{round_}" / "cache.arrow"))
    mapped.save_to_disk(str(out))
    n = sum(len(t) for t in mapped["tokens"])
    shutil.rmtree(out.parent / f"hf-cache-{round_}", ignore_errors=True)
    return n


_HF_TOK = {}


def _hf_tokenize(batch, tok_path):
    tok = _HF_TOK.get(tok_path)
    if tok is None:
        from tokenizers import Tokenizer

        tok = _HF_TOK[tok_path] = Tokenizer.from_file(tok_path)
    return {"tokens": [e.ids for e in tok.encode_batch(batch["text"])]}


_PEER = {
    "litdata": """
import sys, pyarrow as pa
from litdata import optimize
from tokenizers import Tokenizer
src, out, tok_path = sys.argv[1:4]
texts = pa.ipc.open_stream(src).read_all().column("text").to_pylist()
_TOK = []
def tokenize(i):
    import numpy as np
    if not _TOK:
        _TOK.append(Tokenizer.from_file(tok_path))
    yield np.asarray(_TOK[0].encode(texts[i]).ids, dtype=np.int32)
if __name__ == "__main__":
    optimize(fn=tokenize, inputs=list(range(len(texts))), output_dir=out, num_workers=2, chunk_bytes="64MB")
""",
    "datatrove": """
import sys
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import ParquetReader
from datatrove.pipeline.tokens import DocumentTokenizer
src, out, tok_path = sys.argv[1:4]
if __name__ == "__main__":
    LocalPipelineExecutor(pipeline=[ParquetReader(src, text_key="text"),
                                    DocumentTokenizer(out, tokenizer_name_or_path=tok_path, eos_token=None,
                                                      shuffle_documents=False)],
                          tasks=2, workers=2, logging_dir=out + "-logs").run()
""",
}


def run_peer(name: str, src: Path, out: Path, tok_path: Path) -> float:
    py = Path(f"/tmp/venv-{name}/bin/python")
    script = out.parent / f"peer_{name}.py"  # not "<name>.py": that would shadow the package
    script.write_text(_PEER[name])
    t0 = time.perf_counter()
    done = subprocess.run([str(py), str(script), str(src), str(out), str(tok_path)], capture_output=True, text=True,
                          timeout=1800)
    if done.returncode:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0


_IMPORTS = {"litdata": "import litdata, tokenizers, pyarrow",
            "datatrove": "import datatrove.executor, datatrove.pipeline.tokens, datatrove.pipeline.readers"}


def peer_startup(name: str) -> float:
    """Seconds to start the peer's interpreter and import it (included in its wall time)."""
    t0 = time.perf_counter()
    subprocess.run([f"/tmp/venv-{name}/bin/python", "-c", _IMPORTS[name]], check=True, capture_output=True)
    return time.perf_counter() - t0


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children (pool workers, peer subprocesses)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--mb", type=float, default=None)
    ap.add_argument("--peers", action="store_true", help="also LitData and datatrove, from /tmp/venv-<tool>")
    args = ap.parse_args()
    rounds = args.rounds or (2 if QUICK else 3)
    texts = corpus_texts(args.mb or (2.0 if QUICK else 8.0))
    tok = train(texts)
    work = Path(tempfile.mkdtemp(prefix="bench-prepare-"))
    os.environ["RD_CACHE_DIR"] = str(work / "rd-cache")
    tok_path = work / "tokenizer.json"
    tok.save(str(tok_path))
    src = work / "corpus"
    rd.write_arrow_shards(pa.table({"text": texts}), src, format="arrow_stream")
    rd.pin(src)
    hf_src = work / "hf-corpus"  # datasets writes its map cache next to its input: its own copy
    hf_src.mkdir()
    shutil.copy(src / "shard-00000.arrow", hf_src / "corpus.arrow")
    parquet = work / "corpus-parquet"  # datatrove reads Parquet
    parquet.mkdir()
    import pyarrow.parquet as pq

    half = len(texts) // 2  # two files: datatrove gives each of its 2 tasks whole input files
    pq.write_table(pa.table({"text": texts[:half]}), parquet / "corpus-0.parquet")
    pq.write_table(pa.table({"text": texts[half:]}), parquet / "corpus-1.parquet")
    peers = [p for p in ("litdata", "datatrove") if args.peers and Path(f"/tmp/venv-{p}/bin/python").exists()]

    cases = ["rd 1 proc", "rd 2 procs", "datasets map+save 2 procs", *peers]
    secs: dict[str, list[float]] = {c: [] for c in cases}
    tokens: dict[str, int] = {}
    startup: dict[str, list[float]] = {p: [] for p in peers}
    cpu: dict[str, list[float]] = {c: [] for c in cases}
    loads = [_load()]
    for r in range(rounds):
        order = cases if r % 2 == 0 else cases[::-1]
        for c in order:
            out = work / f"out-{r}-{c.replace(' ', '_')}"
            c0 = _cpu()
            t0 = time.perf_counter()
            if c == "rd 1 proc":
                tokens[c] = run_rd(src, out, tok, 1)
            elif c == "rd 2 procs":
                tokens[c] = run_rd(src, out, tok, 2)
            elif c.startswith("datasets"):
                tokens[c] = run_datasets(hf_src / "corpus.arrow", out, tok_path, r)
            else:
                startup[c].append(peer_startup(c))
                t0 = time.perf_counter()
                run_peer(c, src / "shard-00000.arrow" if c == "litdata" else parquet, out, tok_path)
            secs[c].append(time.perf_counter() - t0)
            cpu[c].append(_cpu() - c0)
            shutil.rmtree(out, ignore_errors=True)
        loads.append(_load())
    shutil.rmtree(work, ignore_errors=True)
    n_tok = tokens["rd 1 proc"]
    assert all(v == n_tok for v in tokens.values()), tokens
    raw = {c: list(v) for c, v in secs.items()}
    for p in peers:  # net of the interpreter start and imports (rd and datasets run in this process)
        secs[p] = [max(t - s, 1e-3) for t, s in zip(secs[p], startup[p])]
    rate = {c: n_tok / statistics.median(s) for c, s in secs.items()}

    def ratio(a: str, b: str) -> tuple[float, float, float]:
        rs = [y / x for x, y in zip(secs[a], secs[b])]  # time of b / time of a = speed of a / speed of b
        return statistics.median(rs), min(rs), max(rs)

    ratios = {"rd 2 procs / datasets map+save 2 procs": ratio("rd 2 procs", "datasets map+save 2 procs"),
              "rd 2 procs / rd 1 proc (scaling)": ratio("rd 2 procs", "rd 1 proc")}
    for p in peers:
        ratios[f"rd 2 procs / {p} 2 workers"] = ratio("rd 2 procs", p)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    lines = [
        "# rd.prepare: tokenizing a corpus into shards",
        "",
        f"Corpus: {len(texts):,} standard-library source files, {mb:.1f} MB, {n_tok:,} tokens (byte-level BPE, "
        f"{VOCAB:,} tokens, trained here). {rounds} interleaved rounds; tokens/s = tokens / median wall time "
        "(start to shards on disk). Ratios: median (min..max) of the per-round speed ratios. "
        f"Machine: {os.cpu_count()} CPUs, shared; load average (1, 5, 15 min) before and after each round: "
        + "; ".join(loads) + ".",
        "",
        "| case | tokens/s (median) | seconds (min..max) | CPU seconds (median) | CPUs busy (CPU s / wall s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for c in cases:
        busy = statistics.median([u / t for u, t in zip(cpu[c], raw[c])])
        cpu_cells = "n/a | n/a" if c in peers else f"{statistics.median(cpu[c]):.1f} | {busy:.2f}"
        lines.append(f"| {c} | {rate[c] / 1e6:.2f} M | {statistics.median(secs[c]):.2f} "
                     f"({min(secs[c]):.2f}..{max(secs[c]):.2f}) | {cpu_cells} |")
    lines += ["", "| ratio | median (min..max) | goal |", "|---|---:|---:|"]
    goals = {"rd 2 procs / rd 1 proc (scaling)": ">= 1.7"}
    for k, (m, lo, hi) in ratios.items():
        lines.append(f"| {k} | {m:.2f}x ({lo:.2f}..{hi:.2f}) | {goals.get(k, '>= 1.0')} |")
    lines += ["", "CPU seconds: user + system time of this process and of its reaped children (pool workers) "
              "over the case (n/a for the peers: not all of their worker processes are reaped by their parent, "
              "so the count is incomplete); on a shared machine, CPU seconds that "
              "do not grow from 1 to 2 processes mean the work splits without overhead, and CPUs busy shows "
              "how much of the 2 cores the case actually got."]
    if peers:
        lines += ["", "LitData and datatrove run as subprocesses of their own venvs; their wall time includes the "
                  "interpreter start and imports: " + ", ".join(f"{p} {statistics.median(v):.1f} s" for p, v in
                                                                 startup.items())
                  + " (measured each round just before, median; wall time with it: "
                  + ", ".join(f"{p} {statistics.median(raw[p]):.1f} s" for p in peers)
                  + "). Their rows and ratios are net of it. Their token counts are not checked (other formats)."]
    else:
        lines += ["", "LitData and datatrove: not measured in this run (pass --peers with /tmp/venv-litdata and "
                  "/tmp/venv-datatrove installed)."]
    md = "\n".join(lines)
    print(md)
    write_results("prepare", {"tokens": n_tok, "mb": mb, "rounds": rounds, "seconds": secs, "seconds_with_startup": raw, "cpu_seconds": cpu,
                              "ratios": {k: list(v) for k, v in ratios.items()}, "load": loads}, md)


if __name__ == "__main__":
    sys.exit(main())
