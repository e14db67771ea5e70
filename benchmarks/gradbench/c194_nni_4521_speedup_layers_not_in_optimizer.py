"""NNI pruning then fine-tuning: `ModelSpeedup(...).speedup_model()` replaces the pruned layers with new, smaller layers (copying the unmasked weights) after the optimizer was built on the original model's parameters, so the optimizer keeps the old tensors and the fine-tuning never updates the layers the model now uses, whose gradients no `zero_grad()` clears.

source: microsoft/nni#4521 (https://github.com/microsoft/nni/issues/4521), "The parameters are not updated when the pruned model is finetuned". The maintainer (J-shang): "m_speedup.speedup_model() will replace the layers in the original model with smaller ones, then copy the weight values (un-masked part) to the smaller layers. So the parameters registered in the optimizer are outdated. You need to update the parameters in the optimizer to the new ones, an easy way is reinitializing a new optimizer." The reporter: "I solved this problem by redefining an optimizer". NNI was not read: the speed-up is written as the maintainer describes it for a three-layer MLP whose first hidden layer loses half its units (the first layer shrinks its outputs, the second its inputs; the last layer is kept). The twin builds a new optimizer after the speed-up, the maintainer's advice
family: orphan
shape: SGD(lr=0.05, momentum=0.9); MLP 20-32-32-5 pruned to 20-16-32-5; 6 fine-tuning steps on batches of 32
numeric: the two replaced layers never move (the twin trains them), and their .grad sums every step's gradient
watch: GG106
lint: out: which tensors the optimizer holds after a library replaces the model's layers is run-time state
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


def speedup_model(model, keep):
    """Replace the pruned layers with smaller ones that hold the unmasked weights."""
    old1, old2 = model[0], model[2]
    new1, new2 = torch.nn.Linear(old1.in_features, len(keep)), torch.nn.Linear(len(keep), old2.out_features)
    with torch.no_grad():
        new1.weight.copy_(old1.weight[keep])
        new1.bias.copy_(old1.bias[keep])
        new2.weight.copy_(old2.weight[:, keep])
        new2.bias.copy_(old2.bias)
    model[0], model[2] = new1, new2


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 5))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
keep = model[0].weight.norm(dim=1).argsort(descending=True)[:16].sort().values
speedup_model(model, keep)
# FIX: optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
_gb.start(model)
for step in range(6):
    x, y = torch.randn(32, 20), torch.randint(0, 5, (32,))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
_gb.done(model)
