"""StarVLA training loop: zero_grad at the beginning of accelerator.accumulate keeps only the last micro-batch.

source: starVLA/starVLA#395 (https://github.com/starVLA/starVLA/issues/395), "[Bug] Gradient accumulation only uses the last microbatch when using Accelerate accumulation"; confirmed by the maintainer on the starVLA_dev branch
family: misplaced-clear
shape: with accelerator.accumulate(self.model): self.optimizer.zero_grad(); output = self.model(batch); accelerator.backward(output["action_loss"]); if accelerator.sync_gradients: accelerator.clip_grad_norm_(...); self.optimizer.step(); self.lr_scheduler.step()
numeric: with gradient_accumulation_steps=4, micro-batches 1-3 of each window are discarded
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
from accelerate import Accelerator

import _gb


class VLATrainer:
    def __init__(self, accelerator):
        self.accelerator = accelerator
        model = torch.nn.Sequential(torch.nn.Linear(7, 14), torch.nn.GELU(), torch.nn.Linear(14, 7))
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
        lr_scheduler = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0)
        self.model, self.optimizer, self.lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)

    def train_step(self, batch):
        with self.accelerator.accumulate(self.model):
            self.optimizer.zero_grad()  # BUG
            action_loss = ((self.model(batch["obs"]) - batch["action"]) ** 2).mean()
            self.accelerator.backward(action_loss)
            if self.accelerator.sync_gradients:
                self.accelerator.clip_grad_norm_(self.model.parameters(), 10.0)
            self.optimizer.step()
            self.lr_scheduler.step()
            # FIX: self.optimizer.zero_grad()


_gb.setup()
trainer = VLATrainer(Accelerator(gradient_accumulation_steps=4, cpu=True))
_gb.start(trainer.model)
for _ in range(8):
    trainer.train_step({"obs": torch.randn(4, 7), "action": torch.randn(4, 7)})
_gb.done(trainer.model)
