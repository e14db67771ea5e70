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


TWO_SCALERS = """\
import torch


def train(G, D, data, g_opt, d_opt, g_scaler, d_scaler, accum):
    for i, (z, real) in enumerate(data):
        if i % accum == 0:
            g_opt.zero_grad()
        fake = G(z)
        for p in D.parameters():
            p.requires_grad_(False)
        g_scaler.scale(-D(fake).mean() / accum).backward()
        for p in D.parameters():
            p.requires_grad_(True)
        if (i + 1) % accum == 0:
            g_scaler.unscale_(g_opt)
            torch.nn.utils.clip_grad_norm_(G.parameters(), 1.0)
            g_scaler.step(g_opt)
            g_scaler.update()
        if i % accum == 0:
            d_opt.zero_grad()
        d_scaler.scale((D(fake.detach()).mean() - D(real).mean()) / accum).backward()
        if (i + 1) % accum == 0:
            d_scaler.unscale_(d_opt)
            torch.nn.utils.clip_grad_norm_(D.parameters(), 1.0)
            d_scaler.step(d_opt)
            d_scaler.update()
"""


class _NoScaler:
    """The same program without mixed precision: the reference gradients the clips must read."""

    def scale(self, loss):
        return loss

    def unscale_(self, optimizer):
        pass

    def step(self, optimizer):
        optimizer.step()

    def update(self):
        pass


def _clip_norms(source, scaler, monkeypatch):
    """The total gradient norm each clip of ``source`` reads, running it in float64."""
    seen = []

    def recording_clip(parameters, max_norm, *args, **kwargs):
        grads = [p.grad for p in parameters if p.grad is not None]
        seen.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))))

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording_clip)
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    torch.manual_seed(0)
    G = torch.nn.Linear(3, 4).double()
    D = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1)).double()
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, 4, generator=g, dtype=torch.float64))
            for _ in range(6)]
    g_opt, d_opt = torch.optim.SGD(G.parameters(), lr=0.01), torch.optim.SGD(D.parameters(), lr=0.01)
    namespace["train"](G, D, data, g_opt, d_opt, scaler(), scaler(), 3)
    return seen


def test_a_second_scalers_scale_is_not_in_what_the_clip_after_unscale_reads(monkeypatch):
    """Two GradScalers, one per optimizer (a GAN): the discriminator's scaled gradients of a micro-step are
    still in `.grad` when the generator's window ends, yet the generator's clip, right after
    `g_scaler.unscale_(g_opt)`, reads the unscaled generator gradients: run in float64 and compared
    with the same program without scalers."""
    assert _gg112(TWO_SCALERS) == []
    scaled = _clip_norms(TWO_SCALERS, lambda: torch.amp.GradScaler("cpu", init_scale=2.0 ** 10), monkeypatch)
    plain = _clip_norms(TWO_SCALERS, _NoScaler, monkeypatch)
    assert len(scaled) == 4 and scaled == pytest.approx(plain, rel=1e-9)
    # negative control: the generator's clip before its unscale_ reads gradients 2**10 too large, and is found
    buggy = TWO_SCALERS.replace(
        "            g_scaler.unscale_(g_opt)\n            torch.nn.utils.clip_grad_norm_(G.parameters(), 1.0)\n",
        "            torch.nn.utils.clip_grad_norm_(G.parameters(), 1.0)\n")
    assert buggy != TWO_SCALERS and _gg112(buggy) == ["GG112"]
    scaled = _clip_norms(buggy, lambda: torch.amp.GradScaler("cpu", init_scale=2.0 ** 10), monkeypatch)
    assert scaled[0] == pytest.approx(plain[0] * 2.0 ** 10, rel=1e-9)
