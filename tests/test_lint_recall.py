"""The linter's recall on seeded bugs: correct programs stay silent, mutated ones are caught.

The corpus is ``tests/lint_corpus`` and the mutation operators are in
``benchmarks/lint_recall.py`` (the same code the benchmark runs).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import gradguard as gg

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("lint_recall", ROOT / "benchmarks" / "lint_recall.py")
lint_recall = importlib.util.module_from_spec(_spec)
sys.modules["lint_recall"] = lint_recall
_spec.loader.exec_module(lint_recall)

PROGRAMS = lint_recall.corpus()
RUNNABLE = [(name, src) for name, src in PROGRAMS if lint_recall.is_runnable(src)]

#: Targets (overall and per operator).
RECALL_OVERALL = 0.90
RECALL_PER_OPERATOR = 0.80

@pytest.fixture(scope="module")
def report():
    return lint_recall.evaluate()


def test_corpus_is_large_and_varied():
    assert len(PROGRAMS) >= 40
    assert len(RUNNABLE) >= 10
    for name, source in PROGRAMS:
        ast.parse(source, name)  # every program is valid Python
    counts = {op: 0 for op in lint_recall.OPERATORS}
    for name, source in PROGRAMS:
        for m in lint_recall.mutants(name, source):
            counts[m.operator] += 1
    # the last-window operator needs a loop that steps its remainder after it: fewer programs
    assert all(n >= 10 for op, n in counts.items() if op != "drop-last-window"), counts
    assert counts["drop-last-window"] >= 2, counts


@pytest.mark.slow
def test_mutants_parse_and_differ():
    for name, source in PROGRAMS:
        for m in lint_recall.mutants(name, source):
            assert m.source != source
            ast.parse(m.source, f"{name} ({m.operator})")


def test_operators_find_nothing_to_mutate_where_the_pattern_is_absent():
    # negative control: the framework-driven loops have no clearing, no accumulation division
    sources = dict(PROGRAMS)
    assert lint_recall.mutants("lightning_auto.py", sources["lightning_auto.py"]) == []
    assert lint_recall.mutants("dist_autograd_rpc.py", sources["dist_autograd_rpc.py"]) == []
    # no accumulation window in a plain epoch loop: only the clearing and the .item() operators apply
    ops = {m.operator for m in lint_recall.mutants("run_plain_epoch.py", sources["run_plain_epoch.py"])}
    assert ops == {"remove-clear", "loss-tensor-in-sum"}


_FLUSHED = """\
def train(model, loader, loss_fn, optimizer, accum, scaler, use_amp):
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            if use_amp:
                scaler.step(optimizer)
            else:
                optimizer.step()
            optimizer.zero_grad()
"""


def test_drop_last_window_removes_the_last_batch_term_of_the_window():
    (mutant,) = lint_recall.mutants("flushed.py", _FLUSHED, ["drop-last-window"])
    assert mutant.source == _FLUSHED.replace(" or i + 1 == len(loader)", "")
    # timm's flag kept in a name: the term goes from the assignment the `if` reads
    sources = dict(PROGRAMS)
    (timm,) = lint_recall.mutants("run_timm_closure.py", sources["run_timm_closure.py"], ["drop-last-window"])
    assert "need_update = (batch_idx + 1) % accum_steps == 0\n" in timm.source
    # the block after the loop (here after the epoch loop around it) that steps the last window
    (after,) = lint_recall.mutants("model_zero_grad_accum.py", sources["model_zero_grad_accum.py"], ["drop-last-window"])
    assert "if step % accumulation_steps != 0:" not in after.source and after.source.count("optimizer.step()") == 1


def test_drop_last_window_leaves_loops_without_a_flush_alone():
    # negative controls: no last-batch term, and a term that is a flag rather than the last batch
    plain = _FLUSHED.replace(" or i + 1 == len(loader)", "")
    flag = _FLUSHED.replace(" or i + 1 == len(loader)", " or not use_accumulation")
    assert lint_recall.mutants("plain.py", plain, ["drop-last-window"]) == []
    assert lint_recall.mutants("flag.py", flag, ["drop-last-window"]) == []


@pytest.mark.parametrize("name,source", PROGRAMS, ids=[n for n, _ in PROGRAMS])
def test_original_is_clean(name, source):
    assert [f.format() for f in gg.lint_source(source, name)] == []


@pytest.mark.slow  # runs every mutant program
@pytest.mark.parametrize("name,source", RUNNABLE, ids=[n for n, _ in RUNNABLE])
def test_mutants_of_runnable_programs_are_real_bugs(name, source):
    """Each mutant trains to other parameters than the original (float64, same seed): it is a bug,
    not a rewrite of the same program. The .item() operator changes memory, not the numbers."""
    reference = lint_recall.train(source, name)
    assert reference and all(p.dtype == torch.float64 for p in reference)
    again = lint_recall.train(source, name)
    assert all(torch.equal(a, b) for a, b in zip(reference, again))  # deterministic, so a change means something
    for m in lint_recall.mutants(name, source):
        params = lint_recall.train(m.source, name)
        same = all(torch.equal(a, b) for a, b in zip(reference, params))
        assert same == (m.operator == "loss-tensor-in-sum"), f"{name} {m.operator}#{m.index}"


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_report_counts_add_up(report):
    assert report["programs"] == len(PROGRAMS)
    rows = report["operators"].values()
    assert report["mutants"] == sum(r["mutants"] for r in rows)
    assert report["caught"] == sum(r["caught"] for r in rows)
    for r in rows:
        assert r["caught"] + len(r["missed"]) == r["mutants"]


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_recall_meets_targets(report):
    per_op = {op: r["recall"] for op, r in report["operators"].items()}
    assert report["recall"] >= RECALL_OVERALL, report["recall"]
    assert all(r >= RECALL_PER_OPERATOR for r in per_op.values()), per_op


_MICRO = """\
def train(model, loader, optimizer, accum_steps):
    for inputs, targets in loader:
        for micro in range(accum_steps):
            loss = model(inputs[micro]).sub(targets[micro]).pow(2).mean() / accum_steps
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def test_clear_after_backward_moves_the_window_clearing_into_the_micro_step_loop():
    (mutant,) = lint_recall.mutants("micro.py", _MICRO, ["clear-after-backward"])
    assert mutant.expect == "GG102"
    assert mutant.source == _MICRO.replace(
        "        optimizer.zero_grad()\n", "").replace(
        "            loss.backward()\n", "            loss.backward()\n            optimizer.zero_grad()\n")
    # negative controls: a plain loop (no window) and a loop with no clearing give no mutant
    plain = "for x in loader:\n    model(x).sum().backward()\n    optimizer.step()\n    optimizer.zero_grad()\n"
    assert lint_recall.mutants("plain.py", plain, ["clear-after-backward"]) == []
    assert lint_recall.mutants("noclear.py", _MICRO.replace("        optimizer.zero_grad()\n", ""), ["clear-after-backward"]) == []


def test_clear_after_backward_mutant_applies_nothing():
    """The mutant is a real bug: run in float64, its steps leave the weights where they started."""
    import torch

    g = torch.Generator().manual_seed(0)
    loader = [(torch.randn(2, 4, 3, generator=g, dtype=torch.float64), torch.randn(2, 4, 1, generator=g, dtype=torch.float64))
              for _ in range(3)]
    (mutant,) = lint_recall.mutants("micro.py", _MICRO, ["clear-after-backward"])
    moved = {}
    for name, source in (("original", _MICRO), ("mutant", mutant.source)):
        ns = {}
        exec(compile(source, name, "exec"), ns)
        torch.manual_seed(1)
        model = torch.nn.Linear(3, 1).double()
        before = [p.detach().clone() for p in model.parameters()]
        ns["train"](model, loader, torch.optim.SGD(model.parameters(), lr=0.1), 2)
        moved[name] = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert moved == {"original": True, "mutant": False}


_ONE_LINE = """\
def train(model, loader, opt):
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        loss.backward(); opt.step(); opt.zero_grad()
"""


def test_remove_clear_removes_only_the_clearing_of_a_line_of_statements():
    """`a(); b(); opt.zero_grad()` on one line: the mutant keeps the backward pass and the step (the bug
    is the missing clearing, and it is a bug when run: the weights end elsewhere than plain SGD's)."""
    import torch

    (mutant,) = lint_recall.mutants("line.py", _ONE_LINE, ["remove-clear"])
    assert mutant.source == _ONE_LINE.replace("; opt.zero_grad()", "")
    header = "def train(model, loader, opt):\n    for x, y in loader:\n"
    guarded = header + "        if x is not None: opt.zero_grad()\n        ((model(x) - y) ** 2).mean().backward()\n        opt.step()\n"
    (mutant,) = lint_recall.mutants("guarded.py", guarded, ["remove-clear"])
    assert mutant.source == guarded.replace("opt.zero_grad()", "pass")
    g = torch.Generator().manual_seed(0)
    loader = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
              for _ in range(3)]
    weights = {}
    for name, source in (("original", _ONE_LINE), ("mutant", lint_recall.mutants("line.py", _ONE_LINE, ["remove-clear"])[0].source)):
        ns = {}
        exec(compile(source, name, "exec"), ns)
        torch.manual_seed(1)
        model = torch.nn.Linear(3, 1).double()
        ns["train"](model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
        weights[name] = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.manual_seed(1)
    reference = torch.nn.Linear(3, 1).double()
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        ((reference(x) - y) ** 2).mean().backward()
        opt.step()
    expected = torch.cat([p.detach().flatten() for p in reference.parameters()])
    assert torch.allclose(weights["original"], expected, atol=1e-12, rtol=0)
    assert not torch.allclose(weights["mutant"], expected, atol=1e-6)
    assert [f.code for f in gg.lint_source(lint_recall.mutants("line.py", _ONE_LINE, ["remove-clear"])[0].source)] == ["GG101"]


_GUARDED = """\
def train(model, loader, opt, limit):
    for it, (x, y) in enumerate(loader):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        if it < limit:
            opt.step()
            opt.zero_grad()
"""
_WINDOW = _GUARDED.replace("        if it < limit:\n", "        if (it + 1) % limit == 0:\n").replace(
    "        loss = ((model(x) - y) ** 2).mean()\n", "        loss = ((model(x) - y) ** 2).mean() / limit\n")
_COUNT_DOWN = """\
def train(model, loader, opt, k):
    count = [k]
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean() / k
        loss.backward()
        count[0] -= 1
        if count[0] == 0:
            opt.step()
            opt.zero_grad()
            count[0] = k
"""


def _trained(source, **kw):
    import torch

    g = torch.Generator().manual_seed(0)
    loader = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
              for _ in range(4)]
    ns = {}
    exec(compile(source, "<train>", "exec"), ns)
    torch.manual_seed(1)
    model = torch.nn.Linear(3, 1).double()
    ns["train"](model, loader, torch.optim.SGD(model.parameters(), lr=0.1), *kw.values())
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_window_operators_leave_steps_that_close_no_window_alone():
    """A step under a test that picks no window (`if it < limit:`, a modulo by 1) or a loop that clears
    before every backward pass steps one pass each time: moving its clearing before the backward
    pass (or dropping a division) is no bug. Run in float64, the moved clearing trains the same."""
    import torch

    ops = ["clear-before-backward", "drop-loss-division"]
    moved = _GUARDED.replace("        loss.backward()\n", "        opt.zero_grad()\n        loss.backward()\n").replace(
        "            opt.step()\n            opt.zero_grad()\n", "            opt.step()\n")
    assert torch.equal(_trained(_GUARDED, limit=10), _trained(moved, limit=10))
    assert lint_recall.mutants("guarded.py", _GUARDED, ops) == []
    by_one = _WINDOW.replace("% limit == 0", "% 1 == 0")
    assert lint_recall.mutants("by_one.py", by_one, ops) == []
    cleared = _WINDOW.replace("        loss.backward()\n", "        opt.zero_grad()\n        loss.backward()\n")
    assert lint_recall.mutants("cleared.py", cleared, ops) == []
    # positive controls: a modulo window and a window counted down keep both operators' mutants, real bugs
    # (a window counted down names no count the division could be matched with: no division mutant)
    for name, source, expected in (("window.py", _WINDOW, ops), ("count_down.py", _COUNT_DOWN, ops[:1])):
        found = {m.operator: m.source for m in lint_recall.mutants(name, source, ops)}
        assert sorted(found) == sorted(expected)
        for mutant in found.values():
            assert not torch.allclose(_trained(source, k=2), _trained(mutant, k=2))


def test_a_clearing_moved_beside_a_backward_pass_on_its_if_line_keeps_the_program_valid():
    """`if not skip: loss.backward()` on one line: the clearing goes on its own line before (after) that
    line, at the `if`'s indentation, and the mutant parses."""
    source = _COUNT_DOWN.replace("        loss.backward()\n", "        if x is not None: loss.backward()\n")
    for op, expected in (("clear-before-backward", "        opt.zero_grad()\n        if x is not None: loss.backward()\n"),
                         ("clear-after-backward", "        if x is not None: loss.backward()\n        opt.zero_grad()\n")):
        (mutant,) = lint_recall.mutants("line.py", source, [op])
        ast.parse(mutant.source)
        assert expected in mutant.source


_VALIDATION = '''\
import torch


class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt = model, opt

    def validation_step(self, x, y):
        with torch.no_grad():
            loss = ((self.model(x) - y) ** 2).mean()
        return loss

    def validate(self, loader):
        total = 0.0
        for x, y in loader:
            loss = self.validation_step(x, y)
            total += loss.item()
        return total

    def training_step(self, x, y):
        self.opt.zero_grad()
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        self.opt.step()
        return loss

    def train(self, loader):
        total = 0.0
        for x, y in loader:
            loss = self.training_step(x, y)
            total += loss.item()
        return total
'''


def test_loss_tensor_in_sum_leaves_a_value_a_method_computed_under_no_grad_alone():
    """`total += loss.item()` where the method of the file that computed `loss` did so under
    `torch.no_grad()` and returned it: dropping `.item()` sums a tensor without a graph, no bug (run: no
    `grad_fn`). The training loop's sum of a loss its method back-propagated is still mutated (a real bug)."""
    import torch

    (mutant,) = lint_recall.mutants("t.py", _VALIDATION, ["loss-tensor-in-sum"])
    assert "            total += loss\n        return total\n\n    def training_step" not in mutant.source  # not the validation loop
    namespace: dict = {}
    exec(compile(_VALIDATION.replace("total += loss.item()", "total += loss"), "<t>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).double()
    trainer = namespace["Trainer"](model, torch.optim.SGD(model.parameters(), lr=0.1))
    data = [(torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 2, dtype=torch.float64)) for _ in range(3)]
    assert trainer.validate(data).grad_fn is None
    assert trainer.train(data).grad_fn is not None
