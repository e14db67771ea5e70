"""GG101 with the clearing and the step under the parts of one condition (`if a: if b: clear` ...
`if b and a: step`): the step runs only where the clearing ran, so it applies only this iteration's
gradient. Judged by running the loop in float64 against plain SGD that clears before every backward
pass; the negative control steps under `a or b`, where a path steps without clearing, and both the
linter and the numbers say so."""

from __future__ import annotations

import pytest
import torch

from _findings import codes

SAME_PARTS = """\
def train(model, data, opt, main, use_head):
    for x, y in data:
        loss = ((model(x) - y) ** 2).mean()
        if main or use_head:
            if main:
                if use_head is not None:
                    opt.zero_grad(set_to_none=True)
        loss.backward()
        if use_head is not None and main:
            opt.step()
"""

EITHER_PART = SAME_PARTS.replace("if use_head is not None and main:", "if use_head is not None or main:")


def _reference(data, lr):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in data:
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _run(source, data, lr, main, use_head):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    namespace["train"](model, data, opt, main, use_head)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(5, 3, generator=g, dtype=torch.float64), torch.randn(5, 1, generator=g, dtype=torch.float64))
            for _ in range(5)]


def test_a_step_under_the_parts_of_the_clearings_conditions_is_no_stale_step(data):
    assert "GG101" not in codes(SAME_PARTS)
    assert torch.allclose(_run(SAME_PARTS, data, 0.1, True, "head"), _reference(data, 0.1), atol=1e-12, rtol=0)


def test_a_step_under_either_part_is_stale_where_only_one_holds(data):
    assert codes(EITHER_PART).count("GG101") == 1
    # `use_head` given, `main` off: the step runs, the clearing never does
    stale = _run(EITHER_PART, data, 0.1, False, "head")
    assert not torch.allclose(stale, _reference(data, 0.1), atol=1e-6)
