"""Faults and misuse: never a silent wrong window, a half-changed state or a misleading error.

Every test compares against the plain-PyTorch float64 reference of ``reference.py``.
"""

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import gradguard as gg
from gradguard.microbatches import accumulate_batch
from reference import CaptureOptimizer, full_batch_grads, rel_error


class _FailingBackward(torch.autograd.Function):
    """Identity whose backward raises once when armed: an out-of-memory error in the middle of a backward pass.

    Gradients of the layers after it (the head) have already landed in .grad when it raises.
    """

    armed = False

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        if _FailingBackward.armed:
            _FailingBackward.armed = False
            raise torch.OutOfMemoryError("out of memory inside backward (injected)")
        return g


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(3, 4), nn.Linear(4, 1)

    def forward(self, x):
        return self.head(_FailingBackward.apply(torch.tanh(self.body(x))))


def _data(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 3, generator=g, dtype=torch.float64), torch.randn(n, 1, generator=g, dtype=torch.float64)) for n in sizes]


def _mse(model, x, y):
    return nn.functional.mse_loss(model(x), y)


def _window_reference(model, batches):
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    return full_batch_grads(model, _mse(model, x, y))


# ---------------------------------------------------------------- backward failing halfway
def test_failed_backward_mid_window_discards_the_window_instead_of_counting_twice():
    torch.manual_seed(0)
    model = _Net().double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 5, 3, 4])
    acc.backward(_mse(model, *data[0]), count=2)
    acc.step()
    _FailingBackward.armed = True
    with pytest.raises(gg.GradguardError, match="failed halfway.*window was discarded") as info:
        acc.backward(_mse(model, *data[1]), count=5)
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)
    assert all(p.grad is None for p in model.parameters()) and acc.micro_step == 0 and acc.skipped_windows == 1
    # Training goes on with a clean window: exact.
    for x, y in data[2:]:
        acc.backward(_mse(model, x, y), count=len(x))
        acc.step()
    assert len(opt.captured) == 1
    assert rel_error(opt.captured[0], _window_reference(model, data[2:])) < 1e-12


def test_failed_first_backward_of_a_window_is_undone_and_a_retry_is_exact():
    torch.manual_seed(0)
    model = _Net().double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 5])
    _FailingBackward.armed = True
    with pytest.raises(torch.OutOfMemoryError):
        acc.backward(_mse(model, *data[0]), count=2)
    assert all(p.grad is None for p in model.parameters())  # the head's partial gradient is gone
    for x, y in data:  # retry the same micro-batch, then the next
        acc.backward(_mse(model, x, y), count=len(x))
        acc.step()
    assert rel_error(opt.captured[0], _window_reference(model, data)) < 1e-12
    # Negative control: the reference really differs from a window that counts the head's part twice.
    doubled = [g.clone() for g in opt.captured[0]]
    doubled[2] = doubled[2] * 1.5
    assert rel_error(doubled, _window_reference(model, data)) > 0.1


# ---------------------------------------------------------------- accumulate_batch and other leaves
@pytest.mark.parametrize("oom_above", [None, 4])
def test_accumulate_batch_normalises_a_trainable_tensor_outside_the_model(oom_above):
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    prompt = torch.zeros(3, dtype=torch.float64, requires_grad=True)  # a learned prompt, not in model.parameters()
    x, y = torch.randn(16, 3, dtype=torch.float64), torch.randn(16, 1, dtype=torch.float64)

    def loss_fn(m, b):
        if oom_above is not None and len(b[0]) > oom_above:
            torch.empty(2**62, dtype=torch.uint8)  # a real CPU allocation failure
        return nn.functional.mse_loss(m(b[0] + prompt), b[1])

    want = torch.autograd.grad(nn.functional.mse_loss(model(x + prompt), y), [prompt, *model.parameters()])
    result = accumulate_batch(model, loss_fn, (x, y), micro_batch_size=8 if oom_above else 1)
    assert result.retries == (1 if oom_above else 0)
    got = [prompt.grad, *[p.grad for p in model.parameters()]]
    assert rel_error(got, list(want)) < 1e-12


@pytest.mark.slow
def test_accumulate_batch_retries_a_real_cpu_out_of_memory():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    x, y = torch.randn(10, 3, dtype=torch.float64), torch.randn(10, 1, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="DefaultCPUAllocator: can't allocate memory"):
        torch.empty(2**62, dtype=torch.uint8)  # what the retry must recognise

    def loss_fn(m, b):
        if len(b[0]) > 2:
            torch.empty(2**62, dtype=torch.uint8)
        return nn.functional.mse_loss(m(b[0]), b[1])

    result = accumulate_batch(model, loss_fn, (x, y), micro_batch_size=8)
    assert (result.micro_batch_size, result.retries) == (2, 2)
    want = full_batch_grads(model, nn.functional.mse_loss(model(x), y))
    assert rel_error([p.grad for p in model.parameters()], want) < 1e-12


# ---------------------------------------------------------------- load_state_dict
def _mid_window():
    torch.manual_seed(0)
    model = nn.Linear(3, 2).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acc = gg.Accumulator(opt, steps=4)
    for x, y in _data([2, 3]):
        acc.backward(nn.functional.mse_loss(model(x), y.expand(-1, 2)), count=len(x))
        acc.step()
    return model, acc, acc.state_dict()


_BAD_FIELDS = [
    ("grads", []), ("micro", 99), ("micro", -1), ("micro", 2.5), ("micro", "2"), ("total", -5), ("total", math.nan),
    ("ref", -1), ("ref", 0), ("optimizer_steps", -1), ("skipped_windows", 1.5), ("has_backward", 1), ("counted", None),
    ("normalised", "no"), ("ref_hint", math.inf), ("loss_sum", torch.zeros(2)), ("steps", "4"),
]


@pytest.mark.parametrize("key, value", _BAD_FIELDS, ids=[f"{k}={v!r}"[:30] for k, v in _BAD_FIELDS])
def test_load_state_dict_refuses_states_that_cannot_be_right_and_changes_nothing(key, value):
    model, acc, sd = _mid_window()
    grads = [p.grad.clone() for p in model.parameters()]
    with pytest.raises(gg.GradguardError, match=repr(value)[:8].replace("(", r"\(").replace("[", r"\[") if key != "grads" else "gradients for 0"):
        acc.load_state_dict(dict(sd, **{key: value}))
    assert acc.micro_step == 2 and acc.state_dict()["total"] == 5
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))


@pytest.mark.parametrize("bad_grad", ["nan", "complex"])
def test_load_state_dict_refuses_nan_or_complex_gradients(bad_grad):
    model, acc, sd = _mid_window()
    g0 = sd["grads"][0].clone()
    g0 = g0 * math.nan if bad_grad == "nan" else g0.to(torch.complex128)
    with pytest.raises(gg.GradguardError, match="NaN or Inf" if bad_grad == "nan" else "complex128"):
        acc.load_state_dict(dict(sd, grads=[g0] + sd["grads"][1:]))


def test_load_state_dict_is_all_or_nothing():
    model, acc, sd = _mid_window()
    first = model.weight.grad.clone()
    new0 = torch.full_like(sd["grads"][0], 7.0)
    broken = torch.empty(sd["grads"][1].shape, device="meta", dtype=torch.float64)  # cannot be converted
    with pytest.raises(gg.GradguardError, match="meta"):
        acc.load_state_dict(dict(sd, grads=[new0, broken]))
    assert torch.equal(model.weight.grad, first)  # the first gradient was not replaced


def test_steps_of_the_wrong_type_and_a_newer_format_get_their_own_messages():
    model, acc, sd = _mid_window()
    with pytest.raises(gg.GradguardError, match=r"steps is '4'.*must be an int"):
        acc.load_state_dict(dict(sd, steps="4"))
    with pytest.raises(gg.GradguardError, match=r"format 'gradguard.Accumulator/2'.*another gradguard version"):
        acc.load_state_dict(dict(sd, format="gradguard.Accumulator/2"))


# ---------------------------------------------------------------- a loss that reaches none of the parameters
def test_loss_of_another_model_is_refused():
    torch.manual_seed(0)
    mine, other = nn.Linear(3, 1).double(), nn.Linear(3, 1).double()
    before = [p.detach().clone() for p in mine.parameters()]
    acc = gg.Accumulator(torch.optim.SGD(mine.parameters(), lr=0.1), steps=2)
    for x, y in _data([2, 3]):
        acc.backward(_mse(other, x, y), count=len(x))
        if acc.micro_step == 1:
            with pytest.raises(gg.GradguardError, match="reach none of the optimizer's parameters"):
                acc.step()
        else:
            acc.step()
    assert acc.optimizer_steps == 0 and acc.micro_step == 0
    assert all(torch.equal(p, q) for p, q in zip(mine.parameters(), before))


def test_loss_of_another_model_is_refused_with_zeroed_gradients_too():
    """set_to_none=False: gradients stay as zero tensors; an unchanged one still counts as not reached."""
    torch.manual_seed(0)
    mine, other = nn.Linear(3, 1).double(), nn.Linear(3, 1).double()
    acc = gg.Accumulator(torch.optim.SGD(mine.parameters(), lr=0.1), steps=1, set_to_none=False)
    (x, y), = _data([2])
    acc.backward(_mse(mine, x, y), count=2)
    assert acc.step() is True  # leaves zero tensors in .grad
    acc.backward(_mse(other, x, y), count=2)
    with pytest.raises(gg.GradguardError, match="reach(ed)? none"):
        acc.step()


# ---------------------------------------------------------------- a scheduler raising after the step
def test_scheduler_failing_after_the_optimizer_step_still_closes_the_window():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    opt = CaptureOptimizer(model.parameters())
    for group in opt.param_groups:
        group["lr"] = 0.1
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=1, cycle_momentum=False)
    acc = gg.Accumulator(opt, steps=2, scheduler=sched)
    data = _data([2, 3, 4, 1, 5, 2])
    acc.backward(_mse(model, *data[0]), count=2)
    acc.step()
    acc.backward(_mse(model, *data[1]), count=3)
    acc.step()  # the scheduler's one step
    acc.backward(_mse(model, *data[2]), count=4)
    acc.step()
    acc.backward(_mse(model, *data[3]), count=1)
    with pytest.raises(ValueError, match="total number of steps|total steps"):
        acc.step()  # OneCycleLR past its last step, after the optimizer stepped
    assert acc.optimizer_steps == 2 and acc.micro_step == 0 and all(p.grad is None for p in model.parameters())
    sched.step = lambda: None  # the user fixes the schedule; the next window is its own
    for x, y in data[4:]:
        acc.backward(_mse(model, x, y), count=len(x))
        acc.step()
    assert len(opt.captured) == 3
    assert rel_error(opt.captured[2], _window_reference(model, data[4:])) < 1e-12


# ---------------------------------------------------------------- fp16 count ratios, huge counts
def test_fp16_count_ratio_does_not_overflow_the_scaled_loss():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).half()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    (x1, y1), (x2, y2) = _data([2, 6])
    counts = (1, 500_000)
    for (x, y), n in zip(((x1, y1), (x2, y2)), counts):
        acc.backward(nn.functional.mse_loss(model(x.half()), y.half()), count=n)
        acc.step()
    ref = model.double()
    want = [(counts[0] * a + counts[1] * b) / sum(counts) for a, b in zip(
        full_batch_grads(ref, _mse(ref, x1, y1)), full_batch_grads(ref, _mse(ref, x2, y2)))]
    got = [g.double() for g in opt.captured[0]]
    assert all(torch.isfinite(g).all() for g in got)
    assert rel_error(got, want) < 1e-2  # fp16


def test_counts_above_int64_are_exact():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 3, 4, 5])
    counts = (10**20, 3 * 10**20, 10**20, 10**20)
    for (x, y), n in zip(data, counts):
        acc.backward(_mse(model, x, y), count=n)
        acc.step()
    for w, (a, b) in enumerate(((0, 2), (2, 4))):
        want = [(float(counts[a]) * g1 + float(counts[b - 1]) * g2) / float(counts[a] + counts[b - 1]) for g1, g2 in zip(
            full_batch_grads(model, _mse(model, *data[a])), full_batch_grads(model, _mse(model, *data[b - 1])))]
        assert rel_error(opt.captured[w], want) < 1e-12
    assert acc.optimizer_steps == 2
    with pytest.raises(gg.GradguardError, match="finite number"):
        acc.backward(_mse(model, *data[0]), count=10**400)


# ---------------------------------------------------------------- constructor and call misuse
def test_misuse_at_construction_gets_clear_errors():
    model = nn.Linear(3, 1)
    opt, other = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(gg.GradguardError, match="scaler must be a torch.amp.GradScaler or None, got True"):
        gg.Accumulator(opt, steps=2, scaler=True)
    with pytest.raises(gg.GradguardError, match="scheduler belongs to another optimizer"):
        gg.Accumulator(opt, steps=2, scheduler=torch.optim.lr_scheduler.StepLR(other, 1))
    with pytest.raises(gg.GradguardError, match="LBFGS.step\\(\\) needs a closure"):
        gg.Accumulator(torch.optim.LBFGS(model.parameters()), steps=2)


def test_a_complex_loss_is_refused_with_nothing_changed():
    w = torch.ones(2, dtype=torch.complex64, requires_grad=True)
    acc = gg.Accumulator(torch.optim.SGD([w], lr=0.1), steps=2)
    with pytest.raises(gg.GradguardError, match=r"loss is complex \(torch.complex64\).*loss.abs\(\)"):
        acc.backward((w * 2).sum(), count=1)
    assert w.grad is None and acc.micro_step == 0
    acc.backward((w * 2).sum().abs(), count=1)  # the real loss it asks for goes through
    assert w.grad is not None


def test_backward_under_no_grad_works_like_loss_backward():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 5])
    for x, y in data:
        loss = _mse(model, x, y)
        with torch.no_grad():
            acc.backward(loss, count=len(x))
        acc.step()
    assert rel_error(opt.captured[0], _window_reference(model, data)) < 1e-12


# ---------------------------------------------------------------- non-finite loss, default mode
def test_nonfinite_loss_raises_at_the_window_end_naming_it_with_nothing_applied():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    acc = gg.Accumulator(opt, steps=3, scheduler=sched)
    data = _data([2, 3, 4, 2, 3, 4])
    for i, (x, y) in enumerate(data[:3]):
        loss = _mse(model, x, y) * (math.nan if i == 1 else 1.0)
        acc.backward(loss, count=len(x))  # no check (and no host read) here
        if i < 2:
            acc.step()
    with pytest.raises(gg.GradguardError, match=r"loss is nan at micro-batch 1 of window 0.*nothing was applied"):
        acc.step()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert all(p.grad is None for p in model.parameters()) and opt.state_dict()["state"] == {}
    assert sched.last_epoch == 0 and acc.optimizer_steps == 0 and acc.skipped_windows == 1
    # The run continues: the next window is exact.
    want = _window_reference(model, data[3:])
    capture = []
    opt.register_step_pre_hook(lambda o, *_: capture.append([p.grad.clone() for p in model.parameters()]))
    for x, y in data[3:]:
        acc.backward(_mse(model, x, y), count=len(x))
        acc.step()
    assert acc.optimizer_steps == 1 and rel_error(capture[0], want) < 1e-12


# ---------------------------------------------------------------- round two: state, window end, reach
def _run_window(acc, model, batches, loss=_mse):
    for x, y in batches:
        acc.backward(loss(model, x, y), count=len(x))
        stepped = acc.step()
    return stepped


def test_a_window_saved_after_a_nan_loss_still_raises_after_resume():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acc = gg.Accumulator(opt, steps=3)
    data = _data([2, 3, 4])
    acc.backward(_mse(model, *data[0]), count=2)
    acc.step()
    acc.backward(_mse(model, *data[1]) * math.nan, count=3)
    acc.step()
    saved = torch.load(_roundtrip(acc.state_dict()), weights_only=True)
    resumed = gg.Accumulator(opt, steps=3)
    resumed.load_state_dict(saved)
    resumed.backward(_mse(model, *data[2]), count=4)
    with pytest.raises(gg.GradguardError, match="non-finite loss.*nothing was applied"):
        resumed.step()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert resumed.optimizer_steps == 0 and resumed.skipped_windows == 1


def _roundtrip(sd):
    import io

    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return buf


class _InterruptedStep(CaptureOptimizer):
    """Ctrl-C (or an out-of-memory error) while the optimizer step starts, once."""

    def __init__(self, params, exc):
        super().__init__(params)
        self.exc = exc

    def step(self, closure=None):
        if self.exc is not None:
            exc, self.exc = self.exc, None
            raise exc
        return super().step(closure)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), torch.OutOfMemoryError("out of memory (injected)")],
                         ids=["ctrl-c", "oom"])
def test_an_interrupted_window_end_is_undone_and_the_loop_cannot_merge_into_it(exc):
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    opt = _InterruptedStep(model.parameters(), exc)
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 5, 3, 1])
    acc.backward(_mse(model, *data[0]), count=2)
    acc.step()
    acc.backward(_mse(model, *data[1]), count=5)
    grads = [p.grad.clone() for p in model.parameters()]
    with pytest.raises(type(exc)):
        acc.step()
    # The multiply is undone: .grad and the state are as before the call (to rounding).
    assert rel_error([p.grad for p in model.parameters()], grads) < 1e-15
    assert acc.micro_step == 1 and acc.optimizer_steps == 0
    # The loop goes on with the next micro-batch: refused, nothing merged into the pending window.
    with pytest.raises(gg.GradguardError, match=r"end of this window .*raised.*call acc.step\(\) again"):
        acc.backward(_mse(model, *data[2]), count=3)
    assert acc.step() is True  # the retried end, exact
    assert _run_window(acc, model, data[2:]) is True
    assert rel_error(opt.captured[0], _window_reference(model, data[:2])) < 1e-12
    assert rel_error(opt.captured[1], _window_reference(model, data[2:])) < 1e-12


@pytest.mark.parametrize("ending", ["step", "flush"])
def test_ctrl_c_right_after_the_normalising_multiply_then_retry_applies_the_factor_once(ending, monkeypatch):
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2 if ending == "step" else 3)
    data = _data([2, 5])
    real_mul = torch._foreach_mul_

    def mul_then_interrupt(*args, **kwargs):  # Ctrl-C lands right after the multiply returns
        real_mul(*args, **kwargs)
        monkeypatch.setattr(torch, "_foreach_mul_", real_mul)
        raise KeyboardInterrupt

    acc.backward(_mse(model, *data[0]), count=2)
    acc.step()
    acc.backward(_mse(model, *data[1]), count=5)
    if ending == "flush":
        acc.step()
    monkeypatch.setattr(torch, "_foreach_mul_", mul_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        acc.step() if ending == "step" else acc.flush()
    assert torch._foreach_mul_ is real_mul  # the interrupt really came from the normalising multiply
    assert acc.flush() is True
    want = _window_reference(model, data)
    assert rel_error(opt.captured[0], want) < 1e-12
    # Negative control: the factor applied twice is far off (2 and 5 items: factor 7/(2*2)... squared).
    assert rel_error([g * (2 * acc.steps / 7) for g in opt.captured[0]], want) > 0.1


def test_a_failed_step_after_clipping_discards_the_window_with_a_clear_error():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    opt = _InterruptedStep(model.parameters(), torch.OutOfMemoryError("out of memory (injected)"))
    acc = gg.Accumulator(opt, steps=2, max_grad_norm=1e6)  # clipping rewrites .grad: not undoable
    data = _data([2, 5, 3, 1])
    acc.backward(_mse(model, *data[0]), count=2)
    acc.step()
    acc.backward(_mse(model, *data[1]), count=5)
    with pytest.raises(gg.GradguardError, match="OutOfMemoryError.*window was discarded") as info:
        acc.step()
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)
    assert all(p.grad is None for p in model.parameters()) and acc.micro_step == 0 and acc.skipped_windows == 1
    assert _run_window(acc, model, data[2:]) is True
    assert rel_error(opt.captured[0], _window_reference(model, data[2:])) < 1e-12


def test_a_micro_batch_whose_loss_reaches_no_parameter_is_refused_at_the_window_end():
    torch.manual_seed(0)
    mine, other = nn.Linear(3, 1).double(), nn.Linear(3, 1).double()
    before = [p.detach().clone() for p in mine.parameters()]
    opt = CaptureOptimizer(mine.parameters())
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 5, 3, 1])
    acc.backward(_mse(mine, *data[0]), count=2)
    acc.step()
    acc.backward(_mse(other, *data[1]), count=5)  # the wrong model's loss: its 5 items would dilute the window
    with pytest.raises(gg.GradguardError, match="micro-batch 1 of window 0 reached none of the optimizer's parameters"):
        acc.step()
    assert opt.captured == [] and all(torch.equal(p, q) for p, q in zip(mine.parameters(), before))
    assert acc.micro_step == 0 and acc.skipped_windows == 1 and all(p.grad is None for p in mine.parameters())
    assert _run_window(acc, mine, data[2:]) is True
    assert rel_error(opt.captured[0], _window_reference(mine, data[2:])) < 1e-12


class TwoBranches(nn.Module):
    """Two branches; a micro-batch can use both or only the second."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(3, 1).double(), nn.Linear(3, 1).double()

    def forward(self, x, both=True):
        return self.first(x) + self.second(x) if both else self.second(x)


def test_once_every_pass_reaches_one_parameter_only_it_stays_hooked_and_a_pass_that_misses_it_is_still_exact():
    # One hook per pass in the steady state; a pass that misses the hooked parameter (here: only
    # the second branch) is decided from its loss's graph, and every parameter is hooked again.
    torch.manual_seed(0)
    model = TwoBranches()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 5, 3, 4, 6, 1])
    for x, y in data[:2]:  # a window in which every pass reaches every parameter
        acc.backward(F.mse_loss(model(x), y), count=len(x))
        acc.step()
    assert len(acc._hook_handles) == 4
    x, y = data[2]
    acc.backward(F.mse_loss(model(x), y), count=len(x))
    assert len(acc._hook_handles) == 1  # the next window starts with one parameter hooked
    acc.step()
    x, y = data[3]
    acc.backward(F.mse_loss(model(x, both=False), y), count=len(x))  # misses the hooked parameter
    assert len(acc._hook_handles) == 4
    assert acc.step()
    # Reference: plain PyTorch, float64, the window's two micro-batches as one batch.
    ref = TwoBranches()
    ref.load_state_dict(model.state_dict())  # SGD-free capture: the parameters never moved
    (x2, y2), (x3, y3) = data[2], data[3]
    loss = (F.mse_loss(ref(x2), y2, reduction="sum") + F.mse_loss(ref(x3, both=False), y3, reduction="sum")) / (len(x2) + len(x3))
    loss.backward()
    assert rel_error(opt.captured[1], [p.grad for p in ref.parameters()]) < 1e-12


@pytest.mark.parametrize("set_to_none", [True, False])
def test_the_hooked_parameter_is_heard_whether_autograd_makes_its_grad_or_adds_to_it_in_place(set_to_none):
    # set_to_none=True: each window's first pass makes a new .grad tensor, the next add to it in
    # place; set_to_none=False: zero_grad zeroes it in place and every pass adds to it. Either way
    # a pass that reaches the one hooked parameter must be heard: no fall back to the graph, no
    # re-hooking, and every window exact.
    torch.manual_seed(0)
    model = TwoBranches()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2, set_to_none=set_to_none)
    data = _data([2, 5, 3, 4, 6, 1, 2, 3])
    _run_window(acc, model, data[:2])
    sentinel = None
    for k in (2, 4, 6):
        for x, y in data[k:k + 2]:
            acc.backward(_mse(model, x, y), count=len(x))
            assert len(acc._hook_handles) == 1 and (sentinel is None or acc._sentinel is sentinel)
            sentinel = acc._sentinel
            acc.step()
        assert rel_error(opt.captured[-1], _window_reference(model, data[k:k + 2])) < 1e-12
    assert len(opt.captured) == 4


def test_a_pass_that_misses_the_one_hooked_parameter_and_reaches_no_other_is_refused():
    torch.manual_seed(0)
    model, other = TwoBranches(), nn.Linear(3, 1).double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 5, 3, 4])
    for x, y in data[:3]:
        acc.backward(F.mse_loss(model(x), y), count=len(x))
        acc.step()
    assert len(acc._hook_handles) == 1  # the window under test runs with one parameter hooked
    x, y = data[3]
    acc.backward(F.mse_loss(other(x), y), count=len(x))  # the wrong model's loss
    with pytest.raises(gg.GradguardError, match="micro-batch 1 of window 1 reached none of the optimizer's parameters"):
        acc.step()
    assert len(opt.captured) == 1 and acc.skipped_windows == 1


def _one_hooked(acc, model, data):
    """Two windows on ``model``: the Accumulator then hooks one parameter only."""
    _run_window(acc, model, data[:2])
    _run_window(acc, model, data[2:4])
    assert len(acc._hook_handles) == 1


@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("position", [0, 1])
def test_a_loss_reaching_no_parameter_is_refused_wherever_it_falls_in_a_window_with_one_parameter_hooked(set_to_none, position):
    # With one parameter hooked, a loss from another model misses it in a window's first pass (with
    # set_to_none=False a zeroed .grad is already there) as in a later one: decided from its graph.
    torch.manual_seed(0)
    model, other = TwoBranches(), nn.Linear(3, 1).double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2, set_to_none=set_to_none)
    data = _data([2, 5, 3, 4, 6, 1])
    _one_hooked(acc, model, data)
    for i, (x, y) in enumerate(data[4:]):
        acc.backward(F.mse_loss((other if i == position else model)(x), y), count=len(x))
        if i == 0:
            acc.step()
    with pytest.raises(gg.GradguardError, match=f"micro-batch {position} of window 2 reached none of the optimizer's parameters"):
        acc.step()
    assert len(opt.captured) == 2 and acc.skipped_windows == 1


def test_a_grad_replaced_by_hand_mid_window_is_refused_and_hides_no_loss_that_reaches_nothing():
    # A .grad put there by hand mid-window (even with the same values) is not the Accumulator's doing:
    # the window's end refuses the window (whatever the later pass reached), nothing applied; the
    # windows after it are exact.
    torch.manual_seed(0)
    model, other = TwoBranches(), nn.Linear(3, 1).double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 5, 3, 4, 6, 1, 2, 3])
    _one_hooked(acc, model, data)
    acc.backward(_mse(model, *data[4]), count=len(data[4][0]))
    acc.step()
    acc._sentinel.grad = acc._sentinel.grad.clone()  # by hand, the same values
    acc.backward(_mse(other, *data[5]), count=len(data[5][0]))  # reaches none of the optimizer's parameters
    with pytest.raises(gg.GradguardError, match="was replaced by another tensor after the backward"):
        acc.step()
    assert len(opt.captured) == 2 and acc.skipped_windows == 1 and all(p.grad is None for p in model.parameters())
    # Control: the same loop without the replacement is exact.
    acc.backward(_mse(model, *data[6]), count=len(data[6][0]))
    acc.step()
    acc.backward(_mse(model, *data[7]), count=len(data[7][0]))
    assert acc.step()
    assert rel_error(opt.captured[-1], _window_reference(model, data[6:8])) < 1e-12


def test_a_failed_first_pass_with_one_parameter_hooked_is_undone_and_the_retry_is_exact():
    torch.manual_seed(0)
    model = _Net().double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 5, 3, 4, 6, 1])
    _one_hooked(acc, model, data)
    _FailingBackward.armed = True  # the head's gradients land, then the pass raises
    with pytest.raises(torch.OutOfMemoryError):
        acc.backward(_mse(model, *data[4]), count=len(data[4][0]))
    assert all(p.grad is None for p in model.parameters())
    for x, y in data[4:]:
        acc.backward(_mse(model, x, y), count=len(x))
        assert len(acc._hook_handles) == 1  # every pass heard to reach the hooked parameter
        acc.step()
    assert rel_error(opt.captured[-1], _window_reference(model, data[4:])) < 1e-12


def test_a_loss_reaching_parameters_outside_the_optimizer_is_reported_once():
    torch.manual_seed(0)
    body, head = nn.Linear(3, 4).double(), nn.Linear(4, 1).double()
    model = nn.Sequential(body, head)
    acc = gg.Accumulator(torch.optim.SGD(body.parameters(), lr=0.1), steps=2)
    head_opt = torch.optim.SGD(head.parameters(), lr=0.1)  # a second optimizer, stepped by hand
    data = _data([2, 5])
    with pytest.warns(UserWarning, match=r"2 tensors requiring grad \(shapes \(1, 4\), \(1,\)\) that are not in the Accumulator's optimizer"):
        acc.backward(_mse(model, *data[0]), count=2)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per Accumulator
        acc.step()
        acc.backward(_mse(model, *data[1]), count=5)
        acc.step()
    head_opt.zero_grad()
    # Negative control: one optimizer over every parameter gets no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc2 = gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.1), steps=2)
        acc2.backward(_mse(model, *data[0]), count=2)


# ---------------------------------------------------------------- counts and states that cannot be right
def test_a_meta_count_of_a_summed_loss_is_refused_at_backward_with_the_state_untouched():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    data = _data([2, 5, 3, 1])
    sse = lambda m, x, y: ((m(x) - y) ** 2).sum()  # noqa: E731
    acc.backward(sse(model, *data[0]), count=torch.tensor(2), reduction="sum")
    acc.step()
    grads = [p.grad.clone() for p in model.parameters()]
    with pytest.raises(gg.GradguardError, match="count is a meta tensor"):
        acc.backward(sse(model, *data[1]), count=torch.tensor(5, device="meta"), reduction="sum")
    assert acc.micro_step == 1 and all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    acc.backward(sse(model, *data[1]), count=torch.tensor(5), reduction="sum")
    assert acc.step() is True
    assert _run_window(acc, model, data[2:]) is True  # not stuck
    assert rel_error(opt.captured[0], _window_reference(model, data[:2])) < 1e-12
    assert rel_error(opt.captured[1], _window_reference(model, data[2:])) < 1e-12


@pytest.mark.parametrize("count, reduction", [
    (__import__("fractions").Fraction(3, 1), "mean"),
    (torch.tensor(3.0, device="meta"), "mean"),
])
def test_a_fraction_or_meta_count_gets_a_gradguard_error_naming_it(count, reduction):
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    acc = gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.1), steps=2)
    with pytest.raises(gg.GradguardError, match="Fraction\\(3, 1\\)" if not isinstance(count, torch.Tensor) else "meta"):
        acc.backward(_mse(model, *_data([3])[0]), count=count, reduction=reduction)
    assert acc.micro_step == 0 and all(p.grad is None for p in model.parameters())


_CONTRADICTIONS = [
    ("grads=[None, None] with total=5", lambda sd: dict(sd, grads=[None, None]), "total"),
    ("total=0 with gradients in flight", lambda sd: dict(sd, total=0), "total"),
    ("ref=None with gradients in flight", lambda sd: dict(sd, ref=None), "ref"),
    ("loss_sum=None with items", lambda sd: dict(sd, loss_sum=None), "loss_sum"),
    ("ref a Fraction", lambda sd: dict(sd, ref=__import__("fractions").Fraction(5, 2)), "Fraction"),
    ("total a Fraction", lambda sd: dict(sd, total=__import__("fractions").Fraction(5)), "Fraction"),
    ("loss_sum on meta", lambda sd: dict(sd, loss_sum=torch.zeros((), device="meta", dtype=torch.float64)), "meta"),
    ("bad on meta", lambda sd: dict(sd, bad=torch.zeros((), device="meta", dtype=torch.bool)), "meta"),
    ("last_loss on meta", lambda sd: dict(sd, last_loss=torch.zeros((), device="meta")), "meta"),
]


@pytest.mark.parametrize("name, corrupt, blamed", _CONTRADICTIONS, ids=[c[0] for c in _CONTRADICTIONS])
def test_load_state_dict_refuses_self_contradicting_states(name, corrupt, blamed):
    model, acc, sd = _mid_window()
    grads = [p.grad.clone() for p in model.parameters()]
    with pytest.raises(gg.GradguardError, match=blamed):
        acc.load_state_dict(corrupt(sd))
    assert acc.micro_step == 2 and acc.state_dict()["total"] == 5
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    acc.load_state_dict(sd)  # the uncorrupted state still loads (negative control)


def test_a_window_saved_after_a_micro_batch_that_reached_nothing_is_still_refused_after_resume():
    torch.manual_seed(0)
    mine, other = nn.Linear(3, 1).double(), nn.Linear(3, 1).double()
    before = [p.detach().clone() for p in mine.parameters()]
    opt = CaptureOptimizer(mine.parameters())
    acc = gg.Accumulator(opt, steps=3)
    data = _data([2, 5, 3])
    acc.backward(_mse(mine, *data[0]), count=2)
    acc.step()
    acc.backward(_mse(other, *data[1]), count=5)
    acc.step()
    saved = torch.load(_roundtrip(acc.state_dict()), weights_only=True)
    assert saved["unreached"] == 1
    resumed = gg.Accumulator(opt, steps=3)
    resumed.load_state_dict(saved)
    resumed.backward(_mse(mine, *data[2]), count=3)
    with pytest.raises(gg.GradguardError, match="micro-batch 1 of window 0 reached none"):
        resumed.step()
    assert opt.captured == [] and all(torch.equal(p, q) for p, q in zip(mine.parameters(), before))
