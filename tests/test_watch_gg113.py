"""GG113 overscaled window at run time: every micro-batch of a window divided by its size twice.

The reference is plain PyTorch in float64: the gradient of the mean loss over the
window's items. The loop that divides twice applies 1/K of it (measured: the
negative control) and is reported at step 1; the loop that divides once matches
it and is clean; a final partial window divided by the full size (K' = 2 of
K = 4, each 1/4 = 1/2²) stays GG111's.
"""

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg

from _scripts import SCRIPTS, alone, run_script


def _data(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(6, 5, generator=g), torch.randn(6, 1, generator=g)) for _ in range(n)]


def _loop(k, divisions, steps=2, helper=False):
    torch.manual_seed(1)
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    data = _data(k * steps)

    def scaled(loss):  # the division inside a helper: the verdict must not depend on where it is written
        return loss / k

    first = None
    with gg.watch(mode="record") as w:
        for i, (x, y) in enumerate(data):
            loss = F.mse_loss(model(x), y)
            for _ in range(divisions):
                loss = scaled(loss) if helper else loss / k
            loss.backward()
            if (i + 1) % k == 0:
                if first is None:
                    first = [p.grad.detach().clone() for p in model.parameters()]
                opt.step()
                opt.zero_grad()
    ref = torch.nn.Linear(5, 1).double()
    ref.load_state_dict(model.state_dict())
    F.mse_loss(ref(torch.cat([x for x, _ in data[:k]]).double()), torch.cat([y for _, y in data[:k]]).double()).backward()
    return [(f.code, f.step) for f in w.findings], first, [p.grad for p in ref.parameters()]


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("helper", [False, True])
def test_divided_twice_is_reported_at_step_1_and_is_1_over_k_of_the_mean(k, helper):
    codes, bad, ref = _loop(k, 2, helper=helper)
    assert codes == [("GG113", 1)]
    for g, r in zip(bad, ref):
        torch.testing.assert_close(g.double(), r / k, rtol=1e-5, atol=1e-7)
    codes, good, ref = _loop(k, 1, helper=helper)
    assert codes == []
    for g, r in zip(good, ref):
        torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-7)


def test_a_short_final_window_is_gg111_not_gg113():
    torch.manual_seed(1)
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = _data(10)
    with gg.watch(mode="record") as w:
        for i, (x, y) in enumerate(data):
            (F.mse_loss(model(x), y) / 4).backward()
            if (i + 1) % 4 == 0 or i + 1 == len(data):
                opt.step()
                opt.zero_grad()
    assert [f.code for f in w.findings] == ["GG111"]


@pytest.mark.slow
def test_accelerate_divides_too():
    accelerate = pytest.importorskip("accelerate")
    found = {}
    for double in (True, False):
        accelerator = accelerate.Accelerator(gradient_accumulation_steps=3, cpu=True)
        torch.manual_seed(0)
        model = torch.nn.Linear(5, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = accelerator.prepare(model, opt)
        with gg.watch(mode="record") as w:
            for x, y in _data(6):
                with accelerator.accumulate(model):
                    loss = F.mse_loss(model(x), y)
                    accelerator.backward(loss / 3 if double else loss)
                    opt.step()
                    opt.zero_grad()
        found[double] = [(f.code, f.step) for f in w.findings]
        accelerator.free_memory()
    assert found == {True: [("GG113", 1)], False: []}


def test_fixture_pair_through_the_cli(tmp_path):
    out = {}
    for kind in ("bad", "good"):
        code, out[kind] = run_script(tmp_path, f"gg113_{kind}", *alone("GG113"))
        assert code == 0
    assert [(f["code"], f["step"]) for f in out["bad"]] == [("GG113", 1)] and out["good"] == []
    line = (SCRIPTS / "gg113_bad.py").read_text().splitlines()[out["bad"][0]["line"] - 1]
    assert "loss.backward()" in line and gg.RULES["GG113"].fix in out["bad"][0]["message"]
