"""Tiny token data and Trainer arguments shared by the HF Trainer cases (no download)."""
import atexit
import shutil
import tempfile

import torch
from transformers import TrainingArguments


def token_dataset(lengths, vocab=32, width=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for n in lengths:
        ids = torch.randint(1, vocab, (width,), generator=g)
        ids[n:] = 0
        labels = ids.clone()
        labels[n:] = -100
        rows.append({"input_ids": ids, "labels": labels})
    return rows


def _scratch(prefix: str) -> str:
    """A folder for the Trainer's output, removed when the case's process ends."""
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def args(**overrides):
    kw = dict(output_dir=_scratch("gradbench-"), per_device_train_batch_size=2,
              gradient_accumulation_steps=2, max_steps=3, learning_rate=0.1, optim="sgd",
              lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=0.0,
              logging_strategy="no", save_strategy="no", report_to=[], use_cpu=True, seed=0,
              dataloader_num_workers=0, disable_tqdm=True)
    kw.update(overrides)
    return TrainingArguments(**kw)
