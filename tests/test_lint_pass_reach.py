"""Which passes' gradients a step applies: findings decided from the program, in several forms.

Each class comes from a false finding or a miss on real or published code (all of them read while
fixing, so in-sample): a warm-up pass on a tensor no optimizer holds (GG114), a step applying a
gradient an earlier step of the same optimizer already applied (GG101), a loss returned by a
helper and summed (GG201), a loss rebuilt every iteration and not a running total (GG201). Every
bad program is checked by running it where the claim is numeric; every good twin must stay silent.
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg
from gradguard.lint.autofix import fix_source


def _codes(source, code):
    return [f.line for f in gg.lint_source(source) if f.code == code]


GG114_GOOD = '''\
import torch
import torch.nn as nn


def warm_up_inline(model, loader, opt):
    torch.empty(1, requires_grad=True).backward()  # autograd warm-up
    for x in loader:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()


def warm_up_named(net, batches, o):
    probe = torch.zeros(3, requires_grad=True)
    doubled = probe * 2
    doubled.sum().backward()
    for b in batches:
        net(b).mean().backward()
        o.step()
        o.zero_grad(set_to_none=True)


def _prime():
    nn.functional.relu(torch.ones(2, requires_grad=True)).sum().backward()


class Runner:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def fit(self, loader):
        _prime()
        for x in loader:
            self.model(x).sum().backward()
            self.opt.step()
            self.opt.zero_grad()
'''

GG114_BAD = '''\
import torch


def leaf_then_given_to_optimizer(model, loader):
    scale = torch.ones(1, requires_grad=True)
    scale.sum().backward()
    opt = torch.optim.SGD([scale] + list(model.parameters()), lr=0.1)
    for x in loader:
        (model(x) * scale).sum().backward()
        opt.step()
        opt.zero_grad()


def warm_up_on_the_model(model, loader, opt):
    model(torch.zeros(1, 4)).sum().backward()
    for x in loader:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()


def _prime(model):
    model(torch.ones(2, 4)).sum().backward()


class Runner:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def fit(self, loader):
        _prime(self.model)
        for x in loader:
            self.model(x).sum().backward()
            self.opt.step()
            self.opt.zero_grad()
'''


def test_gg114_silent_on_warm_up_passes_of_tensors_no_optimizer_holds():
    assert _codes(GG114_GOOD, "GG114") == []


def test_gg114_still_reports_passes_that_reach_a_stepped_parameter():
    # a fresh leaf later handed to the optimizer, a pass through the model, a helper doing one
    assert _codes(GG114_BAD, "GG114") == [6, 15, 31]


def test_gg114_warm_up_leaf_really_leaves_the_step_unchanged():
    """The claim the silence rests on, run in float64: a fresh leaf's pass changes no parameter's .grad."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    x = torch.randn(4, 3, dtype=torch.float64)
    torch.empty(1, dtype=torch.float64, requires_grad=True).backward()
    model(x).sum().backward()
    with_warm_up = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(with_warm_up, model.parameters()))
    # negative control: a pass through the model does change what the step applies
    model(torch.ones(1, 3, dtype=torch.float64)).sum().backward()
    assert not all(torch.equal(a, p.grad) for a, p in zip(with_warm_up, model.parameters()))


GG201_REBUILT = '''\
import functools

import torch


def _backward(scale, loss):
    (loss * scale).backward()


def train(model, opt, batches, k, aux):
    run = functools.partial(_backward, 1.0 / k)
    running_loss = 0.0
    for i in range(k):
        x = batches[i]
        main_loss = model(x).pow(2).mean()
        aux_loss = model(x).abs().mean()
        objective = main_loss
        if aux:
            objective = objective + aux_loss
        run(objective)
        running_loss += main_loss.item()
    opt.step()
    opt.zero_grad()


class Fitter:
    def __init__(self, net, o):
        self.net, self.o = net, o
        self.go = functools.partial(_backward, 0.5)

    def fit(self, chunks, extra):
        for b in chunks:
            with torch.enable_grad():
                sq_loss = self.net(b).square().sum()
                reg_loss = self.net(b).sum()
                acc = sq_loss
            if extra:
                acc = acc + 0.1 * reg_loss
            self.go(acc)
            self.seen_loss += float(sq_loss)
        self.o.step()
        self.o.zero_grad()
'''

GG201_RUNNING = '''\
import functools

import torch


def _backward(scale, loss):
    (loss * scale).backward()


def train(model, opt, batches, k, aux):
    run = functools.partial(_backward, 1.0 / k)
    objective = 0.0
    running_loss = 0.0
    for i in range(k):
        x = batches[i]
        main_loss = model(x).pow(2).mean()
        aux_loss = model(x).abs().mean()
        run(main_loss)
        running_loss += main_loss.item()
        if aux:
            objective = objective + aux_loss
    opt.step()
    opt.zero_grad()
    print(float(objective))


def epochs(model, opt, chunks, n):
    run = functools.partial(_backward, 0.5)
    for epoch in range(n):
        acc = 0.0
        seen_loss = 0.0
        for b in chunks:
            sq_loss = model(b).pow(2).mean()
            reg_loss = model(b).sum()
            run(sq_loss)
            seen_loss += float(sq_loss)
            acc = acc + reg_loss
        opt.step()
        opt.zero_grad()
'''


def test_gg201_silent_on_a_loss_rebuilt_every_iteration():
    # `objective = main_loss; if aux: objective = objective + aux_loss`: one iteration's graph, not a total
    assert _codes(GG201_REBUILT, "GG201") == []


def test_gg201_still_reports_totals_carried_across_iterations():
    # the same sum with no rebinding before it in the iteration, or a binding before a nested loop
    assert _codes(GG201_RUNNING, "GG201") == [21, 37]


def test_gg201_rebuilt_loss_holds_one_iteration_only():
    """Run the rebuilt form: after the loop the name holds the last iteration's graph only (its
    autograd history has one AddBackward), while the carried total chains one per iteration."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    rebuilt, carried = None, torch.zeros((), dtype=torch.float64)
    for _ in range(4):
        y = model(torch.randn(2, 3, dtype=torch.float64))
        rebuilt = y.pow(2).mean()
        rebuilt = rebuilt + y.abs().mean()
        carried = carried + y.abs().mean()

    def adds(t):
        seen, todo, n = set(), [t.grad_fn], 0
        while todo:
            f = todo.pop()
            if f is None or id(f) in seen:
                continue
            seen.add(id(f))
            n += type(f).__name__ == "AddBackward0"
            todo += [g for g, _ in f.next_functions]
        return n

    assert adds(rebuilt) == 1
    assert adds(carried) == 4  # negative control: the running total links every iteration


GG101_TWICE = '''\
import torch


class TwoLosses:
    """One optimizer stepped twice per iteration; its only clearing runs before the second loss."""

    def __init__(self, net, critic, lr):
        self.net, self.critic = net, critic
        self.o = torch.optim.SGD(net.parameters(), lr=lr)
        self.oc = torch.optim.SGD(critic.parameters(), lr=lr)

    def run(self, xs):
        for x in xs:
            self.critic.zero_grad()
            self.critic(x.detach()).pow(2).mean().backward()
            self.oc.step()
            self.net(x).pow(2).mean().backward()
            self.o.step()
            self.net.zero_grad()
            self.critic(self.net(x)).mean().backward()
            self.o.step()


def _recon(enc_dec, x):
    return (enc_dec(x) - x).pow(2).mean()


def alternate(g, d, stream, sched):
    og = torch.optim.Adam(g.parameters())
    od = torch.optim.Adam(d.parameters())
    log = []
    for x in stream:
        d.zero_grad()
        d(x).mean().backward()
        od.step()
        _recon(g, x).backward()
        og.step()
        log.append(float(x.sum()))
        g.zero_grad()
        d(g(x)).mean().backward()
        og.step()
        sched.step()
'''

GG101_CLEARED = '''\
import torch


class TwoLosses:
    def __init__(self, net, critic, lr):
        self.net, self.critic = net, critic
        self.o = torch.optim.SGD(net.parameters(), lr=lr)
        self.oc = torch.optim.SGD(critic.parameters(), lr=lr)

    def run(self, xs):
        for x in xs:
            self.critic.zero_grad()
            self.critic(x.detach()).pow(2).mean().backward()
            self.oc.step()
            self.net.zero_grad()
            self.net(x).pow(2).mean().backward()
            self.o.step()
            self.net.zero_grad()
            self.critic(self.net(x)).mean().backward()
            self.o.step()


def _second(model, x, opt):
    model(x).abs().mean().backward()
    opt.step()
    opt.zero_grad()


def fit(model, data, o):
    for x in data:
        model(x).pow(2).sum().backward()
        o.step()
        o.zero_grad()
        _second(model, x, o)


def window(model, data, o, k):
    for i, x in enumerate(data):
        model(x).pow(2).sum().backward()
        if (i + 1) % k == 0:
            o.step()
            o.zero_grad()


def _recon(enc_dec, x):
    return (enc_dec(x) - x).pow(2).mean()


def alternate(g, d, stream, sched):
    og = torch.optim.Adam(g.parameters())
    od = torch.optim.Adam(d.parameters())
    log = []
    for x in stream:
        d.zero_grad()
        d(x).mean().backward()
        od.step()
        g.zero_grad()
        _recon(g, x).backward()
        og.step()
        log.append(float(x.sum()))
        g.zero_grad()
        d(g(x)).mean().backward()
        og.step()
        sched.step()
'''


def test_gg101_one_optimizer_stepped_twice_with_its_clearing_elsewhere():
    # a method with self.o (the critic's clearing clears another optimizer's module) and a script form
    assert _codes(GG101_TWICE, "GG101") == [18, 37]


def test_gg101_silent_when_each_step_of_the_optimizer_is_cleared_for():
    assert _codes(GG101_CLEARED, "GG101") == []


def _alternate(source, steps=3):
    """Run ``alternate`` of ``source`` in float64 and return the generator's parameters."""
    ns: dict = {}
    exec(compile(source, "<prog>", "exec"), ns)
    torch.manual_seed(0)
    g = torch.nn.Linear(3, 3).double()
    d = torch.nn.Linear(3, 1).double()
    stream = [torch.randn(4, 3, dtype=torch.float64) for _ in range(steps)]

    class NoSchedule:
        def step(self):
            pass

    ns["alternate"](g, d, stream, NoSchedule())
    return [p.detach().clone() for p in g.parameters()]


def test_gg101_fix_trains_like_the_correct_program():
    """The fix (a clearing right after the step that already applied the gradient) gives, in float64,
    the parameters of the correct program; the program as written does not (negative control)."""
    fixed = fix_source(GG101_TWICE)
    assert [f.code for f in fixed.fixed] == ["GG101", "GG101"] and _codes(fixed.text, "GG101") == []
    reference = _alternate(GG101_CLEARED)
    assert all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(_alternate(fixed.text), reference))
    assert not all(torch.allclose(a, b, rtol=0, atol=1e-6) for a, b in zip(_alternate(GG101_TWICE), reference))


GG201_RETURNED = '''\
import torch


def step_fn(net, batch, opt):
    out = net(batch[0])
    objective = torch.nn.functional.mse_loss(out, batch[1])
    (objective / 2).backward()
    return objective


def fit(net, batches, opt):
    running = torch.zeros(())
    for b in batches:
        running = running + step_fn(net, b, opt) / len(batches)
        opt.step()
        opt.zero_grad()
    print(float(running))


class Loop:
    def __init__(self, model, optim):
        self.model, self.optim = model, optim

    def _one(self, x, y):
        err = (self.model(x) - y).abs().mean()
        err.backward()
        return err

    def epoch(self, pairs):
        seen = 0.0
        for x, y in pairs:
            seen += self._one(x, y).float()
            self.optim.step()
            self.optim.zero_grad()
        print(seen)
'''

GG201_RETURNED_CUT = '''\
import torch


def step_fn(net, batch, opt):
    out = net(batch[0])
    objective = torch.nn.functional.mse_loss(out, batch[1])
    (objective / 2).backward()
    return objective.detach()


def fit(net, batches, opt):
    running = torch.zeros(())
    for b in batches:
        running = running + step_fn(net, b, opt) / len(batches)
        opt.step()
        opt.zero_grad()
    print(float(running))


class Loop:
    def __init__(self, model, optim):
        self.model, self.optim = model, optim

    def _one(self, x, y):
        err = (self.model(x) - y).abs().mean()
        err.backward()
        return err

    def epoch(self, pairs):
        seen = 0.0
        for x, y in pairs:
            seen += self._one(x, y).item()
            self.optim.step()
            self.optim.zero_grad()
        print(seen)
'''


def test_gg201_sum_of_the_tensor_a_helper_back_propagated_and_returned():
    # `running = running + step_fn(...) / n` (a function) and `seen += self._one(x, y).float()` (a method)
    assert _codes(GG201_RETURNED, "GG201") == [14, 32]


def test_gg201_silent_when_the_helper_or_the_sum_cuts_the_graph():
    assert _codes(GG201_RETURNED_CUT, "GG201") == []


@pytest.mark.parametrize("source,graph", [(GG201_RETURNED, True), (GG201_RETURNED_CUT, False)], ids=["kept", "cut"])
def test_gg201_returned_total_really_holds_a_graph(source, graph, capsys):
    """Run ``fit``: the total holds a graph (``grad_fn``) exactly where reported."""
    ns: dict = {}
    exec(compile(source.replace("    print(float(running))", "    return running"), "<prog>", "exec"), ns)
    torch.manual_seed(0)
    net = torch.nn.Linear(2, 1)
    batches = [(torch.randn(3, 2), torch.randn(3, 1)) for _ in range(3)]
    running = ns["fit"](net, batches, torch.optim.SGD(net.parameters(), lr=0.1))
    assert (running.grad_fn is not None) is graph


GG108_RETURNED = '''\
import torch


class Penalised:
    def __init__(self, head, opt):
        self.head, self.opt = head, opt

    def _per_param(self, logits, y):
        self.opt.zero_grad()
        objective = torch.nn.functional.cross_entropy(logits, y)
        objective.backward(inputs=list(self.head.parameters()), retain_graph=True, create_graph=True)
        found = {name: w.grad.clone() for name, w in self.head.named_parameters()}
        return found


def grads_for_penalty(net, x, y):
    ((net(x) - y) ** 2).mean().backward(create_graph=True)
    return [q.grad for q in net.parameters()]
'''

GG108_KEPT = '''\
import torch


def only_the_loss(net, x, y):
    loss = ((net(x) - y) ** 2).mean()
    loss.backward(create_graph=True)
    grads = [q.grad.detach() for q in net.parameters()]
    return loss


def read_data_only(net, x, y):
    ((net(x) - y) ** 2).mean().backward(create_graph=True)
    return [q.data for q in net.parameters()]
'''


def test_gg108_silent_where_the_gradients_leave_with_their_graph_for_the_caller():
    assert _codes(GG108_RETURNED, "GG108") == []


def test_gg108_still_reports_a_pass_whose_gradients_are_not_handed_on():
    assert _codes(GG108_KEPT, "GG108") == [6, 12]


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_gg108_returned_gradients_are_differentiable():
    """What the silence rests on: gradients read after create_graph=True carry a graph the caller can
    differentiate (a gradient penalty); after a plain backward they do not (negative control)."""
    torch.manual_seed(0)
    net = torch.nn.Linear(2, 1).double()
    x, y = torch.randn(4, 2, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)
    ((net(x) - y) ** 2).mean().backward(create_graph=True)  # gradguard: ignore[GG108] (the graph in .grad is what this test shows)
    assert all(q.grad.grad_fn is not None for q in net.parameters())
    net.zero_grad(set_to_none=True)
    ((net(x) - y) ** 2).mean().backward()
    assert all(q.grad.grad_fn is None for q in net.parameters())


GG201_NO_GRAD_INPUTS = '''\
import torch
import torch.nn.functional as F


def _log_probs(logits, labels):
    return torch.gather(logits.log_softmax(-1), 1, labels[:, None]).squeeze(1)


def evaluate(policy, reference, loader, beta):
    total_loss = 0
    for x, y in loader:
        with torch.no_grad():
            out = policy(x)
            ref = reference(x)
        margin = beta * (_log_probs(out, y) - _log_probs(ref, y))
        loss = F.logsigmoid(-margin).mean()
        total_loss += loss
    print(float(total_loss) / len(loader))


class Scorer:
    def __init__(self, net):
        self.net = net
        self.acc = 0.0

    def run(self, batches):
        for b in batches:
            inputs = b[0].float()
            with torch.no_grad():
                pred = self.net(inputs)
            val_loss = torch.nn.functional.mse_loss(pred, b[1])
            self.acc += val_loss
'''

GG201_GRAPH_INPUTS = '''\
import torch
import torch.nn.functional as F


def _log_probs(logits, labels):
    return torch.gather(logits.log_softmax(-1), 1, labels[:, None]).squeeze(1)


def evaluate(policy, reference, loader, beta):
    total_loss = 0
    for x, y in loader:
        out = policy(x)
        with torch.no_grad():
            ref = reference(x)
        margin = beta * (_log_probs(out, y) - _log_probs(ref, y))
        loss = F.logsigmoid(-margin).mean()
        total_loss += loss
    print(float(total_loss) / len(loader))


class Scorer:
    def __init__(self, net):
        self.net = net
        self.acc = 0.0

    def run(self, batches):
        for b in batches:
            inputs = b[0].float()
            with torch.no_grad():
                inputs = inputs * 2
            pred = self.net(inputs)
            val_loss = torch.nn.functional.mse_loss(pred, b[1])
            self.acc += val_loss
'''


def test_gg201_silent_on_a_loss_built_from_what_no_grad_blocks_computed():
    # evaluation: the models run under `with torch.no_grad():`; the loss is computed after the block
    assert _codes(GG201_NO_GRAD_INPUTS, "GG201") == []


def test_gg201_still_reports_a_loss_built_from_a_model_called_outside_the_block():
    assert _codes(GG201_GRAPH_INPUTS, "GG201") == [17, 33]


@pytest.mark.parametrize("source,graph", [(GG201_GRAPH_INPUTS, True), (GG201_NO_GRAD_INPUTS, False)], ids=["graph", "no-graph"])
def test_gg201_no_grad_inputs_really_hold_no_graph(source, graph):
    """Run ``Scorer.run``: ``self.acc`` holds a graph exactly where the linter reports it."""
    ns: dict = {}
    exec(compile(source, "<prog>", "exec"), ns)
    torch.manual_seed(0)
    scorer = ns["Scorer"](torch.nn.Linear(2, 1))
    scorer.run([(torch.randn(3, 2), torch.randn(3, 1)) for _ in range(3)])
    assert (scorer.acc.grad_fn is not None) is graph


OTHER_AUTOGRAD = '''\
from mxnet import autograd, gluon


class Fit:
    def __init__(self, net, loss):
        self.net, self.loss = net, loss
        self.optim = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})

    def epoch(self, train_iter):
        for X, y in train_iter:
            with autograd.record():
                l = self.loss(self.net(X), y)
            l.backward()
            self.optim.step(1)
'''

SAME_LOOP_IN_TORCH = OTHER_AUTOGRAD.replace("from mxnet import autograd, gluon", "import torch\nfrom torch import autograd").replace(
    'gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})', "torch.optim.SGD(net.parameters(), lr=0.1)").replace(
    "self.optim.step(1)", "self.optim.step()")
BOTH = "import torch\n" + OTHER_AUTOGRAD


def test_no_buffer_findings_in_a_file_that_differentiates_with_another_library():
    # MXNet's backward() writes fresh gradients (grad_req="write"): nothing accumulates between steps
    assert _codes(OTHER_AUTOGRAD, "GG101") == []


@pytest.mark.parametrize("source", [SAME_LOOP_IN_TORCH, BOTH], ids=["torch-autograd", "imports-torch-too"])
def test_the_same_loop_under_torch_is_still_stale(source):
    assert _codes(source, "GG101") == [15]


NESTED_CLASS = '''\
import torch


def _(nn, optim):
    class Agent:
        def __init__(self, net):
            self.net = net
            self.optimizer = optim.Adam(net.parameters())

        def update_model(self, x):
            loss = self.net(x).pow(2).mean()
            loss.backward()
            self.optimizer.step()
            return loss.item()

        def train(self, frames):
            for x in frames:
                self.update_model(x)
    return (Agent,)
'''

GUARDED_CLASS = NESTED_CLASS.replace("def _(nn, optim):", "if True:\n    optim = torch.optim").replace("    return (Agent,)\n", "")
NESTED_CLEARED = NESTED_CLASS.replace("            loss.backward()", "            self.optimizer.zero_grad()\n            loss.backward()")


@pytest.mark.parametrize("source", [NESTED_CLASS, GUARDED_CLASS], ids=["class-in-a-function", "class-under-if"])
def test_gg101_in_methods_of_a_class_not_at_module_level(source):
    # a notebook cell's function (marimo) or an `if` holding the class: its loop calls the update through self.
    assert _codes(source, "GG101") == [13 if source is NESTED_CLASS else 14]


def test_gg101_nested_class_that_clears_is_silent():
    assert _codes(NESTED_CLEARED, "GG101") == []


ACCUMULATOR_FORMS = '''\
import torch
from gradguard import Accumulator


class Fitter:
    def __init__(self, net, k):
        self.net = net
        self.opt = torch.optim.SGD(net.parameters(), lr=0.1)
        self.window = Accumulator(self.opt, steps=k)

    def _loss(self, x, y):
        return torch.nn.functional.mse_loss(self.net(x), y)

    def fit(self, pairs):
        for x, y in pairs:
            self.opt.zero_grad()
            self.window.backward(self._loss(x, y), count=len(y))
            self.window.step()


def _clear(o):
    o.zero_grad(set_to_none=True)


def run(net, pairs, k):
    o = torch.optim.SGD(net.parameters(), lr=0.1)
    w = Accumulator(o, k)
    for x, y in pairs:
        _clear(o)
        w.backward(torch.nn.functional.mse_loss(net(x), y), count=len(y))
        w.step()


class Named:
    def __init__(self, net):
        self.net = net
        self.opt = torch.optim.SGD(net.parameters(), lr=0.1)
        self.acc = object()

    def fit(self, pairs):
        for x, y in pairs:
            self.opt.zero_grad()
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            loss.backward()
            self.opt.step()
'''


def test_gg102_zero_grad_before_an_accumulator_backward_in_a_method_and_through_a_helper():
    """The Accumulator is known from its binding to ``Accumulator(...)`` (here imported by name, held as
    ``self.window`` or ``w``); a class holding an unrelated ``self.acc`` that steps its own optimizer is no
    window (negative control)."""
    assert _codes(ACCUMULATOR_FORMS, "GG102") == [16, 22]


FACTORY_OPTIMIZER = '''\
import torch


class Agent:
    def __init__(self, config, network):
        self.config = config
        self.network = network
        self.optimizer = config.optimizer_fn(self.network.parameters())

    def step(self, batch):
        loss = self.network(batch).pow(2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.network.parameters(), self.config.gradient_clip)
        self.optimizer.step()
'''

FACTORY_RENAMED = FACTORY_OPTIMIZER.replace("config.optimizer_fn", "config.make").replace("self.optimizer", "self.o").replace(
    "self.network", "self.q").replace("def step(self, batch)", "def learn(self, batch)")
FACTORY_CLEARED = FACTORY_OPTIMIZER.replace("        loss.backward()", "        self.optimizer.zero_grad()\n        loss.backward()")
FACTORY_HANDED_ON = FACTORY_OPTIMIZER.replace("        self.optimizer = ", "        config.register(self.network)\n        self.optimizer = ")


@pytest.mark.parametrize("source", [FACTORY_OPTIMIZER, FACTORY_RENAMED], ids=["config.optimizer_fn", "renamed"])
def test_gg101_per_update_method_with_an_optimizer_from_a_configured_factory(source):
    # `self.optimizer = config.optimizer_fn(self.network.parameters())`, stepped after backward, never cleared
    assert _codes(source, "GG101") == [14]


@pytest.mark.parametrize("source", [FACTORY_CLEARED, FACTORY_HANDED_ON], ids=["cleared", "module-handed-on"])
def test_gg101_factory_optimizer_silent_when_cleared_or_when_code_elsewhere_may_clear(source):
    assert _codes(source, "GG101") == []


GG201_SIBLING = '''\
import torch


def chunks_step(model, chunks, opt):
    total, extras = 0.0, []
    for x in chunks:
        out = model(x)
        loss, side = out
        extras.append(side)
        total += loss.item()
        loss.backward()
    opt.step()
    opt.zero_grad()
    return total, torch.stack(extras)


class Wrapper:
    def __init__(self, net, optim):
        self.net, self.optim = net, optim

    def forward(self, pieces):
        kept = []
        for p in pieces:
            pair = self.net(p)
            objective, image = pair
            objective.backward()
            kept.append(image)
        self.optim.step()
        self.optim.zero_grad()
        return kept
'''

GG201_SIBLING_LOSS = '''\
import torch


def chunks_step(model, chunks, opt):
    total, extras = 0.0, []
    for x in chunks:
        out = model(x)
        loss, side = out
        extras.append(loss)
        total += loss.item()
        loss.backward()
    opt.step()
    opt.zero_grad()
    return total, torch.stack(extras)


class Wrapper:
    def __init__(self, net, optim):
        self.net, self.optim = net, optim

    def forward(self, pieces):
        kept = []
        for p in pieces:
            pair = self.net(p)
            objective, image = pair
            objective.backward()
            kept.append(objective)
        self.optim.step()
        self.optim.zero_grad()
        return kept
'''


def test_gg201_an_element_unpacked_beside_the_loss_is_not_the_loss():
    # `loss, side = out; extras.append(side)`: the other element of the model's tuple (a function and a method)
    assert _codes(GG201_SIBLING, "GG201") == []


def test_gg201_the_unpacked_loss_itself_appended_is_still_reported():
    assert _codes(GG201_SIBLING_LOSS, "GG201") == [9, 27]
