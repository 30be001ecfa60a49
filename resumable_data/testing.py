"""``rd.testing``: prove, in your own CI, that your pipeline resumes bit-exactly.

:func:`check_resume` runs your loader uninterrupted for ``steps`` steps, then again with
interruptions (random steps, epoch boundaries, chained resumes, another worker count and, where
the policy allows, another world size), saving the state through JSON at each interruption and
resuming in a freshly built loader. Every batch is reduced to per-key digests (xxh3-64 of each
tensor's dtype, shape and bytes; ``repr`` for other values) and compared in order, never sorted.
With ``make_model`` and ``train_step`` it also digests the model's ``state_dict`` after every
step, saving and restoring the model with the loader.

Example (paste into your test suite)::

    import resumable_data as rd
    from resumable_data.testing import assert_resumes

    def test_my_pipeline_resumes(tmp_path):
        src = rd.ArrowShards("my_pinned_data/")
        make = lambda **kw: rd.DataLoader(src, batch_size=16 // kw["sharding"].world_size, shuffle=True,
                                          seed=0, tail="wrap", **kw)
        assert_resumes(make, steps=60, interrupts=5, num_workers=(0, 2), world_sizes=(1, 2))

``make_loader(**kw)`` receives ``num_workers`` and ``sharding`` (an ``rd.Sharding``) and must
keep the global batch (``batch_size * world_size``) constant across world sizes.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xxhash

from resumable_data.errors import ConfigError, describe
from resumable_data.plan import Sharding

__all__ = ["Divergence", "ResumeReport", "assert_resumes", "batch_digests", "check_resume"]


def _digest_value(value: Any) -> str:
    h = xxhash.xxh3_64()
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        arr = value.detach().cpu().contiguous().numpy()
        h.update(f"tensor:{arr.dtype}:{arr.shape}".encode())
        h.update(arr.tobytes())
    elif isinstance(value, np.ndarray):
        h.update(f"ndarray:{value.dtype}:{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    else:
        h.update(repr(value).encode())
    return h.hexdigest()


def batch_digests(batch: Any) -> dict[str, str]:
    """Per-key digests of a batch (a dict, a sequence or a single value)."""
    if isinstance(batch, dict):
        return {str(k): _digest_value(v) if not isinstance(v, (dict, list, tuple)) else
                xxhash.xxh3_64_hexdigest(json.dumps(batch_digests(v), sort_keys=True).encode())
                for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return {str(i): d for i, v in enumerate(batch) for d in [json.dumps(batch_digests(v), sort_keys=True)]}
    return {"batch": _digest_value(batch)}


def _model_digest(model: Any) -> str:
    h = xxhash.xxh3_64()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(_digest_value(tensor).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Divergence:
    """The first place an interrupted run differed from the uninterrupted one."""

    run: str
    step: int
    rank: int
    key: str
    expected: str
    got: str

    def __str__(self) -> str:
        return (f"{self.run}: step {self.step}, rank {self.rank}, key {self.key!r}: "
                f"expected digest {self.expected}, got {self.got}")


@dataclass(frozen=True)
class ResumeReport:
    """What :func:`check_resume` compared and the first divergence, if any."""

    runs: tuple[str, ...]
    batches_compared: int
    divergence: Divergence | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.divergence is None

    def __str__(self) -> str:
        head = "bit-exact" if self.ok else f"DIVERGED: {self.divergence}"
        return f"{head}; {len(self.runs)} interrupted runs, {self.batches_compared} batch digests compared in order"


class _Run:
    """One rank-set of loaders (simulated ranks in this process) plus an optional model."""

    def __init__(self, make_loader, world: int, workers: int, make_model, train_step) -> None:
        self.loaders = [make_loader(num_workers=workers, sharding=Sharding(world, r)) for r in range(world)]
        self.iters: list[Any] = [None] * world
        self.model = make_model() if make_model else None
        self.train_step = train_step

    def step(self) -> list[dict[str, str]]:
        out = []
        for r, loader in enumerate(self.loaders):
            while True:
                if self.iters[r] is None:
                    self.iters[r] = iter(loader)
                try:
                    batch = next(self.iters[r])
                    break
                except StopIteration:
                    self.iters[r] = None
            digests = batch_digests(batch)
            if self.model is not None and r == 0:
                self.train_step(self.model, batch)
                digests["model"] = _model_digest(self.model)
            out.append(digests)
        lead = self.loaders[0]
        if getattr(lead, "_commit_mode", None) is not None and lead._commit_mode.value == "explicit":
            if lead.microstep_is_last:  # a training loop commits each completed accumulation window
                for loader in self.loaders:
                    loader.commit(applied=True)
                self.committed_model = self._snapshot()
        else:
            self.committed_model = self._snapshot()
        return out

    def _snapshot(self) -> Any:
        return copy.deepcopy(self.model.state_dict()) if self.model is not None else None

    def save(self) -> tuple[list[dict], Any]:
        states = [json.loads(json.dumps(ld.state_dict())) for ld in self.loaders]
        return states, getattr(self, "committed_model", self._snapshot())

    def restore(self, states: list[dict], model_state: Any, on_uncommitted: str, allow_unpinned: bool) -> None:
        for r, loader in enumerate(self.loaders):
            loader.load_state_dict(states[r % len(states)], on_uncommitted=on_uncommitted,
                                   allow_unpinned=allow_unpinned)
        if self.model is not None:
            self.model.load_state_dict(model_state)

    def close(self) -> None:
        for it in self.iters:
            if it is not None and hasattr(it, "close"):
                it.close()


def check_resume(
    make_loader: Callable[..., Any],
    *,
    steps: int,
    interrupts: int | Sequence[int] = 4,
    seed: int = 0,
    num_workers: Sequence[int] = (0, 2),
    world_sizes: Sequence[int] = (1,),
    chained: int = 2,
    make_model: Callable[[], Any] | None = None,
    train_step: Callable[[Any, Any], Any] | None = None,
    on_uncommitted: str = "repeat",
    allow_unpinned: bool = False,
) -> ResumeReport:
    """Compare interrupted runs of ``make_loader``'s pipeline with an uninterrupted one.

    ``interrupts``: a count of random interrupt steps (epoch boundaries are always added) or the
    explicit steps. Each run resumes ``chained`` times in a row, alternating ``num_workers``; with
    several ``world_sizes`` every run resumes into the next world size (an elastic reshard), and
    its batches are compared with an uninterrupted run at that world size. ``allow_unpinned``
    is passed to ``load_state_dict`` (for datasets without a pinned version).
    """
    if steps < 2:
        raise ConfigError(describe("steps", steps, "at least 2", "run more steps"))
    if (make_model is None) != (train_step is None):
        raise ConfigError(describe("train_step", train_step, "given together with make_model", "pass both or neither"))
    if not num_workers or not world_sizes or chained < 1:
        raise ConfigError(describe("num_workers/world_sizes/chained", (num_workers, world_sizes, chained),
                                   "non-empty sequences and chained >= 1", "pass e.g. num_workers=(0, 2)"))
    references: dict[int, list[list[dict[str, str]]]] = {}
    for world in world_sizes:
        run = _Run(make_loader, world, num_workers[0], make_model, train_step)
        references[world] = [run.step() for _ in range(steps)]
        run.close()
    epoch = len(make_loader(num_workers=0, sharding=Sharding(world_sizes[0], 0)))
    rng = random.Random(seed)
    if isinstance(interrupts, int):
        candidates = sorted({rng.randrange(1, steps) for _ in range(interrupts)}
                            | {e for e in range(epoch, steps, epoch)})
    else:
        candidates = sorted(set(interrupts))
        bad = [p for p in candidates if not 0 < p < steps]
        if bad:
            raise ConfigError(describe("interrupts", bad, f"steps in (0, {steps})", "interrupt inside the run"))
    runs, compared = [], 0
    for i, first_stop in enumerate(candidates):
        stops = sorted({first_stop} | {rng.randrange(first_stop, steps) for _ in range(chained - 1)})
        layout = [world_sizes[(i + j) % len(world_sizes)] for j in range(len(stops) + 1)]
        workers = [num_workers[(i + j) % len(num_workers)] for j in range(len(stops) + 1)]
        name = " -> ".join(f"[w{workers[j]} x{layout[j]}]" + (f" @{stops[j]}" if j < len(stops) else "")
                           for j in range(len(stops) + 1))
        runs.append(name)
        run = _Run(make_loader, layout[0], workers[0], make_model, train_step)
        done = 0
        for j in range(len(stops) + 1):
            stop = stops[j] if j < len(stops) else steps
            expected = references[layout[j]]
            while done < stop:
                got = run.step()
                for rank, (g, e) in enumerate(zip(got, expected[done])):
                    for key in e:
                        if g.get(key) != e[key]:
                            run.close()
                            return ResumeReport(tuple(runs), compared, Divergence(name, done, rank, key, e[key], g.get(key, "<missing>")))
                    compared += 1
                done += 1
            if j < len(stops):
                states, model_state = run.save()
                run.close()
                run = _Run(make_loader, layout[j + 1], workers[j + 1], make_model, train_step)
                run.restore(states, model_state, on_uncommitted, allow_unpinned)
                cursor = states[0]["cursor"]
                done = cursor["committed"] if on_uncommitted == "repeat" else cursor["delivered"]
        run.close()
    return ResumeReport(tuple(runs), compared)


def assert_resumes(make_loader: Callable[..., Any], **kwargs: Any) -> ResumeReport:
    """:func:`check_resume` as an assertion: raises ``AssertionError`` naming the first divergence."""
    report = check_resume(make_loader, **kwargs)
    if not report.ok:
        raise AssertionError(str(report))
    return report
