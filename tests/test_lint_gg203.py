"""GG203 detached-loss-term: a term added into the loss that a backward pass differentiates, cut from the graph.

Each program is run (float64, plain PyTorch, no gradguard) and its gradient compared with two references: the
gradient of the loss without the cut term, and the gradient of the loss with the term kept attached. The linter
must report GG203 exactly where the run shows the term changes no gradient while the attached term would; the
same programs with the names changed and the term moved into a helper function read the same (nothing is decided
by a name), and the negative controls (a term whose cut is deliberate or that carries a graph) stay silent.
"""

from __future__ import annotations

import ast
import textwrap

import pytest
import torch

import gradguard as gg
from gradguard.lint._graph_value import graph_free

# {cut}: how the attention term is added; `run` returns the parameters' gradient after one backward pass.
DISTILL = """\
import torch
import torch.nn.functional as F


def at_loss(s, t):
    return (F.normalize(s.pow(2), dim=1) - F.normalize(t.pow(2), dim=1)).pow(2).mean()


def run(student, teacher, x, y, with_term=True):
    betas = (500.0, 1000.0)
    *feats, logits = student(x)
    with torch.no_grad():
        *feats_t, _ = teacher(x)
    terms = [{term} for b, s, t in zip(betas, feats, feats_t)]
    loss = F.cross_entropy(logits, y) + (sum(terms) if with_term else 0.0)
    student.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in student.parameters()]
"""

ITEM = """\
import torch
import torch.nn.functional as F


def run(student, teacher, x, y, with_term=True):
    *feats, logits = student(x)
    adv = F.mse_loss(feats[0], torch.zeros_like(feats[0]))
    adv = {term}
    loss = F.cross_entropy(logits, y) + (0.01 * adv if with_term else 0.0)
    student.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in student.parameters()]
"""

# the term computed by a helper of the file, its names changed
HELPER = """\
import torch
import torch.nn.functional as F


def side_objective(first, second):
    return {term}


def run(net, frozen, inputs, labels, with_term=True):
    *hidden, scores = net(inputs)
    with torch.no_grad():
        *hidden_f, _ = frozen(inputs)
    objective = F.cross_entropy(scores, labels)
    if with_term:
        objective = objective + 3.0 * side_objective(hidden[0], hidden_f[0])
    net.zero_grad()
    objective.backward()
    return [p.grad.clone() for p in net.parameters()]
"""

CASES = [
    # (program, the term as cut, the term attached)
    ("distill-detach", DISTILL, "b * at_loss(s, t).detach()", "b * at_loss(s, t)"),
    ("distill-data", DISTILL, "b * at_loss(s, t).data", "b * at_loss(s, t)"),
    ("distill-rebuilt", DISTILL, "b * torch.tensor(at_loss(s, t).item(), dtype=s.dtype)", "b * at_loss(s, t)"),
    ("item", ITEM, "adv.item()", "adv"),
    ("float", ITEM, "float(adv)", "adv"),
    ("helper-renamed", HELPER, "(first - second).pow(2).mean().detach()", "(first - second).pow(2).mean()"),
]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 8)
        self.b = torch.nn.Linear(8, 8)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, x):
        h1 = torch.tanh(self.a(x))
        h2 = torch.tanh(self.b(h1))
        return h1, h2, self.fc(h2)


def _grads(source: str, with_term: bool):
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    torch.manual_seed(0)
    student, teacher = Net().double(), Net().double()
    x, y = torch.randn(5, 6, dtype=torch.float64), torch.randint(0, 3, (5,))
    return scope["run"](student, teacher, x, y, with_term=with_term)


def _lint(source: str):
    return [f.code for f in gg.lint_source(source, "train.py")]


@pytest.mark.parametrize("name,program,cut,attached", CASES, ids=[c[0] for c in CASES])
def test_a_cut_term_changes_no_gradient_and_is_reported(name, program, cut, attached):
    bad, fixed = program.format(term=cut), program.format(term=attached)
    without = _grads(bad, with_term=False)
    with_cut = _grads(bad, with_term=True)
    with_attached = _grads(fixed, with_term=True)
    # the reference: the cut term leaves every gradient exactly as the loss without it gives it
    assert all(torch.equal(a, b) for a, b in zip(with_cut, without)), name
    # ... while the attached term changes them (the term is not a no-op by construction)
    assert any((a - b).abs().max() > 1e-8 for a, b in zip(with_attached, without)), name
    assert _lint(bad) == ["GG203"], name
    assert _lint(fixed) == [], name


CONTROLS = {
    # the cut value only logged
    "logged": "    logged = loss.detach().item()\n",
    # a straight-through estimator: the cut term corrects the value of a term that keeps its graph
    "straight-through": "    st = logits + (logits.argmax(-1, keepdim=True).double() - logits).detach()\n"
                        "    loss = loss + st.pow(2).mean()\n",
    # what is subtracted is left out (a value correction)
    "subtracted": "    loss = loss - loss.detach() + loss.detach().clamp(max=1.0)\n",
    # a detached target inside a term that keeps the graph
    "target": "    loss = loss + F.mse_loss(logits, logits.detach() * 0.5)\n",
    # a weight read as a number multiplies a term that keeps the graph
    "weight": "    loss = loss + (loss.item() / 10.0) * logits.pow(2).mean()\n",
    # a constant and a value computed without gradients: no cut of a graph value
    "constant": "    with torch.no_grad():\n        base = logits.mean()\n    loss = loss + base + torch.tensor(0.5)\n",
}

CONTROL = """\
import torch
import torch.nn.functional as F


def run(net, x, y):
    *_, logits = net(x)
    loss = F.cross_entropy(logits, y)
{extra}    net.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in net.parameters()]
"""


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_negative_controls_are_silent(name):
    source = CONTROL.format(extra=CONTROLS[name])
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    torch.manual_seed(0)
    scope["run"](Net().double(), torch.randn(5, 6, dtype=torch.float64), torch.randint(0, 3, (5,)))  # it runs
    assert _lint(source) == [], name


def test_a_model_objects_forward_is_followed_for_a_rebuilt_term():
    source = textwrap.dedent("""\
        import torch
        import torch.nn.functional as F


        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.cell = torch.nn.Linear(4, 4)

            def forward(self, x):
                parts = []
                for _ in range(3):
                    x = torch.tanh(self.cell(x))
                    parts.append(x.pow(2).mean())
                return x, torch.mean(torch.tensor([p.item() for p in parts]))


        model = Model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            out, aux = model(torch.randn(2, 4))
            loss = out.pow(2).mean() + 0.1 * aux
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """)
    assert _lint(source) == ["GG203"]
    fixed = source.replace("torch.mean(torch.tensor([p.item() for p in parts]))", "torch.mean(torch.stack(parts))")
    assert _lint(fixed) == []


@pytest.mark.parametrize("expr,free", [
    ("[d.item() for d in xs]", True),
    ("torch.tensor([float(d) for d in xs])", True),
    ("[b * d.detach() for b, d in zip((1.0, 2.0), xs)]", True),
    ("[i * d.detach() for i, d in enumerate(xs)]", True),
    ("[d for d in xs]", False),
    ("[b * d for b, d in zip((1.0, 2.0), xs)]", False),
    ("[d for ys in xs for d in ys]", False),
    ("torch.stack([d * 2 for d in xs])", False),
])
def test_the_graph_free_reading_follows_comprehensions(expr, free):
    source = f"import torch\n\n\ndef run(xs):\n    kept = {expr}\n    return kept\n"
    tree = ast.parse(source)
    at = tree.body[1].body[0]
    assert graph_free(tree, at.value, at) is free
    # the run agrees: a comprehension over tensors that carry a graph
    xs = [torch.ones((), dtype=torch.float64, requires_grad=True) * 3 for _ in range(2)]
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    value = scope["run"](xs if "ys" not in expr else [xs])
    items = value if isinstance(value, list) else [value]
    assert (not any(isinstance(v, torch.Tensor) and v.grad_fn is not None for v in items)) is free
