"""GG103 when no optimizer step ever runs, and the programs that never step on purpose.

The bad loop's step condition is never met (its counter restarts each epoch and
an epoch is shorter than the window): the watch reports the accumulated
gradient at the end. A program that only computes gradients is not reported.
"""

import torch
import torch.nn.functional as F

import gradguard as gg

from _scripts import SCRIPTS, alone, run_script


def test_a_step_condition_never_met_is_reported_at_the_backward_line(tmp_path):
    findings = run_script(tmp_path, "gg103_never_stepped_bad", *alone("GG103"))[1]
    assert [f["code"] for f in findings] == ["GG103"], findings
    lines = (SCRIPTS / "gg103_never_stepped_bad.py").read_text().splitlines()
    assert findings[0]["line"] == next(i for i, t in enumerate(lines, 1) if "loss.backward()" in t)
    assert findings[0]["params"] == ["Linear.weight", "Linear.bias"]
    assert "6 backward passes" in findings[0]["message"] and "never ran" in findings[0]["message"]


def test_gradient_only_programs_are_silent(tmp_path):
    assert run_script(tmp_path, "gg103_never_stepped_good", *alone("GG103"))[1] == []


def _loop(model, optimizer, epochs, batches, accum):
    for _ in range(epochs):
        for i, (x, y) in enumerate(batches):
            (F.cross_entropy(model(x), y) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()


def test_the_finding_is_true_no_update_applied_the_gradient():
    torch.manual_seed(0)
    model = torch.nn.Linear(10, 2)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(8, 10), torch.randint(0, 2, (8,))) for _ in range(3)]
    with gg.watch(mode="record") as w:
        _loop(model, optimizer, 2, batches, accum=4)
    assert [f.code for f in w.findings] == ["GG103"]
    # Independent check: the gradient is there, non-zero, and the parameters never moved.
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_a_loop_that_reaches_its_step_is_silent():
    # Negative control for the criterion: the same loop with windows an epoch can fill.
    torch.manual_seed(0)
    model = torch.nn.Linear(10, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(8, 10), torch.randint(0, 2, (8,))) for _ in range(4)]
    with gg.watch(mode="record") as w:
        _loop(model, optimizer, 2, batches, accum=4)
    assert w.findings == []


def test_one_pass_into_an_optimizer_that_never_steps_is_silent():
    torch.manual_seed(0)
    model = torch.nn.Linear(10, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with gg.watch(mode="record") as w:
        F.cross_entropy(model(torch.randn(8, 10)), torch.randint(0, 2, (8,))).backward()
    assert w.findings == [] and optimizer.state == {}


def test_the_never_stepping_optimizer_is_named_among_other_parameters_and_optimizers():
    # Parameters the watch saw first (a frozen-feature pass with no optimizer) and another live
    # optimizer: the finding still names the never-stepping optimizer's own parameters.
    torch.manual_seed(0)
    features, head = torch.nn.Linear(6, 10), torch.nn.Linear(10, 2)
    other = torch.nn.Linear(3, 3)
    other_opt = torch.optim.SGD(other.parameters(), lr=0.1)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
    batches = [(torch.randn(8, 6), torch.randint(0, 2, (8,))) for _ in range(3)]
    with gg.watch(mode="record") as w:
        features(torch.randn(2, 6)).sum().backward()  # the watch meets these parameters first
        features.zero_grad(set_to_none=True)
        _loop(lambda x: head(torch.tanh(features(x)).detach()), optimizer, 1, batches, accum=4)
    assert [f.code for f in w.findings] == ["GG103"]
    assert len(w.findings[0].params) == 2  # head.weight and head.bias, not the features' or other's
    assert "3 backward passes" in w.findings[0].message and other_opt.state == {}
