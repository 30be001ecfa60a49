"""Window shuffle per source inside an rd.Mixture: each source's epochs follow the window shuffle
(whole blocks of consecutive ids per window, every record once per epoch), the rest keep the
global shuffle; resumed bit-exact at random points with 2 workers; the window is part of the
resume contract; per-source tokens follow the window order."""

from __future__ import annotations

import numpy as np
import pytest

import resumable_data as rd
from tests.loader.mixture.test_mixture_resume import continue_from, ids_of, resume_points, run
from tests.loader.mixture.test_mixture_tokens import delivered_tokens
from tests.mixture_data import BASE, SIZES, WEIGHTS, open_sources, source_of, write_sources

WINDOW = 32  # block 32 // 16 = 2 ids: a window holds 16 whole blocks


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("mixwin"))


def windowed(dirs, windows=None, **kw):
    mix = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16,
                     shuffle_window={"web": WINDOW} if windows is None else windows)
    return rd.DataLoader(mix, **{"batch_size": 4, **kw}, seed=11, token_column="tokens")


def per_source_streams(ids):
    src = source_of(ids)
    return {name: ids[src == s] - BASE[name] for s, name in enumerate(SIZES)}


def test_a_windowed_source_visits_whole_blocks_per_window_and_every_record_once_per_epoch(dirs):
    batches, _ = run(windowed(dirs), 100)  # 400 positions: web (120 records) about 1.7 epochs
    streams = per_source_streams(ids_of(batches))
    web = streams["web"]
    assert len(web) >= 120
    epoch = web[:120]
    assert sorted(epoch.tolist()) == list(range(120))
    for start in range(0, 120, WINDOW):  # windows of 16 blocks of 2 consecutive ids (the last: 12 blocks)
        chunk = epoch[start:start + WINDOW]
        assert (np.bincount(chunk // 2, minlength=60)[np.unique(chunk // 2)] == 2).all(), start
    # the globally shuffled sources do not have that locality (so the check above can fail)
    code = streams["code"][:60]
    assert sorted(code.tolist()) == list(range(60))
    assert not all((np.bincount(code[s:s + WINDOW] // 2)[np.unique(code[s:s + WINDOW] // 2)] == 2).all()
                   for s in range(0, 60, WINDOW))
    # the window changes the order, not the mixing: same sources at every position
    plain, _ = run(windowed(dirs, windows={}), 100)
    assert source_of(ids_of(plain)).tolist() == source_of(ids_of(batches)).tolist()
    assert ids_of(plain).tolist() != ids_of(batches).tolist()


def test_a_windowed_mixture_resumes_bit_exact_and_the_window_is_part_of_the_contract(dirs):
    windows = {"web": WINDOW, "code": 8, "math": None}
    batches, states = run(windowed(dirs, windows), 60)
    make = lambda: windowed(dirs, windows, num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(states, batches, make, 20, np.random.default_rng(9)) == 20
    assert states[60]["mixture"]["tokens"] == delivered_tokens(dirs, ids_of(batches))
    for other in ({"web": 16, "code": 8}, {}):
        loader = windowed(dirs, other)
        with pytest.raises(rd.ResumeError, match=r"sampler: saved .*windows=32,8,-"):
            loader.load_state_dict(states[10])
        assert loader.cursor.committed == 0
    got, _ = continue_from(windowed(dirs, windows), states[10], 5)
    assert got == batches[10:15]


def test_bad_windows_are_config_errors(dirs):
    srcs = open_sources(dirs)
    for bad, match in ((0, r"shuffle_window\['web'\]=0"), ({"web": 2.5}, r"shuffle_window\['web'\]=2.5"),
                       ({"nope": 4}, "shuffle_window='nope'"), (True, "shuffle_window")):
        with pytest.raises(rd.ConfigError, match=match):
            rd.Mixture(srcs, weights=WEIGHTS, shuffle_window=bad)
    with pytest.raises(rd.ConfigError, match="shuffle=False"):
        rd.Mixture(srcs, weights=WEIGHTS, shuffle=False, shuffle_window=8)
    with pytest.raises(rd.ConfigError, match=r"shuffle_window=8: expected unset for an rd.Mixture.*shuffle_window"):
        rd.DataLoader(rd.Mixture(srcs, weights=WEIGHTS), batch_size=4, seed=0, shuffle_window=8)
