"""GG116 on a clip inside a helper of another file: not judged, and never reported at a line of the wrong file.

A model class imported from another module runs its own optimizer's whole cycle in a method (clear, backward,
clip, step); the training loop calls it after its own step. The clip bounds what the critic's own step applies,
right before it: a correct program (run below, float64: the critic's update equals the clipped one done by hand).
A finding here was twice wrong: false, and placed at the helper's line under the loop's file.
"""

from __future__ import annotations

import sys

import torch

import gradguard as gg

CRITIC = '''\
import torch


class Critic:
    def __init__(self, model, lr=0.1):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def step(self, x, y):
        self.optimizer.zero_grad()
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.5)
        self.optimizer.step()
        return float(loss)
'''

TRAIN = '''\
import torch

from critic import Critic


def train(model, critic_model, data):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    critic = Critic(critic_model)
    for x, y in data:
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        critic.step(x, y)
'''


def _data():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
            for _ in range(3)]


def test_the_helper_clip_is_correct_code(tmp_path, monkeypatch):
    (tmp_path / "critic.py").write_text(CRITIC)
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("critic", None)
    sys.modules.pop("train", None)
    import train

    torch.manual_seed(0)
    model, critic_model = torch.nn.Linear(3, 1).double(), torch.nn.Linear(3, 1).double()
    start = [p.detach().clone() for p in critic_model.parameters()]
    train.train(model, critic_model, _data())
    # the oracle: the same three critic updates by hand, each clipped before its own step
    ref = torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        for p, s in zip(ref.parameters(), start):
            p.copy_(s)
    for x, y in _data():
        ref.zero_grad()
        ((ref(x) - y) ** 2).mean().backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        with torch.no_grad():
            for p in ref.parameters():
                p -= 0.1 * p.grad
    assert all(torch.allclose(a, b) for a, b in zip(critic_model.parameters(), ref.parameters()))
    sys.modules.pop("critic", None)
    sys.modules.pop("train", None)


def test_no_finding_and_none_at_another_files_line(tmp_path, monkeypatch):
    (tmp_path / "critic.py").write_text(CRITIC)
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    found = gg.lint_paths(["train.py", "critic.py"])
    for f in found:  # wherever a finding is, its line is one of its own file's
        assert f.line <= len((tmp_path / f.path).read_text().splitlines()), f
    assert [f.code for f in found if f.code == "GG116"] == []


def test_negative_control_the_loops_own_clip_after_its_step_is_still_reported(tmp_path, monkeypatch):
    source = TRAIN.replace("        optimizer.step()\n",
                           "        optimizer.step()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n")
    (tmp_path / "critic.py").write_text(CRITIC)
    (tmp_path / "train.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    found = [(f.path, f.line) for f in gg.lint_paths(["train.py", "critic.py"]) if f.code == "GG116"]
    assert found == [("train.py", 14)]
