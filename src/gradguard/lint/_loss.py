"""What a loss tensor is: scaled or raw, which names carry it, whether its graph is kept.

Shared by the rules about losses (GG104, GG105, GG201): expression-level
reasoning on the names a loop assigns, without running anything.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, Iterator, Optional

from ._events import CUTTING_ATTRS, terminal, text
from ._model import ACCUM_NAME, Loop, assignments, backward_tensor, bind_arguments, body_nodes, no_grad_with, returns_of

# An attribute holding a loss object (``self.loss_fn``, ``self.criterion``), not a method.
_LOSS_OBJECT = re.compile(r"loss|criterion", re.IGNORECASE)


def scales_gradients(loop_node: ast.AST) -> bool:
    """The loop rescales ``.grad`` itself (``p.grad.div_(k)``, ``p.grad /= k``), or moves it
    into its own buffer (Opacus' virtual step: ``p.summed_grad += p.grad``), where it may divide."""
    for n in body_nodes(loop_node):
        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)) and "grad" in text(n.target):
            return True
        if isinstance(n, (ast.AugAssign, ast.Assign)) and _copies_grad(n):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if n.func.attr in ("div_", "mul_", "_foreach_div_", "_foreach_mul_") and ("grad" in text(n.func.value) or "grad" in text(n)):
                return True
            if n.func.attr in ("add_", "copy_", "append") and not _is_grad(n.func.value) and terminal(n.func.value) != "data":
                if any(_is_grad(a) for a in n.args):  # buf.add_(p.grad), grads.append(p.grad)
                    return True
    return False


def _is_grad(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr in ("data", "clone", "detach"):
        node = node.value
    if isinstance(node, ast.Call):
        return _is_grad(node.func)
    return isinstance(node, ast.Attribute) and node.attr == "grad"


def _copies_grad(n) -> bool:
    """``buf += p.grad`` / ``p.accumulated = p.grad.clone()``: a gradient moved out of ``.grad``."""
    targets = [n.target] if isinstance(n, ast.AugAssign) else n.targets
    if any(_is_grad(t) or (isinstance(t, ast.Attribute) and t.attr == "data") for t in targets):
        return False  # writing .grad itself, or a manual SGD update of p.data
    value = n.value
    return _is_grad(value) or (isinstance(value, ast.BinOp) and (_is_grad(value.left) or _is_grad(value.right)))



def loss_scale(expr, assigns, loop: Loop, depth: int = 0) -> str:
    """``"scaled"`` (divided or weighted), ``"raw"`` (a plain mean-reduced loss) or ``"unknown"``.

    A call to a helper, closure or method of the module is followed into what it returns.
    """
    module = loop.module
    if expr is None or depth > 8:
        return "unknown"
    if isinstance(expr, tuple):  # ("aug", op)
        return "scaled" if isinstance(expr[1], (ast.Div, ast.Mult, ast.FloorDiv)) else "unknown"
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, (ast.Div, ast.Mult, ast.FloorDiv)):
            return "scaled"
        if isinstance(expr.op, (ast.Add, ast.Sub)):
            sides = {loss_scale(expr.left, assigns, loop, depth + 1), loss_scale(expr.right, assigns, loop, depth + 1)}
            return "raw" if sides == {"raw"} else ("scaled" if "scaled" in sides else "unknown")
        return "unknown"
    if isinstance(expr, ast.Name):
        values = assigns.get(expr.id)
        if not values:
            return "unknown"  # computed outside the loop: cannot tell
        kinds = {loss_scale(v, assigns if not self_ref(v, expr.id) else {**assigns, expr.id: []}, loop, depth + 1) for v in values}
        return "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
    if isinstance(expr, (ast.Attribute, ast.Subscript)):  # outputs.loss, outputs[0]
        return loss_scale(expr.value, assigns, loop, depth + 1)
    if isinstance(expr, ast.Call):
        func = expr.func
        name = terminal(func)
        if isinstance(func, ast.Attribute) and name == "scale" and "scaler" in terminal(func.value).lower() and expr.args:
            return loss_scale(expr.args[0], assigns, loop, depth + 1)  # GradScaler.scale(loss)
        if isinstance(func, ast.Attribute) and name in ("mean", "float", "squeeze", "to", "cuda", "contiguous"):
            return loss_scale(func.value, assigns, loop, depth + 1) if name != "mean" else "raw"
        helper = loop.callee(expr)
        if helper is not None:  # what the helper returns, its parameters bound to the arguments
            inner = {**assigns, **bind_arguments(helper, expr), **assignments(helper)}
            kinds = {loss_scale(v, inner, loop, depth + 1) for v in returns_of(helper)}
            return "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
        if isinstance(func, ast.Name) and func.id in module.functions:
            return "unknown"
        if terminal(func) in module.sum_losses:
            return "unknown"  # a loss object built with reduction="sum" elsewhere in the file
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" and not _LOSS_OBJECT.search(name):
            return "unknown"  # an inherited method (a Trainer's compute_loss) may scale
        if name in ("sum", "item") or re.search(r"scale|norm|weight|accum", name, re.IGNORECASE):
            return "unknown"
        for k in expr.keywords:
            if k.arg == "reduction" and not (isinstance(k.value, ast.Constant) and k.value.value == "mean"):
                return "unknown"
        if ACCUM_NAME.search(text(expr)):
            return "unknown"
        return "raw"
    return "unknown"


def self_ref(value, name: str) -> bool:
    return isinstance(value, ast.AST) and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(value))


# Tensor methods whose result still carries the receiver's autograd graph (GG201).
_GRAPH_METHODS = frozenset(
    {
        "mean", "sum", "float", "double", "half", "bfloat16", "to", "cuda", "cpu", "squeeze", "unsqueeze",
        "view", "reshape", "flatten", "contiguous", "clone", "abs", "sqrt", "exp", "log", "pow", "neg",
        "add", "sub", "mul", "div", "type_as", "nanmean", "nansum", "stack", "cat",
    }
)
# Receivers that are modules, not tensors: ``torch.mean(loss)`` carries ``loss``, not ``torch``.
_MODULE_NAMES = frozenset({"torch", "F", "nn", "functional", "np", "numpy", "math", "jnp"})
# A factor named like a loss (``loss``, ``nll``) and not like a weight (``loss_weight``).
LOSS_NAME = re.compile(r"loss|nll|cost", re.IGNORECASE)
_WEIGHT_NAME = re.compile(r"weight|scale|coef|factor|lambda|alpha|beta|ratio|num|count|tokens", re.IGNORECASE)
# Reading one of these gives a number or a new tensor without the receiver's graph.
_NO_GRAPH_ATTRS = frozenset({"size", "shape", "numel", "dim", "ndim", "ndimension", "dtype", "device", "argmax", "argmin", "requires_grad", "grad_fn", "is_cuda"})


def is_weight(node: ast.expr, loop_names) -> bool:
    """A factor that scales a loss rather than being one: a literal, a name the loop
    never assigns (a hyperparameter), a count (``x.size(0)``, ``len(batch)``)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id not in loop_names
    if isinstance(node, ast.UnaryOp):
        return is_weight(node.operand, loop_names)
    if isinstance(node, ast.BinOp):
        return is_weight(node.left, loop_names) and is_weight(node.right, loop_names)
    if isinstance(node, ast.Attribute):
        return node.attr in _NO_GRAPH_ATTRS or (isinstance(node.value, ast.Name) and node.value.id in ("self", "args", "cfg", "config"))
    if isinstance(node, ast.Call):
        return terminal(node.func) in ("size", "numel", "len", "float", "int", "item") or any(
            isinstance(n, ast.Compare) for n in ast.walk(node)
        )
    return False


def loss_carriers(expr, loop_names) -> set:
    """The names whose tensor *is* the loss in ``expr`` (not every name it mentions).

    ``loss / accum`` -> ``{"loss"}``; ``loss_fn(out, labels) * n_tokens`` -> ``set()``
    (the loss is the call's result, ``n_tokens`` only weights it); ``scaler.scale(loss)``
    -> ``{"loss"}``; ``loss.detach()`` -> ``set()``. In a product, a bare name counts when
    it says so (``loss``) or when the other factor is a weight (``l * 0.5``, ``l * x.size(0)``).
    """
    if not isinstance(expr, ast.AST):
        return set()
    if isinstance(expr, ast.Name):
        return {expr.id}
    if isinstance(expr, ast.Attribute):  # outputs.loss
        return set() if expr.attr in CUTTING_ATTRS or expr.attr in _NO_GRAPH_ATTRS else loss_carriers(expr.value, loop_names)
    if isinstance(expr, ast.Subscript):  # outputs[0], losses["total"]
        return loss_carriers(expr.value, loop_names)
    if isinstance(expr, ast.Starred):
        return loss_carriers(expr.value, loop_names)
    if isinstance(expr, ast.UnaryOp):
        return loss_carriers(expr.operand, loop_names)
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, (ast.Add, ast.Sub)):
            return loss_carriers(expr.left, loop_names) | loss_carriers(expr.right, loop_names)
        if isinstance(expr.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            return loss_carriers(expr.left, loop_names)
        if isinstance(expr.op, ast.Mult):
            out = set()
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                if isinstance(side, ast.Name):
                    if (LOSS_NAME.search(side.id) and not _WEIGHT_NAME.search(side.id)) or is_weight(other, loop_names):
                        out.add(side.id)
                elif not is_weight(side, loop_names):
                    out |= loss_carriers(side, loop_names)
            return out
        return set()
    if isinstance(expr, ast.Call):
        func = expr.func
        name = terminal(func)
        if re.search(r"scale", name, re.IGNORECASE) and expr.args:  # scaler.scale(loss), amp.scale_loss(loss, opt)
            return loss_carriers(expr.args[0], loop_names)
        if isinstance(func, ast.Attribute) and name in _GRAPH_METHODS:
            if isinstance(func.value, ast.Name) and func.value.id in _MODULE_NAMES:
                return loss_carriers(expr.args[0], loop_names) if expr.args else set()  # torch.mean(loss)
            return loss_carriers(func.value, loop_names)
        if isinstance(func, ast.Name) and func.id == "sum" and expr.args:  # sum(losses)
            return loss_carriers(expr.args[0], loop_names)
        return set()  # criterion(outputs, labels): the result is the loss, its arguments are not
    if isinstance(expr, (ast.List, ast.Tuple)):
        return set().union(*(loss_carriers(e, loop_names) for e in expr.elts)) if expr.elts else set()
    return set()


def loss_names(loop: Loop, assigns: Dict[str, list]) -> set:
    """The names in the loop that hold a loss tensor with its graph.

    The tensors back-propagated (``loss`` of ``loss.backward()``), the names they were
    built from without cutting the graph (``scaled = loss / k`` adds ``loss``), and the
    names assigned from any of these without cutting it (``logged = loss * x.size(0)``).
    Data, counts and weights that only enter the loss (``labels``, ``mask.sum()``,
    ``n_tokens`` of ``loss_fn(...) * n_tokens``, a float ``lam``) are not losses.
    """
    loop_names = set(assigns)
    losses: set = set()
    for b in loop.backwards:
        names = loss_carriers(backward_tensor(b.node), loop_names)
        for fn, call in reversed(b.frame):
            # a helper's names are its own: only its parameters lead back to the caller's
            bound = bind_arguments(fn, call)
            names = set().union(*(loss_carriers(bound[n][0], loop_names) for n in names if n in bound))
        losses |= names
        if b.frame:  # `loss = self.training_step(batch)` where the helper returns the tensor it back-propagated
            fn, call = b.frame[0]
            if len(b.frame) == 1 and _returns_backwarded(fn):
                losses |= {n for name, values in assigns.items() for v in values if v is call for n in [name]}
    pending = list(losses)
    while pending:  # back: what the loss tensors were built from
        name = pending.pop()
        for v in assigns.get(name, []):
            for n in loss_carriers(v, loop_names) - losses:
                losses.add(n)
                pending.append(n)
    # forward: names assigned from a loss tensor with its graph kept (not running totals)
    sources = [
        (name, v, loss_carriers(v, loop_names))
        for name, values in assigns.items()
        if name not in losses
        for v in values
        if isinstance(v, ast.AST) and not self_ref(v, name)
    ]
    sources = [entry for entry in sources if entry[2]]
    changed = True
    while changed:
        changed = False
        for name, v, carriers in sources:
            if name not in losses and any(n in losses and keeps_graph(v, n) for n in carriers):
                losses.add(name)
                changed = True
    # names assigned a cut value somewhere in the loop (`loss = loss.item()`) are not tensors there
    return {n for n in losses if not any(isinstance(v, ast.AST) and not keeps_graph(v, n) and self_ref(v, n) for v in assigns.get(n, []))}



def _returns_backwarded(fn: ast.AST) -> bool:
    """``fn`` (the helper holding the backward pass) returns, as a bare name, a tensor whose
    graph it back-propagated: ``(loss / k).backward(); return loss``."""
    backwarded = {
        n.id
        for c in body_nodes(fn)
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "backward"
        for n in ast.walk(backward_tensor(c) or ast.Pass())
        if isinstance(n, ast.Name)
    }
    return any(isinstance(r, ast.Name) and r.id in backwarded for r in returns_of(fn))


def resets(loop_node: ast.AST, total: str) -> Iterator[tuple]:
    """``(statement, if_tests)`` for every statement of the loop that sets the total back to a
    constant, with the ``if`` tests around it."""

    def walk(stmts, guards):
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, (ast.With, ast.AsyncWith)) and no_grad_with(stmt):
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and text(stmt.targets[0]) == total:
                value = stmt.value
                if isinstance(value, ast.Constant) or (
                    isinstance(value, ast.Call) and terminal(value.func) in ("zeros", "zeros_like", "tensor")
                    and not any(isinstance(n, ast.Name) and n.id == total for n in ast.walk(value))
                ):
                    yield stmt, guards
            inner = guards + (stmt.test,) if isinstance(stmt, ast.If) else guards
            for field in ("body", "orelse", "finalbody"):
                yield from walk(getattr(stmt, field, None) or [], inner)
            for h in getattr(stmt, "handlers", None) or []:
                yield from walk(h.body, inner)

    yield from walk(loop_node.body, ())


def reset_in_loop(loop_node: ast.AST, total: str) -> bool:
    """The loop itself sets the total back to a constant.

    The chain of graphs it links then spans one reset period: bounded.
    """
    return next(resets(loop_node, total), None) is not None


def keeps_graph(expr: ast.AST, name: str) -> bool:
    """Whether ``expr`` uses tensor ``name`` without cutting its graph (.item(), .detach(), float())."""
    if isinstance(expr, ast.Name):
        return expr.id == name
    if isinstance(expr, ast.Attribute):
        return expr.attr not in CUTTING_ATTRS and expr.attr not in _NO_GRAPH_ATTRS and keeps_graph(expr.value, name)
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id in ("float", "int", "len", "str", "round", "bool", "isinstance", "print"):
            return False
        if isinstance(func, ast.Attribute) and func.attr in CUTTING_ATTRS:
            return False
        return keeps_graph(func, name) or any(keeps_graph(a, name) for a in expr.args)
    if isinstance(expr, (ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List)):
        return any(keeps_graph(c, name) for c in ast.iter_child_nodes(expr))
    return False


def grad_enabled_statements(stmts) -> Iterator[ast.stmt]:
    """Statements of a body, nested ones included, outside ``with torch.no_grad()`` and nested defs."""
    for stmt in stmts:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, (ast.With, ast.AsyncWith)) and no_grad_with(stmt):
            continue
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            yield from grad_enabled_statements(getattr(stmt, field, None) or [])
        for h in getattr(stmt, "handlers", None) or []:
            yield from grad_enabled_statements(h.body)


def backwarded_later(module, scope, name: str) -> bool:
    """The running total is itself back-propagated somewhere in the scope (a summed loss, not a log)."""
    pattern = r"\b%s\b[^\n]*\.backward\s*\(|backward\([^\n]*\b%s\b" % (re.escape(name), re.escape(name))
    return re.search(pattern, module.scope_text(scope)) is not None


def running_sums(loop_node: ast.AST) -> Iterator[tuple]:
    """``(statement, total, added)`` for every ``total += x`` / ``total = total + x`` of a loop
    body that runs with gradients enabled."""
    for node in grad_enabled_statements(loop_node.body):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            yield node, node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add):
            t = text(node.targets[0])
            if t in (text(node.value.left), text(node.value.right)):
                yield node, node.targets[0], node.value


