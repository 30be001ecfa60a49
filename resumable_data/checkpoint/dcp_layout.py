"""The ``torch.distributed.checkpoint`` (DCP) layout of :class:`rd.TrainingState`.

``TrainingState.state_dict()`` returns ``{"format", "schema_version", "layout": "dcp", "json": <one
JSON string>, "tensors": {path: tensor}}``, because DCP loads into a pre-shaped target and only
restores keys the target presents:

* every non-tensor value (metadata, loader cursor, skipped ranges, scheduler, oracles...) travels
  in the single ``json`` string, so variable-length parts come back whole;
* the tensor paths are a function of the configuration, not of progress: the optimizer state is
  dense (torch's ``get_optimizer_state_dict`` layout; parameters without state get zero
  placeholders and are listed as ``stateless``), and with ``accumulation="save_gradients"`` and a
  possible mid-window checkpoint (no loader, ``accumulation_steps > 1`` or ``commit="explicit"``)
  every trainable parameter has a ``gradients.<name>`` slot (zeros at a window boundary, with the
  names actually saved listed in the JSON). Cost: one parameter-sized tensor per checkpoint; use
  ``accumulation="rewind"`` to store none;
* per-rank state (every global RNG, the next-batch oracle) is gathered from all ranks
  (``all_gather_object`` of a JSON string) into a table with one entry per rank, so DCP's
  de-duplication of equal keys across ranks loses nothing and rank r restores rank r's
  generators. ``state_dict()`` is therefore a collective when torch.distributed is initialized
  with more than one rank (as torch's ``get_state_dict`` is): call it on every rank. Mid-window
  gradients must be identical on every rank (DDP all-reduces them); a save where they differ
  (accumulating under ``no_sync``) is refused: use ``accumulation="rewind"``.
* world-size policy (``new_rank_rng=``, a :class:`NewRankRNG` or its string value): on fewer ranks
  than saved, rank r restores saved rank r's generators (the other saved streams end); on more
  ranks, the ranks without a saved stream make the load fail with :class:`CompatibilityError` on
  every rank (``"refuse"``, the default) or keep the generators the process seeded itself
  (``"keep"``). The layout label (``elastic_reshard``) is required for any world-size change anyway.
* tested in one process and with DDP (gloo). FSDP / DTensor state is not handled by
  ``TrainingState`` (its oracles hash local tensors); checkpoint an FSDP2 model with torch's
  ``get_state_dict`` / ``set_state_dict`` beside the loader in the same DCP call (README, "FSDP2").
* the optimizer's zero placeholders come from one zero-LR ``step()`` on the parameters without
  state, run by ``state_dict()`` only (the save, and the target ``dcp.load`` builds); it leaves the
  optimizer, parameters and gradients as they were and does not fire the optimizer's own step hooks
  (see :mod:`resumable_data.checkpoint.optim`). Restoring and verifying run no step. Optimizers whose
  ``step()`` needs a closure (``LBFGS``) are refused: save them with :func:`rd.save_checkpoint`.
* tensors are loaded by DCP in place into the live objects *before* ``load_state_dict`` checks
  compatibility, so a refused DCP load leaves the weights loaded (resume into fresh objects and
  treat a refusal as fatal); :func:`rd.load_checkpoint` refuses before changing anything.

* every field of the rank table is checked at load (:func:`unpack`), none is ignored: the table
  holds exactly ``world_size`` and ``entries``; each entry exactly ``rank`` (its position),
  ``rng`` (null or generator states in range: every rank checks every entry, so a forged entry
  refuses the load on every rank alike; null refused on a rank that restores its generators into a
  TrainingState that captures them, ``capture_rng=True``: nothing would restore them), ``oracles``
  (per-rank ones only) and ``gradients`` (the rank's gradients oracle: equal to the saved oracle
  where gradients were saved, as the save refuses ranks whose gradients differ, and ``"none"``
  where ``accumulation.gradients`` lists none, as every rank computes it then); the top-level
  ``rng`` must be null (:func:`pack`
  moves each rank's generators into its entry). A forged field is a :class:`CheckpointError`
  naming it, before anything changes.

Cost: one JSON encode of the state and, with more than one rank, one ``all_gather_object`` of each
rank's small entry (generators, per-rank oracles) per save; a load decodes the JSON once and
checks every rank's generator states (a few KiB per rank).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

from resumable_data._schema import expect_header, expect_mapping
from resumable_data.checkpoint import rng as rng_mod
from resumable_data.checkpoint.codec import decode, encode, tensor_ref
from resumable_data.checkpoint.errors import CheckpointError, CompatibilityError
from resumable_data.checkpoint.keys import (
    _DCP_KEYS,
    _KEYS,
    K_ACCUMULATION,
    K_FORMAT,
    K_GRADIENTS,
    K_JSON,
    K_LAYOUT,
    K_ORACLES,
    K_RANKS,
    K_RNG,
    K_SCHEMA,
    K_TENSORS,
    LAYOUT_DCP,
    PER_RANK_ORACLES,
    STATE_FORMAT,
    STATE_OLDER_VERSIONS,
    STATE_SCHEMA_VERSION,
)
from resumable_data.checkpoint.oracles import NO_GRADIENTS
from resumable_data.checkpoint.restore_check import NO_RNG_FIX
from resumable_data.errors import describe

__all__ = ["pack", "select_rank", "unpack"]


def rank_world() -> tuple[int, int]:
    d = torch.distributed
    if d.is_available() and d.is_initialized():
        return d.get_rank(), d.get_world_size()
    return 0, 1


def _tensor_refs(x: Any, out: set) -> set:
    if isinstance(x, dict):
        name = tensor_ref(x)
        if name is not None:
            out.add(name)
        else:
            for v in x.values():
                _tensor_refs(v, out)
    elif isinstance(x, list):
        for v in x:
            _tensor_refs(v, out)
    return out


def pack(tree: dict[str, Any], model: Any) -> dict[str, Any]:
    """The DCP layout of a state tree (``TrainingState._tree(dcp=True)``): a collective when
    torch.distributed runs more than one rank (the per-rank entries are gathered)."""
    rank, world = rank_world()
    rng = tree[K_RNG]
    tree[K_RNG] = None
    shared = tree[K_ORACLES]
    mine = {k: shared.pop(k) for k in sorted(shared) if k in PER_RANK_ORACLES}
    entry = {
        "rank": rank,
        "rng": rng_mod.to_json(rng) if rng is not None else None,
        "oracles": mine,
        "gradients": shared["gradients"],
    }
    entries = [entry]
    if world > 1:
        gathered: list[Any] = [None] * world
        torch.distributed.all_gather_object(gathered, json.dumps(entry))
        entries = [json.loads(g) for g in gathered]
        local = model is None or all(
            type(p.grad) in (torch.Tensor, torch.nn.Parameter) for p in model.parameters() if p.grad is not None
        )
        if tree[K_ACCUMULATION]["gradients"] and local and len({e["gradients"] for e in entries}) > 1:
            raise CheckpointError(
                describe(
                    "gradients",
                    "different accumulated gradients on different ranks",
                    "gradients that are identical on every rank (DDP all-reduces them on each backward) inside "
                    "an accumulation window",
                    "use accumulation='rewind' with commit='explicit' (the window is repeated; nothing is stored), "
                    "or checkpoint at a window boundary",
                )
            )
    json_tree, tensors = encode(tree, keep_tensors=True)
    json_tree[K_RANKS] = {"world_size": world, "entries": entries}
    return {
        K_FORMAT: STATE_FORMAT,
        K_SCHEMA: STATE_SCHEMA_VERSION,
        K_LAYOUT: LAYOUT_DCP,
        K_JSON: json.dumps(json_tree),  # unsorted: dict order is state
        K_TENSORS: tensors,
    }


def unpack(state: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """The JSON tree (tensors still as references), the per-rank entries and the saved world size
    of a DCP-layout state, checked (a malformed one raises :class:`CheckpointError`)."""
    expect_mapping(state, "state", _DCP_KEYS, error=CheckpointError)
    expect_header(state, STATE_FORMAT, STATE_SCHEMA_VERSION, "state", error=CheckpointError, also=STATE_OLDER_VERSIONS)
    if not isinstance(state[K_JSON], str) or not isinstance(state[K_TENSORS], Mapping):
        raise CheckpointError(
            describe(
                "state",
                f"json={type(state[K_JSON]).__name__}, tensors={type(state[K_TENSORS]).__name__}",
                "a JSON string and a dict of tensors",
                "pass what TrainingState.state_dict() returned (through DCP)",
            )
        )
    try:
        tree = json.loads(state[K_JSON])
    except (ValueError, RecursionError) as e:
        raise CheckpointError(
            describe("state.json", f"unreadable ({e})", "the JSON state_dict() wrote", "load another checkpoint")
        ) from None
    if not isinstance(tree, dict):
        raise CheckpointError(describe("state.json", type(tree).__name__, "a JSON object", "load another checkpoint"))
    ranks = tree.pop(K_RANKS, None)
    expect_mapping(tree, "state.json", _KEYS, error=CheckpointError)
    expect_header(
        tree, STATE_FORMAT, STATE_SCHEMA_VERSION, "state.json", error=CheckpointError, also=STATE_OLDER_VERSIONS
    )
    if tree[K_SCHEMA] != state[K_SCHEMA]:
        raise CheckpointError(
            describe(
                "state.json['schema_version']",
                tree[K_SCHEMA],
                f"the DCP state's own schema_version {state[K_SCHEMA]}",
                "the checkpoint was edited after it was saved: load another one",
            )
        )
    entries = ranks.get("entries") if isinstance(ranks, dict) else None
    saved_world = ranks.get("world_size") if isinstance(ranks, dict) else None
    if (
        not isinstance(saved_world, int)
        or isinstance(saved_world, bool)
        or saved_world < 1
        or not isinstance(entries, list)
        or len(entries) != saved_world
        or not all(isinstance(e, dict) and isinstance(e.get("oracles"), dict) and "rng" in e for e in entries)
    ):
        raise CheckpointError(
            describe(
                "state.json.ranks",
                type(ranks).__name__,
                "{'world_size': W, 'entries': [one per rank]}",
                "load another checkpoint",
            )
        )
    _check_ranks(tree, ranks, entries)
    return tree, entries, saved_world


#: The keys of the rank table and of each rank's entry, as :func:`pack` writes them.
_RANKS_KEYS = frozenset({"world_size", "entries"})
_ENTRY_KEYS = frozenset({"rank", "rng", "oracles", "gradients"})


def _check_ranks(tree: dict[str, Any], ranks: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    """Every field of the rank table is what :func:`pack` writes (module docs): nothing forged there
    is ignored. Each entry's ``rank`` is its position, its generators read (every rank checks every
    entry, so a forged entry refuses the load on every rank, not only its own), its oracles are
    per-rank ones, its ``gradients`` oracle a string (equal to the saved one where gradients were
    saved: the save refuses ranks whose gradients differ); the top-level ``rng`` is null (each
    rank's generators live in its entry)."""
    where = "state.json.ranks"
    expect_mapping(ranks, where, _RANKS_KEYS, error=CheckpointError)
    if tree[K_RNG] is not None:
        raise _unexpected(
            "state.json.rng", type(tree[K_RNG]).__name__, "null (each rank's generators are in its entry)"
        )
    acc = tree[K_ACCUMULATION] if isinstance(tree[K_ACCUMULATION], dict) else {}
    saved_grads = bool(acc.get("gradients"))
    oracles = tree[K_ORACLES] if isinstance(tree[K_ORACLES], dict) else {}
    for i, e in enumerate(entries):
        at = f"{where}.entries[{i}]"
        expect_mapping(e, at, _ENTRY_KEYS, error=CheckpointError)
        if type(e["rank"]) is not int or e["rank"] != i:
            raise _unexpected(f"{at}.rank", e["rank"], f"{i} (the entry's position: rank r saved entry r)")
        bad = sorted(k for k, v in e["oracles"].items() if k not in PER_RANK_ORACLES or not isinstance(v, str))
        if bad:
            raise _unexpected(f"{at}.oracles", bad, f"per-rank oracles {sorted(PER_RANK_ORACLES)}, each a string")
        g = e["gradients"]
        if not isinstance(g, str) or g != (oracles.get("gradients") if saved_grads else NO_GRADIENTS):
            raise _unexpected(
                f"{at}.gradients",
                g,
                f"the saved gradients oracle {oracles.get('gradients')!r} (gradients were saved mid-window: "
                "identical on every rank)"
                if saved_grads
                else f"{NO_GRADIENTS!r} (accumulation.gradients lists none: every rank's gradients oracle is "
                f"{NO_GRADIENTS!r} then)",
            )
        if e["rng"] is not None:
            try:
                rng_mod.host_states(rng_mod.from_json(e["rng"]))
            except CheckpointError as err:
                raise _unexpected(
                    f"{at}.rng", "generator states out of range", f"what capture() writes ({err})"
                ) from None


def _unexpected(where: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(
        describe(where, value, expected, "the checkpoint was edited after it was saved: load another one")
    )


def select_rank(
    tree: dict[str, Any],
    tensors: Mapping[str, Any],
    entries: list[dict[str, Any]],
    saved_world: int,
    *,
    restores_rng: bool,
    keep_new_rank_rng: bool,
    captures_rng: bool = True,
) -> tuple[dict[str, Any], set[str]]:
    """The file-layout tree this rank restores (tensors in place, its own generators, gradients and
    oracles) and the oracles to skip; applies the world-size policy (module docs)."""
    # the tensors DCP loaded must be exactly those the saved JSON refers to
    refs = _tensor_refs(tree, set())
    have = set(tensors)
    if refs != have:
        raise CheckpointError(
            describe(
                "tensors",
                f"checkpoint refers to {sorted(refs - have)[:6]} not presented here; presented "
                f"{sorted(have - refs)[:6]} it does not hold",
                "a TrainingState built like the saved one (same model, optimizer, EMA, callbacks, accumulation policy)",
                "build the objects as saved before dcp.load",
            )
        )
    tree = decode(tree, tensors, version=tree[K_SCHEMA])  # version 1 holds none of version 2's tags
    rank, world = rank_world()
    has_rng = any(e["rng"] is not None for e in entries)
    if world > saved_world and restores_rng and has_rng and not keep_new_rank_rng:
        raise CompatibilityError(
            describe(
                "world_size",
                world,
                f"at most the saved {saved_world} rank(s): rank r restores the generators rank r saved, and ranks "
                f"{saved_world}..{world - 1} have none",
                f"resume on {saved_world} rank(s), or build rd.TrainingState(new_rank_rng='keep') so those ranks keep "
                "the generators they seeded themselves (seed them by rank), or resume with label='warm_start'",
            )
        )
    entry = entries[rank] if rank < saved_world else None
    if restores_rng and captures_rng and entry is not None and entry["rng"] is None:
        raise CheckpointError(  # nothing would restore this rank's generators (restore_check._check_no_rng)
            describe(
                f"state.json.ranks.entries[{rank}].rng",
                None,
                "this rank's generator states (the TrainingState restores them: capture_rng=True)",
                NO_RNG_FIX,
            )
        )
    tree[K_RNG] = rng_mod.from_json(entry["rng"]) if entry is not None and entry["rng"] is not None else None
    if tree[K_GRADIENTS] is not None:
        names = tree[K_ACCUMULATION].get("gradients")
        if not isinstance(names, list) or not set(names) <= set(tree[K_GRADIENTS]):
            raise CheckpointError(
                describe(
                    "accumulation.gradients", names, "the names of saved gradient slots", "load another checkpoint"
                )
            )
        tree[K_GRADIENTS] = {n: tree[K_GRADIENTS][n] for n in names} or None
    oracles = dict(tree[K_ORACLES])
    if entry is not None:
        oracles.update(entry["oracles"])
    tree[K_ORACLES] = oracles
    skip = {"next_batch"} if world != saved_world else set()
    return tree, skip
