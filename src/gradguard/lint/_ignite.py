"""ignite's ``Engine``, found for the builder: the functions it runs once per batch or per epoch.

ignite has no training loop the linter can see: ``Engine(update)`` calls ``update(engine,
batch)`` once per batch, and ``@engine.on(Events.ITERATION_COMPLETED)`` runs a handler once per
iteration. Each such function's body is one iteration of a loop, so the builder unrolls it as
a loop (as Lightning's manual ``training_step``).

:class:`_IgniteLoops` is a base class of ``_builder._Builder``: it adds the functions it finds to
the builder's pending loops (``self.pending``).
"""

from __future__ import annotations

import ast
import re
from typing import Dict

from ._ast import body_nodes, local_defs, subtree, terminal, text



#: ignite events that fire again and again during a run (not STARTED / COMPLETED, fired once).
_REPEATING_EVENT = re.compile(r"\bEvents\.(EPOCH|ITERATION|GET_BATCH)_(STARTED|COMPLETED)$")


class _IgniteLoops:
    """The steps of :class:`._builder._Builder` that find ignite's loop bodies (see the module's docstring)."""

    def _engine_updates(self) -> None:
        """ignite's ``Engine(update)``: the engine calls ``update(engine, batch)`` once per batch,
        so its body is one iteration of a training loop (as Lightning's manual ``training_step``)."""
        m = self.m
        # an event handler (`@trainer.on(Events.ITERATION_STARTED)`) may clear for the update function:
        # then the update's body alone is not the whole iteration
        handlers_clear = (".on(" in m.source or "add_event_handler" in m.source) and any(
            "zero_grad" in m.lines_with(fn, "zero_grad") for fn in subtree(m.tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(d, ast.Call) and terminal(d.func) == "on" for d in fn.decorator_list
            )
        ) or "add_event_handler" in m.source and "zero_grad" in m.source and self._added_handler_clears()
        # an update defined in a block at module level (`if __name__ == "__main__":`) is a function of the module
        scopes = [(m.tree, {**_block_defs(m.tree), **m.functions})] + [
            (fn, local_defs(fn)) for fn in subtree(m.tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        for scope, defs in scopes:
            if not defs:
                continue
            calls = body_nodes(scope) if scope is not m.tree else (
                n for stmt in m.tree.body if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                for n in subtree(stmt)
            )
            for node in calls:
                if not (isinstance(node, ast.Call) and terminal(node.func) == "Engine"):
                    continue
                qualified = m.project.qualified(text(node.func), m.filename) or ""
                if not qualified.startswith("ignite."):
                    continue  # an Engine of another library (or of this project)
                arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "process_function"), None)
                fn = defs.get(arg.id) if isinstance(arg, ast.Name) else None
                if fn is None or not m.interesting(fn) or any(p[0] is fn for p in self.pending) or handlers_clear:
                    continue
                # the update calls its own closures and its siblings (`forward_pass(batch)`, and
                # `backward_pass`, one of two siblings picked for the run)
                siblings = {**defs, **_closure_aliases(scope, defs)} if scope is not m.tree else {}
                self.pending.append((fn, fn, None, (), {**siblings, **local_defs(fn)}))
        self._engine_handlers(scopes)
        # ignite's own factories (`supervised_training_step`): a function returns its closure
        # `update(engine: Engine, batch)`, which the caller hands to an Engine
        if handlers_clear:
            return
        for scope, defs in scopes[1:]:
            for stmt in scope.body:
                fn = defs.get(stmt.value.id) if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Name) else None
                if fn is None or not m.interesting(fn) or any(p[0] is fn for p in self.pending):
                    continue
                params = fn.args.posonlyargs + fn.args.args
                engine = params[0].annotation if len(params) == 2 else None
                if engine is not None and (m.project.qualified(text(engine), m.filename) or "").startswith("ignite."):
                    self.pending.append((fn, fn, None, (), local_defs(fn)))

    def _added_handler_clears(self) -> bool:
        """Some ``engine.add_event_handler(event, handler, ...)`` may clear: a lambda or a function of
        this file whose body calls ``zero_grad``, or a handler defined elsewhere (unknown)."""
        m = self.m
        functions = {fn.name: fn for fn in subtree(m.tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for call in subtree(m.tree):
            if not (isinstance(call, ast.Call) and terminal(call.func) == "add_event_handler"):
                continue
            handler = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "handler"), None)
            fn = functions.get(handler.id) if isinstance(handler, ast.Name) else None
            if fn is None and not isinstance(handler, ast.Lambda):
                return True  # defined elsewhere: it may clear
            if "zero_grad" in m.scope_text(fn) if fn is not None else "zero_grad" in text(handler):
                return True
        return False

    def _engine_handlers(self, scopes) -> None:
        """``@trainer.on(Events.EPOCH_COMPLETED)`` on an ignite Engine: the handler runs once per
        epoch (or iteration), so its body is one iteration of a loop (ignite's reinforcement
        learning examples back-propagate and step in one). Handlers of events that fire once
        (``STARTED``, ``COMPLETED``) are no loop."""
        m = self.m
        aliases = {  # `EPISODE_COMPLETED = Events.EPOCH_COMPLETED`
            t.id: text(stmt.value) for stmt in m.tree.body if isinstance(stmt, ast.Assign)
            for t in stmt.targets if isinstance(t, ast.Name)
        }
        for scope, _ in scopes:
            engines = {  # names bound to ignite's Engine(...) in this scope
                t.id for stmt in body_nodes(scope) if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                and terminal(stmt.value.func) == "Engine"
                and (m.project.qualified(text(stmt.value.func), m.filename) or "").startswith("ignite.")
                for t in stmt.targets if isinstance(t, ast.Name)
            } if scope is not m.tree else set()
            if not engines:
                continue
            for fn in body_nodes(scope):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not m.interesting(fn):
                    continue
                for d in fn.decorator_list:
                    if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "on"
                            and isinstance(d.func.value, ast.Name) and d.func.value.id in engines and d.args):
                        continue
                    event = d.args[0].func if isinstance(d.args[0], ast.Call) else d.args[0]  # EPOCH_COMPLETED(every=k)
                    written = aliases.get(text(event), text(event))
                    if _REPEATING_EVENT.search(written) and not any(p[0] is fn for p in self.pending):
                        self.pending.append((fn, fn, None, (), local_defs(fn)))


def _closure_aliases(scope: ast.AST, defs: Dict[str, ast.AST]) -> Dict[str, ast.AST]:
    """Names a function binds to one of two of its closures by a test made before its loop
    (``if hvd and amp: backward_pass = hvd_pass`` ``else: backward_pass = amp_pass``): a
    function standing for the pair, ``if <choice>: return hvd_pass(...)`` ``else: return
    amp_pass(...)``, where ``<choice>`` is a name nothing assigns, so that the walk takes it as a
    flag fixed for the run (each run calls one of the two, on every iteration)."""
    out: Dict[str, ast.AST] = {}
    for stmt in scope.body:
        if not (isinstance(stmt, ast.If) and len(stmt.body) == 1 and len(stmt.orelse) == 1):
            continue
        picks = []
        for branch in (stmt.body[0], stmt.orelse[0]):
            ok = isinstance(branch, ast.Assign) and len(branch.targets) == 1 and isinstance(branch.targets[0], ast.Name)
            ok = ok and isinstance(branch.value, ast.Name) and branch.value.id in defs
            picks.append((branch.targets[0].id, defs[branch.value.id]) if ok else None)
        if None in picks or picks[0][0] != picks[1][0] or picks[0][0] in defs:
            continue
        name, (first, second) = picks[0][0], (picks[0][1], picks[1][1])
        params = [a.arg for a in first.args.posonlyargs + first.args.args]
        if params != [a.arg for a in second.args.posonlyargs + second.args.args]:
            continue

        def call(fn):
            return ast.Return(ast.Call(ast.Name(fn.name, ast.Load()), [ast.Name(p, ast.Load()) for p in params], []))

        start = min(first.lineno, second.lineno)
        end = max(first.end_lineno, second.end_lineno)
        choice = ast.If(ast.Name(f"{name}_is_{first.name}", ast.Load()), [call(first)], [call(second)])
        fn = ast.FunctionDef(name=name, args=first.args, body=[choice], decorator_list=[], returns=None)
        for node in subtree(fn):  # on the lines of the two closures: interesting where they are
            if "lineno" in node._attributes:
                node.lineno, node.end_lineno, node.col_offset, node.end_col_offset = start, end, 0, 0
        out[name] = fn
    return out


def _block_defs(tree: ast.Module) -> Dict[str, ast.AST]:
    """Functions defined in the blocks of the module's own statements (``if __name__ == "__main__":``,
    ``with``, ``try``), not inside another function or class: the module's functions as much as a
    top-level ``def``."""
    out: Dict[str, ast.AST] = {}
    todo = [stmt for stmt in tree.body if isinstance(stmt, (ast.If, ast.With, ast.Try))]
    while todo:
        stmt = todo.pop()
        for field in ("body", "orelse", "finalbody", "handlers"):
            for child in getattr(stmt, field, None) or ():
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.setdefault(child.name, child)
                elif isinstance(child, (ast.If, ast.With, ast.Try, ast.ExceptHandler)):
                    todo.append(child)
    return out
