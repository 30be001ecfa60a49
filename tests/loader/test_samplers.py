"""Samplers people use: RandomSampler with replacement / num_samples, WeightedRandomSampler,
fixed index sequences, lists of index lists; the refusals are rd.ConfigError."""

import numpy as np
import pytest
import torch
from torch.utils.data import RandomSampler, SequentialSampler, WeightedRandomSampler

import resumable_data as rd
from resumable_data.plan.sampling import keyed_uniform, weighted_order
from tests.loader.conftest import canon, take

N = 50


class Ids(torch.utils.data.Dataset):
    def __init__(self, n=N):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def ids(loader, epochs=1):
    out = []
    for _ in range(epochs):
        out.extend(int(x) for b in loader for x in b.reshape(-1).tolist())
    return out


def chi2_sf(stat, df):
    """P(X >= stat) for X ~ chi-square(df): the regularized upper incomplete gamma function."""
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))


def chi_square_p(counts, probs):
    """Pearson's goodness-of-fit p-value of ``counts`` against ``probs``."""
    expected = probs / probs.sum() * counts.sum()
    keep = expected > 0
    assert counts[~keep].sum() == 0  # never a zero-weight record
    stat = float((((counts[keep] - expected[keep]) ** 2) / expected[keep]).sum())
    return chi2_sf(stat, int(keep.sum()) - 1)


def homogeneity_p(a, b):
    """Chi-square test that two count vectors come from one distribution."""
    table = np.stack([a, b]).astype(np.float64)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    return chi2_sf(float(((table - expected) ** 2 / expected).sum()), table.shape[1] - 1)


def test_keyed_uniform_is_pure_and_uniform():
    u = keyed_uniform(3, 1, np.arange(200_000))
    assert np.array_equal(u[1000:1010], keyed_uniform(3, 1, np.arange(1000, 1010)))
    assert not np.array_equal(u[:10], keyed_uniform(3, 2, np.arange(10)))
    assert 0 <= u.min() and u.max() < 1
    assert chi_square_p(np.bincount((u * 100).astype(int), minlength=100), np.ones(100)) > 1e-3


def test_random_sampler_with_replacement_distribution_and_epoch_length():
    sampler = RandomSampler(Ids(), replacement=True, num_samples=20_000, generator=torch.Generator().manual_seed(5))
    dl = rd.DataLoader(Ids(), batch_size=100, sampler=sampler, dataset_version="ids")
    got = ids(dl)
    assert len(dl) == 200 and len(got) == 20_000
    assert chi_square_p(np.bincount(got, minlength=N), np.ones(N)) > 1e-3
    assert got != ids(dl)  # another epoch, other draws


def test_random_sampler_without_replacement_more_samples_than_records_is_whole_permutations():
    sampler = RandomSampler(Ids(), num_samples=2 * N + 7, generator=torch.Generator().manual_seed(1))
    got = ids(rd.DataLoader(Ids(), batch_size=1, sampler=sampler, dataset_version="ids"))
    assert sorted(got[:N]) == list(range(N)) and sorted(got[N:2 * N]) == list(range(N))
    assert len(set(got[2 * N:])) == 7


@pytest.mark.parametrize("replacement", [True, False])
def test_weighted_sampler_matches_the_weights(replacement):
    w = np.arange(N, dtype=np.float64) % 5  # zeros included
    if replacement:
        dl = rd.DataLoader(Ids(), batch_size=500, sampler=WeightedRandomSampler(w, 50_000), seed=11, dataset_version="ids")
        counts = np.bincount(ids(dl), minlength=N)
        assert chi_square_p(counts, w) > 1e-3
    else:
        k = 5  # first-pick distribution of the without-replacement order is w / sum(w)
        dl = rd.DataLoader(Ids(), batch_size=k, sampler=WeightedRandomSampler(w, k, replacement=False), seed=11,
                           dataset_version="ids")
        firsts = []
        for _ in range(4000):
            batch = [int(x) for b in dl for x in b.tolist()]
            assert len(set(batch)) == k and all(w[i] > 0 for i in batch)
            firsts.append(batch[0])
        assert chi_square_p(np.bincount(firsts, minlength=N), w) > 1e-3


def test_weighted_order_first_pick_matches_torch_multinomial_distribution():
    w = np.array([1.0, 2.0, 3.0, 4.0])
    picks = np.array([weighted_order(w, 0, e)[:2] for e in range(20_000)])
    g = torch.Generator().manual_seed(0)
    theirs = np.array([torch.multinomial(torch.tensor(w), 2, replacement=False, generator=g).numpy() for _ in range(20_000)])
    pairs = lambda a: np.bincount(a[:, 0] * 4 + a[:, 1], minlength=16)  # noqa: E731
    ours, ref = pairs(picks), pairs(theirs)
    keep = ref > 0
    assert ours[~keep].sum() == 0
    assert homogeneity_p(ours[keep], ref[keep]) > 1e-3


@pytest.mark.parametrize("make_sampler", [
    lambda: RandomSampler(Ids(), replacement=True, num_samples=37, generator=torch.Generator().manual_seed(2)),
    lambda: RandomSampler(Ids(), num_samples=77, generator=torch.Generator().manual_seed(2)),
    lambda: WeightedRandomSampler(np.linspace(0.1, 2, N), 41, generator=torch.Generator().manual_seed(2)),
    lambda: WeightedRandomSampler(np.linspace(0.1, 2, N), 33, replacement=False, generator=torch.Generator().manual_seed(2)),
    lambda: list(range(N - 1, -1, -3)),
    lambda: range(5, N, 2),
])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_samplers_resume_every_remaining_batch_in_order(make_sampler, num_workers):
    def loader():
        return rd.DataLoader(Ids(), batch_size=4, sampler=make_sampler(), num_workers=num_workers, dataset_version="ids")

    ref_dl = loader()
    ref = [[canon(b) for b in ref_dl] for _ in range(2)]
    flat = ref[0] + ref[1]
    for cut in (1, len(ref[0]) - 1, len(ref[0]) + 2):
        dl = loader()
        got = take(dl, cut)
        sd = dl.state_dict()
        resumed = loader()
        resumed.load_state_dict(sd)
        rest = []
        while len(got) + len(rest) < len(flat):
            rest.extend(canon(b) for b in resumed)
        assert got + rest == flat


def test_fixed_sequences_are_accepted_as_given():
    seq = [3, 1, 4, 1, 5, 9, 2, 6]
    assert ids(rd.DataLoader(Ids(), batch_size=3, sampler=seq)) == seq
    assert ids(rd.DataLoader(Ids(), batch_size=2, sampler=range(10, 0, -2))) == [10, 8, 6, 4, 2]
    batches = [[0, 1, 2], [9, 8, 7], [4]]
    got = [b.tolist() for b in rd.DataLoader(Ids(), batch_sampler=batches)]
    assert got == batches == [b.tolist() for b in torch.utils.data.DataLoader(Ids(), batch_sampler=batches)]
    with pytest.raises(rd.ConfigError, match="lists of one length"):
        rd.DataLoader(Ids(), batch_sampler=[[0, 1], [2, 3, 4]])
    with pytest.raises(rd.ConfigError, match=r"indices in \[0, 50\)"):
        rd.DataLoader(Ids(), sampler=[0, 50])


def test_random_samplers_without_a_seed_are_refused_like_shuffle():
    with pytest.raises(rd.ConfigError, match="seed"):
        rd.DataLoader(Ids(), sampler=RandomSampler(Ids(), replacement=True))
    rd.DataLoader(Ids(), sampler=RandomSampler(Ids(), replacement=True), seed=3)


class OwnSampler(torch.utils.data.Sampler):
    def __init__(self):
        self.g = torch.Generator().manual_seed(0)

    def __len__(self):
        return N

    def __iter__(self):
        return iter(torch.randperm(N, generator=self.g).tolist())


def test_other_samplers_are_a_config_error_naming_what_is_missing():
    with pytest.raises(rd.ConfigError, match="OwnSampler.*rd.PositionalSampler") as e:
        rd.DataLoader(Ids(), sampler=OwnSampler())
    assert "draws from a generator" not in str(e.value) and "fix:" in str(e.value)
    with pytest.raises(rd.ConfigError, match="batch_sampler"):
        rd.DataLoader(Ids(), batch_sampler=OwnSampler())
    rd.DataLoader(Ids(), sampler=SequentialSampler(Ids()))


class Stream(torch.utils.data.IterableDataset):
    def __len__(self):
        return 4

    def __iter__(self):
        return iter(range(4))


def test_an_iterable_dataset_is_a_config_error_at_construction():
    with pytest.raises(rd.ConfigError, match="IterableDataset"):
        rd.DataLoader(Stream(), batch_size=2)
