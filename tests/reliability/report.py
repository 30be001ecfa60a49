"""Paste the counts of the last full ``make test`` into ``docs/reliability.md``.

``python -m tests.reliability.report`` reads ``tests/reliability/.last_run.json`` (written by every
pytest session that ran tests counting checked cases: see ``conftest.py``) and rewrites the table
between the page's ``<!-- reliability:begin -->`` / ``<!-- reliability:end -->`` markers, so the
figures are those of one run, never typed by hand. It refuses a partial run (a ``-m`` filter, or a
run that skipped one of the counted suites). ``--check`` exits 1 when the page differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE = HERE.parent.parent / "docs" / "reliability.md"
BEGIN, END = "<!-- reliability:begin -->", "<!-- reliability:end -->"
FORMATS = (("ipc_file", "Arrow IPC file", "0xFF and 0x01"), ("ipc_stream", "Arrow IPC stream", "0xFF"),
           ("parquet", "Parquet", "0xFF"), ("ipc_file_zstd", "zstd-compressed Arrow IPC file", "0xFF"),
           ("ipc_file_via_filesystem", "Arrow IPC file read through `filesystem=` (the remote store's path)", "0xFF"),
           ("parquet_via_filesystem", "Parquet file read through `filesystem=` (the remote store's path)", "0xFF"))
#: the attack sweeps of tests/sources/test_attack_sweeps.py (keys attack_sweep:layout:attack:mode:reader:outcome)
ATTACK_LAYOUTS = (("hf_stream", "Hugging Face `save_to_disk` file (IPC stream, 1,024-row batches)"),
                  ("parquet_rich", "Parquet (dictionary pages, page index, list, struct, large_string)"),
                  ("ipc_zstd", "zstd-compressed IPC file"), ("ipc_lz4", "lz4-compressed IPC file"))
ATTACKS = (("flip", "one byte flipped (file replaced), then opened"),
           ("truncate", "file replaced by a prefix, then opened"),
           ("inplace_flip", "one byte flipped in place under a running source / loader"),
           ("inplace_truncate", "truncated in place under a running source / loader"),
           ("swap_same_size", "replaced by a same-size file after the loader was built"))
OUTCOMES = ("refused", "identical", "undetectable", "crash", "hang", "non-rd", "wrong")
REQUIRED = ("interrupt_points", "state_machine_resumes", "exactly_once_epochs", "sigkill_runs", "fuzz_cases",
            "fault_cases", "forged_checkpoint_cases", *(f"byte_flips_{f}" for f, _, _ in FORMATS),
            *(f"attack_sweep:{lay}" for lay, _ in ATTACK_LAYOUTS))


def _n(c: dict, *keys: str) -> str:
    return f"{sum(int(c.get(k, 0)) for k in keys):,}"


def attack_rows(c: dict) -> list[str]:
    """One row per (layout, attack, mode, reader) with cases: tried and each outcome."""
    seen: dict[tuple, dict] = {}
    for key, v in c.items():
        if key.startswith("attack_sweep:") and key.count(":") == 5:
            _, lay, attack, mode, reader, outcome = key.split(":")
            seen.setdefault((lay, attack, mode, reader), {})[outcome] = int(v)
    order = {k: i for i, (k, _) in enumerate(ATTACK_LAYOUTS)}
    aorder = {k: i for i, (k, _) in enumerate(ATTACKS)}
    rows = []
    for (lay, attack, mode, reader), got in sorted(seen.items(), key=lambda kv: (order.get(kv[0][0], 99),
                                                                                aorder.get(kv[0][1], 99), kv[0][2:])):
        tried = sum(got.values())
        mode_s = "pinned clean" if mode == "pinned" else "never pinned clean"
        rows.append(f"| {dict(ATTACK_LAYOUTS).get(lay, lay)} | {dict(ATTACKS).get(attack, attack)} | {mode_s} | "
                    f"{reader} | {tried:,} | " + " | ".join(f"{got.get(o, 0):,}" for o in OUTCOMES) + " |")
    return rows


def table(data: dict) -> str:
    c = data["counts"]
    rows = [
        ("random interrupt points (orders x packing modes x commit modes x accumulation, world 1 and 1<->2, "
         "crashes, 0/1/2 workers), every later batch compared in order with an uninterrupted run and the plan",
         f"{_n(c, 'interrupt_points', 'interrupt_points_nightly')} points"),
        ("Hypothesis state machine (next, commit, save, resume repeat/skip, break, skip_steps, workers 0<->1, "
         "reshard 1<->2, crash and restart) against the plan and a cursor/counter model",
         f"{_n(c, 'state_machine_resumes')} resumes, {_n(c, 'state_machine_skips')} skipped steps"),
        ("exactly-once records and tokens per epoch (multisets and sequences)",
         f"{_n(c, 'exactly_once_epochs')} epochs"),
        ("SIGKILL of a training process at random moments: `latest` complete, final parameters bit-identical",
         f"{_n(c, 'sigkill_runs', 'sigkill_runs_nightly')} kills ({_n(c, 'sigkill_inside_checkpoint_write')} "
         "inside a checkpoint write)"),
        ("forged and fuzzed loader states (pickle payloads never run, deep or huge JSON, wrong types, huge cursors, "
         "future schemas): only `rd.ResumableDataError`, bounded memory", f"{_n(c, 'fuzz_cases')} cases"),
        ("forged checkpoints: every key path of `state.json` mutated, marker re-hashed; refused with an rd error "
         "and every object's digest unchanged, or accepted only where the field is never compared",
         f"{_n(c, 'forged_checkpoint_cases')} cases: {_n(c, 'forged_checkpoint_refused')} refused, "
         f"{_n(c, 'forged_checkpoint_accepted_inert')} inert"),
    ]
    for fmt, label, masks in FORMATS:
        rows.append((f"every byte of a small {label} shard flipped (XOR {masks}), read at the default settings: "
                     "refused or harmless; 0 crashes, hangs, non-rd errors or wrong samples",
                     f"{_n(c, f'byte_flips_{fmt}')} flips, {_n(c, f'byte_flips_{fmt}_refused')} refused "
                     f"({_n(c, f'byte_flips_{fmt}_wrong_at_size')} would deliver changed values at verify='size')"))
    rows.append(("worker faults and damaged datasets: a worker that raises, is killed (also mid-training and a "
                 "persistent one) or hangs: `rd.WorkerError` or the dataset's error naming step and records, no "
                 "orphan processes, exact resume", f"{_n(c, 'fault_cases')} cases"))
    lines = [f"Counts of the `make test` run finished {data['finished']} (scale {data['scale']}, "
             f"{len(data['workers'])} pytest workers):", "", "| check | checked in that run |", "|---|---|"]
    lines += [f"| {a} | {b} |" for a, b in rows]
    attacks = attack_rows(c)
    if attacks:
        lines += ["", "Damage and change sweeps (`tests/sources/test_attack_sweeps.py`, attacks described below): "
                  "outcome counts per layout, attack, mode and reader", "",
                  "| layout | attack | mode | reader | tried | " + " | ".join(OUTCOMES) + " |",
                  "|---|---|---|---|---|" + "---|" * len(OUTCOMES)]
        lines += attacks
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    data = json.loads((HERE / ".last_run.json").read_text())
    missing = [k for k in REQUIRED if k not in data["counts"]]
    if data.get("markexpr") or missing:
        print(f"[report] the last run was partial (markexpr={data.get('markexpr')!r}, no counts for {missing}): "
              "run `make test` first", file=sys.stderr)
        return 2
    page = PAGE.read_text()
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{table(data)}{END}{tail}"
    if args.check:
        return int(new != page)
    PAGE.write_text(new)
    print(f"[report] wrote the reliability table of {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
