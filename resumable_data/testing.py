"""``rd.testing``: prove, in your own CI, that your pipeline resumes bit-exactly.

:func:`check_resume` runs your loader uninterrupted for ``steps`` steps, then again with
interruptions (random steps, epoch boundaries, chained resumes, another worker count and, where
the policy allows, another world size), saving the state at each interruption and resuming in a
freshly built loader. Every batch is reduced to per-key digests (xxh3-64 of each tensor's dtype,
shape and bytes; ``repr`` for other values) and compared in order, never sorted. With a training
state (``make_model=`` or ``make_state=``, and ``train_step=``) the harness also carries the
model, optimizer, scheduler and RNG across each interruption through ``rd.TrainingState``,
``rd.save_checkpoint`` and ``rd.load_checkpoint`` (as a real job would) and digests the training
state after every step.

Example (paste into your test suite)::

    import torch
    import resumable_data as rd
    from resumable_data.testing import assert_resumes

    def make_loader(**kw):  # kw: num_workers=, sharding=
        src = rd.ArrowShards("my_pinned_data/")
        return rd.DataLoader(src, batch_size=16 // kw["sharding"].world_size, shuffle=True, seed=0,
                             tail="wrap", **kw)

    def test_my_pipeline_resumes():
        assert_resumes(make_loader, steps=60, interrupts=5, num_workers=(0, 2), world_sizes=(1, 2))

    def make_state():  # the keyword arguments of rd.TrainingState, without loader=
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        return {"model": model, "optimizer": torch.optim.Adam(model.parameters(), lr=1e-2)}

    def train_step(state, batch):  # state: the rd.TrainingState (state.model, state.optimizer, ...)
        loss = state.model(batch["x"].float()).pow(2).mean()
        loss.backward()
        state.optimizer.step()
        state.optimizer.zero_grad(set_to_none=True)

    def test_my_training_resumes():
        assert_resumes(make_loader, steps=40, interrupts=4, make_state=make_state, train_step=train_step)

``make_loader(**kw)`` receives ``num_workers`` and ``sharding`` (an ``rd.Sharding`` with
``sharding_policy``) and must keep the global batch (``batch_size * world_size``) constant across
world sizes.
"""

from __future__ import annotations

import copy
import enum
import json
import random
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from resumable_data._schema import coerce_enum
from resumable_data.batch_digest import batch_digests
from resumable_data.batch_digest import tree_digest as _tree_digest
from resumable_data.checkpoint import TrainingState
from resumable_data.errors import ConfigError, describe
from resumable_data.loader.iterator import LoaderIterator
from resumable_data.loader.protocol import ResumableLoader
from resumable_data.loader.state import CommitMode, LoaderState, OnUncommitted
from resumable_data.plan import Sharding, ShardingPolicy

__all__ = ["Divergence", "ResumeReport", "assert_resumes", "batch_digests", "check_resume"]

#: The parts of an ``rd.TrainingState`` digested after every step (its oracles; the RNG is
#: restored by the checkpoint but not compared, since the loader seeds the global generators per
#: sample in the main process with ``num_workers=0`` and in the workers otherwise).
STATE_PARTS = (
    "parameters",
    "buffers",
    "gradients",
    "optimizer",
    "optimizer_groups",
    "scheduler",
    "scaler",
    "ema",
    "callbacks",
    "modes",
)


@dataclass(frozen=True)
class Divergence:
    """The first place an interrupted run differed from the uninterrupted one.

    ``key`` is a batch key, or ``state.<part>`` for the training state (``state.parameters``,
    ``state.optimizer``, ``state.scheduler``, ...; ``state`` for a functional ``train_step``)."""

    run: str
    step: int
    rank: int
    key: str
    expected: str
    got: str

    def __str__(self) -> str:
        return (
            f"{self.run}: step {self.step}, rank {self.rank}, key {self.key!r}: "
            f"expected digest {self.expected}, got {self.got}"
        )


@dataclass(frozen=True)
class ResumeReport:
    """What :func:`check_resume` compared, the first divergence if any, and notes on what was not
    checked (e.g. a world-size change the loader's policy forbids)."""

    runs: tuple[str, ...]
    batches_compared: int
    divergence: Divergence | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """Whether every compared batch matched (no divergence)."""
        return self.divergence is None

    def __str__(self) -> str:
        head = "bit-exact" if self.ok else f"DIVERGED: {self.divergence}"
        text = f"{head}; {len(self.runs)} interrupted runs, {self.batches_compared} batch digests compared in order"
        return text + "".join(f"\nnote: {n}" for n in self.notes)


class _Kind(enum.Enum):
    """What the harness carries beside the data (from the arguments of :func:`assert_resumes`)."""

    DATA = "data"  #: no train_step: the data only
    MODEL = "model"  #: make_model + train_step(model, batch)
    STATE = "state"  #: make_state + train_step(state, batch)
    FUNCTIONAL = "functional"  #: train_step(state, batch) -> state alone


@dataclass(frozen=True)
class _Spec:
    make_loader: Callable[..., Any]
    policy: ShardingPolicy
    kind: _Kind
    make_state: Callable[[], Mapping[str, Any]] | None
    train_step: Callable[..., Any] | None
    on_uncommitted: OnUncommitted
    allow_unpinned: bool


def _next_batch(iters: list, r: int, loader: Any) -> Any:
    while True:
        if iters[r] is None:
            iters[r] = iter(loader)
        try:
            return next(iters[r])
        except StopIteration:
            iters[r] = None


class _Run:
    """One rank-set of loaders (simulated ranks in this process) plus the optional training state,
    which lives on rank 0 (each rank of a data-parallel job holds a replica)."""

    def __init__(self, spec: _Spec, world: int, workers: int) -> None:
        self.spec = spec
        self.loaders = [
            spec.make_loader(num_workers=workers, sharding=Sharding(world, r, spec.policy)) for r in range(world)
        ]
        self.iters: list[Any] = [None] * world
        self.ts: TrainingState | None = None
        self.fstate: Any = None  # a functional train_step's state
        self.committed: Any = None  # ... as of the last commit
        if spec.make_state is not None:  # _Kind.MODEL or _Kind.STATE
            kwargs = dict(spec.make_state())
            self.ts = TrainingState(**kwargs, loader=self.loaders[0])

    @property
    def explicit(self) -> bool:
        return self.loaders[0].snapshot().commit is CommitMode.EXPLICIT

    def step(self) -> list[dict[str, str]]:
        out = []
        for r, loader in enumerate(self.loaders):
            batch = _next_batch(self.iters, r, loader)
            digests = batch_digests(batch)
            train_step = self.spec.train_step  # None: the data only
            if r == 0 and train_step is not None:
                if self.ts is not None:  # make_model / make_state: the rd.TrainingState on rank 0
                    train_step(self.ts.model if self.spec.kind is _Kind.MODEL else self.ts, batch)
                else:
                    self.fstate = train_step(self.fstate, batch)
                    digests["state"] = _tree_digest(self.fstate)
                if self.ts is not None:
                    oracles = self.ts.oracles()
                    digests.update({f"state.{k}": oracles[k] for k in STATE_PARTS if k in oracles})
            out.append(digests)
        lead = self.loaders[0]
        if not self.explicit:
            self.committed = copy.deepcopy(self.fstate)
        elif lead.microstep_is_last:  # a training loop commits each completed accumulation window
            if self.ts is not None:
                self.ts.commit(applied=True)
            for loader in self.loaders[1 if self.ts is not None else 0 :]:
                loader.commit(applied=True)
            self.committed = copy.deepcopy(self.fstate)
        return out

    def save(self, directory: str, n: int) -> dict[str, Any]:
        """Everything a restarted job needs: each rank's loader state (through JSON) and the
        training state as a checkpoint in ``directory``."""
        saved: dict[str, Any] = {"loaders": [json.loads(json.dumps(ld.state_dict())) for ld in self.loaders]}
        from resumable_data.checkpoint import save_checkpoint

        if self.ts is not None:
            saved["checkpoint"] = save_checkpoint(directory, self.ts, step=n, keep_last=1)
        elif self.spec.kind is _Kind.FUNCTIONAL:
            state = self.committed if self.spec.on_uncommitted is OnUncommitted.REPEAT else self.fstate
            saved["checkpoint"] = save_checkpoint(directory, _Tree({"state": state}), step=n, keep_last=1)
        return saved

    def restore(self, saved: dict[str, Any]) -> int:
        """Load ``saved`` into this run's fresh objects; returns the next step to deliver."""
        states = saved["loaders"]
        spec = self.spec
        if self.ts is not None:
            from resumable_data.checkpoint import load_checkpoint

            load_checkpoint(
                saved["checkpoint"], self.ts, allow_unpinned=spec.allow_unpinned
            )  # rank 0: loader, model, optimizer, RNG, ...
            lead = self.loaders[0].cursor
            # the other ranks follow rank 0's choice: they load the state rank 0's loader was restored
            # to (a loader's state is the same on every rank), never their own saved one, which can be
            # ahead of it: rank 0's loader, watched through its TrainingState's model, leaves a batch
            # that no training forward ran on uncommitted, and the restore repeats it there
            s = json.loads(json.dumps(self.loaders[0].state_dict()))
            for r, loader in enumerate(self.loaders[1:], 1):
                uncommitted = LoaderState.from_dict(s).uncommitted
                loader.load_state_dict(
                    s, on_uncommitted=OnUncommitted.REPEAT if uncommitted else None, allow_unpinned=spec.allow_unpinned
                )
                for _ in range(lead.delivered - loader.cursor.delivered):
                    _next_batch(self.iters, r, loader)
            return int(lead.delivered)
        for r, loader in enumerate(self.loaders):
            loader.load_state_dict(
                states[r % len(states)], on_uncommitted=spec.on_uncommitted, allow_unpinned=spec.allow_unpinned
            )
        if spec.kind is _Kind.FUNCTIONAL:
            from resumable_data.checkpoint import read_checkpoint

            self.fstate = read_checkpoint(saved["checkpoint"]).tree["state"]
            self.committed = copy.deepcopy(self.fstate)
        cursor = LoaderState.from_dict(states[0]).cursor
        return cursor.committed if spec.on_uncommitted is OnUncommitted.REPEAT else cursor.delivered

    def close(self) -> None:
        for it in self.iters:
            if isinstance(it, LoaderIterator):
                it.close()


class _Tree:
    """A functional train_step's state as a ``Stateful`` for ``rd.save_checkpoint``."""

    def __init__(self, tree: Any) -> None:
        self.tree = tree

    def state_dict(self) -> Any:
        return self.tree


def _spec(make_loader, make_model, make_state, train_step, on_uncommitted, allow_unpinned, policy) -> _Spec:
    if not callable(make_loader):
        raise ConfigError(
            describe(
                "make_loader",
                make_loader,
                "a callable make_loader(**kw) -> rd.DataLoader",
                "pass a function of num_workers= and sharding=",
            )
        )
    for name, fn in (("make_model", make_model), ("make_state", make_state), ("train_step", train_step)):
        if fn is not None and not callable(fn):
            raise ConfigError(describe(name, fn, "a callable or None", f"pass a function as {name}="))
    if make_model is not None and make_state is not None:
        raise ConfigError(
            describe(
                "make_model",
                make_model,
                "make_model= or make_state=, not both",
                "put the model in make_state's dict: {'model': ..., 'optimizer': ...}",
            )
        )
    factory = make_model if make_model is not None else make_state
    if factory is not None and train_step is None:
        name = "make_model" if make_model is not None else "make_state"
        raise ConfigError(
            describe(
                "train_step",
                None,
                f"a train_step(state, batch) beside {name}=",
                "pass the step that updates the state (without it nothing would change)",
            )
        )
    kind = (
        _Kind.DATA
        if train_step is None
        else (_Kind.FUNCTIONAL if factory is None else _Kind.MODEL if make_model is not None else _Kind.STATE)
    )
    if kind in (_Kind.MODEL, _Kind.STATE) and on_uncommitted is not None:
        raise ConfigError(
            describe(
                "on_uncommitted",
                on_uncommitted,
                "None with a training state (its accumulation policy decides)",
                "drop on_uncommitted=, or return accumulation='rewind' / 'save_gradients' from make_state",
            )
        )
    choice = coerce_enum(
        OnUncommitted.REPEAT if on_uncommitted is None else on_uncommitted, OnUncommitted, "on_uncommitted"
    )
    policy = coerce_enum(policy, ShardingPolicy, "sharding_policy")
    build: Callable[[], dict[str, Any]] | None = None  # the training state's arguments (None: no state)
    if make_model is not None:

        def build_model() -> dict[str, Any]:
            return {"model": make_model()}

        build = build_model
    elif make_state is not None:

        def build_state() -> dict[str, Any]:
            kwargs = make_state()
            if not isinstance(kwargs, Mapping) or "loader" in kwargs:
                raise ConfigError(
                    describe(
                        "make_state()",
                        type(kwargs).__name__,
                        "a dict of rd.TrainingState keyword arguments without loader=",
                        "return e.g. {'model': m, 'optimizer': opt}; the harness adds the loader",
                    )
                )
            return dict(kwargs)

        build = build_state
    return _Spec(make_loader, policy, kind, build, train_step, choice, bool(allow_unpinned))


def check_resume(
    make_loader: Callable[..., Any],
    *,
    steps: int,
    interrupts: int | Sequence[int] = 4,
    seed: int = 0,
    num_workers: Sequence[int] = (0, 2),
    world_sizes: Sequence[int] = (1,),
    chained: int = 2,
    train_step: Callable[[Any, Any], Any] | None = None,
    make_model: Callable[[], Any] | None = None,
    make_state: Callable[[], Mapping[str, Any]] | None = None,
    sharding_policy: ShardingPolicy | str = ShardingPolicy.CONTIGUOUS,
    on_uncommitted: OnUncommitted | str | None = None,
    allow_unpinned: bool = False,
) -> ResumeReport:
    """Compare interrupted runs of ``make_loader``'s pipeline with an uninterrupted one.

    ``interrupts``: a count of random interrupt steps (epoch boundaries are always added) or the
    explicit steps. Each run resumes ``chained`` times in a row, alternating ``num_workers``, and
    every world size starts at least one run. With several ``world_sizes`` each run also resumes
    into the next world size (an elastic reshard) and its batches are compared with an
    uninterrupted run at that world size, *where the policy allows*: if the loader was built with
    ``elastic=False``, or a training state is checked (a data-parallel update is not bit-identical
    across world sizes), runs keep their world size, each world size is checked on its own, and
    the report's ``notes`` say so. ``sharding_policy`` is the ``rd.Sharding`` policy handed to
    ``make_loader``.

    What is carried across each interruption, by the arguments given:

    * no ``train_step``: the data only. Loader states go through JSON; ``on_uncommitted``
      (``"repeat"``, the default, or ``"skip"``) is passed to ``load_state_dict``.
    * ``make_model`` + ``train_step(model, batch)``: the model, inside an ``rd.TrainingState``.
    * ``make_state`` + ``train_step(state, batch)``: ``make_state()`` returns the keyword arguments
      of ``rd.TrainingState`` (``model``, ``optimizer``, ``scheduler``, ``scaler``, ``ema``,
      ``callbacks``, ``accumulation``, ...; not ``loader``, which the harness adds: rank 0's);
      ``train_step`` receives that ``rd.TrainingState``. Both forms save with ``rd.save_checkpoint``
      and restore with ``rd.load_checkpoint`` into freshly built objects; the state's accumulation
      policy (not ``on_uncommitted``, which must stay unset) decides how an unfinished window
      resumes. After every step the parts in :data:`STATE_PARTS` are digested (divergence keys
      ``state.parameters``, ``state.optimizer``, ...).
    * ``train_step`` alone: a functional step ``train_step(state, batch) -> state`` over a nested
      dict/list of tensors and plain values, ``None`` before the first step; the state as of the
      last commit (``"repeat"``) or the current one (``"skip"``) is saved with
      ``rd.save_checkpoint`` and read back with ``resumable_data.checkpoint.read_checkpoint``; divergence key ``state``.

    ``make_model`` with ``make_state``, or either without ``train_step``, is a ``ConfigError``.
    With explicit commits the harness commits every rank after each completed accumulation window
    (``loader.microstep_is_last``), as a training loop would. ``allow_unpinned`` is passed to
    ``load_state_dict`` and, with ``make_state=``, to ``rd.load_checkpoint`` (for datasets without a
    pinned version).
    """
    spec = _spec(make_loader, make_model, make_state, train_step, on_uncommitted, allow_unpinned, sharding_policy)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
        raise ConfigError(describe("steps", steps, "an integer >= 2", "run more steps"))
    if not num_workers or not world_sizes or isinstance(chained, bool) or not isinstance(chained, int) or chained < 1:
        raise ConfigError(
            describe(
                "num_workers/world_sizes/chained",
                (num_workers, world_sizes, chained),
                "non-empty sequences and chained >= 1",
                "pass e.g. num_workers=(0, 2)",
            )
        )
    if isinstance(interrupts, bool) or not (
        (isinstance(interrupts, int) and interrupts >= 1)
        or (
            isinstance(interrupts, Sequence)
            and not isinstance(interrupts, str)
            and all(isinstance(p, int) and not isinstance(p, bool) for p in interrupts)
        )
    ):
        raise ConfigError(
            describe(
                "interrupts",
                interrupts,
                "a count >= 1 or a sequence of step numbers",
                "pass e.g. interrupts=4 or interrupts=[10, 25]",
            )
        )
    worlds = list(dict.fromkeys(world_sizes))
    probe = make_loader(num_workers=0, sharding=Sharding(worlds[0], 0, spec.policy))
    epoch = len(probe)
    if not isinstance(probe, ResumableLoader):
        raise ConfigError(
            describe(
                "make_loader()",
                type(probe).__name__,
                "an rd.DataLoader (the rd.ResumableLoader protocol: snapshot, state_dict, load_state_dict, ...)",
                "return rd.DataLoader(dataset, ..., num_workers=num_workers, sharding=sharding)",
            )
        )
    elastic = bool(probe.state_dict().get("elastic", True))
    notes: list[str] = []
    reshard = len(worlds) > 1
    if reshard and not elastic:
        reshard = False
        notes.append(
            f"world-size changes skipped: the loader was built with elastic=False (its policy forbids "
            f"resuming on another world size); each of the world sizes {worlds} was checked on its own"
        )
    elif reshard and spec.kind is not _Kind.DATA:
        reshard = False
        notes.append(
            f"world-size changes skipped: the training state is compared bit for bit, and a data-parallel "
            f"update is not bit-identical across world sizes; each of the world sizes {worlds} was checked "
            "on its own (check the data stream's reshards in a call without train_step)"
        )

    references: dict[int, list[list[dict[str, str]]]] = {}
    for world in worlds:
        run = _Run(spec, world, num_workers[0])
        references[world] = [run.step() for _ in range(steps)]
        run.close()
    rng = random.Random(seed)
    if isinstance(interrupts, int):  # a count (a bool was refused above)
        candidates = sorted(
            {rng.randrange(1, steps) for _ in range(interrupts)} | {e for e in range(epoch, steps, epoch)}
        )
    else:
        candidates = sorted(set(interrupts))
        bad = [p for p in candidates if not 0 < p < steps]
        if bad:
            raise ConfigError(describe("interrupts", bad, f"steps in (0, {steps})", "interrupt inside the run"))
    if not candidates:
        raise ConfigError(describe("interrupts", interrupts, "at least one interrupt step", "pass interrupts >= 1"))
    runs, compared = [], 0
    with tempfile.TemporaryDirectory(prefix="rd-check-resume-") as tmp:
        for i in range(max(len(candidates), len(worlds))):
            first_stop = candidates[i % len(candidates)]
            stops = sorted({first_stop} | {rng.randrange(first_stop, steps) for _ in range(chained - 1)})
            layout = [worlds[(i + (j if reshard else 0)) % len(worlds)] for j in range(len(stops) + 1)]
            workers = [num_workers[(i + j) % len(num_workers)] for j in range(len(stops) + 1)]
            name = " -> ".join(
                f"[w{workers[j]} x{layout[j]}]" + (f" @{stops[j]}" if j < len(stops) else "")
                for j in range(len(stops) + 1)
            )
            runs.append(name)
            run = _Run(spec, layout[0], workers[0])
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
                                return ResumeReport(
                                    tuple(runs),
                                    compared,
                                    Divergence(name, done, rank, key, e[key], g.get(key, "<missing>")),
                                    tuple(notes),
                                )
                        compared += 1
                    done += 1
                if j < len(stops):
                    saved = run.save(f"{tmp}/run{i}", j)
                    run.close()
                    run = _Run(spec, layout[j + 1], workers[j + 1])
                    done = run.restore(saved)
            run.close()
    return ResumeReport(tuple(runs), compared, notes=tuple(notes))


def assert_resumes(make_loader: Callable[..., Any], **kwargs: Any) -> ResumeReport:
    """:func:`check_resume` as an assertion: raises ``AssertionError`` naming the first divergence."""
    report = check_resume(make_loader, **kwargs)
    if not report.ok:
        raise AssertionError(str(report))
    return report
