"""An ``rd.DataLoader`` as torchtitan's data loader (torchtitan 0.3.0). NOT RUN HERE: see README.md.

torchtitan builds its loader with ``config.dataloader.build(dp_world_size=, dp_rank=, tokenizer=,
seq_len=, local_batch_size=, snapshot_every_n_steps=)`` and checkpoints its ``state_dict()`` per
data-parallel rank. This class mixes ``rd``'s :class:`TitanDataLoader` (the iteration and the
state, tested in tests/integrations/test_torchtitan.py) into torchtitan's ``BaseDataLoader``.
The data is a pinned folder of Arrow or Parquet files with a ``tokens`` list column (tokenize
once, offline; ``rd.write_arrow_shards`` then ``rd.pin``).
"""

from __future__ import annotations

from dataclasses import dataclass

from torchtitan.components.dataloader import BaseDataLoader

import resumable_data as rd
from resumable_data.integrations.torchtitan import TitanDataLoader


class RDDataLoader(TitanDataLoader, BaseDataLoader):
    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        seed: int = 0
        packing_window: int = 1024
        eos_id: int | None = None
        num_workers: int = 2

    def __init__(self, config: Config, *, dp_world_size: int, dp_rank: int, seq_len: int, local_batch_size: int,
                 **_unused) -> None:  # tokenizer=, snapshot_every_n_steps=: not needed (tokens on disk; state is a cursor)
        loader = rd.DataLoader(
            rd.ArrowShards(config.dataset_path), batch_size=local_batch_size, shuffle=True, seed=config.seed,
            drop_last=True, num_workers=config.num_workers,
            packing=rd.Packing(seq_len, "best_fit", window=config.packing_window, eos_id=config.eos_id),
            sharding=rd.Sharding(world_size=dp_world_size, rank=dp_rank))
        super().__init__(loader)

# In a torchtitan config (Python config registry of torchtitan 0.3):
#     dataloader=RDDataLoader.Config(dataset_path="/data/tokenized-pinned", seed=0)
