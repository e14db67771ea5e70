"""GG105 for a window holding a micro-batch with no items (every label ignored: a NaN mean).

The float64 reference shows what the finding says: with ``loss / accum`` the
empty micro-batch takes its 1/accum of the weight and the step is (accum - 1) /
accum of the window's mean; the fixed loop (token sum / window token count) is exact.
"""

import torch
import torch.nn.functional as F

from gradguard.watcher.rules import gg105

from _scripts import SCRIPTS, alone, run_script


def test_the_window_with_the_empty_micro_batch_is_reported_at_its_step(tmp_path):
    findings = run_script(tmp_path, "gg105_empty_micro_batch_bad", *alone("GG105"))[1]
    assert [(f["code"], f["step"]) for f in findings] == [("GG105", 1)], findings
    assert "(4, 0)" in findings[0]["message"]


def test_exact_weights_and_a_window_non_finite_for_another_reason_are_silent(tmp_path):
    assert run_script(tmp_path, "gg105_empty_micro_batch_good", *alone("GG105"))[1] == []


def _judged(counts, factors):
    out = []
    gg105._judge(lambda *a: out.append(a), ("x.py", 1), 1, "SGD", counts, factors, [])
    return out


def test_an_empty_micro_batch_weighs_nothing_only_with_a_zero_factor():
    assert _judged([4, 0], [0.5, 0.5])  # loss / accum: half the weight went to no item
    assert _judged([4, 0, 4], [0.25, 0.5, 0.25])  # unequal factors too
    assert not _judged([4, 0], [1.0, 0.0])  # exact weights (count / total): the empty one adds nothing
    assert not _judged([0, 0], [0.5, 0.5])  # no items at all: nothing to weigh
    assert not _judged([4, 4], [0.5, 0.5])  # the negative control: equal counts, equal weights


def test_the_finding_is_true_against_the_full_batch_mean_in_float64():
    torch.manual_seed(0)
    w = torch.randn(8, 5, dtype=torch.float64, requires_grad=True)
    xs = [torch.randn(6, 8, dtype=torch.float64) for _ in range(2)]
    ts = [torch.randint(0, 5, (6,)), torch.full((6,), -100)]  # the second micro-batch: all ignored
    for x, t in zip(xs, ts):
        loss = F.cross_entropy(x @ w, t, ignore_index=-100)
        assert torch.isnan(loss) == bool((t == -100).all())
        (loss / 2).backward()
    accumulated = w.grad.clone()
    w.grad = None
    F.cross_entropy(torch.cat(xs) @ w, torch.cat(ts), ignore_index=-100).backward()
    torch.testing.assert_close(accumulated, w.grad / 2)  # half the window's mean: what GG105 reports
    w.grad = None
    total = sum(int((t != -100).sum()) for t in ts)
    for x, t in zip(xs, ts):
        (F.cross_entropy(x @ w, t, ignore_index=-100, reduction="sum") / total).backward()
    full = w.grad.clone()
    w.grad = None
    F.cross_entropy(torch.cat(xs) @ w, torch.cat(ts), ignore_index=-100).backward()
    torch.testing.assert_close(full, w.grad)  # the fixed loop is exact
