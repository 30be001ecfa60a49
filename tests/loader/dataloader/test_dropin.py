"""rd.DataLoader as a drop-in for torch's DataLoader."""

import random

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler, WeightedRandomSampler

import resumable_data as rd
from tests.loader.conftest import N_RECORDS, Augmented, canon


class Plain(torch.utils.data.Dataset):
    def __len__(self):
        return N_RECORDS

    def __getitem__(self, i):
        return {"x": torch.tensor([i, i * i]), "y": i % 3, "name": f"s{i}"}


class Batched(Plain):
    def __getitems__(self, ids):
        return [self[i] for i in ids]


def pairs_collate(samples):
    return torch.stack([s["x"] for s in samples]).sum(dim=1)


@pytest.mark.parametrize("dataset_cls", [Plain, Batched])
@pytest.mark.parametrize("batch_size, drop_last, collate_fn, num_workers", [
    (8, False, None, 0), (8, True, None, 0), (5, False, pairs_collate, 0), (1, False, None, 0),
    (None, False, None, 0), (16, False, None, 2), (16, True, pairs_collate, 2),
])
def test_shuffle_false_matches_torch_exactly(dataset_cls, batch_size, drop_last, collate_fn, num_workers):
    kwargs = dict(batch_size=batch_size, drop_last=drop_last, collate_fn=collate_fn, num_workers=num_workers)
    ours = [canon(b) for b in rd.DataLoader(dataset_cls(), **kwargs)]
    theirs = [canon(b) for b in torch.utils.data.DataLoader(dataset_cls(), **kwargs)]
    assert ours == theirs
    assert len(rd.DataLoader(dataset_cls(), **kwargs)) == len(torch.utils.data.DataLoader(dataset_cls(), **kwargs))


def test_arrow_default_batch_is_a_dict_of_padded_tensors(shards):
    batch = next(iter(rd.DataLoader(shards, batch_size=6)))
    rows = [shards[i] for i in range(6)]
    assert batch["id"].tolist() == list(range(6))
    lengths = [len(r["tokens"]) for r in rows]
    assert batch["tokens_lengths"].tolist() == lengths
    assert batch["tokens"].shape == (6, max(lengths)) and batch["tokens"].dtype == torch.int32
    for i, r in enumerate(rows):
        assert batch["tokens"][i, : lengths[i]].tolist() == r["tokens"]
        assert (batch["tokens"][i, lengths[i]:] == 0).all()  # documented pad value
    assert batch["text"] == [r["text"] for r in rows]


def test_arrow_collate_fn_gets_row_dicts_and_arrow_collate_gets_the_table(shards):
    rows = next(iter(rd.DataLoader(shards, batch_size=3, collate_fn=lambda rows: rows)))
    assert rows == [shards[i] for i in range(3)]
    table = next(iter(rd.DataLoader(shards, batch_size=3, arrow_collate=lambda t: t)))
    assert table.column("id").to_pylist() == [0, 1, 2]


def test_a_new_iter_continues_from_the_cursor_after_break():
    loader = rd.DataLoader(Plain(), batch_size=10, shuffle=True, seed=4)
    reference = [canon(b) for b in rd.DataLoader(Plain(), batch_size=10, shuffle=True, seed=4)]
    got = []
    for b in loader:
        got.append(canon(b))
        if len(got) == 7:
            break
    got += [canon(b) for b in loader]  # the rest of the epoch, not a new epoch
    assert got == reference
    second = [canon(b) for b in loader]  # then the next epoch, reshuffled
    assert len(second) == len(reference) and second != reference


def test_the_training_process_randomness_is_left_alone():
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    expected = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    loader = rd.DataLoader(Augmented(), batch_size=4, shuffle=True, seed=1)
    for _ in range(2):
        for _ in loader:
            pass
    assert torch.equal(torch.rand(3), expected[0])
    assert random.random() == expected[1] and np.random.rand() == expected[2]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_augmentation_does_not_depend_on_workers_or_prefetch(num_workers):
    base = [canon(b) for b in rd.DataLoader(Augmented(), batch_size=8, shuffle=True, seed=9)]
    kwargs = dict(prefetch_factor=3, persistent_workers=True) if num_workers else {}
    got = [canon(b) for b in rd.DataLoader(Augmented(), batch_size=8, shuffle=True, seed=9,
                                          num_workers=num_workers, **kwargs)]
    assert got == base
    assert base[0]["ctx_record"] == base[0]["record"]


def test_seed_sources_and_the_missing_seed_error():
    a = [canon(b) for b in rd.DataLoader(Plain(), batch_size=8, shuffle=True, seed=5)]
    b = [canon(b) for b in rd.DataLoader(Plain(), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(5))]
    c = [canon(b) for b in rd.DataLoader(Plain(), batch_size=8, sampler=RandomSampler(Plain(), generator=torch.Generator().manual_seed(5)))]
    assert a == b == c
    with pytest.raises(rd.ConfigError, match="seed"):
        rd.DataLoader(Plain(), batch_size=8, shuffle=True)


@pytest.mark.parametrize("shuffle, drop_last", [(True, False), (False, True)])
def test_distributed_sampler_becomes_strided_sharding(shuffle, drop_last):
    world = 3
    loaders = [rd.DataLoader(Plain(), batch_size=4, sampler=DistributedSampler(Plain(), world, r, shuffle=shuffle, seed=2,
                                                                              drop_last=drop_last)) for r in range(world)]
    global_loader = rd.DataLoader(Plain(), batch_size=12, shuffle=shuffle, seed=2, drop_last=drop_last,
                                  tail="drop" if drop_last else "wrap")
    steps = 0
    for ranks, whole in zip(zip(*loaders), global_loader):
        xs = torch.stack([r["x"][:, 0] for r in ranks], dim=1).reshape(-1)  # interleave ranks: strided
        # drop_last=False: the last step is padded to a multiple of the world size only (torch's
        # DistributedSampler), the prefix of the wrapped global batch: 157 -> 159 records, 1 per rank
        assert xs.tolist() == whole["x"][:len(xs), 0].tolist()
        steps += 1
    assert steps == len(global_loader) == len(loaders[0])
    assert sum(len(b["y"]) for b in loaders[0]) == (157 // world if drop_last else -(-157 // world))
    assert loaders[0].sharding == rd.Sharding(3, 0, "strided")


def test_set_epoch_on_a_translated_distributed_sampler_is_harmless():
    """Epochs come from positions: calling set_epoch (as torch recipes do) changes nothing."""
    sampler = DistributedSampler(Plain(), 2, 1, shuffle=True, seed=7)
    with_calls = rd.DataLoader(Plain(), batch_size=4, sampler=sampler)
    without = rd.DataLoader(Plain(), batch_size=4, sampler=DistributedSampler(Plain(), 2, 1, shuffle=True, seed=7))
    got, expected = [], []
    for epoch in range(3):
        sampler.set_epoch(epoch + 5)
        got += [canon(b) for b in with_calls]
        expected += [canon(b) for b in without]
    assert got == expected and got[:5] != got[len(got) // 3:][:5]  # and epochs still differ


def test_seed_per_sample_off_leaves_transforms_on_the_global_generators():
    def run(global_seed, **kw):
        torch.manual_seed(global_seed)
        return [canon(b)["torch"] for b in rd.DataLoader(Augmented(), batch_size=8, shuffle=True, seed=1, **kw)]

    assert run(0) == run(1)  # seeded per sample: independent of the process's generator
    assert run(0, seed_per_sample=False) != run(1, seed_per_sample=False)


def test_translated_samplers_and_rejected_ones():
    seq = [canon(b) for b in rd.DataLoader(Plain(), batch_sampler=BatchSampler(SequentialSampler(Plain()), 7, True))]
    assert seq == [canon(b) for b in rd.DataLoader(Plain(), batch_size=7, drop_last=True)]
    # Both are positional now (tests/loader/test_samplers.py); they need a seed like shuffle=True.
    with pytest.raises(rd.ConfigError, match="seed"):
        rd.DataLoader(Plain(), sampler=WeightedRandomSampler([1.0] * N_RECORDS, 10))
    assert len(rd.DataLoader(Plain(), sampler=WeightedRandomSampler([1.0] * N_RECORDS, 10), seed=1)) == 10
    assert len(rd.DataLoader(Plain(), sampler=RandomSampler(Plain(), replacement=True), seed=1)) == N_RECORDS
    with pytest.raises(rd.ConfigError, match="PositionalSampler"):  # an rd error, no longer a bare TypeError
        rd.DataLoader(Plain(), sampler=iter(range(N_RECORDS)))


class EveryOther:
    """A positional sampler: odd records first, then even ones, reversed every other epoch."""

    def __len__(self):
        return N_RECORDS

    def indices(self, epoch, offsets):
        order = np.concatenate([np.arange(1, N_RECORDS, 2), np.arange(0, N_RECORDS, 2)])
        return (order if epoch % 2 == 0 else order[::-1])[offsets]

    def fingerprint(self):
        return "EveryOther/1"


def test_positional_sampler_protocol():
    loader = rd.DataLoader(Plain(), batch_size=10, sampler=EveryOther())
    first = next(iter(loader))
    assert first["x"][:, 0].tolist() == list(range(1, 21, 2))
    state = loader.state_dict()
    assert state["sampler"] == "EveryOther/1"
    other = rd.DataLoader(Plain(), batch_size=10)
    with pytest.raises(rd.ResumeError, match="sampler"):
        other.load_state_dict(state, allow_unpinned=True)


@pytest.mark.parametrize("kwargs, param", [
    (dict(in_order=False), "in_order"), (dict(batch_size=0), "batch_size"), (dict(commit="sometimes"), "commit"),
    (dict(accumulation_steps=0), "accumulation_steps"), (dict(shuffle=True, seed=-1), "seed"),
    (dict(shuffle_window=0, seed=1), "shuffle_window"), (dict(tail="bogus"), "tail"),
    (dict(sharding=rd.Sharding(2, 0), tail="partial"), "tail"), (dict(batch_size=5, sharding=rd.Sharding(2, 0), drop_last=True), None),
])
def test_bad_arguments_fail_at_construction(kwargs, param):
    if param is None:  # a valid combination for contrast
        rd.DataLoader(Plain(), **kwargs)
        return
    with pytest.raises(rd.ConfigError, match=param):
        rd.DataLoader(Plain(), **kwargs)


def test_a_dataset_with_a_split_attribute_and_a_datasets_dataset_are_plain_map_style_datasets():
    """A ``split`` attribute (Hugging Face ``datasets.Dataset`` has one, so do many user datasets)
    says nothing about being an rd source: such a dataset goes the map-style way."""
    import datasets

    class WithSplit(torch.utils.data.Dataset):
        split = "train"

        def __len__(self):
            return 10

        def __getitem__(self, i):
            return i

    assert [b.tolist() for b in rd.DataLoader(WithSplit(), batch_size=4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    hf = datasets.Dataset.from_dict({"x": list(range(6))})
    assert [b["x"].tolist() for b in rd.DataLoader(hf, batch_size=4)] == [[0, 1, 2, 3], [4, 5]]


# -- issue 30 item 11: the differences from torch that stay are listed with their reason and fix ------
def test_kept_differences_are_refused_with_a_fix_that_works_and_are_documented():
    from pathlib import Path

    with pytest.raises(rd.ConfigError, match=r"dataset='len 0'.*fix: pass a non-empty dataset"):
        rd.DataLoader([], batch_size=2)
    with pytest.raises(rd.ConfigError, match=r"drop_last=True.*fix: use a smaller batch_size, drop_last=False"):
        rd.DataLoader([1, 2, 3], batch_size=4, drop_last=True)
    assert [b.tolist() for b in rd.DataLoader([1, 2, 3], batch_size=4)] == [[1, 2, 3]]  # the fix
    first = rd.DataLoader(list(range(10)), batch_size=2)
    next(iter(first))
    state = first.state_dict()
    with pytest.raises(rd.ResumeError, match="allow_unpinned=True"):
        rd.DataLoader(list(range(10)), batch_size=2).load_state_dict(state)
    again = rd.DataLoader(list(range(10)), batch_size=2)
    again.load_state_dict(state, allow_unpinned=True)  # the fix
    assert [b.tolist() for b in again] == [[2, 3], [4, 5], [6, 7], [8, 9]]
    page = (Path(__file__).parents[3] / "docs" / "dropin.md").read_text()
    section = page.split("## Other differences a torch user may notice", 1)[1].split("\n## ", 1)[0]
    for phrase in ("after a `break`", "an empty dataset", "`drop_last=True` with fewer samples",
                   "allow_unpinned=True", "`prefetch_factor=0`"):
        assert phrase in section, phrase
