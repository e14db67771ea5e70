"""Classes of false findings and missed bugs from the tune halves of the real-code sets and GradBench.

Each class is a bad program and its correct twin, written in more than one form (renamed, in a helper,
as a method): the finding must follow what the program computes, never a name. Where the claim is
numeric (the norm a clip reads, the gradient a step applies, whether a kept value holds a graph),
the program is run and compared with plain PyTorch in float64.
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg


def _lines(source, code):
    return [f.line for f in gg.lint_source(source) if f.code == code]


def _run(source, name, *args):
    scope: dict = {}
    exec(compile(source, "<test>", "exec"), scope)
    return scope[name](*args)


# ---------------------------------------------------------------------------------------------
# GG112: the unscale done per optimizer in a loop over the optimizers, then a clip per optimizer

GG112_GOOD = '''\
import torch


class Trainer:
    def __init__(self, models, scaler):
        self.models = models
        self.optimizers = {n: torch.optim.SGD(m.parameters(), lr=0.1) for n, m in models.items()}
        self.scaler = scaler

    def fit_batch(self, x, y):
        loss = sum(((m(x) - y) ** 2).mean() for m in self.models.values())
        self.scaler.scale(loss).backward()
        return self.optimizers_step()

    def optimizers_step(self):
        valid = self.optimizers
        for opt in valid.values():
            self.scaler.unscale_(opt)
        norms = []
        for opt in valid.values():
            norms.append(torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], 1e9))
        for opt in valid.values():
            self.scaler.step(opt)
        self.scaler.update()
        for opt in valid.values():
            opt.zero_grad()
        return norms


def _unscale_all(s, opts):
    for o in opts:
        s.unscale_(o)


def step_all(nets, opts, s, x, y):
    s.scale(sum(((n(x) - y) ** 2).mean() for n in nets)).backward()
    _unscale_all(s, opts)
    norms = []
    for o in opts:
        norms.append(torch.nn.utils.clip_grad_norm_(o.param_groups[0]["params"], 1e9))
    for o in opts:
        s.step(o)
    s.update()
    return norms
'''

# the unscale loop runs over another collection than the clip loop: the clipped optimizer keeps its scale
GG112_BAD = '''\
import torch


class Trainer:
    def __init__(self, models, scaler):
        self.models = models
        self.optimizers = {n: torch.optim.SGD(m.parameters(), lr=0.1) for n, m in models.items()}
        self.frozen = {}
        self.scaler = scaler

    def fit_batch(self, x, y):
        loss = sum(((m(x) - y) ** 2).mean() for m in self.models.values())
        self.scaler.scale(loss).backward()
        return self.optimizers_step()

    def optimizers_step(self):
        for opt in self.frozen.values():
            self.scaler.unscale_(opt)
        norms = []
        for opt in self.optimizers.values():
            norms.append(torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], 1e9))
        for opt in self.optimizers.values():
            self.scaler.step(opt)
        self.scaler.update()
        return norms
'''


def test_gg112_silent_when_a_loop_over_the_optimizers_unscales_before_the_clip_loop():
    assert _lines(GG112_GOOD, "GG112") == []
    renamed = GG112_GOOD.replace("valid", "live_set").replace("opt", "q").replace("scaler", "amp_state")
    assert _lines(renamed, "GG112") == []


def test_gg112_still_reports_an_unscale_loop_over_another_collection():
    assert len(_lines(GG112_BAD, "GG112")) == 1


def _norms(source, scale=1024.0):
    torch.manual_seed(0)
    models = {n: torch.nn.Linear(3, 1) for n in ("a", "b")}
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    ref = []
    for m in models.values():  # float64: the true norm of each model's gradient
        m64 = torch.nn.Linear(3, 1).double()
        m64.load_state_dict({k: v.double() for k, v in m.state_dict().items()})
        ((m64(x.double()) - y.double()) ** 2).mean().backward()
        ref.append(torch.cat([p.grad.flatten() for p in m64.parameters()]).norm().item())
    scope: dict = {}
    exec(compile(source, "<test>", "exec"), scope)
    trainer = scope["Trainer"](models, torch.amp.GradScaler("cpu", init_scale=scale))
    got = [float(n) for n in trainer.fit_batch(x, y)]
    return got, ref


def test_gg112_good_twin_clips_the_true_norm_and_the_bad_one_the_scaled_norm():
    got, ref = _norms(GG112_GOOD)
    assert got == pytest.approx(ref, rel=1e-5)
    bad, ref = _norms(GG112_BAD)
    assert bad == pytest.approx([1024.0 * r for r in ref], rel=1e-5)  # negative control


# ---------------------------------------------------------------------------------------------
# GG114: a pass on a tensor made above a loop that updates other tensors by hand

GG114_GOOD = '''\
import torch

x = torch.randn(3, requires_grad=True)
y = x * 2
for _ in range(3):
    y = y * 2
y.backward(torch.tensor([0.1, 1.0, 0.0001]))
print(x.grad)

weights = torch.ones(4, requires_grad=True)
for epoch in range(3):
    out = (weights * 3).sum()
    out.backward()
    with torch.no_grad():
        weights -= 0.1 * weights.grad
    weights.grad.zero_()


def demo(steps):
    probe = torch.randn(2, requires_grad=True)
    (probe ** 2).sum().backward()
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([1.0, -2.0], dtype=torch.float64)
    for _ in range(steps):
        ((w - target) ** 2).sum().backward()
        with torch.no_grad():
            w.data.add_(w.grad, alpha=-0.25)
        w.grad = None
    return w.detach(), probe
'''

GG114_BAD = '''\
import torch


def demo(steps):
    w = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    (w * 5).sum().backward()
    target = torch.tensor([1.0, -2.0], dtype=torch.float64)
    for _ in range(steps):
        ((w - target) ** 2).sum().backward()
        with torch.no_grad():
            w.data.add_(w.grad, alpha=-0.25)
        w.grad = None
    return w.detach()


def aliased(steps):
    probe = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    (probe * 5).sum().backward()
    w = probe
    target = torch.tensor([1.0, -2.0], dtype=torch.float64)
    for _ in range(steps):
        ((w - target) ** 2).sum().backward()
        with torch.no_grad():
            w -= 0.25 * w.grad
        w.grad = None
    return w.detach()
'''


def test_gg114_silent_on_a_pass_that_reaches_none_of_the_tensors_the_loop_updates():
    assert _lines(GG114_GOOD, "GG114") == []
    renamed = GG114_GOOD.replace("weights", "theta").replace("probe", "v0").replace("x", "inp")
    assert _lines(renamed, "GG114") == []


def test_gg114_still_reports_a_pass_on_the_updated_tensor_or_an_alias_of_it():
    assert len(_lines(GG114_BAD, "GG114")) == 2


def _reference(steps):
    w = torch.zeros(2, dtype=torch.float64)
    target = torch.tensor([1.0, -2.0], dtype=torch.float64)
    for _ in range(steps):
        w = w - 0.25 * 2 * (w - target)
    return w


def test_gg114_the_silent_program_trains_like_the_reference_and_the_reported_ones_do_not():
    got, probe = _run(GG114_GOOD, "demo", 4)
    assert torch.allclose(got, _reference(4), atol=1e-12)
    assert probe.grad is not None  # the stray pass did write a gradient, on a tensor the loop never applies
    for name in ("demo", "aliased"):  # negative controls: the stray gradient enters the first update
        assert not torch.allclose(_run(GG114_BAD, name, 4), _reference(4), atol=1e-6)


# ---------------------------------------------------------------------------------------------
# the loss-tensor-in-sum mutant operator: no mutant where the summed value is detached first

def _lint_recall():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "lint_recall.py"
    spec = importlib.util.spec_from_file_location("lint_recall_tune", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("lint_recall_tune", module)
    spec.loader.exec_module(module)
    return module


SUMS = '''\
import torch


def fit(model, loader, opt):
    total = seen = tail = 0.0
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.detach().item()
        seen += loss.data.item() * x.size(0)
        tail += loss.detach().cpu().item()
    return total, seen, tail
'''


def test_loss_tensor_in_sum_makes_no_mutant_of_a_detached_sum():
    lr = _lint_recall()
    assert [m for m in lr.mutants("f.py", SUMS) if m.operator == "loss-tensor-in-sum"] == []
    # the same program summing the loss itself through .item(): one mutant per sum, each a real bug
    live = SUMS.replace("loss.detach().item()", "loss.item()").replace("loss.data.item()", "loss.item()")
    found = [m for m in lr.mutants("f.py", live) if m.operator == "loss-tensor-in-sum"]
    assert len(found) == 2
    for m in found:
        assert len(_lines(m.source, "GG201")) > len(_lines(live, "GG201"))
        # the mutant keeps a graph: the summed value has a grad_fn after one iteration
        model = torch.nn.Linear(2, 1)
        out = _run(m.source, "fit", model, [(torch.ones(3, 2), torch.zeros(3, 1))], torch.optim.SGD(model.parameters(), 0.1))
        assert any(getattr(v, "grad_fn", None) is not None for v in out)
    # the equivalent mutants the operator no longer makes really hold no graph
    for edited in (SUMS.replace("loss.detach().item()", "loss.detach()"), SUMS.replace("loss.data.item()", "loss.data")):
        model = torch.nn.Linear(2, 1)
        out = _run(edited, "fit", model, [(torch.ones(3, 2), torch.zeros(3, 1))], torch.optim.SGD(model.parameters(), 0.1))
        assert all(getattr(v, "grad_fn", None) is None for v in out)


# ---------------------------------------------------------------------------------------------
# GG202: a subclass of a torch.nn layer (not named ...Module) updating its running statistics in a method

GG202_BAD = '''\
import torch
import torch.nn as nn


class MyBatchNorm(nn.BatchNorm1d):
    def _update(self, mean, var, f):
        self.running_mean = f * mean + (1 - f) * self.running_mean
        self.running_var = f * var + (1 - f) * self.running_var

    def forward(self, input):
        if self.training:
            mean = input.mean(0)
            var = input.var(0, unbiased=False)
            self._update(mean, var, self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        return (input - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
'''
GG202_GOOD = GG202_BAD.replace("            self._update(mean, var, self.momentum)\n",
                               "            with torch.no_grad():\n                self._update(mean, var, self.momentum)\n")
# the same class reached through other imports of torch.nn
GG202_FORMS = {
    "nn": lambda s: s,
    "torch.nn": lambda s: s.replace("import torch.nn as nn\n", "").replace("(nn.BatchNorm1d)", "(torch.nn.BatchNorm1d)"),
    "from torch.nn": lambda s: s.replace("import torch.nn as nn\n", "from torch.nn import BatchNorm1d as BN\n")
                                .replace("(nn.BatchNorm1d)", "(BN)"),
    "renamed": lambda s: s.replace("MyBatchNorm", "Stat").replace("_update", "ema").replace("input", "h"),
}


@pytest.mark.parametrize("form", sorted(GG202_FORMS))
def test_gg202_a_torch_layer_subclass_updating_its_buffers_from_the_graph(form):
    bad, good = GG202_FORMS[form](GG202_BAD), GG202_FORMS[form](GG202_GOOD)
    assert len(_lines(bad, "GG202")) == 2
    assert _lines(good, "GG202") == []
    # run: the reported class's buffer holds a graph after training steps, the twin's does not
    for source, kept in ((bad, True), (good, False)):
        scope: dict = {}
        exec(compile(source, "<test>", "exec"), scope)
        layer = next(v for k, v in scope.items() if isinstance(v, type) and issubclass(v, torch.nn.BatchNorm1d)
                     and v is not torch.nn.BatchNorm1d)(3)
        model = torch.nn.Sequential(torch.nn.Linear(2, 3), layer)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(5, 2)).pow(2).mean().backward()
            opt.step()
        assert (layer.running_mean.grad_fn is not None) == kept


# ---------------------------------------------------------------------------------------------
# GG201: a moving average of the loss kept as a tensor (GradBench c108's shape), and the fix's operand

GG201_EMA_BAD = '''\
import torch


class Agent:
    def __init__(self, net, alpha=0.5):
        self.net = net
        self.opt = torch.optim.SGD(net.parameters(), lr=0.1)
        self.alpha = alpha
        self.ema = None

    def train(self, batches):
        for x, y in batches:
            loss = ((self.net(x) - y) ** 2).mean()
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()
            if self.ema is None:
                self.ema = loss.item()
            else:
                self.ema = self.alpha * self.ema + (1 - self.alpha) * loss
        return self.ema


def fit(net, batches, opt, a):
    avg = 0.0
    for x, y in batches:
        n = x.size(0)
        loss = ((net(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = a * avg + (1 - a) * loss
    return float(avg)


def fit_weighted(net, batches, opt):
    seen = 0.0
    for x, y in batches:
        n = x.size(0)
        loss = ((net(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen = seen + n * loss
    print(f"{seen}")
    return float(seen)
'''
GG201_EMA_GOOD = GG201_EMA_BAD.replace("(1 - self.alpha) * loss\n", "(1 - self.alpha) * loss.item()\n") \
    .replace("(1 - a) * loss\n", "(1 - a) * loss.item()\n").replace("n * loss\n", "n * loss.item()\n")


def test_gg201_a_moving_average_of_the_loss_tensor_is_a_running_total():
    assert len(_lines(GG201_EMA_BAD, "GG201")) == 3
    assert _lines(GG201_EMA_GOOD, "GG201") == []
    renamed = GG201_EMA_BAD.replace("ema", "smooth").replace("avg", "m").replace("alpha", "beta")
    assert len(_lines(renamed, "GG201")) == 3


def _batches():
    torch.manual_seed(1)
    return [(torch.randn(4, 2), torch.randn(4, 1)) for _ in range(3)]


def test_gg201_moving_average_keeps_the_graph_and_the_fix_cuts_only_the_loss():
    from gradguard.lint.autofix import fix_source

    torch.manual_seed(0)
    net = torch.nn.Linear(2, 1)
    agent = _run(GG201_EMA_BAD, "Agent", net)
    assert agent.train(_batches()).grad_fn is not None  # the average holds the graph (what GG201 says)
    torch.manual_seed(0)
    twin = _run(GG201_EMA_GOOD, "Agent", torch.nn.Linear(2, 1))
    assert not isinstance(twin.train(_batches()), torch.Tensor)
    fixed = fix_source(GG201_EMA_BAD).text
    assert _lines(fixed, "GG201") == [_lines(GG201_EMA_BAD, "GG201")[0]]  # the attribute's average: no fix offered
    for name in ("fit", "fit_weighted"):
        results = []
        for source in (fixed, GG201_EMA_GOOD):
            torch.manual_seed(0)
            net = torch.nn.Linear(2, 1)
            args = (net, _batches(), torch.optim.SGD(net.parameters(), lr=0.1)) + ((0.3,) if name == "fit" else ())
            results.append(_run(source, name, *args))
        assert results[0] == pytest.approx(results[1], rel=1e-12)  # the fixed program runs as the twin does


# ---------------------------------------------------------------------------------------------
# GG104: timm's NativeScaler call (the step happens inside `loss_scaler(..., update_grad=...)`) in one
# branch, a plain backward/step in the other; each branch's division is its own

GG104_GOOD = '''\
import torch


def train_one_epoch(model, criterion, loader, optimizer, loss_scaler, update_freq, use_amp):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        if use_amp:
            loss /= update_freq
            loss_scaler(loss, optimizer, parameters=model.parameters(), update_grad=(step + 1) % update_freq == 0)
            if (step + 1) % update_freq == 0:
                optimizer.zero_grad()
        else:
            loss /= update_freq
            loss.backward()
            if (step + 1) % update_freq == 0:
                optimizer.step()
                optimizer.zero_grad()
'''
_SCALED = "            loss /= update_freq\n            loss_scaler("
_PLAIN = "            loss /= update_freq\n            loss.backward()"
GG104_BAD = {"scaler branch": GG104_GOOD.replace(_SCALED, "            loss_scaler("),
             "plain branch": GG104_GOOD.replace(_PLAIN, "            loss.backward()")}


class _NativeScaler:
    """The shape of timm's NativeScaler, without a GradScaler: backward, and a step when asked."""

    def __call__(self, loss, optimizer, parameters=None, update_grad=True):
        loss.backward()
        if update_grad:
            optimizer.step()


def _epoch(source, use_amp, k=2):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    start = [p.detach().clone() for p in model.parameters()]
    loader = [(torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)) for _ in range(4)]
    scope: dict = {}
    exec(compile(source, "<test>", "exec"), scope)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scope["train_one_epoch"](model, torch.nn.MSELoss(), loader, opt, _NativeScaler(), k, use_amp)
    # float64 reference: each window's step applies the mean gradient of its k micro-batches
    ref = torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        for p, s in zip(ref.parameters(), start):
            p.copy_(s)
    for w in range(0, len(loader), k):
        ref.zero_grad()
        x = torch.cat([b[0] for b in loader[w:w + k]])
        y = torch.cat([b[1] for b in loader[w:w + k]])
        torch.nn.MSELoss()(ref(x), y).backward()
        with torch.no_grad():
            for p in ref.parameters():
                p -= 0.1 * p.grad
    return all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(model.parameters(), ref.parameters()))


@pytest.mark.parametrize("branch", sorted(GG104_BAD))
def test_gg104_a_division_in_the_other_branch_does_not_scale_this_one(branch):
    from gradguard.lint.autofix import fix_source

    bad = GG104_BAD[branch]
    assert len(_lines(bad, "GG104")) == 1
    renamed = bad.replace("loss_scaler", "amp").replace("update_freq", "k").replace("optimizer", "o")
    assert len(_lines(renamed, "GG104")) == 1
    use_amp = branch == "scaler branch"
    assert not _epoch(bad, use_amp)  # negative control: the window applies k times the mean gradient
    fixed = fix_source(bad, select=["GG104"]).text
    assert _lines(fixed, "GG104") == [] and _epoch(fixed, use_amp)


def test_gg104_silent_where_each_branch_divides_and_both_train_to_the_reference():
    assert _lines(GG104_GOOD, "GG104") == []
    assert _epoch(GG104_GOOD, True) and _epoch(GG104_GOOD, False)


# ---------------------------------------------------------------------------------------------
# GG104 / GG105: the division inside a small loss function bound to a name (`loss_fn = lambda ...: ... / K`)

LAMBDA_GOOD = '''\
import torch
import torch.nn.functional as F


def train(model, loader, opt, K):
    loss_fn = lambda out, y: F.mse_loss(out, y) / K
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        if (i + 1) % K == 0:
            opt.step()
            opt.zero_grad()
'''
LAMBDA_BAD = {
    "GG104": LAMBDA_GOOD.replace("F.mse_loss(out, y) / K", "F.mse_loss(out, y)"),
    "GG105": LAMBDA_GOOD.replace("F.mse_loss(out, y) / K", "F.mse_loss(out, y) / (i % K + 1)"),
}
# the same computation through a keyword-only backward call of a framework object (`booster.backward(loss=...)`)
KEYWORD_GOOD = '''\
import torch.nn.functional as F


def train(model, loader, opt, K, booster):
    for i, (x, y) in enumerate(loader):
        loss = F.mse_loss(model(x), y)
        booster.backward(loss=loss / K, optimizer=opt)
        if (i + 1) % K == 0:
            opt.step()
            opt.zero_grad()
'''


class _Booster:
    def backward(self, loss, optimizer):
        loss.backward()


def _windows(source, k=2, n=4):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    start = [p.detach().clone() for p in model.parameters()]
    loader = [(torch.randn(3, 3, dtype=torch.float64), torch.randn(3, 1, dtype=torch.float64)) for _ in range(n)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    args = (model, loader, opt, k) + ((_Booster(),) if "booster" in source else ())
    _run(source, "train", *args)
    ref = [s.clone() for s in start]
    for w in range(0, n, k):  # float64: each step applies the mean gradient of its window
        x = torch.cat([b[0] for b in loader[w:w + k]]).requires_grad_(False)
        y = torch.cat([b[1] for b in loader[w:w + k]])
        wt, bs = (r.clone().requires_grad_(True) for r in ref)
        F = torch.nn.functional
        F.mse_loss(F.linear(x, wt, bs), y).backward()
        ref = [wt.detach() - 0.1 * wt.grad, bs.detach() - 0.1 * bs.grad]
    return all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(model.parameters(), ref))


def test_lambda_loss_divided_by_the_window_is_silent_and_exact():
    for source in (LAMBDA_GOOD, LAMBDA_GOOD.replace("loss_fn", "crit").replace("out, y", "pred, target")
                   .replace("(out, y)", "(pred, target)"), KEYWORD_GOOD):
        assert [f for f in gg.lint_source(source) if f.code in ("GG104", "GG105")] == []
        assert _windows(source)


@pytest.mark.parametrize("code", sorted(LAMBDA_BAD))
def test_lambda_loss_not_divided_or_divided_by_the_counter_is_reported_and_fixed(code):
    from gradguard.lint.autofix import fix_source

    bad = LAMBDA_BAD[code]
    assert len(_lines(bad, code)) == 1 and not _windows(bad)  # negative control: not the window's mean
    fixed = fix_source(bad, select=[code], unsafe=True).text
    assert _lines(fixed, code) == [] and _windows(fixed)


def test_keyword_loss_of_a_framework_backward_is_read():
    bad = KEYWORD_GOOD.replace("loss=loss / K", "loss=loss")
    assert len(_lines(bad, "GG104")) == 1 and not _windows(bad)


# ---------------------------------------------------------------------------------------------
# GG201: a per-epoch total returned to the caller with the loss cut on some paths only, and an
# evaluation loop (model.eval(), no no_grad) whose only pass differentiates the input (an attack)

GG201_LOOPS_BAD = '''\
import torch
import torch.nn.functional as F


def train(loader, model, criterion, optimizer, distributed=False):
    loss_epoch = 0
    for step, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        if distributed:
            loss = loss.data.clone()
        loss_epoch += loss
    return loss_epoch


def perturb(model, x, y, eps):
    delta = torch.zeros_like(x, requires_grad=True)
    F.cross_entropy(model(x + delta), y).backward()
    return (eps * delta.grad.sign()).detach()


def robust_eval(model, batches, criterion):
    model.eval()
    total, n = 0, 0
    for x, y in batches:
        delta = perturb(model, x, y, 0.1)
        robust_loss = criterion(model(x + delta), y)
        total += robust_loss * y.size(0)
        n += y.size(0)
    return float(total / n)


def main(loader, model, criterion, optimizer, epochs):
    for epoch in range(epochs):
        loss_epoch = train(loader, model, criterion, optimizer)
        print(f"epoch {epoch}: {loss_epoch / len(loader)}")
'''
GG201_LOOPS_GOOD = GG201_LOOPS_BAD.replace("loss_epoch += loss\n", "loss_epoch += loss.item()\n") \
    .replace("total += robust_loss * y.size(0)", "total += robust_loss.item() * y.size(0)")


@pytest.mark.xfail(strict=True, reason='reverted: reading losses cut on some paths only and losses no pass frees as GG201 totals (with a wider moving-average reading) drew 28 false findings on the second fresh held-out set of real code (docs/benchmarks.md); the published shapes stay unreported until a narrower reading holds there')
def test_gg201_totals_of_losses_no_pass_frees_or_cut_on_one_path_only():
    assert len(_lines(GG201_LOOPS_BAD, "GG201")) == 2
    assert _lines(GG201_LOOPS_GOOD, "GG201") == []
    # (the evaluation loss is still found by its name, as the evaluation-loop rule does: `robust_loss` kept)
    renamed = GG201_LOOPS_BAD.replace("loss_epoch", "acc").replace("total", "s").replace("perturb", "pgd") \
        .replace("robust_eval", "check").replace("distributed", "ddp")
    assert len(_lines(renamed, "GG201")) == 2
    # the cut on every path is no finding (the same loop without the `if`)
    always = GG201_LOOPS_GOOD.replace("loss_epoch += loss.item()\n", "loss_epoch += loss\n").replace(
        "        if distributed:\n            loss = loss.data.clone()\n", "        loss = loss.data.clone()\n")
    assert _lines(always, "GG201") == []


def test_gg201_the_reported_totals_hold_a_graph_and_the_twins_do_not():
    torch.manual_seed(0)
    batches = [(torch.randn(4, 3), torch.randint(0, 2, (4,))) for _ in range(3)]
    for source, kept in ((GG201_LOOPS_BAD, True), (GG201_LOOPS_GOOD, False)):
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        total = _run(source, "train", batches, model, torch.nn.functional.cross_entropy, opt)
        assert (getattr(total, "grad_fn", None) is not None) == kept
        scope: dict = {}
        exec(compile(source.replace("return float(total / n)", "return total"), "<test>", "exec"), scope)
        total = scope["robust_eval"](model, batches, torch.nn.functional.cross_entropy)
        assert (getattr(total, "grad_fn", None) is not None) == kept
