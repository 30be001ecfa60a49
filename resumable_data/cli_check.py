"""``resumable-data check-resume DIR``: prove that a pipeline over a pinned dataset resumes bit-exactly.

Builds ``rd.DataLoader(rd.ArrowShards(DIR), ...)`` from the options, runs it uninterrupted for
``--steps`` steps and again with ``--interrupts`` random interruptions (plus epoch boundaries,
chained resumes, each ``--workers`` count and each ``--world-sizes`` value, ranks simulated in
this process), through :func:`resumable_data.testing.check_resume`, and prints the report.
``--batch-size`` is the global batch: each of ``W`` ranks gets ``batch_size / W``, split by
``--sharding-policy``; with ``--no-elastic`` the loader refuses world-size changes, so each world
size is checked on its own (the report notes it). ``--eos-id`` is the packing's separator token.
A value the loader refuses as out of range is reported under the option that set it
(``--packing-seq-len=0``, not the loader's ``seq_len=0``), with the range.

Exit status: 0 bit-exact, 1 a divergence (the first one is printed), 2 bad input (unpinned or
damaged dataset: ``--pin``, or ``resumable-data pin DIR``, pins one in place; impossible options).
"""

from __future__ import annotations

import argparse
import re
import time

from resumable_data.errors import ConfigError, describe

__all__ = ["COMMAND", "EXAMPLES", "configure", "run"]


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return values


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "data",
        help="a pinned dataset directory (rd.pin wrote its .rd-manifest.json, or pinned it into the cache), "
        "or any with --pin",
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="pin DIR in place first if it has no manifest (writes DIR/.rd-manifest.json, a hidden file "
        "pyarrow, pandas and datasets ignore), as `resumable-data pin DIR` does",
    )
    p.add_argument("--batch-size", type=int, default=8, help="global batch size (all ranks together)")
    p.add_argument("--shuffle", action="store_true", help="global shuffle (keyed permutation per epoch)")
    p.add_argument("--seed", type=int, default=0, help="the stream's seed")
    p.add_argument("--window", type=int, default=None, help="shuffle inside windows of N records instead")
    p.add_argument(
        "--window-blocks",
        choices=["records", "read_units"],
        default="records",
        help="what --window permutes: blocks of records, or the shards' record batches / row groups",
    )
    p.add_argument("--drop-last", action="store_true", help="drop each epoch's incomplete last batch")
    p.add_argument("--packing-seq-len", type=int, default=None, help="pack documents into sequences of L tokens")
    p.add_argument(
        "--packing-mode", choices=["concat", "best_fit"], default="concat", help="how documents fill sequences (concat)"
    )
    p.add_argument("--packing-window", type=int, default=1024, help="documents per packing window")
    p.add_argument("--eos-id", type=int, default=None, help="token appended after each packed document")
    p.add_argument("--tokens", default=None, help="the token list column (packing, and the token counter)")
    p.add_argument(
        "--commit", choices=["auto", "explicit"], default="auto", help="the loader's commit mode (auto, as in torch)"
    )
    p.add_argument("--accumulation-steps", type=int, default=1, help="microbatches per optimizer update")
    p.add_argument("--steps", type=int, default=60, help="steps per run")
    p.add_argument(
        "--interrupts",
        type=int,
        default=5,
        help="random interrupt points (every epoch boundary within --steps is added too: data that a few "
        "steps exhaust, e.g. tiny documents under --packing-seq-len, makes one run per step)",
    )
    p.add_argument("--chained", type=int, default=2, help="resumes in a row per interrupted run")
    p.add_argument("--workers", type=_int_list, default=(0, 2), help="worker counts to alternate, e.g. 0,2")
    p.add_argument("--world-sizes", type=_int_list, default=(1,), help="world sizes to reshard between, e.g. 1,2")
    p.add_argument(
        "--sharding-policy",
        choices=["contiguous", "strided"],
        default="contiguous",
        help="how a global batch is split across ranks",
    )
    p.add_argument(
        "--no-elastic",
        action="store_true",
        help="build the loader with elastic=False: no reshard; each world size is checked on its own",
    )
    p.add_argument("--check-seed", type=int, default=0, help="seed of the interrupt points")


def _maker(args: argparse.Namespace):
    import resumable_data as rd

    if args.window is not None and not args.shuffle:
        raise ConfigError(describe("--window", args.window, "--shuffle as well", "add --shuffle"))
    if args.batch_size < 1:
        raise ConfigError(
            describe("--batch-size", args.batch_size, "a positive global batch size", "e.g. --batch-size 8")
        )
    for flag, value, least in (
        ("--steps", args.steps, 2),
        ("--interrupts", args.interrupts, 1),
        ("--chained", args.chained, 1),
    ):
        if value < least:
            raise ConfigError(describe(flag, value, f"an integer >= {least}", f"e.g. {flag} {max(least, 3)}"))
    if any(w < 1 for w in args.world_sizes):
        raise ConfigError(
            describe("--world-sizes", list(args.world_sizes), "positive world sizes", "e.g. --world-sizes 1,2")
        )
    bad = [w for w in args.world_sizes if args.batch_size % w]
    if bad:
        raise ConfigError(
            describe(
                "--world-sizes",
                list(args.world_sizes),
                f"divisors of the global --batch-size {args.batch_size}",
                "pick world sizes that divide the batch size",
            )
        )
    if args.eos_id is not None and args.packing_seq_len is None:
        raise ConfigError(
            describe(
                "--eos-id",
                args.eos_id,
                "--packing-seq-len as well (it separates packed documents)",
                "add --packing-seq-len L, or drop --eos-id",
            )
        )
    from pathlib import Path

    from resumable_data.sources.files import MANIFEST_NAME

    if not Path(args.data).is_dir():
        raise ConfigError(
            describe(
                "data",
                args.data,
                f"an existing dataset directory (relative to the working directory {str(Path.cwd())!r})",
                "pass the folder that holds the shards and its manifest",
            )
        )
    # pinned in place, or into $RD_CACHE_DIR (rd.ArrowShards pins an unpinned folder there on first use)
    if rd.DatasetVersion.locate(args.data) is None:
        if not args.pin:
            raise ConfigError(
                describe(
                    "data",
                    args.data,
                    f"a pinned dataset directory (with {MANIFEST_NAME}, or pinned into the cache)",
                    f"pass --pin (pins it in place first), or run resumable-data pin {args.data}, or "
                    f'pin it without writing into the folder: python -c "import resumable_data as rd; '
                    f"rd.pin({args.data!r}, save='cache')\"",
                )
            )
        version = rd.pin(args.data)
        _say(f"pinned:      {args.data} as version {version.hash} ({Path(args.data) / MANIFEST_NAME})")
    source = rd.ArrowShards(args.data, verify="size", unpinned="error")
    extra: dict = {"elastic": not args.no_elastic}
    if args.packing_seq_len is not None:
        extra["packing"] = rd.Packing(
            args.packing_seq_len,
            mode=args.packing_mode,
            window=args.packing_window,
            tokens=args.tokens or "tokens",
            eos_id=args.eos_id,
        )
    elif args.tokens is not None:
        extra["token_column"] = args.tokens
    if args.window is not None:
        extra["shuffle_window"] = args.window
    blocks = rd.WindowBlocks(args.window_blocks)  # argparse's choices are its values
    if blocks is not rd.WindowBlocks.RECORDS:
        if args.window is None:
            raise ConfigError(
                describe("--window-blocks", args.window_blocks, "--window N as well", "add --shuffle --window N")
            )
        extra["window_blocks"] = blocks
    tail = rd.Tail.DROP if args.drop_last else (rd.Tail.WRAP if max(args.world_sizes) > 1 else rd.Tail.PARTIAL)

    def make(**kw):
        world = kw["sharding"].world_size
        return rd.DataLoader(
            source,
            batch_size=args.batch_size // world,
            shuffle=args.shuffle,
            seed=args.seed,
            tail=tail,
            commit=args.commit,
            accumulation_steps=args.accumulation_steps,
            **extra,
            **kw,
        )

    make(
        num_workers=0, sharding=rd.Sharding(1, 0, args.sharding_policy)
    )  # configuration errors surface here, as exit status 2
    return source, make, tail


def _say(line: str) -> None:
    """Print ``line`` fitted to the CLI's 100 columns (long values wrap under their key)."""
    from resumable_data.cli_view import fit

    print("\n".join(fit(line.split("\n"))))


#: the loader's parameter -> the option that sets it (its refusals name the parameter)
_OPTIONS = {
    "batch_size": "--batch-size",
    "shuffle_window": "--window",
    "seq_len": "--packing-seq-len",
    "window": "--packing-window",
    "num_workers": "--workers",
    "accumulation_steps": "--accumulation-steps",
    "seed": "--seed",
}
_RANGE = re.compile(r"^(\w+)=(-?\d+): expected an integer in \[(-?\d+), (\d+)\]")


def _as_option(e: ConfigError) -> ConfigError:
    """The loader's range refusal of a parameter an option sets, as that option (its name, the
    value, the range and a fix for the command line); any other error unchanged."""
    m = _RANGE.match(str(e))
    if m is None or m.group(1) not in _OPTIONS:
        return e
    flag, lo, hi = _OPTIONS[m.group(1)], m.group(3), m.group(4)
    return ConfigError(
        describe(flag, int(m.group(2)), f"an integer in [{lo}, {hi}]", f"pass {flag} N with {lo} <= N <= {hi}")
    )


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except ConfigError as e:
        raise _as_option(e) from None


def _run(args: argparse.Namespace) -> int:
    from resumable_data.plan import WindowBlocks
    from resumable_data.testing import check_resume

    source, make, tail = _maker(args)
    _say(f"dataset:     {args.data} ({len(source)} records, pinned version {source.version.hash})")
    what = "packed " + args.packing_mode + f" seq_len {args.packing_seq_len}" if args.packing_seq_len else "records"
    if args.packing_seq_len and args.eos_id is not None:
        what += f" eos {args.eos_id}"
    order = f"window {args.window}" if args.window else ("global shuffle" if args.shuffle else "sequential")
    if args.window and WindowBlocks(args.window_blocks) is WindowBlocks.READ_UNITS:
        order += " over read units"
    _say(
        f"pipeline:    {what}, global batch {args.batch_size}, {order}, seed {args.seed}, tail {tail.value}, "
        f"commit {args.commit} x{args.accumulation_steps}, sharding {args.sharding_policy}"
        + (", not elastic" if args.no_elastic else "")
    )
    _say(
        f"checking:    {args.steps} steps, {args.interrupts} random interrupts (+ epoch boundaries), "
        f"chained {args.chained}, workers {list(args.workers)}, world sizes {list(args.world_sizes)}"
    )
    t0 = time.perf_counter()
    report = check_resume(
        make,
        steps=args.steps,
        interrupts=args.interrupts,
        seed=args.check_seed,
        num_workers=args.workers,
        world_sizes=args.world_sizes,
        chained=args.chained,
        sharding_policy=args.sharding_policy,
        on_uncommitted="repeat",
    )
    for r in report.runs:
        _say(f"  run {r}")
    head, *notes = str(report).split("\n")
    _say(f"result:      {head} ({time.perf_counter() - t0:.1f} s)")
    for n in notes:
        _say(f"             {n}")
    return 0 if report.ok else 1


#: ``(name, help, configure, run)``: ``resumable_data.cli`` registers it with ``register(*COMMAND)``.
COMMAND = ("check-resume", "prove that a pipeline over a pinned dataset resumes bit-exactly", configure, run)

EXAMPLES = """examples:
  resumable-data pin data/                    # once: check-resume needs a pinned dataset (or pass --pin)
  resumable-data check-resume data/ --batch-size 8 --shuffle --seed 0 --steps 40 --interrupts 3
  resumable-data check-resume data/ --batch-size 8 --shuffle --window 64 --workers 0,2 --world-sizes 1,2
  resumable-data check-resume data/ --batch-size 8 --shuffle --window 64 --window-blocks read_units
  resumable-data check-resume data/ --batch-size 8 --packing-seq-len 2048 --tokens tokens --eos-id 2"""
