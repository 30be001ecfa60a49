"""The progress ledger, without torch: cursor, counters, skips, snapshot and restore."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from resumable_data.errors import ConfigError, UsageError
from resumable_data.labels import RecoveryLabel
from resumable_data.loader.ledger import ProgressLedger
from resumable_data.loader.state import CommitMode, Layout, LoaderState, OnUncommitted, SkippedRange
from resumable_data.loader.stream import RecordStream
from resumable_data.plan import OrderSpec, Plan, Tail

PLAN = Plan(40, 4, "v" * 32, 7, OrderSpec(), Tail.DROP)  # 10 steps per epoch


def fingerprint(commit: CommitMode = CommitMode.EXPLICIT, k: int = 1) -> LoaderState:
    return LoaderState(plan=PLAN, layout=Layout(), elastic=True, commit=commit, accumulation_steps=k,
                       packing=None, pinned=True)


def ledger(commit: CommitMode = CommitMode.EXPLICIT, k: int = 1) -> ProgressLedger:
    return ProgressLedger(RecordStream(PLAN), commit, k)


def deliver(led: ProgressLedger, n: int) -> None:
    """What the sampler and the iterator do for ``n`` batches of one pass."""
    epoch, first, start, stop = led.start_pass()
    step = start
    for _ in range(n):
        while led.is_skipped(step):
            step += 1
        led.on_fetch(step)
        led.deliver(step, tokens=3, samples=PLAN.global_batch)
        step += 1


def test_commit_moves_the_committed_cursor_and_counts_one_update():
    led = ledger()
    deliver(led, 3)
    assert led.cursor.to_dict() == {"committed": 0, "delivered": 3, "fetched": 3}
    led.commit(applied=False)
    c = led.counters()
    assert (led.cursor.committed, c.attempted_updates, c.applied_updates, c.skipped_updates) == (3, 1, 0, 1)
    assert (c.microbatches, c.samples, c.tokens) == (3, 12, 9)


def test_misuse_is_a_usage_error_and_changes_nothing():
    led = ledger()
    with pytest.raises(UsageError, match="commit"):
        led.commit(True)
    with pytest.raises(ConfigError, match="^applied="):
        led.commit("yes")
    deliver(led, 2)
    with pytest.raises(ConfigError, match="^start="):
        led.skip(1, 4, "bad shard")
    with pytest.raises(ConfigError, match="^reason="):
        led.skip(5, 6, " ")
    assert led.cursor.delivered == 2 and led.skipped == ()


def test_a_new_pass_starts_after_skipped_ranges_even_chained_ones():
    led = ledger()
    led.skip(0, 2, "a")
    led.skip(2, 5, "b")  # adjacent: the walk continues through both
    assert led.start_pass() == (0, 0, 5, 10)
    deliver(led, 2)
    assert led.cursor.delivered == 7
    led.commit(True)
    assert led.counters().skipped_steps == 5 and led.counters().microbatches == 2


def test_overlapping_skips_count_each_step_once():
    led = ledger()
    led.skip(2, 6, "a")
    led.skip(4, 8, "b")
    deliver(led, 4)  # steps 0, 1, 8, 9
    led.commit(True)
    assert led.cursor.committed == 10 and led.counters().skipped_steps == 6


def test_auto_snapshot_presents_delivered_batches_as_committed_without_committing():
    led = ledger(CommitMode.AUTO)
    deliver(led, 2)
    before = led.cursor
    snap = led.snapshot(fingerprint(CommitMode.AUTO))
    assert led.cursor == before  # nothing changed
    assert snap.cursor.committed == 2 and snap.counters.samples == 8 and snap.counters.tokens == 6
    led.commit_delivered()  # what state_dict() does in auto mode
    assert led.snapshot(fingerprint(CommitMode.AUTO)) == snap


def test_explicit_snapshot_keeps_the_uncommitted_range():
    led = ledger()
    deliver(led, 3)
    snap = led.snapshot(fingerprint())
    assert snap.uncommitted == 3 and snap.next_step() == 3 and snap.next_step(rewound=True) == 0


@pytest.mark.parametrize("choice, committed, skipped", [(OnUncommitted.REPEAT, 2, 0), (OnUncommitted.SKIP, 5, 3)])
def test_restore_repeats_or_skips_the_uncommitted_steps(choice, committed, skipped):
    led = ledger()
    deliver(led, 2)
    led.commit(True)
    deliver(led, 3)
    saved = led.snapshot(fingerprint())
    fresh = ledger()
    fresh.restore(saved, {0: 0}, RecoveryLabel.ELASTIC_RESHARD, choice)
    assert fresh.cursor.to_dict() == {"committed": committed, "delivered": committed, "fetched": committed}
    assert fresh.counters().skipped_steps == skipped and fresh.label is RecoveryLabel.ELASTIC_RESHARD
    assert fresh.counters().attempted_updates == 1
    if choice is OnUncommitted.SKIP:
        assert fresh.skipped[-1] == SkippedRange(2, 5, "uncommitted at resume (on_uncommitted='skip')")


@pytest.mark.parametrize("k", [1, 3])
def test_microsteps_follow_the_accumulation_window(k):
    auto, explicit = ledger(CommitMode.AUTO, k), ledger(CommitMode.EXPLICIT, k)
    seen = []
    for led in (auto, explicit):
        epoch, first, start, stop = led.start_pass()
        row = []
        for step in range(start, start + 7):
            led.on_fetch(step)
            led.deliver(step, 0, 4)
            row.append((led.microstep, led.microstep_is_last))
            if led.microstep_is_last:
                led.commit(True)
        seen.append(row)
    assert seen[0] == seen[1] == [(i % k, i % k == k - 1) for i in range(7)]


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["deliver", "commit", "skip", "pass"]), st.integers(1, 4)), max_size=30))
def test_snapshot_then_restore_is_the_identity(ops):
    """Any history: a restored ledger's snapshot equals the saved one (repeat), and the cursor
    invariant committed <= delivered <= fetched holds throughout."""
    led = ledger()
    for op, n in ops:
        if op == "deliver":
            deliver(led, n)
        elif op == "commit" and led.cursor.delivered > led.cursor.committed:
            led.commit(n % 2 == 0)
        elif op == "skip":
            led.skip(led.cursor.delivered + n, led.cursor.delivered + 2 * n, "test")
        c = led.cursor
        assert c.committed <= c.delivered <= c.fetched
    saved = led.snapshot(fingerprint())
    assert LoaderState.from_dict(saved.to_dict()) == saved
    if saved.uncommitted:
        return
    fresh = ledger()
    fresh.restore(saved, {0: 0, saved.epoch_base[0]: saved.epoch_base[1]}, saved.recovery_label, None)
    assert fresh.snapshot(fingerprint()) == saved
    assert fresh.counters() == led.counters()


def test_a_memento_puts_the_ledger_back_exactly():
    led = ledger()
    deliver(led, 3)
    led.commit(True)
    led.skip(8, 9, "bad")
    saved, before = led.memento(), led.snapshot(fingerprint())
    deliver(led, 4)
    led.commit(False)
    led.skip(20, 22, "later")
    assert led.snapshot(fingerprint()) != before
    led.rewind(saved)
    assert led.snapshot(fingerprint()) == before and led.counters().attempted_updates == 1
