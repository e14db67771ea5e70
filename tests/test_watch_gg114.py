"""GG114 leaked-pass, at run time and in the linter.

The reference is plain PyTorch: the first step of the loop with ``.grad`` empty
when the loop starts. The loop with a stray pass before it applies a different
first update (measured here: the negative control) and is reported as of step 1;
the same loop clearing first is clean; rewrites that keep the computation keep
the verdict.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg
from gradguard.lint.autofix import fix_source
from _findings import codes


def _loop(stray: str, steps: int = 3, accum: int = 1):
    """``stray``: "none", "before" (a pass before the loop), "cleared" (the same, cleared before the loop),
    "eval" (an evaluation helper that back-propagates). Returns (codes and steps, first update)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(6, 5, generator=g), torch.randn(6, 1, generator=g)) for _ in range(steps * accum)]
    theta0 = torch.cat([p.detach().flatten() for p in model.parameters()])

    def evaluate():
        x, y = data[-1]
        F.mse_loss(model(x), y).backward()  # evaluation code that back-propagates

    first = None
    with gg.watch(mode="record") as w:
        if stray in ("before", "cleared"):
            F.mse_loss(model(data[0][0]), data[0][1]).backward()
            if stray == "cleared":
                opt.zero_grad()
        elif stray == "eval":
            evaluate()
        for i, (x, y) in enumerate(data):
            (F.mse_loss(model(x), y) / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
                if first is None:
                    first = torch.cat([p.detach().flatten() for p in model.parameters()]) - theta0
    return [(f.code, f.step) for f in w.findings], first


def test_a_pass_before_the_loop_is_reported_as_of_step_1():
    ref_codes, ref = _loop("none")
    bad_codes, bad = _loop("before")
    good_codes, good = _loop("cleared")
    assert ref_codes == [] and good_codes == []
    assert bad_codes == [("GG114", 1)]
    assert torch.allclose(good, ref) and not torch.allclose(bad, ref, rtol=0.1)  # the bug's effect


@pytest.mark.parametrize("accum", [1, 3])
def test_evaluation_code_and_accumulation_windows(accum):
    assert _loop("eval", accum=accum)[0] == [("GG114", 1)]
    assert _loop("none", accum=accum)[0] == []


def test_one_step_only_cannot_tell_and_stays_silent():
    assert _loop("before", steps=1)[0] == []


BUGGY = """\
def train(model, data, optimizer):
    x, y = data[0]
    model(x, y).backward()
    for x, y in data:
        model(x, y).backward()
        optimizer.step()
        optimizer.zero_grad()
"""


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda s: s,
        lambda s: s.replace("optimizer", "opt_a"),
        lambda s: s.replace("    model(x, y).backward()\n    for", "    loss = model(x, y)\n    print('check')\n    loss.backward()\n    for"),
        lambda s: s.replace("    for x, y in data:", "    with open('log') as f:\n        pass\n    for x, y in data:"),
    ],
)
def test_lint_rewrites_keep_the_verdict(rewrite):
    assert [c for c in codes(rewrite(BUGGY)) if c == "GG114"] == ["GG114"]


def test_lint_silent_where_something_clears_or_steps_between():
    for between in ("    optimizer.zero_grad()\n", "    optimizer.step()\n    optimizer.zero_grad()\n"):
        source = BUGGY.replace("    for x, y in data:", between + "    for x, y in data:")
        assert "GG114" not in codes(source)
    clears_first = BUGGY.replace("        model(x, y).backward()\n        optimizer.step()\n        optimizer.zero_grad()\n",
                                 "        optimizer.zero_grad()\n        model(x, y).backward()\n        optimizer.step()\n")
    assert "GG114" not in codes(clears_first)


def test_lint_fix_is_unsafe_and_clears_before_the_loop():
    assert "GG114" not in [f.code for f in fix_source(BUGGY).fixed]
    result = fix_source(BUGGY, unsafe=True)
    assert "    optimizer.zero_grad(set_to_none=True)\n    for x, y in data:" in result.text
    assert "GG114" not in codes(result.text)


def test_watch_fixture_pair_through_the_cli(tmp_path):
    from _scripts import SCRIPTS as scripts, alone, run_script

    out = {}
    for kind in ("bad", "good"):
        code, out[kind] = run_script(tmp_path, f"gg114_{kind}", *alone("GG114"))
        assert code == 0
    assert [(f["code"], f["step"]) for f in out["bad"]] == [("GG114", 1)] and out["good"] == []
    line = (scripts / "gg114_bad.py").read_text().splitlines()[out["bad"][0]["line"] - 1]
    assert "# BUG" in line and gg.RULES["GG114"].fix in out["bad"][0]["message"]
