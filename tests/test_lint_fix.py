"""``gradguard lint --fix``: the repairs, the engine's guarantees, the CLI and the output forms."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gradguard as gg
from gradguard.findings import Edit, Finding, Fix
from gradguard.lint import autofix as fix_engine
from gradguard.lint.autofix import apply_edits, fix_file, fix_source
from gradguard.lint.autofix import attach_fixes
from gradguard.lint.rules import FIXES
from _findings import codes

ROOT = Path(__file__).resolve().parent.parent
SRC = str(ROOT / "src")

STALE = """\
import torch


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x, y)  # forward pass
        loss.backward()
        optimizer.step()
"""

ACCUM_NO_CLEAR = """\
def train(model, loader, optimizer, accum):
    for i, (x, y) in enumerate(loader):
        loss = model(x, y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
"""



def test_gg101_inserts_clearing_before_backward_and_is_idempotent():
    assert codes(STALE) == ["GG101"]
    result = fix_source(STALE)
    assert "        optimizer.zero_grad(set_to_none=True)\n        loss.backward()" in result.text
    assert "# forward pass" in result.text and [f.code for f in result.fixed] == ["GG101"]
    assert result.remaining == [] and codes(result.text) == []
    again = fix_source(result.text)
    assert again.text == result.text and again.fixed == []


def test_gg101_in_accumulation_clears_after_the_window_step():
    result = fix_source(ACCUM_NO_CLEAR)
    assert "            optimizer.step()\n            optimizer.zero_grad(set_to_none=True)\n" in result.text
    assert codes(result.text) == []  # the dropped last window is stepped after the loop too


def test_crlf_file_stays_crlf():
    text = STALE.replace("\n", "\r\n")
    fixed = fix_source(text).text
    assert fixed != text and "\n" not in fixed.replace("\r\n", "")
    assert fixed.replace("\r\n", "\n") == fix_source(STALE).text


def test_gg102_moves_the_clearing_after_the_step():
    src = """\
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.zero_grad()  # oops
    optimizer.step()
"""
    assert codes(src) == ["GG102"]
    fixed = fix_source(src).text
    assert fixed.endswith("    optimizer.step()\n    optimizer.zero_grad()  # oops\n")
    assert codes(fixed) == []


def test_gg102_moves_the_clearing_after_the_step_of_its_own_flag_branch():
    """AMP chosen once (LAVIS-style): the clearing misplaced in the plain branch belongs after that
    branch's `optimizer.step()`; moved after `scaler.step(optimizer)` it would leave the plain
    run's gradients growing."""
    src = """\
def train(model, loader, optimizer, scaler, accum):
    use_amp = scaler is not None
    assert len(loader) % accum == 0
    for i, (x, y) in enumerate(loader):
        loss = model(x, y) / accum
        if use_amp:
            scaler.scale(loss).backward()
        else:
            optimizer.zero_grad()
            loss.backward()
        if (i + 1) % accum == 0:
            if use_amp:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            else:
                optimizer.step()
"""
    assert codes(src) == ["GG102"]
    fixed = fix_source(src, unsafe=True).text
    assert fixed.endswith("            else:\n                optimizer.step()\n                optimizer.zero_grad()\n")
    assert codes(fixed) == []
    # negative control: a clearing outside the branches has no step of its own branch to follow
    outside = src.replace("        else:\n            optimizer.zero_grad()\n            loss.backward()\n",
                          "        else:\n            loss.backward()\n").replace(
        "        loss = model(x, y) / accum\n", "        loss = model(x, y) / accum\n        optimizer.zero_grad()\n")
    assert "GG102" in codes(outside)
    assert not any(f.code == "GG102" for f in fix_source(outside, unsafe=True).fixed)


def test_gg104_divides_by_the_loops_accumulation_variable():
    src = """\
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
"""
    assert "GG104" in codes(src)
    fixed = fix_source(src, select="GG104").text
    assert "    (loss / accum_steps).backward()" in fixed  # divided where back-propagated only
    assert "GG104" not in codes(fixed)


def test_gg104_without_an_accumulation_variable_has_no_fix():
    # the window closes on a flag, not on `% K`: nothing in the loop says how many micro-batches
    src = """\
def train(model, loader, optimizer):
    for x, y, micro_done in loader:
        loss = model(x, y)
        loss.backward()
        if micro_done:
            optimizer.step()
            optimizer.zero_grad()
"""
    [finding] = gg.lint_source(src)
    assert finding.code == "GG104" and finding.fix is None
    with_k = src.replace("if micro_done:", "if micro_done % 4 == 0:")
    [finding] = gg.lint_source(with_k, select=["GG104"])
    assert finding.code == "GG104" and finding.fix is not None  # negative control


def test_gg107_set_to_none_only_where_nothing_reads_grad():
    src = """\
def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in loader:
        optimizer.zero_grad(set_to_none=False)
        model(x).sum().backward()
        optimizer.step()
"""
    assert codes(src) == ["GG107"]
    fixed = fix_source(src).text
    assert "optimizer.zero_grad(set_to_none=True)" in fixed and codes(fixed) == []
    reads = src.replace("        optimizer.step()\n", "        for p in model.parameters():\n            p.grad += 1\n        optimizer.step()\n")
    [f] = attach_fixes(gg.lint_source(reads), reads) or [None]
    assert f is None or f.fix is None  # the advice would make `p.grad += 1` raise


def test_gg201_item_for_numbers_detach_for_tensor_totals():
    src = """\
def train(model, loader, optimizer):
    total_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        total_loss += loss
    print(f"epoch loss {total_loss / len(loader):.4f}")
"""
    assert codes(src) == ["GG201"]
    fixed = fix_source(src).text
    assert "        total_loss += loss.item()\n" in fixed and codes(fixed) == []
    returned = src.replace('    print(f"epoch loss {total_loss / len(loader):.4f}")', "    return total_loss")
    assert [f.fix for f in gg.lint_source(returned)] == [None]  # the caller may use it as a loss
    on_device = src.replace("total_loss = 0.0", "total_loss = torch.zeros(())")
    assert "        total_loss += loss.detach()\n" in fix_source(on_device).text


GG105_SRC = """\
for it in range(iters):
    for micro_step in range(accum):
        loss = model(x) / (micro_step + 1)
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_gg105_fix_is_unsafe():
    [f] = gg.lint_source(GG105_SRC)
    assert (f.code, f.line) == ("GG105", 3) and f.fix.applicability == "unsafe"
    assert "loss = model(x) / accum\n" in apply_edits(GG105_SRC, f.fix.edits)


def test_unsafe_fixes_need_the_flag(monkeypatch):
    # the engine applies an unsafe fix only when asked (a generator that always offers one)
    def unsafe_fix(tree, diagnostic):
        line = diagnostic.node.lineno
        return Fix("m", (Edit(line, 1, line, 1, "# touched\n"),), "unsafe")

    monkeypatch.setitem(FIXES, "GG101", unsafe_fix)
    assert fix_source(STALE).text == STALE
    assert "# touched" in fix_source(STALE, unsafe=True).text


def test_a_fix_that_breaks_the_syntax_is_rolled_back(monkeypatch):
    def broken(tree, diagnostic):
        line = diagnostic.node.lineno
        return Fix("m", (Edit(line, 1, line, 1, "    if:\n"),))

    monkeypatch.setitem(FIXES, "GG101", broken)
    result = fix_source(STALE)
    assert result.text == STALE and result.fixed == [] and "syntax" in result.error
    assert [f.code for f in result.remaining] == ["GG101"]


def test_file_changed_on_disk_is_not_written(tmp_path, monkeypatch):
    path = tmp_path / "train.py"
    path.write_text(STALE)
    real = fix_engine.fix_source

    def edit_meanwhile(*args, **kwargs):
        result = real(*args, **kwargs)
        path.write_text(STALE + "# edited by the user\n")
        return result

    monkeypatch.setattr(fix_engine, "fix_source", edit_meanwhile)
    done = fix_file(str(path))
    assert not done.written and "changed on disk" in done.result.error
    assert path.read_text() == STALE + "# edited by the user\n"


def test_overlapping_fixes_are_applied_over_passes():
    src = STALE.replace("        loss.backward()\n", "        loss.backward()\n        total = total + loss\n")
    result = fix_source(src)
    assert sorted(f.code for f in result.fixed) == ["GG101", "GG201"]
    assert codes(result.text) == []


# --- the command line -------------------------------------------------------------------


def run(*args, cwd, stdin=None):
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run(
        [sys.executable, "-m", "gradguard", "lint", "--no-config", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, input=stdin,
    )


@pytest.mark.slow  # runs python in a subprocess
def test_cli_fix_diff_fix_only(tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes(STALE.encode())
    diff = run("train.py", "--diff", cwd=tmp_path)
    assert diff.returncode == 1 and "+        optimizer.zero_grad(set_to_none=True)" in diff.stdout
    assert path.read_bytes() == STALE.encode()  # --diff writes nothing
    fixed = run("train.py", "--fix", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "Fixed 1 finding." in fixed.stdout and "No findings." in fixed.stdout
    assert codes(path.read_text()) == []
    second = run("train.py", "--fix-only", cwd=tmp_path)
    assert second.returncode == 0 and "Fixed 0 findings." in second.stdout
    stdin = run("-", "--fix", cwd=tmp_path, stdin=STALE)
    assert stdin.stdout == path.read_text()


@pytest.mark.slow  # runs python in a subprocess
def test_cli_fix_reports_what_remains(tmp_path):
    # GG103 on a window test the fix cannot prove (`i % accum == accum - 1`): it stays, --fix exits 1
    (tmp_path / "t.py").write_text(ACCUM_NO_CLEAR.replace("(i + 1) % accum == 0", "i % accum == accum - 1"))
    out = run("t.py", "--fix", cwd=tmp_path)
    assert out.returncode == 1 and "GG103" in out.stdout and "GG101" not in out.stdout


@pytest.mark.slow  # runs python in a subprocess
def test_cli_json_and_sarif_carry_fixes(tmp_path):
    (tmp_path / "train.py").write_text(STALE)
    data = json.loads(run("train.py", "--format", "json", cwd=tmp_path).stdout)
    fix = data[0]["fix"]
    assert fix["applicability"] == "safe"
    assert fix["edits"] == [{"line": 7, "col": 1, "end_line": 7, "end_col": 1, "content": "        optimizer.zero_grad(set_to_none=True)\n"}]
    assert data[0]["fix"]["edits"][0]["line"] == 7
    log = json.loads(run("train.py", "--format", "sarif", cwd=tmp_path).stdout)
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(Path("/work/shared/data/sarif-schema-2.1.0.json").read_text()) if Path("/work/shared/data/sarif-schema-2.1.0.json").exists() else None
    if schema is not None:
        jsonschema.validate(log, schema)
    [change] = log["runs"][0]["results"][0]["fixes"][0]["artifactChanges"]
    assert change["artifactLocation"]["uri"] == "train.py"
    assert change["replacements"][0]["deletedRegion"] == {"startLine": 7, "startColumn": 1, "endLine": 7, "endColumn": 1}


@pytest.mark.slow  # runs python in a subprocess
def test_rule_says_whether_it_has_a_fix():
    env = {**os.environ, "PYTHONPATH": SRC}
    out = {c: subprocess.run([sys.executable, "-m", "gradguard", "rule", c], env=env, capture_output=True, text=True, timeout=60).stdout for c in ("GG101", "GG105", "GG103", "GG108")}
    assert "Fix: safe" in out["GG101"] and "Fix: unsafe" in out["GG105"] and "Fix: safe" in out["GG103"]
    assert "Fix: none" in out["GG108"]


def test_catalogue_and_rule_modules_agree_on_which_rules_have_a_fix():
    from gradguard.rules import FIX_APPLICABILITY

    assert set(FIX_APPLICABILITY) == set(FIXES)


# --- the corpus: fixed mutants mean what the originals mean -----------------------------

_spec = importlib.util.spec_from_file_location("lint_recall", ROOT / "benchmarks" / "lint_recall.py")
lint_recall = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("lint_recall", lint_recall)
_spec.loader.exec_module(lint_recall)


@pytest.mark.slow  # trains every fixed mutant
def test_fixed_mutants_lint_clean_parse_and_train_like_the_original():
    """Every mutant a fix applies to (of a program the linter finds clean): once fixed it parses,
    lints clean and, for a runnable program, trains to the original's parameters (float64, 1e-12).
    Negative control: the unfixed mutant trains to other parameters."""
    checked = trained = 0
    for name, source in lint_recall.corpus():
        if gg.lint_source(source, name):
            continue
        reference = lint_recall.train(source, name) if lint_recall.is_runnable(source) else None
        for m in lint_recall.mutants(name, source):
            result = fix_source(m.source, name, unsafe=True)
            if not result.fixed:
                continue
            checked += 1
            ast.parse(result.text)
            assert gg.lint_source(result.text, name) == [], (name, m.operator)
            if reference is not None and m.operator != "loss-tensor-in-sum":
                assert not lint_recall._same_params(reference, lint_recall.train(m.source, name))
                assert lint_recall._same_params(reference, lint_recall.train(result.text, name)), (name, m.operator)
                trained += 1
    assert checked >= 30 and trained >= 8, (checked, trained)


@pytest.mark.slow
def test_gg101_fix_of_a_step_reached_through_a_call_keeps_the_helpers_micro_batch_loop():
    """A loop calls a helper that accumulates over its own micro-batch loop and steps the last,
    partial window after it (the corpus's run_accum_last_window.py, its clearings removed). The
    outer loop's GG101 at the after-loop step must not be fixed by a clearing before the
    helper's backward pass (that wipes every micro-batch but the last): the fixed program
    trains like the original (float64). Negative control: the mutant itself does not."""
    name = "run_accum_last_window.py"
    source = (ROOT / "tests" / "lint_corpus" / name).read_text(encoding="utf-8")
    [mutant] = [m.source for m in lint_recall.mutants(name, source) if m.operator == "remove-clear"]
    result = fix_source(mutant, name, unsafe=True)
    assert result.fixed and gg.lint_source(result.text, name) == []
    reference = lint_recall.train(source, name)
    assert not lint_recall._same_params(reference, lint_recall.train(mutant, name))
    assert lint_recall._same_params(reference, lint_recall.train(result.text, name)), result.text


def test_finding_and_edit_columns_agree_after_non_ascii_text():
    # the parser counts UTF-8 bytes; findings and edits both count characters, from 1
    src = """\
def train(model, loader, optimizer):
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        é = float(total); total += loss
    print(é)
"""
    [f] = gg.lint_source(src)
    assert f.code == "GG201" and (f.line, f.col) == (8, 27)
    [edit] = f.fix.edits
    assert src.splitlines()[7][f.col - 1 :].startswith("total += loss")
    assert src.splitlines()[7][edit.col - 1 : edit.end_col - 1] == "loss"
    assert "total += loss.item()" in apply_edits(src, f.fix.edits)


# --- fix safety: a fix changes nothing but the bug ---------------------------------------

FIXTURES = ROOT / "tests" / "lint_fixtures"
RULE_PAIRS = ROOT / "tests" / "rule_pairs"  # one program pair per rule on both sides (scripts/add_rule.py)


def _correct_programs():
    """Every correct program the tests hold: the corpus, the good fixtures and programs of the rule
    pairs, the real-code ones."""
    out = list(lint_recall.corpus())
    for path in sorted(FIXTURES.glob("*.py")) + sorted(RULE_PAIRS.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "# expect:" not in text:
            out.append((path.name, text))
    return out


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_fix_with_unsafe_fixes_changes_no_correct_program(tmp_path):
    """`lint --fix --unsafe-fixes` on every correct program writes nothing (through the CLI)."""
    programs = _correct_programs()
    assert len(programs) >= 70
    folder = tmp_path / "correct"
    folder.mkdir()
    for name, text in programs:
        (folder / name).write_text(text, encoding="utf-8")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    out = run("--fix", "--unsafe-fixes", "correct", cwd=tmp_path)
    assert "Fixed 0 findings." in out.stdout or "Fixed" not in out.stdout, out.stdout
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    # negative control: a buggy program in the same folder is changed
    (folder / "stale.py").write_text(STALE)
    run("--fix", "--unsafe-fixes", "correct", cwd=tmp_path)
    assert (folder / "stale.py").read_text() != STALE


DISTILLATION = """\
import torch


def layer_losses(student_atts, teacher_atts, loss_mse):
    att_loss = 0.0
    for student_att, teacher_att in zip(student_atts, teacher_atts):
        tmp_loss = loss_mse(student_att, teacher_att)
        att_loss += tmp_loss
    {use}
"""


@pytest.mark.parametrize("use", ["return att_loss", "att_loss.backward()", "outputs.append(att_loss)", "total = att_loss * 2"])
def test_gg201_never_cuts_a_total_that_is_returned_backpropagated_or_passed_on(use):
    src = DISTILLATION.format(use=use)
    assert all(f.fix is None for f in gg.lint_source(src) if f.code == "GG201")
    assert fix_source(src, unsafe=True).text == src


def test_gg201_fixes_a_total_that_is_only_logged():
    # negative control of the test above: the same loop, the total only printed
    src = DISTILLATION.format(use='print(f"{att_loss.item():.3f}")')
    [f] = [f for f in gg.lint_source(src) if f.code == "GG201"]
    assert f.fix is not None and "att_loss += tmp_loss.detach()" in fix_source(src).text


def test_gg101_no_fix_where_the_loop_writes_grad_itself():
    # Reptile's meta step assigns .grad; where a clearing would go depends on it
    src = STALE.replace("        optimizer.step()\n", "        for p in model.parameters():\n            p.grad = p.grad * 0.5\n        optimizer.step()\n")
    assert all(f.fix is None for f in gg.lint_source(src) if f.code == "GG101")
    assert fix_source(src, unsafe=True).text == src
    assert gg.lint_source(STALE)[0].fix is not None  # negative control


def test_gg101_clearing_never_goes_inside_an_inner_loop_the_step_is_not_in():
    src = """\
def train(model, tasks, meta_opt):
    for task in tasks:
        for x, y in task:
            model(x, y).backward()
        meta_opt.step()
"""
    fixed = fix_source(src).text
    assert "            meta_opt.zero_grad" not in fixed  # never once per inner iteration
    assert "        meta_opt.step()\n        meta_opt.zero_grad(set_to_none=True)" in fixed


def test_gg104_fix_leaves_the_logged_loss_unchanged():
    src = """\
def train(model, loader, optimizer, accum, log):
    for i, (x, y) in enumerate(loader):
        loss = model(x, y)
        loss.backward()
        log(loss.item())
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""
    fixed = fix_source(src, select="GG104").text
    assert "        (loss / accum).backward()\n        log(loss.item())" in fixed


def test_gg104_no_fix_where_a_step_also_closes_a_shorter_window():
    # dividing by K there would weigh the last window's micro-batches K'/K of their mean
    src = """\
def train(model, loader, optimizer, accum):
    for i, (x, y) in enumerate(loader):
        model(x, y).backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()
"""
    assert [f.fix for f in gg.lint_source(src) if f.code == "GG104"] == [None]


# --- GG103: the last window stepped at its true weight ----------------------------------

DROPPED_LAST_WINDOW = """\
import torch
from torch import nn


def train_epoch(model, loader, optimizer, loss_fn, accum_steps):
    for i, (inputs, labels) in enumerate(loader):
        loss = loss_fn(model(inputs), labels)
        loss = loss / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


def main():
    torch.manual_seed(0)
    x = torch.randn(44, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (44,))
    loader = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 44, 4)]
    model = nn.Linear(5, 3).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        train_epoch(model, loader, optimizer, nn.CrossEntropyLoss(), accum_steps=3)
    return [p.detach().clone() for p in model.parameters()]
"""


def _full_batch_windows():
    """Independent reference: plain SGD on the mean loss of each window's samples (float64),
    windows of 3, 3, 3 and 2 batches of 4, two epochs."""
    torch.manual_seed(0)
    x = torch.randn(44, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (44,))
    model = torch.nn.Linear(5, 3).double()
    for _ in range(2):
        for start in range(0, 44, 12):
            xs, ys = x[start : start + 12], y[start : start + 12]
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(xs), ys).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.5 * p.grad
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.slow
def test_gg103_fix_steps_the_last_window_at_its_true_weight():
    [f] = gg.lint_source(DROPPED_LAST_WINDOW)
    assert f.code == "GG103" and f.fix is not None and f.fix.applicability == "safe"
    result = fix_source(DROPPED_LAST_WINDOW)
    assert [x.code for x in result.fixed] == ["GG103"] and result.remaining == []
    reference = _full_batch_windows()
    assert lint_recall._same_params(reference, lint_recall.train(result.text))
    # negative controls: the unfixed program, and stepping the last window alone (its losses
    # divided by 3 for 2 micro-batches: 2/3 of the mean), both train elsewhere
    assert not lint_recall._same_params(reference, lint_recall.train(DROPPED_LAST_WINDOW))
    step_alone = DROPPED_LAST_WINDOW.replace(
        "            optimizer.zero_grad()\n\n\ndef main",
        "            optimizer.zero_grad()\n    if (i + 1) % accum_steps != 0:\n        optimizer.step()\n        optimizer.zero_grad()\n\n\ndef main",
    )
    assert step_alone != DROPPED_LAST_WINDOW
    assert not lint_recall._same_params(reference, lint_recall.train(step_alone))
    assert fix_source(result.text).text == result.text  # idempotent


def test_gg103_fix_keeps_an_empty_loader_working():
    result = fix_source(DROPPED_LAST_WINDOW)
    namespace = {}
    exec(compile(result.text, "t.py", "exec"), namespace)
    model = torch.nn.Linear(5, 3).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    namespace["train_epoch"](model, [], opt, torch.nn.CrossEntropyLoss(), 3)  # no NameError


@pytest.mark.parametrize(
    "change",
    [
        ("(i + 1) % accum_steps == 0", "i % accum_steps == accum_steps - 1"),  # another window test
        ("loss = loss / accum_steps", "loss = loss / 2"),  # divided by something else than K
        ("enumerate(loader)", "enumerate(loader, 1)"),  # counts from 1
        ("            optimizer.zero_grad()\n\n", "            optimizer.zero_grad()\n    print(i)\n\n"),  # i used after the loop
    ],
)
def test_gg103_no_fix_where_the_model_cannot_prove_the_weights(change):
    src = DROPPED_LAST_WINDOW.replace(*change)
    assert src != DROPPED_LAST_WINDOW
    assert all(f.fix is None for f in gg.lint_source(src) if f.code == "GG103")


# --- what --fix writes: links, permissions ------------------------------------------------


@pytest.mark.slow
def test_fix_through_a_symlink_edits_the_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "src" / "train.py"
    real.parent.mkdir()
    real.write_text(STALE)
    link = tmp_path / "train.py"
    link.symlink_to(real)
    out = run("train.py", "--fix", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "optimizer.zero_grad(set_to_none=True)" in real.read_text()
    assert not list(tmp_path.rglob("*.gradguard-fix.tmp"))


def test_fix_keeps_the_file_mode(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(STALE)
    path.chmod(0o755)
    assert run("train.py", "--fix", cwd=tmp_path).returncode == 0
    assert codes(path.read_text()) == []  # written
    assert (path.stat().st_mode & 0o777) == 0o755


def test_fix_refuses_a_read_only_file(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(STALE)
    path.chmod(0o444)
    out = run("train.py", "--fix", cwd=tmp_path)
    assert out.returncode == 1 and "read-only" in out.stderr
    assert path.read_text() == STALE and (path.stat().st_mode & 0o777) == 0o444
    assert "GG101" in out.stdout  # still reported: nothing was fixed
    assert "Fixed 0 findings." in out.stdout



def _main_of(source: str):
    namespace = {"__name__": "fixture"}
    exec(compile(source, "<fixture>", "exec"), namespace)
    return namespace["main"]()


def test_gg101_single_fix_in_an_accumulating_branch_goes_after_the_window_step(capsys):
    """Each fix must be right on its own (an editor applies one). The corpus program switches
    accumulation on by a flag; with the accumulating branch's clearing removed, the finding is
    reported on the epoch loop, which does not accumulate in itself, and its fix went before the
    branch's backward pass, discarding every micro-batch but the window's last. It belongs after
    that branch's step: the program then trains exactly as the original."""
    original = (ROOT / "tests" / "lint_corpus" / "amp_accum_flag.py").read_text()
    broken = original.replace("optimizer.zero_grad(set_to_none=True)\n", "pass\n")  # both branches' clearings
    step_line = broken.splitlines().index("                    scaler.step(optimizer)") + 1
    findings = [f for f in gg.lint_source(broken) if f.code == "GG101" and f.line == step_line]
    assert len(findings) == 1 and findings[0].fix is not None
    fixed = apply_edits(broken, findings[0].fix.edits)
    accumulating = slice(0, 4)  # main() trains with --accum 2 first: those are the parameters to compare
    reference = _main_of(original)[accumulating]
    got = _main_of(fixed)[accumulating]
    assert all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(got, reference))
    # negative control: the clearing before the branch's backward pass trains differently
    wrong = _main_of(broken.replace("                scaler.scale(loss).backward()\n                if",
                                    "                optimizer.zero_grad(set_to_none=True)\n"
                                    "                scaler.scale(loss).backward()\n                if"))[accumulating]
    assert not all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(wrong, reference))


SKIPPED_STEP = '''\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(3, 1).double()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = [[(torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)) for _ in range(2)]
        for _ in range(4)]


def train_step(samples, skip):
    for x, y in samples:
        loss = torch.nn.functional.mse_loss(model(x), y) / len(samples)
        loss.backward()
    if skip:
        return None
    opt.step()
    return True


for n, samples in enumerate(data):
    train_step(samples, skip=(n == 1))
'''


def test_gg101_fix_covers_a_path_that_returns_before_the_step():
    """A window (the inner loop of one call) and a path that returns before the step (a skipped
    update): a clearing placed after the step would leave the skipped window's gradients in the
    next one. The fix clears before the window's loop instead; run in float64, the fixed program
    trains like one that clears at the start of every call. Negative control: a clearing after
    the step trains to other parameters."""
    [finding] = [f for f in gg.lint_source(SKIPPED_STEP, "skip.py") if f.code == "GG101"]
    result = fix_source(SKIPPED_STEP, "skip.py")
    assert result.fixed and gg.lint_source(result.text, "skip.py") == [], result.text

    def trained(source):
        scope = {}
        exec(compile(source, "skip.py", "exec"), scope)
        return torch.cat([p.detach().flatten() for p in scope["model"].parameters()])

    reference = SKIPPED_STEP.replace("    for x, y in samples:\n", "    opt.zero_grad()\n    for x, y in samples:\n", 1)
    after_step = SKIPPED_STEP.replace("    opt.step()\n", "    opt.step()\n    opt.zero_grad()\n", 1)
    assert torch.allclose(trained(result.text), trained(reference), rtol=0, atol=1e-12)
    assert not torch.allclose(trained(after_step), trained(reference), rtol=0, atol=1e-6)
