"""GG103 unapplied-gradient: a ``for`` loop steps on a modulo window, and nothing
steps the last partial window after it."""

from __future__ import annotations

import ast
from typing import List, Optional

from .._ast import terminal
from .._flow import Path
from .._model import Loop, Report, steps_after

CODE = "GG103"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg103_unapplied_gradient_bad.py", "gg103_unapplied_gradient_good.py")


def check_loop(loop: Loop, report: Report) -> None:
    if not loop.trains or loop.accumulate or not isinstance(loop.node, (ast.For, ast.AsyncFor)) or _window_fits(loop.node):
        return
    if any(p.end in ("break", "return") for p in loop.paths):
        return  # `if steps == max_steps: break` may end the loop on a window boundary
    for s in loop.steps:
        for entry in s.stack:
            if entry[0] == "loop" or not isinstance(entry[0], ast.AST) or not is_modulo_test(loop.resolve(entry[0])):
                return  # a step under another condition may be the remainder's (`or last_batch`)
    windows = [m for m in loop.window_paths() if all(is_modulo_test(loop.resolve(t)) for _, _, t in m.decisions)]
    if not windows or steps_after(loop) or _divides_evenly(loop, windows):
        return
    report(
        CODE,
        loop.node,
        "This accumulation loop steps only when a modulo window closes, and nothing after the loop steps "
        "the last partial window.",
        loop=loop, optimizer=loop.steps[0].target if loop.steps else None, step=loop.steps[0].node if loop.steps else None,
    )


def _window_fits(loop: ast.AST) -> bool:
    """``for i in range(steps * accum)``: the iteration count is a whole number of windows."""
    it = loop.iter
    if isinstance(it, ast.Call) and terminal(it.func) == "enumerate" and it.args:
        it = it.args[0]
    if isinstance(it, ast.Call) and terminal(it.func) == "range" and it.args:
        stop = it.args[-1] if len(it.args) < 3 else it.args[1]
        return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) for n in ast.walk(stop))
    return False


def _divides_evenly(loop: Loop, windows: List[Path]) -> bool:
    """The loop runs over a literal (``range(8)``, a bound list of 8) and the window size
    is a literal that divides it: there is no partial window to drop."""
    length = _literal_length(loop.node.iter, loop)
    if length is None:
        return False
    for m in windows:
        for _, _, test in m.decisions:
            for node in ast.walk(loop.resolve(test)):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                    k = _literal_int(node.right, loop)
                    if k is None or k <= 0 or length % k:
                        return False
    return True


def _binding(name: str, loop: Loop) -> Optional[ast.expr]:
    """The value of the one assignment to ``name`` in the loop's scope (None if not exactly one)."""
    scope = loop.scope if loop.scope is not None else loop.module.tree
    values = [
        n.value
        for n in ast.walk(scope)
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name
    ]
    return values[0] if len(values) == 1 else None


def _literal_int(node: ast.expr, loop: Loop) -> Optional[int]:
    if isinstance(node, ast.Name):
        node = _binding(node.id, loop)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _literal_length(node: ast.expr, loop: Loop) -> Optional[int]:
    if isinstance(node, ast.Call) and terminal(node.func) == "enumerate" and node.args:
        node = node.args[0]
    if isinstance(node, ast.Name):
        node = _binding(node.id, loop)
    if isinstance(node, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in node.elts):
        return len(node.elts)
    if isinstance(node, ast.Call) and terminal(node.func) == "range" and len(node.args) == 1:
        return _literal_int(node.args[0], loop)
    return None


def is_modulo_test(test: ast.expr) -> bool:
    """A window-boundary test made of modulo comparisons only (``(i + 1) % accum == 0``)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return is_modulo_test(test.operand)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return all(is_modulo_test(v) for v in test.values)
    if isinstance(test, ast.BinOp):
        return isinstance(test.op, ast.Mod)
    if isinstance(test, ast.Compare):
        sides = [test.left, *test.comparators]
        return any(isinstance(s, ast.BinOp) and isinstance(s.op, ast.Mod) for s in sides) and all(
            isinstance(s, (ast.Constant, ast.Name, ast.Attribute, ast.BinOp)) for s in sides
        )
    return False
