"""torch's rules on the sampling arguments (loader/torch_rules.py): refused before anything is built, with
torch's own sentence inside rd's message."""

from __future__ import annotations

import pytest
import torch.utils.data as tud

from resumable_data.errors import ConfigError, ConfigTypeError
from resumable_data.loader.torch_rules import check_kinds, check_sampling_rules, is_iterable_dataset


class Stream(tud.IterableDataset):
    def __iter__(self):
        return iter(range(3))


def test_an_iterable_dataset_is_known_by_its_classes():
    assert is_iterable_dataset(Stream())
    assert not is_iterable_dataset(list(range(3)))


@pytest.mark.parametrize("args, param, rule", [
    ((Stream(), 1, True, None, None, False), "shuffle", "DataLoader with IterableDataset: expected unspecified shuffle"),
    ((list(range(4)), 1, True, [0, 1], None, False), "shuffle", "sampler option is mutually exclusive with shuffle"),
    ((list(range(4)), 2, None, None, [[0, 1]], False), "batch_sampler", "batch_sampler option is mutually exclusive"),
    ((list(range(4)), None, None, None, None, True), "drop_last", "batch_size=None option disables auto-batching"),
    ((list(range(4)), 2, None, None, None, 2), "drop_last", "drop_last should be a boolean value"),
])
def test_torch_refusals_keep_torchs_sentence(args, param, rule):
    with pytest.raises(ConfigError, match=rf"^{param}=.*torch's rule: {rule}"):
        check_sampling_rules(*args)


def test_what_torch_accepts_passes():
    check_sampling_rules(list(range(4)), 2, True, None, None, True)
    check_sampling_rules(list(range(4)), 1, None, None, [[0, 1]], False)


@pytest.mark.parametrize("args, param", [((3, None, True), "collate_fn"), ((None, 3, True), "generator"),
                                         ((None, None, "no"), "elastic")])
def test_kinds_torch_would_trip_over_late_are_type_errors(args, param):
    with pytest.raises(ConfigTypeError, match=f"^{param}="):
        check_kinds(*args)


@pytest.mark.parametrize("shuffle", ["False", "no", 0, 1, [True]])
def test_a_shuffle_that_is_not_a_boolean_is_refused_before_torch_reads_it_as_true(shuffle):
    """torch shuffles on any truthy value (``shuffle="False"`` shuffled); rd refuses what is not one."""
    import resumable_data as rd

    with pytest.raises(ConfigTypeError, match=r"^shuffle=.*True, False or None.*pass shuffle=True or shuffle=False"):
        rd.DataLoader(list(range(8)), batch_size=2, shuffle=shuffle)


@pytest.mark.parametrize("shuffle", [True, False, None])
def test_a_boolean_shuffle_is_taken(shuffle):
    import numpy as np

    import resumable_data as rd

    for value in (shuffle, None if shuffle is None else np.bool_(shuffle)):
        got = [b.tolist() for b in rd.DataLoader(list(range(8)), batch_size=4, shuffle=value, seed=0)]
        assert (sorted(x for b in got for x in b) == list(range(8))) and (got == [[0, 1, 2, 3], [4, 5, 6, 7]]) != bool(shuffle)
