"""GG104 on losses that add up several reductions (distillation, reconstruction + sparsity).

The watch reads the loss's graph term by term: a weighted sum of means is a mean
over the micro-batch, a sum-reduced term is left out of the judgement. The
fixture pairs in tests/watch_scripts/ run as a user would; the float64
references below show that what the watch reports is true of the gradient.
"""

import pytest
import torch
import torch.nn.functional as F

from gradguard.watcher._graph import analyze_loss

from _scripts import SCRIPTS, alone, run_script


def _line_of(name, marker):
    lines = (SCRIPTS / f"{name}.py").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gg104_composite_bad", "gg104_sum_term_bad"])
def test_unscaled_composite_loss_is_reported_at_the_first_step(tmp_path, name):
    findings = run_script(tmp_path, name, *alone("GG104"))[1]
    assert [(f["code"], f["step"]) for f in findings] == [("GG104", 1)], findings
    assert findings[0]["line"] == _line_of(name, "loss.backward()  # BUG")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gg104_composite_good", "gg104_sum_term_good"])
def test_scaled_composite_loss_is_silent(tmp_path, name):
    assert run_script(tmp_path, name, *alone("GG104"))[1] == []


# ------------------------------------------------------------------ reading the graph
def _parts(n=6):
    torch.manual_seed(0)
    x = torch.randn(n, 5, requires_grad=True)
    t = torch.randint(0, 5, (n,))
    target = F.softmax(torch.randn(n, 5), -1)
    ce = F.cross_entropy(x, t)
    kd = F.kl_div(F.log_softmax(x, -1), target, reduction="batchmean")
    return x, ce, kd


def test_weighted_sum_of_means_is_a_mean():
    x, ce, kd = _parts()
    info = analyze_loss(0.5 * kd * 4 + 0.5 * ce)
    assert (info.kind, info.count, info.terms, info.outer) == ("mean", 6, 2, 1.0)
    assert info.factor == pytest.approx(2.5)
    # The whole sum divided by k: the factor above the split says so.
    info = analyze_loss((0.5 * kd + 0.5 * ce) / 8)
    assert info.outer == pytest.approx(1 / 8) and info.factor == pytest.approx(1 / 8)
    # Subtraction and add(alpha=) weigh the second term.
    info = analyze_loss(torch.sub(ce, x.abs().mean(), alpha=3))
    assert info.kind == "mean" and info.factor == pytest.approx(4.0) and info.count is None  # counts 6 and 30


def test_kl_batchmean_is_a_mean_over_the_batch():
    x, _, kd = _parts(7)
    assert analyze_loss(kd)[:4] == ("mean", 7, False, 1.0)
    assert analyze_loss(x.sum() / x.numel())[:4] == ("mean", 35, False, 1.0)
    assert analyze_loss(x.sum() / 3).kind == "sum"  # a division by something else is a scaling


def test_terms_the_graph_does_not_show_make_the_loss_unknown():
    x, ce, kd = _parts()
    w = torch.tensor(0.5, requires_grad=True)
    assert analyze_loss(ce + w * kd).kind is None  # a learnable weight
    assert analyze_loss(ce * kd).kind is None  # a product of losses
    assert analyze_loss(ce + kd.sqrt()).kind is None  # a function of a reduction
    sums = analyze_loss(x.pow(2).sum() + x.abs().sum())
    assert sums.kind == "sum" and sums.terms == 2


# ------------------------------------------------------------------ the finding is true of the gradient
def _window_grads(loss_of, k, divide_mean_by=1.0):
    """Accumulated .grad over k micro-batches vs the full batch, in float64."""
    torch.manual_seed(1)
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    xs = [torch.randn(4, 5, dtype=torch.float64) for _ in range(k)]
    for x in xs:
        loss_of(x @ w, divide_mean_by).backward()
    accumulated = w.grad.clone()
    w.grad = None
    loss_of(torch.cat(xs) @ w, 1.0, full=True).backward()
    return accumulated, w.grad


def test_unscaled_weighted_sum_of_means_gives_k_times_the_window_mean():
    def loss_of(h, div, full=False):
        return (0.5 * h.pow(2).mean() + 0.5 * h.abs().mean()) / div

    k = 4
    bad, full = _window_grads(loss_of, k)
    torch.testing.assert_close(bad, k * full)  # what GG104 reports
    good, full = _window_grads(loss_of, k, divide_mean_by=k)
    torch.testing.assert_close(good, full)  # the fixed twin is exact


def test_with_a_sum_term_only_the_mean_term_is_unscaled():
    def loss_of(h, div, full=False):
        return h.pow(2).mean() / div + 1e-3 * h.abs().sum()

    k = 3
    bad, full = _window_grads(loss_of, k)
    assert not torch.allclose(bad, full)  # the mean term counts k times ...
    good, full = _window_grads(loss_of, k, divide_mean_by=k)
    torch.testing.assert_close(good, full)  # ... and dividing it alone is exact: the sum term needs nothing
