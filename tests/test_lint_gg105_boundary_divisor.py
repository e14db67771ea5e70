"""GG105 (lint): a divisor chosen by which side of a window boundary the counter is on weighs a window equally.

``loss / (K if i < n - n % K else n % K)`` divides every micro-batch of a full window by K and every
micro-batch of the epoch's last, shorter window by its own size: each step applies its window's exact
mean (torchtune's fix of a leaking epoch tail). The test ``i < n - n % K`` takes one value for the whole
of a window, since windows start at multiples of K. The program below is run in float64 against plain
PyTorch (each window's full-batch mean loss, back-propagated once): the same updates, and no GG105.

Negative controls: a divisor that grows within the window (``i % K + 1``), and a boundary that is not a
multiple of K (``i < n - 1``, which splits a window), are still reported, and their updates differ from
the reference's.
"""

from __future__ import annotations

import re

import pytest
import torch

from _findings import codes

PROGRAM = """\
import torch
import torch.nn.functional as F


def train(model, optimizer, dataloader, gradient_accumulation_steps):
    for epoch in range(2):
        for idx, batch in enumerate(dataloader):
            loss = F.mse_loss(model(batch), batch.flip(-1)) / (DIVISOR)
            loss.backward()
            if (idx + 1) % gradient_accumulation_steps == 0 or idx + 1 == len(dataloader):
                optimizer.step()
                optimizer.zero_grad()
"""
EXACT = ("gradient_accumulation_steps if idx < len(dataloader) - len(dataloader) % gradient_accumulation_steps "
         "else len(dataloader) % gradient_accumulation_steps")
FORMS = {
    "sub-mod": EXACT,
    "floordiv-mult": EXACT.replace("len(dataloader) - len(dataloader) % gradient_accumulation_steps",
                                   "len(dataloader) // gradient_accumulation_steps * gradient_accumulation_steps"),
    "reversed": ("len(dataloader) % gradient_accumulation_steps if idx >= len(dataloader) - len(dataloader) % "
                 "gradient_accumulation_steps else gradient_accumulation_steps"),
}
GROWING = "idx % gradient_accumulation_steps + 1"
OFF_BOUNDARY = "gradient_accumulation_steps if idx < len(dataloader) - 1 else len(dataloader) % gradient_accumulation_steps"


def _source(divisor: str, rename: bool = False) -> str:
    source = PROGRAM.replace("DIVISOR", divisor)
    if rename:
        for old, new in (("idx", "micro"), ("gradient_accumulation_steps", "k"), ("dataloader", "shards"), ("loss", "obj")):
            source = re.sub(rf"\b{old}\b", new, source)
    return source


def _data():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 6, generator=g, dtype=torch.float64) for _ in range(7)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 6)).double()


def _run(source: str) -> torch.Tensor:
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model = _model()
    namespace["train"](model, torch.optim.SGD(model.parameters(), lr=0.1), _data(), 4)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _reference() -> torch.Tensor:
    """Plain PyTorch: one step per window of up to 4 batches, on the mean loss over the window's batches."""
    model, data = _model(), _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        for start in range(0, len(data), 4):
            window = torch.cat(data[start:start + 4])
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(window), window.flip(-1)).backward()
            opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _gg105(source: str) -> list:
    return [c for c in codes(source) if c == "GG105"]


@pytest.mark.parametrize("rename", [False, True])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_divisor_constant_over_each_window_is_not_reported(form, rename):
    source = _source(FORMS[form], rename)
    assert torch.allclose(_run(source), _reference(), rtol=0, atol=1e-12)
    assert _gg105(source) == []


@pytest.mark.parametrize("divisor", [GROWING, OFF_BOUNDARY])
def test_negative_control_a_divisor_that_changes_inside_a_window_is_reported(divisor):
    source = _source(divisor)
    assert not torch.allclose(_run(source), _reference(), atol=1e-6)
    assert _gg105(source) == ["GG105"]
