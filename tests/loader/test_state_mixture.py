"""``LoaderState.mixture``, the typed ``rd.Mixture`` section: every kind of section rd writes loads
into a :class:`MixtureSection` and is written back byte for byte (golden states written before the
section was typed, ``tests/golden/mixture_states_gen.py``); the current rd writes the same bytes for
the same runs; a malformed section is refused when the state is loaded."""

from __future__ import annotations

import json
import pathlib

import pytest

import resumable_data as rd
from resumable_data.loader.state import LoaderState
from resumable_data.plan.mixture.section import MixtureSection, PackedRebase
from tests.golden import mixture_states_gen

GOLDEN = json.loads(mixture_states_gen.PATH.read_text())
KINDS = sorted(GOLDEN["states"])


def test_the_golden_file_covers_every_kind_of_section():
    sections = [json.loads(s)["mixture"] for s in GOLDEN["states"].values()]
    assert {m["schema_version"] for m in sections} == {1, 2, 3}
    assert any("tokens_base" in m for m in sections) and any(m["rebase"] for m in sections)
    assert any("earlier" in m for m in sections) and any(len(m["schedule"]) > 1 for m in sections)
    assert any("tokens" in m and "token_column" not in m for m in sections)  # packed: no column


@pytest.mark.parametrize("kind", KINDS)
def test_a_golden_state_loads_typed_and_is_written_back_byte_for_byte(kind):
    text = GOLDEN["states"][kind]
    state = LoaderState.from_dict(json.loads(text))
    assert isinstance(state.mixture, MixtureSection)
    assert json.dumps(state.to_dict()) == text
    assert json.dumps(state.fingerprint_dict()) == GOLDEN["fingerprints"][kind]
    saved = json.loads(text)["mixture"]
    assert state.mixture.schema_version == saved["schema_version"]
    assert list(state.mixture.names) == saved["sources"] and list(state.mixture.sizes) == saved["sizes"]
    assert state.mixture.tokens == (None if "tokens" not in saved else tuple(saved["tokens"]))
    assert state.mixture.token_column == saved.get("token_column")
    assert state.mixture.tokens_base == saved.get("tokens_base")
    assert isinstance(state.mixture.rebase, PackedRebase) is ("earlier" in saved)


def test_the_current_rd_writes_the_golden_bytes(tmp_path):
    states = mixture_states_gen.scenarios(mixture_states_gen.write_sources(pathlib.Path(tmp_path)))
    for kind in KINDS:
        assert states[kind] == GOLDEN["states"][kind], kind
    assert mixture_states_gen.fingerprints(states) == GOLDEN["fingerprints"]


def test_a_malformed_section_is_refused_on_load_naming_the_field():
    d = json.loads(GOLDEN["states"]["tokens"])
    d["mixture"]["tokens"][1] = -1
    with pytest.raises(rd.ResumeError, match=r"state\.mixture\.tokens\[1\]=-1"):
        LoaderState.from_dict(d)
    d = json.loads(GOLDEN["states"]["plain"])
    d["mixture"] = []
    with pytest.raises(rd.ResumeError, match=r"state\.mixture=\[\]: expected a mixture section object"):
        LoaderState.from_dict(d)
