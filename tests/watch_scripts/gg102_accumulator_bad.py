"""GG102: a hand loop ported to gradguard.Accumulator with its zero_grad() left at the top of each
iteration: the clearing throws away the window's pending micro-batches (reported at the first one;
the Accumulator then refuses the window itself, before any update)."""
import torch
import torch.nn.functional as F

import gradguard as gg

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
acc = gg.Accumulator(optimizer, steps=4)
for i in range(8):
    x, y = torch.randn(4 + i, 8), torch.randn(4 + i, 1)
    optimizer.zero_grad()  # BUG: left over from the hand loop; clears the window's earlier micro-batches
    loss = F.mse_loss(model(x), y)
    acc.backward(loss, count=len(x))
    try:
        acc.step()
    except gg.GradguardError:
        pass  # the Accumulator refused the window at its end (nothing applied)
