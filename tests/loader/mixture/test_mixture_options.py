"""The loader options an rd.Mixture leaves unset (loader/mixture/options.py): each one given is refused,
naming it."""

from __future__ import annotations

import pytest

import resumable_data as rd
from resumable_data.loader.mixture.options import check_mixture_options

NAMES = ("shuffle", "shuffle_window", "sampler", "batch_sampler", "dataset_version")


def test_all_unset_passes():
    check_mixture_options(None, None, None, None, None)


@pytest.mark.parametrize("i", range(len(NAMES)))
def test_each_option_given_is_refused(i):
    args = [None] * len(NAMES)
    args[i] = False if NAMES[i] == "shuffle" else 8  # even shuffle=False: the mixture sets the order
    with pytest.raises(rd.ConfigError, match=rf"^{NAMES[i]}=.*unset for an rd.Mixture"):
        check_mixture_options(*args)
