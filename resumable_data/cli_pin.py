"""``resumable-data pin DIR``: pin a folder of Arrow IPC / Parquet shards from the command line.

Algorithm: :func:`resumable_data.pin` (discover the shards, read their row counts and schemas,
hash every byte with xxh3-128 in a thread pool, a tqdm progress bar on stderr when hashing takes
more than half a second), then write ``DIR/.rd-manifest.json`` atomically and print the version.

* ``--dry-run`` hashes the same way but writes nothing: it prints the version the manifest would
  record and whether it differs from the manifest already there.
* ``--verify`` pins nothing either: it checks ``DIR`` against its existing manifest (every shard's
  size, rows and schema, and its content hash when the manifest has them, which ``--hash size``
  manifests do not) and says which shards differ.

Guarantee: pinning the same bytes gives the same version hash; ``--dry-run`` and ``--verify``
never create or change a file. Cost: one read of every byte (``--hash size``: metadata only).

Exit status: 0 pinned / would pin / verified, 1 ``--verify`` found a difference, 2 bad input (no
shards, no manifest for ``--verify``, mixed schemas).
"""

from __future__ import annotations

import argparse
import time

from resumable_data.errors import ConfigError, DatasetIntegrityError, describe

__all__ = ["COMMAND", "EXAMPLES", "configure", "run"]

EXAMPLES = """examples:
  resumable-data pin data/                  # hash every shard, write data/.rd-manifest.json
  resumable-data pin data/ --dry-run        # the same, but write nothing: print the version it would pin
  resumable-data pin data/ --verify         # check data/ against its manifest (exit 1 on a difference)
  resumable-data pin data/ --hash size      # instead: sizes, rows and schema only (fast, weaker, another version)"""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "data", help="a folder of Arrow IPC (.arrow, .ipc, .feather) or Parquet shards, searched recursively"
    )
    p.add_argument(
        "--hash",
        choices=("content", "size"),
        default="content",
        help="'content' (default): xxh3-128 of every byte; 'size': sizes, rows and schema only",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="hash and report, write nothing")
    mode.add_argument(
        "--verify",
        action="store_true",
        help="check the folder against its existing .rd-manifest.json instead of pinning",
    )
    p.add_argument("--workers", type=int, default=None, help="hashing threads (default: min(shards, CPUs, 8))")


def _summary(version) -> str:
    size = sum(s.size for s in version.shards)
    return (
        f"{version.hash} ({version.num_records:,} records, {len(version.shards)} shard(s), "
        f"{size / 2**20:,.1f} MiB, hash={version.hash_mode.value})"
    )


def _verify(args: argparse.Namespace) -> int:
    from resumable_data.sources import DatasetVersion
    from resumable_data.sources.files import MANIFEST_NAME
    from resumable_data.sources.version import HashMode, VerifyLevel

    version = DatasetVersion.load(args.data)
    level = VerifyLevel.CONTENT if version.hash_mode is HashMode.CONTENT else VerifyLevel.SIZE
    t0 = time.perf_counter()
    try:
        version.verify(level)
    except DatasetIntegrityError as e:
        _say([f"MISMATCH:  {args.data} differs from its {MANIFEST_NAME} ({level.value} check)", f"  - {e}"])
        return 1
    checked = (
        "every shard's content hash matches"
        if level is VerifyLevel.CONTENT
        else "sizes, rows and schema match (the manifest has no content hashes: pin with --hash content)"
    )
    _say(
        [
            f"verified:  in {time.perf_counter() - t0:.1f} s: {args.data}",
            f"version:   {_summary(version)}",
            f"files:     {checked}",
        ]
    )
    return 0


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import resumable_data as rd
    from resumable_data.sources import DatasetVersion
    from resumable_data.sources.files import MANIFEST_NAME

    if not Path(args.data).is_dir():
        raise ConfigError(
            describe(
                "data",
                args.data,
                "an existing folder of shard files",
                "check the path, or write shards first with rd.write_arrow_shards",
            )
        )
    if args.workers is not None and args.workers < 1:
        raise ConfigError(describe("--workers", args.workers, "a positive number of threads", "e.g. --workers 4"))
    if args.verify:
        return _verify(args)
    manifest = Path(args.data) / MANIFEST_NAME
    before, existed = None, manifest.is_file()
    if existed:
        try:
            before = DatasetVersion.load(args.data)
        except rd.ResumableDataError:
            before = None  # unreadable: pinning replaces it
    t0 = time.perf_counter()
    version = rd.pin(args.data, hash=args.hash, max_workers=args.workers, save=not args.dry_run)
    took = f"{time.perf_counter() - t0:.1f} s"
    if before is None:
        change = (
            "no manifest before"
            if not existed
            else ("the manifest there is unreadable" if args.dry_run else "replaced an unreadable manifest")
        )
    else:
        change = "unchanged" if before.hash == version.hash else f"the previous manifest pinned {before.hash}"
    if args.dry_run:
        _say(
            [
                f"dry run:   nothing written, in {took}: {args.data}",
                f"version:   {_summary(version)}",
                f"manifest:  would be written ({change}): {manifest}",
            ]
        )
    else:
        _say(
            [
                f"pinned:    in {took}: {args.data}",
                f"version:   {_summary(version)}",
                f"manifest:  ({change}) {manifest}",
            ]
        )
    return 0


def _say(lines: list[str]) -> None:
    from resumable_data.cli_view import fit

    print("\n".join(fit(lines)))


#: ``(name, help, configure, run)``: ``resumable_data.cli`` registers it with ``register(*COMMAND)``.
COMMAND = ("pin", "hash a folder of shards and write its .rd-manifest.json (the dataset version)", configure, run)
