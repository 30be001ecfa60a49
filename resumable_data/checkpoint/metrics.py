"""``rd.MetricLog``: an append-only JSONL metric stream that a resume neither duplicates nor forks.

A metric stream is an external side effect: it lives outside the checkpoint and keeps growing
after it, so restoring a checkpoint cannot simply "load" it. Idempotency policy:

1. Every record is keyed by ``(run_id, step, metric name)`` where ``step`` is the applied-update
   count (``loader.counters.applied_updates``). A key already present in the file is never written
   again (first write wins), so a replayed step cannot duplicate a metric. The log is one writer
   per file; its index of keys is rebuilt from the file at open.
2. The checkpoint stores the log's boundary: run id and byte offset at save time. Restoring under
   ``faithful_continuation`` / ``elastic_reshard`` moves every byte past that offset (records the
   interrupted run wrote after the checkpoint, which the resumed run will write again) to
   ``<path>.discarded.jsonl`` for audit and truncates the log there: records past the restored
   boundary are truncated, never silently kept beside their replay. A file shorter than the offset
   (records lost or replaced) is an error.
3. Under a label that starts a new run (``optimizer_reset``, ``warm_start``, ``data_change``) the
   file is left as it is and new records carry the new run id and the label; the parent run's
   records stay attributable to it.
4. A torn last line (a crash mid-append) is moved to the discarded file at open.

Each record: ``{"run_id", "step", "label", "metrics": {name: value}}``. Writes are flushed and,
with ``durable=True`` (default), fsynced. Cost: open reads the file once; ``log`` is one append.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from resumable_data._schema import check_int, coerce_enum, expect_header, expect_int, expect_mapping, expect_str
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.errors import ConfigError, describe
from resumable_data.labels import RecoveryLabel

__all__ = ["METRIC_LOG_FORMAT", "METRIC_LOG_SCHEMA_VERSION", "MetricLog"]

METRIC_LOG_FORMAT = "resumable_data.metric_log"
METRIC_LOG_SCHEMA_VERSION = 1
K_RUN_ID = "run_id"
K_STEP = "step"
K_LABEL = "label"
K_METRICS = "metrics"
K_OFFSET = "offset"
K_RECORDS = "records"
DISCARDED_SUFFIX = ".discarded.jsonl"


class MetricLog:
    """Append-only JSONL metrics keyed by run id and applied-update count (see module docs)."""

    def __init__(
        self,
        path: str | os.PathLike,
        run_id: str,
        *,
        label: RecoveryLabel | str = RecoveryLabel.FAITHFUL_CONTINUATION,
        durable: bool = True,
    ) -> None:
        self.path = Path(path)
        self.run_id = expect_str(run_id, "run_id", max_len=256, error=ConfigError)
        if not self.run_id:
            raise ConfigError(describe("run_id", run_id, "a non-empty id", "pass TrainingState.run_id"))
        self.label = coerce_enum(label, RecoveryLabel, "label")
        self.durable = bool(durable)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)
        self._reindex()

    # -- file -------------------------------------------------------------------------------------
    def _reindex(self) -> None:
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # torn last line
            self._discard_from(end)
            data = data[:end]
        self._keys: set[tuple[str, int, str]] = set()
        self._count = 0
        for n, line in enumerate(data.splitlines(), 1):
            try:
                rec = json.loads(line)
                for name in rec[K_METRICS]:
                    self._keys.add((rec[K_RUN_ID], rec[K_STEP], name))
            except (ValueError, KeyError, TypeError):
                raise CheckpointError(
                    describe(f"{self.path}:{n}", line[:80], "one JSON record per line", "repair or move the metric log")
                ) from None
            self._count += 1

    def _discard_from(self, offset: int) -> None:
        with open(self.path, "r+b") as f:
            f.seek(offset)
            tail = f.read()
            if tail:
                with open(str(self.path) + DISCARDED_SUFFIX, "ab") as d:
                    d.write(tail if tail.endswith(b"\n") else tail + b"\n")
                    d.flush()
                    os.fsync(d.fileno())
            f.truncate(offset)
            f.flush()
            os.fsync(f.fileno())

    # -- writing ----------------------------------------------------------------------------------
    def log(self, step: int, metrics: Mapping[str, Any] | None = None, **more: Any) -> int:
        """Append the metrics of applied update ``step`` not yet logged under this run; returns how
        many were written (0 for a replayed step)."""
        step = check_int(step, "step")
        values = dict(metrics or {}, **more)
        fresh = {k: v for k, v in values.items() if (self.run_id, step, k) not in self._keys}
        if not fresh:
            return 0
        for k, v in fresh.items():
            if not isinstance(k, str) or not (v is None or isinstance(v, (bool, int, float, str))):
                raise ConfigError(
                    describe(
                        f"metrics[{k!r}]",
                        type(v).__name__,
                        "a number, string, bool or None",
                        "log plain values (call .item() on tensors)",
                    )
                )
        line = (
            json.dumps(
                {K_RUN_ID: self.run_id, K_STEP: step, K_LABEL: self.label.value, K_METRICS: fresh}, sort_keys=True
            )
            + "\n"
        )
        with open(self.path, "ab") as f:
            f.write(line.encode())
            f.flush()
            if self.durable:
                os.fsync(f.fileno())
        self._keys.update((self.run_id, step, k) for k in fresh)
        self._count += 1
        return len(fresh)

    def records(self) -> list[dict[str, Any]]:
        """Every record of the log file, in order (JSON objects)."""
        return [json.loads(line) for line in self.path.read_bytes().splitlines() if line.strip()]

    def set_run(self, run_id: str, label: RecoveryLabel | str) -> None:
        """Records written from now on carry ``run_id`` and ``label`` (a new run after a reset)."""
        self.run_id = expect_str(run_id, "run_id", max_len=256, error=ConfigError)
        self.label = coerce_enum(label, RecoveryLabel, "label")

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The log's position (run id, byte offset, record count): what a checkpoint restores to."""
        return {
            "format": METRIC_LOG_FORMAT,
            "schema_version": METRIC_LOG_SCHEMA_VERSION,
            K_RUN_ID: self.run_id,
            K_OFFSET: self.path.stat().st_size,
            K_RECORDS: self._count,
        }

    def validate_state_dict(self, state: Any) -> tuple[int, str]:
        """Check ``state`` against the log file as :meth:`load_state_dict` would, changing nothing;
        returns ``(offset, run_id)``. Reads one byte of the file (the record boundary)."""
        expect_mapping(
            state, "metric_log", {"format", "schema_version", K_RUN_ID, K_OFFSET, K_RECORDS}, error=CheckpointError
        )
        expect_header(state, METRIC_LOG_FORMAT, METRIC_LOG_SCHEMA_VERSION, "metric_log", error=CheckpointError)
        offset = expect_int(state[K_OFFSET], "metric_log.offset", error=CheckpointError)
        run_id = expect_str(state[K_RUN_ID], "metric_log.run_id", max_len=256, error=CheckpointError)
        size = self.path.stat().st_size
        if size < offset:
            raise CheckpointError(
                describe(
                    "metric log",
                    f"{self.path} ({size} bytes)",
                    f"at least the {offset} bytes it held at the checkpoint",
                    "restore the metric log file the run wrote (records were lost)",
                )
            )
        if offset:
            with open(self.path, "rb") as f:
                f.seek(offset - 1)
                boundary = f.read(1)
            if boundary != b"\n":
                raise CheckpointError(
                    describe(
                        "metric log",
                        str(self.path),
                        f"a record boundary at byte {offset}",
                        "restore the metric log file the run wrote (it was rewritten)",
                    )
                )
        return offset, run_id

    def load_state_dict(self, state: Any, *, truncate: bool = True) -> int:
        """Restore the boundary; with ``truncate`` move records past it to the discarded file.
        Returns the number of bytes moved."""
        offset, run_id = self.validate_state_dict(state)
        size = self.path.stat().st_size
        moved = 0
        if truncate and size > offset:
            moved = size - offset
            self._discard_from(offset)
        self.run_id = run_id
        self._reindex()
        return moved
