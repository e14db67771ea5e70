"""llm.c train_gpt2.py: a backward pass before the training loop deposits its gradient into the first step's.

source: karpathy/llm.c#548 (https://github.com/karpathy/llm.c/pull/548), "Fix zero grads bug": "in the training loop we first do backward and only later we do zero grad. This causes a duplicate deposit of gradients in the first training step"
family: leaked-pass
shape: logits, loss = model(x, y); loss.backward() (checked against the reference) before the loop; for step in range(num_iterations): logits, loss = model(x, y); loss.backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
numeric: the first AdamW update uses the sum of two identical gradients (Adam normalises the size, but momentum and the second moment carry the doubled first gradient)
watch: GG114
lint: GG114
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class GPT(torch.nn.Module):
    def __init__(self, vocab=32, d=16):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.lm_head = torch.nn.Linear(d, vocab)

    def forward(self, idx, targets):
        logits = self.lm_head(torch.tanh(self.wte(idx)))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


_gb.setup()
model = GPT()
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
x = torch.randint(0, 32, (4, 8))
y = x.roll(-1, dims=1)
logits, loss = model(x, y)
loss.backward()
grads_for_reference_check = [p.grad.clone() for p in model.parameters()]
# FIX: optimizer.zero_grad(set_to_none=True)
for step in range(5):
    logits, loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
_gb.done(model)
