"""The Accumulator refuses a window whose in-flight gradients something else changed, and handles the rest exactly.

A ``zero_grad()`` left at the top of a hand loop ported to the Accumulator keeps only each
window's last micro-batch and divides it by the whole window's count (115 % off on the
issue's example, silently). Every clearing or in-place edit of ``.grad`` between a window's
passes, or between its last pass and its step, is now a :class:`GradguardError` raised before
anything is applied; the same code before a window's first pass (where there is nothing to
lose) stays exact. Each case is compared with plain PyTorch, full batch, in float64
(``reference.py``), or with the parameters from before the window, bit for bit.
"""

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import gradguard as gg
from reference import CaptureOptimizer, rel_error

STEPS = 3
EQUAL = [4, 4, 4, 4, 4, 4]
UNEQUAL = [2, 7, 3, 5, 1, 6]


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).double()


def _data(sizes, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 3, generator=g, dtype=torch.float64), torch.randn(n, 1, generator=g, dtype=torch.float64)) for n in sizes]


def _reference(model, batches, frozen=()):
    """float64 full batch: the gradient of the mean loss over every item of ``batches`` (zeros where frozen)."""
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    skip = [any(p is f for f in frozen) for p in model.parameters()]
    model = copy.deepcopy(model).requires_grad_(True)  # (whatever is frozen now: a constant has no gradient)
    grads = torch.autograd.grad(F.mse_loss(model(x), y), list(model.parameters()))
    return [torch.zeros_like(g) if s else g for g, s in zip(grads, skip)]


def _clear_all(set_to_none):
    def clear(opt, model):
        opt.zero_grad(set_to_none=set_to_none)
    return clear


def _module_zero_grad(opt, model):
    model.zero_grad()


def _zero_in_place(opt, model):
    for p in model.parameters():
        if p.grad is not None:
            p.grad.zero_()


def _one_to_none(opt, model):
    model[2].weight.grad = None


def _one_doubled(opt, model):
    if model[0].bias.grad is not None:
        model[0].bias.grad.mul_(2)


CHANGES = {
    "zero_grad(set_to_none=True)": _clear_all(True),
    "zero_grad(set_to_none=False)": _clear_all(False),
    "model.zero_grad()": _module_zero_grad,
    "p.grad.zero_()": _zero_in_place,
    "p.grad = None": _one_to_none,
    "p.grad.mul_(2)": _one_doubled,
}
_NONE = "was (set to None|replaced by another tensor)"  # replaced: a later pass made a new one
WHAT = {
    "zero_grad(set_to_none=True)": _NONE,
    "zero_grad(set_to_none=False)": "was changed in place",
    "model.zero_grad()": _NONE,
    "p.grad.zero_()": "was changed in place",
    "p.grad = None": _NONE,
    "p.grad.mul_(2)": "was changed in place",
}


def _run(acc, model, batches, change, position):
    """One window; ``change`` runs before the backward of micro-batch ``position`` (STEPS: before the last step)."""
    for i, (x, y) in enumerate(batches):
        if i == position:
            change(acc.optimizer, model)
        acc.backward(F.mse_loss(model(x), y), count=len(x))
        if i == STEPS - 1 and position == STEPS:
            change(acc.optimizer, model)
        acc.step()


@pytest.mark.parametrize("sizes", [EQUAL, UNEQUAL], ids=["equal", "unequal"])
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_before_a_windows_first_pass_loses_nothing_and_every_window_is_exact(change, set_to_none, sizes):
    model = _model()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=STEPS, set_to_none=set_to_none)
    data = _data(sizes)
    for k in (0, STEPS):
        _run(acc, model, data[k:k + STEPS], CHANGES[change], position=0)
    assert acc.optimizer_steps == 2 and acc.skipped_windows == 0
    for got, k in zip(opt.captured, (0, STEPS)):
        assert rel_error(got, _reference(model, data[k:k + STEPS])) < 1e-12


@pytest.mark.parametrize("sizes", [EQUAL, UNEQUAL], ids=["equal", "unequal"])
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("position", range(1, STEPS + 1))
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_to_a_windows_gradients_between_its_passes_is_refused_before_any_update(change, position, set_to_none, sizes):
    # A real optimizer: a step would move the parameters. The window after the refused one is exact.
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    acc = gg.Accumulator(opt, steps=STEPS, set_to_none=set_to_none)
    data = _data(sizes + sizes)
    _run(acc, model, data[:STEPS], lambda *_: None, position=0)  # a window that steps (momentum state exists)
    before = copy.deepcopy(model.state_dict())
    state = copy.deepcopy(opt.state_dict())
    # Refused when the window ends (one read of .grad per window, none per micro-batch), at its step.
    with pytest.raises(gg.GradguardError, match=f"{WHAT[change]} after the backward\\(\\) of micro-batch 0 of window 1 and "
                                                "before acc.step\\(\\) that ends the window at "
                                                ".*test_accumulate_self_checks.py:\\d+"):
        _run(acc, model, data[STEPS:2 * STEPS], CHANGES[change], position)
    for name, t in model.state_dict().items():
        assert torch.equal(t, before[name]), name  # bit for bit: nothing was applied
    assert str(opt.state_dict()) == str(state)
    assert acc.optimizer_steps == 1 and acc.skipped_windows == 1 and acc.micro_step == 0
    # Training goes on: the next window (a fresh one) is exact.
    ref_model = copy.deepcopy(model)
    capture = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(capture, steps=STEPS, set_to_none=set_to_none)
    _run(acc, model, data[2 * STEPS:3 * STEPS], lambda *_: None, position=0)
    assert rel_error(capture.captured[0], _reference(ref_model, data[2 * STEPS:3 * STEPS])) < 1e-12


def test_the_refused_loop_is_far_off_without_the_check():
    # Why it must be refused: the same loop, with the clearing taken as harmless, applies the last
    # micro-batch of the window divided by the whole window's count. (A control on what the tests
    # above guard against: the reference tells that apart by far.)
    model = _model()
    data = _data(UNEQUAL[:STEPS])
    ref = _reference(model, data)
    x, y = data[-1]
    last = torch.autograd.grad(F.mse_loss(model(x), y) * len(x) / sum(UNEQUAL[:STEPS]), list(model.parameters()))
    assert rel_error(list(last), ref) > 0.3


def test_one_micro_batch_per_window_may_clear_before_each_backward():
    # steps=1: every micro-batch is a window's first, so a zero_grad() at the top loses nothing.
    model = _model()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=1)
    data = _data(UNEQUAL)
    for x, y in data:
        opt.zero_grad()
        acc.backward(F.mse_loss(model(x), y), count=len(x))
        assert acc.step()
    for got, batch in zip(opt.captured, data):
        assert rel_error(got, _reference(model, [batch])) < 1e-12


def test_a_hook_that_changes_the_gradient_inside_backward_is_the_passs_own():
    # Negative control: what happens to .grad during a pass (a post-accumulate-grad hook, a tensor
    # hook) is part of that pass, not a change between passes.
    model = _model()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=STEPS)
    data = _data(UNEQUAL[:STEPS])
    seen = []
    handle = model[0].weight.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad._version))
    for x, y in data:
        acc.backward(F.mse_loss(model(x), y), count=len(x))
        acc.step()
    handle.remove()
    assert len(seen) == STEPS and acc.skipped_windows == 0
    assert rel_error(opt.captured[0], _reference(model, data)) < 1e-12


def test_a_refused_window_names_the_parameter_of_the_model():
    model = _model()
    acc = gg.Accumulator(CaptureOptimizer(model.parameters()), steps=STEPS, model=model)
    (x0, y0), (x1, y1) = _data([2, 3])
    acc.backward(F.mse_loss(model(x0), y0), count=2)
    acc.step()
    model[2].weight.grad = None
    acc.backward(F.mse_loss(model(x1), y1), count=3)
    acc.step()
    with pytest.raises(gg.GradguardError, match=r"parameter '2.weight' \(shape \(1, 4\), position 2 in the optimizer's param_groups\) .* before acc.flush"):
        acc.flush()


# ------------------------------------------------------------ requires_grad changed
@pytest.mark.parametrize("when", [1, 2])
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("frozen", [0, 1, 2, 3])
def test_a_parameter_frozen_between_windows_gets_no_gradient_and_the_rest_stay_exact(frozen, set_to_none, when):
    # Frozen after the first window, the first parameter was about to be hooked alone (every pass had
    # reached it): the next window's first backward() raised torch's "cannot register a hook"
    # RuntimeError. Frozen after the second, it was the one hooked parameter.
    model = _model()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=STEPS, set_to_none=set_to_none)
    data = _data(UNEQUAL * 2)
    p = list(model.parameters())[frozen]
    for k in range(4):
        if k == when:
            p.requires_grad_(False)
        _run(acc, model, data[k * STEPS:(k + 1) * STEPS], lambda *_: None, position=0)
    assert acc.optimizer_steps == 4
    for k, got in enumerate(opt.captured):
        assert rel_error(got, _reference(model, data[k * STEPS:(k + 1) * STEPS], frozen=[p] if k >= when else [])) < 1e-12
        if k >= when:
            assert got[frozen] is None or not got[frozen].any()


def test_a_parameter_unfrozen_between_windows_is_heard_and_exact():
    # Only the head trains at first; then the head is frozen and the body unfrozen: the body's
    # parameters were never hooked, and a pass reaching only them is no "reached nothing".
    model = _model()
    body, head = list(model[0].parameters()), list(model[2].parameters())
    for p in body:
        p.requires_grad_(False)
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=STEPS)
    data = _data(UNEQUAL * 2)
    for k in range(4):
        if k == 2:
            for p in body:
                p.requires_grad_(True)
            for p in head:
                p.requires_grad_(False)
        _run(acc, model, data[k * STEPS:(k + 1) * STEPS], lambda *_: None, position=0)
    for k, got in enumerate(opt.captured):
        assert rel_error(got, _reference(model, data[k * STEPS:(k + 1) * STEPS], frozen=body if k < 2 else head)) < 1e-12


def test_a_parameter_frozen_in_the_middle_of_a_window_keeps_what_the_earlier_passes_gave_it():
    # The losses computed after the freeze do not depend on it: the window's full-batch gradient is
    # its earlier micro-batches' share over the whole window's count, which is what is applied.
    model = _model()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=STEPS)
    data = _data(UNEQUAL)
    _run(acc, model, data[:STEPS], lambda *_: None, position=0)  # a window first: one parameter hooked
    w = model[0].weight
    for i, (x, y) in enumerate(data[STEPS:]):
        if i == 1:
            w.requires_grad_(False)
        acc.backward(F.mse_loss(model(x), y), count=len(x))
        acc.step()
    w.requires_grad_(True)
    # Reference: float64, one batch, the frozen micro-batches' losses built with w as a constant.
    params = list(model.parameters())
    total = sum(len(x) for x, _ in data[STEPS:])
    loss = 0
    for i, (x, y) in enumerate(data[STEPS:]):
        h = F.linear(x, w if i < 1 else w.detach(), model[0].bias)
        loss = loss + F.mse_loss(model[2](torch.tanh(h)), y, reduction="sum")
    ref = torch.autograd.grad(loss / total, params)
    assert rel_error(opt.captured[1], list(ref)) < 1e-12


# ------------------------------------------------------------ a state saved already normalised
class _FailingStep(CaptureOptimizer):
    """Records the gradients handed to step(), then fails: the window's end is undone."""

    @torch.no_grad()
    def step(self, closure=None):
        super().step()
        raise RuntimeError("step failed (injected)")


def _normalised_state(model, data, steps):
    """A mid-window state as an earlier gradguard saved it after a failed flush(): .grad already multiplied
    by the window's end factor (read here from what the optimizer was handed) and normalised=True."""
    opt = _FailingStep(model.parameters())
    acc = gg.Accumulator(opt, steps=steps)
    for x, y in data:
        acc.backward(F.mse_loss(model(x), y), count=len(x))
        acc.step()
    with pytest.raises(RuntimeError, match="injected"):
        acc.flush()
    state = copy.deepcopy(acc.state_dict())
    state["grads"] = opt.captured[0]
    state["normalised"] = True
    for p in model.parameters():
        p.grad = None  # a restarted process
    return state


@pytest.mark.parametrize("then", ["flush", "more micro-batches"])
def test_a_state_saved_normalised_in_the_middle_of_a_window_resumes_exactly(then):
    # Before, it was accepted as it was, and micro-batches added after the load were summed into a
    # gradient already divided by the earlier count, then not normalised again (1.9e-2 off here).
    model = _model()
    data = _data([2, 7, 3, 5])
    state = _normalised_state(model, data[:2], steps=4)
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=4)
    acc.load_state_dict(state)
    if then == "flush":
        assert acc.flush()
        window = data[:2]
    else:
        for x, y in data[2:]:
            acc.backward(F.mse_loss(model(x), y), count=len(x))
            stepped = acc.step()
        assert stepped
        window = data
    assert rel_error(opt.captured[0], _reference(model, window)) < 1e-12


def test_a_state_saved_normalised_over_no_items_is_refused_with_nothing_changed():
    model = _model()
    state = _normalised_state(model, _data([2, 7]), steps=4)
    state.update(total=0, loss_sum=None, ref=None, grads=[None] * 4, last_loss=None)
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=4)
    x, y = _data([3])[0]
    acc.backward(F.mse_loss(model(x), y), count=3)
    grads = [p.grad.clone() for p in model.parameters()]
    with pytest.raises(gg.GradguardError, match="already normalised .* total=0.*Nothing was loaded"):
        acc.load_state_dict(state)
    assert acc.micro_step == 0 and all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))



@pytest.mark.parametrize("same_values", [True, False])
def test_a_grad_replaced_with_no_pass_since_the_record_is_taken_only_when_it_holds_the_same_values(same_values):
    """No pass between the record (after a window's first pass) and the check: a .grad replaced by a tensor of
    equal values holds the window's sum (DDP's bucket rebuild does this), so the window steps exactly; a
    replacement with other values is refused, nothing applied."""
    model = _model()
    opt = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(opt, steps=1)
    (x, y), = _data([5])
    acc.backward(F.mse_loss(model(x), y), count=len(x))
    p = next(model.parameters())
    p.grad = p.grad.clone() if same_values else p.grad * 2
    if same_values:
        assert acc.step()
        assert rel_error(opt.captured[-1], _reference(model, [(x, y)])) < 1e-12
    else:
        with pytest.raises(gg.GradguardError, match="was replaced by another tensor"):
            acc.step()
        assert opt.captured == [] and acc.skipped_windows == 1


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("resume", [False, True])
def test_a_change_found_by_state_dict_is_refused_at_the_windows_end_live_or_resumed(change, resume):
    """Changed after micro-batch 0, saved after micro-batch 1: the window is refused at its end, once, nothing applied.

    ``resume``: the state (deep-copied, as ``torch.save`` would) is loaded into a new Accumulator, which records
    ``.grad`` afresh: the finding must travel in the state. The control: the same program without the change
    (saved and resumed the same way) applies the float64 full-batch gradient.
    """
    batches = _data(UNEQUAL[:STEPS])
    for changed in (False, True):
        model = _model()
        opt = CaptureOptimizer(model.parameters())
        acc = gg.Accumulator(opt, STEPS)
        before = [p.detach().clone() for p in model.parameters()]
        for i, (x, y) in enumerate(batches):
            if changed and i == 1:
                CHANGES[change](opt, model)
            acc.backward(F.mse_loss(model(x), y), count=len(x))
            if i < STEPS - 1:
                acc.step()
            if i == 1:
                state = copy.deepcopy(acc.state_dict())
                if resume:
                    acc = gg.Accumulator(opt, STEPS)
                    acc.load_state_dict(state)
        if not changed:
            acc.step()
            assert rel_error(opt.captured[-1], _reference(_model(), batches)) < 1e-12
            continue
        assert state["touched"] is not None  # what travels: the finding, named
        with pytest.raises(gg.GradguardError, match=WHAT[change] + r" after the backward\(\) of micro-batch 0 of window 0 "
                                                    r"and before acc\.state_dict\(\)"):
            acc.step()
        assert (acc.optimizer_steps, acc.skipped_windows) == (0, 1) and not opt.captured
        assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
        # The next window starts clean and is exact: nothing found twice.
        for x, y in batches:
            acc.backward(F.mse_loss(model(x), y), count=len(x))
            acc.step()
        assert acc.optimizer_steps == 1 and rel_error(opt.captured[-1], _reference(model, batches)) < 1e-12
