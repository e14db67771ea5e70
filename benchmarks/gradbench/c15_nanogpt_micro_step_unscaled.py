"""nanoGPT micro-step loop without the loss division.

source: karpathy/nanoGPT#206 (https://github.com/karpathy/nanoGPT/issues/206), "Logic Error in gradient accumulation?": train.py ran loss.backward() on each micro-step without normalizing by the number of accumulation steps (duplicate of #168; nanoGPT since scales the loss)
family: unscaled
shape: for micro_step in range(gradient_accumulation_steps): logits, loss = model(X, Y); X, Y = get_batch(); loss.backward(); then clip, step, zero_grad(set_to_none=True)
numeric: the step's gradient is gradient_accumulation_steps (4) times the mean; clipping at 1.0 then hides part of it, so the error is the clip ratio
watch: GG104
lint: GG104
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=16, d=8):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.lm_head = torch.nn.Linear(d, vocab)

    def forward(self, idx, targets):
        logits = self.lm_head(torch.tanh(self.wte(idx)))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def get_batch():
    data = torch.randint(0, 16, (4, 9))
    return data[:, :-1], data[:, 1:]


_gb.setup()
model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
_gb.start(model)
gradient_accumulation_steps, grad_clip = 4, 1.0
X, Y = get_batch()
for iter_num in range(4):
    for micro_step in range(gradient_accumulation_steps):
        logits, loss = model(X, Y)
        # FIX: loss = loss / gradient_accumulation_steps
        X, Y = get_batch()
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
_gb.done(model)
