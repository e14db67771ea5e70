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
    if any(p.end in ("break", "return") and _exit_on_index(loop, p) for p in loop.paths):
        return  # `if i == n_windows * accum: break` may end the loop on a window boundary
    for s in loop.steps:
        for entry in s.stack:
            if entry[0] == "loop" or not isinstance(entry[0], ast.AST) or not is_modulo_test(loop.resolve(entry[0])):
                return  # a step under another condition may be the remainder's (`or last_batch`)
    # the tests of early exits (`if global_step >= max_train_steps: break`) do not shape the window
    exits = {id(t) for p in loop.paths if p.end in ("break", "return") for _, _, t in p.decisions[-1:]}
    windows = [
        m for m in loop.window_paths()
        if all(is_modulo_test(loop.resolve(t)) or id(t) in exits for _, _, t in m.decisions)
    ]
    if not windows or steps_after(loop) or _divides_evenly(loop, windows) or _asserted_divisible(loop, windows):
        return
    report(
        CODE,
        loop.node,
        "This accumulation loop steps only when a modulo window closes, and nothing after the loop steps "
        "the last partial window.",
        loop=loop, optimizer=loop.steps[0].target if loop.steps else None, step=loop.steps[0].node if loop.steps else None,
    )


def _exit_on_index(loop: Loop, path: Path) -> bool:
    """The early exit is decided on the loop's own index (``if i == limit: break``), which may
    be a window boundary; an exit on a count of optimizer steps (``if global_step >=
    max_train_steps: break``) leaves the data running out first, with its partial window, possible."""
    target = loop.node.target
    names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    it = loop.node.iter
    if isinstance(it, ast.Call) and terminal(it.func) == "enumerate" and isinstance(target, ast.Tuple) and target.elts:
        names = {n.id for n in ast.walk(target.elts[0]) if isinstance(n, ast.Name)}  # the index, not the batch
    tests = [t for _, _, t in path.decisions[-1:]]  # the test that leads to the exit
    if not tests:
        return True  # an unconditional exit: the loop ends where it breaks
    return any(isinstance(n, ast.Name) and n.id in names for t in tests for n in ast.walk(t))


def _window_fits(loop: ast.AST) -> bool:
    """``for i in range(steps * accum)`` or ``islice(loader, steps * accum)``: the iteration count
    is a whole number of windows."""
    it = loop.iter
    if isinstance(it, ast.Call) and terminal(it.func) == "enumerate" and it.args:
        it = it.args[0]
    if isinstance(it, ast.Call) and terminal(it.func) in ("range", "islice") and it.args:
        args = it.args if terminal(it.func) == "range" else it.args[1:]
        if not args:
            return False
        stop = args[-1] if len(args) < 3 else args[1]
        return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) for n in ast.walk(stop))
    return False


def _asserted_divisible(loop: Loop, windows: List[Path]) -> bool:
    """``assert len(loader) % accum == 0`` (or ``n % accum == 0``) in the function or the module,
    naming what the loop iterates over and the window's modulus."""
    moduli = {
        ast.unparse(node.right)
        for m in windows for _, _, test in m.decisions
        for node in ast.walk(loop.resolve(test))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
    }
    iterated = {n.id for n in ast.walk(loop.node.iter) if isinstance(n, ast.Name)} - {"enumerate", "range", "len", "islice"}
    # the loop's own function, and the module's top level (not the other functions' asserts)
    candidates = list(ast.walk(loop.scope)) if loop.scope is not None else []
    candidates += [s for s in loop.module.tree.body if isinstance(s, ast.Assert)]
    for node in candidates:
        if not isinstance(node, ast.Assert):
            continue
        for mod in ast.walk(node.test):
            if isinstance(mod, ast.BinOp) and isinstance(mod.op, ast.Mod) and ast.unparse(mod.right) in moduli:
                if {n.id for n in ast.walk(mod.left) if isinstance(n, ast.Name)} & iterated:
                    return True
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
    """The value of the one assignment to ``name`` in the loop's scope, else of the one
    module-level assignment (a constant such as ``MAX_ITERS = 600``); None if not exactly one."""
    def values_in(scope, walk):
        return [
            n.value
            for n in walk(scope)
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name
        ]

    if loop.scope is not None:
        values = values_in(loop.scope, ast.walk)
        if values:
            return values[0] if len(values) == 1 else None
    values = values_in(loop.module.tree, lambda tree: tree.body)  # module level, not inside functions
    return values[0] if len(values) == 1 else None


def _literal_int(node: ast.expr, loop: Loop, depth: int = 0) -> Optional[int]:
    if depth > 4:
        return None
    if isinstance(node, ast.Name):
        node = _binding(node.id, loop)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        a, b = _literal_int(node.left, loop, depth + 1), _literal_int(node.right, loop, depth + 1)
        if a is None or b is None:
            return None
        return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
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
    if isinstance(node, ast.Call) and terminal(node.func) == "range" and len(node.args) == 2:
        start, stop = _literal_int(node.args[0], loop), _literal_int(node.args[1], loop)
        return None if start is None or stop is None else max(stop - start, 0)
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
