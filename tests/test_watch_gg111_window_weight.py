"""GG111 from the weight of each pass in its window, whatever divided it and whatever a clearing threw away.

Two classes the watch missed on generated programs:

* **divided twice** (``loss / K`` and ``p.grad /= K`` before the step): every full window weighs each pass
  1/K² (GG113), and the final partial window of K' passes, weighted the same, applies K'/K of what a full
  window applies. GG111 knew a full window only as K passes of 1/K each; it now takes the largest window
  whose passes each weigh 1/(K·m) for a whole m, and reports a shorter one weighted the same.
* **a clearing before every micro-batch** (GG102) with ``loss / K`` and a remainder: each step applies one
  pass (the others were discarded), so no step showed K passes of 1/K and the final window of one pass,
  divided by K, was never seen as short. The passes a clearing discarded in a step interval now count in
  that interval's window.

Truth in float64 without the watch (plain PyTorch): the last step applies K'/K of its window's mean
(divided once) or K'/K² of it (divided twice). Forms: inline, helpers, a trainer's method. Twins: the
divided-twice loop on whole windows (GG113 only), the remainder divided by its own size (clean), the
clearing before every micro-batch with a remainder divided by its own size (GG102 only).
"""

import pytest
import torch

from _watch_harness import run_recording_steps

K = 3


def _data(n):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(2, 6, generator=g, dtype=torch.float64), torch.randn(2, 3, generator=g, dtype=torch.float64))
            for _ in range(n)]


def _loss(m, x, y, d):
    return ((m(x) - y) ** 2).sum(dim=1).mean() / d


def _divide(model, by):
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= by


# --- divided twice: the loss by K and the gradients by K, the remainder too

def twice_inline(model, opt, data, own):
    n = len(data)
    for i, (x, y) in enumerate(data):
        _loss(model, x, y, K).backward()
        if (i + 1) % K == 0 or i + 1 == n:
            _divide(model, K)
            opt.step()
            opt.zero_grad()


def _flush(net, o, d):
    torch._foreach_div_([q.grad for q in net.parameters()], d)
    o.step()
    o.zero_grad()


def twice_helpers(model, opt, data, own):
    c = 0
    for a, b in data:
        _loss(model, a, b, K).backward()
        c += 1
        if c == K:
            _flush(model, opt, K)
            c = 0
    if c:
        _flush(model, opt, K)


class Twice:
    def __init__(self, net, o, own):
        self.net, self.o, self.own = net, o, own

    def fit(self, batches):
        for s in range(0, len(batches), K):
            for a, b in batches[s:s + K]:
                _loss(self.net, a, b, K).backward()
            for q in self.net.parameters():
                q.grad.div_(K)
            self.o.step()
            self.o.zero_grad()


def twice_method(model, opt, data, own):
    Twice(model, opt, own).fit(data)


# --- a clearing before every micro-batch (GG102), loss / K (own: / the window's own size)

def every_inline(model, opt, data, own):
    n = len(data)
    for i, (x, y) in enumerate(data):
        opt.zero_grad()
        size = min(K, n - i // K * K) if own else K
        _loss(model, x, y, size).backward()
        if i % K == K - 1 or i + 1 == n:
            opt.step()


def _reset(net):
    for q in net.parameters():
        q.grad = None


def every_helpers(model, opt, data, own):
    c = 0
    rest = len(data) % K
    for j, (a, b) in enumerate(data):
        _reset(model)
        d = rest if own and j >= len(data) - rest else K
        _loss(model, a, b, d).backward()
        c += 1
        if c == K:
            opt.step()
            c = 0
    if c:
        opt.step()


class Every:
    def __init__(self, net, o, own):
        self.net, self.o, self.own = net, o, own

    def fit(self, batches):
        for s in range(0, len(batches), K):
            window = batches[s:s + K]
            for a, b in window:
                self.net.zero_grad()
                _loss(self.net, a, b, len(window) if self.own else K).backward()
            self.o.step()


def every_method(model, opt, data, own):
    Every(model, opt, own).fit(data)


TWICE = {"inline": twice_inline, "helpers": twice_helpers, "method": twice_method}
EVERY = {"inline": every_inline, "helpers": every_helpers, "method": every_method}


def _run(fn, n, own, watch=True):
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    findings, applied, weights = run_recording_steps(fn, model, opt, _data(n), own, watch=watch)
    return (None if findings is None else sorted({(f.code, f.step) for f in findings})), applied, weights


def _mean(weights, rows):
    model = torch.nn.Linear(6, 3).double()
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(w)
    _loss(model, torch.cat([x for x, _ in rows]), torch.cat([y for _, y in rows]), 1).backward()
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize("rest", [1, 2])
@pytest.mark.parametrize("form", sorted(TWICE))
def test_a_remainder_divided_twice_by_the_full_k_is_gg111(form, rest):
    n = 3 * K + rest
    _, applied, weights = _run(TWICE[form], n, False, watch=False)
    for a, m in zip(applied[-1], _mean(weights[-1], _data(n)[3 * K:])):  # the truth: K'/K² of its mean
        torch.testing.assert_close(a, m * rest / K ** 2)
    found, _, _ = _run(TWICE[form], n, False)
    assert found == [("GG111", 4), ("GG113", 1)], form


@pytest.mark.parametrize("form", sorted(TWICE))
def test_divided_twice_on_whole_windows_is_gg113_alone(form):
    _, applied, weights = _run(TWICE[form], 3 * K, False, watch=False)
    for a, m in zip(applied[-1], _mean(weights[-1], _data(3 * K)[2 * K:])):  # 1/K of the mean, every window
        torch.testing.assert_close(a, m / K)
    found, _, _ = _run(TWICE[form], 3 * K, False)
    assert found == [("GG113", 1)], form


@pytest.mark.parametrize("form", sorted(EVERY))
def test_a_short_last_window_after_windows_cleared_on_every_micro_batch_is_gg111(form):
    n = 3 * K + 1
    _, applied, weights = _run(EVERY[form], n, False, watch=False)
    last = _data(n)[3 * K:]
    for a, m in zip(applied[-1], _mean(weights[-1], last)):  # the truth: 1/K of its (one-pass) mean
        torch.testing.assert_close(a, m / K)
    found, _, _ = _run(EVERY[form], n, False)
    assert ("GG111", 4) in found, form
    assert {code for code, _ in found} == {"GG102", "GG111"}, found


@pytest.mark.parametrize("form", sorted(EVERY))
def test_the_same_clearing_with_the_remainder_divided_by_its_size_is_gg102_alone(form):
    n = 3 * K + 1
    _, applied, weights = _run(EVERY[form], n, True, watch=False)
    for a, m in zip(applied[-1], _mean(weights[-1], _data(n)[3 * K:])):  # negative control: the mean
        torch.testing.assert_close(a, m)
    found, _, _ = _run(EVERY[form], n, True)
    assert {code for code, _ in found} == {"GG102"}, found


def once_on_loss(model, opt, data, own):
    n = len(data)
    for i, (x, y) in enumerate(data):
        _loss(model, x, y, min(K, n - i // K * K)).backward()
        if (i + 1) % K == 0 or i + 1 == n:
            opt.step()
            opt.zero_grad()


def once_on_gradients(model, opt, data, own):
    c = 0
    for a, b in data:
        _loss(model, a, b, 1).backward()
        c += 1
        if c == K:
            _flush(model, opt, K)
            c = 0
    if c:
        _flush(model, opt, c)


class Once(Twice):
    def fit(self, batches):
        for s in range(0, len(batches), K):
            window = batches[s:s + K]
            for a, b in window:
                _loss(self.net, a, b, len(window)).backward()
            self.o.step()
            self.o.zero_grad()


def once_method(model, opt, data, own):
    Once(model, opt, own).fit(data)


ONCE = {"loss": once_on_loss, "gradients": once_on_gradients, "method": once_method}


@pytest.mark.parametrize("form", sorted(ONCE))
def test_divided_once_by_each_windows_own_size_is_clean(form):
    n = 3 * K + 2
    _, applied, weights = _run(ONCE[form], n, True, watch=False)
    for a, m in zip(applied[-1], _mean(weights[-1], _data(n)[3 * K:])):  # negative control: the mean
        torch.testing.assert_close(a, m)
    found, _, _ = _run(ONCE[form], n, True)
    assert found == [], form
