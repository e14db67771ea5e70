"""An optimizer class that steps an optimizer of its own, which its ``zero_grad`` never clears (KempnerForge's
Muon: the non-matrix parameters go to an inner ``AdamW`` built in ``__init__`` and stepped in ``step()``, while
``super().__init__`` registers only the matrix half, so the inherited ``zero_grad`` leaves the inner half's
gradients summing over every step). The linter reports GG101 at the loop's step.

Oracle: plain PyTorch in float64, the same split update from freshly cleared gradients at every step. A
program the linter reports must differ from it; a program it leaves alone must match it. Forms: the inner
optimizer under another attribute name and built from a helper's split, a ``while`` loop in a function;
negative controls: a ``zero_grad`` that also clears the inner optimizer, the loop clearing the model, and
the inner optimizer not stepped by the class.
"""

import textwrap

import pytest
import torch

import gradguard as gg

PRELUDE = """
import torch
import torch.nn.functional as F
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3)).double()
g = torch.Generator().manual_seed(4)
data = [(torch.randn(10, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (10,), generator=g)) for _ in range(4)]
"""

SPLIT = """
class Split(torch.optim.Optimizer):
    def __init__(self, params, lr=0.05):
        params = list(params)
        mats = [p for p in params if p.ndim == 2]
        rest = [p for p in params if p.ndim != 2]
        super().__init__(mats, dict(lr=lr))
        self.{attr} = torch.optim.SGD(rest, lr=0.1, momentum=0.9)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])
        self.{attr}.{inner_call}()
{extra}
"""

LOOP = """
optimizer = Split(model.parameters())
for x, y in data:
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
"""

# name -> (GG101 expected, inner stepped, program after the prelude)
PROGRAMS = {
    "muon_like": (True, True, SPLIT.format(attr="_adam", inner_call="step", extra="") + LOOP),
    "renamed_while_in_a_function": (True, True, SPLIT.format(attr="fallback", inner_call="step", extra="") + """
def fit(net, batches):
    opt = Split(net.parameters())
    i = 0
    while i < len(batches):
        inputs, labels = batches[i]
        opt.zero_grad()
        loss = F.cross_entropy(net(inputs), labels)
        loss.backward()
        opt.step()
        i += 1

fit(model, data)
"""),
    "zero_grad_delegates": (False, True, SPLIT.format(attr="_adam", inner_call="step", extra='''
    def zero_grad(self, set_to_none=True):
        super().zero_grad(set_to_none=set_to_none)
        self._adam.zero_grad(set_to_none=set_to_none)
''') + LOOP),
    "loop_clears_the_model": (False, True, SPLIT.format(attr="_adam", inner_call="step", extra="") + """
optimizer = Split(model.parameters())
for x, y in data:
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
"""),
}


def _reference(inner_steps: bool) -> list:
    """Plain PyTorch: every step from fresh gradients; plain SGD on the matrices, SGD with momentum on the rest."""
    ns: dict = {}
    exec(PRELUDE, ns)
    model, data = ns["model"], ns["data"]
    rest = torch.optim.SGD([p for p in model.parameters() if p.ndim != 2], lr=0.1, momentum=0.9)
    for x, y in data:
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                if p.ndim == 2:
                    p.add_(p.grad, alpha=-0.05)
        if inner_steps:
            rest.step()
    return [p.detach().clone() for p in model.parameters()]


def _run(body: str) -> list:
    ns: dict = {}
    exec(compile(PRELUDE + textwrap.dedent(body), "<inner>", "exec"), ns)
    return [p.detach().clone() for p in ns["model"].parameters()]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_form_against_fresh_gradients_every_step(name):
    reported, inner_steps, body = PROGRAMS[name]
    gap = max(float((a - b).abs().max()) for a, b in zip(_run(body), _reference(inner_steps)))
    codes = [f.code for f in gg.lint_source(PRELUDE + textwrap.dedent(body), "train.py")]
    if reported:
        assert gap > 1e-3, f"{name}: the inner optimizer's summed gradients must change the updates"
        assert codes == ["GG101"], (name, codes)
    else:
        assert gap < 1e-12, name
        assert codes == [], (name, codes)


def test_an_inner_optimizer_the_class_never_steps_is_not_reported():
    body = SPLIT.format(attr="_adam", inner_call="zero_grad", extra="") + LOOP
    assert [f.code for f in gg.lint_source(PRELUDE + textwrap.dedent(body), "train.py")] == []
