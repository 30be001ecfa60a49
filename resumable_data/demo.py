"""``make demo`` / ``resumable-data demo``: train a tiny causal LM, SIGKILL it at a random step,
resume it from its latest checkpoint, finish, train the same job again without interruption, and
prove that both saw bit-identical batches and ended with bit-identical parameters. The exit code
says so (0 bit-identical, 1 diverged, 2 a run failed).

The job (:mod:`resumable_data.demo_train`) runs in a subprocess: a 2-layer d=64 transformer over
byte tokens, packed sequences from an ``rd.DataLoader`` with 2 workers and a window shuffle,
gradient accumulation, AdamW + warmup-cosine, a grad scaler whose found-inf check skips one
poisoned update, dropout, a metric log, and ``rd.save_checkpoint`` every few microbatches. The
kill is a real ``SIGKILL`` of the job's whole process group (trainer and data workers).

The corpus needs no network: the Python standard library's own source files, tokenized as bytes
(token = byte + 1, 0 is EOS), written as Arrow IPC shards and pinned. ``--data DIR --tokens COL``
trains on your own pinned directory instead (a ``list<int>`` token column).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import resumable_data as rd
from resumable_data.demo_train import SABOTAGES, DemoConfig
from resumable_data.errors import describe

__all__ = ["RunLog", "Verdict", "build_stdlib_corpus", "compare", "configure", "main", "run"]


def build_stdlib_corpus(directory: Path, max_files: int = 600, quiet: bool = False) -> rd.DatasetVersion:
    """Tokenize the standard library's ``.py`` files as bytes into pinned Arrow shards
    (``quiet``: no progress bars, neither the tokenizer's nor ``rd.pin``'s)."""
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / rd.sources.MANIFEST_NAME).exists():
        return rd.DatasetVersion.load(directory)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 0)[:max_files]
    from tqdm.auto import tqdm

    docs, names = [], []
    for path in tqdm(files, desc="tokenizing the standard library", unit="file", delay=0.5, disable=quiet or None):
        data = np.frombuffer(path.read_bytes(), dtype=np.uint8).astype(np.int32) + 1
        docs.append(data)
        names.append(path.name)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int32)
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(docs)))
    rd.write_arrow_shards(pa.table({"path": pa.array(names), "tokens": tokens}), directory, num_shards=4)
    if not quiet:
        return rd.pin(directory)
    with contextlib.redirect_stderr(io.StringIO()):  # rd.pin's tqdm bar writes to stderr; errors still raise
        return rd.pin(directory)


def token_stats(src: rd.ArrowShards, column: str, chunk: int = 65536) -> tuple[int, int]:
    """(number of tokens, largest token id) of a list<int> column, read in chunks."""
    if column not in src.schema.names:
        raise rd.ConfigError(
            f"--tokens: the dataset has no column {column!r} (it has {src.schema.names}); "
            "fix: pass --tokens NAME of its list<int> token column"
        )
    kind = src.schema.field(column).type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_integer(kind.value_type):
        raise rd.ConfigError(
            describe(
                "--tokens",
                column,
                f"a list<int> token column (it is {kind})",
                "pass --tokens NAME of its list<int> token column",
            )
        )
    total, largest = 0, -1
    for start in range(0, len(src), chunk):
        col = src.take(np.arange(start, min(len(src), start + chunk))).column(column)
        flat = pc.list_flatten(col)
        total += len(flat)
        if len(flat):
            largest = max(largest, int(pc.max(flat).as_py()))
    return total, largest


# -- running the job ------------------------------------------------------------------------------
@dataclass
class RunLog:
    """What the parent learned from one training process's event stream."""

    digests: dict[int, str] = field(default_factory=dict)  # delivered step -> batch digest
    documents: dict[int, list[int]] = field(default_factory=dict)  # delivered step -> record ids in it
    events: list[dict[str, Any]] = field(default_factory=list)
    resumed: dict[str, Any] | None = None
    done: dict[str, Any] | None = None
    checkpoints: list[int] = field(default_factory=list)
    returncode: int | None = None
    killed_at: int | None = None
    stderr: str = ""

    @property
    def last_step(self) -> int:
        return max(self.digests, default=-1)


def _bar(desc: str, total: int, initial: int = 0, quiet: bool = False):
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit="step",
        leave=False,
        disable=quiet or None,
        dynamic_ncols=True,
        file=sys.stderr,
    )


def run(
    config_path: Path,
    run_dir: Path,
    *,
    desc: str,
    total: int,
    resume: bool = False,
    kill_at: int | None = None,
    sabotage: str | None = None,
    quiet: bool = False,
    env: dict[str, str] | None = None,
) -> RunLog:
    """Run the training job in a subprocess (its own process group); ``kill_at``: SIGKILL the whole
    group as soon as it reports that microbatch."""
    cmd = [sys.executable, "-m", "resumable_data.demo_train", "--config", str(config_path), "--run", str(run_dir)]
    if resume:
        cmd.append("--resume")
    if sabotage:
        cmd += ["--sabotage", sabotage]
    log = RunLog()
    err_path = run_dir.with_name(run_dir.name + f".{'resume' if resume else 'run'}.stderr")
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True, env=env)
        bar = _bar(desc, total, quiet=quiet)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                kind = ev.get("event")
                if kind == "step":
                    log.digests[ev["step"]] = ev["digest"]
                    log.documents[ev["step"]] = ev.get("documents", [])
                    bar.n = ev["step"] + 1
                    bar.refresh()
                    if kill_at is not None and ev["step"] >= kill_at and log.killed_at is None:
                        os.killpg(proc.pid, signal.SIGKILL)  # preemption: trainer and its workers at once
                        log.killed_at = ev["step"]
                        break
                    continue
                log.events.append(ev)
                if kind == "resumed":
                    log.resumed = ev
                    bar.n = bar.last_print_n = ev["delivered"]
                    bar.refresh()
                elif kind == "checkpoint":
                    log.checkpoints.append(ev["step"])
                elif kind == "done":
                    log.done = ev
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)  # never leave a trainer behind (Ctrl-C, errors)
            raise
        finally:
            bar.close()
            log.returncode = proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    log.stderr = err_path.read_text(errors="replace")
    return log


# -- the comparison -------------------------------------------------------------------------------
@dataclass
class Verdict:
    ok: bool
    lines: list[tuple[str, str]]
    first_divergence: int | None = None


def compare(reference: RunLog, interrupted: RunLog, resumed: RunLog, steps: int) -> Verdict:
    """Batch digests in order (the interrupted run's up to its resume point, the resumed run's
    after), the steps both processes trained (before the kill and again after the resume), and
    the final parameters, optimizer moments, counters and metric log."""
    start = resumed.resumed["delivered"] if resumed.resumed else 0
    combined = {s: d for s, d in interrupted.digests.items() if s < start}
    combined.update(resumed.digests)
    ref = reference.digests
    first = next((s for s in range(steps) if ref.get(s) is None or combined.get(s) != ref.get(s)), None)
    same = sum(1 for s in range(steps) if ref.get(s) is not None and combined.get(s) == ref.get(s))
    lines: list[tuple[str, str]] = []
    ok = first is None
    lines.append(
        (
            "batch digests",
            f"{same} of {steps} microbatches identical, compared in order"
            + ("" if ok else f"; DIVERGED at microbatch {first}"),
        )
    )
    twice = sorted(s for s in interrupted.digests if s >= start and s in resumed.digests)
    if twice:
        again = sum(1 for s in twice if interrupted.digests[s] == resumed.digests[s])
        lines.append(
            (
                "trained twice",
                f"microbatches {twice[0]}..{twice[-1]} ran before the kill and again after "
                f"the resume: {again} of {len(twice)} identical",
            )
        )
        ok = ok and again == len(twice)
    a, b = reference.done or {}, resumed.done or {}
    for key, name in (("parameters", "final parameters"), ("optimizer", "optimizer moments")):
        x, y = a.get(key), b.get(key)
        same_ = x is not None and x == y
        ok = ok and same_
        lines.append((name, f"xxh3 {y} vs {x}: {'identical' if same_ else 'DIVERGED'}"))
    ca, cb = a.get("counters"), b.get("counters")
    if ca is not None and cb is not None:
        ok = ok and ca == cb
        lines.append(
            (
                "counters",
                ("identical: " if ca == cb else "DIVERGED: ")
                + ", ".join(f"{k}={v}" for k, v in cb.items() if k != "skipped_steps"),
            )
        )
    ma, mb = a.get("metrics"), b.get("metrics")
    if ma is not None and mb is not None:
        keys = [r["step"] for r in mb]
        dup = len(keys) - len(set(keys))
        same_ = ma == mb
        ok = ok and same_ and dup == 0
        lines.append(
            (
                "metric log",
                f"{len(mb)} records, {dup} duplicated by the replay, values {'identical' if same_ else 'DIVERGED'}",
            )
        )
    return Verdict(ok, lines, first)


# -- the report -----------------------------------------------------------------------------------
def _inspect(checkpoint: str, data: str) -> tuple[int, str]:
    """``resumable-data inspect CHECKPOINT --data DATA`` as the command line runs it (its printout
    and exit status, 2 for an rd error), called through :mod:`.cli_inspect`: the command line
    imports this module for ``demo``, so this one does not import it back."""
    from resumable_data import cli_inspect

    parser = argparse.ArgumentParser(prog="resumable-data inspect")
    cli_inspect.configure(parser)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            code = cli_inspect.run(parser.parse_args([checkpoint, "--data", data, "--records", "6", "--wide"]))
        except rd.ResumableDataError as e:
            print(f"resumable-data inspect: {e}")
            code = 2
    return code, buf.getvalue()


def _read_inventory(checkpoint: str):
    from resumable_data.checkpoint.inventory import Inventory
    from resumable_data.checkpoint.store import read_checkpoint

    return Inventory.from_dict(read_checkpoint(checkpoint).inventory)


def _compact_inventory(inv) -> str:
    """The inventory, narrower than ``str(inv)``: category, restore action, oracle value."""

    def clip(s: str, w: int) -> str:
        return s if len(s) <= w else s[: w - 1] + "…"

    cols = (("category", 40), ("restore", 42), ("oracle value", 50))
    rows = [[e.category, e.restore, e.value] for e in inv]
    out = ["  ".join(name.ljust(w) for name, w in cols).rstrip(), "  ".join("-" * w for _, w in cols)]
    out += ["  ".join(clip(v, w).ljust(w) for v, (_, w) in zip(r, cols)).rstrip() for r in rows]
    return "\n".join(out)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, help="a pinned Arrow directory (default: the stdlib corpus)")
    parser.add_argument("--tokens", default="tokens", help="its list<int> token column (default: tokens)")
    parser.add_argument(
        "--eos-id",
        type=int,
        default=None,
        help="EOS token between packed documents (default: 0 for the stdlib corpus, none for --data)",
    )
    parser.add_argument("--steps", type=int, default=400, help="microbatches in the run (default 400)")
    parser.add_argument("--checkpoint-every", type=int, default=30, help="microbatches between checkpoints")
    parser.add_argument("--seed", type=int, default=None, help="picks the kill step (default: random)")
    parser.add_argument("--kill-at", type=int, default=None, help="kill at this microbatch instead of a random one")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("demo_output"),
        help="where everything is written (default: ./demo_output; its interrupted/ and uninterrupted/ runs are replaced)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--sabotage", choices=SABOTAGES, default=None, help=argparse.SUPPRESS)


def main_args(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    say = print
    steps, every = int(args.steps), int(args.checkpoint_every)
    if steps < 8:
        raise rd.ConfigError(f"--steps: {steps} is too few; fix: pass at least 8")
    if every < 1:
        raise rd.ConfigError(describe("--checkpoint-every", every, "an integer >= 1", "e.g. --checkpoint-every 30"))
    first_ckpt = min(every, steps) - 1  # the microbatch the first checkpoint is written after
    if args.kill_at is not None and not first_ckpt < args.kill_at <= steps - 2:
        lo, hi = first_ckpt + 1, steps - 2
        raise rd.ConfigError(
            describe(
                "--kill-at",
                args.kill_at,
                f"a microbatch in [{lo}, {hi}] (microbatches count from 0: after the first checkpoint, "
                f"written once microbatch {first_ckpt} is done, as step {first_ckpt + 1}, and before the last)",
                f"e.g. --kill-at {(lo + hi) // 2}, or leave it out" if lo <= hi else "leave it out",
            )
        )
    work: Path = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    for stale in ("interrupted", "uninterrupted"):
        shutil.rmtree(work / stale, ignore_errors=True)
    if args.data is None:
        corpus = work / "corpus"
        build_stdlib_corpus(corpus, quiet=args.quiet)
        what = "the standard library's .py files as bytes"
        eos = 0 if args.eos_id is None else args.eos_id
    else:
        corpus = args.data.resolve()
        what = f"column {args.tokens!r}"
        eos = args.eos_id
    src = rd.ArrowShards(corpus)
    n_tokens, largest = token_stats(src, args.tokens)
    vocab = max(largest + 1, (eos or 0) + 1, 2) if args.data is not None else 257  # bytes + 1, 0 = EOS
    cfg = DemoConfig(
        data=str(corpus),
        tokens=args.tokens,
        vocab=vocab,
        eos_id=eos,
        steps=steps,
        checkpoint_every=every,
    )
    config_path = work / "config.json"
    config_path.write_text(cfg.to_json())
    env = dict(os.environ)
    env.setdefault("RD_CACHE_DIR", str(work / "cache"))
    env["PYTHONUNBUFFERED"] = "1"
    if args.quiet:
        env["TQDM_DISABLE"] = "1"  # no bar from the trainers either (index builds, pinning)

    say("resumable-data demo: train, SIGKILL at a random step, resume, and compare with an uninterrupted run")
    say(
        f"  dataset   {corpus}: {len(src):,} documents ({what}), {n_tokens:,} tokens, vocabulary {vocab}, "
        f"pinned version {src.version.hash[:16]}..."
    )
    say(
        f"  model     {cfg.layers}-layer causal transformer, d={cfg.d_model}, {cfg.heads} heads, dropout {cfg.dropout}; "
        f"CPU float32, deterministic algorithms, 1 thread"
    )
    say(
        f"  data      rd.DataLoader: {cfg.batch_size} packed sequences x {cfg.seq_len} tokens (concat, window "
        f"{cfg.pack_window} documents), shuffle window {cfg.shuffle_window}, {cfg.num_workers} workers"
    )
    say(
        f"  training  {steps} microbatches, accumulation {cfg.accumulation} -> {cfg.updates} updates; AdamW, "
        f"warmup-cosine LambdaLR, GradScaler (update {cfg.inf_update} gets inf gradients: skipped, "
        f"commit(applied=False)); checkpoint every {cfg.checkpoint_every} microbatches"
    )

    if args.kill_at is not None:
        kill_at = int(args.kill_at)
    else:
        kill_at = (
            random.Random(args.seed).randrange(first_ckpt + 1, steps - 1) if steps - 1 > first_ckpt + 1 else steps - 2
        )
    kill_at = min(max(kill_at, 0), steps - 2)

    interrupted = run(
        config_path,
        work / "interrupted",
        desc="interrupted run",
        total=steps,
        kill_at=kill_at,
        quiet=args.quiet,
        env=env,
    )
    if interrupted.killed_at is None:
        say(
            f"\nthe interrupted run ended before the kill (exit {interrupted.returncode}):\n{interrupted.stderr[-3000:]}"
        )
        return 2
    reported = interrupted.last_step
    saved = [s for s in interrupted.checkpoints]
    say(
        f"\nkilled    SIGKILL to the trainer's process group after it reported microbatch {reported} "
        f"(checkpoints written at {', '.join(map(str, saved)) or 'none'})"
    )

    ckpt_root = work / "interrupted" / "checkpoints"
    from resumable_data.checkpoint.store import resolve_checkpoint

    try:
        latest = resolve_checkpoint(ckpt_root)
    except rd.ResumableDataError as e:
        say(f"no complete checkpoint to resume from: {e}")
        return 2
    code, text = _inspect(str(latest), str(corpus))
    head = text.partition("\ninventory:\n")[0].rstrip()  # the inventory is printed narrower below
    saved_inventory = _read_inventory(str(latest))  # (the resumed run's retention will delete it)

    resumed = run(
        config_path,
        work / "interrupted",
        desc="resumed run",
        total=steps,
        resume=True,
        sabotage=args.sabotage,
        quiet=args.quiet,
        env=env,
    )
    if resumed.returncode != 0 or resumed.done is None or resumed.resumed is None:
        say(f"\nthe resumed run failed (exit {resumed.returncode}):\n{resumed.stderr[-3000:]}")
        return 2
    r = resumed.resumed
    inside = r["delivered"] % cfg.accumulation
    where = (
        f"inside an accumulation window, {inside} of {cfg.accumulation} microbatches done: their gradients "
        "were restored"
        if inside
        else "at an update boundary"
    )
    say(
        f"resumed   from {Path(r['path']).name} in a fresh process at microbatch {r['delivered']} ({where}); "
        f"recovery label {r['label']}"
    )
    say(f"          compatibility: {r['report'].splitlines()[0] if r['report'] else '-'}")

    reference = run(
        config_path, work / "uninterrupted", desc="uninterrupted run", total=steps, quiet=args.quiet, env=env
    )
    if reference.returncode != 0 or reference.done is None:
        say(f"\nthe uninterrupted run failed (exit {reference.returncode}):\n{reference.stderr[-3000:]}")
        return 2

    say(f"\nthe resume boundary: `resumable-data inspect {_rel(latest)} --data {_rel(corpus)}`")
    say("\n".join("  " + line for line in head.splitlines()))
    nxt = r["delivered"]
    docs = resumed.documents.get(nxt)
    if docs is not None:
        say(
            f"  {'next microbatch:':<22} {nxt}: packed sequences [{nxt * cfg.batch_size}, {(nxt + 1) * cfg.batch_size}) "
            f"from documents {docs[:8]}{' ...' if len(docs) > 8 else ''} (what the resumed run received: "
            "it matches inspect's prediction)"
        )
    if code != 0:
        say("  (inspect: the dataset does not match its pinned version)")
    inventory = _compact_inventory(saved_inventory)
    say("\nthe training-state inventory of that checkpoint (every category, how it is restored, its oracle):")
    say("\n".join("  " + line for line in inventory.splitlines()))

    verdict = compare(reference, interrupted, resumed, steps)
    updates = [e for e in resumed.events if e.get("event") == "update"]
    ref_updates = [e for e in reference.events if e.get("event") == "update"]
    if ref_updates and updates:
        say(
            f"\nloss      {ref_updates[0]['loss']:.3f} at update 0 -> {ref_updates[-1]['loss']:.3f} at update "
            f"{ref_updates[-1]['update']} (uninterrupted); {updates[-1]['loss']:.3f} (interrupted + resumed)"
        )
    say("\ninterrupted + resumed vs uninterrupted:")
    for name, text_ in verdict.lines:
        say(f"  {name:<18} {text_}")
    elapsed = time.perf_counter() - t0
    say(
        f"\nRESULT    {'BIT-IDENTICAL' if verdict.ok else 'DIVERGED'} (label {r['label']}; {elapsed:.0f} s; "
        f"outputs in {work})"
    )
    return 0 if verdict.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m resumable_data.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    configure(parser)
    args = parser.parse_args(argv)
    try:
        return main_args(args)
    except rd.ResumableDataError as e:
        print(f"resumable-data demo: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
