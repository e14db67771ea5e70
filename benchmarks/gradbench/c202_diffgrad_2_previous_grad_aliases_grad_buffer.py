"""diffGrad optimizer: `step()` keeps `state['previous_grad'] = grad`, a reference to the parameter's `.grad` buffer rather than a copy, so once the next backward pass writes the new gradient into that same buffer (zeroed in place by `zero_grad()`), the "previous" gradient equals the current one, the difference is 0 and the friction coefficient is the constant sigmoid(0) = 0.5 on every step after the first.

source: shivram1987/diffGrad#2 (https://github.com/shivram1987/diffGrad/issues/2), "Previous grad is same as current grad due to call by reference.": "The previous grad is same as current grad for all optimization steps except the first step ... It can be fixed by `state['previous_grad'] = grad.clone()`". The author (shivram1987): "Thank you very much for pointing this out. I have updated the code after fixing this bug." The optimizer is written anew from the issue and the diffGrad update (Adam moments, dfc = 1 / (1 + exp(-|previous_grad - grad|)), step = lr * exp_avg * dfc / denom); the loop clears with zero_grad(set_to_none=False), the in-place zeroing that was zero_grad()'s default when the issue was written (PyTorch before 2.0); the model is an MLP regressor. The twin stores grad.clone(), the fix
family: aliased-buffer
shape: diffGrad(lr=1e-2, betas=(0.9, 0.999)) on an MLP regressor; 8 steps on batches of 16
numeric: from step 2 every friction coefficient is 0.5 instead of sigmoid(|g_t - g_{t-1}|)
watch: out: which tensors an optimizer keeps in its own state is the optimizer's code; every gradient is applied once and cleared
lint: out: a reference kept inside an optimizer's step is the optimizer's code, not the training loop's handling of the buffers
bug-step: 2
"""
import math

import torch
import torch.nn.functional as F

import _gb


class DiffGrad(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                    state["previous_grad"] = torch.zeros_like(p)
                exp_avg, exp_avg_sq, previous_grad = state["exp_avg"], state["exp_avg_sq"], state["previous_grad"]
                state["step"] += 1
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = exp_avg_sq.sqrt().add_(group["eps"])
                bias_correction1 = 1 - beta1 ** state["step"]
                bias_correction2 = 1 - beta2 ** state["step"]
                diff = (previous_grad - grad).abs()
                dfc = 1.0 / (1.0 + torch.exp(-diff))
                state["previous_grad"] = grad  # BUG
                # FIX: state["previous_grad"] = grad.clone()
                step_size = group["lr"] * math.sqrt(bias_correction2) / bias_correction1
                p.addcdiv_(exp_avg * dfc, denom, value=-step_size)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 24), torch.nn.Tanh(), torch.nn.Linear(24, 1))
_gb.start(model)
optimizer = DiffGrad(model.parameters(), lr=1e-2)
data = [(x, x[:, :1] * 2 - x[:, 1:2]) for x in (torch.randn(16, 6) for _ in range(8))]
for x, y in data:
    optimizer.zero_grad(set_to_none=False)
    F.mse_loss(model(x), y).backward()
    optimizer.step()
_gb.done(model)
