"""GG202: a recurrent state tuple cut in place element by element before it is reused.

``self.state[0].detach_()`` and ``self.state[1].detach_()`` (an LSTM's hidden and cell) at the top of
``forward()``, before ``self.lstm(x, self.state)``: each tensor of the tuple is cut from its graph in place,
so no backward pass reaches an earlier step's graph. Run in float64: two updates back-propagate without
error (the truth). Negative controls, still reported: only the hidden state cut (the cell carries the
previous graph, and the second backward pass runs into the freed graph), and no cut at all.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from _findings import codes

GOOD = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.lstm = nn.LSTM(size, size, batch_first=True)
        self.head = nn.Linear(size, 1)
        self.size = size
        self.state = None

    def init_state(self):
        hidden = torch.zeros(1, 1, self.size, dtype=torch.float64)
        cell = torch.zeros(1, 1, self.size, dtype=torch.float64)
        self.state = (hidden, cell)

    def forward(self, sequence):
        self.state[0].detach_()
        self.state[1].detach_()
        out, self.state = self.lstm(sequence, self.state)
        return self.head(out)
"""
HIDDEN_ONLY = GOOD.replace("        self.state[1].detach_()\n", "")
NO_CUT = HIDDEN_ONLY.replace("        self.state[0].detach_()\n", "")


def _gg202(source):
    return [c for c in codes(source) if c == "GG202"]


def _train(source, steps=2):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<model>", "exec"), namespace)
    torch.manual_seed(0)
    net = namespace["Net"](3).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net.init_state()
    for _ in range(steps):
        opt.zero_grad()
        net(torch.randn(1, 4, 3, dtype=torch.float64)).pow(2).mean().backward()
        opt.step()


def test_a_state_tuple_detached_in_place_element_by_element_is_not_reported():
    _train(GOOD)  # no backward pass reaches the previous update's (freed) graph
    assert _gg202(GOOD) == []


@pytest.mark.parametrize("source", [HIDDEN_ONLY, NO_CUT], ids=["hidden-only", "no-cut"])
def test_negative_controls_a_state_left_on_its_graph_is_reported(source):
    with pytest.raises(RuntimeError):
        _train(source)  # the second backward pass runs into the first update's freed graph
    assert "GG202" in _gg202(source)


def test_renamed_keeps_the_verdict():
    for source, found in ((GOOD, []), (HIDDEN_ONLY, ["GG202"])):
        renamed = re.sub(r"\bstate\b", "carry", re.sub(r"\blstm\b", "rnn", source))
        assert renamed != source
        assert _gg202(renamed) == found
