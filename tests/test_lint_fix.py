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


def codes(text):
    return [f.code for f in gg.lint_source(text)]


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
    assert codes(result.text) == ["GG103"]  # the dropped last window has no automatic fix


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
    assert "    loss = loss / accum_steps\n    loss.backward()" in fixed
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
    return total_loss
"""
    assert codes(src) == ["GG201"]
    fixed = fix_source(src).text
    assert "        total_loss += loss.item()\n" in fixed and codes(fixed) == []
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


def test_cli_fix_reports_what_remains(tmp_path):
    # GG103 (dropped final window) has no fix: it stays, and --fix exits 1
    (tmp_path / "t.py").write_text(ACCUM_NO_CLEAR)
    out = run("t.py", "--fix", cwd=tmp_path)
    assert out.returncode == 1 and "GG103" in out.stdout and "GG101" not in out.stdout


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


def test_rule_says_whether_it_has_a_fix():
    env = {**os.environ, "PYTHONPATH": SRC}
    out = {c: subprocess.run([sys.executable, "-m", "gradguard", "rule", c], env=env, capture_output=True, text=True, timeout=60).stdout for c in ("GG101", "GG105", "GG103")}
    assert "Fix: safe" in out["GG101"] and "Fix: unsafe" in out["GG105"] and "Fix: none" in out["GG103"]


# --- the corpus: fixed mutants mean what the originals mean -----------------------------

_spec = importlib.util.spec_from_file_location("lint_recall", ROOT / "benchmarks" / "lint_recall.py")
lint_recall = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("lint_recall", lint_recall)
_spec.loader.exec_module(lint_recall)


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
        é = total; total += loss
    return total
"""
    [f] = gg.lint_source(src)
    assert f.code == "GG201" and (f.line, f.col) == (8, 20)
    [edit] = f.fix.edits
    assert src.splitlines()[7][f.col - 1 :].startswith("total += loss")
    assert src.splitlines()[7][edit.col - 1 : edit.end_col - 1] == "loss"
    assert "total += loss.item()" in apply_edits(src, f.fix.edits)
