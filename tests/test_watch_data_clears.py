"""Clearings through ``.data`` between backward and step (GG102), judged in float64.

``p.grad.data.zero_()`` (``fill_(0)``, ``mul_(0)``) changes the buffer through a tensor with its own
version counter, so nothing the watch reads from versions shows it: the watch missed it. The truth of
each program is established without the watch: the gradient each step applies, against the mean
gradient of its window (plain PyTorch, full batch, float64). Every program is written in three forms
(inline, in a helper function, in a trainer class's method with other names); the verdict must not
change between them. Negative controls: the same programs without the clearing (GG101 or clean, as
the truth says), a one-off zeroing (a deliberate skip), and zeroing a frozen part on purpose.
"""

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg

K = 4


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()


def _batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (4,), generator=g))
            for _ in range(n)]


ZEROS = {
    "data_zero_": lambda g: g.data.zero_(),
    "data_fill_0": lambda g: g.data.fill_(0),
    "data_mul_0": lambda g: g.data.mul_(0),
}


# ---- three forms of one program: K micro-batches per step, a clearing written with ``wipe`` at ``where``
# where: "after_each" (after every backward), "before_step" (after the last backward, before step),
# "all_but_last" (after every backward but the window's last), None (no clearing), "before" (correct).

def inline_form(model, opt, batches, wipe, where, k):
    for i, (x, y) in enumerate(batches):
        if where == "before" and i % k == 0:
            for p in model.parameters():
                if p.grad is not None:
                    wipe(p.grad)
        (F.cross_entropy(model(x), y) / k).backward()
        last = (i + 1) % k == 0
        if where == "after_each" or (where == "all_but_last" and not last):
            for p in model.parameters():
                wipe(p.grad)
        if last:
            if where == "before_step":
                for p in model.parameters():
                    wipe(p.grad)
            opt.step()


def _clean(net, how):
    for w in net.parameters():
        if w.grad is not None:
            how(w.grad)


def helper_form(model, opt, batches, wipe, where, k):
    for i, (x, y) in enumerate(batches):
        if where == "before" and i % k == 0:
            _clean(model, wipe)
        (F.cross_entropy(model(x), y) / k).backward()
        last = (i + 1) % k == 0
        if where == "after_each" or (where == "all_but_last" and not last):
            _clean(model, wipe)
        if last:
            if where == "before_step":
                _clean(model, wipe)
            opt.step()


class Trainer:
    def __init__(self, net, o, wipe, where, k):
        self.net, self.o, self.how, self.at, self.k = net, o, wipe, where, k

    def scrub(self):
        for t in self.net.parameters():
            if t.grad is not None:
                self.how(t.grad)

    def fit(self, data):
        for j, (a, b) in enumerate(data):
            if self.at == "before" and j % self.k == 0:
                self.scrub()
            (F.cross_entropy(self.net(a), b) / self.k).backward()
            end = (j + 1) % self.k == 0
            if self.at == "after_each" or (self.at == "all_but_last" and not end):
                self.scrub()
            if end:
                if self.at == "before_step":
                    self.scrub()
                self.o.step()


def method_form(model, opt, batches, wipe, where, k):
    Trainer(model, opt, wipe, where, k).fit(batches)


FORMS = {"inline": inline_form, "helper": helper_form, "method": method_form}


def _run(form, wipe, where, k=K, windows=5, watch=True):
    """The findings (None without a watch) and, per step, the gradient it applied."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    applied = []
    orig = opt.step

    def step(*a, **kw):
        applied.append([None if p.grad is None else p.grad.clone() for p in model.parameters()])
        return orig(*a, **kw)

    opt.step = step
    batches = _batches(windows * k)
    if watch:
        with gg.watch(mode="record") as w:
            FORMS[form](model, opt, batches, wipe, where, k)
        return sorted({f.code for f in w.findings}), [min(f.step for f in w.findings if f.code == c)
                                                      for c in sorted({f.code for f in w.findings})], applied
    FORMS[form](model, opt, batches, wipe, where, k)
    return None, None, applied


def _window_means(k=K, windows=5):
    """Plain PyTorch, full batch, float64: the mean gradient of each window at the weights of the first
    step (the truth needs only the first window's; the later ones move with the bug's own updates)."""
    model = _model()
    batches = _batches(k)
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    F.cross_entropy(model(x), y).backward()
    return [p.grad for p in model.parameters()]


def _applies_the_mean(applied):
    return all(torch.allclose(a, m) for a, m in zip(applied[0], _window_means()))


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("zero", sorted(ZEROS))
@pytest.mark.parametrize("where", ["after_each", "before_step", "all_but_last"])
def test_a_clearing_through_data_inside_the_window_is_gg102_at_the_first_steps(form, zero, where):
    _, _, applied = _run(form, ZEROS[zero], where, watch=False)
    assert not _applies_the_mean(applied)  # the truth: the first step is not the window's mean
    codes, steps, _ = _run(form, ZEROS[zero], where)
    assert codes == ["GG102"], (form, zero, where)
    assert steps[0] <= 3  # as the version-visible clearings: by the third step interval


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("zero", sorted(ZEROS))
def test_a_clearing_through_data_before_the_window_is_correct(form, zero):
    codes, _, applied = _run(form, ZEROS[zero], "before")
    assert _applies_the_mean(applied)  # the truth: each step applies its window's mean
    assert codes == [], (form, zero)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_without_any_clearing_it_is_gg101_not_gg102(form):
    codes, _, applied = _run(form, ZEROS["data_zero_"], None)
    assert _applies_the_mean(applied)  # the first window is right; later ones carry stale gradient
    assert codes == ["GG101"], form


def test_a_one_off_zeroing_through_data_is_a_skip_not_a_finding():
    """A step whose gradient is zeroed once (a spike skipped on purpose) is not systematic: no GG102."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gg.watch(mode="record") as w:
        for i, (x, y) in enumerate(_batches(8)):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            if i == 2:
                for p in model.parameters():
                    p.grad.data.zero_()
            opt.step()
    assert [f.code for f in w.findings] == []


def test_zeroing_a_frozen_part_through_data_is_no_clearing():
    """Zeroing only some parameters' gradient (a part kept frozen) leaves the rest applied: no GG102."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    frozen = list(model[2].parameters())  # holds the smallest buffer: the one the watch observes
    with gg.watch(mode="record") as w:
        for x, y in _batches(8):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            for p in frozen:
                p.grad.data.zero_()
            opt.step()
    assert [f.code for f in w.findings] == []
