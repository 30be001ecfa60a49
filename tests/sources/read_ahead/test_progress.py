"""The read-ahead's first-step bar (sources/read_ahead/progress.py): shown over a slow store for the
first step of a fresh loader and of a resume, advancing to all of that step's bytes; hidden when the
start is quicker than the delay and where stderr is not a terminal; batches unchanged."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.read_ahead import progress
from resumable_data.sources.read_ahead.progress import FirstUnits

pytest.importorskip("moto.server")
from tests.sources.conftest import remote_copies, s3_client  # noqa: E402

N = 800
RB = rd.ReadUnit.RECORD_BATCH


@pytest.fixture(scope="module")
def data(endpoint, tmp_path_factory):
    rng = np.random.default_rng(2)
    t = pa.table({"id": pa.array(np.arange(N, dtype=np.int64)),
                  "x": pa.array(rng.integers(0, 1 << 20, N).astype(np.int32))})
    return remote_copies(endpoint, t, tmp_path_factory, "progress", ("arrow",))["arrow"]


@pytest.fixture
def shown(monkeypatch):
    """The bar written to a buffer, enabled as on a terminal, shown after ``delay`` seconds."""
    buf = io.StringIO()
    monkeypatch.setattr(progress, "FILE", buf)
    monkeypatch.setattr(progress, "DISABLE", False)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "REFRESH_S", 0.01)
    return buf


def drawn(buf, text, timeout=10.0):
    """Whether ``text`` shows up in ``buf`` within ``timeout`` s (the display thread draws it)."""
    import time

    end = time.monotonic() + timeout
    while text not in buf.getvalue():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def loader(proxy, prefix, **kw):
    src = rd.ArrowShards(prefix, filesystem=s3_client(proxy.endpoint))
    return rd.DataLoader(src, batch_size=40, shuffle=True, seed=1, read_ahead=rd.ReadAhead(lookahead=4, unit=RB), **kw)


def ids(loader_, n):
    """The ids of the next ``n`` batches (None: to the end of the epoch)."""
    out = []
    for b in loader_:
        out.append(b["id"].tolist())
        if len(out) == n:
            break
    return out


def test_the_first_step_of_a_fresh_loader_and_of_a_resume_shows_its_units_arriving(data, proxy, shown):
    _, prefix = data
    proxy.latency_s = 0.05  # a far store: the first step's ~20 units take a while
    try:
        first = loader(proxy, prefix)
        head = ids(first, 3)
        state = first.state_dict()
        rest = ids(first, None)  # the rest of the epoch
        assert drawn(shown, " units of step 0")
        assert drawn(shown, "100%")  # advanced to all of the step's bytes
        shown.seek(0)
        shown.truncate()
        resumed = loader(proxy, prefix)
        resumed.load_state_dict(state)
        assert ids(resumed, None) == rest  # every remaining batch, in order: the bar changes nothing delivered
        assert drawn(shown, " units of step 3")
    finally:
        proxy.latency_s = 0.0
    assert len(head) == 3 and len(rest) == N // 40 - 3


def test_a_start_quicker_than_the_delay_prints_nothing(data, proxy, shown, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 30.0)
    ids(loader(proxy, data[1]), 3)
    assert shown.getvalue() == ""


def test_no_bar_where_stderr_is_not_a_terminal(data, proxy, capsys, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)  # shown at once, if it were shown at all
    proxy.latency_s = 0.02
    try:
        ids(loader(proxy, data[1]), 2)
    finally:
        proxy.latency_s = 0.0
    assert "rd read-ahead" not in capsys.readouterr().err


def test_the_bar_counts_each_unit_once_and_closes_with_the_last(shown):
    bar = FirstUnits(7, {3: 100, 5: 50})
    bar.landed(3)
    bar.landed(3)  # twice: counted once
    bar.landed(9)  # not the step's
    assert not bar.done
    assert drawn(shown, "100/150")
    bar.landed(5)
    assert bar.done
    bar.join(5)
    assert "the 2 units of step 7" in shown.getvalue() and "150/150" in shown.getvalue()


def test_a_long_wait_with_nothing_landing_still_shows(shown):
    """One large unit that takes long: the bar is drawn by its own thread, not by a unit landing."""
    bar = FirstUnits(0, {1: 10 << 20})
    assert drawn(shown, "0.00/10.0M")  # drawn while nothing has landed
    bar.close()
    bar.join(5)
    assert bar.done
