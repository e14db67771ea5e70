"""A run length read from a configuration value: ``for i in range(CONFIG["micro_batches"]): x, y = data[i]``
and ``for s in range(0, CONFIG["micro_batches"], K): window = data[s:s + K]``.

The linter proves micro-batch sizes from a literal list (GG105: a window mixing sizes, each pass its
own mean) and a short last slice from the data's length (GG111: passes divided by K on fewer than K
micro-batches). A loop that runs over a configured count instead of the data itself reads the first
N micro-batches: the same proof holds on those. Each program is judged by running it in float64 (the
execution oracle's truth: every step's gradient decomposed over the micro-batches' exact gradients and
compared with the window's mean). Negative controls: equal sizes, a count that fills whole windows,
a count shorter than the data whose last slice is still full, a count the file does not prove.
"""

from __future__ import annotations

import dataclasses
import textwrap

import pytest
import torch

from _benchmarks import load

load("oracle_bench")  # puts benchmarks/ on sys.path, where the oracle package is

from oracle import generate, truth  # noqa: E402

from gradguard.lint import lint_source  # noqa: E402

FORMS = ("module", "module_short", "function", "method", "closure")


def spec(**kw) -> generate.Spec:
    base = dict(seed=5, k=3, sizes=(1, 3, 2, 2, 1, 3, 2), condition="mod_plus1", clear_form="zero_grad",
                clear_place="after_step", division="K", remainder="in_condition", logging="item", run_length="config")
    base.update(kw)
    return generate.Spec(**base)


def verdicts(s: generate.Spec, form: str):
    src = generate.render(s, form)
    x, y = generate.data_tensors(s)
    t = truth.run(src, x, y)
    assert t.error is None, t.error
    return t, {f.code for f in lint_source(src, "train.py")}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("condition", ["mod_plus1", "mod_k_minus1", "counter"])
@pytest.mark.parametrize("remainder", ["in_condition", "drop", "after_loop"])
def test_gg105_on_the_first_n_micro_batches_of_a_configured_run(remainder, condition, form):
    t, lint = verdicts(spec(condition=condition, remainder=remainder), form)
    assert "GG105" in t.required and "GG105" in lint
    # the reference: the same loop over the data itself is reported the same way
    t_data, lint_data = verdicts(spec(condition=condition, remainder=remainder, run_length="data"), form)
    assert "GG105" in t_data.required and "GG105" in lint_data
    # negative controls: equal sizes, and per-item sums over the window's items, are right and silent
    for good in (spec(condition=condition, remainder=remainder, sizes=(2,) * 7),
                 spec(condition=condition, remainder=remainder, division="tokens")):
        t, lint = verdicts(good, form)
        assert "GG105" not in t.required | t.accepted and "GG105" not in lint


@pytest.mark.parametrize("form", FORMS)
def test_gg111_on_the_last_slice_of_a_configured_run(form):
    t, lint = verdicts(spec(condition="inner", sizes=(2,) * 7), form)
    assert t.required == {"GG111"} and "GG111" in lint
    t, lint = verdicts(spec(condition="inner", sizes=(2,) * 6), form)  # 6 = 2 windows of 3: whole
    assert t.required == set() and "GG111" not in lint


PROGRAM = """
import torch
CONFIG = {{"micro_batches": {runs}, "lr": 0.05}}
g = torch.Generator().manual_seed(0)
X = torch.randn(18, 6, generator=g, dtype=torch.float64)
Y = torch.randn(18, 3, generator=g, dtype=torch.float64)
data = [(X[2 * n:2 * n + 2], Y[2 * n:2 * n + 2]) for n in range(9)]
model = torch.nn.Linear(6, 3).double()
opt = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"])
K = 3
for s in range({stop}, K):
    window = data[s:s + K]
    for x, y in window:
        loss = ((model(x) - y) ** 2).sum(dim=1).mean() / K
        loss.backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.parametrize("runs,stop", [
    (7, '0, CONFIG["micro_batches"]'),  # the last slice starts at 6 and the data has 9: full
    (9, '0, CONFIG["micro_batches"]'),  # whole windows
    (8, '0, len(data) - 1'),  # a count the file does not prove as a configured value
])
def test_gg111_where_the_data_outlasts_the_configured_count(runs, stop):
    """Hand-written: 9 micro-batches of 2 items, K = 3; the loop's starts stop at the configured count."""
    src = textwrap.dedent(PROGRAM.format(runs=runs, stop=stop))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(18, 6, generator=g, dtype=torch.float64)
    y = torch.randn(18, 3, generator=g, dtype=torch.float64)
    t = truth.run(src, x, y)
    assert t.error is None and t.required == set()  # every step applies a full window's mean
    assert "GG111" not in {f.code for f in lint_source(src, "train.py")}
    # positive twin: the data ends inside the last slice (7 micro-batches, count 7)
    bad = src.replace("for n in range(9)", "for n in range(7)")
    t = truth.run(bad, x, y)
    if runs == 7:
        assert t.required == {"GG111"} and "GG111" in {f.code for f in lint_source(bad, "train.py")}


def test_the_configured_count_is_read_only_from_a_dict_literal_bound_once():
    """Negative control: a configuration dict bound twice proves nothing: no sizes, no GG105 from them."""
    s = spec()
    src = generate.render(s, "module").replace('CONFIG = {"micro_batches": 7}',
                                               'CONFIG = {"micro_batches": 7}\nCONFIG = dict(CONFIG)')
    assert "GG105" not in {f.code for f in lint_source(src, "train.py")}
    assert dataclasses.replace(s, run_length="data") != s
