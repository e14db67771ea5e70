"""GG108 graph-in-grad: ``backward(create_graph=True)`` in a scope that computes no
higher-order gradient itself."""

from __future__ import annotations

import ast
import re
from typing import Iterator, Optional

from .._ast import text
from .._model import Module, Report
from .._ast import subtree
from .._ast import child_nodes

CODE = "GG108"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg108_graph_in_grad_bad.py", "gg108_graph_in_grad_good.py")
#: No automatic fix (``gradguard lint --fix`` leaves its findings as they are).
FIX_SAFETY = None

# Where a scope computes higher-order gradients on purpose (GG108 stays silent): calls of these.
_HIGHER_ORDER = re.compile(r"autograd\.grad$|autograd\.functional|torch\.func\b|functorch|(?:^|\.)(?:grad|hvp|vhp|jvp|vjp|jacrev|jacfwd)$|hessian")


def check_module(module: Module, report: Report) -> None:
    for call, scope in module.create_graphs:
        if not _computes_higher_order(module, scope) and not _dropped_after_its_step(call, scope if scope is not None else module.tree):
            report(
                CODE,
                call,
                f"`{text(call.func)}(create_graph=True)` stores gradients that carry an autograd graph in .grad, "
                f"and nothing in this scope computes a higher-order gradient with torch.autograd.grad.",
                backward=call,
            )


def _computes_higher_order(module: Module, scope: Optional[ast.AST]) -> bool:
    """A call of ``torch.autograd.grad`` (``torch.func``, ``hvp``, ...) written in ``scope`` itself:
    a comment naming one is no call, and for code at module level, a helper function of the file
    that differentiates the ``.grad`` the backward pass left there is the leak, not its excuse."""
    return any(_HIGHER_ORDER.search(text(call.func)) for call in _calls(scope if scope is not None else module.tree, scope is None)) or (
        _returns_parameter_gradients(scope)) or _steps_a_given_optimizer(scope)


def _dropped_after_its_step(call: ast.Call, scope: ast.AST) -> bool:
    """``create_graph=True`` taken on a branch of its own (under an ``if``: the program chose the graph for
    a step that reads it, a Hessian-based optimizer), where the same block then steps an optimizer and right
    after clears that optimizer's gradients to None (``opt.step(); opt.zero_grad(set_to_none=True)``, or
    ``zero_grad()``): the graph-carrying gradients live for that one step only and nothing accumulates
    into them."""
    parents = {id(c): n for n in subtree(scope) for c in child_nodes(n)}
    stmt = call
    while id(stmt) in parents and not isinstance(stmt, ast.stmt):
        stmt = parents[id(stmt)]
    parent = parents.get(id(stmt))
    if not isinstance(parent, ast.If):
        return False
    block = next((b for b in (parent.body, parent.orelse) if any(s is stmt for s in b)), None)
    if block is None:
        return False
    rest = block[next(i for i, s in enumerate(block) if s is stmt) + 1:]
    calls = [s.value for s in rest if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
             and isinstance(s.value.func, ast.Attribute)]
    for i, c in enumerate(calls):
        if c.func.attr == "step" and i + 1 < len(calls):
            nxt = calls[i + 1]
            keeps = any(k.arg == "set_to_none" and not (isinstance(k.value, ast.Constant) and k.value.value is True)
                        for k in nxt.keywords) or bool(nxt.args)
            return (nxt.func.attr == "zero_grad" and text(nxt.func.value) == text(c.func.value) and not keeps)
    return False


def _steps_a_given_optimizer(scope: Optional[ast.AST]) -> bool:
    """The function steps an optimizer built from a class its caller hands it (``opt = optimizer_class([x],
    **config); ...; opt.step()``): which optimizer runs is the caller's choice, and a second-order one
    (AdaHessian and the like differentiate ``.grad`` inside ``step``) needs exactly the graph that
    ``create_graph=True`` leaves there."""
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    args = scope.args
    params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    built = {text(t) for n in subtree(scope) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
             and isinstance(n.value.func, ast.Name) and n.value.func.id in params for t in n.targets}
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
               and text(n.func.value) in built for n in subtree(scope))


def _returns_parameter_gradients(scope: Optional[ast.AST]) -> bool:
    """A function that returns what it read from its parameters after the pass (``[p.grad for p in
    net.parameters()]``, per-sample ``grad_batch`` of each named parameter): the gradients leave it with
    their graph for the caller to differentiate (a gradient penalty), which is what create_graph is for."""
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    reads = []  # comprehensions over a module's parameters that read an attribute of each
    for n in subtree(scope):
        if isinstance(n, (ast.ListComp, ast.DictComp, ast.GeneratorExp, ast.SetComp)):
            for g in n.generators:
                it = g.iter
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("parameters", "named_parameters"):
                    targets = {t.id for t in subtree(g.target) if isinstance(t, ast.Name)}
                    elts = [n.key, n.value] if isinstance(n, ast.DictComp) else [n.elt]
                    if any(isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id in targets and a.attr != "data"
                           for e in elts for a in subtree(e)):
                        reads.append(n)
    if not reads:
        return False
    held = {id(r) for r in reads}
    names = set()
    changed = True
    while changed:  # names bound to something holding one of those reads
        changed = False
        for n in subtree(scope):
            if isinstance(n, ast.Assign) and any(id(x) in held or (isinstance(x, ast.Name) and x.id in names) for x in subtree(n.value)):
                for t in n.targets:
                    for x in subtree(t):
                        if isinstance(x, ast.Name) and x.id not in names:
                            names.add(x.id)
                            changed = True
    return any(
        isinstance(r, ast.Return) and r.value is not None
        and any(id(x) in held or (isinstance(x, ast.Name) and x.id in names) for x in subtree(r.value))
        for r in subtree(scope)
    )


def _calls(node: ast.AST, top_level: bool) -> Iterator[ast.Call]:
    for child in child_nodes(node):
        if top_level and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(child, ast.Call):
            yield child
        yield from _calls(child, top_level)
