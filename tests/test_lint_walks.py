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


def _mutated_attrs_by_full_walk(tree: ast.Module) -> frozenset:
    """The reference: every node of the file visited (expressions included), as the model did before it
    walked only the statements of files without a ``setattr``."""
    found, pending = set(), [(tree, False)]
    while pending:
        node, in_init = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                pending.append((child, child.name in ("__init__", "setup", "__post_init__")))
                continue
            if not in_init:
                if isinstance(child, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    for t in child.targets if isinstance(child, ast.Assign) else [child.target]:
                        for e in t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                            if isinstance(e, ast.Attribute):
                                found.add(e.attr)
                            else:
                                found.update(n.attr for n in ast.walk(e) if isinstance(n, ast.Attribute))
                elif isinstance(child, ast.Call) and isinstance(child.func, (ast.Name, ast.Attribute)) \
                        and (getattr(child.func, "id", None) or child.func.attr) == "setattr" and len(child.args) > 1:
                    arg = child.args[1]
                    found.add(arg.value if isinstance(arg, ast.Constant) else "")
            pending.append((child, in_init))
    return frozenset(found)


_MUTATING = (
    "class T:\n"
    "    def __init__(self):\n        self.a = 1\n        def inner():\n            self.b = 2\n"
    "    def setup(self):\n        self.c = 3\n"
    "    def run(self):\n        self.d += 1\n        x.y.e: int = 2\n        (self.f, [g.h]) = 1, 2\n"
    "        try:\n            pass\n        except E:\n            self.i = 1\n"
    "        match v:\n            case 1:\n                self.j = 1\n"
    "        f = lambda: setattr(self, 'k', 1)\n"
    "        with m:\n            while c:\n                class C:\n                    z = self.l = 1\n"
    "self.m[0].n = 1\n"
)


def test_mutated_attrs_are_those_of_a_walk_of_every_node():
    from gradguard.lint._model import Module

    without_setattr = _MUTATING.replace("        f = lambda: setattr(self, 'k', 1)\n", "")
    programs = [(str(p), tree) for p, tree in _trees()] + [("mutating", ast.parse(_MUTATING)),
                                                          ("without setattr", ast.parse(without_setattr))]
    walked_statements_only = 0
    for name, tree in programs:
        source = ast.unparse(tree)
        tree = ast.parse(source)
        assert Module(tree, source, name).mutated_attrs() == _mutated_attrs_by_full_walk(tree), name
        walked_statements_only += "setattr" not in source
    assert walked_statements_only > 50
    # outside __init__/setup (a function nested in __init__ is not __init__), the setattr in a lambda included
    assert Module(ast.parse(_MUTATING), _MUTATING, "m").mutated_attrs() == frozenset("bdefhijkln")
    assert Module(ast.parse(without_setattr), without_setattr, "m").mutated_attrs() == frozenset("bdefhijln")


def test_assignments_are_kept_and_equal_a_fresh_reading():
    from gradguard.lint._ast import _assignments, assignments

    def dumped(d):
        def one(v):
            if isinstance(v, tuple):  # ("aug", op, statement)
                return (v[0],) + tuple(ast.dump(x) for x in v[1:])
            return ast.dump(v) if v is not None else None
        return {k: [one(v) for v in vs] for k, vs in d.items()}

    checked = 0
    for _, tree in _trees():
        for node in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While, ast.FunctionDef))]:
            first = assignments(node)
            assert assignments(node) is first  # kept on the node
            assert dumped(first) == dumped(_assignments(node))
            checked += len(first)
    assert checked > 100


@pytest.mark.parametrize("enabled", [True, False])
def test_linting_leaves_the_cycle_collector_as_it_was(enabled):
    import gc

    from gradguard.lint import lint_source

    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        findings = lint_source("for x, y in loader:\n    loss_fn(model(x), y).backward()\n    opt.step()\n")
        assert [f.code for f in findings] == ["GG101"]
        assert gc.isenabled() is enabled
        with pytest.raises(Exception):
            lint_source(object())  # an error inside the lint: the collector is turned back on all the same
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
