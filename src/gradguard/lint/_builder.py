"""Building the program model of one file (:class:`._model.Module`), in one walk.

Cheap text searches first mark the lines that can hold a gradient-buffer event (and
the lines calling helpers that hold one), so that the walk skips everything else;
then every loop that can reach a backward pass is unrolled by :class:`._flow.Walker`.
"""

from __future__ import annotations

import ast
import re
import sys
from typing import Callable, Dict, List, Optional

from ._ast import (
    NO_GRAD_CONTEXTS, any_between, bind_arguments, body_nodes, find_all, keyword_is, lines_of, local_defs, methods_of, no_grad_function, no_grad_with, overlaps,
    returns_of,
    subtree, terminal, text, walk_lines,
)
from ._events import OPTIMIZER_CLASSES, conditional_step, optimizer_constructor
from ._flow import MAX_WORK, TooComplex, Walker
from ._frameworks import is_framework_class, is_framework_hook, is_hf_trainer_class, is_manual_lightning, runs_own_loop
from ._model import Loop, Module
from ._project import Project, imported_names, matches_at


# Words without which a line holds no gradient-buffer event (searched with str.find,
# which is much faster than one regular expression with many alternatives).
# (A manual update `p.data.add_(p.grad)` or `p.grad.zero_()` is found by ".grad".)
_KEYWORDS = (
    "backward", ".step", "zero_grad", ".grad", "create_graph", "optim", "accumulate",
    "SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Lion", "LAMB", "Lamb", "Muon", "_foreach_zero_",
    "clear_grad", "reset_grad", "free_grad", "grad_none", "grads_none", "grads_to_none", "grad_to_none",
    "num_items_in_batch", "Accumulator", "accumulate_batch", "acc.",
)


# Method names that torch objects have too (`model.train()`, `opt.step()`): a call of one on
# an object of unknown class is no call of this module's method of the same name.
_COMMON_METHODS = frozenset(
    {
        "train", "eval", "forward", "step", "zero_grad", "backward", "to", "cuda", "cpu", "parameters",
        "named_parameters", "state_dict", "load_state_dict", "apply", "modules", "children", "update",
        "add_param_group", "get", "items", "keys", "values", "append", "extend", "pop", "close", "reset",
        "item", "detach", "save", "load", "log", "run", "start", "stop", "format", "copy", "clear", "add",
    }
)


# A learning-rate scheduler's constructor (``torch.optim.lr_scheduler.StepLR``, ``LambdaLR``,
# transformers' ``get_linear_schedule_with_warmup``): its first argument is an optimizer.
_SCHEDULER_CTOR = re.compile(r"lr_scheduler\.|(?:LR|Scheduler)$|_schedule_with_warmup$")

# A name that says scheduler or scaler (the last resort of _sole_stepped, listed in docs/rules.md).
_SCHEDULER_NAME = re.compile(r"sched|scaler", re.I)

#: Statement visits per line of a file that its loops may share beyond :data:`~._flow.MAX_WORK` each.
WORK_PER_LINE = 20

# A name called: the run of word characters before "(" from its first letter or "_" (as a
# search for `[A-Za-z_]\w*\s*\(` finds it), matched once per run rather than from each of its characters.
# The possessive quantifiers (Python 3.11+) only spare the backtracking: the classes they repeat are
# disjoint from what follows each, so Python 3.10's plain ones match exactly the same.
_CALL_SITE = re.compile(r"\b[^\W_A-Za-z]*+([A-Za-z_]\w*+)\s*+\(" if sys.version_info >= (3, 11)
                        else r"\b[^\W_A-Za-z]*([A-Za-z_]\w*)\s*\(")
_PARTIAL_SITE = re.compile(r"\bpartial\s*\(\s*(?:self\s*\.\s*)?([A-Za-z_]\w*)")


def _step_receivers_in(scope: ast.AST, m) -> set:
    """The texts of the objects a function calls ``zero_grad`` or ``step`` on (with arguments too)."""
    return {
        text(n.func.value) for n in walk_lines(scope, m.word_lines((".step", "zero_grad")))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("step", "zero_grad")
    }


def build(tree: ast.Module, source: str, filename: str, project: Optional[Project] = None, through_imports_only: bool = False) -> Module:
    """The model of one parsed module (``source`` with ``\\n`` line ends, as the parser counts lines).

    >>> src = "for x in data:\\n    model(x).backward()\\n    opt.step()\\n"
    >>> model = build(ast.parse(src), src, "t.py")
    >>> [[e.kind for e in p.events] for p in model.loops[0].paths]
    [['backward', 'step']]
    """
    module = Module(tree, source, filename)
    # the files linted together resolve base classes (a project's own `Trainer` is no HF Trainer)
    module.project = project if project is not None else Project([(filename, source)])
    builder = _Builder(module)
    builder.through_imports_only = through_imports_only  # see _Builder.run
    builder.run()
    return module


# ---------------------------------------------------------------------------
# Building the model
# ---------------------------------------------------------------------------
class _Builder:
    def __init__(self, module: Module):
        self.m = module
        self.pending: List[tuple] = []  # (node, scope, cls, after, closures) of every loop
        self.hot_sums: List[tuple] = []  # (node, scope): loops with event words that sum a loss
        self.manual: set = set()  # ids of Lightning modules with manual optimization
        self.framework: set = set()  # ids of classes a framework drives (resolved from their bases)
        self.no_grad_callees: set = set()
        self.sum_candidates = _running_sum_lines(module.source)
        self._bound = False  # whether the objects built from this module's classes are known
        self.foreign_bound = False  # objects of another file's classes are followed (see _bind_foreign)
        self.through_imports_only = False  # the file holds no event word: only imported classes may train
        self.work_pool = WORK_PER_LINE * module.source.count("\n")  # see _loop
        self.foreign_backward: List[int] = []  # lines calling another file's method that back-propagates

    def run(self) -> None:
        m = self.m
        m._mark_lines(_KEYWORDS)
        m._grad_lines = lines_of(m.source, find_all(m.source, (".grad",)))
        self._mark_sum_lines()
        for stmt in m.tree.body:  # helpers first, so that lines calling them count as interesting
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                m.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                m.classes[stmt.name] = stmt
        for cls in m.classes.values():
            m.methods[id(cls)] = self._class_methods(cls)
        if m.project.texts:
            self._bind_foreign()
        if self.through_imports_only and not self.foreign_backward:
            return  # no event word of its own, and no call into another file's backward pass
        self._mark_helper_calls()
        if self.sum_candidates:
            self._find_no_grad_callees()
        self._visit(m.tree.body, None, None, (), {}, False)
        self._optimizers_by_role()
        if "Engine" in m.source:
            self._engine_updates()
        for node, scope, cls, after, closures in self.pending:
            self._loop(node, scope, cls, after, closures)
        if self.hot_sums:
            training = {id(loop.node) for loop in m.loops if loop.trains or loop.managed}
            m.eval_loops += [(node, scope) for node, scope in self.hot_sums if id(node) not in training]

    def _optimizers_by_role(self) -> None:
        """Objects that act as optimizers, whatever they are called: an object both cleared
        (``o.zero_grad()``) and stepped without arguments (``o.step()``), or handed to a learning-rate
        scheduler's constructor (``StepLR(o, ...)``) or a scaler's ``step(o)``. A scheduler is never
        cleared, a module is never stepped: the pair says what the object is."""
        m = self.m
        cleared = {text(call.func.value) for call, _, _ in m.zero_grads}
        stepped, handed, stepped_calls = set(), set(), []
        for node in walk_lines(m.tree, m.word_lines((".step", "lr_scheduler", "Scheduler", "LR("))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "step":
                if not node.args and not node.keywords:
                    stepped.add(text(func.value))
                    stepped_calls.append(node)
                elif node.args and "scaler" in terminal(func.value).lower():
                    handed.add(text(node.args[0]))
            elif node.args and _SCHEDULER_CTOR.search(text(func)):
                handed.add(text(node.args[0]))  # lr_scheduler.StepLR(opt, ...): its first argument is an optimizer
        # `loss_scaler(loss, o, update_grad=...)` with `o.zero_grad()` elsewhere: cleared, and stepped
        # by the call (see _events.conditional_step)
        for node in walk_lines(m.tree, m.word_lines(("%",))):
            if isinstance(node, ast.Call):
                found_step = conditional_step(node)
                if found_step is not None and text(found_step[0]) in cleared:
                    stepped.add(text(found_step[0]))
        found = (cleared & stepped) | {h for h in handed if h and "(" not in h}
        found |= self._passed_optimizers(m.optimizer_names | found)
        found |= self._sole_stepped(stepped_calls, m.optimizer_names | found)
        # an object handed the loss to back-propagate (`X.backward(loss)`: DeepSpeed's engine) runs
        # the backward pass itself and owns the gradient buffers it fills, clearing them at its own
        # step: no role makes it a plain optimizer whose `.grad` the user must clear
        found -= self._backward_owners()
        # a wrapper's own `step()` delegating to `self.inner.step()` is followed by the walker and
        # reported where the loop calls the wrapper: its inner object is left as the walker sees it
        if any(f.startswith("self.") for f in found):
            lines = m.word_lines((".step", "zero_grad"))
            found -= {
                text(n.func.value) for methods in m.methods.values() for name in ("step", "zero_grad") if name in methods
                for n in walk_lines(methods[name], lines)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
            }
        m.optimizer_names.update(found)

    def _backward_owners(self) -> set:
        """The objects handed a loss to back-propagate (``engine.backward(loss)``), whatever they
        are called; not ``torch.autograd.backward(loss)``, which is a function of a module."""
        m = self.m
        return {
            text(n.func.value) for n in walk_lines(m.tree, m.word_lines(("backward",)))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
            and n.args and text(n.func.value) not in ("torch.autograd", "autograd")
        }

    def _passed_optimizers(self, known) -> set:
        """Parameters of the module's functions that a call binds to an optimizer: one built in the
        call (``train(net, torch.optim.SGD(net.parameters()), data)``) or one already known
        (``apply_update(o, m)`` from a function whose ``o`` is one), followed through two levels
        of calls. Whatever the parameter is called."""
        m = self.m
        if not known and not m.ctors:
            return set()  # no optimizer built or known in the file: none to pass on
        functions = {name: fn for name, fn in m.functions.items() if overlaps(m._lines, fn)}
        if not functions:
            return set()
        sites = self._call_sites()
        # only the calls on lines that may hold an event or call a helper holding one (an optimizer's
        # constructor names `optim`, a call passing one on reaches the helper's events)
        lines = sorted(set(lines_of(m.source, [pos for name in functions for pos in sites[name]])) & set(m._lines))
        calls = [n for n in walk_lines(m.tree, lines) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in functions]
        out, known = set(), set(known)
        for _ in range(2):
            for call in calls:
                for param, values in bind_arguments(functions[call.func.id], call).items():
                    value = values[0]
                    if param in known or not isinstance(value, (ast.Call, ast.Name, ast.Attribute)):
                        continue
                    if optimizer_constructor(value) is not None if isinstance(value, ast.Call) else text(value) in known:
                        out.add(param)
                        known.add(param)
        return out

    def _sole_stepped(self, calls: List[ast.Call], known) -> set:
        """The object stepped without arguments in a function that back-propagates, when it is the
        only one stepped there and no optimizer of the function is known otherwise: the gradients
        of that backward pass reach no other update. Not an object built here by a constructor
        that is no optimizer's (a scheduler, a profiler). A script's module-level code counts as one
        function."""
        m = self.m
        scopes = list(m.functions.values()) + [f for methods in m.methods.values() for f in methods.values()]
        by_scope: Dict[int, tuple] = {}
        def inside(line: int):
            return next((f for f in scopes if f.lineno <= line <= (f.end_lineno or f.lineno)), None)

        for call in calls:
            scope = inside(call.lineno)
            if scope is not None and overlaps(m._backward_lines, scope):
                by_scope.setdefault(id(scope), (scope, set()))[1].add(text(call.func.value))
            elif scope is None and any(inside(line) is None for line in m._backward_lines):
                # a script: the module-level code back-propagates and steps
                by_scope.setdefault(id(m.tree), (m.tree, set()))[1].add(text(call.func.value))
        out = set()
        for scope, receivers in by_scope.values():
            if len(receivers) != 1:
                continue
            (name,) = receivers
            if name in known or "(" in name or any(t in known for t in _step_receivers_in(scope, m) if t != name):
                continue
            if _SCHEDULER_NAME.search(name):
                continue  # the last resort, listed in docs/rules.md: a name that says scheduler or scaler
            # names are the file's, not the function's: built anywhere in the file as something else
            # (`scheduler = StepLR(optimizer)` in another function) is no optimizer here either
            attr = name.rpartition(".")[2]
            built = [
                n.value for n in walk_lines(m.tree, m.word_lines((attr + " =", attr + "=")))
                if isinstance(n, ast.Assign) and any(text(t) in (name, attr) for t in n.targets)
            ]
            if any(isinstance(v, ast.Call) and optimizer_constructor(v) is None for v in built):
                continue  # `sched = StepLR(opt)`, `prof = torch.profiler.profile()`: built as something else
            out.add(name)
        return out

    def _class_methods(self, cls: ast.ClassDef, depth: int = 0) -> Dict[str, ast.AST]:
        """Methods of ``cls`` and of its bases defined in this module (own methods win)."""
        out: Dict[str, ast.AST] = {}
        if depth < 4:
            for base in cls.bases:
                parent = self.m.classes.get(terminal(base))
                if parent is not None and parent is not cls:
                    out.update(self._class_methods(parent, depth + 1))
        out.update(methods_of(cls))
        return out

    def _mark_sum_lines(self) -> None:
        """Calls that sum rather than average (``reduction="sum"``), and the names bound to them."""
        m = self.m
        words = lines_of(m.source, find_all(m.source, ("reduction", "size_average")))
        if not words:
            return
        lines = set()
        for node in walk_lines(m.tree, words):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _sums(node.value):
                m.sum_losses.update(terminal(t) for t in node.targets)
            if isinstance(node, ast.Call) and _sums(node):
                lines.add(node.lineno)
        m._sum_lines = sorted(lines)

    def _mark_helper_calls(self) -> None:
        """Lines that call a helper holding events are interesting too (to a fixed point);
        likewise for the lines that (through helpers) can reach a backward pass."""
        m = self.m
        helpers = list(m.functions.items()) + [(n, f) for ms in m.methods.values() for n, f in ms.items()]
        m._backward_lines = lines_of(m.source, find_all(m.source, ("backward",)))
        if self.foreign_backward:
            m._backward_lines = sorted(set(m._backward_lines).union(self.foreign_backward))
        # `loss_scaler(loss, optimizer, update_grad=(i + 1) % K == 0)`: a call of code we cannot see
        # that back-propagates and steps (see _events.conditional_step)
        stepping = [
            n.lineno for n in walk_lines(m.tree, m.word_lines(("%",)))
            if isinstance(n, ast.Call) and conditional_step(n) is not None
        ]
        if stepping:
            m._backward_lines = sorted(set(m._backward_lines).union(stepping))
            m._add_positions([m.line_offset(line) for line in stepping])
        if not helpers and not m.classes:
            return
        callables = [c for c in m.classes.values() if "__call__" in m.methods.get(id(c), ())]
        if callables and self.class_calls:
            # `loss_scaler = NativeScaler()` ... `loss_scaler(loss, optimizer)`: the call runs __call__
            self._bound = True
            self._bind_instances()
            objects = {n: ms["__call__"] for n, ms in m.instances.items() if n.isidentifier() and "__call__" in ms}
            if objects:
                helpers += list(objects.items())
                sites = self._call_sites()
                for match in re.finditer(r"\b(%s)\s*\(" % "|".join(map(re.escape, objects)), m.source):
                    sites.add(match.group(1), match.start())
        m._lines = _propagate(m, m._lines, helpers, self._call_sites)
        m._backward_lines = _propagate(m, m._backward_lines, helpers, self._call_sites)

    def _call_sites(self) -> "_CallSites":
        """Where each function, method and class of the module is called (searched on the first question)."""
        sites = self.__dict__.get("_sites")
        if sites is None:
            m = self.m
            names = set(m.functions) | set(m.classes) | {n for ms in m.methods.values() for n in ms}
            sites = self._sites = _CallSites(m.source, names)
        return sites

    @property
    def class_calls(self) -> List[int]:
        """The lines calling a class of this module (read on the first question)."""
        calls = self.__dict__.get("_class_calls")
        if calls is None:
            sites = self._call_sites() if self.m.classes else None
            calls = self._class_calls = lines_of(self.m.source, [pos for name in self.m.classes for pos in sites[name]] if sites else [])
        return calls

    def _visit(self, stmts, scope, cls, after: tuple, closures: dict, no_grad: bool) -> None:
        m, candidates = self.m, self.sum_candidates
        for i, stmt in enumerate(stmts):
            hot = m.interesting(stmt)
            if not hot:
                if not overlaps(candidates, stmt):
                    continue  # nothing on its lines can be an event
                if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                    if not no_grad:  # sums a loss and does nothing to .grad: an evaluation loop?
                        m.eval_loops.append((stmt, scope))
                    continue
            rest = (stmts[i + 1 :],) + after
            if isinstance(stmt, ast.ClassDef):
                own_loop = runs_own_loop(stmt)
                project, path = m.project, m.filename
                if is_hf_trainer_class(stmt, project, path):
                    m.compute_losses += [(fn, stmt) for fn in stmt.body if getattr(fn, "name", None) == "compute_loss"]
                    if not own_loop:
                        continue  # the HF Trainer runs the loop
                manual = is_manual_lightning(stmt, project, path)
                framework = is_framework_class(stmt, project, path)
                if framework:
                    self.framework.add(id(stmt))
                if framework and not manual and not own_loop:
                    continue  # Lightning automatic optimization, callbacks: the framework runs the loop
                m.methods.setdefault(id(stmt), methods_of(stmt))
                if manual:
                    self.manual.add(id(stmt))
                    step = methods_of(stmt).get("training_step")
                    if step is not None and m.interesting(step):
                        self.pending.append((step, step, stmt, (), {}))
                self._visit(stmt.body, None, stmt, (), {}, no_grad)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if is_framework_hook(stmt) and id(cls) in self.framework and id(cls) not in self.manual:
                    continue  # a hook the framework calls (a function of that name elsewhere is the user's)
                # (a closure's `def` is on a line after the function's own)
                local = local_defs(stmt) if any_between(m.word_lines(("def",)), stmt.lineno + 1, stmt.end_lineno) else {}
                local = {**self._factory_closures(stmt), **local}
                if local:
                    self._mark_closure_calls(stmt, local)
                inner = {**closures, **local}
                fn_no_grad = no_grad or no_grad_function(stmt) or stmt.name in self.no_grad_callees
                self._visit(stmt.body, stmt, cls, (), inner, fn_no_grad)
            else:
                if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                    self.pending.append((stmt, scope, cls, (stmt.orelse,) + rest, closures))
                    if not no_grad and overlaps(candidates, stmt):
                        # sums a loss and has event words on its lines (a model call that a
                        # helper makes interesting): an evaluation loop unless it turns out to train
                        self.hot_sums.append((stmt, scope))
                inner_no_grad = no_grad or (isinstance(stmt, (ast.With, ast.AsyncWith)) and no_grad_with(stmt))
                bodies = [getattr(stmt, f, None) or [] for f in ("body", "orelse", "finalbody")]
                bodies += [h.body for h in getattr(stmt, "handlers", None) or []]
                bodies += [c.body for c in getattr(stmt, "cases", None) or []]
                if any(bodies):
                    for body in bodies:
                        self._visit(body, scope, cls, rest, closures, inner_no_grad)
                elif hot:
                    self._simple(stmt, scope, cls)

    def _engine_updates(self) -> None:
        """ignite's ``Engine(update)``: the engine calls ``update(engine, batch)`` once per batch,
        so its body is one iteration of a training loop (as Lightning's manual ``training_step``)."""
        m = self.m
        # an event handler (`@trainer.on(Events.ITERATION_STARTED)`) may clear for the update function:
        # then the update's body alone is not the whole iteration
        handlers_clear = (".on(" in m.source or "add_event_handler" in m.source) and any(
            "zero_grad" in m.lines_with(fn, "zero_grad") for fn in ast.walk(m.tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                isinstance(d, ast.Call) and terminal(d.func) == "on" for d in fn.decorator_list
            )
        ) or "add_event_handler" in m.source and "zero_grad" in m.source and self._added_handler_clears()
        scopes = [(m.tree, m.functions)] + [
            (fn, local_defs(fn)) for fn in ast.walk(m.tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        for scope, defs in scopes:
            if not defs:
                continue
            calls = body_nodes(scope) if scope is not m.tree else (
                n for stmt in m.tree.body if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                for n in ast.walk(stmt)
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
        functions = {fn.name: fn for fn in ast.walk(m.tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for call in ast.walk(m.tree):
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

    def _factory_closures(self, fn: ast.AST) -> Dict[str, ast.AST]:
        """``reset, on_end = make_callbacks(model, opt)`` in ``fn``'s body, where ``make_callbacks`` is
        a function of this module that returns a tuple of its own closures: the names bound to those
        closures (followed when called, their free names being the factory's)."""
        out: Dict[str, ast.AST] = {}
        for stmt in fn.body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple)
                    and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name)):
                continue
            factory = self.m.functions.get(stmt.value.func.id)
            if factory is None:
                continue
            defs = local_defs(factory)
            for value in returns_of(factory):
                if isinstance(value, ast.Tuple) and len(value.elts) == len(stmt.targets[0].elts):
                    for target, elt in zip(stmt.targets[0].elts, value.elts):
                        if isinstance(target, ast.Name) and isinstance(elt, ast.Name) and elt.id in defs:
                            out[target.id] = defs[elt.id]
        return out

    def _mark_closure_calls(self, fn: ast.AST, local: Dict[str, ast.AST]) -> None:
        """Lines of ``fn`` calling one of its closures that holds events are interesting too
        (``def opt_step(): optimizer.step()`` ... ``opt_step()``)."""
        m = self.m
        hot = [name for name, f in local.items() if m.interesting(f)]
        if not hot:
            return
        lines = m.scope_text(fn)
        start = m.line_offset(fn.lineno)
        pattern = re.compile(r"\b(?:%s)\s*\(" % "|".join(map(re.escape, hot)))
        positions = [start + match.start() for match in pattern.finditer(lines)]
        m._add_positions(positions)
        if any(overlaps(m._backward_lines, local[name]) for name in hot):
            m._backward_lines = sorted(set(m._backward_lines).union(lines_of(m.source, positions)))

    def _find_no_grad_callees(self) -> None:
        """Names of functions called inside ``with torch.no_grad():`` (their loops need no no_grad of their own)."""
        m = self.m
        # such a `with` names its context on its lines: only the nodes there are searched
        for node in walk_lines(m.tree, m.word_lines(NO_GRAD_WORDS)):
            if isinstance(node, (ast.With, ast.AsyncWith)) and no_grad_with(node):
                for inner in subtree(node):
                    if isinstance(inner, ast.Call):
                        self.no_grad_callees.add(terminal(inner.func))

    def _simple(self, stmt: ast.stmt, scope, cls) -> None:
        """Optimizer constructors, ``zero_grad(set_to_none=False)`` and ``create_graph=True``."""
        m = self.m
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            value = stmt.value
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            ctor = optimizer_constructor(value)
            if ctor is not None:
                model = _model_of(ctor)
                for t in targets:
                    m.optimizer_names.add(text(t))
                    if model:
                        m.optimizer_models[text(t)] = model
                        m.optimizer_modules[(id(scope), text(t))] = _models_of(ctor)
                m.ctors.append((scope, cls, ctor))
            elif "Accumulator" not in m.classes and overlaps(m.word_lines(("Accumulator",)), value) and any(
                isinstance(n, ast.Call) and terminal(n.func) == "Accumulator" for n in ast.walk(value)
            ):
                m.accumulators.update(text(t) for t in targets)  # `acc = gg.Accumulator(opt, 4) if accum else None` too
                call = next(n for n in ast.walk(value) if isinstance(n, ast.Call) and terminal(n.func) == "Accumulator")
                for t in targets:
                    m.accumulator_calls.setdefault(text(t), []).append((scope, call))
            elif isinstance(value, ast.Call) and terminal(value.func) == "optimizers":  # Lightning's self.optimizers()
                for t in targets:
                    for name in [t] + list(getattr(t, "elts", [])):
                        m.optimizer_names.add(text(name))
        # the calls looked for below name `zero_grad`, `create_graph` or an optimizer on their lines
        ctors = not isinstance(stmt, (ast.Assign, ast.AnnAssign))
        if not (overlaps(m.word_lines(("zero_grad", "create_graph")), stmt) or ctors and overlaps(m.word_lines(_CTOR_WORDS), stmt)):
            return
        for node in walk_lines(stmt, m._lines):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr == "zero_grad":
                m.zero_grads.append((node, scope, cls))
            elif node.func.attr == "backward" and keyword_is(node, "create_graph", True):
                m.create_graphs.append((node, scope))
            elif ctors and optimizer_constructor(node) is not None:
                m.ctors.append((scope, cls, node))

    def _bind_instances(self) -> None:
        """``wrapper = OptimWrapper(opt)`` / ``self.opt = OptimWrapper(...)`` with a class of this module."""
        m = self.m
        if not self.class_calls:
            return
        for node in walk_lines(m.tree, self.class_calls):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
                cls = m.classes.get(node.value.func.id)
                if cls is None or any(terminal(b).endswith(("Optimizer", "Module")) for b in cls.bases):
                    continue  # a torch optimizer or module subclass: its step/zero_grad are the real ones
                for t in node.targets:
                    m.instances[text(t)] = m.methods.get(id(cls)) or methods_of(cls)

    def _bind_foreign(self) -> None:
        """Objects of classes that another file of the linted tree defines, resolved through this
        file's ``from ... import``: ``self.optim = Optimizer(...)``, ``wrapper = OptimWrapper(...)``,
        a parameter annotated ``optim_wrapper: OptimWrapper`` (and ``self.optim = optim`` of such a
        parameter). Their methods are followed at the loop's calls like this module's own
        wrappers; the lines calling one that holds a gradient-buffer event become interesting."""
        m = self.m
        imports = {
            local: spec for local, spec in imported_names(m.tree).items()
            if spec[0] in m.project.defined and local not in m.classes and m.project.may_hold_events(spec[0])
        }
        if not imports:
            return

        def class_name(node) -> Optional[str]:  # the imported class a constructor or annotation names
            if isinstance(node, ast.Constant) and isinstance(node.value, str):  # "OptimWrapper"
                node = ast.Name(id=node.value.split("[")[0].strip())
            if isinstance(node, ast.Subscript):  # Optional[OptimWrapper]
                node = node.slice
            return node.id if isinstance(node, ast.Name) and node.id in imports else None

        lines = lines_of(m.source, find_all(m.source, tuple(imports)))
        named: Dict[str, str] = {}  # receiver text -> the imported class name
        for node in walk_lines(m.tree, lines):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                name = class_name(node.value.func)
                if name:
                    named.update((text(t), name) for t in node.targets)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = {}
                for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
                    name = class_name(a.annotation) if a.annotation is not None else None
                    if name:
                        params[a.arg] = named[a.arg] = name
                for stmt in subtree(node) if params else ():  # self.optim = optim
                    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and stmt.value.id in params:
                        named.update((text(t), params[stmt.value.id]) for t in stmt.targets)
        if not named:
            return
        # only the classes whose objects this file calls a method of are parsed (once per tree)
        pattern = re.compile(r"(?<![\w.])(%s)\s*\.\s*(\w+)\s*\(" % "|".join(map(re.escape, sorted(named, key=len, reverse=True))))
        starts = sorted({pos for receiver in named for pos in find_all(m.source, (receiver,))})  # where a match can start
        sites = [(match.start(), match.group(1), match.group(2)) for match in matches_at(pattern, m.source, starts)]
        classes = {name: m.project.foreign_class(*imports[name], m.filename) for name in {named[r] for _, r, _ in sites}}
        bound = {r: classes[name] for r, name in named.items() if classes.get(name)}
        if not bound:
            return
        m.instances.update(bound)
        self.foreign_bound = True
        # the lines calling a method that touches the gradient buffer (itself or through the
        # methods it calls on self) are interesting; those reaching a backward pass, loop-worthy
        holds = m.project.__dict__.setdefault("_event_methods", _EventMethods())  # kept with the classes it describes
        for methods in bound.values():
            holds.add(methods)
        hits, backward = [], []
        for pos, receiver, method in sites:
            kinds = holds.kinds(bound[receiver].get(method)) if receiver in bound else ()
            if kinds:
                hits.append(pos)
                if "backward" in kinds:
                    backward.append(pos)
        m._add_positions(hits)
        self.foreign_backward = lines_of(m.source, backward)

    def _loop(self, node, scope, cls, after, closures) -> None:
        m = self.m
        if not (overlaps(m._backward_lines, node) or (scope is not None and overlaps(m._backward_lines, scope))):
            return  # no backward pass can run in it (directly, through helpers or closures): no rule applies
        if not self._bound:
            self._bound = True
            self._bind_instances()
        functions = {**m.functions, **closures} if closures else m.functions
        # `self.run_step()` in a base class's loop runs the override of the object's class:
        # the loop is followed once for the class and once for each subclass of this module
        for concrete in [cls] + self._subclasses(cls) if cls is not None else [None]:
            methods = m.methods.get(id(concrete), {}) if concrete is not None else {}
            interesting, mentions_grad = m.interesting, m.mentions_grad
            if self.foreign_bound:
                # the nodes of a class of another file (``gg_foreign``, see ._project) are not
                # covered by this file's line marks: the wrapper methods a loop calls are walked whole
                interesting = lambda n, own=m.interesting: getattr(n, "gg_foreign", False) or own(n)  # noqa: E731
                mentions_grad = lambda n, own=m.mentions_grad: getattr(n, "gg_foreign", False) or own(n)  # noqa: E731
            walker = Walker(
                interesting, functions, methods, frozenset(m.optimizer_names), m.instances, mentions_grad,
                self._object_methods(), frozenset(m.accumulators), m.unbound,
            )
            # A large trainer's main loop reaches hundreds of lines of helpers: beyond the fixed
            # allowance a loop may draw on a pool proportional to the file's size, so that one
            # big loop is checked while the file's total work stays linear in its length
            walker.max_work = MAX_WORK + self.work_pool
            try:
                paths = walker.iteration_paths(node, scope)
            except TooComplex as exc:
                m.skip(node, str(exc))
                return
            except RecursionError:
                m.skip(node, "nested too deeply to follow")
                return
            finally:
                self.work_pool -= max(0, walker._work - MAX_WORK)
            m.loops.append(Loop(node, scope, cls, after, paths, m, bool(walker.accumulate), functions, methods))

    def _subclasses(self, cls) -> list:
        """The classes of this module that inherit from ``cls`` (directly or not)."""
        out, names = [], {cls.name}
        for _ in range(4):
            fresh = [c for c in self.m.classes.values() if c not in out and c is not cls and any(terminal(b) in names for b in c.bases)]
            if not fresh:
                break
            out += fresh
            names |= {c.name for c in fresh}
        return out

    def _object_methods(self) -> dict:
        cached = getattr(self, "_objects", None)
        if cached is None:
            owners: Dict[str, list] = {}
            for c in self.m.classes.values():
                for name in methods_of(c):
                    owners.setdefault(name, []).append(c)
            cached = self._objects = {
                name: (methods_of(cs[0])[name], self.m.methods.get(id(cs[0])) or methods_of(cs[0]))
                for name, cs in owners.items()
                if len(cs) == 1 and not name.startswith("__") and name not in _COMMON_METHODS
            }
        return cached


class _EventMethods:
    """``kinds(method)``: ``{"backward", "event"}`` for a method of another file's class that
    back-propagates or touches the gradient buffer, itself or through ``self.other()`` (four
    rounds through the class's methods in their order), read among the methods of the first
    class seen holding it (a class whose first method is known already adds nothing).

    A method is read when a call asks for it, with the methods it reaches through ``self``:
    a loop calling one method of ``nn.Module`` does not read the hundred others."""

    def __init__(self):
        #: id(method) -> (the methods of the class it is read among, its name there)
        self.context: Dict[int, tuple] = {}
        self._own: Dict[int, tuple] = {}  # id(method) -> (its own kinds, the names it calls on self)
        self._found: Dict[tuple, frozenset] = {}

    def add(self, methods: Dict[str, ast.AST]) -> None:
        if id(next(iter(methods.values()), None)) not in self.context:
            for name, fn in methods.items():
                self.context[id(fn)] = (methods, name)

    def kinds(self, fn: Optional[ast.AST]) -> frozenset:
        entry = self.context.get(id(fn))
        if entry is None:
            return frozenset()
        methods, name = entry
        key = (id(fn), id(methods))
        if key not in self._found:
            self._found[key] = self._read(methods, name)
        return self._found[key]

    def _read(self, methods: Dict[str, ast.AST], start: str) -> frozenset:
        reached, pending = {start}, [start]
        while pending:
            for other in self._own_kinds(methods[pending.pop()])[1]:
                if other in methods and other not in reached:
                    reached.add(other)
                    pending.append(other)
        # the methods reached, in the class's order: the rounds give what they gave over all methods
        names = [name for name in methods if name in reached]
        own = {name: set(self._own_kinds(methods[name])[0]) for name in names}
        for _ in range(4):  # through self.other(), to a fixed point
            for name in names:
                for other in self._own_kinds(methods[name])[1]:
                    if other in own:
                        own[name] |= own[other]
        return frozenset(own[start])

    def _own_kinds(self, fn: ast.AST) -> tuple:
        found = self._own.get(id(fn))
        if found is None:
            kinds, called = set(), set()
            for n in subtree(fn):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                    attr = n.func.attr
                    if attr == "backward":
                        kinds |= {"backward", "event"}
                    elif attr in ("step", "zero_grad") or "grad" in attr:
                        kinds.add("event")
                    if isinstance(n.func.value, ast.Name) and n.func.value.id == "self":
                        called.add(attr)
                elif isinstance(n, ast.Attribute) and n.attr == "grad":
                    kinds.add("event")
            found = self._own[id(fn)] = (frozenset(kinds), called)
        return found


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
        for node in ast.walk(fn):  # on the lines of the two closures: interesting where they are
            if "lineno" in node._attributes:
                node.lineno, node.end_lineno, node.col_offset, node.end_col_offset = start, end, 0, 0
        out[name] = fn
    return out


#: Words one of which an optimizer's constructor (:func:`~._events.optimizer_constructor`) has on its
#: lines: ``optim`` (``torch.optim.X``) or a class name (the shortest: ``Adam`` is in ``AdamW``).
_CTOR_WORDS = ("optim",) + tuple(sorted(
    name for name in OPTIMIZER_CLASSES if not any(other != name and other in name for other in OPTIMIZER_CLASSES)
))
#: The names of the contexts that turn autograd off (:func:`~._ast.no_grad_with`).
NO_GRAD_WORDS = tuple(sorted(NO_GRAD_CONTEXTS)) + ("set_grad_enabled",)


#: ignite events that fire again and again during a run (not STARTED / COMPLETED, fired once).
_REPEATING_EVENT = re.compile(r"\bEvents\.(EPOCH|ITERATION|GET_BATCH)_(STARTED|COMPLETED)$")


class _CallSites:
    """``sites[name]``: the positions where a function, method or class of the module (one of
    ``names``) is called, as a search for ``_CALL_SITE`` finds them, and ``partial(name``
    (``optimizer.step(partial(self.training_step, ...))`` runs it too).

    A file's first few names are searched one at a time (``str.find``, far faster than a pass
    of the regular expression over every word of the text); asked for more, it reads every call
    of the text in one pass, so that the cost stays linear in the size of the file whatever
    the number of helpers."""

    #: names searched one at a time before the one pass over the whole text (which costs about
    #: as much as 40 to 60 searches for one name, measured on torch's own modules)
    ONE_AT_A_TIME = 48

    def __init__(self, source: str, names):
        self.source, self.names = source, names
        self.searched: Dict[str, List[int]] = {}
        self.all_read = False
        #: sites found otherwise: ``partial(name``, and calls of objects (:meth:`add`)
        self.extra: Dict[str, List[int]] = {}
        if "partial" in source:
            for match in matches_at(_PARTIAL_SITE, source, find_all(source, ("partial",))):
                if match.group(1) in names:
                    self.add(match.group(1), match.start())

    def add(self, name: str, position: int) -> None:
        self.extra.setdefault(name, []).append(position)

    def __getitem__(self, name: str) -> List[int]:
        found = self.searched.get(name)
        if found is None:
            if name not in self.names or self.all_read or not _NAME_START.match(name):
                found = []  # (a name written from a non-ASCII letter is no call site: see _CALL_SITE)
            elif len(self.searched) < self.ONE_AT_A_TIME:
                found = self.searched[name] = _calls_of(self.source, name)
            else:
                self._read_all()
                found = self.searched.get(name, [])
        return found + self.extra.get(name, [])

    def _read_all(self) -> None:
        read: Dict[str, List[int]] = {}
        for match in _CALL_SITE.finditer(self.source):
            if match.group(1) in self.names:
                read.setdefault(match.group(1), []).append(match.start(1))
        self.searched, self.all_read = read, True


def _calls_of(source: str, name: str) -> List[int]:
    """Where ``name`` is called, as ``_CALL_SITE`` finds it: followed by ``(``, and not part of
    a longer name (before it, only digits or other non-ASCII word characters of its word)."""
    out, pos = [], source.find(name)
    while pos != -1:
        if _CALL_TAIL.match(source, pos + len(name)):
            start = pos
            while start and _WORD.match(source, start - 1) and not _NAME_START.match(source, start - 1):
                start -= 1
            if not (start and _WORD.match(source, start - 1)):
                out.append(pos)
        pos = source.find(name, pos + 1)
    return out


_CALL_TAIL = re.compile(r"\s*\(")
_WORD = re.compile(r"\w")
_NAME_START = re.compile(r"[A-Za-z_]")


def _propagate(m: "Module", lines: List[int], helpers, sites: Callable[[], "_CallSites"]) -> List[int]:
    """``lines`` plus the call sites (``sites()``, asked only when a helper overlaps them) of every
    helper that overlaps them, to a fixed point (4 rounds)."""
    marked: set = set()
    for _ in range(4):
        fresh = {name for name, fn in helpers if name not in marked and overlaps(lines, fn) and sites()[name]}
        if not fresh:
            break
        marked |= fresh
        lines = sorted(set(lines).union(lines_of(m.source, [pos for name in fresh for pos in sites()[name]])))
    return lines


def _running_sum_lines(source: str) -> List[int]:
    """Lines that add a loss into a running total (``total += loss``): candidate evaluation loops."""
    hits = []
    for pos in find_all(source, ("+=",)):
        start = source.rfind("\n", 0, pos) + 1
        end = source.find("\n", pos)
        if "loss" in source[start : end if end != -1 else len(source)]:
            hits.append(pos)
    return lines_of(source, hits)


def _model_of(ctor: ast.Call) -> Optional[str]:
    """``SGD(netD.parameters(), ...)`` -> ``"netD"``."""
    if ctor.args:
        for node in ast.walk(ctor.args[0]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("parameters", "named_parameters"):
                return text(node.func.value)
    return None


def _models_of(ctor: ast.Call) -> List[str]:
    """Every module whose parameters the optimizer's first argument lists:
    ``SGD(list(enc.parameters()) + list(dec.parameters()))`` -> ``["enc", "dec"]``."""
    return list(dict.fromkeys(
        text(node.func.value) for node in ast.walk(ctor.args[0])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("parameters", "named_parameters")
    ))


def _sums(call: ast.Call) -> bool:
    """A loss constructor or call that does not average: ``reduction="sum"``/``"none"``, ``size_average=False``
    (``"batchmean"``, KL divergence's mean over the batch, averages)."""
    for k in call.keywords:
        if k.arg == "reduction" and not (isinstance(k.value, ast.Constant) and k.value.value in ("mean", "batchmean")):
            return True
        if k.arg == "size_average" and isinstance(k.value, ast.Constant) and k.value.value is False:
            return True
    return False
