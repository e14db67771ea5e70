"""The program model: built once per file, read by every rule.

:func:`build` walks a parsed module once and records what the rules need:

* the functions of the module, the methods of each class (with the bases
  defined in the same module), the closures of each function, the objects built
  from a class of the module (wrappers whose ``step()`` is followed);
* the optimizers (by the variable or attribute they are bound to, and the
  module whose parameters they hold), the loss objects built with
  ``reduction="sum"``;
* every training loop: ``for``/``while`` loops and Lightning's manual-optimization
  ``training_step`` (one iteration per call), each unrolled by
  :class:`~._flow.Walker` into the paths of one iteration, as sequences of
  gradient-buffer events (per optimizer: backward, clear, step, read);
* module-wide facts (``zero_grad(set_to_none=False)`` calls, ``create_graph=True``
  backward passes, HF ``compute_loss`` overrides, evaluation loops that sum losses);
* the loops it could not follow, as :class:`Skipped` records: nothing is left
  out silently.

Rules (``lint/rules/ggNNN_*.py``) only read this model and report through
:class:`Report`, which keeps the nodes a finding is about (loop, optimizer,
backward, step, clear, accumulation variable) for the fixes built on them.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from ._events import (
    BACKWARD,
    CLEAR,
    MANAGED,
    MAYBE_CLEAR,
    PARTIAL,
    READ,
    STEP,
    Event,
    is_optimizer_name,
    optimizer_constructor,
    terminal,
    text,
)
from ._flow import Path, TooComplex, Walker, condition_key
from ._frameworks import is_framework_class, is_framework_hook, is_hf_trainer_class, is_manual_lightning

# Words without which a line holds no gradient-buffer event (searched with str.find,
# which is much faster than one regular expression with many alternatives).
# (A manual update `p.data.add_(p.grad)` or `p.grad.zero_()` is found by ".grad".)
_KEYWORDS = (
    "backward", ".step", "zero_grad", ".grad", "create_graph", "optim", "accumulate",
    "SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Lion", "LAMB", "Lamb", "Muon", "_foreach_zero_",
    "clear_grad", "reset_grad", "free_grad", "grad_none", "grads_none", "grads_to_none", "grad_to_none",
    "num_items_in_batch", "Accumulator", "accumulate_batch", "acc.",
)
# Names that say "accumulation window" in a condition or a micro-batch loop.
ACCUM_NAME = re.compile(r"accum|micro|sync_grad", re.IGNORECASE)
# Optimizers that move a parameter with a zero gradient whatever their arguments:
# Adam-style first moments keep pushing it (and AdamW decays it).
_ALWAYS_MOVES = frozenset({"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "Lion", "LAMB", "Lamb", "FusedAdam", "FusedLAMB", "AdamW8bit", "Adam8bit"})
_NO_GRAD_CONTEXTS = frozenset({"no_grad", "inference_mode"})
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
# Attributes holding a framework's per-iteration state (``accelerator.sync_gradients``,
# ``trainer.is_last_batch``): they change between iterations without an assignment in view.
_STATE_ATTR = re.compile(r"sync|last|boundary|is_end|should_|finished|done", re.I)
_CALL_SITE = re.compile(r"([A-Za-z_]\w*)\s*\(")


class Skipped(NamedTuple):
    """A loop (or file) the linter could not check, and why.

    >>> Skipped("train.py", 12, "more than 256 paths through one iteration").format()
    'train.py:12: not checked: more than 256 paths through one iteration'
    """

    path: str
    line: int
    reason: str

    def format(self) -> str:
        return f"{self.path}:{self.line}: not checked: {self.reason}"


class Diagnostic(NamedTuple):
    """What a rule found, before it becomes a :class:`~gradguard.findings.Finding`.

    ``node`` is where the finding points; the other nodes are what it is about,
    for the fixes built on it (any may be None).
    """

    code: str
    node: ast.AST
    detail: str
    loop: Optional["Loop"] = None
    optimizer: Optional[str] = None
    backward: Optional[ast.AST] = None
    step: Optional[ast.AST] = None
    clear: Optional[ast.AST] = None
    accum: Optional[ast.AST] = None
    fix: object = None


class Report:
    """The one way a rule reports: ``report(code, node, detail, loop=..., step=..., ...)``."""

    def __init__(self):
        self.diagnostics: List[Diagnostic] = []

    def __call__(self, code: str, node: ast.AST, detail: str, **about) -> None:
        self.diagnostics.append(Diagnostic(code, node, detail, **about))


# ---------------------------------------------------------------------------
# Path helpers shared by the rules
# ---------------------------------------------------------------------------
def first(path: Path, kind: str) -> Optional[Event]:
    return next((e for e in path.events if e.kind == kind), None)


def tests(event: Event) -> list:
    """The ``if`` tests (and match cases) around an event, nested loops left out."""
    return [entry for entry in event.stack if entry[0] != "loop"]


def in_nested_loop(event: Event) -> bool:
    return any(s[0] == "loop" for s in event.stack)


def dominates(outer: Event, inner: Event) -> bool:
    """``outer`` runs whenever ``inner`` does: its branches are a prefix of ``inner``'s."""
    if in_nested_loop(outer):
        return False
    return inner.stack[: len(outer.stack)] == outer.stack


def reaches(event: Event, path: Path) -> bool:
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


def describe(event: Event, what: str) -> str:
    return f"`{event.target}.{what}()`" if event.target and event.target != "<manual>" else f"`{what}()`"


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


def is_boundary_test(test: ast.expr) -> bool:
    """A test that can decide an accumulation window: a modulo, or a name saying so."""
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return True
        if isinstance(node, (ast.Name, ast.Attribute)) and ACCUM_NAME.search(terminal(node)):
            return True
    return False


def body_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk over a loop body, without entering nested function or class bodies."""
    pending = list(node.body) + list(getattr(node, "orelse", []) if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) else [])
    while pending:
        n = pending.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                pending.append(child)


def backward_tensor(call: ast.AST) -> Optional[ast.expr]:
    """The tensor a backward call differentiates: ``loss`` in ``loss.backward()``,
    ``torch.autograd.backward(loss)`` or ``accelerator.backward(loss)``."""
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    recv = func.value if isinstance(func, ast.Attribute) else None
    if recv is None or func.attr == "manual_backward" or call.args and not _is_tensor_receiver(recv):
        return call.args[0] if call.args else None
    return recv


def _is_tensor_receiver(recv: ast.AST) -> bool:
    """``loss`` of ``loss.backward(gradient)`` rather than ``accelerator`` of ``accelerator.backward(loss)``."""
    if text(recv) in ("torch.autograd", "autograd"):
        return False
    from ._events import _FRAMEWORK_RECEIVER

    return not _FRAMEWORK_RECEIVER.search(terminal(recv))


def steps_after(loop: "Loop") -> bool:
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


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------
class Loop:
    """One training loop: its iteration paths and the module around it.

    ``kind`` is ``"for"``, ``"while"`` or ``"training_step"`` (Lightning manual
    optimization: Lightning calls it once per batch, so its body is one iteration).
    ``accumulate`` is True inside ``with accelerator.accumulate(model):``.
    """

    def __init__(self, node, scope, cls, after, paths: List[Path], module: "Module", accumulate: bool, functions=None, methods=None):
        self.node = node
        #: what a call by name (module functions and closures) and through ``self.`` reaches
        self.functions = functions if functions is not None else module.functions
        self.methods = methods or {}
        self.scope = scope
        self.cls = cls
        self.after = after
        self.paths = paths
        self.module = module
        self.accumulate = accumulate
        self.kind = "while" if isinstance(node, ast.While) else ("for" if isinstance(node, (ast.For, ast.AsyncFor)) else "training_step")
        events = [e for p in paths for e in p.events]
        self.events = events
        self.steps = [e for e in events if e.kind == STEP]
        self.clears = [e for e in events if e.kind == CLEAR]
        # zero_grad() calls: the clearings that wipe every gradient of an optimizer or module
        self.full_clears = [e for e in self.clears if e.target != PARTIAL]
        self.backwards = [e for e in events if e.kind == BACKWARD]
        self.reads = [e for e in events if e.kind == READ]
        #: calls of a gradguard Accumulator: it back-propagates, scales, steps and clears itself
        self.managed = [e for e in events if e.kind == MANAGED]
        # a return ends one call of training_step normally, as continue ends a loop iteration
        normal = (None, "continue") if self.kind != "training_step" else (None, "return")
        self.complete = [p for p in paths if p.end in normal]
        self.step_paths = [p for p in self.complete if STEP in p.kinds()]
        # A nested loop that steps is a training loop of its own (an epoch function called
        # from an epoch loop): its backward passes are no micro-batches of this loop.
        stepping = {entry for e in self.steps for entry in e.stack if entry[0] == "loop"}
        # paths that back-propagate and do not step: micro-batches of a window
        self.micro_paths = [
            p for p in self.complete
            if STEP not in p.kinds() and any(e.kind == BACKWARD and not stepping.intersection(e.stack) for e in p.events)
        ]
        self._single = len({e.target for e in self.steps}) == 1 and len({e.target for e in self.full_clears}) == 1

    @property
    def trains(self) -> bool:
        return bool(self.backwards)

    @property
    def managed_only(self) -> bool:
        """Driven by a gradguard Accumulator alone: correct by construction for the buffer rules."""
        return bool(self.managed) and not self.backwards

    def is_optimizer(self, target: str) -> bool:
        node = _parse_expr(target)
        return node is not None and is_optimizer_name(node, self.module.optimizer_names)

    def related(self, clear: Event, step: Event) -> bool:
        """Whether ``clear`` wipes the gradients that ``step`` reads (same optimizer or its module)."""
        if clear.target and (clear.target == step.target or step.target.startswith(clear.target + ".")):
            return True
        model = self.module.optimizer_models.get(step.target)
        if model is not None and clear.target:
            return clear.target == model
        # one optimizer and one cleared object (not a submodule such as model.encoder)
        return self._single and re.fullmatch(r"(?:self\.)?\w+", clear.target) is not None

    def may_clear_for(self, clear: Event, step: Event) -> bool:
        """Whether ``clear`` could clear what ``step`` reads (False only when it surely clears
        another optimizer: ``optD.zero_grad()`` never clears ``optG``'s parameters)."""
        if clear.kind == MAYBE_CLEAR or clear.target in (PARTIAL, "") or step.target in ("", "<manual>"):
            return True
        if self.related(clear, step) or clear.target.rsplit(".", 1)[-1] == step.target.rsplit(".", 1)[-1]:
            return True
        if self.is_optimizer(clear.target) and self.is_optimizer(step.target):
            # two optimizers stepped here: clearing one leaves the other's .grad (one optimizer
            # and a differently written clearing may be the same object under two names)
            return clear.target not in {e.target for e in self.steps}
        model = self.module.optimizer_models.get(step.target)
        if model is not None and clear.target in self.module.optimizer_models.values():
            return False  # netD.zero_grad() does not clear netG, the model of optG
        return True

    def boundary(self, test: ast.expr) -> bool:
        """:func:`is_boundary_test`, with names the loop assigns followed
        (``last_of_window = (i + 1) % accum == 0`` ... ``if last_of_window:``)."""
        if is_boundary_test(test):
            return True
        names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        assigns = self.assignments()
        return any(isinstance(v, ast.AST) and is_boundary_test(v) for name in names for v in assigns.get(name, ()))

    def scope_of(self, event: Event) -> Dict[str, list]:
        """The assignments that give the names of ``event`` their values: the loop's, then those
        of every helper the walk went through (its parameters bound to the call's arguments)."""
        assigns = self.assignments()
        for fn, call in event.frame:
            assigns = {**assigns, **bind_arguments(fn, call), **assignments(fn)}
        return assigns

    def accumulates(self) -> bool:
        """Several backward passes per step: Accelerate's window, a window test, a micro-step loop."""
        return self.accumulate or bool(self.window_paths()) or self._micro_loop() is not None

    def window_size(self) -> Optional[ast.expr]:
        """The number of micro-batches of a window, as the loop writes it: ``K`` of the ``% K``
        test that closes the window (names the loop assigns followed), or of ``range(K)`` of a
        micro-step loop. None where the loop has no such variable."""
        assigns = self.assignments()
        for m in self.window_paths():
            for _, _, test in m.decisions:
                names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
                for expr in [test] + [v for name in names for v in assigns.get(name, ()) if isinstance(v, ast.AST)]:
                    for n in ast.walk(expr):
                        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                            return n.right
        micro = self._micro_loop()
        return micro.iter.args[0] if micro is not None else None

    def _micro_loop(self) -> Optional[ast.AST]:
        """nanoGPT's ``for micro_step in range(K):`` back-propagating, with the step after it
        (this loop itself, or a nested loop of this one that does not step)."""
        stepping = {entry[1] for e in self.steps for entry in e.stack if entry[0] == "loop"}
        candidates = [self.node] if not self.steps and self.kind == "for" and steps_after(self) else []
        candidates += [
            n for n in body_nodes(self.node)
            if isinstance(n, (ast.For, ast.AsyncFor)) and id(n) not in stepping
            and any(("loop", id(n)) in b.stack for b in self.backwards)
        ]
        for n in candidates:
            it = n.iter
            if (
                isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1
                and ACCUM_NAME.search(text(it) + text(n.target))
            ):
                return n
        return None

    def callee(self, call: ast.AST) -> Optional[ast.AST]:
        """The function of this module a call runs: a function or closure by name, a method through ``self.``."""
        if not isinstance(call, ast.Call):
            return None
        func = call.func
        if isinstance(func, ast.Name):
            return self.functions.get(func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            return self.methods.get(func.attr)
        return None

    def window_paths(self, is_boundary: Optional[Callable[[ast.expr], bool]] = None) -> List[Path]:
        """Micro paths that skip the step only because of a window-boundary test.

        A path that skipped the step for another reason too (``if not
        torch.isfinite(loss): continue``) does not count unless some stepping path
        made the same non-boundary decisions.
        """
        test = is_boundary or self.boundary

        def is_boundary(t) -> bool:  # a flag fixed for the whole loop closes no window
            return test(t) and self.varies(t)

        out = []
        for m in self.micro_paths:
            boundary = [d for d in m.decisions if is_boundary(d[2])]
            if not boundary:
                continue
            others = [(k, v) for k, v, t in m.decisions if not is_boundary(t)]
            if any(all(s.decided(k) in (v, None) for k, v in others) for s in self.step_paths):
                out.append(m)
        return out

    def resolve(self, test: ast.expr) -> ast.expr:
        """``test`` with a name the loop assigns once replaced by its value
        (``last_of_window = (i + 1) % k == 0`` ... ``if last_of_window:``)."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.resolve(test.operand)
            return test if inner is test.operand else ast.UnaryOp(op=ast.Not(), operand=inner)
        if isinstance(test, ast.Name):
            values = self.assignments().get(test.id, ())
            if len(values) == 1 and isinstance(values[0], ast.expr):
                return values[0]
        return test

    def varies(self, test: ast.expr) -> bool:
        """Whether an ``if`` test can change from one iteration to the next.

        A test made only of names and attributes the loop never assigns (``if use_accum:``,
        ``if args.accum > 1:``, ``if self.use_amp:``) is a flag fixed for the whole loop: its
        branches are two different loops, never two micro-batches of one window. Calls, ``%``,
        the loop's own variables, attributes assigned outside ``__init__`` and framework state
        (``accelerator.sync_gradients``) may vary.
        """
        assigned = self.assignments()
        targets = set(target_names(self.node.target)) if isinstance(self.node, (ast.For, ast.AsyncFor)) else set()
        for n in ast.walk(test):
            if isinstance(n, (ast.Call, ast.NamedExpr, ast.Await)) or isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                return True
            if isinstance(n, ast.Name) and (n.id in assigned or n.id in targets):
                return True
            if isinstance(n, ast.Attribute) and (_STATE_ATTR.search(n.attr) or n.attr in self.module.mutated_attrs()):
                return True
        return False

    def assignments(self) -> Dict[str, list]:
        """name -> the values assigned to it in the loop body (``("aug", op, node)`` for ``x /= k``)."""
        cached = getattr(self, "_assignments", None)
        if cached is None:
            cached = self._assignments = assignments(self.node)
        return cached


class Module:
    """The model of one file: what :func:`build` found (see the module docstring)."""

    def __init__(self, tree: ast.Module, source: str, filename: str):
        self.tree = tree
        self.source = source
        self.filename = filename
        self.functions: Dict[str, ast.AST] = {}
        self.classes: Dict[str, ast.ClassDef] = {}
        self.methods: Dict[int, Dict[str, ast.AST]] = {}
        self.instances: Dict[str, Dict[str, ast.AST]] = {}
        self.optimizer_names: set = set()
        self.accumulators: set = set()  # names bound to gradguard.Accumulator(...)
        self.optimizer_models: Dict[str, str] = {}
        self.sum_losses: set = set()  # names of loss objects built with reduction="sum"
        self.loops: List[Loop] = []
        self.eval_loops: List[Tuple[ast.AST, Optional[ast.AST]]] = []
        self.ctors: List[Tuple[Optional[ast.AST], Optional[ast.AST], bool]] = []
        self.zero_grads: List[Tuple[ast.Call, Optional[ast.AST], Optional[ast.AST]]] = []
        self.create_graphs: List[Tuple[ast.Call, Optional[ast.AST]]] = []
        self.compute_losses: List[Tuple[ast.AST, ast.ClassDef]] = []
        self.skipped: List[Skipped] = []
        self._lines: List[int] = []
        self._grad_lines: List[int] = []
        self._backward_lines: List[int] = []
        self._sum_lines: List[int] = []
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
        self._add_positions(hits)

    def _add_positions(self, hits) -> None:
        hits = sorted(hits)
        found, line, last = set(self._lines), 1, 0
        for pos in hits:
            line += self.source.count("\n", last, pos)
            last = pos
            found.add(line)
        self._lines = sorted(found)

    def interesting(self, node: ast.AST) -> bool:
        """Whether ``node``'s lines may hold a gradient-buffer event."""
        return _overlaps(self._lines, node)

    def mentions_grad(self, node: ast.AST) -> bool:
        """Whether ``node``'s lines contain ``.grad`` (a cheap test before looking for reads)."""
        return _overlaps(self._grad_lines, node)

    def scope_text(self, scope: Optional[ast.AST]) -> str:
        if scope is None:
            return self.source
        if self._source_lines is None:
            self._source_lines = self.source.split("\n")
        return "\n".join(self._source_lines[scope.lineno - 1 : scope.end_lineno])

    def sums_in(self, scope: Optional[ast.AST]) -> bool:
        """``reduction="sum"`` (or ``size_average=False``) written inside ``scope``."""
        return bool(self._sum_lines) if scope is None else _overlaps(self._sum_lines, scope)

    def mutated_attrs(self) -> frozenset:
        """Attribute names assigned somewhere outside ``__init__`` (state that may change in a loop)."""
        cached = getattr(self, "_mutated", None)
        if cached is None:
            found, pending = set(), [(self.tree, False)]
            while pending:
                node, in_init = pending.pop()
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        pending.append((child, child.name in ("__init__", "setup", "__post_init__")))
                        continue
                    if not in_init:
                        if isinstance(child, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                            for t in child.targets if isinstance(child, ast.Assign) else [child.target]:
                                found.update(n.attr for n in ast.walk(t) if isinstance(n, ast.Attribute))
                        elif isinstance(child, ast.Call) and terminal(child.func) == "setattr" and len(child.args) > 1:
                            arg = child.args[1]
                            found.add(arg.value if isinstance(arg, ast.Constant) else "")
                    pending.append((child, in_init))
            cached = self._mutated = frozenset(found)
        return cached

    def skip(self, node: ast.AST, reason: str) -> None:
        self.skipped.append(Skipped(self.filename, getattr(node, "lineno", 1), reason))


def _overlaps(lines: List[int], node: ast.AST) -> bool:
    lo = getattr(node, "lineno", None)
    if lo is None:
        return True
    hi = getattr(node, "end_lineno", None) or lo
    i = bisect_left(lines, lo)
    return i < len(lines) and lines[i] <= hi


def _parse_expr(source: str) -> Optional[ast.expr]:
    try:
        return ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None


def methods_of(cls: ast.ClassDef) -> Dict[str, ast.AST]:
    return {s.name: s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _keyword_is(call: ast.Call, name: str, value) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is value for k in call.keywords)


def keeps_zeros(call: ast.Call) -> bool:
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


def _sums(call: ast.Call) -> bool:
    """A loss constructor or call that does not average: ``reduction="sum"``/``"none"``, ``size_average=False``."""
    for k in call.keywords:
        if k.arg == "reduction" and not (isinstance(k.value, ast.Constant) and k.value.value == "mean"):
            return True
        if k.arg == "size_average" and isinstance(k.value, ast.Constant) and k.value.value is False:
            return True
    return False


def assignments(loop_node: ast.AST) -> Dict[str, list]:
    """name -> the values assigned to it in the loop body (``("aug", op)`` for ``x /= k``)."""
    out: Dict[str, list] = {}
    for n in body_nodes(loop_node):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                for name in target_names(t):
                    out.setdefault(name, []).append(n.value)
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            for name in target_names(n.target):
                out.setdefault(name, []).append(n.value)
        elif isinstance(n, ast.AugAssign):
            for name in target_names(n.target):
                out.setdefault(name, []).append(("aug", n.op, n))
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.NamedExpr)):
            targets = [n.target] if isinstance(n, (ast.For, ast.AsyncFor, ast.NamedExpr)) else [i.optional_vars for i in n.items if i.optional_vars]
            for t in targets:
                for name in target_names(t):
                    out.setdefault(name, []).append(None)  # unknown value
    return out


def bind_arguments(fn: ast.AST, call: Optional[ast.Call]) -> Dict[str, list]:
    """``param -> [argument]`` of a call to ``fn`` (``self`` skipped for a method called as ``self.m(...)``)."""
    if call is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {}
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
        params = params[1:]
    out: Dict[str, list] = {}
    for name, arg in zip(params, call.args):
        if not isinstance(arg, ast.Starred):
            out[name] = [arg]
    for k in call.keywords:
        if k.arg is not None:
            out[k.arg] = [k.value]
    return out


def returns_of(fn: ast.AST) -> List[ast.expr]:
    """The values ``fn`` returns (nested functions left out)."""
    return [n.value for n in body_nodes(fn) if isinstance(n, ast.Return) and n.value is not None]


def target_names(t: ast.AST) -> List[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in target_names(e)]
    if isinstance(t, ast.Starred):
        return target_names(t.value)
    return []


def no_grad_with(stmt: ast.AST) -> bool:
    """``with torch.no_grad():`` / ``inference_mode()`` / ``set_grad_enabled(False)``."""
    for item in stmt.items:
        expr = item.context_expr
        name = terminal(expr)
        if name in _NO_GRAD_CONTEXTS:
            return True
        if name == "set_grad_enabled" and isinstance(expr, ast.Call) and expr.args:
            arg = expr.args[0]
            if isinstance(arg, ast.Constant) and arg.value is False:
                return True
    return False


def _local_defs(fn: ast.AST) -> Dict[str, ast.AST]:
    """The functions defined in ``fn``'s body (in loops and branches too, not in nested defs): its closures."""
    out: Dict[str, ast.AST] = {}
    pending = list(fn.body)
    while pending:
        stmt = pending.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(stmt.name, stmt)
            continue
        if isinstance(stmt, ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody"):
            pending.extend(getattr(stmt, field, None) or ())
        for h in getattr(stmt, "handlers", None) or ():
            pending.extend(h.body)
    return out


def _no_grad_function(fn: ast.AST) -> bool:
    return any(terminal(d) in _NO_GRAD_CONTEXTS for d in getattr(fn, "decorator_list", ()))


# ---------------------------------------------------------------------------
# Building the model
# ---------------------------------------------------------------------------
class _Builder:
    def __init__(self, module: Module):
        self.m = module
        self.pending: List[tuple] = []  # (node, scope, cls, after, closures) of every loop
        self.manual: set = set()  # ids of Lightning modules with manual optimization
        self.no_grad_callees: set = set()
        self.sum_candidates = _running_sum_lines(module.source)
        self.class_calls: List[int] = []
        self._bound = False  # whether the objects built from this module's classes are known

    def run(self) -> None:
        m = self.m
        m._mark_lines(_KEYWORDS)
        m._grad_lines = _lines_of(m.source, _find_all(m.source, (".grad",)))
        self._mark_sum_lines()
        for stmt in m.tree.body:  # helpers first, so that lines calling them count as interesting
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                m.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                m.classes[stmt.name] = stmt
        for cls in m.classes.values():
            m.methods[id(cls)] = self._class_methods(cls)
        self._mark_helper_calls()
        if self.sum_candidates:
            self._find_no_grad_callees()
        self._visit(m.tree.body, None, None, (), {}, False)
        for node, scope, cls, after, closures in self.pending:
            self._loop(node, scope, cls, after, closures)

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
        words = _lines_of(m.source, _find_all(m.source, ("reduction", "size_average")))
        if not words:
            return
        lines = set()
        for node in _walk_lines(m.tree, words):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _sums(node.value):
                m.sum_losses.update(terminal(t) for t in node.targets)
            if isinstance(node, ast.Call) and _sums(node):
                lines.add(node.lineno)
        m._sum_lines = sorted(lines)

    def _mark_helper_calls(self) -> None:
        """Lines that call a helper holding events are interesting too (to a fixed point);
        likewise for the lines that (through helpers) can reach a backward pass.

        The call sites of every name are found in one pass over the text, so the
        cost stays linear in the size of the file whatever the number of helpers.
        """
        m = self.m
        helpers = list(m.functions.items()) + [(n, f) for ms in m.methods.values() for n, f in ms.items()]
        m._backward_lines = _lines_of(m.source, _find_all(m.source, ("backward",)))
        if not helpers and not m.classes:
            return
        sites: Dict[str, List[int]] = {}
        names = {name for name, _ in helpers} | set(m.classes)
        for match in _CALL_SITE.finditer(m.source):
            name = match.group(1)
            if name in names:
                sites.setdefault(name, []).append(match.start())
        self.class_calls = _lines_of(m.source, [pos for name in m.classes for pos in sites.get(name, ())])
        callables = [c for c in m.classes.values() if "__call__" in m.methods.get(id(c), ())]
        if callables and self.class_calls:
            # `loss_scaler = NativeScaler()` ... `loss_scaler(loss, optimizer)`: the call runs __call__
            self._bound = True
            self._bind_instances()
            objects = {n: ms["__call__"] for n, ms in m.instances.items() if n.isidentifier() and "__call__" in ms}
            if objects:
                helpers += list(objects.items())
                for match in re.finditer(r"\b(%s)\s*\(" % "|".join(map(re.escape, objects)), m.source):
                    sites.setdefault(match.group(1), []).append(match.start())
        m._lines = _propagate(m, m._lines, helpers, sites)
        m._backward_lines = _propagate(m, m._backward_lines, helpers, sites)

    def _visit(self, stmts, scope, cls, after: tuple, closures: dict, no_grad: bool) -> None:
        m, candidates = self.m, self.sum_candidates
        for i, stmt in enumerate(stmts):
            hot = m.interesting(stmt)
            if not hot:
                if not _overlaps(candidates, stmt):
                    continue  # nothing on its lines can be an event
                if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                    if not no_grad:  # sums a loss and does nothing to .grad: an evaluation loop?
                        m.eval_loops.append((stmt, scope))
                    continue
            rest = (stmts[i + 1 :],) + after
            if isinstance(stmt, ast.ClassDef):
                if is_hf_trainer_class(stmt):
                    m.compute_losses += [(fn, stmt) for fn in stmt.body if getattr(fn, "name", None) == "compute_loss"]
                    continue  # the HF Trainer runs the loop
                manual = is_manual_lightning(stmt)
                if is_framework_class(stmt) and not manual:
                    continue  # Lightning automatic optimization, callbacks: the framework runs the loop
                m.methods.setdefault(id(stmt), methods_of(stmt))
                if manual:
                    self.manual.add(id(stmt))
                    step = methods_of(stmt).get("training_step")
                    if step is not None and m.interesting(step):
                        self.pending.append((step, step, stmt, (), {}))
                self._visit(stmt.body, None, stmt, (), {}, no_grad)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if is_framework_hook(stmt) and id(cls) not in self.manual:
                    continue
                local = _local_defs(stmt)
                if local:
                    self._mark_closure_calls(stmt, local)
                inner = {**closures, **local}
                fn_no_grad = no_grad or _no_grad_function(stmt) or stmt.name in self.no_grad_callees
                self._visit(stmt.body, stmt, cls, (), inner, fn_no_grad)
            else:
                if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                    self.pending.append((stmt, scope, cls, (stmt.orelse,) + rest, closures))
                inner_no_grad = no_grad or (isinstance(stmt, (ast.With, ast.AsyncWith)) and no_grad_with(stmt))
                bodies = [getattr(stmt, f, None) or [] for f in ("body", "orelse", "finalbody")]
                bodies += [h.body for h in getattr(stmt, "handlers", None) or []]
                bodies += [c.body for c in getattr(stmt, "cases", None) or []]
                if any(bodies):
                    for body in bodies:
                        self._visit(body, scope, cls, rest, closures, inner_no_grad)
                elif hot:
                    self._simple(stmt, scope, cls)

    def _mark_closure_calls(self, fn: ast.AST, local: Dict[str, ast.AST]) -> None:
        """Lines of ``fn`` calling one of its closures that holds events are interesting too
        (``def opt_step(): optimizer.step()`` ... ``opt_step()``)."""
        m = self.m
        hot = [name for name, f in local.items() if m.interesting(f)]
        if not hot:
            return
        lines = m.scope_text(fn)
        start = sum(len(line) + 1 for line in m._source_lines[: fn.lineno - 1])
        pattern = re.compile(r"\b(?:%s)\s*\(" % "|".join(map(re.escape, hot)))
        positions = [start + match.start() for match in pattern.finditer(lines)]
        m._add_positions(positions)
        if any(_overlaps(m._backward_lines, local[name]) for name in hot):
            m._backward_lines = sorted(set(m._backward_lines).union(_lines_of(m.source, positions)))

    def _find_no_grad_callees(self) -> None:
        """Names of functions called inside ``with torch.no_grad():`` (their loops need no no_grad of their own)."""
        for node in ast.walk(self.m.tree):
            if isinstance(node, (ast.With, ast.AsyncWith)) and no_grad_with(node):
                for inner in ast.walk(node):
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
                m.ctors.append((scope, cls, _moves_zero_gradients(ctor)))
            elif any(isinstance(n, ast.Call) and terminal(n.func) == "Accumulator" and "Accumulator" not in m.classes for n in ast.walk(value)):
                m.accumulators.update(text(t) for t in targets)  # `acc = gg.Accumulator(opt, 4) if accum else None` too
            elif isinstance(value, ast.Call) and terminal(value.func) == "optimizers":  # Lightning's self.optimizers()
                for t in targets:
                    for name in [t] + list(getattr(t, "elts", [])):
                        m.optimizer_names.add(text(name))
        for node in _walk_lines(stmt, m._lines):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr == "zero_grad" and keeps_zeros(node):
                m.zero_grads.append((node, scope, cls))
            elif node.func.attr == "backward" and _keyword_is(node, "create_graph", True):
                m.create_graphs.append((node, scope))
            elif optimizer_constructor(node) is not None and not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                m.ctors.append((scope, cls, _moves_zero_gradients(node)))

    def _bind_instances(self) -> None:
        """``wrapper = OptimWrapper(opt)`` / ``self.opt = OptimWrapper(...)`` with a class of this module."""
        m = self.m
        if not self.class_calls:
            return
        for node in _walk_lines(m.tree, self.class_calls):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
                cls = m.classes.get(node.value.func.id)
                if cls is None or any(terminal(b).endswith(("Optimizer", "Module")) for b in cls.bases):
                    continue  # a torch optimizer or module subclass: its step/zero_grad are the real ones
                for t in node.targets:
                    m.instances[text(t)] = m.methods.get(id(cls)) or methods_of(cls)

    def _loop(self, node, scope, cls, after, closures) -> None:
        m = self.m
        if not (_overlaps(m._backward_lines, node) or (scope is not None and _overlaps(m._backward_lines, scope))):
            return  # no backward pass can run in it (directly, through helpers or closures): no rule applies
        if not self._bound:
            self._bound = True
            self._bind_instances()
        functions = {**m.functions, **closures} if closures else m.functions
        # `self.run_step()` in a base class's loop runs the override of the object's class:
        # the loop is followed once for the class and once for each subclass of this module
        for concrete in [cls] + self._subclasses(cls) if cls is not None else [None]:
            methods = m.methods.get(id(concrete), {}) if concrete is not None else {}
            walker = Walker(
                m.interesting, functions, methods, frozenset(m.optimizer_names), m.instances, m.mentions_grad,
                self._object_methods(), frozenset(m.accumulators),
            )
            try:
                paths = walker.iteration_paths(node)
            except TooComplex as exc:
                m.skip(node, str(exc))
                return
            except RecursionError:
                m.skip(node, "nested too deeply to follow")
                return
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


def build(tree: ast.Module, source: str, filename: str) -> Module:
    """The model of one parsed module (``source`` with ``\\n`` line ends, as the parser counts lines).

    >>> src = "for x in data:\\n    model(x).backward()\\n    opt.step()\\n"
    >>> model = build(ast.parse(src), src, "t.py")
    >>> [[e.kind for e in p.events] for p in model.loops[0].paths]
    [['backward', 'step']]
    """
    module = Module(tree, source, filename)
    _Builder(module).run()
    return module


def _propagate(m: "Module", lines: List[int], helpers, sites: Dict[str, List[int]]) -> List[int]:
    """``lines`` plus the call sites of every helper that overlaps them, to a fixed point (4 rounds)."""
    marked: set = set()
    for _ in range(4):
        fresh = {name for name, fn in helpers if name not in marked and name in sites and _overlaps(lines, fn)}
        if not fresh:
            break
        marked |= fresh
        lines = sorted(set(lines).union(_lines_of(m.source, [pos for name in fresh for pos in sites[name]])))
    return lines


def _walk_lines(node: ast.AST, lines: List[int]) -> Iterator[ast.AST]:
    """``ast.walk`` that enters only the nodes whose lines include one of ``lines``."""
    pending = [node]
    while pending:
        n = pending.pop()
        yield n
        pending.extend(c for c in ast.iter_child_nodes(n) if not hasattr(c, "lineno") or _overlaps(lines, c))


def _find_all(source: str, words) -> List[int]:
    hits = []
    for word in words:
        pos = source.find(word)
        while pos != -1:
            hits.append(pos)
            pos = source.find(word, pos + len(word))
    return hits


def _lines_of(source: str, positions) -> List[int]:
    """The (sorted, distinct) line numbers of character positions, in one pass."""
    out, line, last = [], 1, 0
    for pos in sorted(positions):
        line += source.count("\n", last, pos)
        last = pos
        if not out or out[-1] != line:
            out.append(line)
    return out


def _running_sum_lines(source: str) -> List[int]:
    """Lines that add a loss into a running total (``total += loss``): candidate evaluation loops."""
    hits = []
    for pos in _find_all(source, ("+=",)):
        start = source.rfind("\n", 0, pos) + 1
        end = source.find("\n", pos)
        if "loss" in source[start : end if end != -1 else len(source)]:
            hits.append(pos)
    return _lines_of(source, hits)
