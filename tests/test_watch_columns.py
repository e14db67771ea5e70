"""The watch's columnar bookkeeping: findings whatever the parameter order, and no buffer kept alive.

The tracker keeps each optimizer's parameters as one run of its columns and
holds the ``.grad`` buffers last seen by strong reference. These tests pin what
that must not change: findings with parameter groups in another order than the
model's (nanoGPT's decay / no-decay split, a module's own ``zero_grad``), and
the memory a ``zero_grad`` frees.
"""

import gc
import linecache
import sys
import weakref
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradguard as gg


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 1))


def _split_groups(model):
    """nanoGPT's split: matrices decayed, biases and norms not (an order unlike model.parameters())."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": rest, "weight_decay": 0.0}, {"params": decay, "weight_decay": 0.1}]


def _batch(i):
    g = torch.Generator().manual_seed(i)
    return torch.randn(6, 4, generator=g), torch.randn(6, 1, generator=g)


# zero_every_micro: the first step has no gradient at all. The optimizer was not known yet when its
# first window's gradient was cleared; the passes are judged when it is (at that step), so it is the
# clearing's GG102 there, as for an optimizer known from the start (GG110 before).
@pytest.mark.parametrize("bug, expected", [(None, []), ("no_zero_grad", ["GG101"]),
                                           ("zero_every_micro", ["GG102"]), ("unscaled", ["GG104"])])
def test_findings_with_groups_in_another_order(bug, expected):
    model = _model()
    opt = torch.optim.SGD(_split_groups(model), lr=0.01)
    accum = 2
    with gg.watch(mode="record") as w:
        model(_batch(99)[0])  # the model runs before the optimizer is first seen: its order comes first
        for i in range(8):
            x, y = _batch(i)
            loss = F.mse_loss(model(x), y)
            (loss if bug == "unscaled" else loss / accum).backward()
            if bug == "zero_every_micro":
                model.zero_grad()
            if (i + 1) % accum == 0:
                opt.step()
                if bug != "no_zero_grad":
                    opt.zero_grad()
    assert sorted({f.code for f in w.findings}) == expected


def test_module_zero_grad_on_part_of_the_optimizer():
    # Two optimizers over one model; each part cleared by its own module's zero_grad: clean.
    model = _model()
    first, last = model[0], model[3]
    opt_a = torch.optim.SGD(first.parameters(), lr=0.01)
    opt_b = torch.optim.Adam(list(model[1].parameters()) + list(last.parameters()), lr=0.01)
    with gg.watch(mode="record") as w:
        for i in range(4):
            x, y = _batch(i)
            F.mse_loss(model(x), y).backward()
            opt_a.step()
            opt_b.step()
            first.zero_grad()
            model[1].zero_grad()
            last.zero_grad()
    assert w.findings == []
    # The same loop forgetting one part's clearing: GG101 on that optimizer only.
    with gg.watch(mode="record") as w:
        for i in range(4):
            x, y = _batch(i)
            F.mse_loss(model(x), y).backward()
            opt_a.step()
            opt_b.step()
            first.zero_grad()
    assert [f.code for f in w.findings] == ["GG101"] and "Adam" in w.findings[0].message


@pytest.mark.slow
def test_zero_grad_frees_the_buffers_at_once():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gg.watch(mode="record"):
        for i in range(3):
            x, y = _batch(i)
            F.mse_loss(model(x), y).backward()
            opt.step()
            refs = [weakref.ref(p.grad) for p in model.parameters()]
            opt.zero_grad(set_to_none=True)
            gc.collect()
            assert all(r() is None for r in refs)  # the watch keeps none of them alive
    # Negative control: a reference held elsewhere keeps the buffer, so the check above can fail.
    x, y = _batch(0)
    F.mse_loss(model(x), y).backward()
    held = [p.grad for p in model.parameters()]
    refs = [weakref.ref(g) for g in held]
    opt.zero_grad(set_to_none=True)
    assert all(r() is not None for r in refs)


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_a_buffer_cleared_by_hand_is_let_go_at_the_next_event():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gg.watch(mode="record") as w:
        for i in range(3):
            x, y = _batch(i)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            refs = [weakref.ref(p.grad) for p in model.parameters()]
            for p in model.parameters():
                p.grad = None
            x, y = _batch(i + 10)
            F.mse_loss(model(x), y).backward()  # the next event: the old buffers are let go before it runs
            gc.collect()
            assert all(r() is None for r in refs)
            opt.step()
            for p in model.parameters():
                p.grad = None
    assert w.findings == []


@pytest.mark.parametrize("clearing", ["optimizer", "module"])
def test_torchs_zero_grad_frees_the_buffers_itself(clearing):
    """The buffers a set_to_none zero_grad drops are freed inside it, as without the watch (not later, in the
    watch's own bookkeeping, where their freeing would be counted as the watch's cost)."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    freed_in = []

    def where_freed():
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.endswith("weakref.py"):
            frame = frame.f_back
        freed_in.append((Path(frame.f_code.co_filename).name, frame.f_code.co_name))

    with gg.watch(mode="record") as w:
        for i in range(3):
            x, y = _batch(i)
            F.mse_loss(model(x), y).backward()
            opt.step()
            for p in model.parameters():
                weakref.finalize(p.grad, where_freed)
            (opt if clearing == "optimizer" else model).zero_grad(set_to_none=True)
            assert all(p.grad is None for p in model.parameters())
    assert w.findings == []
    n = len(list(model.parameters()))
    assert freed_in == [("optimizer.py" if clearing == "optimizer" else "module.py", "zero_grad")] * (3 * n)
    # Negative control: a reference the test holds is dropped in the test's own frame.
    x, y = _batch(0)
    F.mse_loss(model(x), y).backward()
    held = [p.grad for p in model.parameters()]
    freed_in.clear()
    for g in held:
        weakref.finalize(g, where_freed)
    opt.zero_grad(set_to_none=True)
    del held, g
    assert freed_in == [(Path(__file__).name, "test_torchs_zero_grad_frees_the_buffers_itself")] * n


def _raise_at_the_second_clearing(frame, event, arg):
    """A trace function: inside torch's Optimizer.zero_grad, fail at its second ``p.grad = None``."""
    code = frame.f_code
    if event == "call" and code.co_name == "zero_grad" and Path(code.co_filename).parts[-3:] == ("torch", "optim", "optimizer.py"):
        seen = [0]

        def local(frame, event, arg):
            if event == "line" and "p.grad = None" in linecache.getline(frame.f_code.co_filename, frame.f_lineno):
                seen[0] += 1
                if seen[0] == 2:
                    raise KeyboardInterrupt
            return local

        return local
    return None


@pytest.mark.parametrize("fail", [True, False])
def test_a_zero_grad_failing_part_way_leaves_the_count_right(fail):
    """torch's own set_to_none zero_grad stopped after clearing one buffer (an interrupt): the buffers it did
    not clear still hold gradient a step applied, and the next step applying it again is GG101."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)  # weight, bias: the second clearing is the bias's
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 3), torch.randn(4, 1)
    with gg.watch(mode="record") as w:
        F.mse_loss(model(x), y).backward()
        opt.step()
        if fail:
            sys.settrace(_raise_at_the_second_clearing)
            try:
                with pytest.raises(KeyboardInterrupt):
                    opt.zero_grad(set_to_none=True)
            finally:
                sys.settrace(None)
            assert model.weight.grad is None and model.bias.grad is not None
        else:  # control: the same loop, its zero_grad complete
            opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        opt.step()
    assert [(f.code, f.params) for f in w.findings] == ([("GG101", ("Linear.bias",))] if fail else [])


def test_an_optimizer_listing_a_parameter_twice_writes_only_its_own_columns():
    """SGD([w, w]) (torch warns, and accepts) next to SGD([v]): the first optimizer's step and zero_grad must
    not be taken as covering every parameter because it has as many entries as the tracker has parameters."""
    torch.manual_seed(0)
    w, v = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(3))
    with pytest.warns(UserWarning, match="duplicate parameters"):
        opt1 = torch.optim.SGD([w, w], lr=0.01)
    opt2 = torch.optim.SGD([v], lr=0.01)
    with gg.watch(mode="record") as found:
        for i in range(4):
            ((w * v).sum() ** 2).backward()
            opt1.step()
            opt1.zero_grad()
            opt2.step()  # BUG: opt2's gradient is never cleared, so each step reuses the earlier ones
            if i == 0:
                opt2.zero_grad()  # control below: with this every step, nothing to find
    # (w listed twice: opt1 updates it twice per step, its own GG101 at opt1's first step, once per watch)
    twice = [("GG101", 1, "listed twice")]
    stale = [(f.code, f.step, "listed twice" if "listed twice" in f.message else "stale") for f in found.findings]
    assert stale == twice + [("GG101", 3, "stale")]
    with gg.watch(mode="record") as control:
        for _ in range(4):
            ((w * v).sum() ** 2).backward()
            opt1.step()
            opt1.zero_grad()
            opt2.step()
            opt2.zero_grad()
    assert [(f.code, f.step, "listed twice" if "listed twice" in f.message else "stale") for f in control.findings] == twice


class _Touchy(nn.Parameter):
    """A parameter whose ``.grad`` cannot be set to None while ``fail``: an interruption inside zero_grad."""

    fail = False

    def __setattr__(self, name, value):
        if name == "grad" and value is None and _Touchy.fail:
            raise RuntimeError("zero_grad interrupted")
        super().__setattr__(name, value)


@pytest.mark.parametrize("zeroed_by_hand", [True, False])
def test_a_failed_zero_grad_keeps_what_was_changed_in_place_before_it(zeroed_by_hand):
    """p.grad.zero_() by hand (a clearing of applied gradient), then torch's zero_grad fails at p after
    clearing q: the next event still sees the clearing by hand, so p's next gradient is not stale. Without
    the zero_() (the control) p's applied gradient is still there and the next step reuses it: GG101."""
    torch.manual_seed(0)
    p, q = _Touchy(torch.randn(3)), nn.Parameter(torch.randn(3))
    opt = torch.optim.SGD([q, p], lr=0.01)  # q is cleared first, then zero_grad fails at p
    with gg.watch(mode="record") as w:
        for i in range(4):
            ((p * q).sum() ** 2).backward()
            opt.step()
            if i == 1:
                if zeroed_by_hand:
                    p.grad.zero_()
                _Touchy.fail = True
                try:
                    with pytest.raises(RuntimeError, match="interrupted"):
                        opt.zero_grad()
                finally:
                    _Touchy.fail = False
                assert q.grad is None and p.grad is not None
            else:
                opt.zero_grad()
    assert [f.code for f in w.findings] == ([] if zeroed_by_hand else ["GG101"])
