"""super-gradients SgModel: the gradients are clipped at every batch while the GradScaler's scale is still in them.

source: Deci-AI/super-gradients#653 (https://github.com/Deci-AI/super-gradients/pull/653), "Fix grad clipping stage + upscale gradients before clipping" (merged): "Clipping was done each batch- moved to being done once before gradient step. Unscale gradients before preforming gradient step"
family: clip-before-unscale
shape: backward_step(loss, epoch, batch_idx): self.scaler.scale(loss).backward(); if clip_grad_norm: torch.nn.utils.clip_grad_norm_(self.net.parameters(), clip_grad_norm) (every batch, on scaled gradients); if integrated_batches_num % batch_accumulate == 0: self.scaler.step(self.optimizer); self.scaler.update(); self.optimizer.zero_grad(). Fixed: the clip moves into the step block after self.scaler.unscale_(self.optimizer). batch_accumulate is 1 here (the default), so what changes is the clip's threshold
numeric: with the default initial scale of 65536 the gradient is clipped at 1/65536 of clip_grad_norm: the network hardly moves
watch: GG112
lint: GG112
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class SgModel:
    def __init__(self, net, clip_grad_norm=1.0, batch_accumulate=1):
        self.net, self.clip_grad_norm, self.batch_accumulate = net, clip_grad_norm, batch_accumulate
        self.optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        self.scaler = torch.amp.GradScaler("cpu")
        self.train_loader_len = 4

    def backward_step(self, loss, epoch, batch_idx):
        self.scaler.scale(loss).backward()
        if self.clip_grad_norm:  # BUG
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.clip_grad_norm)  # BUG
        integrated_batches_num = batch_idx + self.train_loader_len * epoch + 1
        if integrated_batches_num % self.batch_accumulate == 0:
            # FIX: if self.clip_grad_norm:
            # FIX:     self.scaler.unscale_(self.optimizer)
            # FIX:     torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.clip_grad_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()

    def train(self, epochs):
        for epoch in range(epochs):
            for batch_idx in range(self.train_loader_len):
                x = torch.randn(8, 10)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
                    loss = F.cross_entropy(self.net(x), (x[:, 0] > 0).long())
                self.backward_step(loss, epoch, batch_idx)


_gb.setup()
net = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
_gb.start(net)
SgModel(net).train(epochs=2)
_gb.done(net)
