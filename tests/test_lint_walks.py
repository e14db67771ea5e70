"""The linter's kept walks give what ``ast.walk`` and ``ast.unparse`` give (the rules rely on their order).

``nodes_of`` keeps, per node and node types, the nodes of ``ast.walk`` in its order (for statement
types it walks the statements only); ``text`` writes names and dotted names itself instead of calling
``ast.unparse``. Both are checked against the standard library on every fixture and corpus program.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gradguard.lint._ast import nodes_of, text

HERE = Path(__file__).resolve().parent
FILES = sorted((HERE / "lint_fixtures").rglob("*.py")) + sorted((HERE / "lint_corpus").rglob("*.py"))

TYPES = [
    ast.Call,
    ast.ClassDef,
    (ast.FunctionDef, ast.AsyncFunctionDef),
    (ast.Assign, ast.AnnAssign),
    (ast.stmt, ast.excepthandler, ast.match_case, ast.mod),
    (ast.Assign, ast.comprehension, ast.withitem),
]


def _trees():
    for path in FILES:
        try:
            yield path, ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue


@pytest.mark.parametrize("types", TYPES, ids=lambda t: "-".join(c.__name__ for c in (t if isinstance(t, tuple) else (t,))))
def test_nodes_of_is_ast_walk_filtered_in_its_order(types):
    checked = 0
    for path, tree in _trees():
        for root in [tree] + [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.ClassDef))][:2]:
            want = [n for n in ast.walk(root) if isinstance(n, types)]
            got = nodes_of(root, types)
            assert [id(n) for n in got] == [id(n) for n in want], path
            assert nodes_of(root, types) is got  # kept, not walked again
            checked += len(want)
    assert checked > 0


def test_nodes_of_sees_statements_nested_in_every_kind_of_block():
    src = (
        "def f():\n"
        "    global g\n"
        "    try:\n        x = 1\n    except E:\n        y = 2\n    else:\n        z = 3\n    finally:\n        w = 4\n"
        "    match v:\n        case 1 if g(lambda: 0):\n            u = 5\n"
        "    with m:\n        for i in r:\n            while c:\n                if a:\n                    class C:\n                        t = 6\n"
    )
    tree = ast.parse(src)
    names = [n.targets[0].id for n in nodes_of(tree, ast.Assign)]
    assert names == [n.targets[0].id for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    assert sorted(names) == ["t", "u", "w", "x", "y", "z"]
    assert [n.names for n in nodes_of(tree, (ast.Global, ast.Nonlocal))] == [["g"]]


def test_text_of_names_and_dotted_names_is_what_unparse_writes():
    checked = 0
    for _, tree in _trees():
        for n in ast.walk(tree):
            if isinstance(n, (ast.Name, ast.Attribute)):
                assert text(n) == ast.unparse(n)
                checked += 1
    # the shapes written without unparse, and those left to it (a constant's attribute needs a space)
    for src in ("x", "self.opt", "a.b.c.d", "(1).real", "f().g", "a[0].b", "(a + b).c"):
        node = ast.parse(src, mode="eval").body
        assert text(node) == ast.unparse(node)
    assert checked > 1000
