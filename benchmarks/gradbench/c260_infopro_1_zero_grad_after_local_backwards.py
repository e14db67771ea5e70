"""InfoPro (locally supervised learning) under an mmcv-style runner: every local module runs its own loss's backward inside the model's forward, so a runner that clears the gradients after the forward (`after_train_iter`: zero_grad, backward of the returned loss, step) deletes the gradients of every local module but the last, and only the last module is trained.

source: blackfeather-wang/InfoPro-Pytorch#1 (https://github.com/blackfeather-wang/InfoPro-Pytorch/issues/1), "why zero_grad() before train iter": a user ported InfoPro to a UNet without moving runner.optimizer.zero_grad() from after_train_iter to before_train_iter; the author: "in the forward() function, we iteratively execute the feed-forward and the back-propogation process of each local module. If runner.optimizer.zero_grad() is placed in after_train_iter, the gradients of all local modules except for the last one will be deleted. In other words, **only the last module will be trained**." mmcv's OptimizerHook is reduced to zero_grad, backward, step after the forward; the segmentation network to three local MLP blocks with auxiliary heads. The twin clears before the forward (before_train_iter), the author's change
family: misplaced-clear
shape: SGD(lr=0.05), 3 local blocks, each with an auxiliary head whose loss is backpropagated inside forward (the input of the next block detached), 4 iterations
numeric: the first two blocks (and their heads) keep their initial values in the bug
watch: GG102
lint: out: the backward passes run inside the model's forward, which the linter does not follow into
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class LocallySupervised(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()) for _ in range(3)])
        self.aux = torch.nn.ModuleList([torch.nn.Linear(8, 2) for _ in range(3)])

    def forward(self, x, y):
        for k, (block, aux) in enumerate(zip(self.blocks, self.aux)):
            x = block(x)
            loss = F.cross_entropy(aux(x), y)
            if k < len(self.blocks) - 1:
                loss.backward()
                x = x.detach()
        return loss


_gb.setup()
model = LocallySupervised()
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for it in range(4):
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    # FIX: optimizer.zero_grad()
    loss = model(x, y)
    optimizer.zero_grad()  # BUG
    loss.backward()
    optimizer.step()
_gb.done(model)
