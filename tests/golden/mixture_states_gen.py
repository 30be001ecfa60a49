"""Writes ``mixture_states.json``: loader states of ``rd.Mixture`` loaders, one per kind of
mixture section (schema 1, schema 2 with per-source tokens, ``token_column`` and ``tokens_base``,
a ``data_change`` rebase, packed tokens, a packed weight schedule, schema 3 with earlier runs),
each with its fingerprint (a checkpoint's ``data``), as ``json.dumps`` wrote them. Run ONCE on rd
before the mixture section was typed (main at 8b0cdfc, issue 29; kept to show how the file was
made, never rerun): ``tests/loader/test_state_mixture.py`` loads every state, writes it back
byte for byte, and runs the same scenarios on the current rd, which must write the same bytes.

    PYTHONPATH=$PWD python -m tests.golden.mixture_states_gen OUT.json
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile

import resumable_data as rd
from resumable_data.loader.state import LoaderState
from tests.mixture_data import WEIGHTS, open_sources, write_sources

W2 = {"web": 0.2, "code": 0.2, "math": 0.6}
W3 = {"web": 0.6, "code": 0.4, "math": 0.0}
PACKING = rd.Packing(16, window=16, eos_id=0)
PATH = pathlib.Path(__file__).with_name("mixture_states.json")


def loader(dirs, weights, **kw):
    return rd.DataLoader(rd.Mixture(open_sources(dirs), weights=weights, block_size=16), batch_size=4, seed=11, **kw)


def states_after(ld, steps):
    """The JSON state after each of ``steps`` batches (across epochs)."""
    out = []
    while len(out) < steps:
        for _ in ld:
            out.append(json.dumps(ld.state_dict()))
            if len(out) == steps:
                break
    return out


def scenarios(dirs) -> dict[str, str]:
    """Scenario name -> the JSON of its last state."""
    out = {}
    out["plain"] = states_after(loader(dirs, WEIGHTS), 5)[-1]
    out["tokens"] = states_after(loader(dirs, WEIGHTS, token_column="tokens"), 5)[-1]
    counting = loader(dirs, WEIGHTS, token_column="tokens")  # a schema-1 state resumed by a counting loader
    counting.load_state_dict(json.loads(out["plain"]))
    out["tokens_base"] = states_after(counting, 2)[-1]
    changed = loader(dirs, W2, token_column="tokens")
    changed.load_state_dict(json.loads(out["tokens"]), label="data_change")
    out["rebase"] = states_after(changed, 3)[-1]
    sched = rd.WeightSchedule([(0, WEIGHTS), (9, W2), (17, W3)])
    out["schedule"] = states_after(loader(dirs, sched, token_column="tokens"), 12)[-1]
    out["packed"] = states_after(loader(dirs, WEIGHTS, packing=PACKING), 6)[-1]
    out["packed_schedule"] = states_after(loader(dirs, sched, packing=PACKING), 20)[-1]
    at26 = states_after(loader(dirs, WEIGHTS, packing=PACKING), 26)[-1]  # inside packed epoch 1
    mid = loader(dirs, W2, packing=PACKING)
    mid.load_state_dict(json.loads(at26), label="data_change")
    out["packed_earlier"] = states_after(mid, 2)[-1]
    return out


def fingerprints(states: dict[str, str]) -> dict[str, str]:
    return {k: json.dumps(LoaderState.from_dict(json.loads(v)).fingerprint_dict()) for k, v in states.items()}


def main(path: pathlib.Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        states = scenarios(write_sources(pathlib.Path(tmp)))
    path.write_text(json.dumps({"states": states, "fingerprints": fingerprints(states)}, indent=1) + "\n")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else PATH)
