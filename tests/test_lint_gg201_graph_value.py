"""GG201 from one model: does the added value carry a graph, and does the container outlive the update?

Each program is run and judged by what its autograd graph still reaches afterwards (float64, plain
PyTorch): a container that keeps a graph across updates reaches the inputs of several batches; one that
holds only numbers, cut tensors, or one update's graphs it lets go with the call reaches none once the
program returns. The linter must agree, for every program in every form: renamed (no identifier says
"loss"), moved into a helper or a method, with unrelated code added.

Shapes (each with a twin that must still be reported):

* a list bound afresh at the top of a per-update method, filled over the agents of that one update and
  never returned or handed on (the twin: the list is the object's, bound once when it is built);
* an epoch total of what a helper returns after ``loss = loss.detach().cpu()`` (the twin returns the loss);
* an evaluation total of ``.item()`` numbers under ``torch.no_grad()`` reusing the name of the training
  loss, appended to a history after the loop (the twin adds the tensors, with gradients on);
* a loss made of two named parts (``part = 0.5 * a + 0.5 * b``) added into an epoch total in a method
  (true: must be reported; its twin adds ``part.item()``).
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from _findings import codes


def _run(source: str, entry: str, *args):
    scope: dict = {}
    exec(compile(textwrap.dedent(source), "<program>", "exec"), scope)
    return scope[entry](*args)


def _reached(value, inputs) -> int:
    """How many of ``inputs`` (leaves requiring grad) the autograd graphs held in ``value`` still reach
    (``value`` may be a tensor, a number, a list, a dict, or an object whose attributes hold them)."""
    ids = {id(t) for t in inputs}
    found, seen_fn, seen_obj = set(), set(), set()
    todo_obj, todo_fn = [value], []
    while todo_obj:
        v = todo_obj.pop()
        if id(v) in seen_obj:
            continue
        seen_obj.add(id(v))
        if isinstance(v, torch.Tensor):
            if v.grad_fn is not None:
                todo_fn.append(v.grad_fn)
        elif isinstance(v, (list, tuple, set)):
            todo_obj.extend(v)
        elif isinstance(v, dict):
            todo_obj.extend(v.values())
        elif hasattr(v, "__dict__") and not isinstance(v, torch.nn.Module) and not callable(v):
            todo_obj.extend(vars(v).values())
    while todo_fn:
        fn = todo_fn.pop()
        if fn is None or id(fn) in seen_fn:
            continue
        seen_fn.add(id(fn))
        var = getattr(fn, "variable", None)
        if var is not None and id(var) in ids:
            found.add(id(var))
        todo_fn.extend(f for f, _ in fn.next_functions)
    return len(found)


def _batches(n=3):
    torch.manual_seed(0)
    return [(torch.randn(4, 3, dtype=torch.float64, requires_grad=True), torch.randn(4, 1, dtype=torch.float64))
            for _ in range(n)]


def _models(k=2):
    torch.manual_seed(1)
    return [torch.nn.Linear(3, 1).double() for _ in range(k)]


# ---------------------------------------------------------------------------------------------------------
# forms that keep what a program computes

_RENAMES = {
    "agent_loss": "zq", "history": "acc", "q_parts": "buf", "critics": "nets", "Learner": "Box", "update": "tick",
    "total_loss": "run_sum", "loss": "val", "run_batch": "one", "test_losses": "marks", "tot_len": "cnt",
    "cam_loss": "mix", "bce": "p1", "dice": "p2", "epoch_total": "s_e",
}


def renamed(source: str) -> str:
    """Every user identifier of the programs below that names a loss, a total or a history, renamed."""
    for old, new in sorted(_RENAMES.items(), key=lambda kv: -len(kv[0])):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def with_noise(source: str) -> str:
    """Unrelated code added: a helper that takes per-item losses, a counter and a logging dict."""
    return source.replace("import torch\n", textwrap.dedent("""\
        import torch

        def per_item(a, b):
            return torch.nn.functional.mse_loss(a, b, reduction="none")

        LOG = {"lr": 0.1, "steps": 0}
        """), 1)


FORMS = {"plain": lambda s: s, "renamed": renamed, "noise": with_noise, "renamed+noise": lambda s: with_noise(renamed(s))}


# ---------------------------------------------------------------------------------------------------------
# a list bound afresh in each call of a per-update method

PER_UPDATE = """\
import torch


class Learner:
    def __init__(self, critics, opt):
        self.critics = critics
        self.opt = opt
{init}

    def update(self, x, y):
        q_parts = [0.0] * 2
{bind}
        self.opt.zero_grad()
        for i in range(len(self.critics)):
            pred = self.critics[i](x)
            agent_loss = ((pred - y) ** 2).mean()
            {store}.append(agent_loss)
            q_parts[0] += agent_loss
        q_parts[0].backward()
        self.opt.step()
        return q_parts[0].item()


def train(critics, batches):
    opt = torch.optim.SGD([p for c in critics for p in c.parameters()], lr=0.1)
    learner = Learner(critics, opt)
    for x, y in batches:
        learner.update(x, y)
    return learner
"""


def _per_update(good: bool) -> str:
    if good:
        return PER_UPDATE.format(init="        pass", bind="        history = []", store="history")
    return PER_UPDATE.format(init="        self.history = []", bind="", store="self.history")


# the same update as a module-level function called once per batch
PER_UPDATE_FUNCTION = """\
import torch


def update(critics, opt, x, y):
    q_parts = [0.0]
    history = []
    opt.zero_grad()
    for i in range(len(critics)):
        agent_loss = ((critics[i](x) - y) ** 2).mean()
        history.append(agent_loss)
        q_parts[0] += agent_loss
    q_parts[0].backward()
    opt.step()
    return {ret}


def train(critics, batches):
    opt = torch.optim.SGD([p for c in critics for p in c.parameters()], lr=0.1)
    kept = []
    for x, y in batches:
        kept.append(update(critics, opt, x, y))
    return kept
"""


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_a_list_bound_afresh_in_a_per_update_method(form, good):
    source = FORMS[form](_per_update(good))
    batches = _batches()
    learner = _run(source, "train", _models(), batches)
    assert _reached(learner, [x for x, _ in batches]) == (0 if good else 3)  # the oracle
    assert ("GG201" in codes(source)) is (not good)


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_a_list_bound_afresh_in_a_per_update_function(form, good):
    # the twin hands the list back to a caller that keeps every update's list
    source = FORMS[form](PER_UPDATE_FUNCTION.format(ret="q_parts[0].item()" if good else "history"))
    batches = _batches()
    kept = _run(source, "train", _models(), batches)
    assert _reached(kept, [x for x, _ in batches]) == (0 if good else 3)
    assert ("GG201" in codes(source)) is (not good)
    if not good:  # the message says where the graphs are kept: by the caller, not by a loop without backward
        import gradguard as gg

        (found,) = [f for f in gg.lint_source(source) if f.code == "GG201"]
        assert "caller that keeps it" in found.message


# ---------------------------------------------------------------------------------------------------------
# a helper that returns the loss cut after its backward pass

CUT_RETURN = """\
import torch


class Trainer:
    def __init__(self, model, opt):
        self.model = model
        self.opt = opt

    def run_batch(self, x, y):
        self.opt.zero_grad()
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        self.opt.step()
{cut}
        return loss

    def run_epoch(self, batches):
        total_loss = 0
        for i, (x, y) in enumerate(batches):
            loss = self.run_batch(x, y)
            total_loss += loss
        return total_loss


def train(model, batches):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return Trainer(model, opt).run_epoch(batches)
"""


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_an_epoch_total_of_a_loss_cut_before_it_is_returned(form, good):
    source = FORMS[form](CUT_RETURN.format(cut="        loss = loss.detach().cpu()" if good else "        pass"))
    batches = _batches()
    total = _run(source, "train", _models(1)[0], batches)
    assert _reached(total, [x for x, _ in batches]) == (0 if good else 3)
    assert ("GG201" in codes(source)) is (not good)


# ---------------------------------------------------------------------------------------------------------
# an evaluation total of numbers reusing the training loss's name

EVAL_NUMBERS = """\
import torch


class Runner:
    def __init__(self, model, opt):
        self.model = model
        self.opt = opt
        self.test_losses = []

    def fit(self, batches, tests, epochs):
        for epoch in range(epochs):
            for x, y in batches:
                loss = ((self.model(x) - y) ** 2).mean()
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
{guard}
                loss = 0
                tot_len = 0
                for x, y in tests:
                    loss += ((self.model(x) - y) ** 2).mean(){cut} * len(x)
                    tot_len += len(x)
            self.test_losses.append(loss / tot_len)
        return self.test_losses


def train(model, batches):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return Runner(model, opt).fit(batches[:1], batches[1:], 3)
"""


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_an_evaluation_total_of_numbers_under_no_grad(form, good):
    if good:
        source = EVAL_NUMBERS.format(guard="            with torch.no_grad():", cut=".detach().cpu().item()")
    else:
        source = EVAL_NUMBERS.format(guard="            if True:", cut="")
    source = FORMS[form](source)
    batches = _batches()
    history = _run(source, "train", _models(1)[0], batches)
    assert _reached(history, [x for x, _ in batches[1:]]) == (0 if good else 2)
    assert ("GG201" in codes(source)) is (not good)


# ---------------------------------------------------------------------------------------------------------
# a loss of two named parts added into an epoch total in a method: true, must be reported

TWO_PARTS = """\
import torch


def dice_of(p, y):
    return 1 - (2 * (p * y).sum() + 1) / (p.sum() + y.sum() + 1)


class Seg:
    def __init__(self, model, opt):
        self.model = model
        self.opt = opt

    def epoch(self, batches):
        epoch_total = 0
        for x, y in batches:
            p = torch.sigmoid(self.model(x))
            bce = torch.nn.functional.binary_cross_entropy(p, (y > 0).double())
            dice = dice_of(p, (y > 0).double())
            cam_loss = 0.5 * bce + 0.5 * dice
            self.opt.zero_grad()
            cam_loss.backward()
            self.opt.step()
            epoch_total += cam_loss{cut}
        return epoch_total


def train(model, batches):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return Seg(model, opt).epoch(batches)
"""


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
def test_a_loss_of_two_named_parts_summed_in_a_method(form, good):
    source = FORMS[form](TWO_PARTS.format(cut=".item()" if good else ""))
    batches = _batches()
    total = _run(source, "train", _models(1)[0], batches)
    assert _reached(total, [x for x, _ in batches]) == (0 if good else 3)
    assert ("GG201" in codes(source)) is (not good)


# the same two programs with the loop in a module-level function and the helper a plain function

CUT_RETURN_FUNCTION = """\
import torch


def run_batch(model, opt, x, y):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
{cut}
    return loss


def train(model, batches):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total_loss = 0
    for x, y in batches:
        loss = run_batch(model, opt, x, y)
        total_loss += loss
    return total_loss
"""

TWO_PARTS_FUNCTION = """\
import torch


def dice_of(p, y):
    return 1 - (2 * (p * y).sum() + 1) / (p.sum() + y.sum() + 1)


def train(model, batches):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    epoch_total = 0
    for x, y in batches:
        p = torch.sigmoid(model(x))
        bce = torch.nn.functional.binary_cross_entropy(p, (y > 0).double())
        dice = dice_of(p, (y > 0).double())
        cam_loss = 0.5 * bce + 0.5 * dice
        opt.zero_grad()
        cam_loss.backward()
        opt.step()
        epoch_total += cam_loss{cut}
    return epoch_total
"""


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("good", [True, False], ids=["good", "bad"])
@pytest.mark.parametrize("program", ["cut_return", "two_parts"])
def test_the_same_programs_in_a_function(program, form, good):
    if program == "cut_return":
        source = CUT_RETURN_FUNCTION.format(cut="    loss = loss.detach().cpu()" if good else "    pass")
    else:
        source = TWO_PARTS_FUNCTION.format(cut=".item()" if good else "")
    source = FORMS[form](source)
    batches = _batches()
    total = _run(source, "train", _models(1)[0], batches)
    assert _reached(total, [x for x, _ in batches]) == (0 if good else 3)
    assert ("GG201" in codes(source)) is (not good)
