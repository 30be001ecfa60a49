"""Time to the first trained step after a resume under the Hugging Face ``Trainer``, side by side.

Each measurement is ``trainer.train(...)`` up to the end of its first optimizer step (a callback
stops the run there), for the same tiny model (2 parameters' worth of layers) and the same
220,000-record dataset at batch 2 (110,000 steps per epoch, so step 10^5 lies inside the first
epoch, where the Trainer skips):

* ``fresh``: ``ResumableTrainer`` from step 0 (the bar the goal is measured against);
* ``rd``: ``ResumableTrainer`` resumed at step S (loads ``rd_loader_state.json`` and seeks);
* ``hf map``: ``transformers.Trainer`` resumed at step S over a map-style ``datasets.Dataset``
  (its default path: accelerate's ``skip_first_batches`` re-iterates the sampler S batches);
* ``hf iterable``: the same over ``Dataset.to_iterable_dataset()`` (the skipped batches are read
  and collated, then discarded).

The checkpoints at step S are made from one real checkpoint at step 1: ``trainer_state.json``'s
``global_step`` set to S, and for ``rd`` the loader state's cursor set to S (as
``bench_resume_workers.py`` does); the benchmark checks that the resumed ``rd`` run's first batch
is the plan's batch S. Rounds are interleaved; medians are reported with min and max. ``--quick``:
1 round, and ``hf iterable`` only at 10^4; otherwise 5 rounds, ``hf iterable`` in the first round
only (10 s to minutes a run). Run: ``python -m benchmarks.bench_integrations``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import torch

import resumable_data as rd
from benchmarks._common import write_results

N, BATCH = 220_000, 2
STEPS = (10_000, 100_000)


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(1, 1)

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.lin(x.float().view(-1, 1)).view(-1), labels.float())}


def _args(out: Path, max_steps: int, save: bool):
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(out), per_device_train_batch_size=BATCH, max_steps=max_steps,
                             save_strategy="steps" if save else "no", save_steps=1, logging_strategy="no",
                             report_to="none", disable_tqdm=True, use_cpu=True, seed=1, data_seed=2)


def _first_step_seconds(make_trainer, resume: str | None) -> float:
    """Seconds from ``train()`` to the end of the first optimizer step (trainer built before)."""
    from transformers import TrainerCallback

    class Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            control.should_training_stop = True
            control.should_save = False
            stop.t = time.perf_counter()

    stop = Stop()
    trainer = make_trainer()
    trainer.add_callback(stop)
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    return stop.t - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    import datasets
    import transformers

    from resumable_data.integrations._files import LOADER_STATE_FILE
    from resumable_data.integrations.transformers import ResumableTrainer

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="rd-bench-integrations-"))
    try:
        table = pa.table({"x": [(i % 997) / 997 for i in range(N)], "labels": [(i % 991) / 991 for i in range(N)]})
        rd.write_arrow_shards(table, root / "shards", num_shards=4)
        rd.pin(root / "shards")
        src = rd.ArrowShards(root / "shards")
        hf_map = datasets.Dataset.from_dict(table.to_pydict())
        hf_iter = hf_map.to_iterable_dataset()

        def rd_trainer(out: Path, max_steps: int, save: bool = False):
            return ResumableTrainer(model=Tiny(), args=_args(out, max_steps, save), train_dataset=src)

        def hf_trainer(out: Path, max_steps: int, ds, save: bool = False):
            return transformers.Trainer(model=Tiny(), args=_args(out, max_steps, save), train_dataset=ds)

        # one real checkpoint at step 1 of each kind, then copies relabelled as step S
        base = {}
        for name, make in (("rd", lambda o: rd_trainer(o, 1, True)), ("hf", lambda o: hf_trainer(o, 1, hf_map, True))):
            make(root / f"base-{name}").train()
            base[name] = root / f"base-{name}" / "checkpoint-1"
        spe = rd.DataLoader(src, batch_size=BATCH, shuffle=True, seed=2).plan.steps_per_epoch

        def at_step(name: str, step: int) -> Path:
            out = root / f"run-{name}-{step}"
            ckpt = out / f"checkpoint-{step}"
            if not ckpt.exists():
                shutil.copytree(base[name], ckpt)
                ts = json.loads((ckpt / "trainer_state.json").read_text())
                ts.update(global_step=step, max_steps=step + 1)
                (ckpt / "trainer_state.json").write_text(json.dumps(ts))
                if name == "rd":
                    s = json.loads((ckpt / LOADER_STATE_FILE).read_text())
                    s["cursor"] = {"committed": step, "delivered": step, "fetched": step}
                    s["epoch_base"] = [step // spe, (step // spe) * spe]
                    s["counters"] = dict(s["counters"], samples=step * BATCH)
                    (ckpt / LOADER_STATE_FILE).write_text(json.dumps(s))
            return out

        cases: dict[str, object] = {
            "fresh": lambda: _first_step_seconds(lambda: rd_trainer(root / "fresh", 10), None),
            "hf map/fresh": lambda: _first_step_seconds(lambda: hf_trainer(root / "fresh-hf", 10, hf_map), None)}
        for s in STEPS:
            cases[f"rd/{s}"] = lambda s=s: _first_step_seconds(
                lambda: rd_trainer(at_step("rd", s), s + 1), str(at_step("rd", s) / f"checkpoint-{s}"))
            cases[f"hf map/{s}"] = lambda s=s: _first_step_seconds(
                lambda: hf_trainer(at_step("hf", s), s + 1, hf_map), str(at_step("hf", s) / f"checkpoint-{s}"))
            if not (a.quick and s > STEPS[0]):
                cases[f"hf iterable/{s}"] = lambda s=s: _first_step_seconds(
                    lambda: hf_trainer(at_step("hf", s), s + 1, hf_iter), str(at_step("hf", s) / f"checkpoint-{s}"))

        # the rd resume lands on the plan's batch S: check it once per S
        for s in STEPS:
            t = rd_trainer(at_step("rd", s), s + 1)
            loader = t.get_train_dataloader()
            t._rd_restore(loader, str(at_step("rd", s) / f"checkpoint-{s}"), s // spe, s % spe)
            want = rd.DataLoader(src, batch_size=BATCH, shuffle=True, seed=2).step_info(s).records.tolist()
            assert loader.step_info().records.tolist() == want and loader.step_info().step == s

        rounds = 1 if a.quick else 5
        once = {f"hf iterable/{s}" for s in STEPS}  # 10 s and more a run: measured in the first round only
        runs: dict[str, list[float]] = {k: [] for k in cases}
        for r in range(rounds):
            for k, fn in cases.items():
                if r and k in once:
                    continue
                runs[k].append(fn())
                print(f"[integrations] {k}: {runs[k][-1]:.3f} s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    res = {k: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v), "runs": len(v)} for k, v in runs.items()}
    fresh = res["fresh"]["median_s"]

    def cell(k: str) -> str:
        if k not in res:
            return "not run (--quick)"
        r = res[k]
        return f"{r['median_s']:.2f} s ({r['median_s'] / fresh:.2f}x)"

    def runs_of(k: str) -> str:
        return " (1 run)" if k in res and res[k]["runs"] == 1 and rounds > 1 else ""

    lines = [f"| first trained step after `train(resume_from_checkpoint=...)` (batch {BATCH}, {N:,} records; "
             f"median of {rounds}, interleaved) | fresh start | " + " | ".join(f"resumed at step {s:,}" for s in STEPS) + " |",
             "|---" * (len(STEPS) + 2) + "|",
             f"| `ResumableTrainer` (seek) | {fresh:.2f} s (1.00x) | " + " | ".join(cell(f"rd/{s}") for s in STEPS) + " |",
             "| `transformers.Trainer`, map-style `datasets.Dataset` (skips by re-iterating the sampler) | "
             + cell("hf map/fresh") + " | " + " | ".join(cell(f"hf map/{s}") for s in STEPS) + " |",
             "| `transformers.Trainer`, `IterableDataset` (reads and discards the skipped batches) | | "
             + " | ".join(cell(f"hf iterable/{s}") + runs_of(f"hf iterable/{s}") for s in STEPS) + " |",
             "", "Ratios are to `ResumableTrainer`'s fresh start; every figure includes the Trainer's own start-up "
             "(optimizer, scheduler, accelerate), the same in every column."]
    md = "\n".join(lines)
    write_results("integrations", {"records": N, "batch_size": BATCH, "steps": list(STEPS), "results": res,
                                   "torch": torch.__version__, "transformers": transformers.__version__}, md)
    print(md)
    return res


if __name__ == "__main__":
    main()
