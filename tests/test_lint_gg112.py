"""GG112 clip-before-unscale in the linter: decided from the flow, and its fix checked by running it.

The fix is judged against an independent reference: the same loop written by
hand with ``scaler.unscale_(optimizer)`` before the clip, run on the CPU's
GradScaler. The fixed program must end with the reference's parameters, and the
buggy one must not (the negative control: the bug has an effect to remove).
"""

from __future__ import annotations

import pytest
import torch

from gradguard.lint.autofix import fix_source
from _findings import codes

BUGGY = """\
import torch


def train(model, data, optimizer, scaler, accum):
    assert len(data) % accum == 0
    for i, (x, y) in enumerate(data):
        scaler.scale(((model(x) - y) ** 2).mean() / accum).backward()
        if (i + 1) % accum == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
"""

REFERENCE = BUGGY.replace("            torch.nn.utils.clip_grad_norm_", "            scaler.unscale_(optimizer)\n            torch.nn.utils.clip_grad_norm_")


def _gg112(source):
    return [c for c in codes(source) if c == "GG112"]


def _run(source):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(6, 5, generator=g), torch.randn(6, 1, generator=g)) for _ in range(8)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    namespace["train"](model, data, opt, torch.amp.GradScaler("cpu"), 2)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_the_fix_unscales_before_the_clip_and_matches_the_hand_written_loop():
    assert _gg112(BUGGY) == ["GG112"] and _gg112(REFERENCE) == []
    result = fix_source(BUGGY)
    assert "            scaler.unscale_(optimizer)\n            torch.nn.utils.clip_grad_norm_" in result.text
    assert _gg112(result.text) == []
    fixed, reference, buggy = _run(result.text), _run(REFERENCE), _run(BUGGY)
    assert torch.equal(fixed, reference)
    assert not torch.allclose(buggy, reference, atol=1e-3)  # the bug moved the parameters elsewhere


def test_no_fix_where_another_path_unscales():
    source = BUGGY.replace("        if (i + 1) % accum == 0:\n", "        if i == 3:\n            scaler.unscale_(optimizer)\n        if (i + 1) % accum == 0:\n")
    assert _gg112(source) == ["GG112"]
    assert "GG112" not in [f.code for f in fix_source(source).fixed]


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda s: s.replace("scaler", "amp_state"),  # a rename
        lambda s: s.replace("scaler", "helper_obj"),
        lambda s: s.replace("        scaler.scale(((model(x) - y) ** 2).mean() / accum).backward()\n",
                            "        scaled = scaler.scale(((model(x) - y) ** 2).mean() / accum)\n        log = []\n        scaled.backward()\n"),
        lambda s: s.replace("            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n", "            limit(model)\n")
        + "\n\ndef limit(net):\n    torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)\n",
    ],
)
def test_rewrites_that_keep_the_computation_keep_the_verdict(rewrite):
    assert _gg112(rewrite(BUGGY)) == ["GG112"]
    assert _gg112(rewrite(REFERENCE)) == []


def test_a_scale_method_of_something_that_is_no_scaler():
    """``.scale(x).backward()`` on an object nothing steps, updates or unscales: not a GradScaler."""
    source = BUGGY.replace("scaler.scale(", "model.scale(").replace("scaler.step(optimizer)", "optimizer.step()").replace("            scaler.update()\n", "")
    assert _gg112(source) == []
