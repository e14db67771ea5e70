"""neural-network-lyapunov: the training loop stores each loss tensor returned by the optimizer step in a list.

source: StanfordASL/neural-network-lyapunov#140 (https://github.com/StanfordASL/neural-network-lyapunov/pull/140), "Fix the memory leak when calling line search sd for training Lyapunov." (merged): "closure should return only loss, and losses list only stores the float value, not the tensor"
family: graph-logging
shape: def closure(): optimizer.zero_grad(); loss = total_loss(...); loss.backward(); return loss; for iter_count in range(max_iterations): loss = optimizer.step(closure) (a line-search optimizer calling the closure several times); losses.append(loss). Fixed: losses.append(loss.item()). torch.optim.LBFGS with line_search_fn="strong_wolfe" stands for the line-search optimizer
numeric: the list keeps one loss graph per iteration alive for the whole training
watch: out: a logging list holds graph nodes, not gradient; the watch follows .grad
lint: out: the loss is kept by a list append, not an arithmetic sum (the rule looks for sums)
bug-step: end
"""
import torch

import _gb

_gb.setup()
lyapunov = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
_gb.start(lyapunov)
optimizer = torch.optim.LBFGS(lyapunov.parameters(), lr=0.5, max_iter=4, line_search_fn="strong_wolfe")
x = torch.randn(32, 2)
x_next = 0.9 * x


def total_loss():
    v, v_next = lyapunov(x), lyapunov(x_next)
    positivity = torch.relu(0.1 * x.norm(dim=1, keepdim=True) - v).mean()
    derivative = torch.relu(v_next - v + 0.05 * x.norm(dim=1, keepdim=True)).mean()
    return positivity + derivative


def closure():
    optimizer.zero_grad()
    loss = total_loss()
    loss.backward()
    return loss


losses = []
for iter_count in range(6):
    loss = optimizer.step(closure)
    losses.append(loss)  # BUG
    # FIX: losses.append(loss.item())
_gb.done(lyapunov, kept=[t for t in losses if isinstance(t, torch.Tensor)])
