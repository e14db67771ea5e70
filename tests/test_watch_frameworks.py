"""Zero findings inside the training loops of HF Accelerate, PyTorch Lightning and the HF Trainer (SPEC §2).

Each framework runs a tiny model with gradient accumulation under
``watch(mode="raise")``; beside each clean run, a one-line mutation of the same
run must be caught, so that a watch blind to the framework cannot pass.
"""

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradguard as gg

pytestmark = pytest.mark.slow


def _data(n=10, size=4):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(size, 4, generator=g), torch.randn(size, 1, generator=g)) for _ in range(n)]


@pytest.mark.parametrize("zero_grad, expected", [(True, []), (False, ["GG101"])])
def test_accelerate_accumulate_is_clean(zero_grad, expected):
    accelerate = pytest.importorskip("accelerate")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=4)
    accelerator = accelerate.Accelerator(gradient_accumulation_steps=4, cpu=True)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    with gg.watch(mode="record") as w:
        for _ in range(2):
            for x, y in loader:
                with accelerator.accumulate(model):
                    loss = F.mse_loss(model(x), y)
                    accelerator.backward(loss)
                    if accelerator.sync_gradients:  # Accelerate clips whenever called: once per window, as its docs do
                        accelerator.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    if zero_grad:
                        opt.zero_grad()
    assert [f.code for f in w.findings] == expected


@pytest.mark.parametrize("zero_grad, expected", [(True, []), (False, ["GG101"])])
def test_lightning_trainer_is_clean(tmp_path, zero_grad, expected):
    L = pytest.importorskip("lightning.pytorch")

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
            if zero_grad:
                optimizer.zero_grad()

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=4)
    trainer = L.Trainer(
        max_epochs=2, accumulate_grad_batches=4, gradient_clip_val=1.0, accelerator="cpu", devices=1,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    with gg.watch(mode="record") as w:
        trainer.fit(Module(), loader)
    assert [f.code for f in w.findings] == expected


@pytest.mark.parametrize("whole_model, expected", [(True, []), (False, ["GG106"])])
def test_hf_trainer_is_clean(tmp_path, whole_model, expected):
    transformers = pytest.importorskip("transformers")

    class Regressor(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

        def forward(self, x, labels=None):
            out = self.net(x)
            return {"loss": F.mse_loss(out, labels), "logits": out}

    data = [{"x": torch.randn(4), "labels": torch.randn(1)} for _ in range(40)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=4, num_train_epochs=2,
        report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0,
    )
    model = Regressor()
    # The mutation: a hand-built optimizer that leaves the last layer out.
    optimizers = (None, None) if whole_model else (torch.optim.AdamW(model.net[0].parameters(), lr=1e-3), None)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, optimizers=optimizers)
    with gg.watch(mode="record") as w:
        trainer.train()
    assert [f.code for f in w.findings] == expected


def _data_xy(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


# ---------------------------------------------------------------- Lightning
def _lightning_fit(tmp_path, accum: int, clip: bool, n: int):
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
    x, y = _data_xy(n)
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
def test_hf_trainer_gpt2_token_loss_is_clean(tmp_path, accum):
    assert _hf_trainer(tmp_path, accum) == []
