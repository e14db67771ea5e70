"""GG201 graph-kept-by-logging: ``total += loss`` on a loss tensor.

Two cases, with what each really costs: in a training loop, after
``backward()``, the total links every step's autograd nodes (backward already
freed their saved activations: a slow growth); in a loop that never calls
``backward()`` and runs without ``torch.no_grad()`` (an evaluation loop), nothing
frees them, so every batch's activations stay alive.
"""

from __future__ import annotations

import ast

from .._events import terminal, text
from .._flow import condition_key
from .._loss import LOSS_NAME, backwarded_later, keeps_graph, loss_carriers, loss_names, reset_in_loop, resets, running_sums
from .._model import Loop, Module, Report, assignments, backward_tensor, tests

CODE = "GG201"


def check_loop(loop: Loop, report: Report) -> None:
    if not (loop.trains or loop.managed):
        return
    assigns = loop.assignments()
    losses = loss_names(loop, assigns)
    if not losses:
        return
    tensors = [backward_tensor(b.node) for b in loop.backwards] + [b.node.args[0] for b in loop.managed if b.node.args]
    backwarded = {n.id for t in tensors for n in ast.walk(t or ast.Pass()) if isinstance(n, ast.Name)}
    for node, total, value in running_sums(loop.node):
        if terminal(total) in losses or terminal(total) in backwarded:
            continue
        if any(keeps_graph(value, name) for name in loss_carriers(value, set(assigns)) & losses) and not (
            backwarded_later(loop.module, loop.scope, terminal(total)) or _reset_each_window(loop, text(total))
        ):
            report(
                CODE,
                node,
                f"`{text(total)}` accumulates the loss tensor itself, not a number: every step's autograd nodes stay "
                f"linked into it (backward() has freed their saved activations, so it grows slowly, and reading it "
                f"later waits for the device).",
                loop=loop, accum=total,
            )


def _reset_each_window(loop: Loop, total: str) -> bool:
    """The total is set back to a constant where the window's step runs (torchtune's form): it is
    the window's loss and links at most one window's graphs, whose activations backward() freed.
    A reset on a logging interval (``if batch % log_interval == 0``) keeps hundreds of steps linked."""
    step_keys = {condition_key(t)[0] for s in loop.steps for t, _ in tests(s) if isinstance(t, ast.expr)}
    return any(
        any(condition_key(t)[0] in step_keys for t in guards) for _, guards in resets(loop.node, total)
    )


def check_module(module: Module, report: Report) -> None:
    """Evaluation loops: no backward, no ``torch.no_grad()``, a loss tensor summed."""
    if not module.eval_loops or "torch" not in module.source:
        return
    for loop_node, scope in module.eval_loops:
        assigns = assignments(loop_node)
        losses = {
            name
            for name, values in assigns.items()
            if LOSS_NAME.search(name) and values and all(_is_loss_value(v) for v in values)
        }
        if not losses:
            continue
        for node, total, value in running_sums(loop_node):
            if terminal(total) in losses:
                continue
            if any(keeps_graph(value, name) for name in loss_carriers(value, set(assigns)) & losses) and not (
                backwarded_later(module, scope, terminal(total)) or reset_in_loop(loop_node, text(total))
            ):
                report(
                    CODE,
                    node,
                    f"`{text(total)}` accumulates the loss tensor itself in a loop that runs without torch.no_grad() "
                    f"and never calls backward(): nothing frees the graphs, so every batch's activations stay alive "
                    f"(run it under torch.no_grad() and add loss.item()).",
                    accum=total,
                )


def _is_loss_value(value) -> bool:
    """A freshly computed loss: ``criterion(out, y)``, ``model(x).loss``, ``outputs["loss"]``."""
    if isinstance(value, ast.Attribute):
        return value.attr == "loss" and _is_loss_value(value.value)
    if isinstance(value, ast.Subscript):
        return _is_loss_value(value.value)
    return isinstance(value, ast.Call) and terminal(value.func) not in _NUMBERS


# Calls whose result is a number or a tensor without graph, not a loss tensor.
_NUMBERS = frozenset({"item", "detach", "tolist", "numpy", "float", "int", "len", "round", "str", "cpu_item"})
