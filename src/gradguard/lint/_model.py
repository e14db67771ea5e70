"""The program model: built once per file, read by every rule.

:func:`._builder.build` walks a parsed module once and records what the rules need:

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
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from ._ast import assignments, bind_arguments, bound_values, body_nodes, child_nodes, find_all, lines_of, methods_of, nodes_of, overlaps, parse_expr, returns_of, subtree, target_names, terminal, text
from ._events import BACKWARD, CLEAR, MANAGED, MAYBE_CLEAR, PARTIAL, READ, SCALE, STEP, Event, classify_call, classify_statement, is_optimizer_name, managed_call
from ._flow import Path
from ._project import Project

#: What a single assignment target can be (besides a tuple or list of them).
_TARGETS = (ast.Name, ast.Attribute, ast.Subscript)


class ScopeFacts(NamedTuple):
    """``bound``: name -> the values of its plain assignments in a scope (None where an unpacking
    hides the value, :func:`~._ast.bound_values`); ``checks``: the
    ``(test, negated)`` of its ``assert test`` (False) and ``if test: raise`` (True); ``names``:
    how often each name occurs."""

    bound: Dict[str, list]
    checks: List[Tuple[ast.expr, bool]]
    names: Dict[str, int]  # name -> how many times it is written or read in the scope


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


# Names that say "accumulation window" in a condition or a micro-batch loop.
ACCUM_NAME = re.compile(r"accum|micro|sync_grad", re.IGNORECASE)


# Attributes holding a framework's per-iteration state (``accelerator.sync_gradients``,
# ``trainer.is_last_batch``): they change between iterations without an assignment in view.
_STATE_ATTR = re.compile(r"sync|last|boundary|is_end|should_|finished|done", re.I)


# ---------------------------------------------------------------------------
# Path helpers shared by the rules
# ---------------------------------------------------------------------------
def first(path: Path, kind: str) -> Optional[Event]:
    return next((e for e in path.events if e.kind == kind), None)


def tests(event: Event) -> list:
    """The ``if`` tests (and match cases) around an event, nested loops left out."""
    return [entry for entry in event.stack if entry[0] != "loop"]


def describe(event: Event, what: str) -> str:
    return f"`{event.target}.{what}()`" if event.target and event.target != "<manual>" else f"`{what}()`"


def is_boundary_test(test: ast.expr) -> bool:
    """A test that can decide an accumulation window: a modulo, or a name saying so."""
    # kept on the node: every path through a loop asks about the same tests
    found = test.__dict__.get("_gg_boundary")
    if found is None:
        found = test.__dict__["_gg_boundary"] = any(
            isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
            or isinstance(node, (ast.Name, ast.Attribute)) and bool(ACCUM_NAME.search(terminal(node)))
            for node in subtree(test))
    return found


def backward_tensor(call: ast.AST) -> Optional[ast.expr]:
    """The tensor a backward call differentiates: ``loss`` in ``loss.backward()``,
    ``torch.autograd.backward(loss)`` or ``accelerator.backward(loss)``."""
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    recv = func.value if isinstance(func, ast.Attribute) else None
    if recv is None or func.attr == "manual_backward" or call.args and not _is_tensor_receiver(recv):
        return call.args[0] if call.args else None
    if not call.args and call.keywords and not _is_tensor_receiver(recv):
        # `booster.backward(loss=loss / K, optimizer=opt)`: the first argument, given by keyword
        return next((k.value for k in call.keywords if k.arg and not isinstance(k.value, ast.Constant)), None)
    return recv


def _is_tensor_receiver(recv: ast.AST) -> bool:
    """``loss`` of ``loss.backward(gradient)`` rather than ``accelerator`` of ``accelerator.backward(loss)``."""
    if text(recv) in ("torch.autograd", "autograd"):
        return False
    from ._events import _FRAMEWORK_RECEIVER

    return not _FRAMEWORK_RECEIVER.search(terminal(recv))


def steps_after(loop: "Loop") -> bool:
    """A step of an optimizer after the loop: ``opt.step()`` / ``scaler.step(opt)`` of an object
    the model knows as an optimizer, a gradguard Accumulator's ``step()``/``flush()``, a call of
    a function or method of this module (or of an object built from one of its classes) whose
    body steps, or a call of unknown code handed a known optimizer. A per-epoch
    ``scheduler.step()`` steps no optimizer, and a name with "step" or "flush" in it proves
    nothing by itself; only ``self.<method>()`` that no class of this module defines (inherited
    from code we cannot see) still counts when its name says ``step``/``flush`` (the last
    resort listed in docs/rules.md)."""
    module = loop.module
    optimizers = frozenset(module.optimizer_names)
    seen = set()

    def steps(call: ast.Call, depth: int, caller: bool = False) -> bool:
        found = classify_call(call, optimizers)
        if found is not None and found[0] == STEP or managed_call(call, frozenset(module.accumulators), module.unbound) is not None:
            return True
        func = call.func
        helper = None
        if isinstance(func, ast.Name):
            helper = loop.functions.get(func.id) or module.functions.get(func.id)
            methods = module.instances.get(func.id)
            helper = helper or (methods or {}).get("__call__")
        elif isinstance(func, ast.Attribute):
            recv = text(func.value)
            if recv == "self":
                helper = loop.methods.get(func.attr) or next((ms[func.attr] for ms in module.methods.values() if func.attr in ms), None)
                if helper is None:
                    return bool(re.search(r"step|flush", func.attr, re.I))
            elif recv in module.instances:
                helper = module.instances[recv].get(func.attr)
        if helper is not None:
            if any(_back_propagates(st) for st in helper.body):
                # a helper with backward passes of its own (the next training phase, the same
                # function called again): its steps apply its own passes, and the loop's
                # unstepped ones are wiped or folded into its first window
                return False
            if depth < 3 and id(helper) not in seen:
                seen.add(id(helper))
                return scan(helper.body, depth + 1, caller)
            return False
        if caller:
            # one call up, the loop's optimizer has the caller's name (an argument, a fresh
            # optimizer for the next phase): handing some optimizer to unknown code there
            # (`get_scheduler(optimizer=new_opt)`) proves no step of the loop's gradients
            return False
        # unknown code handed an optimizer (`finish_window(optimizer)`) may step it
        return any(text(a) in optimizers or is_optimizer_name(a, optimizers) for a in list(call.args) + [k.value for k in call.keywords])

    def scan(stmts, depth, caller: bool = False) -> bool:
        for stmt in stmts:
            for node in subtree(stmt):
                if isinstance(node, ast.Call) and steps(node, depth, caller):
                    return True
                if isinstance(node, ast.AugAssign):
                    found = classify_statement(node)
                    if found is not None and found[0] == STEP:
                        return True
        return False

    own = len(loop.after)
    return any(scan(stmts, 0, i >= own) for i, stmts in enumerate(after_with_callers(loop)))


def _back_propagates(stmt: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
        for n in subtree(stmt)
    )


def after_with_callers(loop: "Loop") -> list:
    """The statements after the loop (``loop.after``), and, when the loop ends a function of this
    module, those after each call of that function in its block (``self.forward_backward(batch)``
    then ``self.opt.step()`` in the caller): what runs next, one call level up."""
    fn = loop.scope
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return list(loop.after)
    cache = loop.module.__dict__.setdefault("_caller_continuations", {})
    if id(fn) not in cache:
        cache[id(fn)] = _continuations(loop.module.tree, fn, loop.cls is not None)
    return list(loop.after) + cache[id(fn)]


def _continuations(tree: ast.AST, fn: ast.AST, method: bool) -> list:
    # every function's continuations found in one pass over the module, kept on it: a pass per
    # function made the time grow with the square of a file of many training functions
    key = "_gg_continuations_method" if method else "_gg_continuations"
    index = tree.__dict__.get(key)
    if index is None:
        index = tree.__dict__[key] = {}
        names: Dict[int, frozenset] = {}  # id of a statement -> the names it calls (nested ones included)
        # (only statements, handlers and match cases hold blocks; ast.walk's order, so each name's list too)
        for node in nodes_of(tree, (ast.stmt, ast.excepthandler, ast.match_case, ast.mod)):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if not isinstance(block, list):
                    continue
                for i, stmt in enumerate(block):
                    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        continue
                    for name in _called_names(stmt, method, names):
                        index.setdefault(name, []).append(block[i + 1:])
    return [list(after) for after in index.get(fn.name, [])]


_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_BLOCK_NODES = (ast.stmt, ast.excepthandler, ast.match_case)


def _block_children(node: ast.AST) -> List[ast.AST]:
    """The statements, exception handlers and match cases directly under ``node`` (no expression)."""
    return [c for c in child_nodes(node) if isinstance(c, _BLOCK_NODES)]


def _called_names(stmt: ast.AST, method: bool, memo: Dict[int, frozenset]) -> frozenset:
    """The names :func:`_called` gives for the calls of ``stmt`` (``body_nodes``' walk: nested functions,
    classes and lambdas left out), a compound statement's from those of the statements it holds (kept in
    ``memo``: each statement is read once however deep it is nested)."""
    found = memo.get(id(stmt))
    if found is None:
        out, pending = set(), []
        for c in child_nodes(stmt):
            if isinstance(c, _NESTED_SCOPES):
                continue
            if isinstance(c, _BLOCK_NODES):
                out |= _called_names(c, method, memo)
            else:
                pending.append(c)
        while pending:  # an expression (or a keyword, a comprehension...): statements are never inside
            n = pending.pop()
            if isinstance(n, ast.Call):
                name = _called(n, method)
                if name is not None:
                    out.add(name)
            pending += [c for c in child_nodes(n) if not isinstance(c, _NESTED_SCOPES)]
        found = memo[id(stmt)] = frozenset(out)
    return found


def _called(call: ast.Call, method: bool) -> Optional[str]:
    """The function ``call`` calls: ``NAME`` of ``self.NAME(...)`` for a method, of ``NAME(...)`` else."""
    func = call.func
    if method:
        ok = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
        return func.attr if ok else None
    return func.id if isinstance(func, ast.Name) else None


def scales_after(loop: "Loop") -> bool:
    """A rescaling of ``.grad`` (:data:`~._events.SCALE`) in the statements after the loop, in
    them or in a helper of this module they call (a micro-step loop whose window is averaged on
    its gradients before the step)."""
    module = loop.module
    seen = set()

    def scan(stmts, depth) -> bool:
        for stmt in stmts:
            for node in subtree(stmt):
                if isinstance(node, ast.stmt):
                    found = classify_statement(node)
                    if found is not None and found[0] == SCALE:
                        return True
                if isinstance(node, ast.Call):
                    found = classify_call(node)
                    if found is not None and found[0] == SCALE:
                        return True
                    helper = loop.callee(node) or (module.functions.get(node.func.id) if isinstance(node.func, ast.Name) else None)
                    if helper is not None and depth < 3 and id(helper) not in seen:
                        seen.add(id(helper))
                        if scan(helper.body, depth + 1):
                            return True
        return False

    return any(scan(stmts, 0) for stmts in after_with_callers(loop))


def micro_batches_of(loop_node: ast.AST, scope: Optional[ast.AST] = None) -> Optional[tuple]:
    """``(K,)`` for a loop over ``range(K)``, ``(None,)`` for one over a batch split into
    pieces (``x.chunk(K)``, ``torch.split(x, n)``, ``x.split(n)``: K known only at run time,
    unless ``chunk(K)`` says it), None for any other loop: the structure of the loop, not its
    names, says that it runs the micro-batches of one window. The pieces may be bound first to
    a name assigned once in ``scope`` (the loop's function), kept in a ``list``/``tuple``, or be
    a tuple batch's tensors each split alike and zipped (``zip(*(t.split(n) for t in batch))``)."""
    if not isinstance(loop_node, (ast.For, ast.AsyncFor)):
        return None
    it = loop_node.iter
    if isinstance(it, ast.Call) and terminal(it.func) in ("enumerate", "zip") and it.args:
        it = it.args[0]
    if isinstance(it, ast.Name) and scope is not None and hasattr(scope, "body"):
        values = assignments(scope).get(it.id, ())
        it = values[0] if len(values) == 1 and isinstance(values[0], ast.AST) else it
    it = _pieces(it)
    if not isinstance(it, ast.Call):
        return None
    name = terminal(it.func)
    if isinstance(it.func, ast.Name) and name == "range" and len(it.args) == 1:
        return (it.args[0],)
    if isinstance(it.func, ast.Name) and name == "range" and len(it.args) == 3 and _slices_from(loop_node):
        return (None,)  # `for i in range(0, n, m): x[i : i + m]`: the batch in slices, K = n / m at run time
    if name == "chunk" and it.args:
        return (it.args[-1],) if isinstance(it.func, ast.Attribute) and len(it.args) == 1 else (None,)
    if name in ("split", "tensor_split") and it.args and (isinstance(it.func, ast.Attribute) or text(it.func).startswith("torch.")):
        return (None,)
    return None


def _pieces(it: ast.AST) -> ast.AST:
    """What a bound sequence of micro-batches is made of: ``list(x)``/``tuple(x)`` is ``x``;
    ``zip(*(t.split(n) for t in batch))`` (each tensor of a tuple batch split alike, the pieces
    zipped into micro-batch tuples) is the split."""
    for _ in range(3):
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("list", "tuple") \
                and len(it.args) == 1 and not it.keywords:
            it = it.args[0]
        elif (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "zip" and len(it.args) == 1
              and isinstance(it.args[0], ast.Starred) and isinstance(it.args[0].value, (ast.GeneratorExp, ast.ListComp))
              and len(it.args[0].value.generators) == 1):
            elt, gen = it.args[0].value.elt, it.args[0].value.generators[0]
            # the element splits the comprehension's own variable: every tensor cut the same way
            if isinstance(gen.target, ast.Name) and isinstance(elt, ast.Call) and isinstance(elt.func, ast.Attribute) \
                    and isinstance(elt.func.value, ast.Name) and elt.func.value.id == gen.target.id:
                it = elt
            else:
                return it
        else:
            return it
    return it


def _slices_from(loop_node: ast.AST) -> bool:
    """The loop's variable is where a slice of the body starts (``batch[i : i + m]``)."""
    var = loop_node.target.id if isinstance(loop_node.target, ast.Name) else None
    return var is not None and any(
        isinstance(n, ast.Slice) and isinstance(n.lower, ast.Name) and n.lower.id == var for n in body_nodes(loop_node))


def _window_slice(node: ast.AST, loop_node: ast.AST) -> bool:
    """``batches[s:s + k]``, or a name the enclosing loop binds to one: a window of the data."""
    if isinstance(node, ast.Name):
        values = assignments(loop_node).get(node.id, ())
        return len(values) == 1 and isinstance(values[0], ast.Subscript) and isinstance(values[0].slice, ast.Slice)
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------
def says_divides(test: ast.expr, k: ast.expr, negated: bool) -> bool:
    """``X % K == 0`` (or, ``negated``, ``X % K != 0`` / ``X % K``)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return says_divides(test.operand, k, not negated)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not negated:
        return any(says_divides(v, k, negated) for v in test.values)
    mod = test.left if isinstance(test, ast.Compare) else test
    if not (isinstance(mod, ast.BinOp) and isinstance(mod.op, ast.Mod) and ast.dump(mod.right) == ast.dump(k)):
        return False
    if not isinstance(test, ast.Compare):
        return negated  # `if n % K: raise`
    zero = len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 0
    return zero and isinstance(test.ops[0], ast.NotEq if negated else ast.Eq)


class Loop:
    """One training loop: its iteration paths and the module around it.

    ``kind`` is ``"for"``, ``"while"`` or ``"training_step"`` (Lightning manual
    optimization: Lightning calls it once per batch, so its body is one iteration).
    ``accumulate`` is True inside ``with accelerator.accumulate(model):``.
    ``per_call`` is True for a function taken for one update of a loop the file does not show
    (:mod:`._per_call`): only the rules that mark themselves ``PER_CALL`` read it.
    """

    per_call = False

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
        node = parse_expr(target)
        return node is not None and is_optimizer_name(node, self.module.optimizer_names)

    def _visible_optimizers(self) -> Dict[str, List[str]]:
        """Optimizer -> every module it lists, for the optimizers this loop can see: built in its
        function, at module level, or in a method of its class (``self.opt`` in ``__init__``).
        An optimizer of the same name built in another function is another object."""
        cached = getattr(self, "_visible", None)
        if cached is None:
            scopes = {id(self.scope), id(None), id(self.module.tree)}
            if isinstance(self.cls, ast.ClassDef):
                scopes |= {id(s) for s in self.cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
            cached = self._visible = {}
            for (scope, name), modules in self.module.optimizer_modules.items():
                if scope in scopes and modules:
                    # the loop's own function first: its binding hides the others of that name
                    if name not in cached or scope == id(self.scope):
                        cached[name] = modules
        return cached

    def optimizer_model(self, target: str) -> Optional[str]:
        """The module whose parameters the optimizer ``target`` holds, as this loop writes it:
        ``self.optD`` built over ``self.discriminator.parameters()`` in ``__init__`` is
        ``gan.optD`` over ``gan.discriminator`` when the loop calls ``gan.step()``."""
        visible = self._visible_optimizers().get(target)
        if visible:
            return visible[0]
        models = self.module.optimizer_models
        if target in models:
            return models[target]
        head, _, rest = target.partition(".")
        model = models.get("self." + rest) if rest and head in self.module.instances else None
        return head + model[len("self"):] if model is not None and model.startswith("self.") else model

    def related(self, clear: Event, step: Event) -> bool:
        """Whether ``clear`` wipes the gradients that ``step`` reads (same optimizer or its module)."""
        if clear.target and (clear.target == step.target or step.target.startswith(clear.target + ".")):
            return True
        model = self.optimizer_model(step.target)
        if model is not None and clear.target:
            # `self.opt = SGD(model.parameters())` in __init__ holds `self.model` (`self.model = model`)
            return clear.target == model or clear.target == "self." + model
        # one optimizer and one cleared object (not a submodule such as model.encoder)
        return self._single and re.fullmatch(r"(?:self\.)?\w+", clear.target) is not None

    def may_clear_for(self, clear: Event, step: Event) -> bool:
        """Whether ``clear`` could clear what ``step`` reads (False only when it surely clears
        another optimizer: ``optD.zero_grad()`` never clears ``optG``'s parameters)."""
        hands = getattr(clear.node, "gg_hands", None)
        if (clear.kind == MAYBE_CLEAR and hands is not None and hands != step.target and step.target not in ("", "<manual>")
                and hands in {e.target for e in self.steps} and not self.related(clear, step)):
            return False  # an unseen function handed another optimizer this loop steps may clear only that one
        if clear.kind == MAYBE_CLEAR or clear.target in (PARTIAL, "") or step.target in ("", "<manual>"):
            return True
        if self.related(clear, step) or clear.target.rsplit(".", 1)[-1] == step.target.rsplit(".", 1)[-1]:
            return True
        if self.is_optimizer(clear.target) and self.is_optimizer(step.target):
            # two optimizers stepped here: clearing one leaves the other's .grad (one optimizer
            # and a differently written clearing may be the same object under two names)
            return clear.target not in {e.target for e in self.steps}
        model = self.optimizer_model(step.target)
        if clear.target in self._visible_optimizers().get(step.target, ()):
            return True  # SGD(list(enc.parameters()) + list(dec.parameters())): enc.zero_grad() clears a part
        # the modules of the optimizers this loop can see (never a same-named one of another function)
        others = {m for mods in self._visible_optimizers().values() for m in mods[:1]}
        others |= {self.optimizer_model(s.target) for s in self.steps}
        # (`self.oc = SGD(critic.parameters())` in __init__ holds `self.critic`, as in related())
        if model is not None and (clear.target in others or clear.target in {"self." + m for m in others if m}):
            return False  # netD.zero_grad() does not clear netG, the model of optG
        return True

    def boundary(self, test: ast.expr) -> bool:
        """:func:`is_boundary_test`, with names the loop assigns followed
        (``last_of_window = (i + 1) % accum == 0`` ... ``if last_of_window:``)."""
        if is_boundary_test(test):
            return True
        names = {n.id for n in subtree(test) if isinstance(n, ast.Name)}
        assigns = self.assignments()
        if any(isinstance(v, ast.AST) and is_boundary_test(v) for name in names for v in assigns.get(name, ())):
            return True
        return any(self.window_counter(name) for name in names)

    def window_counter(self, name: str) -> bool:
        """A counter of micro-batches, by what the loop does with it: it grows (``c += 1``) and is
        set back to a constant (``c = 0``) in the same iteration's branches. A test on it
        (``if c == k:``, ``if c == 0:``) decides a window, whatever the name."""
        if self.per_call:
            return False  # a function's locals start afresh at each call: none counts across calls
        values = self.assignments().get(name, ())
        grows = any(isinstance(v, tuple) and isinstance(v[1], ast.Add) for v in values)
        resets = any(isinstance(v, ast.Constant) for v in values)
        return grows and resets

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
                names = {n.id for n in subtree(test) if isinstance(n, ast.Name)}
                for expr in [test] + [v for name in names for v in assigns.get(name, ()) if isinstance(v, ast.AST)]:
                    for n in subtree(expr):
                        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                            return n.right
        if self.window_paths():
            # the step's guard compares a counter of micro-batches the loop grows and sets back
            # with K (`if c == K: step`)
            for step in self.steps:
                for test, taken in tests(step):
                    # `if c == K or i + 1 == len(data):` closes a window at K too (and the remainder)
                    parts = test.values if taken is True and isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
                    for part in parts:
                        if (taken is True and isinstance(part, ast.Compare) and len(part.ops) == 1
                                and isinstance(part.ops[0], (ast.Eq, ast.GtE)) and isinstance(part.left, ast.Name)
                                and self.window_counter(part.left.id)):
                            return part.comparators[0]
        return self.micro_window()

    def _micro_loop(self) -> Optional[ast.AST]:
        """A micro-step loop (:func:`micro_batches_of`) back-propagating with the step after it:
        this loop itself (its step after it), or a nested loop of this one that does not step,
        followed on a path of this loop by a step."""
        if self.kind == "for" and not self.steps and micro_batches_of(self.node, self.scope) is not None and steps_after(self):
            return self.node
        stepping = {entry[1] for e in self.steps for entry in e.stack if entry[0] == "loop"}
        for n in body_nodes(self.node):
            if not isinstance(n, (ast.For, ast.AsyncFor)) or id(n) in stepping:
                continue
            if micro_batches_of(n, self.scope) is None:
                it = n.iter.args[0] if isinstance(n.iter, ast.Call) and terminal(n.iter.func) == "enumerate" and n.iter.args else n.iter
                if not _window_slice(it, self.node):
                    continue  # `for task in tasks:` sums losses of different kinds: no window of micro-batches
            mark = ("loop", id(n))
            for p in self.complete:
                inside = [i for i, e in enumerate(p.events) if e.kind == BACKWARD and mark in e.stack]
                if inside and any(e.kind == STEP and mark not in e.stack for e in p.events[inside[-1] + 1 :]):
                    return n
        return None

    def micro_window(self) -> Optional[ast.expr]:
        """K of the micro-step loop (``range(K)``, ``x.chunk(K)``), None where unknown."""
        micro = self._micro_loop()
        size = micro_batches_of(micro, self.scope) if micro is not None else None
        if size is None and micro is not None and micro is not self.node:
            # `for x in batches[s : s + K]` (or a name this loop binds to that slice): K of the slice
            it = micro.iter.args[0] if isinstance(micro.iter, ast.Call) and terminal(micro.iter.func) == "enumerate" and micro.iter.args else micro.iter
            if isinstance(it, ast.Name):
                values = assignments(self.node).get(it.id, ())
                it = values[0] if len(values) == 1 else None
            part = it.slice if isinstance(it, ast.Subscript) else None
            if isinstance(part, ast.Slice) and part.lower is not None and isinstance(part.upper, ast.BinOp) and isinstance(part.upper.op, ast.Add):
                if ast.dump(part.upper.left) == ast.dump(part.lower):
                    return part.upper.right
                if ast.dump(part.upper.right) == ast.dump(part.lower):
                    return part.upper.left
        return size[0] if size is not None else None

    def scaled_on_gradients(self) -> bool:
        """The window is rescaled on ``.grad`` (in the loop, its helpers, or after a micro-step
        loop that is this loop): the pass weights are set there, not only by the loss's divisor."""
        return any(e.kind == SCALE for e in self.events) or (self.kind == "for" and not self.steps and scales_after(self))

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

    def lambdas_of(self, call: ast.AST) -> List[ast.Lambda]:
        """The lambdas a call by name runs: ``loss_fn(out, y)`` where every binding of ``loss_fn`` in the
        loop's function (or, for a loop at module level, the module) is ``loss_fn = lambda ...:``; empty
        for any other call (a name bound otherwise too, a function of the file, a parameter)."""
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.func.id in self.functions:
            return []
        cached = self.__dict__.get("_scope_assigns")
        if cached is None:
            scope = self.scope if self.scope is not None else self.module.tree
            cached = self._scope_assigns = assignments(scope) if hasattr(scope, "body") else {}
        values = cached.get(call.func.id) or []
        return values if values and all(isinstance(v, ast.Lambda) for v in values) else []

    def returned_element(self, expr: ast.AST):
        """``f(...)[i]`` of a helper or closure ``f`` that returns tuples (``loss, result = f()``
        reads as ``f()[i]``, see ``assignments``): ``(f, [the i-th element of each tuple it
        returns])``; None when ``f`` is no such helper or one of its returns is no tuple."""
        index = expr.slice if isinstance(expr, ast.Subscript) else None
        if not (isinstance(index, ast.Constant) and type(index.value) is int and index.value >= 0):
            return None
        helper = self.callee(expr.value)
        values = returns_of(helper) if helper is not None else []
        i = index.value
        # a return that hands on another call's result (`return self.model(x, y)` beside
        # `return logits, loss, None`) holds that call's i-th element: read as `call(...)[i]`
        if not values or not any(isinstance(v, ast.Tuple) for v in values) or not all(
                isinstance(v, ast.Tuple) and len(v.elts) > i or isinstance(v, ast.Call) for v in values):
            return None
        return helper, [v.elts[i] if isinstance(v, ast.Tuple)
                        else ast.copy_location(ast.Subscript(v, ast.copy_location(ast.Constant(i), v), ast.Load()), v)
                        for v in values]

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
        for n in subtree(test):
            if isinstance(n, (ast.Call, ast.NamedExpr, ast.Await)) or isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                return True
            if isinstance(n, ast.Name) and (n.id in assigned or n.id in targets):
                return True
            if isinstance(n, ast.Attribute) and (_STATE_ATTR.search(n.attr) or n.attr in self.module.mutated_attrs()
                                                 and not self._set_before(n.attr) and self._set_during(n)):
                return True
        return False

    def _set_during(self, node: ast.Attribute) -> bool:
        """Some code an iteration of the loop may run can set ``node`` (``self.accum_count``, ``args.k``): the
        loop itself (its iterable included: a generator of the file resumes between iterations), a function
        or method of the file its calls may reach (transitively), or code the file does not show that could
        (a method of ``self`` defined nowhere in the file, a call handed ``self``, or handed the object the
        attribute is read from, other than a function of the file). Always True for a function called once
        per update by a loop the file does not show (what runs between two calls is unknown)."""
        attr, root = node.attr, node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        key = text(node)
        memo = self.__dict__.setdefault("_set_during_memo", {})
        if key not in memo:
            region = self._iteration_region()
            name = root.id if isinstance(root, ast.Name) else None
            memo[key] = region is None or name is None or any(
                isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.ctx, (ast.Store, ast.Del))
                or isinstance(t, ast.Call) and self.callee(t) is None and any(
                    isinstance(a, ast.Name) and a.id == name for a in [*t.args, *(k.value for k in t.keywords)])
                for fn in region for t in subtree(fn))
        return memo[key]

    def _iteration_region(self) -> Optional[List[ast.AST]]:
        """The loop and the functions of the file an iteration may run; None where some call may run code
        the file does not show that could set an attribute of ``self``."""
        if "_region" in self.__dict__:
            return self._region
        region: Optional[List[ast.AST]] = None
        if self.kind != "training_step" and "setattr" not in self.module.source:
            held = self.module.__dict__.get("_self_attrs")
            if held is None:  # attributes of ``self`` bound to an object somewhere (``self.model = ...``)
                held = self.module._self_attrs = frozenset(
                    t.attr for t in subtree(self.module.tree) if isinstance(t, ast.Attribute)
                    and isinstance(t.ctx, ast.Store) and isinstance(t.value, ast.Name) and t.value.id == "self")
            region, seen, todo = [self.node], {id(self.node)}, [self.node]
            while todo and region is not None:
                for call in subtree(todo.pop()):
                    if not isinstance(call, ast.Call):
                        continue
                    if any(isinstance(a, ast.Name) and a.id == "self" for a in
                           [*call.args, *(k.value for k in call.keywords)]):
                        region = None  # ``self`` handed to code that may set its attributes
                        break
                    fn = self.callee(call)
                    func = call.func
                    if fn is None and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                            and func.value.id == "self" and func.attr not in held:
                        region = None  # an inherited method the file does not show
                        break
                    # a method called through another object (`self.helper.bump()`): every method of the
                    # file's classes by that name may run
                    reached = [fn] if fn is not None else [
                        m for methods in self.module.methods.values() for m_name, m in methods.items()
                        if isinstance(func, ast.Attribute) and m_name == func.attr]
                    for fn in reached:
                        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(fn) not in seen:
                            seen.add(id(fn))
                            region.append(fn)
                            todo.append(fn)
        self._region = region
        return region

    def _set_before(self, attr: str) -> bool:
        """Every write of ``.attr`` outside ``__init__`` is a statement of the function holding the loop,
        above the loop and outside it (``args.fp16 = args.fp16 or args.amp`` at the top of ``main()``):
        no code that runs during the loop changes it."""
        if not isinstance(self.scope, (ast.FunctionDef, ast.AsyncFunctionDef)) or "setattr" in self.module.source:
            return False

        def writes(nodes) -> list:
            return [n for n in nodes if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                    and any(isinstance(e, ast.Attribute) and e.attr == attr
                            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) for e in subtree(t))]

        cache = self.module.__dict__.setdefault("_attr_writes", {})
        if attr not in cache:
            inits = [f for f in nodes_of(self.module.tree, (ast.FunctionDef, ast.AsyncFunctionDef))
                     if f.name in ("__init__", "setup", "__post_init__")]
            cache[attr] = ({id(w) for w in writes(nodes_of(self.module.tree, (ast.Assign, ast.AugAssign, ast.AnnAssign)))}
                           - {id(w) for f in inits for w in writes(subtree(f))})
        elsewhere = cache[attr]
        here = writes(body_nodes(self.scope))
        loop_span = (self.node.lineno, self.node.end_lineno)
        return elsewhere <= {id(w) for w in here} and all(w.end_lineno < loop_span[0] for w in here)

    def fixed_for_run(self, test: ast.expr) -> bool:
        """A flag fixed for the whole loop (:meth:`varies` is False) that no helper parameter
        feeds: ``if use_amp: scaler.step(opt) else: opt.step()`` is one step, taken one way for
        the whole run. A helper's parameter (``last`` bound to ``i == len(loader) - 1`` at each
        call) is not assigned in the loop, yet varies with the call."""
        if self.varies(test):
            return False
        params = getattr(self, "_helper_params", None)
        if params is None:
            params = self._helper_params = {
                a.arg for e in self.events for fn, _ in e.frame
                for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs, fn.args.vararg, fn.args.kwarg)
                if a is not None
            }
        return not any(isinstance(n, ast.Name) and n.id in params for n in subtree(test))

    def proves_whole_windows(self, k: ast.expr) -> bool:
        """The function (or a helper holding the step) checks that the number of micro-batches
        divides by ``k``: ``assert len(loader) % K == 0`` or ``if len(loader) % K: raise ...``."""
        scopes = [self.scope] + [fn for e in self.steps for fn, _ in e.frame]  # a helper may hold the window loop
        return any(
            says_divides(test, k, negated) for scope in scopes for test, negated in self.module.scope_facts(scope).checks
        )

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
        self.project = Project()  # the checker sets the index of the files linted together
        self.functions: Dict[str, ast.AST] = {}
        #: functions imported by name and called: another linted file's function, or None where the
        #: linted tree does not hold it (see ``_cross_file._bind_imported_functions``)
        self.imported_functions: Dict[str, Optional[ast.AST]] = {}
        self.classes: Dict[str, ast.ClassDef] = {}
        self.methods: Dict[int, Dict[str, ast.AST]] = {}
        self.instances: Dict[str, Dict[str, ast.AST]] = {}
        self.optimizer_names: set = set()
        #: each optimizer name -> whether every constructor bound to it builds one that evaluates the closure
        #: handed to its ``step`` more than once per step (torch's ``LBFGS``, unless limited to one evaluation)
        self.closure_evaluations: Dict[str, bool] = {}
        self.accumulators: set = set()  # names bound to gradguard.Accumulator(...)
        self.accumulator_calls: Dict[str, list] = {}  # each of those names -> [(scope, its Accumulator(...) call)]
        self.optimizer_models: Dict[str, str] = {}  # optimizer -> the (first) module whose parameters it holds
        self.optimizer_modules: Dict[tuple, List[str]] = {}  # (id of its scope, optimizer) -> every module it lists
        self.sum_losses: set = set()  # names of loss objects built with reduction="sum"
        self.loops: List[Loop] = []
        self.eval_loops: List[Tuple[ast.AST, Optional[ast.AST]]] = []
        self.ctors: List[Tuple[Optional[ast.AST], Optional[ast.AST], ast.Call]] = []  # (scope, class, constructor call)
        self.zero_grads: List[Tuple[ast.Call, Optional[ast.AST], Optional[ast.AST]]] = []  # every .zero_grad(...) call
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
        self._add_positions([pos for word in words for pos in self.word_positions(word)])

    def word_positions(self, word: str) -> List[int]:
        """Where ``word`` is written (searched once per word)."""
        cache = self.__dict__.setdefault("_word_positions", {})
        found = cache.get(word)
        if found is None:
            found = cache[word] = find_all(self.source, (word,))
        return found

    def _add_positions(self, hits) -> None:
        hits = sorted(hits)
        found, line, last = set(self._lines), 1, 0
        for pos in hits:
            line += self.source.count("\n", last, pos)
            last = pos
            found.add(line)
        self._lines = sorted(found)

    def word_lines(self, words: Tuple[str, ...]) -> List[int]:
        """The lines on which one of ``words`` is written (kept per tuple of words)."""
        cache = self.__dict__.setdefault("_word_lines", {})
        found = cache.get(words)
        if found is None:
            found = cache[words] = lines_of(self.source, [pos for word in words for pos in self.word_positions(word)])
        return found

    def unbound(self, target: str) -> bool:
        """Whether the file never assigns ``target`` (a name or ``self.x``): a parameter, or an
        object set in another file. Computed on first use (only name fallbacks ask)."""
        bound = getattr(self, "_bound_targets", None)
        if bound is None:
            bound = self._bound_targets = frozenset(
                text(t) for n in nodes_of(self.tree, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            )
        return target not in bound

    def forward_of(self, func: ast.expr, scope: Optional[ast.AST] = None, depth: int = 0) -> Optional[ast.AST]:
        """The ``forward`` a call of ``func`` runs: ``func`` (a name or ``self.x``) is bound in
        this file only to objects of one class of the file that defines ``forward`` (``model =
        Net(...).to(dev)``; ``model = torch.compile(model)`` keeps it), or is a parameter of the
        function ``scope`` that every call of it in the file hands such an object. None otherwise:
        what a module object returns is read from its code, never from its name."""
        params = [a.arg for a in scope.args.posonlyargs + scope.args.args] if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
        if isinstance(func, ast.Name) and func.id in params:
            if depth < 2:
                found = set()
                for call in self._calls_of(scope):
                    method = isinstance(call.func, ast.Attribute) and params[:1] in (["self"], ["cls"])
                    index = params.index(func.id) - (1 if method else 0)
                    arg = next((k.value for k in call.keywords if k.arg == func.id), None)
                    if arg is None and 0 <= index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
                        arg = call.args[index]
                    fwd = self.forward_of(arg, None, depth + 1) if arg is not None else None
                    if fwd is None:
                        return None  # one call hands something else (or nothing the file shows)
                    found.add(fwd)
                return found.pop() if len(found) == 1 else None
            return None
        classes = self._module_classes().get(text(func))
        if not classes or None in classes or len(classes) != 1:
            return None
        return self._methods_of(next(iter(classes))).get("forward")

    def _methods_of(self, cls: ast.ClassDef) -> Dict[str, ast.AST]:
        return self.methods.get(id(cls)) or methods_of(cls)

    def _calls_of(self, fn: ast.AST) -> list:
        """The calls of function (or method, through ``self.``/``cls.``) ``fn`` by its name in this file."""
        calls = self.__dict__.get("_calls_by_name")
        if calls is None:  # one walk of the file, kept: every parameter asked about reads it
            calls = self._calls_by_name = {}
            for n in nodes_of(self.tree, ast.Call):
                if isinstance(n.func, ast.Name):
                    calls.setdefault(n.func.id, []).append(n)
                elif isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and n.func.value.id in ("self", "cls"):
                    calls.setdefault(n.func.attr, []).append(n)
        return calls.get(getattr(fn, "name", None), [])

    def _module_classes(self) -> Dict[str, set]:
        """target text -> the classes of this file every binding of it builds (None in the set for
        a binding to anything else). Moves (``.to(dev)``, ``.cuda()``), wrappers given the object
        (``torch.compile(m)``, ``DDP(m)``) and rebinding a target to itself keep the class."""
        cached = getattr(self, "_classes_of_targets", None)
        if cached is not None:
            return cached
        out: Dict[str, set] = {}

        def built(value: ast.expr, target: str, seen: int = 0):
            while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and seen < 8:
                value, seen = value.func.value, seen + 1  # Net(...).cuda().bfloat16()
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in self.classes:
                return self.classes[value.func.id]
            # (a target is a name, attribute or subscript: only an expression of its type can be written as
            # it is, and the others are not unparsed to compare)
            if isinstance(value, ast.Call) and len(value.args) >= 1 and isinstance(value.args[0], _TARGETS) \
                    and text(value.args[0]) == target:
                return "same"  # torch.compile(model), DDP(model, ...): the same forward
            if isinstance(value, _TARGETS) and text(value) == target:
                return "same"
            return None

        for n in nodes_of(self.tree, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.comprehension,
                                      ast.withitem)):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and not isinstance(n.targets[0], (ast.Tuple, ast.List)):
                key = text(n.targets[0])
                cls = built(n.value, key)
                if cls != "same":
                    out.setdefault(key, set()).add(cls if cls is None or "forward" in self._methods_of(cls) else None)
            elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.comprehension, ast.withitem)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.optional_vars if isinstance(n, ast.withitem) else n.target]
                for t in (x for x in targets if x is not None):
                    for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                        out.setdefault(text(e), set()).add(None)
        self._classes_of_targets = out
        return out

    def interesting(self, node: ast.AST) -> bool:
        """Whether ``node``'s lines may hold a gradient-buffer event."""
        return overlaps(self._lines, node)

    def mentions_grad(self, node: ast.AST) -> bool:
        """Whether ``node``'s lines contain ``.grad`` (a cheap test before looking for reads)."""
        return overlaps(self._grad_lines, node)

    def scope_text(self, scope: Optional[ast.AST]) -> str:
        if scope is None:
            return self.source
        if self._source_lines is None:
            self._source_lines = self.source.split("\n")
        return "\n".join(self._source_lines[scope.lineno - 1 : scope.end_lineno])

    def lines_with(self, scope: Optional[ast.AST], word: str) -> str:
        """The lines of ``scope`` (None: the file) that contain ``word``, joined: a small text
        to search instead of the whole scope on every question (kept per scope and word)."""
        cache = self.__dict__.setdefault("_lines_with", {})
        key = (id(scope), word)
        if key not in cache:
            cache[key] = "\n".join(line for line in self.scope_text(scope).split("\n") if word in line)
        return cache[key]

    def line_offset(self, line: int) -> int:
        """The character offset of the start of 1-based ``line`` in the source."""
        starts = self.__dict__.get("_line_starts")
        if starts is None:
            starts = self._line_starts = [0]
            for text in self.source.split("\n"):
                starts.append(starts[-1] + len(text) + 1)
        return starts[min(line - 1, len(starts) - 1)]

    def sums_in(self, scope: Optional[ast.AST]) -> bool:
        """``reduction="sum"`` (or ``size_average=False``) written inside ``scope``."""
        return bool(self._sum_lines) if scope is None else overlaps(self._sum_lines, scope)

    def mutated_attrs(self) -> frozenset:
        """Attribute names assigned somewhere outside ``__init__`` (state that may change in a loop)."""
        cached = getattr(self, "_mutated", None)
        if cached is None:
            found, pending = set(), [(self.tree, False)]
            # assignments are statements: without a `setattr` in the text only statements are walked
            walked = child_nodes if "setattr" in self.source else _block_children
            while pending:
                node, in_init = pending.pop()
                for child in walked(node):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        pending.append((child, child.name in ("__init__", "setup", "__post_init__")))
                        continue
                    if not in_init:
                        if isinstance(child, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                            for t in child.targets if isinstance(child, ast.Assign) else [child.target]:
                                for e in t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                                    if isinstance(e, ast.Attribute):
                                        # `self.engine.flag = x` rebinds `flag` of the engine, not `self.engine`
                                        found.add(e.attr)
                                    else:
                                        found.update(n.attr for n in subtree(e) if isinstance(n, ast.Attribute))
                        elif isinstance(child, ast.Call) and terminal(child.func) == "setattr" and len(child.args) > 1:
                            arg = child.args[1]
                            found.add(arg.value if isinstance(arg, ast.Constant) else "")
                    pending.append((child, in_init))
            cached = self._mutated = frozenset(found)
        return cached

    def scope_facts(self, scope: Optional[ast.AST]) -> "ScopeFacts":
        """What one walk of a function (or, for None, the whole file) finds, kept per scope: every
        loop of a file asks about its scope, and walking it again per loop made many module-level
        loops quadratic."""
        cache = self.__dict__.setdefault("_scope_facts", {})
        key = id(scope)
        if key not in cache:
            bound: Dict[str, list] = {}
            checks: List[Tuple[ast.expr, bool]] = []
            names: Dict[str, int] = {}
            for n in subtree(scope if scope is not None else self.tree):
                if isinstance(n, ast.Name):
                    names[n.id] = names.get(n.id, 0) + 1
                elif isinstance(n, ast.Assign):
                    for name, value in bound_values(n):
                        bound.setdefault(name, []).append(value)
                elif isinstance(n, ast.Assert):
                    checks.append((n.test, False))
                elif isinstance(n, ast.If) and n.body and isinstance(n.body[0], ast.Raise):
                    checks.append((n.test, True))
            cache[key] = ScopeFacts(bound, checks, names)
        return cache[key]

    def skip(self, node: ast.AST, reason: str) -> None:
        self.skipped.append(Skipped(self.filename, getattr(node, "lineno", 1), reason))
