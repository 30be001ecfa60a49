"""``prepare_loader``: an ``rd.DataLoader`` under Hugging Face ``accelerate``, checkpointed as JSON.

What ``accelerator.prepare`` does with it. ``prepare`` wraps only ``torch.utils.data.DataLoader``
instances (in its ``DataLoaderShard``/``DataLoaderDispatcher``); an ``rd.DataLoader`` is not one,
so ``prepare(model, optimizer, loader)`` returns the loader unchanged and ``rd``'s own sharding
(over the process group accelerate set up) stays intact. Batches stay on the CPU: move them with
``.to(accelerator.device)`` (accelerate's own loaders do that for you).

Algorithm. :func:`prepare_loader` checks that the loader shards over the accelerator's processes
(``world_size == num_processes``, ``rank == process_index``; a loader built before the process
group existed would read every record on every rank) and registers two accelerate hooks: before
``save_state(dir)`` the main process writes ``dir/rd_loader_state.json``; before
``load_state(dir)`` every process reads it and seeks. The state is JSON read with ``json``; it is
never unpickled (``register_for_checkpointing(loader)`` works too, since the loader has
``state_dict``/``load_state_dict``, but accelerate reads those files back through ``torch.load`` with
unpickling allowed).

Guarantee. ``save_state``/``load_state`` at an optimizer step resume the stream exactly: the
same batches on every rank as a run that never stopped (accelerate restores the RNG states).

Cost. A few hundred bytes written per ``save_state``; a seek per ``load_state``.
"""

from __future__ import annotations

from typing import Any

from resumable_data.errors import ConfigError, describe
from resumable_data.integrations._files import read_loader_state, write_loader_state
from resumable_data.loader import DataLoader

__all__ = ["prepare_loader"]


def prepare_loader(accelerator: Any, loader: DataLoader) -> DataLoader:
    """Check ``loader``'s sharding against ``accelerator`` and save/load its state with
    ``accelerator.save_state``/``load_state`` (as ``rd_loader_state.json``); returns ``loader``."""
    if not isinstance(loader, DataLoader):
        raise ConfigError(describe("loader", type(loader).__name__, "an rd.DataLoader",
                                   "pass the rd.DataLoader itself (not one accelerator.prepare wrapped)"))
    s = loader.sharding
    if (s.world_size, s.rank) != (accelerator.num_processes, accelerator.process_index):
        raise ConfigError(describe(
            "loader.sharding", f"world_size={s.world_size}, rank={s.rank}", f"world_size={accelerator.num_processes}, "
            f"rank={accelerator.process_index} (the accelerator's processes)", "build the rd.DataLoader after "
            "Accelerator() (which sets up the process group), or pass sharding=rd.Sharding(...) to match"))

    def save(models: Any, weights: Any, output_dir: str) -> None:
        state = loader.state_dict()  # every process (commits delivered batches); identical on all
        if accelerator.is_main_process:
            write_loader_state(output_dir, state)

    def load(models: Any, input_dir: str) -> None:
        loader.load_state_dict(read_loader_state(input_dir))

    accelerator.register_save_state_pre_hook(save)
    accelerator.register_load_state_pre_hook(load)
    return loader
