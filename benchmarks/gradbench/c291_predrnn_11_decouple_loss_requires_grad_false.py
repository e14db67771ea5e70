"""PredRNN-V2's memory decoupling loss: the per-layer cosine-similarity terms are collected in a list and turned into the loss through a new tensor built from their values, which does not require grad, so the decoupling loss is added to the training loss but sends no gradient to the adapters it should decouple.

source: thuml/predrnn-pytorch#11 (https://github.com/thuml/predrnn-pytorch/issues/11), "question about decouple loss": "the requires_grad of decouple loss is False! Does this mean that decouple loss does not play any role in backpropagation?"; the author: "Sorry, this is a typo when I reorganize the code. This can be fixed by only changing one line code: change 'predrnn_memory_decoupling.py' line 113 to 'decouple_loss = torch.mean(torch.stack(decouple_loss, dim=0))'". The buggy line itself was not read; it is written as a tensor rebuilt from the terms' values, which has the reported effect (requires_grad False). The model is reduced to two recurrent layers whose memory updates pass through 1x1 "adapter" linears (delta_c, delta_m), the decoupling term is the mean absolute cosine similarity between them, beta 0.1; the frame loss is MSE. The twin stacks the terms, the author's fix
family: detached-loss
shape: Adam(lr=1e-3), 2 layers of 16 units, sequences of 4 frames of 8 features, batch 8, 4 iterations
numeric: the bug's updates lack the decoupling term's gradient (the adapters are trained by the frame loss only)
watch: out: a loss term that never reaches a parameter leaves no gradient to check; every gradient present is applied once and cleared
lint: GG203
scope-history: lint declared out when the case was written ("which tensors the loss is built from (a tensor rebuilt from values) is the loss's definition, not the gradient buffer's handling"); re-declared GG203 after the rule was written from this family's cases (in-sample from then on)
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Cell(torch.nn.Module):
    def __init__(self, n_in, n):
        super().__init__()
        self.c = torch.nn.Linear(n_in + n, n)
        self.m = torch.nn.Linear(n_in + n, n)
        self.adapter = torch.nn.Linear(n, n, bias=False)

    def forward(self, x, h):
        z = torch.cat([x, h], 1)
        delta_c, delta_m = torch.tanh(self.c(z)), torch.tanh(self.m(z))
        return h + delta_c + delta_m, self.adapter(delta_c), self.adapter(delta_m)


class PredRNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cells = torch.nn.ModuleList([Cell(8, 16), Cell(16, 16)])
        self.out = torch.nn.Linear(16, 8)

    def forward(self, frames):
        hs = [torch.zeros(frames.size(0), 16, dtype=frames.dtype) for _ in self.cells]
        preds, decouple_loss = [], []
        for t in range(frames.size(1) - 1):
            x = frames[:, t]
            for i, cell in enumerate(self.cells):
                hs[i], dc, dm = cell(x, hs[i])
                decouple_loss.append(F.cosine_similarity(dc, dm, dim=1).abs().mean())
                x = hs[i]
            preds.append(self.out(x))
        decouple_loss = torch.mean(torch.tensor([d.item() for d in decouple_loss], dtype=frames.dtype))  # BUG
        # FIX: decouple_loss = torch.mean(torch.stack(decouple_loss, dim=0))
        return torch.stack(preds, 1), decouple_loss


_gb.setup()
model = PredRNN()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for it in range(4):
    frames = torch.randn(8, 4, 8)
    next_frames, decouple_loss = model(frames)
    loss = F.mse_loss(next_frames, frames[:, 1:]) + 0.1 * decouple_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(model)
