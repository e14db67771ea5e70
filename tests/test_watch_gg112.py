"""GG112 clip before unscale at run time: a clip of gradients a GradScaler's scale is still in.

The reference is plain PyTorch: the gradient clipped after ``unscale_`` (the
true norm) against the one clipped before it. Each loop that clips before
``unscale_`` is reported at the clip line, before the clip runs; the same loops
with ``unscale_`` first, a disabled scaler, or no clip are clean, in the same
test, so each test can fail both ways.
"""

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg

from _scripts import SCRIPTS, alone, run_script


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(10, 6, generator=g), torch.randn(10, 1, generator=g)) for _ in range(n)]


def _run(order, clip="norm", enabled=True, accum=1, steps=2, helper=False):
    """One AMP loop under the watch. ``order``: "clip-first" (the bug) or "unscale-first" (the fix).
    Returns (findings, the gradient norm each step applied)."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", enabled=enabled)
    applied = []

    def clip_them(params):  # a helper of the user's own: the verdict must not depend on where the call is
        torch.nn.utils.clip_grad_norm_(params, 1.0)

    with gg.watch(mode="record") as w:
        for i, (x, y) in enumerate(_batches(steps * accum)):
            scaler.scale(F.mse_loss(model(x), y) / accum).backward()
            if (i + 1) % accum:
                continue
            if order == "unscale-first":
                scaler.unscale_(opt)
            if clip == "norm":
                (clip_them if helper else lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0))(model.parameters())
            elif clip == "value":
                torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)
            elif clip == "total":
                torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            if order == "clip-first":
                scaler.unscale_(opt)
            applied.append(float(torch.cat([p.grad.flatten() for p in model.parameters()]).norm()))
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    return [(f.code, f.step) for f in w.findings], applied


def test_clip_before_unscale_is_reported_and_wrong_by_the_scale():
    bad, applied_bad = _run("clip-first")
    good, applied_good = _run("unscale-first")
    assert bad == [("GG112", 1)]  # the first step already (one finding per line)
    assert good == []
    # the independent check: unscaled first, the clip bounds the true norm at 1.0; clipped
    # scaled, the applied gradient is 1/65536 of that
    assert all(0.5 < a <= 1.0 + 1e-5 for a in applied_good), applied_good
    assert all(a < 1e-4 for a in applied_bad), applied_bad


@pytest.mark.parametrize("clip", ["value", "total"])
def test_every_clipping_function(clip):
    assert [c for c, _ in _run("clip-first", clip=clip)[0]] == ["GG112"]
    assert _run("unscale-first", clip=clip)[0] == []


def test_a_helper_and_an_accumulation_window():
    assert [c for c, _ in _run("clip-first", helper=True)[0]] == ["GG112"]
    assert [c for c, _ in _run("clip-first", accum=3)[0]] == ["GG112"]
    assert _run("unscale-first", accum=3)[0] == []


def test_a_disabled_scaler_scales_nothing():
    findings, applied = _run("clip-first", enabled=False)
    assert findings == []
    assert all(0.5 < a <= 1.0 + 1e-5 for a in applied)


def test_unscaling_one_optimizer_leaves_the_other_scaled():
    """A GAN under one scaler: the discriminator unscaled before its clip, the generator not."""
    torch.manual_seed(0)
    gen, disc = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    opt_g, opt_d = torch.optim.SGD(gen.parameters(), lr=0.0), torch.optim.SGD(disc.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu")

    def loop(unscale_gen):
        with gg.watch(mode="record") as w:
            for _ in range(2):
                z = torch.randn(8, 4)
                scaler.scale(disc(gen(z).detach()).mean()).backward()
                scaler.unscale_(opt_d)
                torch.nn.utils.clip_grad_norm_(disc.parameters(), 1.0)
                scaler.step(opt_d)
                opt_d.zero_grad()
                scaler.scale(-disc(gen(z)).mean()).backward()
                if unscale_gen:
                    scaler.unscale_(opt_g)
                torch.nn.utils.clip_grad_norm_(gen.parameters(), 1.0)
                scaler.step(opt_g)
                scaler.update()
                opt_g.zero_grad()
                opt_d.zero_grad()
        return [f.code for f in w.findings]

    assert loop(False) == ["GG112"]
    assert loop(True) == []


def test_raise_mode_stops_the_clip():
    model = _model()
    scaler = torch.amp.GradScaler("cpu")
    x, y = _batches(1)[0]
    with pytest.raises(gg.GradientBugError, match="GG112"):
        with gg.watch(mode="raise"):
            scaler.scale(F.mse_loss(model(x), y)).backward()
            before = [p.grad.clone() for p in model.parameters()]
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    assert all(torch.equal(a, p.grad) for a, p in zip(before, model.parameters()))  # not clipped


def test_a_clip_without_a_watch_is_untouched():
    """Outside a watch the wrappers only forward (a generator of parameters still works)."""
    model = _model()
    x, y = _batches(1)[0]
    F.mse_loss(model(x), y).backward()
    total = torch.nn.utils.clip_grad_norm_((p for p in model.parameters()), 1e-3)
    assert float(total) > 1e-3
    assert float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])) == pytest.approx(1e-3, rel=1e-4)


def test_fixture_pair_through_the_cli(tmp_path):
    code, findings = run_script(tmp_path, "gg112_bad", *alone("GG112"))
    lines = (SCRIPTS / "gg112_bad.py").read_text().splitlines()
    assert [f["code"] for f in findings] == ["GG112"] and code == 0
    assert "clip_grad_norm_" in lines[findings[0]["line"] - 1] and findings[0]["step"] == 1
    assert gg.RULES["GG112"].fix in findings[0]["message"]
    assert run_script(tmp_path, "gg112_good", *alone("GG112")) == (0, [])
