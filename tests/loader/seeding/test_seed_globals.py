"""``rd.seed_globals(key)``: one sample's seeding reproduced outside the loader."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import resumable_data as rd


class Augment(torch.utils.data.Dataset):
    def __len__(self):
        return 50

    def __getitem__(self, i):
        return [rd.sample_context().key, random.random(), float(np.random.standard_normal()), torch.randn(2).tolist()]


def draws():
    return [random.random(), float(np.random.standard_normal()), torch.randn(2).tolist()]


@pytest.mark.parametrize("workers", [0, 2])
def test_each_delivered_sample_is_reproduced_from_its_key(workers):
    dl = rd.DataLoader(Augment(), batch_size=4, shuffle=True, seed=8, num_workers=workers, collate_fn=lambda s: s)
    samples = [s for _, b in zip(range(5), dl) for s in b]
    for key, *got in samples:
        rd.seed_globals(key)
        assert got == draws(), hex(key)
    assert len({s[1] for s in samples}) == len(samples)


def test_an_older_version_reproduces_that_versions_seeding():
    rd.seed_globals(2**40 + 9, 2)  # version 2: the seeding functions
    got = draws()
    random.seed(2**40 + 9)
    np.random.seed([(2**40 + 9) & 0xFFFFFFFF ^ 0x7F4A7C15, (2**40 + 9) >> 32 ^ 0x9E3779B9])
    torch.manual_seed(2**40 + 9)
    assert got == draws()
    rd.seed_globals(2**40 + 9)
    assert draws() != got  # version 3 (the default) is another seeding


@pytest.mark.parametrize("args, match", [((-1,), r"key=-1: expected an integer in \[0, 2\*\*64\)"),
                                         ((2**64,), r"key=18446744073709551616"), ((True,), r"key=True"),
                                         ((1.5,), r"key=1.5"), ((5, 4), r"version=4: expected one of \[1, 2, 3\]"),
                                         ((5, "3"), r"version='3'"), ((5, 3.0), r"version=3.0")])
def test_bad_arguments_are_config_errors_that_change_nothing(args, match):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    before = (random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist())
    with pytest.raises(rd.ConfigError, match=match):
        rd.seed_globals(*args)
    assert (random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist()) == before


@pytest.mark.parametrize("where", ["before the loader", "inside a sample"])
def test_a_numpy_global_generator_other_than_mt19937_is_a_config_error(where):
    class Swaps(Augment):
        def __getitem__(self, i):
            if where == "inside a sample" and i == 3:
                np.random.set_bit_generator(np.random.PCG64(0))
            return super().__getitem__(i)

    saved = np.random.get_bit_generator()
    try:
        if where == "before the loader":
            np.random.set_bit_generator(np.random.PCG64(0))
        dl = rd.DataLoader(Swaps(), batch_size=4, seed=8, collate_fn=lambda s: s)
        with pytest.raises(rd.ConfigError, match=r"numpy's global bit generator='PCG64': expected MT19937.*fix: call "
                                                 r"np.random.set_bit_generator\(np.random.MT19937\(\)\)"):
            for _ in dl:
                pass
        np.random.set_bit_generator(np.random.MT19937())  # the fix, followed: the loader runs
        assert len([b for b in rd.DataLoader(Augment(), batch_size=4, seed=8, collate_fn=lambda s: s)]) == 13
    finally:
        np.random.set_bit_generator(saved)
