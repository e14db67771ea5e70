"""GG113 through an engine class written in the file: the loop divides each loss by K, and the
engine's ``backward`` divides it by its own K again (DeepSpeed's ``engine.backward`` does, and a
training script that copies its bookkeeping, as SLAM-LLM's issue shows, divides once more).

Model: each backward pass of a K-pass window then carries weight 1/K², so the step applies the
window's mean gradient divided by K. The oracle is plain PyTorch in float64: the gradient in
``.grad`` just before the first step against the full-batch mean gradient of the window. The
linter must say GG113 exactly when that ratio is 1/K (K > 1); the negative controls (the loop
does not divide; the engine's backward does not divide; K = 1) must stay silent.
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg

PROGRAM = """
import torch


class Engine:
    def __init__(self, module, optimizer, accumulation):
        self.module, self.optimizer = module, optimizer
        self.accumulation = accumulation
        self.micro_steps = 0

    def __call__(self, x):
        return self.module(x)

    def backward(self, loss):
        if self.accumulation > 1:
            loss = loss / self.accumulation  # ENGINE_DIVIDES
        loss.backward()

    def step(self):
        if (self.micro_steps + 1) % self.accumulation == 0:
            HOOK(self.module)
            self.optimizer.step()
            self.optimizer.zero_grad()
        self.micro_steps += 1


accum = __K__
model = torch.nn.Linear(3, 1).double()
engine = Engine(model, torch.optim.SGD(model.parameters(), lr=0.1), accum)
data = [torch.randn(4, 3, dtype=torch.float64) for _ in range(2 * accum)]
for x in data:
    loss = engine(x).pow(2).mean()
    loss = loss / accum  # LOOP_DIVIDES
    engine.backward(loss)
    engine.step()
"""


def _program(k, loop_divides=True, engine_divides=True, rewrite=None):
    source = PROGRAM.replace("__K__", str(k))
    if not loop_divides:
        source = source.replace("    loss = loss / accum  # LOOP_DIVIDES\n", "")
    if not engine_divides:
        source = source.replace("loss = loss / self.accumulation  # ENGINE_DIVIDES", "pass")
    return rewrite(source) if rewrite else source


def _first_step_ratio(source) -> float:
    """‖.grad at the first step‖ / ‖full-batch mean gradient of the window‖ (float64, plain PyTorch)."""
    seen = []

    def hook(module):
        if not seen:
            seen.append(torch.cat([p.grad.reshape(-1).clone() for p in module.parameters()]))

    scope = {"HOOK": hook}
    torch.manual_seed(0)
    exec(compile(source, "<program>", "exec"), scope)
    model, data, k = scope["model"], scope["data"], scope["accum"]
    # the reference: the same weights before the first step (the hook fires before it), full batch
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 1).double()
    ref.load_state_dict({n: p for n, p in zip(["weight", "bias"], _initial(source, k))})
    ref.zero_grad()
    ref(torch.cat(data[:k])).pow(2).mean().backward()
    full = torch.cat([p.grad.reshape(-1) for p in ref.parameters()])
    return float(seen[0].norm() / full.norm())


def _initial(source, k):
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 1).double()
    return [m.weight.detach().clone(), m.bias.detach().clone()]


def _gg113(source) -> bool:
    return any(f.code == "GG113" for f in gg.lint_source(source.replace("HOOK(self.module)", "pass")))


@pytest.mark.parametrize("k", [2, 4, 10])
def test_a_loss_divided_before_an_engine_that_divides_again(k):
    source = _program(k)
    assert _first_step_ratio(source) == pytest.approx(1 / k, rel=1e-9)
    assert _gg113(source)


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("loop_divides,engine_divides", [(False, True), (True, False)])
def test_one_division_is_the_mean_and_stays_silent(k, loop_divides, engine_divides):
    source = _program(k, loop_divides, engine_divides)
    assert _first_step_ratio(source) == pytest.approx(1.0, rel=1e-9)
    assert not _gg113(source)


def test_a_window_of_one_stays_silent():
    source = _program(1)
    assert _first_step_ratio(source) == pytest.approx(1.0, rel=1e-9)
    assert not _gg113(source)


def _keyword_construction(source):
    return source.replace("Engine(model, torch.optim.SGD(model.parameters(), lr=0.1), accum)",
                          "Engine(optimizer=torch.optim.SGD(model.parameters(), lr=0.1), module=model, accumulation=accum)")


def _literal_everywhere(source):
    k = source.split("accum = ")[1].split("\n")[0]
    return source.replace("    loss = loss / accum", f"    loss = loss / {k}").replace(", accum)", f", {k})")


def _helper_function(source):
    # the loop's body moved into a function the loop calls
    return source.replace(
        "for x in data:\n    loss = engine(x).pow(2).mean()\n",
        "def train_step(engine, x):\n    loss = engine(x).pow(2).mean()\n").replace(
        "    engine.backward(loss)\n    engine.step()\n",
        "    engine.backward(loss)\n    engine.step()\n\n\nfor x in data:\n    train_step(engine, x)\n")


@pytest.mark.parametrize("rewrite", [_keyword_construction, _literal_everywhere, _helper_function],
                         ids=["keywords", "literals", "helper"])
@pytest.mark.parametrize("loop_divides", [True, False])
def test_rewrites_keep_the_verdict(rewrite, loop_divides):
    source = _program(4, loop_divides, rewrite=rewrite)
    assert _first_step_ratio(source) == pytest.approx(0.25 if loop_divides else 1.0, rel=1e-9)
    assert _gg113(source) == loop_divides
