"""``resumable-data prepare SOURCE OUT --tokenizer PATH``: :func:`resumable_data.prepare` from the shell.

Algorithm: the arguments map one to one onto :func:`~resumable_data.prepare`'s (``--map
module:function --version V`` imports a ``map_fn``); the progress bar and the end summary go to
stderr, the version to stdout. :func:`lineage_lines` is how ``resumable-data inspect`` shows a
prepared dataset's lineage (``inspect OUT``, or ``inspect CHECKPOINT --data OUT``).

Guarantee: the same as :func:`~resumable_data.prepare` (re-running continues or returns at once).
Cost: the prepare run. Exit status: 0 prepared, 2 bad input (an rd error, printed).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from resumable_data.errors import ConfigError, describe

__all__ = ["COMMAND", "EXAMPLES", "configure", "lineage_lines", "run"]

EXAMPLES = """examples:
  resumable-data prepare corpus/ tokens/ --tokenizer tokenizer.json           # Arrow/Parquet/JSONL -> token shards
  resumable-data prepare data.jsonl tokens/ --tokenizer tok/ --num-proc 8 --min-tokens 16
  resumable-data prepare corpus/ out/ --map mypkg.clean:record --version v2   # any picklable fn(record)
  resumable-data prepare corpus/ tokens/ --tokenizer tok.json --engine ray    # on the Ray cluster (RAY_ADDRESS)
  resumable-data inspect tokens/                                              # version and lineage"""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="a folder or file of Arrow/Parquet shards or .jsonl files")
    p.add_argument("out", help="the output folder (empty, or an interrupted run of the same call)")
    fn = p.add_mutually_exclusive_group(required=True)
    fn.add_argument("--tokenizer", help="a tokenizer.json, or a folder holding one (Hugging Face tokenizers)")
    fn.add_argument("--map", metavar="MODULE:FUNCTION", help="an importable fn(record) -> dict | None")
    p.add_argument("--version", help="with --map: the version string of that function's behaviour")
    p.add_argument("--text-column", default="text", help="the text column (default 'text')")
    p.add_argument("--keep-column", action="append", default=[], help="an input column to copy through (repeat)")
    p.add_argument("--add-special-tokens", action="store_true", help="let the tokenizer's post-processor add them")
    p.add_argument("--keep-empty", action="store_true", help="keep documents with no tokens (dropped by default)")
    p.add_argument("--min-tokens", type=int, default=None, help="drop documents shorter than this")
    p.add_argument("--max-tokens", type=int, default=None, help="drop documents longer than this")
    p.add_argument("--bytes-per-shard", type=int, default=None, help="input bytes per output shard (128 MiB)")
    p.add_argument("--engine", choices=("processes", "ray"), default="processes")
    p.add_argument("--num-proc", type=int, default=None, help="worker processes (default: the CPUs)")
    p.add_argument("--quiet", action="store_true", help="no progress bar nor summary")


def _import(spec: str) -> Any:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError(describe("--map", spec, "MODULE:FUNCTION", "e.g. --map mypkg.prep:record"))
    # as `python -m` would: a module beside the command (./mypkg/clean.py) imports; the console
    # script's sys.path starts at its own bin/ folder, not at the working directory
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            describe(
                "--map",
                spec,
                f"an importable function: MODULE importable from the working directory {os.getcwd()!r} or "
                f"PYTHONPATH, FUNCTION defined in it ({exc})",
                "check the names, run from the folder that holds MODULE's package, or set PYTHONPATH to it",
            )
        ) from None


def run(args: argparse.Namespace) -> int:
    from resumable_data.sources.prepare import DEFAULT_BYTES_PER_SHARD, prepare

    res = prepare(
        args.source,
        args.out,
        tokenizer=args.tokenizer,
        map_fn=_import(args.map) if args.map else None,
        version=args.version,
        text_column=args.text_column,
        keep_columns=args.keep_column,
        add_special_tokens=args.add_special_tokens,
        drop_empty=not args.keep_empty,
        min_tokens=args.min_tokens,
        max_tokens=args.max_tokens,
        bytes_per_shard=DEFAULT_BYTES_PER_SHARD if args.bytes_per_shard is None else args.bytes_per_shard,
        engine=args.engine,
        num_proc=args.num_proc,
        progress=not args.quiet,
    )
    print(res.version.hash)
    return 0


def lineage_lines(lineage: dict[str, Any] | None) -> list[tuple[str, str]]:
    """``(key, value)`` lines describing a manifest's lineage (none when it has no lineage)."""
    if not lineage:
        return []
    fn = lineage.get("function", {})
    src = lineage.get("input", {})
    what = (
        f"tokenizer xxh3 {fn.get('tokenizer_xxh3_128')} on column {fn.get('text_column')!r}"
        f" (add_special_tokens={fn.get('add_special_tokens')})"
        if fn.get("kind") == "tokenizer"
        else f"function {fn.get('name')} version {fn.get('version')!r}"
    )
    return [
        ("prepared from", f"{src.get('kind')} input, version {src.get('version')}"),
        ("prepared with", what),
        ("filters", ", ".join(f"{k}={v}" for k, v in sorted(lineage.get("filters", {}).items()))),
        ("layout", ", ".join(f"{k}={v}" for k, v in sorted(lineage.get("layout", {}).items()))),
        ("prepared by", f"resumable_data {lineage.get('package_version')}"),
    ]


#: ``(name, help, configure, run)``: ``resumable_data.cli`` registers it with ``register(*COMMAND)``.
COMMAND = (
    "prepare",
    "tokenize (or map) a corpus into pinned Arrow token shards, deterministic and resumable",
    configure,
    run,
)
