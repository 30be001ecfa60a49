"""``resumable-data inspect DATASET_DIR`` prints a pinned dataset's version and, for shards written by
``rd.prepare``, their lineage (input version, tokenizer or function, filters, package version).

``resumable-data inspect CHECKPOINT [--data DIR [--verify size|cached|content]] [--against CURRENT
[--label LABEL]] [--markdown] [--wide]`` reads a checkpoint (a step directory, or a checkpoint root
whose ``latest`` it follows), verifies its files, and prints its recovery label and lineage, counters,
cursor and microstep, the next step's epoch, positions and first record ids, the next LR of each
param group, whether the dataset at ``DIR`` matches the pinned version the run trained on (``size``,
the default: every shard's size, row count and schema; ``content``: also every shard's hash, which
catches an in-place edit that keeps the sizes), the compatibility table against the current run,
and the training-state inventory. Nothing is unpickled and no training code is needed.

``--against CURRENT``: the current run's metadata, a JSON file holding
``TrainingState.meta().to_dict()`` of the run about to resume (or another checkpoint's directory);
the table has one row per category of the compatibility contract (``rd.check_compatible``): the
saved and the current value (the first difference, when there is one; ``sample_seeding``: the
loader's ``seed_per_sample`` mode, "not recorded" in metadata written before it was) and the verdict under
``--label`` (default ``faithful_continuation``): ``ok`` (equal), ``allowed`` (a difference this
label expects), ``warning`` (allowed, reported) or ``refused`` (``load_checkpoint`` would raise
``CompatibilityError``). Every refused or warned difference follows with its fix.

``CHECKPOINT`` may also be a bare loader state: a JSON file of ``loader.state_dict()``; inspect
then shows its cursor, counters, stream and next step (and checks ``--data``). Every line fits 100
columns (long values wrap under their key, table cells are clipped, the inventory prints one block
per category); ``--wide`` prints the full-width tables instead.

``--verify`` without ``--data`` and ``--label`` without ``--against`` are refused (they say how
the other is compared), as is ``--step`` beside a step directory of another step.

Exit status: 0 fine, 1 the dataset does not match or the current run is refused, 2 unreadable input.
"""

from __future__ import annotations

import argparse
from typing import Any

from resumable_data.cli_prepare import lineage_lines as _lineage_lines
from resumable_data.cli_view import WIDTH, fit, inventory_blocks
from resumable_data.cli_view import kv as _kv
from resumable_data.errors import ConfigError, ResumableDataError, describe

__all__ = ["COMMAND", "EXAMPLES", "configure", "run"]


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "checkpoint",
        help="a step directory, a checkpoint directory (its 'latest' is read), or a JSON file of loader.state_dict()",
    )
    p.add_argument("--step", type=int, default=None, help="inspect this step instead of 'latest'")
    p.add_argument("--data", default=None, help="dataset directory to check against the pinned version")
    p.add_argument(
        "--verify",
        choices=("size", "cached", "content"),
        default="size",
        help="how --data is checked: 'size' (default, cheap: sizes, rows, schema), 'cached' "
        "(also the content hash, checked once per file state and remembered, as "
        "rd.ArrowShards does by default) or 'content' (hash every shard now)",
    )
    p.add_argument(
        "--against",
        default=None,
        metavar="CURRENT",
        help="the current run's metadata (JSON of TrainingState.meta().to_dict(), or a checkpoint "
        "directory): print the compatibility table",
    )
    p.add_argument(
        "--label",
        default="faithful_continuation",
        choices=[lab.value for lab in _labels()],
        help="the recovery label the current run would resume under (default faithful_continuation)",
    )
    p.add_argument("--records", type=int, default=8, help="how many of the next step's record ids to show")
    p.add_argument("--markdown", action="store_true", help="print the inventory as a Markdown table")
    p.add_argument("--wide", action="store_true", help=f"full-width tables (default: every line fits {WIDTH} columns)")


INSPECT_EXAMPLES = """examples:
  resumable-data inspect checkpoints/                       # the newest checkpoint ('latest')
  resumable-data inspect checkpoints/ --step 40 --data data --verify content
  resumable-data inspect loader_state.json --data data      # json.dump(loader.state_dict(), f)
  resumable-data inspect checkpoints/ --against current.json --label optimizer_reset"""


def _labels() -> list[Any]:
    from resumable_data.labels import RecoveryLabel

    return list(RecoveryLabel)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace
    from pathlib import Path

    from resumable_data.checkpoint.inventory import Inventory
    from resumable_data.checkpoint.status import CheckpointStatus
    from resumable_data.checkpoint.store import read_checkpoint
    from resumable_data.cli_view import loader_state_report, mixture_lines, next_step_lines

    width = None if args.wide or args.markdown else WIDTH
    if _is_dataset(args.checkpoint):
        _refuse_unused(
            args, "a pinned dataset folder", ("step", "data", "verify", "against", "label", "records", "markdown")
        )
        print("\n".join(fit(_dataset_report(args.checkpoint), width)))
        return 0
    for option, needs in (("verify", "data"), ("label", "against")):  # used only beside the other: never ignored
        if getattr(args, option) != _DEFAULTS[option] and getattr(args, needs) is None:
            raise ConfigError(
                describe(
                    f"--{option}",
                    getattr(args, option),
                    f"--{option} only beside --{needs} (it says how --{needs} is compared)",
                    f"add --{needs} {'DIR' if needs == 'data' else 'CURRENT'}, or drop --{option}",
                )
            )
    if Path(args.checkpoint).is_file():
        _refuse_unused(args, "a loader state file", ("step", "against", "label", "markdown"))
        rc, lines = loader_state_report(args.checkpoint, args.data, args.verify, args.records, _check_data)
        print("\n".join(fit(lines, width)))
        return rc
    _refuse_unpinned_dataset(args.checkpoint)
    raw = read_checkpoint(args.checkpoint, args.step)
    meta = raw.meta
    out: list[str] = []
    _kv(out, "checkpoint", f"{raw.path} (step {raw.step}, id {raw.checkpoint_id})")
    status = CheckpointStatus()
    status_ok = 0
    if meta is not None:
        status = meta.status
        _kv(out, "recovery label", meta.recovery_label.value)
        _kv(out, "lineage", f"run {meta.run_id}; parent checkpoint {meta.parent_checkpoint_id or '- (first run)'}")
        _kv(out, "software", ", ".join(f"{k} {v}" for k, v in sorted(meta.software.items())))
        sched = meta.sections.scheduler
        if sched is not None:
            _kv(out, "scheduler", f"{sched.type} (one step = one {sched.convention})")
    if status.counters is not None:
        _kv(out, "counters", ", ".join(f"{k}={v}" for k, v in status.counters.items()))
    if status.cursor is not None:
        cur = status.cursor
        _kv(out, "cursor", f"committed={cur.committed} delivered={cur.delivered} fetched={cur.fetched}")
    acc = status.accumulation
    if acc is not None:
        where = "inside an accumulation window" if acc.mid_window else "at an update boundary"
        how = ""
        if acc.mid_window:
            how = (
                "; gradients saved, the window continues"
                if not acc.rewound
                else f"; the loader repeats the window's {acc.uncommitted} microbatch(es)"
            )
        micro = "none pending" if acc.microstep is None else acc.microstep
        _kv(out, "microstep", f"{micro} ({where}, policy {acc.policy}{how})")
    data = meta.sections.data if meta is not None else None
    if data is not None and status.next_step is not None:
        saved = replace(data.loader, epoch_base=status.epoch_base or (0, 0))
        plan = saved.plan
        if saved.mixture is not None:
            mixture_lines(out, saved, status.next_step)
        else:
            next_step_lines(out, saved, status.next_step, args.data, args.records)
        if saved.mixture is not None:
            pass  # the sources carry their own versions (the mixture's hash combines them)
        elif args.data is not None:
            status_ok = _check_data(out, args.data, plan.version_hash, args.verify)
        else:
            _kv(out, "dataset", f"pinned version {plan.version_hash} (pass --data DIR to check the files)")
    opt = meta.sections.optimizer if meta is not None else None
    if status.next_lr is not None and opt is not None:
        groups = opt.groups
        _kv(out, "optimizer", opt.type)
        for i, lr in enumerate(status.next_lr):
            size = len(groups[i]) if i < len(groups) else "?"
            _kv(out, f"  next lr, group {i}", f"{lr!r} ({size} parameters)")
    if status.scale is not None:
        _kv(out, "grad scaler scale", status.scale)
    if args.against is not None:
        if meta is None:
            raise ConfigError(
                describe(
                    "checkpoint",
                    str(raw.path),
                    "a checkpoint with metadata (meta.json)",
                    "save it with rd.save_checkpoint(directory, rd.TrainingState(...))",
                )
            )
        status_ok = max(
            status_ok,
            _compat_table(
                out,
                meta,
                _load_current(args.against),
                args.against,
                args.label,
                cell=_CELL if width is None else _NARROW_CELL,
            ),
        )
    inv = Inventory.from_dict(raw.inventory)
    if len(inv):
        out.append("")
        out.append("inventory:")
        if args.markdown or args.wide:
            out += (inv.to_markdown() if args.markdown else inv.table(cell=None)).splitlines()
        else:
            out += inventory_blocks(inv)
    print("\n".join(fit(out, width)))
    return status_ok


#: The options' defaults, to tell an option given from one left out.
_DEFAULTS = {
    "step": None,
    "data": None,
    "against": None,
    "label": "faithful_continuation",
    "records": 8,
    "markdown": False,
    "verify": "size",
}


def _refuse_unused(args: argparse.Namespace, kind: str, unused: tuple[str, ...]) -> None:
    """An option given that ``inspect`` of ``kind`` would not use is refused (never silently ignored)."""
    given = [f"--{name}" for name in unused if getattr(args, name) != _DEFAULTS[name]]
    if given:
        raise ConfigError(
            describe(
                given[0],
                getattr(args, given[0][2:]),
                f"no {', '.join(given)} when inspecting {kind} ({args.checkpoint!r}): "
                f"{'they apply' if len(given) > 1 else 'it applies'} to a checkpoint directory",
                f"drop {' '.join(given)}, or pass a checkpoint directory",
            )
        )


def _is_dataset(path: str) -> bool:
    """A folder pinned in place (``.rd-manifest.json``, or the legacy ``rd-manifest.json``) or into
    the cache (``rd.ArrowShards`` pinned it on first use, ``rd.pin(..., save="cache")``)."""
    from pathlib import Path

    from resumable_data.sources import DatasetVersion

    return Path(path).is_dir() and DatasetVersion.locate(path) is not None


def _refuse_unpinned_dataset(path: str) -> None:
    """A folder of shards that nothing pinned: say so, instead of "no complete checkpoint"."""
    from pathlib import Path

    from resumable_data.sources.files import SHARD_SUFFIXES

    p = Path(path)
    if not p.is_dir() or (p / "latest").exists() or any(p.glob("step-*")):
        return
    shards = [q for q in p.rglob("*") if q.is_file() and q.name.endswith(SHARD_SUFFIXES)]
    if shards:
        raise ConfigError(
            describe(
                "checkpoint",
                path,
                "a checkpoint directory, a loader state JSON file, or a pinned dataset folder; it holds "
                f"{len(shards)} shard file(s) that nothing pinned",
                f"pin it: resumable-data pin {path} (writes {p / '.rd-manifest.json'}), or without writing into "
                f"it: python -c \"import resumable_data as rd; rd.pin({path!r}, save='cache')\"",
            )
        )


def _dataset_report(directory: str) -> list[str]:
    """``inspect DIR`` on a pinned dataset folder: its version and, when prepared, its lineage."""
    from resumable_data.sources import DatasetVersion

    version = DatasetVersion.load(directory)
    out: list[str] = []
    _kv(out, "dataset", f"{directory}: version {version.hash}")
    _kv(out, "records", f"{version.num_records:,} in {len(version.shards)} shard(s), hash={version.hash_mode.value}")
    for k, v in _lineage_lines(version.lineage):
        _kv(out, k, v)
    return out


def _check_data(out: list[str], directory: str, pinned_hash: str, level: str = "size") -> int:
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
        version.verify(level)
    except ConfigError as e:  # e.g. --verify content on a version pinned with hash='size'
        _kv(out, "dataset", f"NOT VERIFIED ({level} check): {e}")
        return 1
    except ResumableDataError as e:
        _kv(out, "dataset", f"MISMATCH ({level} check): files differ from the pinned manifest: {e}")
        return 1
    checked = {
        "content": "content verified: every shard's hash matches",
        "cached": "content verified: every shard's hash matches (or matched for this exact file state)",
    }.get(level, "sizes, rows and schema match; content not checked: --verify cached or content")
    _kv(out, "dataset", f"matches the pinned version {pinned_hash} ({version.num_records} records; {checked})")
    for k, v in _lineage_lines(version.lineage):
        _kv(out, k, v)
    return 0


# -- the compatibility table ----------------------------------------------------------------------
#: table rows: name -> the contract categories it covers (software: major.minor and patch)
_ROWS = (
    ("dataset", ("dataset",)),
    ("data_stream", ("data_stream",)),
    ("sample_seeding", ("sample_seeding",)),
    ("layout", ("layout",)),
    ("model_config", ("model_config",)),
    ("architecture", ("architecture",)),
    ("weights", ("weights",)),
    ("feature_schema", ("feature_schema",)),
    ("optimizer", ("optimizer",)),
    ("scheduler", ("scheduler",)),
    ("scaler", ("scaler",)),
    ("ema", ("ema",)),
    ("callbacks", ("callbacks",)),
    ("software", ("software", "software_patch")),
    ("transition_rule", ("transition_rule",)),
)
_CELL = 44
_NARROW_CELL = 24  # saved / current cells when the table must fit WIDTH columns


def _load_current(path: str) -> Any:
    """The current run's CheckpointMeta: a JSON file of ``TrainingState.meta().to_dict()``, or a
    checkpoint directory's metadata. Anything else is one ConfigError naming ``--against``."""
    import json
    from pathlib import Path

    from resumable_data.checkpoint.files import LIMITS, read_regular
    from resumable_data.checkpoint.meta import CheckpointMeta
    from resumable_data.checkpoint.store import read_checkpoint

    p = Path(path)
    try:
        if p.is_dir():
            current = read_checkpoint(p).meta
            if current is None:
                raise ConfigError("the checkpoint has no metadata (meta.json)")
            return current
        # a regular file of at most meta.json's limit: a FIFO or /dev/zero is refused unopened
        return CheckpointMeta.from_dict(
            json.loads(read_regular(p, LIMITS["meta.json"]).decode("utf-8")), "current meta"
        )
    except (ResumableDataError, ValueError, OSError) as e:
        cause = "no such file or directory" if not p.exists() and not p.is_symlink() else str(e).split("; fix:")[0]
        raise ConfigError(
            describe(
                "--against",
                path,
                "the current run's metadata (a JSON file of TrainingState.meta().to_dict(), or a checkpoint "
                f"directory; {cause})",
                "write it with json.dump(state.meta().to_dict(), f), or pass a checkpoint directory",
            )
        ) from None


def _clip(s: str, width: int = _CELL) -> str:
    return s if len(s) <= width else s[: width - 1] + "…"


def _short_type(t: Any) -> str:
    return str(t).rsplit(".", 1)[-1]


def _summary(meta: Any, category: str) -> str:
    """A short rendering of one category of a CheckpointMeta (the cell when nothing differs), read
    from its typed sections (``meta.sections``)."""
    import json

    from resumable_data.checkpoint.sections import K_PYTHON, K_TORCH

    def compact(v: Any) -> str:
        return "none" if v is None else json.dumps(v, sort_keys=True, separators=(",", ":"))

    sec = meta.sections
    data = sec.data
    model = sec.model
    if category in ("dataset", "data_stream", "sample_seeding") and data is None:
        return "none (no loader)"
    if category == "dataset":
        plan = data.loader.plan
        return f"{plan.version_hash[:12]} ({plan.num_records} records)"
    if category == "data_stream":
        loader = data.loader
        plan = loader.plan
        pk = f"packed {loader.packing.seq_len}" if loader.packing is not None else "unpacked"
        return (
            f"seed {plan.seed}, {plan.order.kind.value}, batch {plan.global_batch}, "
            f"accum {loader.accumulation_steps}, {pk}"
        )
    if category == "sample_seeding":
        mode = data.seed_per_sample  # None: metadata written before contract v2 records no mode
        return "not recorded (older metadata)" if mode is None else f"seed_per_sample {mode.value!r}"
    if category == "layout":
        return f"world size {sec.world_size}" + (f", {data.loader.layout.policy.value}" if data is not None else "")
    if category == "model_config":
        return compact(model.config) if model is not None else "none"
    if category == "architecture":
        return f"{model.root} ({len(model.modules)} modules)" if model is not None and model.modules else "none"
    if category == "weights":
        return f"{len(model.parameters)} parameters, {len(model.buffers)} buffers" if model is not None else "none"
    if category == "feature_schema":
        return sec.features.fingerprint[:21] if sec.features is not None else "none"
    if category == "optimizer":
        o = sec.optimizer
        return f"{_short_type(o.type)} ({len(o.groups)} groups)" if o is not None else "none"
    if category == "scheduler":
        sc = sec.scheduler
        return f"{_short_type(sc.type)} (per {sc.convention})" if sc is not None else "none"
    if category == "scaler":
        sa = sec.scaler
        return f"{_short_type(sa.type)} ({'enabled' if sa.enabled else 'disabled'})" if sa is not None else "none"
    if category == "ema":
        return _short_type(sec.ema.type) if sec.ema is not None else "none"
    if category == "callbacks":
        return ", ".join(meta.callbacks) or "none"
    if category == "software":
        sw = meta.software
        return ", ".join(f"{k} {sw[k]}" for k in (K_TORCH, K_PYTHON) if k in sw)
    if category == "transition_rule":
        return compact(meta.recovery_spec)
    return "-"  # a category this table has no summary for


def _compat_table(out: list[str], saved: Any, current: Any, against: str, label: str, cell: int = _CELL) -> int:
    """Append the per-category table of saved vs current; 1 when a difference is refused."""
    from resumable_data.checkpoint.compat import CONTRACT_VERSION, Category, Severity, check_compatible

    report = check_compatible(saved, current, label)
    verdict = {Severity.ERROR: "refused", Severity.WARNING: "warning", Severity.INFO: "allowed"}
    rank = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    rows = [
        (
            "recovery label",
            "ok" if label == "faithful_continuation" else "allowed",
            saved.recovery_label.value + " (saved run)",
            f"{label} (resume as)",
            "-",
        )
    ]
    covered = {c for _, cs in _ROWS for c in cs}
    extra = tuple((c.value, (c.value,)) for c in Category if c.value not in covered)  # a category added later
    for name, cats in _ROWS + extra:
        diffs = [x for x in report.differences if x.category.value in cats]
        if not diffs:
            rows.append((name, "ok", _summary(saved, name), _summary(current, name), "-"))
            continue
        worst = min(diffs, key=lambda x: rank[x.severity])
        more = f" (+{len(diffs) - 1} more)" if len(diffs) > 1 else ""
        rows.append((name, verdict[worst.severity], repr(worst.saved), repr(worst.current), worst.path + more))
    head = "refused" if report.errors else "allowed"
    _kv(
        out,
        "compatibility",
        f"{head} under label={label!r} against {against} (contract v{CONTRACT_VERSION}): "
        f"{len(report.errors)} refused, {len(report.warnings)} warning(s), "
        f"{len(report.differences)} difference(s)",
    )
    cols = ("category", "verdict", "saved", "current", "difference")
    width = [max(len(c), *(len(_clip(r[i], cell)) for r in rows)) for i, c in enumerate(cols)]
    out.append("  " + "  ".join(c.ljust(w) for c, w in zip(cols, width)).rstrip())
    out.append("  " + "  ".join("-" * w for w in width[:-1]) + "  " + "-" * len(cols[-1]))
    for r in rows:  # the difference column (a path) is clipped only to fit the line
        out.append("  " + "  ".join([_clip(v, cell).ljust(w) for v, w in zip(r[:-1], width)] + [r[-1]]).rstrip())
    shown = [x for x in report.differences if x.severity is not Severity.INFO]
    if shown:
        out.append("  refused and warned differences, each with its fix:")
        out += [f"  - {x}" for x in shown[:40]]
        if len(shown) > 40:
            out.append(f"  - ... and {len(shown) - 40} more")
    return 1 if report.errors else 0


COMMAND = (
    "inspect",
    "show what a checkpoint (or a saved loader state) holds and what the next step will do",
    configure,
    run,
)
EXAMPLES = INSPECT_EXAMPLES
