"""GPT-NeoX final linear layer: with weight tying turned off, the output projection's class did not inherit from `torch.nn.Module`, so the `nn.Parameter` it creates is not registered with the model; the optimizer, built on the model's parameters, never updates it, and its gradient is never cleared either.

source: EleutherAI/gpt-neox#267 (https://github.com/EleutherAI/gpt-neox/pull/267), "[BUGFIX] fix final linear layer" (merged): "since the final linear layer when weight tying was turned off didn't inherit from torch.nn.module, its parameters weren't even getting registered". The reviewer (kingoflolz) asked what problems it caused; the author (sdtblck): "didn't actually see any problems caused by it but it meant we failed some unit tests". The layer's code was not read: it is written as a plain class holding an nn.Parameter and applying F.linear; the model is reduced to an embedding + MLP language model with an untied output layer, trained with AdamW on model.parameters(). The twin makes the class an nn.Module, the fix
family: orphan
shape: AdamW(lr=3e-3) on model.parameters(); vocab 32, hidden 32; 6 steps on batches of 8 sequences of 16
numeric: the output projection never moves (the twin trains it), and its .grad sums every step's gradient
watch: GG106
lint: out: whether a class registers its parameters is decided by its base class when the model is built, at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class FinalLinear:  # BUG
# FIX: class FinalLinear(torch.nn.Module):
    def __init__(self, hidden, vocab):
        super().__init__()
        self.weight = torch.nn.Parameter(0.02 * torch.randn(vocab, hidden))

    def __call__(self, h):  # BUG
        return self.forward(h)  # BUG

    def forward(self, h):
        return F.linear(h, self.weight)


class LM(torch.nn.Module):
    def __init__(self, vocab=32, hidden=32):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Embedding(vocab, hidden), torch.nn.Linear(hidden, hidden),
                                        torch.nn.GELU())
        self.final_linear = FinalLinear(hidden, vocab)

    def forward(self, tokens):
        return self.final_linear(self.body(tokens))


_gb.setup()
model = LM()
_gb.start(model.body, model.final_linear.weight)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
data = torch.randint(0, 32, (6, 8, 17))
for batch in data:
    logits = model(batch[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 32), batch[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(model.body, model.final_linear.weight)
