"""The checker: one statement visitor and one ``check_*`` function per rule.

The shape follows flake8-bugbear: the visitor walks the module once, collects
the loops, the optimizer constructors and the calls of interest, and hands each
to the ``check_*`` functions; every check yields ``(node, detail)`` pairs and the
words of the finding come from the rule catalogue (:func:`gradguard.findings.make_finding`).

Speed matters because the linter runs in pre-commit: the source text is first
searched for the few words a gradient-buffer event needs (``backward``,
``zero_grad``, ``.grad``, ``step``, ...); a file without them is only parsed,
and inside a file only statements on such lines are looked at closely.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from ..findings import Finding, make_finding
from ._events import (
    BACKWARD,
    CLEAR,
    CUTTING_ATTRS,
    MAYBE_CLEAR,
    PARTIAL,
    STEP,
    Event,
    optimizer_constructor,
    terminal,
    text,
)
from ._flow import Path, TooComplex, Walker, condition_key
from ._frameworks import is_framework_class, is_framework_hook

# Words without which a line holds no gradient-buffer event (searched with str.find,
# which is much faster than one regular expression with many alternatives).
_KEYWORDS = (
    "backward", ".step", "zero", ".grad", "create_graph", "optim", "add_", "sub_", "accumulate",
    "no_backward_sync", "SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Lion", "LAMB", "Lamb", "Muon",
    "clear_grad", "reset_grad", "free_grad", "set_grad_none",
)
# Where a scope computes higher-order gradients on purpose (GG108 stays silent).
_HIGHER_ORDER = re.compile(r"autograd\.grad\b|autograd\.functional|torch\.func\b|functorch|\bgrad\(|\bhvp\b|\bvhp\b|hessian")
# Names that say "accumulation window" in a condition or a micro-batch loop.
_ACCUM_NAME = re.compile(r"accum|micro|sync_grad", re.IGNORECASE)
# Optimizers that move a parameter with a zero gradient whatever their arguments:
# Adam-style first moments keep pushing it (and AdamW decays it).
_ALWAYS_MOVES = frozenset({"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "Lion", "LAMB", "Lamb", "FusedAdam", "FusedLAMB", "AdamW8bit", "Adam8bit"})


# ---------------------------------------------------------------------------
# The visitor
# ---------------------------------------------------------------------------
class _Loop(NamedTuple):
    node: ast.AST
    scope: Optional[ast.AST]  # the function around it (None: module level)
    cls: Optional[ast.ClassDef]
    after: Tuple[list, ...]  # statement lists that run after it, innermost first


class LoopInfo:
    """What the loop checks read: the iteration paths and the module around the loop."""

    def __init__(self, loop: _Loop, paths: List[Path], module: "Checker"):
        self.node = loop.node
        self.scope = loop.scope
        self.after = loop.after
        self.paths = paths
        self.module = module
        events = [e for p in paths for e in p.events]
        self.steps = [e for e in events if e.kind == STEP]
        self.clears = [e for e in events if e.kind == CLEAR]
        # zero_grad() calls: the clearings that wipe every gradient of an optimizer or module
        self.full_clears = [e for e in self.clears if e.target != PARTIAL]
        self.backwards = [e for e in events if e.kind == BACKWARD]
        self.complete = [p for p in paths if p.end in (None, "continue")]
        self.step_paths = [p for p in self.complete if STEP in p.kinds()]
        # paths that back-propagate and do not step: micro-batches of a window
        self.micro_paths = [p for p in self.complete if BACKWARD in p.kinds() and STEP not in p.kinds()]
        self._single = len({e.target for e in self.steps}) == 1 and len({e.target for e in self.full_clears}) == 1

    def related(self, clear: Event, step: Event) -> bool:
        """Whether ``clear`` wipes the gradients that ``step`` reads (same optimizer or its module)."""
        if clear.target and clear.target == step.target:
            return True
        model = self.module.optimizer_models.get(step.target)
        if model is not None and clear.target:
            return clear.target == model
        # one optimizer and one cleared object (not a submodule such as model.encoder)
        return self._single and re.fullmatch(r"(?:self\.)?\w+", clear.target) is not None

    def window_paths(self, is_boundary: Callable[[ast.expr], bool]) -> List[Path]:
        """Micro paths that skip the step only because of a window-boundary test.

        A path that skipped the step for another reason too (``if not
        torch.isfinite(loss): continue``) does not count unless some stepping path
        made the same non-boundary decisions.
        """
        out = []
        for m in self.micro_paths:
            boundary = [d for d in m.decisions if is_boundary(d[2])]
            if not boundary:
                continue
            others = [(k, v) for k, v, t in m.decisions if not is_boundary(t)]
            if any(all(s.decided(k) in (v, None) for k, v in others) for s in self.step_paths):
                out.append(m)
        return out


class Checker:
    """Lints one parsed module.

    >>> src = "for x, y in loader:\\n    loss_fn(model(x), y).backward()\\n    opt.step()\\n"
    >>> [f.code for f in Checker(ast.parse(src), src, "t.py").run()]
    ['GG101']
    """

    def __init__(self, tree: ast.Module, source: str, filename: str):
        self.tree = tree
        self.source = source
        self.filename = filename
        self._lines: List[int] = []
        self.functions: Dict[str, ast.AST] = {}
        self.methods: Dict[int, Dict[str, ast.AST]] = {}
        self.optimizer_names: set = set()
        self.optimizer_models: Dict[str, str] = {}
        self.loops: List[_Loop] = []
        self.ctors: List[Tuple[Optional[ast.AST], Optional[ast.AST], bool]] = []
        self.zero_grads: List[Tuple[ast.Call, Optional[ast.AST], Optional[ast.AST]]] = []
        self.create_graphs: List[Tuple[ast.Call, Optional[ast.AST]]] = []
        self._source_lines: Optional[List[str]] = None

    # -- cheap pre-filter ----------------------------------------------------------
    def _mark_lines(self, words) -> None:
        """Adds the numbers of the lines that contain any of ``words``."""
        source, hits = self.source, []
        for word in words:
            pos = source.find(word)
            while pos != -1:
                hits.append(pos)
                pos = source.find(word, pos + len(word))
        hits.sort()
        found, line, last = set(self._lines), 1, 0
        for pos in hits:
            line += source.count("\n", last, pos)
            last = pos
            found.add(line)
        self._lines = sorted(found)

    def interesting(self, node: ast.AST) -> bool:
        lo = getattr(node, "lineno", None)
        if lo is None:
            return True
        hi = getattr(node, "end_lineno", None) or lo
        i = bisect_left(self._lines, lo)
        return i < len(self._lines) and self._lines[i] <= hi

    # -- traversal -------------------------------------------------------------------
    def run(self) -> List[Finding]:
        """All findings of the module (unsuppressed, unsorted, without duplicates)."""
        if "backward" not in self.source and "zero_grad" not in self.source:
            return []
        self._mark_lines(_KEYWORDS)
        for stmt in self.tree.body:  # helpers first, so that lines calling them count as interesting
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                self.methods[id(stmt)] = _methods(stmt)
        self._mark_helper_calls()
        self._visit(self.tree.body, None, None, ())
        found: Dict[Tuple[str, int, int], Finding] = {}
        for code, node, detail in self._check_all():
            line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
            key = (code, line, col)
            if key not in found:
                found[key] = make_finding(code, detail, path=self.filename, line=line, col=col + 1)
        return list(found.values())

    def _mark_helper_calls(self) -> None:
        """Lines that call a helper holding events are interesting too (to a fixed point)."""
        marked: set = set()
        helpers = list(self.functions.items()) + [(n, f) for m in self.methods.values() for n, f in m.items()]
        for _ in range(4):
            names = {name for name, fn in helpers if name not in marked and self.interesting(fn)}
            if not names:
                return
            marked |= names
            self._mark_lines([f"{name}(" for name in sorted(names)])

    def _visit(self, stmts, scope, cls, after: tuple) -> None:
        for i, stmt in enumerate(stmts):
            if not self.interesting(stmt):
                continue  # nothing on its lines can be an event
            rest = (stmts[i + 1 :],) + after
            if isinstance(stmt, ast.ClassDef):
                if is_framework_class(stmt):
                    continue  # Lightning modules, HF Trainer subclasses: the framework runs the loop
                self.methods.setdefault(id(stmt), _methods(stmt))
                self._visit(stmt.body, None, stmt, ())
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if is_framework_hook(stmt):
                    continue
                self._visit(stmt.body, stmt, cls, ())
            else:
                if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)) and self.interesting(stmt):
                    self.loops.append(_Loop(stmt, scope, cls, (stmt.orelse,) + rest))
                bodies = [getattr(stmt, f, None) or [] for f in ("body", "orelse", "finalbody")]
                bodies += [h.body for h in getattr(stmt, "handlers", None) or []]
                bodies += [c.body for c in getattr(stmt, "cases", None) or []]
                if any(bodies):
                    for body in bodies:
                        self._visit(body, scope, cls, rest)
                elif self.interesting(stmt):
                    self._simple(stmt, scope, cls)

    def _simple(self, stmt: ast.stmt, scope, cls) -> None:
        """Optimizer constructors, ``zero_grad(set_to_none=False)`` and ``create_graph=True``."""
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            ctor = optimizer_constructor(stmt.value)
            if ctor is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                model = _model_of(ctor)
                for t in targets:
                    self.optimizer_names.add(text(t))
                    if model:
                        self.optimizer_models[text(t)] = model
                self.ctors.append((scope, cls, _moves_zero_gradients(ctor)))
        for node in ast.walk(stmt):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr == "zero_grad" and _keeps_zeros(node):
                self.zero_grads.append((node, scope, cls))
            elif node.func.attr == "backward" and _keyword_is(node, "create_graph", True):
                self.create_graphs.append((node, scope))
            elif optimizer_constructor(node) is not None and not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                self.ctors.append((scope, cls, _moves_zero_gradients(node)))

    # -- running the checks ------------------------------------------------------------
    def _check_all(self) -> Iterator[Tuple[str, ast.AST, str]]:
        optimizers = frozenset(self.optimizer_names)
        for loop in self.loops:
            methods = self.methods.get(id(loop.cls), {}) if loop.cls is not None else {}
            walker = Walker(self.interesting, self.functions, methods, optimizers)
            try:
                paths = walker.iteration_paths(loop.node)
            except (TooComplex, RecursionError):
                continue  # too many paths to be sure of anything: stay silent
            if walker.framework or not any(BACKWARD in p.kinds() for p in paths):
                continue
            info = LoopInfo(loop, paths, self)
            for code, check in LOOP_CHECKS:
                for node, detail in check(info):
                    yield code, node, detail
        for code, check in MODULE_CHECKS:
            for node, detail in check(self):
                yield code, node, detail

    def scope_text(self, scope: Optional[ast.AST]) -> str:
        if scope is None:
            return self.source
        if self._source_lines is None:
            self._source_lines = self.source.splitlines()
        return "\n".join(self._source_lines[scope.lineno - 1 : scope.end_lineno])


# ---------------------------------------------------------------------------
# Small AST helpers
# ---------------------------------------------------------------------------
def _methods(cls: ast.ClassDef) -> Dict[str, ast.AST]:
    return {s.name: s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _keyword_is(call: ast.Call, name: str, value) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is value for k in call.keywords)


def _keeps_zeros(call: ast.Call) -> bool:
    """``zero_grad(set_to_none=False)`` or ``zero_grad(False)``."""
    if _keyword_is(call, "set_to_none", False):
        return True
    return bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value is False


def _model_of(ctor: ast.Call) -> Optional[str]:
    """``SGD(netD.parameters(), ...)`` -> ``"netD"``."""
    if ctor.args:
        for node in ast.walk(ctor.args[0]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("parameters", "named_parameters"):
                return text(node.func.value)
    return None


def _nonzero(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value not in (0, 0.0, None, False)
    return True  # a variable: assume the user passes it because it is set


def _moves_zero_gradients(ctor: ast.Call) -> bool:
    """Whether the optimizer moves a parameter whose gradient is a zero tensor."""
    name = terminal(ctor.func)
    if name in _ALWAYS_MOVES:
        return True
    for k in ctor.keywords:
        if k.arg in ("momentum", "weight_decay") and _nonzero(k.value):
            return True
    if name == "SGD":  # SGD(params, lr, momentum, dampening, weight_decay)
        return any(i < len(ctor.args) and _nonzero(ctor.args[i]) for i in (2, 4))
    return False


def _is_modulo_test(test: ast.expr) -> bool:
    """A window-boundary test made of modulo comparisons only (``(i + 1) % accum == 0``)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _is_modulo_test(test.operand)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return all(_is_modulo_test(v) for v in test.values)
    if isinstance(test, ast.BinOp):
        return isinstance(test.op, ast.Mod)
    if isinstance(test, ast.Compare):
        sides = [test.left, *test.comparators]
        return any(isinstance(s, ast.BinOp) and isinstance(s.op, ast.Mod) for s in sides) and all(
            isinstance(s, (ast.Constant, ast.Name, ast.Attribute, ast.BinOp)) for s in sides
        )
    return False


def _is_boundary_test(test: ast.expr) -> bool:
    """A test that can decide an accumulation window: a modulo, or a name saying so."""
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return True
        if isinstance(node, (ast.Name, ast.Attribute)) and _ACCUM_NAME.search(terminal(node)):
            return True
    return False


def _body_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk over a loop body, without entering nested function or class bodies."""
    pending = list(node.body) + list(getattr(node, "orelse", []))
    while pending:
        n = pending.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                pending.append(child)


def _backward_tensor(call: ast.Call) -> Optional[ast.expr]:
    """The tensor a backward call differentiates: ``loss`` in ``loss.backward()`` or
    ``torch.autograd.backward(loss)``."""
    recv = call.func.value if isinstance(call.func, ast.Attribute) else None
    if recv is None or text(recv) in ("torch.autograd", "autograd"):
        return call.args[0] if call.args else None
    return recv


def _first(path: Path, kind: str) -> Optional[Event]:
    return next((e for e in path.events if e.kind == kind), None)


def _dominates(outer: Event, inner: Event) -> bool:
    """``outer`` runs whenever ``inner`` does: its branches are a prefix of ``inner``'s."""
    if any(s[0] == "loop" for s in outer.stack):
        return False
    return inner.stack[: len(outer.stack)] == outer.stack


def _reaches(event: Event, path: Path) -> bool:
    """Whether ``path`` takes the branches that lead to ``event``'s nested loop."""
    for entry in event.stack:
        if entry[0] == "loop":
            return True
        test, taken = entry
        if not isinstance(test, ast.expr):
            continue  # a match case: assume it is reached
        key, negated = condition_key(test)
        value = path.decided(key)
        if value is None or (value != negated) != taken:
            return False
    return True


def _describe(event: Event, what: str) -> str:
    return f"`{event.target}.{what}()`" if event.target and event.target != "<manual>" else f"`{what}()`"


# ---------------------------------------------------------------------------
# Loop rules
# ---------------------------------------------------------------------------
def check_stale_gradient(loop: LoopInfo):
    """GG101: a path through the iteration back-propagates and steps but clears nothing."""
    has_clear = bool(loop.clears)
    # `for p in params: if p.grad is not None: p.grad = None` forks inside the nested loop;
    # such a clearing counts on every path that reaches its loop
    nested = [e for p in loop.paths for e in p.events if e.kind in (CLEAR, MAYBE_CLEAR) and any(s[0] == "loop" for s in e.stack)]
    # the tests that guard a clearing (`if i % k == 0:` of `optimizer.zero_grad()`)
    clear_keys = {
        condition_key(t)[0]
        for q in loop.paths
        for e in q.events
        if e.kind in (CLEAR, MAYBE_CLEAR)
        for t, _ in _tests(e)
        if isinstance(t, ast.expr)
    }
    for p in loop.step_paths:
        kinds = p.kinds()
        if BACKWARD not in kinds or CLEAR in kinds or MAYBE_CLEAR in kinds:
            continue
        if any(_reaches(e, p) for e in nested):
            continue
        step = _first(p, STEP)
        if has_clear and any(_is_boundary_test(t) for _, _, t in p.decisions):
            # clearing and stepping on different window tests (`i % k == 0` vs
            # `(i + 1) % k == 0`): we cannot tell whether they line up, so say nothing;
            # but a step that runs whenever the backward does (`if i % 4 == 0: zero_grad()`,
            # then backward() and step() every iteration) steps stale gradients
            if any(_is_boundary_test(t) and k not in clear_keys for k, _, t in p.decisions):
                continue  # the path also passed a window test that does not guard a clearing
            step = next((s for s in p.events if s.kind == STEP and _steps_with_backward(s, p)), None)
            if step is None:
                continue
        where = "on some path through this loop" if p.decisions else "in this loop"
        yield step.node, (
            f"{_describe(step, 'step')} reuses gradients an earlier step already applied: {where} backward() "
            f"and step() run but nothing clears .grad (no zero_grad())."
        )


def _tests(event: Event) -> list:
    return [entry for entry in event.stack if entry[0] != "loop"]


def _steps_with_backward(step: Event, path: Path) -> bool:
    """``step`` runs under no window test and under no condition that a backward on
    ``path`` does not share: it runs on every iteration that back-propagates."""
    tests = _tests(step)
    if any(isinstance(t, ast.expr) and _is_boundary_test(t) for t, _ in tests):
        return False
    return any(
        b.kind == BACKWARD and all(t in _tests(b) for t in tests)
        for b in path.events[: path.events.index(step)]
    )


def check_discarded_gradient(loop: LoopInfo):
    """GG102: clearing between backward and step, or on every micro-batch of a window."""
    for p in loop.paths:
        evs = [e for e in p.events if e.kind in (BACKWARD, STEP, CLEAR)]
        for i, e in enumerate(evs):
            if e.kind != CLEAR or e.target == PARTIAL:
                continue
            before = next((x for x in reversed(evs[:i]) if x.kind != CLEAR), None)
            after = next((x for x in evs[i + 1 :] if x.kind != CLEAR), None)
            if (
                before is not None and before.kind == BACKWARD
                and after is not None and after.kind == STEP
                and loop.related(e, after) and _dominates(e, after)
            ):
                yield e.node, (
                    f"{_describe(e, 'zero_grad')} runs between backward() and {_describe(after, 'step')}: "
                    f"it clears the gradients before the step uses them."
                )
    windows = loop.window_paths(_is_boundary_test)
    if not windows:
        return
    for clear in loop.full_clears:
        if clear.stack or not any(clear in m.events for m in windows):
            continue
        if any(loop.related(clear, s) for s in loop.steps):
            yield clear.node, (
                f"{_describe(clear, 'zero_grad')} runs on every micro-batch while the step runs only when an "
                f"accumulation window closes: each micro-batch's gradients are cleared before a step uses them."
            )


def check_unapplied_gradient(loop: LoopInfo):
    """GG103: a for loop steps on a modulo window and nothing steps the remainder after it."""
    if not isinstance(loop.node, (ast.For, ast.AsyncFor)) or _window_fits(loop.node):
        return
    if any(p.end in ("break", "return") for p in loop.paths):
        return  # `if steps == max_steps: break` may end the loop on a window boundary
    for s in loop.steps:
        for entry in s.stack:
            if entry[0] == "loop" or not isinstance(entry[0], ast.AST) or not _is_modulo_test(entry[0]):
                return  # a step under another condition may be the remainder's (`or last_batch`)
    windows = [m for m in loop.window_paths(_is_boundary_test) if all(_is_modulo_test(t) for _, _, t in m.decisions)]
    if not windows or _steps_after(loop) or _divides_evenly(loop, windows):
        return
    yield loop.node, (
        "This accumulation loop steps only when a modulo window closes, and nothing after the loop steps "
        "the last partial window."
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


def _divides_evenly(loop: LoopInfo, windows: List[Path]) -> bool:
    """The loop runs over a literal (``range(8)``, a bound list of 8) and the window size
    is a literal that divides it: there is no partial window to drop."""
    length = _literal_length(loop.node.iter, loop)
    if length is None:
        return False
    for m in windows:
        for _, _, test in m.decisions:
            for node in ast.walk(test):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                    k = _literal_int(node.right, loop)
                    if k is None or k <= 0 or length % k:
                        return False
    return True


def _binding(name: str, loop: LoopInfo) -> Optional[ast.expr]:
    """The value of the one assignment to ``name`` in the loop's scope (None if not exactly one)."""
    scope = loop.scope if loop.scope is not None else loop.module.tree
    values = [
        n.value
        for n in ast.walk(scope)
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name
    ]
    return values[0] if len(values) == 1 else None


def _literal_int(node: ast.expr, loop: LoopInfo) -> Optional[int]:
    if isinstance(node, ast.Name):
        node = _binding(node.id, loop)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _literal_length(node: ast.expr, loop: LoopInfo) -> Optional[int]:
    if isinstance(node, ast.Call) and terminal(node.func) == "enumerate" and node.args:
        node = node.args[0]
    if isinstance(node, ast.Name):
        node = _binding(node.id, loop)
    if isinstance(node, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in node.elts):
        return len(node.elts)
    if isinstance(node, ast.Call) and terminal(node.func) == "range" and len(node.args) == 1:
        return _literal_int(node.args[0], loop)
    return None


def _steps_after(loop: LoopInfo) -> bool:
    """Anything after the loop that could step or flush (generous on purpose)."""
    seen = set()

    def scan(stmts, depth) -> bool:
        for stmt in stmts:
            for node in ast.walk(stmt):
                if not isinstance(node, ast.Call):
                    continue
                name = terminal(node.func).lower()
                if "step" in name or "flush" in name:
                    return True
                helper = None
                if isinstance(node.func, ast.Name):
                    helper = loop.module.functions.get(node.func.id)
                elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                    helper = next((m[node.func.attr] for m in loop.module.methods.values() if node.func.attr in m), None)
                if helper is not None and depth < 2 and id(helper) not in seen:
                    seen.add(id(helper))
                    if scan(helper.body, depth + 1):
                        return True
        return False

    return any(scan(stmts, 0) for stmts in loop.after)


def check_unscaled_accumulation(loop: LoopInfo):
    """GG104: an accumulation loop back-propagates a mean loss that nothing divided."""
    if _scales_gradients(loop.node) or re.search(r"reduction\s*=\s*['\"]sum|size_average\s*=\s*False", loop.module.scope_text(loop.scope)):
        return
    windows = loop.window_paths(_is_boundary_test)
    if windows:
        candidates = [e for m in windows for e in m.events if e.kind == BACKWARD]
    elif (
        not loop.steps
        and isinstance(loop.node, (ast.For, ast.AsyncFor))
        and _ACCUM_NAME.search(text(loop.node.iter) + text(loop.node.target))
        and _steps_after(loop)
    ):
        # nanoGPT's shape: `for micro_step in range(gradient_accumulation_steps): ... backward()`,
        # then one step for the window
        candidates = list(loop.backwards)
    else:
        return
    assigns = _assignments(loop.node)
    for b in dict.fromkeys(candidates):
        if _loss_scale(_backward_tensor(b.node), assigns, loop.module, 0) == "raw":
            yield b.node, (
                f"`{b.target}.backward()` accumulates over several micro-batches a mean loss that is not divided "
                f"by the number of micro-batches."
            )


def _scales_gradients(loop_node: ast.AST) -> bool:
    """The loop rescales ``.grad`` itself (``p.grad.div_(k)``, ``p.grad /= k``)."""
    for n in _body_nodes(loop_node):
        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)) and "grad" in text(n.target):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("div_", "mul_", "_foreach_div_", "_foreach_mul_"):
            if "grad" in text(n.func.value) or "grad" in text(n):
                return True
    return False


def _assignments(loop_node: ast.AST) -> Dict[str, list]:
    """name -> the values assigned to it in the loop body (``("aug", op)`` for ``x /= k``)."""
    out: Dict[str, list] = {}
    for n in _body_nodes(loop_node):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                for name in _target_names(t):
                    out.setdefault(name, []).append(n.value)
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            for name in _target_names(n.target):
                out.setdefault(name, []).append(n.value)
        elif isinstance(n, ast.AugAssign):
            for name in _target_names(n.target):
                out.setdefault(name, []).append(("aug", n.op))
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.NamedExpr)):
            targets = [n.target] if isinstance(n, (ast.For, ast.AsyncFor, ast.NamedExpr)) else [i.optional_vars for i in n.items if i.optional_vars]
            for t in targets:
                for name in _target_names(t):
                    out.setdefault(name, []).append(None)  # unknown value
    return out


def _target_names(t: ast.AST) -> List[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    if isinstance(t, ast.Starred):
        return _target_names(t.value)
    return []


def _loss_scale(expr, assigns, module: Checker, depth: int) -> str:
    """``"scaled"`` (divided or weighted), ``"raw"`` (a plain mean-reduced loss) or ``"unknown"``."""
    if expr is None or depth > 4:
        return "unknown"
    if isinstance(expr, tuple):  # ("aug", op)
        return "scaled" if isinstance(expr[1], (ast.Div, ast.Mult, ast.FloorDiv)) else "unknown"
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, (ast.Div, ast.Mult, ast.FloorDiv)):
            return "scaled"
        if isinstance(expr.op, (ast.Add, ast.Sub)):
            sides = {_loss_scale(expr.left, assigns, module, depth + 1), _loss_scale(expr.right, assigns, module, depth + 1)}
            return "raw" if sides == {"raw"} else ("scaled" if "scaled" in sides else "unknown")
        return "unknown"
    if isinstance(expr, ast.Name):
        values = assigns.get(expr.id)
        if not values:
            return "unknown"  # computed outside the loop: cannot tell
        kinds = {_loss_scale(v, assigns if not _self_ref(v, expr.id) else {**assigns, expr.id: []}, module, depth + 1) for v in values}
        return "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
    if isinstance(expr, (ast.Attribute, ast.Subscript)):  # outputs.loss, outputs[0]
        return _loss_scale(expr.value, assigns, module, depth + 1)
    if isinstance(expr, ast.Call):
        func = expr.func
        name = terminal(func)
        if isinstance(func, ast.Attribute) and name == "scale" and "scaler" in terminal(func.value).lower() and expr.args:
            return _loss_scale(expr.args[0], assigns, module, depth + 1)  # GradScaler.scale(loss)
        if isinstance(func, ast.Attribute) and name in ("mean", "float", "squeeze", "to", "cuda", "contiguous"):
            return _loss_scale(func.value, assigns, module, depth + 1) if name != "mean" else "raw"
        if isinstance(func, ast.Name) and func.id in module.functions:
            return "unknown"  # a helper of this module may scale inside
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return "unknown"
        if name in ("sum", "item") or re.search(r"scale|norm|weight|accum", name, re.IGNORECASE):
            return "unknown"
        for k in expr.keywords:
            if k.arg == "reduction" and not (isinstance(k.value, ast.Constant) and k.value.value == "mean"):
                return "unknown"
        if _ACCUM_NAME.search(text(expr)):
            return "unknown"
        return "raw"
    return "unknown"


def _self_ref(value, name: str) -> bool:
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
_LOSS_NAME = re.compile(r"loss|nll|cost", re.IGNORECASE)
_WEIGHT_NAME = re.compile(r"weight|scale|coef|factor|lambda|alpha|beta|ratio|num|count|tokens", re.IGNORECASE)
# Reading one of these gives a number or a new tensor without the receiver's graph.
_NO_GRAPH_ATTRS = frozenset({"size", "shape", "numel", "dim", "ndim", "ndimension", "dtype", "device", "argmax", "argmin", "requires_grad", "grad_fn", "is_cuda"})


def _is_weight(node: ast.expr, loop_names) -> bool:
    """A factor that scales a loss rather than being one: a literal, a name the loop
    never assigns (a hyperparameter), a count (``x.size(0)``, ``len(batch)``)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id not in loop_names
    if isinstance(node, ast.UnaryOp):
        return _is_weight(node.operand, loop_names)
    if isinstance(node, ast.BinOp):
        return _is_weight(node.left, loop_names) and _is_weight(node.right, loop_names)
    if isinstance(node, ast.Attribute):
        return node.attr in _NO_GRAPH_ATTRS or (isinstance(node.value, ast.Name) and node.value.id in ("self", "args", "cfg", "config"))
    if isinstance(node, ast.Call):
        return terminal(node.func) in ("size", "numel", "len", "float", "int", "item") or any(
            isinstance(n, ast.Compare) for n in ast.walk(node)
        )
    return False


def _loss_carriers(expr, loop_names) -> set:
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
        return set() if expr.attr in CUTTING_ATTRS or expr.attr in _NO_GRAPH_ATTRS else _loss_carriers(expr.value, loop_names)
    if isinstance(expr, ast.Subscript):  # outputs[0], losses["total"]
        return _loss_carriers(expr.value, loop_names)
    if isinstance(expr, ast.Starred):
        return _loss_carriers(expr.value, loop_names)
    if isinstance(expr, ast.UnaryOp):
        return _loss_carriers(expr.operand, loop_names)
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, (ast.Add, ast.Sub)):
            return _loss_carriers(expr.left, loop_names) | _loss_carriers(expr.right, loop_names)
        if isinstance(expr.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            return _loss_carriers(expr.left, loop_names)
        if isinstance(expr.op, ast.Mult):
            out = set()
            for side, other in ((expr.left, expr.right), (expr.right, expr.left)):
                if isinstance(side, ast.Name):
                    if (_LOSS_NAME.search(side.id) and not _WEIGHT_NAME.search(side.id)) or _is_weight(other, loop_names):
                        out.add(side.id)
                elif not _is_weight(side, loop_names):
                    out |= _loss_carriers(side, loop_names)
            return out
        return set()
    if isinstance(expr, ast.Call):
        func = expr.func
        name = terminal(func)
        if re.search(r"scale", name, re.IGNORECASE) and expr.args:  # scaler.scale(loss), amp.scale_loss(loss, opt)
            return _loss_carriers(expr.args[0], loop_names)
        if isinstance(func, ast.Attribute) and name in _GRAPH_METHODS:
            if isinstance(func.value, ast.Name) and func.value.id in _MODULE_NAMES:
                return _loss_carriers(expr.args[0], loop_names) if expr.args else set()  # torch.mean(loss)
            return _loss_carriers(func.value, loop_names)
        if isinstance(func, ast.Name) and func.id == "sum" and expr.args:  # sum(losses)
            return _loss_carriers(expr.args[0], loop_names)
        return set()  # criterion(outputs, labels): the result is the loss, its arguments are not
    if isinstance(expr, (ast.List, ast.Tuple)):
        return set().union(*(_loss_carriers(e, loop_names) for e in expr.elts)) if expr.elts else set()
    return set()


def _loss_names(loop: LoopInfo, assigns: Dict[str, list]) -> set:
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
        losses |= _loss_carriers(_backward_tensor(b.node), loop_names)
    pending = list(losses)
    while pending:  # back: what the loss tensors were built from
        name = pending.pop()
        for v in assigns.get(name, []):
            for n in _loss_carriers(v, loop_names) - losses:
                losses.add(n)
                pending.append(n)
    # forward: names assigned from a loss tensor with its graph kept (not running totals)
    sources = [
        (name, v, _loss_carriers(v, loop_names))
        for name, values in assigns.items()
        if name not in losses
        for v in values
        if isinstance(v, ast.AST) and not _self_ref(v, name)
    ]
    sources = [entry for entry in sources if entry[2]]
    changed = True
    while changed:
        changed = False
        for name, v, carriers in sources:
            if name not in losses and any(n in losses and _keeps_graph(v, n) for n in carriers):
                losses.add(name)
                changed = True
    # names assigned a cut value somewhere in the loop (`loss = loss.item()`) are not tensors there
    return {n for n in losses if not any(isinstance(v, ast.AST) and not _keeps_graph(v, n) and _self_ref(v, n) for v in assigns.get(n, []))}


def check_graph_kept_by_logging(loop: LoopInfo):
    """GG201: ``total += loss`` on a loss tensor that this loop back-propagates."""
    assigns = _assignments(loop.node)
    losses = _loss_names(loop, assigns)
    if not losses:
        return
    backwarded = {n.id for b in loop.backwards for n in ast.walk(_backward_tensor(b.node) or ast.Pass()) if isinstance(n, ast.Name)}
    for node in _grad_enabled_statements(loop.node.body):
        total, value = None, None
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            total, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add):
            t = text(node.targets[0])
            if t in (text(node.value.left), text(node.value.right)):
                total, value = node.targets[0], node.value
        if total is None or terminal(total) in losses or terminal(total) in backwarded:
            continue
        if any(_keeps_graph(value, name) for name in _loss_carriers(value, set(assigns)) & losses) and not (
            _backwarded_later(loop, terminal(total)) or _reset_in_loop(loop, text(total))
        ):
            yield node, f"`{text(total)}` accumulates the loss tensor itself, not a number or a detached tensor."


def _reset_in_loop(loop: LoopInfo, total: str) -> bool:
    """The loop itself sets the total back to a constant (torchtune logs per window this way).

    The chain of graphs it links then spans one reset period, whose activations
    backward() has already freed: bounded, not a leak growing with the run.
    """
    for stmt in _grad_enabled_statements(loop.node.body):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and text(stmt.targets[0]) == total:
            value = stmt.value
            if isinstance(value, ast.Constant) or (
                isinstance(value, ast.Call) and terminal(value.func) in ("zeros", "zeros_like", "tensor")
                and not any(isinstance(n, ast.Name) and n.id == total for n in ast.walk(value))
            ):
                return True
    return False


def _keeps_graph(expr: ast.AST, name: str) -> bool:
    """Whether ``expr`` uses tensor ``name`` without cutting its graph (.item(), .detach(), float())."""
    if isinstance(expr, ast.Name):
        return expr.id == name
    if isinstance(expr, ast.Attribute):
        return expr.attr not in CUTTING_ATTRS and expr.attr not in _NO_GRAPH_ATTRS and _keeps_graph(expr.value, name)
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id in ("float", "int", "len", "str", "round", "bool", "isinstance", "print"):
            return False
        if isinstance(func, ast.Attribute) and func.attr in CUTTING_ATTRS:
            return False
        return _keeps_graph(func, name) or any(_keeps_graph(a, name) for a in expr.args)
    if isinstance(expr, (ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List)):
        return any(_keeps_graph(c, name) for c in ast.iter_child_nodes(expr))
    return False


def _grad_enabled_statements(stmts) -> Iterator[ast.stmt]:
    """Statements of a body, nested ones included, outside ``with torch.no_grad()`` and nested defs."""
    for stmt in stmts:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, (ast.With, ast.AsyncWith)) and any(
            terminal(i.context_expr) in ("no_grad", "inference_mode") for i in stmt.items
        ):
            continue
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            yield from _grad_enabled_statements(getattr(stmt, field, None) or [])
        for h in getattr(stmt, "handlers", None) or []:
            yield from _grad_enabled_statements(h.body)


def _backwarded_later(loop: LoopInfo, name: str) -> bool:
    """The running total is itself back-propagated somewhere in the scope (a summed loss, not a log)."""
    pattern = r"\b%s\b[^\n]*\.backward\s*\(|backward\([^\n]*\b%s\b" % (re.escape(name), re.escape(name))
    return re.search(pattern, loop.module.scope_text(loop.scope)) is not None


# ---------------------------------------------------------------------------
# Module rules
# ---------------------------------------------------------------------------
def check_zero_not_none(module: Checker):
    """GG107: ``zero_grad(set_to_none=False)`` where an optimizer with momentum or weight decay is built."""
    for call, scope, cls in module.zero_grads:
        for ctor_scope, ctor_cls, moves in module.ctors:
            if moves and (ctor_scope is scope or ctor_scope is None or (cls is not None and ctor_cls is cls)):
                yield call, (
                    f"`{text(call.func)}(set_to_none=False)` leaves zero-filled gradients, and this scope builds an "
                    f"optimizer with momentum or weight decay."
                )
                break


def check_graph_in_grad(module: Checker):
    """GG108: ``backward(create_graph=True)`` in a scope that computes no higher-order gradient."""
    for call, scope in module.create_graphs:
        if not _HIGHER_ORDER.search(module.scope_text(scope)):
            yield call, (
                f"`{text(call.func)}(create_graph=True)` stores gradients that carry an autograd graph in .grad, "
                f"and nothing in this scope computes a higher-order gradient with torch.autograd.grad."
            )


#: (code, check) pairs, run in this order on every training loop (rules as data).
LOOP_CHECKS = (
    ("GG101", check_stale_gradient),
    ("GG102", check_discarded_gradient),
    ("GG103", check_unapplied_gradient),
    ("GG104", check_unscaled_accumulation),
    ("GG201", check_graph_kept_by_logging),
)
#: (code, check) pairs run once per module.
MODULE_CHECKS = (
    ("GG107", check_zero_not_none),
    ("GG108", check_graph_in_grad),
)
