"""GG201: a value that reaches the back-propagated loss only as an element of a Python list handed to a tensor
constructor as its data (``torch.as_tensor(weights)``, ``torch.tensor(...)``) carries no graph into it.

A policy-gradient epoch sums each episode's rewards (Python numbers from an environment) into a return, adds it
as the weight of each of its steps to a list and appends it to a list of returns the function hands back; the
weights become a tensor by ``torch.as_tensor`` (a new leaf). Running the program (float64) shows that the
returns the caller keeps are plain numbers and that a graph-carrying list element handed to ``as_tensor``
leaves its graph behind. The linter says nothing, renamed, with ``torch.tensor``, with a copy of the list.
Negative controls: the same return built from the model's output and stacked into the loss by
``torch.stack`` (which keeps each element's graph), its list kept by the caller, is still reported.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from _findings import codes

EPOCH = """\
import torch


class Env:
    def __init__(self):
        self.t = 0

    def reset(self):
        self.t = 0
        return [0.0, 1.0, -0.5]

    def step(self, action):
        self.t += 1
        return [0.1 * self.t, 1.0 + action, -0.5], 1.0 / self.t, self.t >= 3


def train_one_epoch(policy, optimizer, env, batch_size):
    batch_obs = []
    batch_weights = []
    epoch_returns = []
    obs = env.reset()
    episode_rewards = []
    while True:
        batch_obs.append(list(obs))
        action = float(policy(torch.tensor(obs, dtype=torch.float64)).item())
        obs, reward, done = env.step(action)
        episode_rewards.append(reward)
        if done:
            episode_return = sum(episode_rewards)
            batch_weights += [episode_return] * len(episode_rewards)
            epoch_returns.append(episode_return)
            obs = env.reset()
            episode_rewards = []
            if len(batch_obs) > batch_size:
                break
    optimizer.zero_grad()
    out = policy(torch.as_tensor(batch_obs, dtype=torch.float64)).squeeze(-1)
    batch_loss = -(out * torch.as_tensor(batch_weights, dtype=torch.float64)).mean()
    batch_loss.backward()
    optimizer.step()
    return batch_loss, epoch_returns


def run(policy, epochs):
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    env = Env()
    best = []
    for i in range(epochs):
        batch_loss, batch_returns = train_one_epoch(policy, optimizer, env, 5)
        best.append(max(batch_returns))
    return best
"""

# the same weights through torch.tensor, and through a copy of the list with a baseline subtracted
COPIED = EPOCH.replace(
    "    out = policy(torch.as_tensor(batch_obs, dtype=torch.float64)).squeeze(-1)\n",
    "    out = policy(torch.as_tensor(batch_obs, dtype=torch.float64)).squeeze(-1)\n"
    "    kept = list(batch_weights)\n    batch_weights = [kept[i] - 0.5 for i in range(len(kept))]\n").replace(
    "torch.as_tensor(batch_weights, dtype=torch.float64)", "torch.tensor(batch_weights, dtype=torch.float64)")

# negative control: the return is built from the model's output (a graph), and stacked into the loss
FROM_MODEL = EPOCH.replace(
    "        episode_rewards.append(reward)\n",
    "        episode_rewards.append(policy(torch.tensor(obs, dtype=torch.float64)).squeeze() * reward)\n").replace(
    "    batch_loss = -(out * torch.as_tensor(batch_weights, dtype=torch.float64)).mean()\n",
    "    batch_loss = -(out * torch.stack(batch_weights)).mean()\n")


def _gg201(source):
    return [c for c in codes(source) if c == "GG201"]


def _run(source):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<pg>", "exec"), namespace)
    torch.manual_seed(0)
    policy = torch.nn.Linear(3, 1).double()
    return namespace["run"](policy, 3)


def _renamed(source):
    for old, new in (("episode_return", "G"), ("epoch_returns", "history"), ("batch_weights", "w"),
                     ("batch_loss", "objective"), ("train_one_epoch", "collect_and_update"), ("optimizer", "o")):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


@pytest.mark.filterwarnings("ignore:Converting a tensor")
def test_a_list_element_handed_to_a_tensor_constructor_leaves_its_graph_behind():
    x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    for build in (torch.as_tensor, torch.tensor):
        made = build([x * 3, x * 4], dtype=torch.float64)
        assert made.grad_fn is None and not made.requires_grad


def test_returns_of_python_numbers_are_not_reported():
    for source in (EPOCH, COPIED):
        kept = _run(source)
        assert all(type(v) is float for v in kept)
        assert _gg201(source) == [], source


def test_renamed_forms_are_not_reported():
    for source in (EPOCH, COPIED):
        renamed = _renamed(source)
        assert renamed != source
        assert _gg201(renamed) == [], renamed


def test_negative_control_returns_built_from_the_model_and_stacked_are_reported():
    kept = _run(FROM_MODEL)
    assert all(isinstance(v, torch.Tensor) and v.grad_fn is not None for v in kept)
    assert _gg201(FROM_MODEL) == ["GG201"]
    assert _gg201(_renamed(FROM_MODEL)) == ["GG201"]
