"""Walks kept or skipped for speed give exactly what the plain walks give, and are not repeated.

The linter's walks of a tree (``_ast.subtree``, ``child_nodes``, ``body_nodes``, the statements-only
walk) read each node's fields less those that only ever hold a name, a number or a flag; the walk of
a loop or ``with`` block is kept on it as a function's is; one parent map per tree is shared by the
rules that asked it again; the existence tests (``X is None``) of a function are read once, not once
per loop the model walks; the divisions that average an ``all_reduce`` are found from the statement
blocks only. None of this may change what a rule reads: each check compares with the plain
definition (``ast.walk``, ``ast.iter_child_nodes``), and the counting checks fail on the code before.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gradguard.lint import _ast, _flow, check_source
from gradguard.lint._events import classify_statement, mark_process_means

HERE = Path(__file__).resolve().parent
CORPUS = sorted((HERE / "lint_corpus").glob("*.py")) + sorted((HERE / "lint_fixtures").rglob("*.py"))

#: every kind of node that has a field the walks skip, and blocks of every kind
SYNTAX = '''
import os.path as osp
from . import sibling
from ..pkg import (a as b, c)
global_count = 0

@decorator(arg=lambda v=1: v)
async def fn(x: int, *args, key=None, **kw) -> "T":
    global global_count
    async with ctx() as (m, n):
        async for item in stream():
            yield f"{item!r:>{width}} {x}"
    result = [y async for y in gen() if (z := y)]
    try:
        pass
    except* ValueError as err:
        raise RuntimeError("x") from err
    match x:
        case {"key": 1, **rest}:
            pass
        case Point(x=0, y=yy) | [1, *others]:
            def inner():
                nonlocal x
        case _ as whole:
            class Local:
                attr: int = 3
    return {k: v for k, v in kw.items()}, {*args}, (w for w in args), b"bytes", 1.5j, ..., x[1:2, ::3]
'''


def _trees():
    yield ast.parse(SYNTAX)
    for path in CORPUS:
        try:
            yield ast.parse(path.read_text())
        except SyntaxError:
            continue


def test_walks_skip_no_node():
    checked = 0
    for tree in _trees():
        fresh = list(ast.walk(tree))
        assert _ast._walk_all(tree) == fresh
        assert list(_ast._subtree(tree)) == fresh
        assert _ast._statements(tree) == [n for n in fresh if isinstance(n, _ast._BLOCKS)]
        for node in fresh:
            assert _ast.child_nodes(node) == list(ast.iter_child_nodes(node))
            checked += 1
    assert checked > 10_000


def _body_reference(node):
    """ast.walk over a loop's or function's body (and a loop's else), not entering nested defs, classes, lambdas."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    out, pending = [], list(node.body) + list(node.orelse if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) else [])
    while pending:
        n = pending.pop()
        out.append(n)
        pending += [c for c in ast.iter_child_nodes(n) if not isinstance(c, nested)]
    return out


def test_body_nodes_are_the_plain_walk_of_the_body():
    checked = 0
    for tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef)):
                assert list(_ast.body_nodes(node)) == _body_reference(node)
                checked += 1
    assert checked > 100


def test_loop_and_with_walks_are_kept_and_equal_ast_walk():
    checked = 0
    for tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
                fresh = list(ast.walk(node))
                assert list(_ast.subtree(node)) == fresh
                # kept: the second walk is the list the first one made (on the code before, walked again)
                assert "_gg_nodes_of" in node.__dict__
                assert list(_ast.subtree(node)) == fresh
                checked += 1
    assert checked > 100
    # an expression is still walked afresh (nothing kept on it)
    expr = ast.parse("f(a.b, [c])", mode="eval").body
    assert list(_ast.subtree(expr)) == list(ast.walk(expr))
    assert "_gg_nodes_of" not in expr.__dict__


def test_parents_of_is_the_plain_parent_map_kept_on_the_tree():
    for tree in _trees():
        roots = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.For))][:5]
        for root in roots:
            plain = {id(c): n for n in ast.walk(root) for c in ast.iter_child_nodes(n)}
            got = _ast.parents_of(root)
            assert got == plain
            assert _ast.parents_of(root) is got


# --- existence tests read once per function --------------------------------------------------------
LOOPS = '''
import torch

def helper(model, x):
    if model is not None:
        return model(x)
    return None

def train(model, opt, loaders, extra):
{loops}
'''

LOOP = '''    for x in loaders[{i}]:
        if extra is not None:
            extra.log(x)
        loss = helper(model, x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
'''


def _counting(monkeypatch):
    calls = {"n": 0}
    plain = _flow._exists_test

    def counted(test):
        calls["n"] += 1
        return plain(test)

    monkeypatch.setattr(_flow, "_exists_test", counted)
    return calls


def test_existence_tests_are_read_once_per_function(monkeypatch):
    source = LOOPS.format(loops="".join(LOOP.format(i=i) for i in range(8)))
    tests = sum(isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Assert)) for n in ast.walk(ast.parse(source)))
    calls = _counting(monkeypatch)
    findings = check_source(source, "train.py").findings
    # each test read once as a function's, and once more as the walked loop's (the loop's own tests are
    # a part of what it asks); the code before read every function's tests again for each of the 8 loops
    assert 0 < calls["n"] <= 2 * tests
    monkeypatch.undo()
    assert findings == check_source(source, "train.py").findings


def test_existence_tests_of_a_function_are_the_plain_scan():
    for tree in _trees():
        for fn in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.For))]:
            plain = set()
            for node in ast.walk(fn):
                if isinstance(node, (ast.If, ast.IfExp, ast.While, ast.Assert)):
                    got = _flow._exists_test(node.test)
                    if got is not None:
                        plain.add(_flow._last_name(got[0]))
            assert _flow._exists_tested_in(fn) == plain


# --- process means from the statement blocks --------------------------------------------------------
@pytest.mark.parametrize("block", [
    "for p in ps:\n    {stmts}",
    "try:\n    pass\nexcept ValueError:\n    {stmts}",
    "try:\n    pass\nfinally:\n    {stmts}",
    "while go:\n    pass\nelse:\n    {stmts}",
    "match mode:\n    case 1:\n        {stmts}",
    "with ctx():\n    {stmts}",
    "def f(p):\n    {stmts}",
])
def test_process_means_are_marked_in_every_kind_of_block(block):
    indent = block.split("{stmts}")[0].rsplit("\n", 1)[-1]
    stmts = ("dist.all_reduce(p.grad.data)\n" + indent + "p.grad.data /= n")
    source = block.format(stmts=stmts) + "\n"
    tree = ast.parse(source)
    mark_process_means(tree, source)
    division = [n for n in ast.walk(tree) if isinstance(n, ast.AugAssign)][0]
    assert classify_statement(division) is None  # a mean over processes, no scaling of the window
    # negative control: the same division without the all_reduce before it scales the gradient
    alone = block.format(stmts="p.grad.data /= n") + "\n"
    tree = ast.parse(alone)
    mark_process_means(tree, alone + "all_reduce")
    division = [n for n in ast.walk(tree) if isinstance(n, ast.AugAssign)][0]
    assert classify_statement(division) == ("scale", "<grad>")


# --- the side-by-side timing script ----------------------------------------------------------------
def test_versions_benchmark_prints_a_row_per_repository_and_refuses_bad_paths(tmp_path, capsys):
    import sys

    sys.path.insert(0, str(HERE.parent / "benchmarks"))
    try:
        import bench_lint_versions as blv
    finally:
        sys.path.remove(str(HERE.parent / "benchmarks"))
    # the script loads gradguard afresh from each src folder: the test session's modules are put back after
    kept = {k: v for k, v in sys.modules.items() if k == "gradguard" or k.startswith("gradguard.")}
    try:
        _run_versions(blv, tmp_path, capsys)
    finally:
        for k in [k for k in sys.modules if k == "gradguard" or k.startswith("gradguard.")]:
            del sys.modules[k]
        sys.modules.update(kept)


def _run_versions(blv, tmp_path, capsys):
    src = HERE.parent / "src"
    repo = tmp_path / "owner+name"
    repo.mkdir()
    (repo / "train.py").write_text("for x in loader:\n    opt.zero_grad()\n    model(x).backward()\n    opt.step()\n")
    assert blv.main(["--before", str(src), "--src", str(src), "--repeat", "1", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "| owner/name | 1 | 4 |" in out and "| all 1 | 1 | 4 |" in out
    # bad input: one line, exit 2, no traceback
    assert blv.main(["--before", str(src), str(tmp_path / "missing")]) == 2
    assert blv.main(["--before", str(tmp_path / "nosrc"), str(repo)]) == 2
    assert blv.main(["--before", str(src)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("bench_lint_versions: ") for line in err)
