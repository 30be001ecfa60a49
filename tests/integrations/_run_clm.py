"""transformers' ``examples/pytorch/language-modeling/run_clm.py``, shrunk to what matters here and
switched to rd in two lines (the import and ``ResumableTrainer``): ``load_dataset`` of a text
file, ``map`` to tokenize (dropping the text column), ``map`` to group into blocks, a GPT-2 built
from a config (dropout on), ``TrainingArguments`` with the Trainer's default flags
(``remove_unused_columns=True``: here every column but ``block_id`` is used), and
``trainer.train(resume_from_checkpoint=True)`` on every run, the first included. No tokenizer is
downloaded: characters are the tokens.

Usage: ``python _run_clm.py TEXT OUT LOG [--kill-at M] [--kill-in-save-at STEP]``. The log gets
one JSON line per trained microbatch (a digest of its input ids and of the parameters it met) and
the final parameters' digest. ``--kill-at M`` SIGKILLs at microbatch M of this process (after its
forward); ``--kill-in-save-at STEP`` SIGKILLs inside the save of ``checkpoint-STEP``, after the
model files and before the optimizer, RNG and ``trainer_state.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys

import datasets
import torch
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments, default_data_collator, set_seed

from resumable_data.integrations.transformers import ResumableTrainer

BLOCK = 16
VOCAB = 64
MAX_STEPS = 12
SAVE_STEPS = 4


def digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("text")
    p.add_argument("out")
    p.add_argument("log")
    p.add_argument("--kill-at", type=int, default=None)
    p.add_argument("--kill-in-save-at", type=int, default=None)
    a = p.parse_args(argv)
    datasets.disable_progress_bars()
    raw = datasets.load_dataset("text", data_files={"train": a.text}, cache_dir=os.path.join(a.out, "hf-cache"))

    def tokenize_function(examples):
        ids = [[ord(c) % VOCAB for c in t] for t in examples["text"]]
        return {"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]}

    tokenized = raw.map(tokenize_function, batched=True, remove_columns=["text"])

    def group_texts(examples):
        concatenated = {k: sum(examples[k], []) for k in examples}
        total = (len(concatenated["input_ids"]) // BLOCK) * BLOCK
        result = {k: [t[i:i + BLOCK] for i in range(0, total, BLOCK)] for k, t in concatenated.items()}
        result["labels"] = result["input_ids"].copy()
        result["block_id"] = list(range(len(result["labels"])))  # a column the model does not take
        return result

    lm_datasets = tokenized.map(group_texts, batched=True)
    set_seed(1)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=BLOCK, n_embd=16, n_layer=1, n_head=2,
                                       resid_pdrop=0.2, embd_pdrop=0.2, attn_pdrop=0.0))
    log = open(a.log, "a")
    seen = [0]

    def record(module, args, kwargs):
        if module.training:
            seen[0] += 1
            log.write(json.dumps({"ids": digest(kwargs["input_ids"]), "params": digest(*module.parameters())}) + "\n")
            log.flush()
            if seen[0] == a.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    model.register_forward_pre_hook(record, with_kwargs=True)
    args = TrainingArguments(output_dir=os.path.join(a.out, "run"), per_device_train_batch_size=4,
                             max_steps=MAX_STEPS, save_strategy="steps", save_steps=SAVE_STEPS,
                             logging_strategy="no", report_to="none", disable_tqdm=True, use_cpu=True, seed=1,
                             learning_rate=5e-3)
    trainer = ResumableTrainer(model=model, args=args, train_dataset=lm_datasets["train"],
                               data_collator=default_data_collator)
    if a.kill_in_save_at is not None:
        real = trainer._save_optimizer_and_scheduler

        def die_at_the_chosen_save(output_dir):
            if trainer.state.global_step == a.kill_in_save_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(output_dir)

        trainer._save_optimizer_and_scheduler = die_at_the_chosen_save
    trainer.train(resume_from_checkpoint=True)
    log.write(json.dumps({"final": digest(*model.parameters())}) + "\n")
    log.close()


if __name__ == "__main__":
    main(sys.argv[1:])
