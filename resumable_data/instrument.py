"""The optimization instrument: gradient descent on f(x) = x^2/2, x_{k+1} = x_k - eta * x_k.

``QuadraticDescent(eta=0.5, x0=2)``: ``reset()``; ``step()`` twice; ``x == 0.5``. With
``eta=0.25``: ``x == 1.125``. Same x0, same number of steps, another result: the transition rule
(``eta``) belongs in the recovery specification. The state therefore carries checkpoint metadata
whose optimizer settings hold ``eta``, and :meth:`QuadraticDescent.load_state_dict` applies the
same compatibility contract as a training run: restoring ``x1`` of an ``eta=0.5`` run into an
``eta=0.25`` instrument is refused as ``faithful_continuation`` and accepted only under an
explicit reset label (``optimizer_reset`` keeps ``x`` and restarts the step counter ``k``;
``warm_start`` likewise). Restore cost: O(1).
"""

from __future__ import annotations

from typing import Any

from resumable_data._schema import coerce_enum, expect_header, expect_int, expect_mapping
from resumable_data.checkpoint.compat import CompatibilityReport, check_compatible
from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.meta import CheckpointMeta, new_id
from resumable_data.checkpoint.status import CheckpointStatus
from resumable_data.errors import ConfigError, describe
from resumable_data.labels import RecoveryLabel

__all__ = ["INSTRUMENT_FORMAT", "INSTRUMENT_SCHEMA_VERSION", "QuadraticDescent"]

INSTRUMENT_FORMAT = "resumable_data.instrument.quadratic_descent"
INSTRUMENT_SCHEMA_VERSION = 1
K_X = "x"
K_K = "k"
K_X0 = "x0"
K_META = "meta"


def _number(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(describe(name, v, "a real number", f"pass {name} as a float"))
    return float(v)


class QuadraticDescent:
    """Gradient descent on x^2/2 with a recovery specification that includes ``eta``."""

    def __init__(self, eta: float, x0: float, *, run_id: str | None = None) -> None:
        self.eta = _number(eta, "eta")
        self.x0 = _number(x0, "x0")
        self.run_id = run_id or new_id()
        self.recovery_label = RecoveryLabel.FAITHFUL_CONTINUATION
        self.reset()

    def reset(self) -> None:
        """x = x0, k = 0."""
        self.x = self.x0
        self.k = 0

    def step(self) -> float:
        """One iteration: x <- x - eta * f'(x) with f'(x) = x. Returns the new x."""
        self.x = self.x - self.eta * self.x
        self.k += 1
        return self.x

    def meta(self) -> CheckpointMeta:
        return CheckpointMeta(
            run_id=self.run_id,
            recovery_label=self.recovery_label,
            model={
                "config": None,
                "parameters": {"x": {"shape": [], "dtype": "float64"}},
                "buffers": {},
                "modules": {},
            },
            optimizer={
                "type": "resumable_data.instrument.QuadraticDescent",
                "param_groups": [{"params": ["x"], "base_lr": self.eta}],
            },
            recovery_spec={"objective": "x^2/2", "update": "x - eta * x", "eta": self.eta},
            status=CheckpointStatus(extra={"k": self.k, "x": self.x}),
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": INSTRUMENT_FORMAT,
            "schema_version": INSTRUMENT_SCHEMA_VERSION,
            K_X: self.x,
            K_K: self.k,
            K_X0: self.x0,
            K_META: self.meta().to_dict(),
        }

    def check(self, state: dict[str, Any], label: RecoveryLabel | str) -> CompatibilityReport:
        return check_compatible(state[K_META], self.meta(), label)

    def load_state_dict(
        self, state: Any, *, label: RecoveryLabel | str = RecoveryLabel.FAITHFUL_CONTINUATION
    ) -> CompatibilityReport:
        """Restore ``x`` (and ``k`` under a continuation); refuses a changed ``eta`` unless ``label``
        is a reset (``optimizer_reset`` / ``warm_start``)."""
        label = coerce_enum(label, RecoveryLabel, "label")
        expect_mapping(state, "state", {"format", "schema_version", K_X, K_K, K_X0, K_META}, error=CheckpointError)
        expect_header(state, INSTRUMENT_FORMAT, INSTRUMENT_SCHEMA_VERSION, "state", error=CheckpointError)
        x = state[K_X]
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise CheckpointError(describe("state.x", x, "a number", "pass an unmodified state"))
        k = expect_int(state[K_K], "state.k", error=CheckpointError)
        report = self.check(state, label)
        report.raise_if_refused()
        saved = CheckpointMeta.from_dict(state[K_META])
        self.x = float(x)
        if label in (RecoveryLabel.FAITHFUL_CONTINUATION, RecoveryLabel.ELASTIC_RESHARD):
            self.k = k
            self.run_id = saved.run_id
        else:
            self.k = 0
            if self.run_id == saved.run_id:
                self.run_id = new_id()
        self.recovery_label = label
        return report
