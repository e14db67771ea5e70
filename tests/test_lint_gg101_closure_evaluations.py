"""GG101: a closure that LBFGS evaluates several times per step, with its clearing moved out of it.

``torch.optim.LBFGS.step(closure)`` calls the closure at each point it tries (up to ``max_eval`` times,
``max_iter * 5 // 4`` by default) and reads ``.grad`` after each call. A closure that back-propagates
without clearing adds each evaluation's gradient to the earlier evaluations', so every evaluation after
the first sees a sum of stale gradients (skorch's ``train_step`` clearing once before
``optimizer.step(closure)``). The programs below are run in float64 against plain PyTorch: the fixed twin
(clearing inside the closure) gives exactly the reference's weights, the bug does not; and the linter
reports the bug, whatever the closure is called, however it is written (a closure of the step's function
calling a helper, a function defined in the loop, a method, a lambda), and not its twin.

Negative controls: the same closure stepped by an optimizer that evaluates it once (SGD, Adam, LBFGS
limited to one evaluation) gives the reference's weights with the clearing outside, and is not reported.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

# skorch's split (a helper that back-propagates, the step's function clearing before the step)
HELPER = """\
import torch


def train_step_single(model, x, y):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    return loss


def train_step(model, x, y, optimizer):
    optimizer.zero_grad()  # BUG

    def step_fn():
        # FIX
        return train_step_single(model, x, y)

    return optimizer.step(step_fn)


def train(model, x, y, optimizer):
    for epoch in range(3):
        train_step(model, x, y, optimizer)
"""

# the closure defined in the loop, under another name
INLINE = """\
import torch


def train(model, x, y, optimizer):
    for epoch in range(3):
        optimizer.zero_grad()  # BUG

        def evaluate():
            # FIX
            out = ((model(x) - y) ** 2).mean()
            out.backward()
            return out

        optimizer.step(evaluate)
"""

# a method of a trainer object, handed as a bound method
METHOD = """\
import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def objective(self):
        # FIX
        value = ((self.model(self.x) - self.y) ** 2).mean()
        value.backward()
        return value

    def fit(self, x, y):
        self.x, self.y = x, y
        for epoch in range(3):
            self.optimizer.zero_grad()  # BUG
            self.optimizer.step(self.objective)


def train(model, x, y, optimizer):
    Trainer(model, optimizer).fit(x, y)
"""

# a lambda calling a module function
LAMBDA = """\
import torch


def pass_through(model, optimizer, x, y):
    # FIX
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    return loss


def train(model, x, y, optimizer):
    for epoch in range(3):
        optimizer.zero_grad()  # BUG
        optimizer.step(lambda: pass_through(model, optimizer, x, y))
"""

FORMS = {"helper": HELPER, "inline": INLINE, "method": METHOD, "lambda": LAMBDA}


def _bug(source: str, optimizer: str = "torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)") -> str:
    """The program as written, run by a main that builds ``optimizer``."""
    return "\n".join(line for line in source.splitlines() if line.strip() != "# FIX") + _main(optimizer)


def _twin(source: str, optimizer: str = "torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)") -> str:
    """The fixed twin: the clearing inside the closure, the one before the step dropped."""
    lines = []
    for line in source.splitlines():
        if line.strip() == "# FIX":
            indent = line[: len(line) - len(line.lstrip())]
            opt = "self.optimizer" if "self.model" in source and "def objective" in source else "optimizer"
            lines.append(f"{indent}{opt}.zero_grad()")
        elif not line.rstrip().endswith("# BUG"):
            lines.append(line)
    return "\n".join(lines) + _main(optimizer)


def _main(optimizer: str) -> str:
    return textwrap.dedent(f"""

        def main():
            model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
            optimizer = {optimizer}
            train(model, X, Y, optimizer)


        X = Y = None
        """)


def _run(source: str, optimizer_factory) -> torch.Tensor:
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 3, generator=g, dtype=torch.float64)
    y = x[:, :1] * 2 - x[:, 1:2] + 0.1 * torch.randn(32, 1, generator=g, dtype=torch.float64)
    namespace["train"](model, x, y, optimizer_factory(model))
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _reference(optimizer_factory) -> torch.Tensor:
    """Plain PyTorch, written independently: the closure clears, evaluates the full batch, back-propagates."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 3, generator=g, dtype=torch.float64)
    y = x[:, :1] * 2 - x[:, 1:2] + 0.1 * torch.randn(32, 1, generator=g, dtype=torch.float64)
    opt = optimizer_factory(model)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _lbfgs(model):
    return torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)


def _fixed(source: str) -> str:
    from gradguard.lint.autofix import fix_source

    return fix_source(source).text


def _gg101(source: str) -> list:
    return [c for c in codes(source) if c == "GG101"]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_closure_evaluated_several_times_without_clearing_is_reported(form):
    source = FORMS[form]
    reference = _reference(_lbfgs)
    # the truth: the bug's weights differ from the reference's, its twin's are the reference's
    assert not torch.allclose(_run(_bug(source), _lbfgs), reference, atol=1e-6)
    assert torch.allclose(_run(_twin(source), _lbfgs), reference, rtol=0, atol=1e-12)
    assert _gg101(_bug(source)) == ["GG101"], form
    assert _gg101(_twin(source)) == [], form


def test_the_finding_says_why_and_the_fix_clears_inside_the_closure():
    import gradguard as gg

    (finding,) = [f for f in gg.lint_source(_bug(HELPER)) if f.code == "GG101"]
    assert "evaluates the closure" in finding.message
    new = _fixed(_bug(HELPER))
    assert _gg101(new) == []
    # the clearing went into the closure, as the first statement of `step_fn`
    assert "def step_fn():\n        optimizer.zero_grad(set_to_none=True)\n" in new
    assert torch.allclose(_run(new, _lbfgs), _reference(_lbfgs), rtol=0, atol=1e-12)


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("optimizer", [
    "torch.optim.SGD(model.parameters(), lr=0.1)",
    "torch.optim.Adam(model.parameters(), lr=0.01)",
    "torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=1)",
    "torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5, max_eval=1)",
])
def test_negative_control_a_closure_evaluated_once_is_not_reported(form, optimizer):
    factory = eval("lambda model: " + optimizer)
    # the truth: evaluated once per step, the clearing before the step is enough
    assert torch.allclose(_run(_bug(FORMS[form], optimizer), factory), _reference(factory), rtol=0, atol=1e-12)
    assert _gg101(_bug(FORMS[form], optimizer)) == []


def test_negative_control_an_optimizer_of_unknown_settings_is_not_claimed():
    source = _bug(INLINE, "torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=ITERS)")
    assert _gg101(source) == []


# a closure defined at the top level of the file, handed by name: the loop reaches its backward pass only
# through the step (no clearing anywhere, and an optimizer that evaluates it once)
TOP_LEVEL = """\
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
x = torch.randn(32, 3, generator=g, dtype=torch.float64)
y = x[:, :1] * 2 - x[:, 1:2] + 0.1 * torch.randn(32, 1, generator=g, dtype=torch.float64)


def closure():
    # FIX
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    return loss


for epoch in range(3):
    optimizer.step(closure)
"""


def test_a_top_level_closure_handed_by_name_is_followed():
    bug = "\n".join(line for line in TOP_LEVEL.splitlines() if line.strip() != "# FIX")
    twin = TOP_LEVEL.replace("# FIX", "optimizer.zero_grad()")
    weights = {}
    for name, source in (("bug", bug), ("twin", twin)):
        namespace = {}
        exec(compile(source, "<train>", "exec"), namespace)
        weights[name] = torch.cat([p.detach().flatten() for p in namespace["model"].parameters()])
    reference = _reference(lambda model: torch.optim.SGD(model.parameters(), lr=0.1))
    assert torch.allclose(weights["twin"], reference, rtol=0, atol=1e-12)
    assert not torch.allclose(weights["bug"], reference, atol=1e-6)
    assert _gg101(bug) == ["GG101"]
    assert _gg101(twin) == []


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_fix_clears_at_the_top_of_the_closure_and_gives_the_reference(form):
    bug = _bug(FORMS[form])
    new = _fixed(bug)
    if form == "lambda":  # no statement to put a clearing in: no fix offered, the code is left as it is
        assert new == bug
        return
    assert _gg101(new) == []
    assert torch.allclose(_run(new, _lbfgs), _reference(_lbfgs), rtol=0, atol=1e-12)
