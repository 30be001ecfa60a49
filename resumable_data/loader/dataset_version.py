"""The dataset version a loader's plan is keyed by: given, the source's own pin, or ``unpinned``.

Algorithm. ``dataset_version=`` (an :class:`rd.DatasetVersion` or its hash string) and, for an
``rd.ArrowShards`` or ``rd.Mixture`` opened from pinned data, the source's own version hash are
reconciled: either alone is used, both must agree, and neither gives :data:`UNPINNED`.

Guarantee. The version hash in the plan (and so in every saved state) is the data's when it is
known; a ``dataset_version=`` that contradicts the source's pin is refused with
:class:`rd.ConfigError`, never silently preferred. An unpinned loader says so (``pinned=False``).

Cost. O(1): the source's version was computed when it was opened.
"""

from __future__ import annotations

from typing import Any

from resumable_data.errors import ConfigError, describe

__all__ = ["UNPINNED", "resolve_version"]

#: The version hash of a loader whose dataset is not pinned.
UNPINNED = "unpinned"


def resolve_version(dataset: Any, dataset_version: Any) -> tuple[str, bool]:
    """``(version hash, pinned)`` of the loader's dataset (see the module docs)."""
    from resumable_data.sources import ArrowShards, DatasetVersion  # sources import pyarrow only
    from resumable_data.sources.mixture import Mixture

    given = dataset_version.hash if isinstance(dataset_version, DatasetVersion) else dataset_version
    if given is not None and (not isinstance(given, str) or not given):
        raise ConfigError(
            describe(
                "dataset_version",
                dataset_version,
                "an rd.DatasetVersion or a non-empty version string",
                "pass rd.pin(path) for a folder of shards, or a string naming the data's version "
                "(a hash of its files, a release tag) for any other dataset",
            )
        )

    if isinstance(dataset, (ArrowShards, Mixture)):
        version = dataset.version if dataset.pinned else None
        own = None if version is None else version.hash
        if given is not None and own is not None and given != own:
            raise ConfigError(
                describe(
                    "dataset_version",
                    given,
                    f"the source's own pinned version {own}",
                    "drop dataset_version= or open the pinned data",
                )
            )
        given = given or own
    return (given, True) if given else (UNPINNED, False)
