"""torch's semantics where rd was found to differ: DistributedSampler with the loader's drop_last,
an exception from __getitem__ ends only its batch, a changed dataset length, torch's public
attributes (read-only) and rd.DataLoader[T]."""

import pytest
import torch
from torch.utils.data import DistributedSampler

import resumable_data as rd
from tests.loader.conftest import canon, take


class Ids(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def per_rank(make_loader, world):
    return [[b.tolist() for b in make_loader(r)] for r in range(world)]


@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_sampler_drop_last_false_keeps_the_loaders_drop_last_true(shuffle):
    def torch_loader(r):
        s = DistributedSampler(Ids(9), num_replicas=4, rank=r, shuffle=shuffle, seed=0, drop_last=False)
        return torch.utils.data.DataLoader(Ids(9), batch_size=2, sampler=s, drop_last=True)

    def rd_loader(r):
        s = DistributedSampler(Ids(9), num_replicas=4, rank=r, shuffle=shuffle, seed=0, drop_last=False)
        return rd.DataLoader(Ids(9), batch_size=2, sampler=s, drop_last=True, dataset_version="ids9")

    theirs, ours = per_rank(torch_loader, 4), per_rank(rd_loader, 4)
    assert [len(b) for b in ours] == [len(b) for b in theirs] == [1, 1, 1, 1]  # one full batch per rank
    assert all(len(x) == 2 for rank in ours for x in rank)
    if not shuffle:
        assert ours == theirs == [[[0, 4]], [[1, 5]], [[2, 6]], [[3, 7]]]


class Flaky(Ids):
    def __getitem__(self, i):
        if i in (1, 6):
            raise ValueError(f"bad sample {i}")
        return i


def catch_and_continue(loader):
    out, it = [], iter(loader)
    while True:
        try:
            out.append(next(it).tolist())
        except StopIteration:
            return out
        except ValueError:
            out.append("err")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_exception_from_getitem_ends_only_its_batch_like_torch(num_workers):
    ours = catch_and_continue(rd.DataLoader(Flaky(9), batch_size=1, num_workers=num_workers, dataset_version="f"))
    theirs = catch_and_continue(torch.utils.data.DataLoader(Flaky(9), batch_size=1, num_workers=num_workers))
    assert ours == theirs == [[0], "err", [2], [3], [4], [5], "err", [7], [8]]


def test_after_an_exception_the_cursor_counts_what_reached_the_loop():
    dl = rd.DataLoader(Flaky(9), batch_size=1, dataset_version="f")
    it = iter(dl)
    assert next(it).tolist() == [0]
    with pytest.raises(ValueError, match="bad sample 1"):
        next(it)
    sd = dl.state_dict()
    assert sd["cursor"]["delivered"] == 1  # the failed step never reached the loop
    again = rd.DataLoader(Flaky(9), batch_size=1, dataset_version="f")
    again.load_state_dict(sd)
    with pytest.raises(ValueError, match="bad sample 1"):  # a resume from here fetches it again
        next(iter(again))
    assert next(it).tolist() == [2]  # the live loader goes on with the next step
    assert dl.state_dict()["cursor"]["delivered"] == 3
    rest = rd.DataLoader(Flaky(9), batch_size=1, dataset_version="f")
    rest.load_state_dict(dl.state_dict())
    assert catch_and_continue(rest) == [[3], [4], [5], "err", [7], [8]]


class Growing(Ids):
    pass


def test_a_dataset_whose_length_changed_is_an_rd_error_at_iter():
    ds = Growing(10)
    dl = rd.DataLoader(ds, batch_size=2, dataset_version="g")
    assert len(list(dl)) == 5
    ds.n = 12
    with pytest.raises(rd.ConfigError, match=r"dataset='len 12': expected len 10"):
        iter(dl)


def test_torch_public_attributes_are_present_and_read_only():
    gen = torch.Generator().manual_seed(3)
    kwargs = dict(batch_size=4, shuffle=True, num_workers=2, pin_memory=False, drop_last=True, timeout=5.0,
                  generator=gen, persistent_workers=True, prefetch_factor=3)
    ds = Ids(10)
    ours = rd.DataLoader(ds, **kwargs)
    theirs = torch.utils.data.DataLoader(ds, **kwargs)
    for name in ("batch_size", "drop_last", "num_workers", "pin_memory", "timeout", "prefetch_factor", "generator",
                 "worker_init_fn", "multiprocessing_context", "persistent_workers", "in_order", "dataset",
                 "collate_fn"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert type(ours.sampler) is type(theirs.sampler)
    assert type(ours.batch_sampler) is type(theirs.batch_sampler)
    assert ours.batch_sampler.batch_size == 4 and ours.batch_sampler.drop_last
    plain = rd.DataLoader(Ids(10))
    assert plain.prefetch_factor is None and plain.batch_size == 1
    assert rd.DataLoader(Ids(10), batch_size=None).batch_sampler is None
    for name in ("batch_size", "sampler", "drop_last", "batch_sampler", "dataset"):  # torch's guarded ones
        with pytest.raises(ValueError, match=f"{name} attribute should not be set after DataLoader is initialized"):
            setattr(theirs, name, None)
    for name in ("batch_size", "sampler", "drop_last", "batch_sampler", "dataset", "num_workers", "collate_fn",
                 "pin_memory", "timeout"):  # rd: all of torch's attributes (a later change would be ignored)
        with pytest.raises(ValueError, match=f"{name} attribute should not be set after DataLoader is initialized"):
            setattr(ours, name, None)
    assert ours.dataset is ds and ours.batch_size == 4


def test_dataloader_is_generic_in_type_hints():
    alias = rd.DataLoader[dict]
    assert alias.__origin__ is rd.DataLoader and alias.__args__ == (dict,)

    def train(loader: rd.DataLoader[torch.Tensor]) -> int:
        return len(loader)

    assert train(rd.DataLoader(Ids(4), batch_size=2)) == 2


@pytest.mark.parametrize("n, world, batch", [(9, 4, 2), (157, 3, 4), (10, 4, 3), (8, 4, 2)])
def test_distributed_sampler_drop_last_false_tail_matches_torch_exactly(n, world, batch):
    """4 ranks, 9 records, batch 2: torch delivers 9 records plus its sampler's 3 padding ones
    (12 = 4 x ceil(9 / 4)), the last batch of each rank partial; rd delivers exactly those."""
    def torch_loader(r):
        s = DistributedSampler(Ids(n), num_replicas=world, rank=r, shuffle=False, drop_last=False)
        return torch.utils.data.DataLoader(Ids(n), batch_size=batch, sampler=s)

    def rd_loader(r):
        s = DistributedSampler(Ids(n), num_replicas=world, rank=r, shuffle=False, drop_last=False)
        return rd.DataLoader(Ids(n), batch_size=batch, sampler=s, dataset_version=f"ids{n}")

    theirs, ours = per_rank(torch_loader, world), per_rank(rd_loader, world)
    assert ours == theirs
    assert sum(len(x) for rank in ours for x in rank) == world * -(-n // world)
    if (n, world, batch) == (9, 4, 2):
        assert ours == [[[0, 4], [8]], [[1, 5], [0]], [[2, 6], [1]], [[3, 7], [2]]]


def test_distributed_sampler_padded_tail_resumes_every_remaining_batch_in_order():
    def loader(r):
        s = DistributedSampler(Ids(157), num_replicas=3, rank=r, shuffle=True, seed=4, drop_last=False)
        return rd.DataLoader(Ids(157), batch_size=4, sampler=s, num_workers=0, dataset_version="ids157")

    for r in range(3):
        ref_dl = loader(r)
        ref = [canon(b) for _ in range(2) for b in ref_dl]
        per_epoch = len(ref) // 2
        for cut in (per_epoch - 1, per_epoch):
            dl = loader(r)
            got = take(dl, cut)
            again = loader(r)
            again.load_state_dict(dl.state_dict())
            while len(got) < len(ref):
                got.extend(canon(b) for b in again)
            assert got == ref
