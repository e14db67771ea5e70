"""Zero findings inside the real training loops of HF Accelerate, PyTorch Lightning and the HF Trainer.

Each test runs the framework's own loop (not a mock) under ``gradguard.watch`` and
expects no finding; beside it, a negative control shows that the watch is really
looking: the same set-up with a planted bug is reported.
"""

import logging
import os

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import gradguard as gg

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _data(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


# --------------------------------------------------------------- Accelerate
accelerate = pytest.importorskip("accelerate")


def _accelerate_loop(accum: int, planted_bug: bool):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    # Accelerate keeps process-wide singletons; start each test from a clean slate.
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    accelerator = Accelerator(gradient_accumulation_steps=accum, cpu=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = _data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    with gg.watch(mode="record") as w:
        for xb, yb in loader:
            with accelerator.accumulate(model):
                accelerator.backward(F.cross_entropy(model(xb), yb))
                opt.step()
                if not planted_bug:
                    opt.zero_grad()
    return w.findings


def test_accelerate_accumulate_loop_has_no_findings():
    assert _accelerate_loop(accum=2, planted_bug=False) == []


def test_accelerate_loop_without_zero_grad_is_caught():
    codes = {f.code for f in _accelerate_loop(accum=1, planted_bug=True)}
    assert "GG101" in codes


# ---------------------------------------------------------------- Lightning
def _lightning_fit(tmp_path, accum: int, clip: bool, n: int = 24):
    L = pytest.importorskip("lightning.pytorch")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))

        def training_step(self, batch, batch_idx):
            xb, yb = batch
            return F.cross_entropy(self.net(xb), yb)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    torch.manual_seed(0)
    x, y = _data(n)  # 24: 6 batches of 4, so a partial final window at accum=4
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    trainer = L.Trainer(
        max_epochs=2, accelerator="cpu", devices=1, accumulate_grad_batches=accum,
        gradient_clip_val=1.0 if clip else None, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
    )
    module = Module()
    with gg.watch(mode="record") as w:
        trainer.fit(module, loader)
    return w.findings


@pytest.mark.parametrize("accum, clip", [(1, False), (4, True)])
def test_lightning_trainer_fit_has_no_findings(tmp_path, accum, clip):
    assert _lightning_fit(tmp_path, accum, clip) == []


def test_lightning_mean_of_unequal_batches_is_flagged(tmp_path):
    """22 examples: the last batch has 2, yet Lightning divides every batch's mean by 4 alike.

    That is the mean of means this project exists to fix, so GG105 here is a true positive.
    """
    codes = {f.code for f in _lightning_fit(tmp_path, 4, False, n=22)}
    assert codes == {"GG105"}


# -------------------------------------------------------------- HF Trainer
def _hf_trainer(tmp_path, accum: int):
    transformers = pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=40, n_positions=16, n_embd=16, n_layer=1, n_head=2))
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(10):
        ids = torch.randint(0, 40, (12,), generator=g)
        labels = ids.clone()
        labels[: i % 5] = -100
        rows.append({"input_ids": ids, "labels": labels})
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, gradient_accumulation_steps=accum,
        num_train_epochs=1, learning_rate=1e-3, report_to=[], save_strategy="no", logging_strategy="no",
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, max_grad_norm=1.0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    with gg.watch(mode="record") as w:
        trainer.train()
    return w.findings


@pytest.mark.parametrize("accum", [1, 2])
def test_hf_trainer_train_has_no_findings(tmp_path, accum):
    assert _hf_trainer(tmp_path, accum) == []
