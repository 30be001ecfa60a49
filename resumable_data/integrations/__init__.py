"""Integrations with the training frameworks people use (a faces-layer package, optional).

Each submodule imports its framework when it is imported, never before, and nothing in the core
imports this package:

* :mod:`resumable_data.integrations.transformers`: ``ResumableTrainer``, a Hugging Face
  ``Trainer`` whose train loader is an ``rd.DataLoader``; a resume is a seek, not a skip.
* :mod:`resumable_data.integrations.lightning`: ``ResumableDataModule``, a ``LightningDataModule``
  whose train loader's state rides in Lightning's checkpoint.
* :mod:`resumable_data.integrations.accelerate`: ``prepare_loader``, which leaves ``rd``'s own
  sharding alone and registers the loader for ``save_state``/``load_state``.
* :mod:`resumable_data.integrations.torchtitan`: ``TitanDataLoader``, a loader with torchtitan's
  data-loader interface (``__iter__`` of ``(inputs, labels)``, ``state_dict``, ``load_state_dict``).

``pip install -c constraints.txt -e ".[integrations]"`` installs the pinned frameworks. What
each integration guarantees and how it was measured is in ``docs/integrations.md``.
"""

from __future__ import annotations
