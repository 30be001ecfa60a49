"""The Hugging Face Trainer run of the integration tests (runs in a forked child)."""

from __future__ import annotations

import os

import resumable_data as rd
from _integ_common import StepLog, TinyModel, params_digest

BATCH, ACCUMULATION, MAX_STEPS, SAVE_STEPS = 8, 2, 30, 4  # 13 updates per epoch: 2.3 epochs


def train(data: str, out: str, log: str, kill_at: int | None = None, resume: bool = False, workers: int = 0,
          max_steps: int = MAX_STEPS, save_steps: int = SAVE_STEPS, accumulation: int = ACCUMULATION) -> str:
    from accelerate.state import AcceleratorState
    from transformers import TrainingArguments

    from resumable_data.integrations.transformers import ResumableTrainer

    AcceleratorState._reset_state(reset_partial_state=True)  # forked from a process that may hold one
    rank = int(os.environ.get("RANK", 0))
    steplog = StepLog(f"{log}.rank{rank}" if "RANK" in os.environ else log, kill_at)
    steplog.group_kill = int(os.environ.get("WORLD_SIZE", 1)) > 1
    model = TinyModel(steplog)
    args = TrainingArguments(
        output_dir=out, per_device_train_batch_size=BATCH, gradient_accumulation_steps=accumulation,
        max_steps=max_steps, save_strategy="steps", save_steps=save_steps, logging_strategy="no", report_to="none",
        disable_tqdm=True, use_cpu=True, seed=1, data_seed=2, learning_rate=0.05, dataloader_num_workers=workers)
    trainer = ResumableTrainer(model=model, args=args, train_dataset=rd.ArrowShards(data))
    trainer.train(resume_from_checkpoint=True if resume else None)
    return params_digest(model)


def train_ranks(world: int, **kwargs) -> list[str]:
    """``train`` on ``world`` forked ranks (gloo): every rank's final parameter digest."""
    from _integ_common import launch

    return launch(world, train, **kwargs)


def train_hf_dataset(out: str, log: str) -> list[str]:
    """A ``datasets.Dataset`` with a column the model does not take: the Trainer's own
    ``remove_unused_columns`` drops it, then rd reads the Arrow data (``ArrowShards.from_hf``)."""
    import datasets
    from transformers import TrainingArguments

    from resumable_data.integrations.transformers import ResumableTrainer

    ds = datasets.Dataset.from_dict({"id": list(range(40)), "x": [i / 40 for i in range(40)],
                                     "labels": [(i % 7) / 7 for i in range(40)], "text": ["unused"] * 40})
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=BATCH, max_steps=3, save_strategy="steps",
                             save_steps=3, logging_strategy="no", report_to="none", disable_tqdm=True, use_cpu=True,
                             seed=1)
    trainer = ResumableTrainer(model=TinyModel(StepLog(log)), args=args, train_dataset=ds)
    trainer.train()
    assert isinstance(trainer.rd_loader.dataset, rd.ArrowShards) and trainer.rd_loader.dataset.pinned
    return sorted(p.name for p in __import__("pathlib").Path(out, "checkpoint-3").iterdir())
