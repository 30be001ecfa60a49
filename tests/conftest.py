"""Suite-wide isolation: every test session gets its own ``RD_CACHE_DIR`` (auto-pinned manifests
and verified-hash markers live there, see ``resumable_data.sources.manifests``/``verified``), so
a run never reads what an earlier run left in ``~/.cache/resumable_data``."""

from __future__ import annotations

import os
import tempfile

if "RD_TEST_KEEP_CACHE_DIR" not in os.environ:
    os.environ["RD_CACHE_DIR"] = tempfile.mkdtemp(prefix="rd-test-cache-")
