"""torch's semantics where rd was found to differ: DistributedSampler with the loader's drop_last,
an exception from __getitem__ ends only its batch, a changed dataset length, torch's public
attributes (read-only) and rd.DataLoader[T]."""

import numpy as np
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


# -- torch's argument rules, with torch's texts (found by torch's test/test_dataloader.py) ---------
_CTX = torch.multiprocessing.get_all_start_methods()[-1]


@pytest.mark.parametrize("kwargs, error, text, param", [
    (dict(num_workers=-1), ValueError, "num_workers option should be non-negative", "num_workers=-1"),
    (dict(timeout=-1), ValueError, "timeout option should be non-negative", "timeout=-1"),
    (dict(batch_size=None, drop_last=True), ValueError,
     "batch_size=None option disables auto-batching and is mutually exclusive with drop_last", "drop_last=True"),
    (dict(num_workers=0, multiprocessing_context=_CTX), ValueError,
     r"multi-process loading \(num_workers > 0\), but got", "multiprocessing_context="),
    (dict(num_workers=1, multiprocessing_context="bad"), ValueError, "should specify a valid start method in",
     "multiprocessing_context='bad'"),
    (dict(num_workers=1, multiprocessing_context=object()), TypeError,
     "multiprocessing_context option should be a valid context ", "multiprocessing_context='object'"),
    (dict(prefetch_factor=2), ValueError, "prefetch_factor option could only be specified in multiprocessing",
     "prefetch_factor=2"),
    (dict(persistent_workers=True), ValueError, "persistent_workers option needs num_workers > 0", "persistent_workers=True"),
    (dict(batch_size=11, sampler=range(10), shuffle=True), ValueError, "sampler option is mutually exclusive with shuffle",
     "shuffle=True"),
    (dict(sampler=range(10), shuffle=3), ValueError, "sampler option is mutually exclusive with shuffle", "shuffle=3"),
    (dict(batch_size=11, batch_sampler=[[0, 1]]), ValueError, "batch_sampler option is mutually exclusive with",
     "batch_sampler='list'"),
    (dict(batch_size=None, batch_sampler=[[0, 1]]), ValueError, "batch_sampler option is mutually exclusive with",
     "batch_sampler='list'"),
    (dict(drop_last=3, batch_sampler=[[0, 1]]), ValueError, "batch_sampler option is mutually exclusive with",
     "batch_sampler='list'"),
    # found by the attack sweep: torch's BatchSampler ValueError escaped rd (a non-rd exception)
    (dict(drop_last=1), ValueError, "drop_last should be a boolean value", "drop_last=1"),
    (dict(drop_last=None), ValueError, "drop_last should be a boolean value", "drop_last=None"),
    (dict(drop_last=np.bool_(True)), ValueError, "drop_last should be a boolean value", "drop_last="),
    (dict(drop_last="no", sampler=range(10)), ValueError, "drop_last should be a boolean value", "drop_last='no'"),
])
def test_torch_argument_rules_raise_rd_errors_with_torchs_text(kwargs, error, text, param):
    with pytest.raises(rd.ConfigError) as e:
        rd.DataLoader(Ids(10), **kwargs)
    assert isinstance(e.value, error)  # what torch raises, so `except ValueError` keeps working
    assert e.match(text)  # torch's sentence ...
    assert str(e.value).startswith(param) and "fix: " in str(e.value)  # inside rd's param=value: expected ...; fix: ...
    # and torch itself agrees that these arguments are wrong, with the same kind of error
    with pytest.raises(error, match=text):
        torch.utils.data.DataLoader(Ids(10), **kwargs)


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(4))


@pytest.mark.parametrize("name, value", [("shuffle", True), ("shuffle", 3), ("sampler", 3), ("batch_sampler", 3)])
def test_iterable_dataset_with_a_sampling_argument_gets_torchs_rule_first(name, value):
    with pytest.raises(rd.ConfigError, match=f"DataLoader with IterableDataset: expected unspecified {name}"):
        rd.DataLoader(Stream(), **{name: value})
    with pytest.raises(rd.ConfigError, match="map-style"):  # without one: rd's own refusal
        rd.DataLoader(Stream())


def test_valid_worker_options_are_accepted():
    for ctx in [None, _CTX, torch.multiprocessing.get_context(_CTX)]:
        loader = rd.DataLoader(Ids(6), batch_size=2, num_workers=1, multiprocessing_context=ctx, prefetch_factor=3,
                               timeout=30, persistent_workers=True)
        assert loader.prefetch_factor == 3 and loader.multiprocessing_context is ctx
        assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]


# -- what user code sees in a worker ---------------------------------------------------------------
class WhoAmI(torch.utils.data.Dataset):
    """Each sample says which worker's dataset copy produced it and which process that is."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor(self.stamp)


def _stamp_the_workers_dataset(worker_id):
    import os

    info = torch.utils.data.get_worker_info()
    assert isinstance(info.dataset, WhoAmI), type(info.dataset)  # the user's dataset, not rd's fetcher
    info.dataset.stamp = [worker_id, os.getpid()]


def test_worker_info_dataset_is_the_users_dataset_and_iterator_workers_are_the_processes():
    dataset = WhoAmI(8)
    it = iter(rd.DataLoader(dataset, batch_size=2, num_workers=2, worker_init_fn=_stamp_the_workers_dataset))
    got = [b.tolist() for b in it]
    pids = [w.pid for w in it._workers]
    assert len(pids) == 2 and len(got) == 4
    for batch in got:
        for worker_id, pid in batch:
            assert pid == pids[worker_id]
    assert sorted({b[0][0] for b in got}) == [0, 1]  # both workers delivered
    assert not hasattr(dataset, "stamp")  # the main process's dataset was never touched


def test_iterator_workers_is_empty_in_process_and_workers_exit_when_the_iterator_goes():
    assert iter(rd.DataLoader(Ids(4)))._workers == []
    it = iter(rd.DataLoader(Ids(40), batch_size=2, num_workers=2))
    workers = it._workers
    assert len(workers) == 2 and all(w.is_alive() for w in workers)
    for i, _ in enumerate(it):
        if i == 3:
            break
    del it
    for w in workers:
        w.join(30)
        assert not w.is_alive()


def test_a_datapipe_may_shuffle_in_torch_so_rd_refuses_it_only_for_being_iterable():
    from torch.utils.data.datapipes.iter import IterableWrapper

    torch.utils.data.DataLoader(IterableWrapper(range(4)), shuffle=True)  # torch accepts this
    with pytest.raises(rd.ConfigError, match="map-style") as e:
        rd.DataLoader(IterableWrapper(range(4)), shuffle=True)
    assert "expected unspecified shuffle" not in str(e.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_exhausted_iterator_keeps_raising_stop_iteration_as_torchs_does(workers):
    ds = list(range(10))
    for loader in (torch.utils.data.DataLoader(ds, batch_size=4, num_workers=workers),
                   rd.DataLoader(ds, batch_size=4, num_workers=workers)):
        it = iter(loader)
        assert len(list(it)) == 3
        for _ in range(3):
            with pytest.raises(StopIteration):
                next(it)
    rd_loader = rd.DataLoader(ds, batch_size=4)
    it = iter(rd_loader)
    next(it)
    iter(rd_loader)  # a new pass supersedes a live one: that is a usage error, not an end
    with pytest.raises(rd.UsageError, match="superseded"):
        next(it)
