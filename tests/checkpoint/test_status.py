"""The typed progress section of a checkpoint: round trip, and forged values refused."""

from __future__ import annotations

import pytest

from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.status import AccumulationStatus, CheckpointStatus
from resumable_data.loader.state import Cursor, LoaderState


def test_round_trip_keeps_every_field_and_the_extra_progress():
    st = CheckpointStatus(
        accumulation=AccumulationStatus("rewind", True, True, 1, 2), cursor=Cursor(3, 5, 6), epoch_base=(0, 0),
        counters={"attempted_updates": 1}, next_step=3, next_lr=(0.1, None), scheduler_last_epoch=4, scale=2.0,
        modes={"training": 3, "modules": 4}, extra={"k": 7})
    assert CheckpointStatus.from_dict(st.to_dict()) == st


@pytest.mark.parametrize("key, value", [("counters", {"samples": "9"}), ("modes", [1]), ("next_lr", ["x"]),
                                        ("epoch_base", [1]), ("next_step", True),
                                        ("cursor", {"committed": 2, "delivered": 1, "fetched": 1})])
def test_forged_values_are_checkpoint_errors_naming_the_field(key, value):
    with pytest.raises(CheckpointError, match=rf"status\.{key}"):
        CheckpointStatus.from_dict({key: value})


def test_a_checkpoint_data_section_parses_back_to_its_fingerprint():
    from resumable_data.plan import OrderSpec, Plan, Tail
    from resumable_data.loader.state import CommitMode, Layout

    state = LoaderState(plan=Plan(40, 4, "v" * 32, 7, OrderSpec(), Tail.DROP), layout=Layout(), elastic=True,
                        commit=CommitMode.EXPLICIT, accumulation_steps=2, packing=None, pinned=True)
    parsed = LoaderState.from_fingerprint(state.fingerprint_dict(), (1, 10))
    assert parsed.fingerprint_dict() == state.fingerprint_dict() and parsed.epoch_base == (1, 10)


@pytest.mark.parametrize("mode", ["eager", "lazy", "off"])
def test_the_fingerprint_records_the_seeding_mode_not_the_version(mode):
    import json
    from dataclasses import replace

    from resumable_data.errors import ResumeError
    from resumable_data.loader.seeding.sample_seeding import SampleSeeding, SeedingRecord
    from resumable_data.loader.state import CommitMode, Layout
    from resumable_data.plan import OrderSpec, Plan, Tail

    bare = LoaderState(plan=Plan(40, 4, "v" * 32, 7, OrderSpec(), Tail.DROP), layout=Layout(), elastic=True,
                       commit=CommitMode.EXPLICIT, accumulation_steps=2, packing=None, pinned=True)
    fps = [replace(bare, sample_seeding=SeedingRecord(SampleSeeding(mode), v)).fingerprint_dict() for v in (1, 2, 3)]
    assert fps[0] == fps[1] == fps[2] == {**bare.fingerprint_dict(), "seed_per_sample": mode}
    assert len(json.dumps(fps[0])) - len(json.dumps(bare.fingerprint_dict())) == len(f', "seed_per_sample": "{mode}"')
    parsed = LoaderState.from_fingerprint(fps[0])  # validated; not kept (the fingerprint records no version)
    assert parsed.sample_seeding is None and parsed.fingerprint_dict() == bare.fingerprint_dict()
    with pytest.raises(ResumeError, match=r"^data\.seed_per_sample='sometimes': expected one of \['eager', 'lazy'"):
        LoaderState.from_fingerprint({**fps[0], "seed_per_sample": "sometimes"})
