"""mmcv's GradientCumulativeOptimizerHook when training is resumed: the hook counts `residual_iters = max_iters - iter` from the resume point and splits it into `divisible_iters` and `remainder_iters`, but then compares the absolute `runner.iter` with `divisible_iters`, so from that iteration on (long before the real remainder) the loss is divided by `remainder_iters` (1) instead of `cumulative_iters`: every later window's gradient is the sum of its micro-batches, not their mean.

source: open-mmlab/mmcv#2083 (https://github.com/open-mmlab/mmcv/issues/2083), "nan or wrong loss by simultaneous use of GradientCumulativeOptimizerHook and resume", bug case 2: "self.cumulative_iters = 2, runner.max_iters = 10001, runner.iter = 3000 (resume from 3k iteration) ... residual_iters = 7001, self.divisible_iters = 7000, self.remainder_iters = 1. Wrong loss_factor = 1 and loss after 7k iteration. This bug case silently causes wrong results." A maintainer (HAOCHENYE): "Thanks for your feedback, this is actually" a bug; fixed by #2093 (merged). The hook is written from the issue's quoted logic and the proposed fix; the runner is reduced to a loop resumed at iteration 10 of 23 (so the wrong factor starts at iteration 12), the detector to an MLP; SGD with momentum as in mmdetection configs. The twin uses the issue's fix, `iter < max_iters - remainder_iters`
family: overscaled
shape: SGD(lr=0.02, momentum=0.9), cumulative_iters = 2, resumed at iteration 10 of max_iters 23; batches of 8
numeric: the windows from iteration 12 to 21 apply twice the mean gradient
watch: GG104
lint: out: the loss factor is computed at run time from the resume iteration and max_iters
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb

cumulative_iters, max_iters, resume_iter = 2, 23, 10
_gb.setup()
batches = {it: (torch.randn(8, 10), torch.randn(8, 1)) for it in range(resume_iter, max_iters)}
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

residual_iters = max_iters - resume_iter
divisible_iters = residual_iters // cumulative_iters * cumulative_iters
remainder_iters = residual_iters - divisible_iters
for it in range(resume_iter, max_iters):
    x, y = batches[it]
    loss = F.mse_loss(model(x), y)
    if it < divisible_iters:  # BUG
    # FIX: if it < max_iters - remainder_iters:
        loss_factor = cumulative_iters
    else:
        loss_factor = remainder_iters
    (loss / loss_factor).backward()
    if (it + 1) % cumulative_iters == 0 or it + 1 == max_iters:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
