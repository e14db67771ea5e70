"""Fix safety by execution (``benchmarks/oracle_fix_bench.py``) on a seeded subset of generated programs.

Every program is fixed with the safe fixes, and with the unsafe ones too, then run in float64:
a correct program must come out unchanged, a buggy one must not come out wrong (it trains to
the reference, or keeps only defects of choices no fix touched). Negative controls: a fixer that
breaks a correct program, and one that does not repair what it claims, are caught.
"""

from __future__ import annotations

import textwrap

import pytest

from _benchmarks import load

bench = load("oracle_fix_bench")

from oracle import generate  # noqa: E402

import gradguard as gg  # noqa: E402
from gradguard.findings import Edit, Fix  # noqa: E402
from gradguard.lint.rules import FIXES  # noqa: E402


def _summary(n: int, seed: int):
    results = [bench.evaluate_spec((i, s, generate.FORMS, bench.MODES)) for i, s in enumerate(generate.specs(n, seed=seed))]
    return bench.summarise(results, bench.MODES)


@pytest.mark.slow
def test_fixes_on_a_seeded_subset_change_no_correct_program_and_break_no_buggy_one():
    s = _summary(5, seed=11)
    assert s["harness_errors"] == 0 and s["programs"] == 5 * len(generate.FORMS)
    for mode, c in s["modes"].items():
        assert c["correct"] > 0 and c["buggy"] > 0
        assert c.get("changed-training", 0) == 0 and c.get("changed-text", 0) == 0, (mode, c["examples"])
        assert c.get("wrong", 0) == 0, (mode, c["examples"])
        assert c.get("repaired", 0) > 0, mode  # the fixes do repair programs (not a bench that never fixes)


def _spec(**kw):
    base = dict(seed=5, k=2, sizes=(2,) * 6, condition="mod_plus1", clear_form="zero_grad", clear_place="after_step",
                division="K", remainder="in_condition", logging="item")
    base.update(kw)
    return generate.Spec(**base)


def test_a_fix_that_scales_wrong_is_caught(monkeypatch):
    # negative control: a GG104 "fix" dividing the loss by 3 where the window has K = 2 micro-batches
    def wrong_divisor(tree, d):
        line = d.backward.lineno
        return Fix("m", (Edit(line, 1, line, 1, "    loss = loss / 3\n"),))

    monkeypatch.setitem(FIXES, "GG104", wrong_divisor)
    row = bench.evaluate_spec((0, _spec(division="none", remainder="drop"), ("module",), ("safe",)))["rows"][0]
    assert row["safe"]["changed"] and row["safe"]["fixed_codes"] == ["GG104"]
    assert bench.verdict(row, "safe") == "wrong", row


def test_the_real_gg104_fix_repairs_the_same_program():
    row = bench.evaluate_spec((0, _spec(division="none", remainder="drop"), ("module",), ("safe",)))["rows"][0]
    assert row["required"] == ["GG104"] and bench.verdict(row, "safe") == "repaired", row


def test_gg105_fix_is_not_offered_where_a_window_closes_short():
    src = textwrap.dedent("""
        import torch
        model = torch.nn.Linear(6, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        K = 4
        data = torch.randn(10, 2, 6)
        for i, x in enumerate(data):
            loss = model(x).pow(2).mean() / (i % K + 1)
            loss.backward()
            if (i + 1) % K == 0{extra}:
                opt.step()
                opt.zero_grad()
    """)
    [short] = [f for f in gg.lint_source(src.format(extra=" or i + 1 == len(data)"), "p.py") if f.code == "GG105"]
    assert short.fix is None  # dividing the last window of 2 by K = 4 would make it GG111
    [whole] = [f for f in gg.lint_source(src.format(extra=""), "p.py") if f.code == "GG105"]
    assert whole.fix is not None and whole.fix.applicability == "unsafe"  # negative control


@pytest.mark.parametrize("mode", bench.MODES)
def test_verdicts(mode):
    row = {"required": [], mode: {"changed": False, "fixed_codes": []}}
    assert bench.verdict(row, mode) == "unchanged"
    row = {"required": ["GG102"], mode: {"changed": True, "fixed_codes": ["GG102"], "after_required": ["GG102"]}}
    assert bench.verdict(row, mode) == "wrong"
    row[mode].update(after_required=["GG105"], own=["GG105"])
    assert bench.verdict(row, mode) == "partial"
    row[mode].update(own=[])
    assert bench.verdict(row, mode) == "wrong"


def test_gg104_fix_is_not_offered_where_the_remainder_is_stepped_after_the_loop():
    # dividing every pass by K would leave the remainder's window of 2 at 2/3 of its mean (GG111)
    s = _spec(k=3, sizes=(3,) * 11, condition="mod_k_minus1", division="none", remainder="after_loop")
    row = bench.evaluate_spec((0, s, ("module", "function"), ("safe",)))["rows"]
    assert all("GG104" in r["required"] and "GG104" not in r["safe"]["fixed_codes"] for r in row), row
    # negative control: the same loop on whole windows, its remainder dropped: the fix is offered and repairs it
    whole = _spec(k=3, sizes=(3,) * 9, condition="mod_k_minus1", division="none", remainder="drop")
    [r] = bench.evaluate_spec((0, whole, ("module",), ("safe",)))["rows"]
    assert r["required"] == ["GG104"] and bench.verdict(r, "safe") == "repaired", r


def test_gg104_fix_is_not_offered_for_a_micro_step_loop_over_slices_that_may_be_short():
    # windows as slices `batches[s:s + K]`: the last of 15 batches holds 3 of K = 4, and dividing every pass by
    # K would leave it at 3/4 of its mean (GG111): judged by running both programs in float64
    s = _spec(seed=916444838, k=4, sizes=(3,) * 15, condition="inner", clear_form="model_zero_grad",
              clear_place="after_step", division="none", remainder="after_loop", logging="detach", backward="function")
    rows = bench.evaluate_spec((0, s, generate.FORMS, ("safe",)))["rows"]
    assert all("GG104" in r["required"] and "GG104" not in r["safe"]["fixed_codes"] for r in rows), rows
    assert all(bench.verdict(r, "safe") != "wrong" for r in rows), rows
    # with 16 batches every slice is whole, but the micro-step loop's size is not read from the slice: no fix either
    whole = _spec(seed=916444838, k=4, sizes=(3,) * 16, condition="inner", clear_form="model_zero_grad",
                  clear_place="after_step", division="none", remainder="after_loop", logging="detach", backward="function")
    [r] = bench.evaluate_spec((0, whole, ("module",), ("safe",)))["rows"]
    assert r["required"] == ["GG104"] and bench.verdict(r, "safe") == "not-offered", r


@pytest.mark.parametrize("condition", ["mod_plus1", "inner", "counter"])
def test_gg105_fix_is_not_offered_where_the_window_mixes_micro_batch_sizes(condition):
    # each micro-batch's mean divided by K (the fix's divisor) is a mean of means: with 2, 3, 1, 4, ... items it is
    # not the window's mean over its items, and the fixed program still trains wrong (judged in float64)
    unequal = _spec(division="counter", remainder="drop", sizes=(2, 3, 1, 4, 2, 3), condition=condition)
    rows = bench.evaluate_spec((0, unequal, generate.FORMS, ("unsafe",)))["rows"]
    assert all(r["required"] == ["GG105"] for r in rows), rows
    assert all("GG105" not in r["unsafe"]["fixed_codes"] and bench.verdict(r, "unsafe") != "wrong" for r in rows), rows
    # negative control: equal micro-batches, the same loop: the fix is offered and trains to the float64 reference
    # (a micro-step loop over slices is not read for its size: no fix there, as for GG104's)
    equal = _spec(division="counter", remainder="drop", sizes=(3,) * 6, condition=condition)
    rows = bench.evaluate_spec((0, equal, ("module", "module_short"), ("unsafe",)))["rows"]
    if condition == "inner":
        assert all("GG105" not in r["unsafe"]["fixed_codes"] for r in rows), rows
    else:
        assert all("GG105" in r["unsafe"]["fixed_codes"] and bench.verdict(r, "unsafe") == "repaired" for r in rows), rows


def test_gg105_fix_is_not_offered_for_a_micro_step_loop_over_slices_that_may_be_short():
    # 5 equal micro-batches cut in slices of K = 2: the last slice holds 1, and dividing it by K would leave that
    # window at 1/2 of its mean (GG111): judged by running both programs in float64
    s = _spec(k=2, sizes=(3,) * 5, condition="inner", clear_place="window_start", division="counter",
              remainder="in_condition", logging="tensor", backward="function")
    rows = bench.evaluate_spec((0, s, generate.FORMS, ("unsafe",)))["rows"]
    assert all("GG105" in r["required"] and "GG105" not in r["unsafe"]["fixed_codes"] for r in rows), rows
    assert all(bench.verdict(r, "unsafe") != "wrong" for r in rows), rows


def test_gg105_fix_withheld_for_sizes_spelled_by_a_split_and_the_divided_by_k_program_is_wrong():
    import torch

    src = textwrap.dedent("""
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(6, 3).double()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        K = 2
        g = torch.Generator().manual_seed(1)
        x = torch.randn(12, 6, generator=g, dtype=torch.float64)
        y = torch.randn(12, 3, generator=g, dtype=torch.float64)
        pieces = list(zip(torch.split(x, SIZES), torch.split(y, SIZES)))
        for i, (a, b) in enumerate(pieces):
            per_item = ((model(a) - b) ** 2).sum(dim=1)
            loss = per_item.mean() / (i % K + 1)
            loss.backward()
            if (i + 1) % K == 0:
                opt.step()
                opt.zero_grad()
    """)

    def run(source):
        ns: dict = {}
        exec(compile(source, "<gg105>", "exec"), ns)
        return torch.cat([p.detach().flatten() for p in ns["model"].parameters()])

    def reference(sizes):
        torch.manual_seed(0)
        model = torch.nn.Linear(6, 3).double()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(12, 6, generator=g, dtype=torch.float64)
        y = torch.randn(12, 3, generator=g, dtype=torch.float64)
        ends = [sum(sizes[:n + 1]) for n in range(len(sizes))]
        for w in range(0, len(sizes), 2):
            lo, hi = ends[w] - sizes[w], ends[w + 1]
            opt.zero_grad()
            ((model(x[lo:hi]) - y[lo:hi]) ** 2).sum(dim=1).mean().backward()
            opt.step()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    unequal = src.replace("SIZES", "[1, 5, 2, 4]")
    [f] = [f for f in gg.lint_source(unequal, "p.py") if f.code == "GG105"]
    assert f.fix is None
    # what the fix would have written, run: not the window's mean over items
    divided = unequal.replace("/ (i % K + 1)", "/ K")
    assert not torch.allclose(run(divided), reference([1, 5, 2, 4]), atol=1e-6)
    # negative control: equal sizes, the fix is offered and what it writes trains to the reference
    equal = src.replace("SIZES", "[3, 3, 3, 3]")
    [f] = [f for f in gg.lint_source(equal, "p.py") if f.code == "GG105"]
    assert f.fix is not None
    from gradguard.lint.autofix import fix_source

    fixed = fix_source(equal, "p.py", unsafe=True).text
    assert "/ (i % K + 1)" not in fixed and torch.allclose(run(fixed), reference([3, 3, 3, 3]), atol=1e-12)
