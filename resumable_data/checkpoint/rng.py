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

__all__ = ["capture", "digests", "from_json", "restore", "to_json"]

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
    py, npy, tc, cuda = state[K_PYTHON], state[K_NUMPY], state[K_TORCH], state[K_CUDA]
    try:
        py_state = (int(py["version"]), tuple(int(v) for v in py["state"]), py["gauss"])
        np_state = (
            str(npy["kind"]),
            np.asarray(npy["keys"], dtype=np.uint32),
            int(npy["pos"]),
            int(npy["has_gauss"]),
            float(npy["cached_gaussian"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(
            describe("rng", f"malformed ({e})", "the generator states capture() wrote", "pass an unmodified checkpoint")
        ) from None
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
    try:
        torch_cpu = torch.tensor(d[K_TORCH], dtype=torch.uint8)
        cuda = None if d[K_CUDA] is None else [torch.tensor(s, dtype=torch.uint8) for s in d[K_CUDA]]
    except (TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(
            describe("rng", f"malformed ({e})", "byte lists", "pass an unmodified checkpoint")
        ) from None
    return {K_PYTHON: d[K_PYTHON], K_NUMPY: d[K_NUMPY], K_TORCH: torch_cpu, K_CUDA: cuda}
