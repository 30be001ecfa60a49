"""Sample and batch contexts: what a dataset sees while rd.DataLoader fetches.

``rd.sample_context()`` (inside ``__getitem__``) and ``rd.batch_context().sample(i)`` (inside
``__getitems__``) give generators keyed by the sample's logical position, so a draw does not depend
on the batch size, the worker count or how the batch is fetched. The global generators are seeded
per sample for ``__getitem__`` datasets and once per batch (from its first key) for
``__getitems__`` datasets: both are reproducible across resumes and worker counts."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import resumable_data as rd
from tests.loader.conftest import Augmented, canon

N = 157


class Batched(torch.utils.data.Dataset):
    """Torch's batched protocol: one ``__getitems__`` call per batch, drawing per sample from the
    batch context and once per batch from the global generators."""

    def __len__(self):
        return N

    def __getitem__(self, i):  # pragma: no cover - rd.DataLoader calls __getitems__
        raise AssertionError("__getitems__ should be used")

    def __getitems__(self, records):
        ctx = rd.batch_context()
        assert ctx.records.tolist() == list(records)
        glob = torch.rand(1).item()
        out = []
        for i, r in enumerate(records):
            s = ctx.sample(i)
            out.append({"record": r, "position": s.position, "rng": float(s.rng.random()),
                        "torch": torch.rand(1, generator=s.torch_generator), "batch_global": glob})
        return out


def draws(loader) -> dict[int, tuple]:
    """record -> the per-sample draws it got, over one epoch."""
    out = {}
    for batch in loader:
        for r, a, b in zip(batch["record"].tolist(), batch["rng"].tolist(), batch["torch"].view(-1).tolist()):
            out[r] = (a, b)
    return out


@pytest.mark.parametrize("dataset", [Batched, Augmented])
def test_per_sample_draws_do_not_depend_on_batch_size_or_workers(dataset):
    ds = dataset() if dataset is Batched else dataset(N)
    if dataset is Augmented:  # its draws are named differently
        def draws_of(loader):
            out = {}
            for batch in loader:
                for r, a, b in zip(batch["record"].tolist(), batch["rng"].tolist(), batch["torch"][:, 0].tolist()):
                    out[r] = (a, b)
            return out
    else:
        draws_of = draws
    reference = draws_of(rd.DataLoader(ds, batch_size=4, shuffle=True, seed=5, drop_last=False,
                                       dataset_version="ctx-v1"))
    assert len(reference) == N
    for batch_size, workers in [(8, 0), (5, 2)]:
        got = draws_of(rd.DataLoader(ds, batch_size=batch_size, shuffle=True, seed=5, drop_last=False,
                                     num_workers=workers, dataset_version="ctx-v1"))
        assert got == reference, f"batch_size={batch_size} num_workers={workers} changed a sample's draws"
    other_seed = draws_of(rd.DataLoader(ds, batch_size=4, shuffle=True, seed=6, drop_last=False,
                                        dataset_version="ctx-v1"))
    assert other_seed != reference


def test_batch_context_positions_and_keys_match_the_plan():
    loader = rd.DataLoader(Batched(), batch_size=4, shuffle=True, seed=5, dataset_version="ctx-v1")
    plan = loader.plan
    for step, batch in enumerate(loader):
        positions = np.arange(*plan.step_span(step))
        assert batch["position"].tolist() == positions.tolist()
        assert batch["record"].tolist() == plan.records(positions).tolist()


@pytest.mark.parametrize("workers", [0, 2])
def test_getitems_dataset_resumes_exactly_including_global_draws(workers):
    make = lambda w: rd.DataLoader(Batched(), batch_size=4, shuffle=True, seed=5, num_workers=w,  # noqa: E731
                                   dataset_version="ctx-v1")
    reference = [canon(b) for b in make(0)]
    loader = make(workers)
    it = iter(loader)
    first = [canon(next(it)) for _ in range(7)]
    state = loader.state_dict()
    del it
    resumed = make(workers)
    resumed.load_state_dict(state)
    rest = [canon(b) for b in resumed]
    assert first + rest == reference
    assert len({b["batch_global"][3] for b in reference}) > 1, "the global draw did not vary by batch"


def test_contexts_outside_their_fetch_raise_with_the_fix():
    with pytest.raises(rd.ResumableDataError, match="outside a fetch"):
        rd.sample_context()
    with pytest.raises(rd.ResumableDataError, match="call it from __getitems__"):
        rd.batch_context()

    class Wrong(Batched):
        def __getitems__(self, records):
            return [{"x": rd.sample_context().record} for _ in records]

    with pytest.raises(rd.ResumableDataError, match=r"inside __getitems__: use rd.batch_context\(\).sample\(i\)"):
        next(iter(rd.DataLoader(Wrong(), batch_size=4, dataset_version="ctx-v1")))


def test_contexts_outside_their_fetch_are_usage_errors():
    """Calling a context out of order is misuse (rd.UsageError), not a configuration error."""
    assert issubclass(rd.UsageError, rd.ResumableDataError) and issubclass(rd.UsageError, RuntimeError)
    assert not issubclass(rd.UsageError, rd.ConfigError)
    with pytest.raises(rd.UsageError, match="outside a fetch"):
        rd.sample_context()
    with pytest.raises(rd.UsageError, match="outside a batched fetch"):
        rd.batch_context()

    class Wrong(Batched):
        def __getitems__(self, records):
            return [{"x": rd.sample_context().record} for _ in records]

    with pytest.raises(rd.UsageError, match=r"inside __getitems__"):
        next(iter(rd.DataLoader(Wrong(), batch_size=4, dataset_version="ctx-v1")))


def test_global_generators_are_restored_around_a_main_process_batch():
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    expected = (random.random(), float(np.random.rand()), torch.rand(1).item())
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    next(iter(rd.DataLoader(Augmented(N), batch_size=4, shuffle=True, seed=5, dataset_version="ctx-v1")))
    assert (random.random(), float(np.random.rand()), torch.rand(1).item()) == expected
