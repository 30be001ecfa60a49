"""Where resumable_data caches what it can rebuild (packing indexes, in-memory HF datasets).

``$RD_CACHE_DIR`` when set, else ``~/.cache/resumable_data``. Pure standard library, below both
the sources and the loader layers (no torch, no pyarrow).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """Where caches live: ``$RD_CACHE_DIR``, else ``~/.cache/resumable_data``."""
    return Path(os.environ.get("RD_CACHE_DIR") or Path.home() / ".cache" / "resumable_data")
