"""Every global random generator of the training process, captured and restored exactly.

Covers Python's ``random``, NumPy's legacy global generator, torch's CPU generator and, when
CUDA is initialized, every CUDA device's generator. The loader's own randomness (shuffling,
windows, per-sample augmentation keys) is not here: it is a pure function of the position and
needs no state (see DESIGN.md).

Form: Python and NumPy states as JSON lists of integers (exact), torch states as uint8 tensors.
Restore cost: a few KiB copied. A saved CUDA state restored where CUDA has another device count
is an error (:class:`CheckpointError`); a checkpoint written without CUDA leaves CUDA alone.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import xxhash

from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.errors import describe

__all__ = ["capture", "digests", "from_json", "host_states", "restore", "to_json"]

K_PYTHON = "python"
K_NUMPY = "numpy"
K_TORCH = "torch_cpu"
K_CUDA = "cuda"


def _cuda_ready() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def capture() -> dict[str, Any]:
    """The current states of all global generators (tensors are copies)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    out: dict[str, Any] = {
        K_PYTHON: {"version": int(version), "state": [int(v) for v in internal], "gauss": gauss},
        K_NUMPY: {
            "kind": str(kind),
            "keys": [int(v) for v in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        K_TORCH: torch.get_rng_state().clone(),
        K_CUDA: [s.clone() for s in torch.cuda.get_rng_state_all()] if _cuda_ready() else None,
    }
    return out


def restore(state: Any) -> None:
    """Set every generator from :func:`capture`'s output; validates before changing anything."""
    if not isinstance(state, dict) or set(state) != {K_PYTHON, K_NUMPY, K_TORCH, K_CUDA}:
        raise CheckpointError(
            describe(
                "rng",
                type(state).__name__,
                f"a dict with keys {[K_PYTHON, K_NUMPY, K_TORCH, K_CUDA]}",
                "pass an unmodified checkpoint",
            )
        )
    py_state, np_state = host_states(state)
    tc, cuda = state[K_TORCH], state[K_CUDA]
    if not isinstance(tc, torch.Tensor) or tc.dtype != torch.uint8:
        raise CheckpointError(
            describe("rng.torch_cpu", type(tc).__name__, "a uint8 tensor", "pass an unmodified checkpoint")
        )
    if cuda is not None:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not isinstance(cuda, list) or len(cuda) != n:
            raise CheckpointError(
                describe(
                    "rng.cuda",
                    f"{len(cuda) if isinstance(cuda, list) else cuda} device states",
                    f"{n} (the CUDA devices visible now)",
                    "resume on the same number of visible GPUs (CUDA_VISIBLE_DEVICES)",
                )
            )
    random.setstate(py_state)
    np.random.set_state(np_state)
    torch.set_rng_state(tc)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


#: MT19937 (Python's ``random`` and NumPy's legacy generator): 624 32-bit words and a position.
MT_WORDS = 624


def _bad(where: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(describe(where, value, expected, "pass an unmodified checkpoint"))


def _words(v: Any, where: str, n: int) -> list[int]:
    if not isinstance(v, list) or len(v) != n:
        raise _bad(where, f"{type(v).__name__} of {len(v) if isinstance(v, list) else '?'}", f"a list of {n} integers")
    for i, w in enumerate(v):
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < 1 << 32:
            raise _bad(f"{where}[{i}]", w, "an integer in [0, 2**32)")
    return v


def host_states(state: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``(random.setstate argument, np.random.set_state argument)`` of :func:`capture`'s Python and
    NumPy entries, every field checked as those generators need it: MT19937 words, the position in
    ``[0, 624]`` (NumPy does not check it: a position past the key array reads and writes outside
    it, a crash or garbage draws), ``has_gauss`` 0 or 1, and a cached Gaussian that is a float
    (Python returns ``gauss`` itself from its next ``random.gauss()``). :class:`CheckpointError`
    naming the field otherwise."""
    py, npy = state[K_PYTHON], state[K_NUMPY]
    if not isinstance(py, dict) or set(py) != {"version", "state", "gauss"}:
        raise _bad("rng.python", py if not isinstance(py, dict) else sorted(py), "{'version', 'state', 'gauss'}")
    if py["version"] != 3 or isinstance(py["version"], bool):
        raise _bad("rng.python.version", py["version"], "3 (random.getstate()'s version)")
    words = _words(py["state"], "rng.python.state", MT_WORDS + 1)
    if not 0 <= words[-1] <= MT_WORDS:
        raise _bad(f"rng.python.state[{MT_WORDS}]", words[-1], f"a position in [0, {MT_WORDS}]")
    gauss = py["gauss"]
    if gauss is not None and (isinstance(gauss, bool) or not isinstance(gauss, float)):
        raise _bad("rng.python.gauss", gauss, "null or a float (the cached Gaussian)")
    if not isinstance(npy, dict) or set(npy) != {"kind", "keys", "pos", "has_gauss", "cached_gaussian"}:
        raise _bad(
            "rng.numpy",
            npy if not isinstance(npy, dict) else sorted(npy),
            "{'kind', 'keys', 'pos', 'has_gauss', 'cached_gaussian'}",
        )
    if npy["kind"] != "MT19937":
        raise _bad("rng.numpy.kind", npy["kind"], "'MT19937'")
    keys = _words(npy["keys"], "rng.numpy.keys", MT_WORDS)
    pos = npy["pos"]
    if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos <= MT_WORDS:
        raise _bad("rng.numpy.pos", pos, f"an integer in [0, {MT_WORDS}]")
    if npy["has_gauss"] not in (0, 1) or isinstance(npy["has_gauss"], bool):
        raise _bad("rng.numpy.has_gauss", npy["has_gauss"], "0 or 1")
    cached = npy["cached_gaussian"]
    if isinstance(cached, bool) or not isinstance(cached, (int, float)):
        raise _bad("rng.numpy.cached_gaussian", cached, "a number")
    return (3, tuple(words), gauss), (
        "MT19937",
        np.asarray(keys, dtype=np.uint32),
        pos,
        npy["has_gauss"],
        float(cached),
    )


def digests(state: dict[str, Any]) -> dict[str, str]:
    """Short xxh3-64 digests of each generator's state (the inventory's oracle)."""
    out = {
        K_PYTHON: xxhash.xxh3_64_hexdigest(repr((state[K_PYTHON]["state"], state[K_PYTHON]["gauss"])).encode()),
        K_NUMPY: xxhash.xxh3_64_hexdigest(
            repr(
                (
                    state[K_NUMPY]["keys"],
                    state[K_NUMPY]["pos"],
                    state[K_NUMPY]["has_gauss"],
                    state[K_NUMPY]["cached_gaussian"],
                )
            ).encode()
        ),
        K_TORCH: xxhash.xxh3_64_hexdigest(state[K_TORCH].numpy().tobytes()),
    }
    if state[K_CUDA] is not None:
        h = xxhash.xxh3_64()
        for s in state[K_CUDA]:
            h.update(s.cpu().numpy().tobytes())
        out[K_CUDA] = h.hexdigest()
    return out


def to_json(state: dict[str, Any]) -> dict[str, Any]:
    """:func:`capture`'s output as plain JSON (torch states as lists of byte values)."""
    return {
        K_PYTHON: state[K_PYTHON],
        K_NUMPY: state[K_NUMPY],
        K_TORCH: state[K_TORCH].tolist(),
        K_CUDA: None if state[K_CUDA] is None else [s.cpu().tolist() for s in state[K_CUDA]],
    }


def from_json(d: Any) -> dict[str, Any]:
    """Inverse of :func:`to_json` (validated again by :func:`restore`)."""
    if not isinstance(d, dict) or set(d) != {K_PYTHON, K_NUMPY, K_TORCH, K_CUDA}:
        raise CheckpointError(
            describe(
                "rng",
                type(d).__name__,
                f"a dict with keys {[K_PYTHON, K_NUMPY, K_TORCH, K_CUDA]}",
                "pass an unmodified checkpoint",
            )
        )
    for where, v in [(K_TORCH, d[K_TORCH])] + [
        (f"{K_CUDA}[{i}]", s) for i, s in enumerate(d[K_CUDA] if isinstance(d[K_CUDA], list) else [])
    ]:
        # torch.tensor(..., dtype=uint8) wraps -1 to 255 and 256 to 0: every value must be a byte already
        if isinstance(v, list) and not all(type(b) is int and 0 <= b <= 255 for b in v):
            raise _bad(
                f"rng.{where}", next(b for b in v if type(b) is not int or not 0 <= b <= 255), "bytes in [0, 255]"
            )
    try:
        torch_cpu = torch.tensor(d[K_TORCH], dtype=torch.uint8)
        cuda = None if d[K_CUDA] is None else [torch.tensor(s, dtype=torch.uint8) for s in d[K_CUDA]]
    except (TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(
            describe("rng", f"malformed ({e})", "byte lists", "pass an unmodified checkpoint")
        ) from None
    return {K_PYTHON: d[K_PYTHON], K_NUMPY: d[K_NUMPY], K_TORCH: torch_cpu, K_CUDA: cuda}
