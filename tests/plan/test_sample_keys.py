"""Sample keys (plan/sample_keys.py): golden vectors, the compiled batch keys equal xxhash, every input matters."""

import importlib
import numpy as np
from hypothesis import given, settings, strategies as st

from resumable_data.plan import numpy_generator, python_random, sample_key, sample_keys


keys_module = importlib.import_module("resumable_data.plan.sample_keys")  # the package re-exports a function of that name


def test_sample_key_golden_vectors():
    """A change here is a schema change: augmentation after resume would differ."""
    assert sample_key("golden", 7, 123) == 11276040018884567365
    assert sample_keys("golden", 7, [0, 1, 2], tag="aug").tolist() == [
        4500244767350191561, 5668450775983389508, 11706497501334918673]
    assert numpy_generator(sample_key("golden", 7, 123)).integers(0, 1000, 3).tolist() == [738, 65, 434]


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.text(min_size=0, max_size=140), st.integers(0, 2**64 - 1), st.sampled_from(["sample", "collate", "", "t" * 40]),
       st.lists(st.integers(0, 2**63 - 1), min_size=0, max_size=20))
def test_compiled_batch_keys_equal_xxhash(version, seed, tag, positions):
    """The compiled XXH3 route of sample_keys equals xxhash itself, on every message length
    (the version text reaches past 128 bytes: the xxhash route there), bit for bit."""
    got = keys_module.sample_keys(version, seed, np.array(positions, dtype=np.int64), tag)
    assert got.dtype == np.uint64
    assert got.tolist() == keys_module.sample_keys_reference(version, seed, positions, tag).tolist()
    assert got.tolist() == [sample_key(version, seed, p, tag) for p in positions]


def test_the_compiled_key_hash_is_in_use_here():
    assert keys_module._compiled_ok()
    assert keys_module._message("golden", 7, "sample")[0] is not None


def test_keys_depend_on_every_input():
    base = sample_key("v", 1, 10)
    assert len({base, sample_key("w", 1, 10), sample_key("v", 2, 10), sample_key("v", 1, 11),
                sample_key("v", 1, 10, "other")}) == 5
    assert sample_keys("v", 1, np.arange(5)).tolist() == [sample_key("v", 1, p) for p in range(5)]
    assert python_random(base).random() == python_random(base).random()
