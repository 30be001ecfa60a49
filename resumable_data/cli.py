"""``resumable-data``: the command line. Subcommands register themselves in :data:`COMMANDS`.

``resumable-data inspect CHECKPOINT [--data DIR] [--markdown]`` reads a checkpoint (a step
directory, or a checkpoint root whose ``latest`` it follows), verifies its files, and prints its
recovery label and lineage, counters, cursor and microstep, the next step's epoch, positions and
first record ids, the next LR of each param group, whether the dataset at ``DIR`` matches the
pinned version the run trained on, and the training-state inventory. Nothing is unpickled and no
training code is needed. Exit status: 0 fine, 1 the dataset does not match, 2 unreadable input.

To add a subcommand (``demo``, ``check-resume``...): ``register(name, help, configure, run)`` where
``configure(parser)`` adds arguments and ``run(args) -> int`` does the work.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from resumable_data.errors import ResumableDataError

__all__ = ["COMMANDS", "Command", "build_parser", "main", "register"]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {}


def register(name: str, help: str, configure: Callable[[argparse.ArgumentParser], None],
             run: Callable[[argparse.Namespace], int]) -> None:
    """Add a subcommand (last registration of a name wins)."""
    COMMANDS[name] = Command(name, help, configure, run)


# -- inspect -------------------------------------------------------------------------------------
def _configure_inspect(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="a step directory, or a checkpoint directory (its 'latest' is read)")
    p.add_argument("--step", type=int, default=None, help="inspect this step instead of 'latest'")
    p.add_argument("--data", default=None, help="dataset directory to check against the pinned version")
    p.add_argument("--records", type=int, default=8, help="how many of the next step's record ids to show")
    p.add_argument("--markdown", action="store_true", help="print the inventory as a Markdown table")


def _kv(out: list[str], key: str, value: Any) -> None:
    out.append(f"{key + ':':<22} {value}")


def _run_inspect(args: argparse.Namespace) -> int:
    from resumable_data.checkpoint.inventory import Inventory
    from resumable_data.checkpoint.store import read_checkpoint
    from resumable_data.loader.stream import describe_step, stream_from_state
    from resumable_data.plan import Plan, Sharding

    raw = read_checkpoint(args.checkpoint, args.step)
    meta = raw.meta
    out: list[str] = []
    _kv(out, "checkpoint", f"{raw.path} (step {raw.step}, id {raw.checkpoint_id})")
    status: dict[str, Any] = {}
    status_ok = 0
    if meta is not None:
        status = meta.status
        _kv(out, "recovery label", meta.recovery_label.value)
        _kv(out, "lineage", f"run {meta.run_id}; parent checkpoint {meta.parent_checkpoint_id or '- (first run)'}")
        _kv(out, "software", ", ".join(f"{k} {v}" for k, v in sorted(meta.software.items())))
        if meta.scheduler:
            _kv(out, "scheduler", f"{meta.scheduler['type']} (one step = one {meta.scheduler['convention']})")
    if "counters" in status:
        c = status["counters"]
        _kv(out, "counters", ", ".join(f"{k}={v}" for k, v in c.items()))
    if "cursor" in status:
        cur = status["cursor"]
        _kv(out, "cursor", f"committed={cur['committed']} delivered={cur['delivered']} fetched={cur['fetched']}")
    acc = status.get("accumulation")
    if acc:
        where = "inside an accumulation window" if acc.get("mid_window") else "at an update boundary"
        how = ""
        if acc.get("mid_window"):
            how = "; gradients saved, the window continues" if not acc.get("rewound") else \
                f"; the loader repeats the window's {acc.get('uncommitted')} microbatch(es)"
        micro = acc.get("microstep")
        micro = "none pending" if micro is None else micro
        _kv(out, "microstep", f"{micro} ({where}, policy {acc.get('policy')}{how})")
    data = meta.data if meta is not None else None
    if data is not None and status.get("next_step") is not None:
        plan = Plan.from_dict(data["plan"], "meta.data.plan")
        step = int(status["next_step"])
        world = data["layout"].get("world_size")
        source = None
        if data.get("packing") is not None and args.data is not None:
            from resumable_data.sources import ArrowShards

            source = ArrowShards(args.data)
        state = {**data, "epoch_base": status.get("epoch_base", [0, 0])}
        stream, ledger = stream_from_state(state, source)
        if stream is None:
            _kv(out, "next step", f"{step} (packed sequences, epoch >= {state['epoch_base'][0]}; pass --data DIR "
                                  "to resolve its sequences and documents)")
        else:
            info = describe_step(stream, ledger, Sharding(), step)
            start, stop = info.span
            ids = info.records[: max(0, args.records)].tolist()
            more = " ..." if len(info.records) > len(ids) else ""
            _kv(out, "next step", f"{step} (epoch {info.epoch}, step {info.step_in_epoch} of {info.steps_in_epoch})")
            where = "positions" if info.unit == "record" else "packed sequences of the epoch"
            _kv(out, f"next {where}", f"[{start}, {stop}) global, world_size {world}")
            _kv(out, "next record ids" if info.unit == "record" else "next documents", f"{ids}{more}")
        if args.data is not None:
            status_ok = _check_data(out, args.data, plan.version_hash)
        else:
            _kv(out, "dataset", f"pinned version {plan.version_hash} (pass --data DIR to check the files)")
    if "next_lr" in status and meta is not None and meta.optimizer:
        groups = meta.optimizer.get("param_groups", [])
        _kv(out, "optimizer", meta.optimizer.get("type"))
        for i, lr in enumerate(status["next_lr"]):
            size = len(groups[i]["params"]) if i < len(groups) else "?"
            _kv(out, f"  next lr, group {i}", f"{lr!r} ({size} parameters)")
    if "scale" in status:
        _kv(out, "grad scaler scale", status["scale"])
    inv = Inventory.from_dict(raw.inventory)
    if len(inv):
        out.append("")
        out.append("inventory:")
        out.append(inv.to_markdown() if args.markdown else str(inv))
    print("\n".join(out))
    return status_ok


def _check_data(out: list[str], directory: str, pinned_hash: str) -> int:
    from resumable_data.sources import DatasetVersion

    try:
        version = DatasetVersion.load(directory)
    except ResumableDataError as e:
        _kv(out, "dataset", f"NOT VERIFIED: {e}")
        return 1
    if version.hash != pinned_hash:
        _kv(out, "dataset", f"MISMATCH: {directory} is pinned as {version.hash}, the run trained on {pinned_hash}")
        return 1
    try:
        version.verify("size")
    except ResumableDataError as e:
        _kv(out, "dataset", f"MISMATCH: files differ from the pinned manifest: {e}")
        return 1
    _kv(out, "dataset", f"matches the pinned version {pinned_hash} ({version.num_records} records)")
    return 0


register("inspect", "show what a checkpoint holds and what the next step will do", _configure_inspect, _run_inspect)

from resumable_data.cli_check import COMMAND as _CHECK_RESUME  # noqa: E402

register(*_CHECK_RESUME)


# -- demo ----------------------------------------------------------------------------------------
def _configure_demo(p: argparse.ArgumentParser) -> None:
    from resumable_data.demo import configure

    configure(p)


def _run_demo(args: argparse.Namespace) -> int:
    from resumable_data.demo import main_args

    return main_args(args)


register("demo", "train a tiny LM, SIGKILL it, resume it, and prove bit-identity with an uninterrupted run",
         _configure_demo, _run_demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="resumable-data", description="Deterministic, resumable data pipelines.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args))
    except ResumableDataError as e:
        print(f"resumable-data {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
