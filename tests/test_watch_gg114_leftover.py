"""GG114 for a leftover window: an epoch that ends inside an accumulation window, with the step counter reset for
the next epoch, leaves its partial window's gradient in ``.grad``; the next epoch's first step applies K + r
passes each divided by K.

Each program runs in float64; what each step applied is compared with the window's mean computed by plain
PyTorch over the same batches (the leak makes it (K + r)/K of the mean over its K + r batches), beside
negative controls: the remainder stepped with its own divisor, windows whose size changes with their divisor,
and two windows of passes in one step.
"""

import torch
import torch.nn.functional as F

from _watch_harness import run_recording_steps

K = 3


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def _batches(n=7):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randint(0, 3, (4,), generator=g))
            for _ in range(n)]


def _leaky(model, opt, batches, epochs=3):
    # the update counter restarts every epoch; the epoch's last, partial window never steps nor clears
    for _ in range(epochs):
        count = K - 1
        for batch in batches:
            update = count == 0
            (F.cross_entropy(model(batch[0]), batch[1]) / K).backward()
            if update:
                opt.step()
                opt.zero_grad()
            count = K if update else count
            count -= 1


def _fixed(model, opt, batches, epochs=3):
    # the epoch's remainder is a window of its own, divided by its own size
    last = len(batches) - len(batches) % K
    for _ in range(epochs):
        for i, batch in enumerate(batches):
            size = K if i < last else len(batches) - last
            (F.cross_entropy(model(batch[0]), batch[1]) / size).backward()
            if (i + 1) % K == 0 or i == len(batches) - 1:
                opt.step()
                opt.zero_grad()


def _mean_grad(weights, batches):
    """Plain PyTorch, float64: the gradient of the mean loss over ``batches`` (equal sizes) at ``weights``."""
    model, _ = _model()
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(w)
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    return torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters()))


def test_the_next_epochs_first_step_applying_the_leftover_is_reported_there():
    batches = _batches()
    model, opt = _model()
    findings, applied, weights = run_recording_steps(_leaky, model, opt, batches)
    leaks = [f for f in findings if f.code == "GG114"]
    assert [f.step for f in leaks] == [3], findings
    assert "4 backward passes" in leaks[0].message and "4/3 of the mean" in leaks[0].message
    # The finding is true: step 3 applied 4/3 of the mean gradient over the leftover batch and the next 3
    # (it ran at the weights step 2 left, which the leftover's pass also saw)
    mean = _mean_grad(weights[2], [batches[6]] + batches[:3])
    for got, want in zip(applied[2], mean):
        torch.testing.assert_close(got, want * 4 / 3)
    # and the first two steps were exact windows of 3 (nothing to report there)
    for got, want in zip(applied[0], _mean_grad(weights[0], batches[:3])):
        torch.testing.assert_close(got, want)


def test_the_remainder_stepped_with_its_own_divisor_is_silent():
    # Negative control: the fixed loop; every step applies the mean over its own window
    batches = _batches()
    model, opt = _model()
    findings, applied, weights = run_recording_steps(_fixed, model, opt, batches)
    assert [f for f in findings if f.code == "GG114"] == [], findings
    for got, want in zip(applied[3], _mean_grad(weights[3], batches[:3])):  # epoch 2's first window
        torch.testing.assert_close(got, want)


def test_windows_divided_by_their_own_sizes_are_silent():
    # Negative control: windows of 3, 3, 4 passes, each loss divided by its own window's size: exact
    batches = _batches(10)
    model, opt = _model()

    def loop(model, opt, batches):
        start = 0
        for size in (3, 3, 4):
            for batch in batches[start:start + size]:
                (F.cross_entropy(model(batch[0]), batch[1]) / size).backward()
            opt.step()
            opt.zero_grad()
            start += size

    findings, applied, weights = run_recording_steps(loop, model, opt, batches)
    assert findings == []
    for got, want in zip(applied[2], _mean_grad(weights[2], batches[6:])):
        torch.testing.assert_close(got, want)


def test_two_windows_in_one_step_are_not_a_leftover():
    # Negative control for the reading's bound: 6 passes of 1/3 in one step are not K + r with r < K
    batches = _batches(9)
    model, opt = _model()

    def loop(model, opt, batches):
        for i, batch in enumerate(batches):
            (F.cross_entropy(model(batch[0]), batch[1]) / K).backward()
            if i in (2, 8):
                opt.step()
                opt.zero_grad()

    findings, _, _ = run_recording_steps(loop, model, opt, batches)
    assert [f for f in findings if f.code == "GG114"] == []
