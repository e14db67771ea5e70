"""GG104: a window whose mean is taken outside the loss — plain SGD at ``lr / K``, or a DDP
communication hook dividing every bucket by K — is not reported.

Both are judged by running them in float64 against the reference (each micro-batch's mean loss
divided by K, plain SGD at ``lr``): the final parameters agree. Negative controls, each reported and
each away from its reference: Adam at ``lr / K`` (an adaptive step ignores the gradient's scale),
SGD whose weight decay is not multiplied back by K, a learning rate divided by something else, and
the DDP program with a hook that reduces without dividing, with no hook, or with its hook run on
every pass (no ``no_sync()``: it divides the running sum again each time).
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
import torch.distributed as dist

from _findings import codes

K = 3

MICRO = """\
import torch


def train(model, batches, base_lr, accum):
    lr = base_lr / accum
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-2 * accum)
    for batch in batches:
        optimizer.zero_grad()
        for part in range(accum):
            x, y = batch[part]
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
        optimizer.step()
"""

# a modulo window, the learning rate written as one quotient, no weight decay
MODULO = """\
import torch


def train(model, batches, base_lr, accum):
    opt = torch.optim.SGD(model.parameters(), lr=base_lr / (2 * accum) * 2)
    micro = [mb for batch in batches for mb in batch]
    for i, (x, y) in enumerate(micro):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
"""

FORMS = {"micro-loop": MICRO, "modulo": MODULO}


def _gg104(source):
    return [c for c in codes(source) if c == "GG104"]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1)).double()


def _batches():
    g = torch.Generator().manual_seed(2)
    return [[(torch.randn(5, 4, generator=g, dtype=torch.float64), torch.randn(5, 1, generator=g, dtype=torch.float64))
             for _ in range(K)] for _ in range(4)]


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _run(source):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model = _model()
    namespace["train"](model, _batches(), 0.1, K)
    return _flat(model)


def _reference(optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2), decay=True):
    model = _model()
    opt = optimizer(model.parameters()) if decay else torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in _batches():
        opt.zero_grad()
        for x, y in batch:
            (((model(x) - y) ** 2).mean() / K).backward()
        opt.step()
    return _flat(model)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_sgd_at_lr_over_k_is_not_reported_and_applies_the_window_mean(form):
    assert _gg104(FORMS[form]) == []
    assert torch.allclose(_run(FORMS[form]), _reference(decay=form == "micro-loop"), atol=1e-10)


def test_renamed_and_the_rate_bound_through_two_names_give_the_same_verdict():
    renamed = MICRO.replace("accum", "n_sub").replace("optimizer", "o").replace("lr = base_lr / n_sub", "r0 = base_lr / n_sub\n    lr = r0")
    assert "r0 = base_lr / n_sub" in renamed and _gg104(renamed) == []
    assert torch.allclose(_run(renamed), _reference(), atol=1e-10)


def test_negative_control_adam_at_lr_over_k_is_reported():
    bad = MICRO.replace("torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-2 * accum)",
                        "torch.optim.Adam(model.parameters(), lr=lr)")
    assert bad != MICRO and _gg104(bad) == ["GG104"]
    assert not torch.allclose(_run(bad), _reference(lambda ps: torch.optim.Adam(ps, lr=0.1)), atol=1e-4)


def test_negative_control_weight_decay_not_multiplied_back_is_reported():
    bad = MICRO.replace("weight_decay=1e-2 * accum", "weight_decay=1e-2")
    assert bad != MICRO and _gg104(bad) == ["GG104"]
    assert not torch.allclose(_run(bad), _reference(), atol=1e-6)


def test_negative_control_a_rate_divided_by_something_else_is_reported():
    bad = MICRO.replace("lr = base_lr / accum", "lr = base_lr / 2")
    assert bad != MICRO and _gg104(bad) == ["GG104"]
    assert not torch.allclose(_run(bad), _reference(), atol=1e-6)


HOOKED = """\
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP


def scaled(hook, steps):
    def divide_then_reduce(state, bucket):
        bucket.set_buffer(bucket.buffer().div_(steps))
        return hook(state, bucket)
    return divide_then_reduce


def train(model, batches, base_lr, accum):
    model = DDP(model)
    model.register_comm_hook(None, scaled(allreduce_hook, accum))
    optimizer = torch.optim.SGD(model.parameters(), lr=base_lr)
    for batch in batches:
        for part in range(accum):
            x, y = batch[part]
            if part < accum - 1:
                with model.no_sync():
                    loss = ((model(x) - y) ** 2).mean()
                    loss.backward()
            else:
                loss = ((model(x) - y) ** 2).mean()
                loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


@pytest.fixture
def gloo_group():
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "rendezvous"), rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()


def test_a_ddp_comm_hook_dividing_the_buckets_by_k_is_not_reported(gloo_group):
    assert _gg104(HOOKED) == []
    assert torch.allclose(_run(HOOKED), _reference(decay=False), atol=1e-10)


def test_negative_control_a_hook_that_does_not_divide_no_hook_or_a_sync_on_every_pass_is_reported(gloo_group):
    plain = HOOKED.replace("model.register_comm_hook(None, scaled(allreduce_hook, accum))",
                           "model.register_comm_hook(None, allreduce_hook)")
    none = HOOKED.replace("    model.register_comm_hook(None, scaled(allreduce_hook, accum))\n", "")
    # without no_sync the hook divides the running sum at every pass: (g1 / K + g2) / K ...
    every = HOOKED.replace("            if part < accum - 1:\n", "            if False:\n")
    every = every.replace("                with model.no_sync():\n", "                if True:\n")
    for bad in (plain, none, every):
        assert bad != HOOKED and _gg104(bad)  # (one finding per backward pass of the window)
        assert not torch.allclose(_run(bad), _reference(decay=False), atol=1e-6)
