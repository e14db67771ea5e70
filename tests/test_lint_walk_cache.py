"""The linter's kept walks give exactly what a fresh walk gives.

A module, function or class is walked once and its nodes kept on it (``_ast.every_node``), and
GG112 answers "does this assignment make a decided test forgotten" once per key and per set of
decisions: both are for speed only, and must not change what any rule reads. The reference is
the plain definition (``ast.walk``, and the per-state reading GG112 made before).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gradguard.lint import _ast
from gradguard.lint._builder import build
from gradguard.lint._project import Project
from gradguard.lint.rules import gg112_clip_before_unscale as gg112

CORPUS = sorted((Path(__file__).parent / "lint_corpus").glob("*.py")) + sorted(
    (Path(__file__).parent / "lint_fixtures").rglob("*.py"))


def _sources():
    for path in CORPUS:
        source = path.read_text()
        try:
            yield path, source, ast.parse(source)
        except SyntaxError:
            continue


@pytest.mark.parametrize("kind", ["module", "functions", "classes"])
def test_kept_walk_is_ast_walk_in_order_every_time(kind):
    checked = 0
    for _, _, tree in _sources():
        roots = [tree] if kind == "module" else [
            n for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef) if kind == "functions" else ast.ClassDef)]
        for root in roots:
            fresh = list(ast.walk(root))
            # first walk, second walk (kept), and the nodes_of lists drawn from it
            assert list(_ast.subtree(root)) == fresh
            assert list(_ast.subtree(root)) == fresh
            assert _ast.nodes_of(root, ast.Call) == [n for n in fresh if isinstance(n, ast.Call)]
            assert _ast.nodes_of(root, ast.Assign) == [n for n in fresh if isinstance(n, ast.Assign)]
            checked += 1
    assert checked > 20


def test_a_module_is_walked_once():
    tree = ast.parse("def f(x):\n    return x + 1\n\nclass C:\n    def g(self):\n        pass\n")
    first = _ast.every_node(tree)
    assert _ast.every_node(tree) is first
    assert first == list(ast.walk(tree))
    # an expression is walked afresh (nothing kept on it)
    expr = tree.body[0].body[0].value
    assert list(_ast.subtree(expr)) == list(ast.walk(expr))
    assert "_gg_nodes_of" not in expr.__dict__


def test_nested_function_walk_is_its_own():
    tree = ast.parse("def outer(a):\n    def inner(b):\n        return b * 2\n    return inner(a)\n")
    outer = tree.body[0]
    inner = outer.body[0]
    assert list(_ast.subtree(inner)) == list(ast.walk(inner))
    assert list(_ast.subtree(outer)) == list(ast.walk(outer))
    assert list(_ast.subtree(tree)) == list(ast.walk(tree))


def _forget_plain(flow, stmt, states):
    """GG112's reading before it was kept per key: every state, every decision."""
    stored = {_ast.text(t) for t in gg112._stores(stmt)}
    out = []
    for s in states:
        kept = frozenset(d for d in s.decided if not flow._reads(d[0]) & stored)
        out.append(s if len(kept) == len(s.decided) else s._replace(decided=kept))
    return out


SCALED = '''
import torch

def train(model, loader, opt, scaler, args, clip):
    for x in loader:
        if args.fp16:
            scaler.scale(model(x)).backward()
        else:
            model(x).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if args.fp16:
            scaler.unscale_(opt)
        args = other(args)
        clip = None
        y = 3
        scaler.step(opt)
'''


def test_gg112_forgets_the_same_decisions_as_its_plain_reading():
    tree = ast.parse(SCALED)
    module = build(tree, SCALED, "<t>", Project([("<t>", SCALED)]))
    flow = gg112.Flow(module)
    fn = tree.body[1]
    flow.block(fn.body, [gg112.State(frozenset(), frozenset(), frozenset())], (fn, (fn,), {}))
    assert flow.tests, "the walk saw the branch tests"
    keys = list(flow.tests)
    states = []
    for bits in range(1 << len(keys)):
        decided = frozenset((k, bool(bits >> i & 1)) for i, k in enumerate(keys))
        states += [gg112.State(frozenset(), decided, frozenset()), gg112.State(frozenset({"scaler"}), decided, frozenset())]
    states.append(gg112.State(frozenset(), frozenset({("for:loop", True)}), frozenset()))
    assignments = [s for s in ast.walk(fn) if isinstance(s, ast.Assign)]
    assert len(assignments) == 3
    forgot_any = False
    for stmt in assignments:
        got = flow._forget_tests(stmt, states)
        want = _forget_plain(flow, stmt, states)
        assert got == want
        forgot_any = forgot_any or got != states
    assert forgot_any, "some assignment here sets what a test reads (negative control of the check)"
