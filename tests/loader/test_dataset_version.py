"""The dataset version a plan is keyed by (loader/dataset_version.py): given, the source's own pin, or
``unpinned``; a contradiction is refused."""

from __future__ import annotations

import pytest

import resumable_data as rd
from resumable_data.errors import ConfigError
from resumable_data.loader.dataset_version import UNPINNED, resolve_version


def test_an_unpinned_dataset_says_so():
    assert resolve_version(list(range(5)), None) == (UNPINNED, False)


def test_a_given_version_is_used_as_a_string_or_a_dataset_version(shards):
    assert resolve_version(list(range(5)), "abc") == ("abc", True)
    assert resolve_version(list(range(5)), shards.version) == (shards.version.hash, True)


@pytest.mark.parametrize("bad", ["", 3])
def test_a_version_that_is_no_hash_is_refused(bad):
    with pytest.raises(ConfigError, match="^dataset_version="):
        resolve_version(list(range(5)), bad)


def test_a_pinned_source_carries_its_own_version(shards):
    assert shards.pinned
    assert resolve_version(shards, None) == (shards.version.hash, True)
    assert resolve_version(shards, shards.version.hash) == (shards.version.hash, True)
    with pytest.raises(ConfigError, match="^dataset_version='other': expected the source's own pinned version"):
        resolve_version(shards, "other")


def test_the_loader_records_it(shards):
    assert rd.DataLoader(shards, batch_size=2).snapshot().plan.version_hash == shards.version.hash


def test_the_unpinned_refusal_names_a_fix_that_works_for_any_dataset():
    """A plain torch-style dataset has no folder to rd.pin: the refusal's fix is a version string on
    both loaders, and following it resumes every remaining batch in order."""

    def make(**kw):
        return rd.DataLoader(list(range(100)), batch_size=8, shuffle=True, seed=1, **kw)

    first = make()
    it = iter(first)
    [next(it) for _ in range(3)]
    with pytest.raises(rd.ResumeError, match=r"dataset_version='<a string naming this data's version>'"):
        make().load_state_dict(first.state_dict())
    with pytest.raises(ConfigError, match="a string naming the data's version"):
        make(dataset_version=3)
    saving = make(dataset_version="numbers-v1")
    it = iter(saving)
    [next(it) for _ in range(3)]
    state = saving.state_dict()
    expected = [b.tolist() for b in it]
    resumed = make(dataset_version="numbers-v1")
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == expected and len(expected) == 10
