"""GG104: every loss term divided by the window in a loop over the loss dict before the loss is read out.

``for key, value in losses.items(): losses[key] = value / K`` then ``loss = losses["loss"]`` and
``loss.backward()`` on every micro-batch, stepping every K: each pass weighs 1/K, the window's gradient is
the mean. Run in float64 against plain SGD on the window's full batch (the truth): equal, and the linter is
silent. Negative controls, still reported and off the truth: no division, and a division that leaves the
back-propagated entry out (``if key != "loss"``).
"""

from __future__ import annotations

import re
import textwrap

import torch

from _findings import codes

GOOD = """\
import torch


def train(model, loader, accum_steps, criterion):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        loss_dict = criterion(model(x), y)
        for key, loss_value in loss_dict.items():
            loss_dict[key] = loss_value / accum_steps
        loss = loss_dict["loss"]
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
UNDIVIDED = GOOD.replace("        for key, loss_value in loss_dict.items():\n            loss_dict[key] = loss_value / accum_steps\n", "")
SKIPS = GOOD.replace("            loss_dict[key] = loss_value / accum_steps\n",
                     "            if key != 'loss':\n                loss_dict[key] = loss_value / accum_steps\n")


def _criterion(out, y):
    """The loss object the program is handed (its class lives elsewhere): a dict of terms."""
    mse = ((out - y) ** 2).mean()
    return {"loss": mse, "mse": mse.detach()}


def _gg104(source):
    return [c for c in codes(source) if c == "GG104"]


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
            for _ in range(4)]


def _run(source):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    namespace["train"](model, _data(), 2, _criterion)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _reference():
    """Plain SGD on each window's full batch (two micro-batches of equal size), in float64."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = _data()
    for a, b in zip(data[::2], data[1::2]):
        x, y = torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]])
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_every_entry_divided_is_the_window_mean_and_not_reported():
    assert torch.allclose(_run(GOOD), _reference())
    assert _gg104(GOOD) == []


def test_negative_controls_an_undivided_loss_is_reported():
    for source in (UNDIVIDED, SKIPS):
        assert source != GOOD
        assert not torch.allclose(_run(source), _reference())
        assert "GG104" in _gg104(source)


def test_renamed_keeps_the_verdict():
    for source, found in ((GOOD, []), (UNDIVIDED, ["GG104"])):
        renamed = re.sub(r"\bloss_dict\b", "terms", re.sub(r"\bkey\b", "name", re.sub(r"\bloss_value\b", "v", source)))
        assert renamed != source and _gg104(renamed) == found
