"""Functions that are one update each: the body of a loop the file cannot see.

A function or method that back-propagates and steps an optimizer it does not build (held on
``self``, handed in as an argument, or closed over) is written to be called again and again,
once per batch: ``def train_step(self, batch): ...; loss.backward(); self.opt.step()`` whose
loop is a framework's ``fit()`` in another file, an RL trainer's ``train_from_torch`` driven by
its base class, a step function returned by a factory (``make_train_step(model, loss_fn, opt)``)
and called by a script. Its gradients outlive the call, on the parameters, so what one call
leaves in ``.grad`` is there at the next: the builder unrolls its body as one iteration of a loop
(:class:`~._model.Loop` with ``per_call`` set), and the clearing rules that marked it
(``PER_CALL`` in their module) read it as they read a loop's body.

What it does not treat so, decided from the structure the file shows, never from names:

* a function that does not step (the caller steps, and may clear), or steps only inside a loop of
  its own (that loop is checked as a loop), or steps an optimizer it builds itself, or back-propagates
  only a loss its caller hands in (``scaler(loss, optimizer)``: the caller's update);
* a function a decorator hands to an object of the program (``@engine.on(Events.COMPLETED)``): that
  object decides how often it runs;
* a function that code of the linted files may call with a clearing around the call: some
  function (or the module's own statements, or another linted file) that names it, an alias of it
  (``self.fn = self.train_step``), or the factory returning it, and that clears gradients
  (``zero_grad``, a ``.grad`` write, a call whose name says it clears gradients), directly or
  through a caller of its own (three levels).

:class:`_PerCallBodies` is a base class of ``_builder._Builder``.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, Iterator, Optional, Set

from ._ast import bind_arguments, body_nodes, find_all, lines_of, local_defs, nodes_of, overlaps, walk_lines
from ._events import BACKWARD, STEP, conditional_step
from ._grad_writes import GRAD_WRITE as _GRAD_WRITE, class_span as _class_span, used_in_place as _used_in_place
from ._line_filter import _propagate
from ._model import backward_tensor
from ._ast import subtree

#: Text that may clear gradients: ``zero_grad``, a ``.grad`` write (``= None``, ``.zero_()``,
#: ``.fill_(0)``, ``.mul_(0)``, ``.detach_()``), a ``_foreach_zero_``, or a call whose name says it
#: clears gradients (as :data:`~._events._MAYBE_CLEAR_NAME`).
_CLEARS = re.compile(
    r"zero_?grad|clear_?grad|reset_?grad|free_?grad|set_grads?_(?:to_)?none|grads?_to_none|_foreach_zero_"
    r"|\.grad[ \t]*(?:\.data[ \t]*)?(?:=(?!=)|\.[ \t]*(?:zero_|fill_|mul_|detach_|set_)\b)",
    re.I,
)

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BLOCK_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


def _block(node: ast.AST, field: str) -> list:
    """``node``'s block of statements ``field`` (``body``, ``orelse``, ``finalbody``), empty if none."""
    value = getattr(node, field, None)
    return value if isinstance(value, list) else []


class _PerCallBodies:
    """The steps of :class:`._builder._Builder` that find per-update functions (see the module docstring)."""

    def _per_call_bodies(self) -> None:
        m = self.m
        pending = {id(p[0]) for p in self.pending}
        seen: Set[int] = set()
        for fn, cls, closures in self.functions_seen:
            if id(fn) in pending or id(fn) in seen:
                continue
            seen.add(id(fn))
            # cheap text tests first: a backward pass and a step reachable from its lines
            if not (m.interesting(fn) and any(fn.lineno <= line <= fn.end_lineno for line in m._backward_lines)):
                continue
            if not self._may_step(fn, closures):
                continue
            if self._registered(fn) or self._cleared_by_a_caller(fn):
                continue
            self._loop(fn, fn, cls, (), closures, per_call=True,
                       accept=lambda loop: _one_update(loop) and not self._handed_on_by_a_caller(loop))

    def _may_step(self, fn: ast.AST, closures: dict) -> bool:
        """A cheap proof that no step can run in a call of ``fn``, before its body is walked: none of its
        lines, nor those of the helpers it may call (followed as the builder follows the lines of backward
        passes) nor of the closures it sees, holds a step's word (``step``, ``.grad`` of a hand-written
        update, an Accumulator's ``flush``) or a call that steps under a window condition. Files calling
        methods of another file's classes are not proved so (those methods are not among these lines)."""
        if self.foreign_bound:
            return True
        lines = getattr(self, "_step_lines", None)
        if lines is None:
            m = self.m
            stepping = [
                n.lineno for n in walk_lines(m.tree, m.word_lines(("%",)))
                if isinstance(n, ast.Call) and conditional_step(n) is not None
            ]
            helpers = list(m.functions.items()) + [(n, f) for ms in m.methods.values() for n, f in ms.items()]
            lines = lines_of(m.source, find_all(m.source, ("step", "grad", "flush")))
            lines = sorted(set(lines).union(stepping))
            self._step_lines = lines = _propagate(m, lines, helpers, self._call_sites) if helpers else lines
        return overlaps(lines, fn) or any(overlaps(lines, c) for c in closures.values())

    def _registered(self, fn: ast.AST) -> bool:
        """``fn`` is handed to an object of the program by a decorator (``@trainer.on(Events.COMPLETED)``):
        that object decides when, and how often, it runs. A decorator of an imported module
        (``@torch.compile(...)``) only wraps it: its callers still call it."""
        for d in fn.decorator_list:
            func = d.func if isinstance(d, ast.Call) else d
            root = func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(func, ast.Attribute) and isinstance(root, ast.Name) and root.id not in ("self", "cls") \
                    and self.m.project.qualified(root.id, self.m.filename) is None:
                return True
        return False

    # -- callers that may clear ------------------------------------------------------------
    # Every question below is answered from indexes built once (per file, or per set of files linted
    # together) on the first question: the cost stays linear in the size of the linted code however
    # many functions ask (a scan of every assignment, or of every other file's text, per function
    # made linting a package of thousands of files take minutes).
    def _caller_index(self) -> list:
        """``[function or None for the module's statements, the names it mentions, its own text, whether
        that text may clear]`` for every function of the file (the functions defined in it left out),
        and name -> the entries that mention it; built on the first question."""
        cached = getattr(self, "_callers", None)
        if cached is not None:
            return cached
        m = self.m
        entries = []
        for fn in nodes_of(m.tree, _FUNCS):
            names = {_mentioned(n) for n in body_nodes(fn)} - {None}
            # its own lines only: a function defined in it (a closure it returns) is an entry of its own
            # (a def or class is a statement: its parent is a statement, handler or match case whose
            # blocks hold it, so only those are read, not every expression of the function)
            nested = [(c.lineno, c.end_lineno) for n in (fn, *body_nodes(fn)) if isinstance(n, _BLOCK_HOLDERS)
                      for field in ("body", "orelse", "finalbody") for c in _block(n, field)
                      if isinstance(c, (*_FUNCS, ast.ClassDef))]
            lines = m.scope_text(fn).split("\n")
            own = "\n".join(
                line for i, line in enumerate(lines, fn.lineno) if not any(a <= i <= b for a, b in nested)
            ) if nested else "\n".join(lines)
            entries.append([fn, names, own, None])
        top = [s for s in m.tree.body if not isinstance(s, (*_FUNCS, ast.ClassDef))]
        names = {_mentioned(n) for s in top for n in subtree(s)} - {None}
        entries.append([None, names, "\n".join(m.scope_text(s) for s in top), None])
        by_name: Dict[str, list] = {}
        for entry in entries:
            for name in entry[1]:
                by_name.setdefault(name, []).append(entry)
        self._callers = (entries, by_name)
        return self._callers

    def _aliases(self, fn: ast.AST) -> Set[str]:
        """The names ``fn`` may be called by: its own, the targets of an assignment whose value names
        it (``self.step_fn = self._train_step``, ``f = wrap(train_step) if c else train_step``), and
        of one naming such a target, and the factory that returns it (a closure: whoever calls the
        factory gets it)."""
        cache = self.__dict__.setdefault("_aliases_of", {})
        found = cache.get(id(fn))
        if found is not None:
            return found
        names = {fn.name}
        parent = self._parents().get(id(fn))
        if parent is not None and any(
            isinstance(r, ast.Return) and r.value is not None and any(_mentioned(x) == fn.name for x in subtree(r.value))
            for r in body_nodes(parent)
        ):
            names.add(parent.name)
        targets = self._assigned_from()
        fresh = names
        for _ in range(2):  # two assignments away at most
            fresh = {t for name in fresh for t in targets.get(name, ())} - names
            names |= fresh
        cache[id(fn)] = names
        return names

    def _assigned_from(self) -> Dict[str, Set[str]]:
        """name -> the names assigned a value that mentions it (``self.a = wrap(self.f)``: f -> {a}),
        over every assignment of the file, read once."""
        cached = getattr(self, "_assign_graph", None)
        if cached is None:
            cached = self._assign_graph = {}
            for n in nodes_of(self.m.tree, ast.Assign):
                found = {_mentioned(t) for t in n.targets} - {None}
                if found:
                    for x in subtree(n.value):
                        name = _mentioned(x)
                        if name is not None:
                            cached.setdefault(name, set()).update(found)
        return cached

    def _parents(self) -> Dict[int, ast.AST]:
        """id of a function defined in a function -> that function."""
        cached = getattr(self, "_fn_parents", None)
        if cached is None:
            cached = self._fn_parents = {}
            for n in nodes_of(self.m.tree, _FUNCS):
                for inner in local_defs(n).values():
                    cached.setdefault(id(inner), n)
        return cached

    def _callers_of(self, fn: ast.AST) -> tuple:
        """The code of the linted files that may call ``fn``: the entries of :meth:`_caller_index` (functions
        of this file and its module-level statements) that name it or an alias, three levels up, and the
        other linted files that name one of its names (whole: where in them the call sits is not worked out)."""
        cache = self.__dict__.setdefault("_callers_of_fn", {})
        if id(fn) in cache:
            return cache[id(fn)]
        _, by_name = self._caller_index()
        names, done = self._aliases(fn), {id(fn)}
        inside = {id(n) for n in subtree(fn) if isinstance(n, _FUNCS)}
        found, seen = [], set()
        for _ in range(3):
            callers = []
            for name in names:
                for entry in by_name.get(name, ()):
                    g = entry[0]
                    if id(entry) not in seen and (g is None or id(g) not in done and id(g) not in inside):
                        seen.add(id(entry))
                        callers.append(entry)
            if not callers:
                break
            found += callers
            fresh: Set[str] = set()
            for entry in callers:
                if entry[0] is not None:
                    done.add(id(entry[0]))
                    fresh |= self._aliases(entry[0])
            names = fresh
        cache[id(fn)] = result = (found, self._aliases(fn))
        return result

    def _cleared_by_a_caller(self, fn: ast.AST) -> bool:
        """Some code of the linted files that may call ``fn`` may clear gradients, or another linted file
        has a function (outside any class) that writes ``.grad`` of whatever parameters it is handed: the
        loop calling the update may hand it ours (as GG101's check of an object's optimizer reads it)."""
        index = _FilesIndex.of(self.m.project)
        if index.grad_helper_elsewhere(self.m.filename):
            return True
        entries, names = self._callers_of(fn)
        for entry in entries:
            if entry[3] is None:
                entry[3] = _may_clear(entry[2])
            if entry[3]:
                return True
        return bool(index.naming(names, self.m.filename, clearing=True))

    def _caller_texts(self, fn: ast.AST) -> list:
        """The texts of :meth:`_callers_of` ``fn``."""
        entries, names = self._callers_of(fn)
        project = self.m.project
        return [e[2] for e in entries] + [project.sources[p] for p in _FilesIndex.of(project).naming(names, self.m.filename)]

    def _handed_on_by_a_caller(self, loop) -> bool:
        """What the update steps is handed on: by the object's own code (``config.register(self.net)``), or
        by code that may call the update, reading it from outside (``reset(agent.net)``): code of unknown
        effect may clear it. Read for the ``self.`` attributes the update steps and the modules those
        optimizers hold."""
        reach = set()
        for e in loop.steps:
            for target in (e.target, loop.optimizer_model(e.target)):
                if target and target.startswith("self."):
                    reach.add(target.rsplit(".", 1)[-1])
        if not reach:
            return False
        if loop.cls is not None:

            # and the modules whose parameters the object's code hands those optimizers
            # (`self.opt = make(self.net.parameters())`)
            for n in subtree(loop.cls):
                if isinstance(n, ast.Assign) and any(
                        isinstance(t, ast.Attribute) and t.attr in reach and isinstance(t.value, ast.Name) and t.value.id == "self"
                        for t in n.targets):
                    reach |= {
                        c.func.value.attr for c in subtree(n.value)
                        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in ("parameters", "named_parameters")
                        and isinstance(c.func.value, ast.Attribute) and isinstance(c.func.value.value, ast.Name) and c.func.value.value.id == "self"
                    }

            # handed out of the object by its own code (`config.register(self.network)`, an alias): code
            # elsewhere may clear it (as GG101's check of an object's optimizer reads it)
            # (an alias kept on the object, `self._eval_model = self._model`, hands nothing out: it joins what is
            # read for, here and in the callers' text below)
            aliases = {id(n.value): [t.attr for t in n.targets] for n in subtree(loop.cls)
                       if isinstance(n, ast.Assign) and n.targets and all(_self_attribute(t) for t in n.targets)}
            grown = True
            while grown:
                grown = False
                for n in subtree(loop.cls):
                    if (isinstance(n, ast.Attribute) and n.attr in reach and isinstance(n.value, ast.Name) and n.value.id == "self"
                            and isinstance(n.ctx, ast.Load) and not _used_in_place(loop.cls, n) and not self._scheduled(loop.cls, n)):
                        if id(n) not in aliases:
                            return True
                        if not set(aliases[id(n)]) <= reach:
                            reach |= set(aliases[id(n)])
                            grown = True
        escape = re.compile(r"\.[ \t]*(?:" + "|".join(map(re.escape, sorted(reach))) + r")\b(?![ \t]*(?:[.(]|=[^=]))")
        return any(escape.search(text) for text in self._caller_texts(loop.node))


    def _scheduled(self, cls: ast.ClassDef, node: ast.Attribute) -> bool:
        """``LambdaLR(self.optimizer, ...)``: the optimizer handed to a learning-rate scheduler of
        ``torch.optim.lr_scheduler`` (resolved by the file's imports), which sets its learning rates
        and never touches its gradients: not handed to code that may clear them."""
        for n in subtree(cls):
            if isinstance(n, ast.Call) and node in n.args[:1]:
                try:
                    written = ast.unparse(n.func)
                except (ValueError, AttributeError):
                    return False
                target = self.m.project.qualified(written, self.m.filename) or ""
                return target.startswith("torch.optim.lr_scheduler.")
        return False


def _self_attribute(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


class _FilesIndex:
    """What :class:`_PerCallBodies` asks of the files linted together, read once for all of them: the
    files that may clear gradients (their words indexed), the files with a module-level helper that
    writes ``.grad``, and, on the first question that needs it, the words of every file."""

    def __init__(self, project):
        self.project = project
        self.count = len(project.sources)
        self.clearing = {path: _words(text) for path, text in project.sources.items() if _may_clear(text)}
        self.helpers: Optional[Set[str]] = None
        self.words: Optional[Dict[str, Set[str]]] = None

    @classmethod
    def of(cls, project) -> "_FilesIndex":
        found = project.__dict__.get("_per_call_index")
        if found is None or found.count != len(project.sources):  # (files added since: read again)
            found = project.__dict__["_per_call_index"] = cls(project)
        return found

    def grad_helper_elsewhere(self, path: str) -> bool:
        """A file other than ``path`` has a ``.grad`` write outside any class."""
        if self.helpers is None:

            self.helpers = {
                p for p, text in self.project.sources.items()
                if any(_class_span(text, w.start()) is None for w in _line_matches(_GRAD_WRITE, text, text, (".grad", "_foreach_")))
            }
        return bool(self.helpers - {path})

    def naming(self, names: Set[str], path: str, clearing: bool = False) -> list:
        """The files other than ``path`` in which one of ``names`` is a word (only those that may clear,
        with ``clearing``), in the order they were linted."""
        if clearing:
            table = self.clearing
        else:
            if self.words is None:
                self.words = {p: self.clearing.get(p) or _words(text) for p, text in self.project.sources.items()}
            table = self.words
        return [p for p, words in table.items() if p != path and not names.isdisjoint(words)]


def _may_clear(text: str) -> bool:
    """``_CLEARS.search(text)``, run only on the lines that hold "grad" (any case) or "_foreach_zero_",
    where every match of it lies (a search of a whole file's text for its many alternatives was most of
    the time of the view)."""
    lowered = text.lower()
    if len(lowered) != len(text):  # (a character whose lower case is longer: offsets differ)
        return _CLEARS.search(text) is not None
    return next(_line_matches(_CLEARS, text, lowered, ("grad", "_foreach_zero_")), None) is not None


def _line_matches(pattern, text: str, haystack: str, needles) -> Iterator[re.Match]:
    """The matches of ``pattern`` (none of which spans lines) on the lines of ``text`` where ``haystack``
    (``text`` or its lower case) holds one of ``needles``; a line holding several is searched once per needle."""
    for needle in needles:
        at = haystack.find(needle)
        while at != -1:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end == -1 else end
            yield from pattern.finditer(text, start, end)
            at = haystack.find(needle, end)


def _words(text: str) -> Set[str]:
    return set(re.findall(r"\w+", text))


def _mentioned(node: ast.AST) -> Optional[str]:
    """The name a node reads or writes: ``x`` of a Name, ``attr`` of ``obj.attr``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _one_update(loop) -> bool:
    """The function back-propagates and steps on one path, every step outside a loop of its own,
    it computes some loss it back-propagates (not only a loss its caller hands in: ``scaler(loss,
    optimizer)`` serves the caller's update, whose forward pass, and clearing, are the caller's),
    and no step is of an optimizer the function builds (a fresh optimizer per call)."""
    if any(any(entry[0] == "loop" for entry in e.stack) for e in loop.steps):
        return False
    if not any(BACKWARD in p.kinds() and STEP in p.kinds() for p in loop.complete):
        return False
    if all(_handed_in(loop.node, e) for e in loop.backwards):
        return False
    if any(_step_handed_a_value(loop.node, e) for e in loop.steps):
        return False
    built = {ast.unparse(t) for n in body_nodes(loop.node) if isinstance(n, (ast.Assign, ast.AnnAssign))
             for t in (n.targets if isinstance(n, ast.Assign) else [n.target])}
    return not any(e.target in built for e in loop.steps if not e.frame)


def _step_handed_a_value(fn: ast.AST, event) -> bool:
    """``opt.step(loss)``: the step is handed a value the function (or the helper it runs in) computes, not
    a closure (``step(closure)`` is handed a function): the optimizer is a wrapper that back-propagates
    that value itself, and whatever clearing it does is in code the view does not read."""
    call = event.node
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "step" and call.args
            and ast.unparse(call.func.value) == event.target):  # (not `scaler.step(optimizer)`)
        return False
    arg = call.args[0]
    where = event.frame[-1][0] if event.frame else fn
    return isinstance(arg, ast.Name) and arg.id in _assigned(where) or isinstance(arg, (ast.BinOp, ast.Subscript))


def _handed_in(fn: ast.AST, event) -> bool:
    """The tensor a backward pass differentiates is one its caller hands ``fn``: a parameter, as
    it is or scaled (``scaler.scale(loss)``, ``loss / k``), in ``fn`` or, through the helpers the
    walk went into, bound at each call to such a parameter of ``fn``. Any other tensor (``self.net(x)
    .mean()``, a local ``loss``) is computed in the update."""
    chain = [fn] + [f for f, _ in event.frame]
    calls = [call for _, call in event.frame]
    call = event.node
    expr = backward_tensor(call)
    if isinstance(expr, ast.Name) and expr.id == "self" and isinstance(call, ast.Call) and call.args:
        expr = call.args[0]  # `self.backward(loss)`: the trainer's own backward method, handed the loss
    for level in range(len(chain) - 1, -1, -1):
        func = chain[level]
        name = _passed(expr)
        params = {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)} - {"self", "cls"}
        if name is None or name not in params or name in _assigned(func):
            return False
        if level == 0:
            return True
        expr = (bind_arguments(func, calls[level - 1]).get(name) or [None])[0]
    return False


def _passed(expr: Optional[ast.expr]) -> Optional[str]:
    """The name ``expr`` is, unwrapped of a scaler's ``.scale(x)`` and of a division or product by a
    factor: ``loss`` of ``scaler.scale(loss / k)``."""
    for _ in range(4):
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "scale" and len(expr.args) == 1:
            expr = expr.args[0]
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Div, ast.Mult)):
            expr = expr.left
        else:
            break
    return expr.id if isinstance(expr, ast.Name) else None


def _assigned(fn: ast.AST) -> Set[str]:
    """The names ``fn`` binds in its body (a parameter rebound is no longer what the caller handed)."""
    return {
        n.id for node in body_nodes(fn) if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for n in subtree(t) if isinstance(n, ast.Name)
    }
