"""torch's CPU generator region found and verified (``raw_torch``): the probe finds the engine where
``manual_seed`` leaves it, leaves the generator as it was, and refuses a layout (or a template)
whose writes do not verify against torch's own functions."""

from __future__ import annotations

import numpy as np
import torch

from resumable_data.loader.seeding import global_rng as G, raw_torch as T
from tests.loader.seeding.test_raw_memory import GEN, engage_caches, tdraws, tstate


def test_the_region_is_found_here_and_holds_the_engine():
    lay = G._layout().torch
    assert lay is not None, "the torch memory route is off on this interpreter"
    assert lay.current() and lay.owner is torch.random.default_generator
    assert lay.state_word * 4 + 4 * 624 < lay.size == lay.view.size <= T._WINDOW
    GEN.manual_seed(2**40 + 17)
    words = np.frombuffer(lay.view.tobytes() + bytes(-lay.size % 4), np.uint32)
    assert np.array_equal(words[lay.state_word:lay.state_word + 624], T.init_genrand((2**40 + 17) & 0xFFFFFFFF))
    assert int(words[lay.seed_word]) | int(words[lay.seed_word + 1]) << 32 == 2**40 + 17


def test_the_probe_leaves_the_generator_as_it_was():
    torch.manual_seed(5)
    torch.randn(3)
    engage_caches(0.125, 9.5)
    before, saved = tstate(), torch.get_rng_state()
    assert T.probe_torch() is not None
    assert tstate() == before
    after_probe = tdraws()
    torch.set_rng_state(saved)
    assert tdraws() == after_probe
    assert after_probe[2] == 9.5  # the double cache was still there


def test_the_probe_refuses_a_layout_that_does_not_verify(monkeypatch):
    real = T._verified
    seen = []
    monkeypatch.setattr(T, "_verified", lambda *a: seen.append(real(*a)) or False)
    assert T.probe_torch() is None and seen == [True]


def test_a_corrupt_template_fails_the_verification():
    """The verification compares real state bytes: a template with a wrong word is refused."""
    lay = T.probe_torch()
    bad = lay.template.copy()
    bad[2] ^= 0xFF  # left_ (or whatever the probe found after the seed): not what manual_seed writes
    broken = T.TorchLayout(lay.owner, lay.impl, lay.offset, lay.size, bad, lay.seed_word, lay.state_word, lay.view)
    saved = torch.get_rng_state()
    try:
        assert not T._verified(GEN, broken, tstate())
    finally:
        torch.set_rng_state(saved)
