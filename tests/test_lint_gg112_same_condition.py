"""GG112: a scale and its unscale guarded by the same unchanged condition are never apart.

``if scaler is not None: loss = scaler.scale(loss)`` ... ``if scaler is not None:
scaler.unscale_(opt)`` then a clip: the path that scales and skips the unscale is
infeasible, whether the two tests sit in one function, in a helper called from a
micro-step loop (the loop's next iteration cannot flip a flag it never sets), or
have many unrelated branches between them. Judged by running the loops on the
CPU's GradScaler: with the scaler, the parameters end where the same loop without
a scaler puts them (the clip saw unscaled gradients). Negative controls: the same
shapes where the guard does change (a flag the loop rebinds, an attribute set
outside ``__init__``) or the unscale is missing are still reported.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

# a function: scale in every micro-step, unscale and clip at the step, both under `scaler is not None`
FUNCTION = """\
import torch


def train(model, data, optimizer, scaler, accum):
    for i, (x, y) in enumerate(data):
        loss = ((model(x) - y) ** 2).mean() / accum
        if scaler is not None:
            loss = scaler.scale(loss)
        loss.backward()
        if (i + 1) % accum == 0:
            if scaler is not None:
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            if scaler is None:
                optimizer.step()
            else:
                scaler.step(optimizer)
                scaler.update()
            optimizer.zero_grad()
"""

# a class: the flag set in __init__, the scale in a per-micro-step method the loop calls
METHOD = """\
import torch


class Trainer:
    def __init__(self, model, optimizer, grad_scaler):
        self.net = model
        self.opt = optimizer
        self.amp_scaler = grad_scaler
        self.with_amp = grad_scaler is not None

    def micro(self, x, y, accum):
        out = ((self.net(x) - y) ** 2).mean() / accum
        if self.with_amp:
            self.amp_scaler.scale(out).backward()
        else:
            out.backward()

    def fit(self, data, accum):
        for i, (x, y) in enumerate(data):
            self.micro(x, y, accum)
            if (i + 1) % accum == 0:
                if self.with_amp:
                    self.amp_scaler.unscale_(self.opt)
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), 0.05)
                if self.with_amp:
                    self.amp_scaler.step(self.opt)
                    self.amp_scaler.update()
                else:
                    self.opt.step()
                self.opt.zero_grad()


def train(model, data, optimizer, scaler, accum):
    Trainer(model, optimizer, scaler).fit(data, accum)
"""

# one update per call (no loop), many unrelated branches between the scale and the unscale: more
# paths than the walk keeps apart
BRANCHY = """\
import torch


def update(model, x, y, optimizer, scaler, opts=(0, 1, 0, 1, 0, 1, 0, 1)):
    log = {}
    loss = ((model(x) - y) ** 2).mean()
    if scaler is not None:
        loss = scaler.scale(loss)
    loss.backward()
""" + "".join(f"""\
    if opts[{k}]:
        log["k{k}"] = {k}
""" for k in range(8)) + """\
    if scaler is not None:
        scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad()


def train(model, data, optimizer, scaler, accum):
    for x, y in data:
        update(model, x, y, optimizer, scaler)
"""

CORRECT = {"function": FUNCTION, "method": METHOD, "branchy": BRANCHY}


def _gg112(source):
    return [c for c in codes(source) if c == "GG112"]


def _run(source, scaler):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(6, 5, generator=g, dtype=torch.float64), torch.randn(6, 1, generator=g, dtype=torch.float64))
            for _ in range(8)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    namespace["train"](model, data, opt, scaler, 2)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("form", sorted(CORRECT))
def test_a_scale_and_unscale_under_one_unchanged_condition_is_not_reported(form):
    source = CORRECT[form]
    assert _gg112(source) == []
    # and the clip did see unscaled gradients: with the scaler the loop ends where it ends without one
    with_amp = _run(source, torch.amp.GradScaler("cpu", init_scale=2.0**10))
    without = _run(source, None)
    assert torch.allclose(with_amp, without, atol=1e-6)


def test_renamed_flag_and_scaler_give_the_same_verdict():
    renamed = FUNCTION.replace("scaler", "gs").replace("optimizer", "o")
    assert _gg112(renamed) == []


def test_negative_control_the_unscale_missing_is_reported_and_moves_the_parameters():
    bad = FUNCTION.replace("            if scaler is not None:\n                scaler.unscale_(optimizer)\n", "")
    assert bad != FUNCTION and _gg112(bad) == ["GG112"]
    with_amp = _run(bad, torch.amp.GradScaler("cpu", init_scale=2.0**10))
    assert not torch.allclose(with_amp, _run(bad, None), atol=1e-3)


def test_negative_control_a_guard_the_loop_rebinds_is_still_reported():
    # `amp` changes between micro-steps: a scaled micro-step can meet a step that skips the unscale
    bad = textwrap.dedent("""\
        import torch

        def train(model, data, optimizer, scaler, accum):
            for i, (x, y) in enumerate(data):
                amp = i % 2 == 0
                loss = ((model(x) - y) ** 2).mean() / accum
                if amp:
                    loss = scaler.scale(loss)
                loss.backward()
                if (i + 1) % accum == 0:
                    if amp:
                        scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
        """)
    assert _gg112(bad) == ["GG112"]


def test_negative_control_an_attribute_set_outside_init_is_still_reported():
    bad = METHOD.replace("            self.micro(x, y, accum)\n",
                         "            self.with_amp = i % 2 == 0\n            self.micro(x, y, accum)\n")
    assert bad != METHOD and _gg112(bad) == ["GG112"]


def test_negative_control_branches_between_do_not_hide_a_missing_unscale():
    bad = BRANCHY.replace("    if scaler is not None:\n        scaler.unscale_(optimizer)\n", "")
    assert bad != BRANCHY and _gg112(bad) == ["GG112"]
