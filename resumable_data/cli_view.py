"""Text layout for ``resumable-data inspect``: the next step's description, a bare loader state
(what ``loader.state_dict()`` returns, dumped as JSON), and fitting every line to 100 columns.

Fitting (:func:`fit`): a ``key:   value`` line longer than the width is wrapped at its ``", "``
separators (inside a longer item, at spaces) with its continuation lines indented under the value; a ``- item`` line is wrapped under its
item; any other line (a table row) is clipped with ``…``. ``--wide`` skips fitting. The inventory
is printed as one block per category (:func:`inventory_blocks`) instead of a five-column table.
Guarantee: with a width, no output line is longer than it. Cost: linear in the output.
"""

from __future__ import annotations

import enum
import json
import re
import textwrap
from pathlib import Path
from typing import Any

from resumable_data.errors import ConfigError, describe

__all__ = ["WIDTH", "fit", "inventory_blocks", "kv", "loader_state_report", "mixture_lines", "next_step_lines"]

#: the default output width of ``inspect`` (``--wide``: unlimited)
WIDTH = 100
KEY = 22  # ``kv`` pads keys to this width, the value starts at column KEY + 1
_KV = re.compile(r"^(\s*)(\S[^:]{0,40}:\s+)")


def _value(option: Any) -> Any:
    """An option's saved value: an enum member's ``value``, anything else as it is."""
    return option.value if isinstance(option, enum.Enum) else option


def kv(out: list[str], key: str, value: Any) -> None:
    out.append(f"{key + ':':<{KEY}} {value}")


def fit(lines: list[str], width: int | None = WIDTH) -> list[str]:
    """Every line at most ``width`` columns (``None``: unchanged)."""
    if width is None:
        return lines
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        item = re.match(r"^(\s*- )", line)
        key = _KV.match(line)
        if item:
            indent = " " * len(item.group(1))
            out += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False)
        elif key and len(key.group(0)) < width // 2:
            indent = " " * len(key.group(0))
            wrapped = _wrap_items(line[len(key.group(0)) :], width - len(indent))
            out += [key.group(0) + wrapped[0]] + [indent + w for w in wrapped[1:]]
        else:
            out.append(line[: width - 1] + "…")
    return [ln[: width - 1] + "…" if len(ln) > width else ln for ln in out]  # an unbreakable word


def _wrap_items(value: str, width: int) -> list[str]:
    """Wrap ``value`` at its ``", "`` separators (so ``key=value`` items and phrases stay whole),
    at spaces only inside an item longer than ``width``."""
    items = value.split(", ")
    lines: list[str] = []
    cur = ""
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if not cur:
            cand = piece
        else:
            cand = cur + " " + piece
        if len(cand) <= width:
            cur = cand
            continue
        if cur:
            lines.append(cur)
        if len(piece) <= width:
            cur = piece
        else:
            parts = textwrap.wrap(piece, width, break_on_hyphens=False) or [piece]
            lines += parts[:-1]
            cur = parts[-1]
    if cur:
        lines.append(cur)
    if any(len(ln) < width // 2 for ln in lines[:-1]):  # few, long items: plain word wrap reads better
        return textwrap.wrap(value, width, break_on_hyphens=False) or [value]
    return lines or [value]


def inventory_blocks(inv: Any) -> list[str]:
    """The inventory as one block per category: owner, serialization, restore, oracle and value."""
    out: list[str] = []
    for e in inv:
        out.append(f"  {e.category}")
        out.append(f"    - owner {e.owner}; saved as {e.serialization}; restored by {e.restore}")
        out.append(f"    - oracle {e.oracle}: {e.value}")
    return out


def next_step_lines(out: list[str], state: Any, step: int, data: str | None, records: int) -> None:
    """The epoch, positions and first record ids (or packed documents) of ``step`` of the stream
    that the loader state ``state`` describes (packed streams need the dataset ``data``)."""
    from resumable_data.loader.stream import StepUnit, describe_step, stream_from_state
    from resumable_data.plan import Sharding, WindowBlocks

    source = None
    units = state.plan.order.blocks is WindowBlocks.READ_UNITS
    if (state.packing is not None or units) and data is not None:
        from resumable_data.sources import ArrowShards

        source = ArrowShards(data)
        other = None if source.version is None else source.version.hash
        if state.pinned and other != state.plan.version_hash:  # its lengths / units are not the run's
            kv(
                out,
                "next step",
                f"{step} (not resolved: {data} is {'unpinned' if other is None else f'pinned as {other}'}, "
                f"the run trained on {state.plan.version_hash}; pass the run's dataset as --data)",
            )
            return
    stream, ledger = stream_from_state(state, source)
    if stream is None:
        what, resolves = (
            ("packed sequences", "its sequences and documents")
            if state.packing is not None
            else ("a window shuffle over read units", "its records")
        )
        kv(out, "next step", f"{step} ({what}, epoch >= {state.epoch_base[0]}; pass --data DIR to resolve {resolves})")
        return
    info = describe_step(stream, ledger, Sharding(), step)
    assert info.span is not None and info.records is not None  # describe_step knows both of a step
    start, stop = info.span
    ids = info.records[: max(0, records)].tolist()
    more = " ..." if len(info.records) > len(ids) else ""
    kv(out, "next step", f"{step} (epoch {info.epoch}, step {info.step_in_epoch} of {info.steps_in_epoch})")
    where = "positions" if info.unit is StepUnit.RECORD else "packed sequences of the epoch"
    kv(out, f"next {where}", f"[{start}, {stop}) global, world_size {state.layout.world_size}")
    kv(out, "next record ids" if info.unit is StepUnit.RECORD else "next documents", f"{ids}{more}")


def mixture_lines(out: list[str], state: Any, step: int | None = None) -> None:
    """Per-source progress of an ``rd.Mixture`` loader state, from the state alone."""
    from resumable_data.loader.mixture.state import mixture_progress

    m = state.mixture_section()  # a LoaderState (imported where used: the CLI starts without torch)
    names = m.names
    kv(
        out,
        "mixture",
        f"{len(names)} sources, block {m.block}, version {state.plan.version_hash}"
        + ("" if m.rebase is None else f", rebased at position {m.rebase.position} (data_change)")
        + (f", {len(m.earlier)} earlier run(s) in its packed epoch" if m.earlier else ""),
    )
    kv(
        out,
        "weights",
        "; ".join(
            f"from step {step}: " + ", ".join(f"{n}={w:g}" for n, w in zip(names, ws)) for step, ws in m.schedule
        ),
    )
    if state.packing is not None:
        kv(
            out,
            "per-source progress",
            "packed: documents per step follow from the packing index (the documents' "
            "lengths); load the state into the loader and call loader.mixture_progress()",
        )
        if m.tokens is not None:
            kv(
                out,
                "tokens per source",
                f"at the committed step {state.cursor.committed}: "
                + ", ".join(f"{n}={t}" for n, t in zip(names, m.tokens)),
            )
        return
    prog = mixture_progress(state, step=state.next_step(rewound=bool(state.uncommitted)) if step is None else step)
    kv(out, "next step", f"{prog.step} (mixed positions [{prog.position}, {prog.position + state.plan.global_batch}))")
    tokens = prog.tokens or {}
    for p in prog.sources:
        kv(
            out,
            f"  {p.name}",
            f"consumed {p.consumed} records"
            + (f" ({tokens[p.name]} tokens)" if tokens else "")
            + f", epoch {p.epoch}, position {p.position} of {p.size}, next step {prog.next_step[p.name]}",
        )
    if not tokens and m.tokens is not None:
        kv(
            out,
            "tokens per source",
            f"at the committed step {state.cursor.committed}: "
            + ", ".join(f"{n}={t}" for n, t in zip(names, m.tokens)),
        )


def read_loader_state(path: Path) -> Any:
    """Parse a JSON file of ``loader.state_dict()`` into a validated ``LoaderState``."""
    from resumable_data.loader.state import LoaderState

    fix = "pass a checkpoint directory, or json.dump(loader.state_dict(), open(path, 'w'))"
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise ConfigError(
            describe("checkpoint", str(path), f"a checkpoint directory or a readable JSON file ({e})", fix)
        ) from None
    if not isinstance(d, dict) or d.get("format") != "resumable_data.loader":
        got = d.get("format") if isinstance(d, dict) else type(d).__name__
        raise ConfigError(
            describe(
                "checkpoint",
                str(path),
                "a checkpoint directory or a loader state "
                f"(JSON with format 'resumable_data.loader'; this file has {got!r})",
                fix,
            )
        )
    return LoaderState.from_dict(d)


def loader_state_report(
    path: str, data: str | None, verify: str, records: int, check_data: Any
) -> tuple[int, list[str]]:
    """``inspect STATE.json``: what a bare loader state holds and what its next step reads."""
    state = read_loader_state(Path(path))
    out: list[str] = []
    plan = state.plan
    kv(out, "loader state", f"{path} (a DataLoader.state_dict(), schema version {state.schema_version})")
    kv(out, "recovery label", state.recovery_label.value)
    kv(out, "sample seeding", _seeding_text(state.sample_seeding))
    kv(out, "counters", ", ".join(f"{k}={v}" for k, v in state.counter_view().to_dict().items()))
    cur = state.cursor
    kv(out, "cursor", f"committed={cur.committed} delivered={cur.delivered} fetched={cur.fetched}")
    if state.uncommitted:
        kv(
            out,
            "uncommitted",
            f"{state.uncommitted} step(s) delivered but not committed: load_state_dict needs "
            f"on_uncommitted='repeat' (delivers steps {cur.committed}..{cur.delivered - 1} again: "
            f"the next step below) or 'skip' (continues at step {state.next_step()})",
        )
    if state.skipped:
        kv(out, "skipped ranges", "; ".join(f"[{r.start}, {r.stop}) {r.reason}" for r in state.skipped))
    kv(
        out,
        "stream",
        f"seed {plan.seed}, {_value(plan.order.kind)}{_blocks_text(plan)}, "
        f"global batch {_batch_text(plan)}, tail {_value(plan.tail)}, "
        f"commit {state.commit.value} x{state.accumulation_steps}"
        + (f", packed {state.packing.seq_len}" if state.packing else ", unpacked"),
    )
    kv(
        out,
        "layout",
        f"world size {state.layout.world_size}, {state.layout.policy.value}{'' if state.elastic else ', not elastic'}",
    )
    if state.mixture is not None:
        mixture_lines(out, state)
        return 0, out
    next_step_lines(out, state, state.next_step(rewound=bool(state.uncommitted)), data, records)
    rc = 0
    if not state.pinned:
        kv(out, "dataset", "unpinned (resuming needs allow_unpinned=True; pin it: resumable-data pin DIR)")
    elif data is not None:
        rc = check_data(out, data, plan.version_hash, verify)
    else:
        kv(out, "dataset", f"pinned version {plan.version_hash} (pass --data DIR to check the files)")
    return rc, out


def _blocks_text(plan: Any) -> str:
    """What a window shuffle's window holds: `` 64 over read units`` (else the window, or nothing)."""
    from resumable_data.plan import Order, WindowBlocks

    if plan.order.kind is not Order.WINDOW:
        return ""
    return f" {plan.order.window}" + (" over read units" if plan.order.blocks is WindowBlocks.READ_UNITS else "")


def _batch_text(plan: Any) -> str:
    """The global batch, or the schedule (and the origin of a declared batch change or data_change rebase)."""
    sched = plan.schedule
    text = f"{plan.global_batch}" if sched is None else f"schedule {sched.to_dict()}"
    origin = plan.origin
    if origin is not None:
        text += (
            f" from step {origin.step} (position {origin.position}: a declared batch change or a data_change rebase)"
        )
    return text


def _seeding_text(record: Any) -> str:
    """The ``sample seeding`` line: the saved ``seed_per_sample`` mode and seeding version."""
    if record is None:
        return (
            "not recorded (a state written before seeding version 2): continues with seeding version 1 "
            "(numpy seeded as Python's) under the loader's seed_per_sample mode"
        )
    note = {
        1: " (numpy seeded as Python's, the formula before version 2)",
        2: " (the seeding functions' formulas, before version 3)",
    }.get(record.version, "")
    return f"seed_per_sample {record.mode.value!r}, seeding version {record.version}{note}"
