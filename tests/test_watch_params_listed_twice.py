"""Parameters listed twice in one optimizer's parameter group (tianshou's PPO test: actor and critic share a
trunk, and the optimizer is built on ``list(actor.parameters()) + list(critic.parameters())``): torch updates
each entry, so every step moves the shared parameters twice with the same gradient. The watch reports GG101 at
the first step, from the optimizer's parameter groups, whatever expression built them.

Oracle: plain PyTorch in float64, Adam over each parameter once. The programs that list the shared trunk twice
must differ from it; the fixed forms (a set union, ``dict.fromkeys``) must match it and draw nothing.
Negative control: two modules that share nothing, concatenated the same way.
"""

import itertools
import warnings

import pytest
import torch

import gradguard as gg


def _modules(shared: bool = True):
    torch.manual_seed(0)
    trunk = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).double()
    other = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).double()
    actor = torch.nn.Sequential(trunk, torch.nn.Linear(8, 2)).double()
    critic = torch.nn.Sequential(trunk if shared else other, torch.nn.Linear(8, 1)).double()
    return trunk, actor, critic


def _train(actor, critic, opt, steps=3):
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        obs = torch.randn(16, 4, generator=g, dtype=torch.float64)
        loss = actor(obs).logsumexp(-1).mean() + critic(obs).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


# name -> (GG101 expected, how the optimizer's parameters are built from (actor, critic))
BUILDS = {
    "list_concatenation": (True, lambda a, c: list(a.parameters()) + list(c.parameters())),
    "param_group_dict": (True, lambda a, c: [{"params": [*a.parameters(), *c.parameters()], "lr": 1e-2}]),
    "itertools_chain": (True, lambda a, c: itertools.chain(a.parameters(), c.parameters())),
    "set_union": (False, lambda a, c: set(a.parameters()).union(c.parameters())),
    "dict_fromkeys": (False, lambda a, c: list(dict.fromkeys([*a.parameters(), *c.parameters()]))),
}


def _final(actor, critic):
    return [p.detach().clone() for p in dict.fromkeys([*actor.parameters(), *critic.parameters()])]


def _reference():
    _, actor, critic = _modules()
    unique = list(dict.fromkeys([*actor.parameters(), *critic.parameters()]))
    _train(actor, critic, torch.optim.Adam(unique, lr=1e-2))
    return _final(actor, critic)


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_each_build_against_adam_over_each_parameter_once(name):
    reported, build = BUILDS[name]
    _, actor, critic = _modules()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own "duplicate parameters" warning
        opt = torch.optim.Adam(build(actor, critic), lr=1e-2)
    with gg.watch(mode="record") as w:
        _train(actor, critic, opt)
    gap = max(float((a - b).abs().max()) for a, b in zip(_final(actor, critic), _reference()))
    found = [(f.code, f.step) for f in w.findings]
    if reported:
        assert gap > 1e-3, f"{name}: the shared trunk updated twice must differ from Adam over each parameter once"
        assert ("GG101", 1) in found and len(found) == 1, (name, found)
    else:
        assert gap < 1e-12, name
        assert found == [], (name, found)


def test_modules_that_share_nothing_draw_nothing():
    _, actor, critic = _modules(shared=False)
    opt = torch.optim.Adam(list(actor.parameters()) + list(critic.parameters()), lr=1e-2)
    with gg.watch(mode="record") as w:
        _train(actor, critic, opt)
    assert list(w.findings) == []
