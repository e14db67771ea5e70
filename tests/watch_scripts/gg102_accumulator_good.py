"""GG102's Accumulator twin: the clearing runs only before a window's first micro-batch, where nothing is pending."""
import torch
import torch.nn.functional as F

import gradguard as gg

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
acc = gg.Accumulator(optimizer, steps=4)
for i in range(8):
    x, y = torch.randn(4 + i, 8), torch.randn(4 + i, 1)
    if acc.micro_step == 0:
        optimizer.zero_grad()  # harmless: the Accumulator cleared after its last step already
    loss = F.mse_loss(model(x), y)
    acc.backward(loss, count=len(x))
    acc.step()
