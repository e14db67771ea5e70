"""Recognising, in an AST, the calls that touch the gradient buffer.

Three kinds of event matter to every rule (seed 000: ``backward()`` adds into
``.grad``, the optimizer reads it, clearing resets it):

* ``BACKWARD``: ``loss.backward()``, ``scaler.scale(loss).backward()``,
  ``torch.autograd.backward(...)``, and the frameworks' own backward passes
  (``accelerator.backward(loss)``, ``fabric.backward(loss)``,
  ``self.manual_backward(loss)``): none of them clears or steps for the user;
* ``STEP``: ``optimizer.step()``, ``scaler.step(optimizer)``, or a manual SGD
  update that reads ``.grad`` (``p.data.add_(p.grad, alpha=-lr)``);
* ``CLEAR``: ``zero_grad()``, ``p.grad = None``, ``p.grad.zero_()`` (``.fill_(0)``, ``.mul_(0)``,
  on ``p.grad.data`` too).

``MAYBE_CLEAR`` is a call we cannot see into whose name says it clears
gradients (``reset_grads(model)``, ``zero_gradients(x)``): it silences "nothing
was cleared" but never counts as a clearing that discards gradients. A name
that merely contains "zero" (``torch.zeros``, ``nonzero``, ``h.zero_()``) is no
event. ``READ`` is code that reads ``.grad`` itself (SAM's perturbation, a copy
into the user's own buffer): the gradients were used even if cleared afterwards.
``torch.distributed.autograd.backward`` keeps its gradients in a context, not in
``.grad``: it is no event.

Everything here is name-based and deliberately narrow: a call we are not sure
about is no event at all, because a missed bug costs less than a false alarm.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, NamedTuple, Optional, Tuple

from ._ast import nodes_of, subtree, terminal, text
from ._ast import child_nodes

BACKWARD = "backward"
STEP = "step"
CLEAR = "clear"
MAYBE_CLEAR = "maybe-clear"
READ = "read"
#: ``p.grad /= K``, ``p.grad.div_(K)``, ``p.grad.data.mul_(1 / K)``, ``torch._foreach_div_(grads, K)``:
#: the accumulated gradients rescaled in place before a step (a window averaged on its gradients).
SCALE = "scale"
#: ``acc.backward(loss)``, ``acc.step()``, ``acc.flush()`` of a ``gradguard.Accumulator`` (and
#: ``gradguard.accumulate_batch(..., acc=acc)``): a backward pass whose scaling, stepping and
#: clearing the Accumulator does itself. The loop trains, but no buffer rule applies to it.
MANAGED = "managed"

#: The target of a clearing that touches named tensors only (``p.grad = None``,
#: ``p.grad.zero_()``): enough to count as clearing, never proof that *all*
#: gradients were discarded (dropping one frozen parameter's gradient is legitimate).
PARTIAL = "<grad>"


class Event(NamedTuple):
    """One gradient-buffer event on a path through a loop iteration.

    ``target`` is the source text of what it acts on (the optimizer of a step,
    the optimizer or module of a ``zero_grad``, the tensor of a backward); ``""``
    when unknown. ``stack`` lists the branches (and nested loops) of the iteration
    that enclose the event: ``(if_test, taken)`` for each ``if`` and ``("loop", id)`` for
    each nested loop. ``frame`` lists the helper functions (and closures, methods) the
    walk went through to reach the event, outermost first, as ``(function, call)``: the
    event's names belong to the last function, whose parameters its call binds.
    """

    kind: str
    node: ast.AST
    target: str
    stack: Tuple = ()
    frame: Tuple = ()


#: torch.optim classes and the common third-party ones (a constructor call marks its
#: result as an optimizer even when the variable has an unusual name).
OPTIMIZER_CLASSES = frozenset(
    {
        "SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam",
        "RMSprop", "Rprop", "LBFGS", "SparseAdam", "Adafactor", "Lion", "LAMB", "Lamb",
        "FusedAdam", "FusedLAMB", "FusedSGD", "AdamW8bit", "Adam8bit", "Muon",
        "ZeroRedundancyOptimizer",
    }
)

# A receiver whose name says "optimizer": optimizer, optim, self.optimizer_g, opt,
# optD, opt_g, g_opt ... but not "options" or "adopt".
_OPT_NAME = re.compile(r"optim|^(?:[a-z0-9]*_)?opts?(?:_?[a-z0-9]{0,2})?$")

# A call we cannot see into that probably clears gradients (GG101 stays silent):
# the name must speak of gradients, not merely of zeros.
_MAYBE_CLEAR_NAME = re.compile(r"zero_?grad|clear_?grad|reset_?grad|free_?grad|set_grads?_(?:to_)?none|grads?_to_none", re.I)

# Reading a tensor with one of these cuts its autograd history (GG201).
CUTTING_ATTRS = frozenset({"item", "detach", "data", "tolist", "numpy", "detach_"})


#: Marks, in a set of known optimizers, a name the file binds to something that is no optimizer
#: (``NOT_AN_OPTIMIZER + "prof"`` for ``with torch.profiler.profile() as prof``): no text starts with it.
NOT_AN_OPTIMIZER = "!"


def is_optimizer_name(node: ast.AST, known: frozenset = frozenset()) -> bool:
    """Whether ``node`` names an optimizer, by its name or by how it was built."""
    written = text(node)
    if written in known:
        return True  # built by an optimizer constructor, whatever the variable is called
    if known and NOT_AN_OPTIMIZER + written in known:
        return False  # built as something else (a profiler), whatever the variable is called
    name = terminal(node).lower()
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        # an entry of a dict (`setting.optim["scheduler"]`): its key is the name it is written with
        key = node.slice.value.lower()
        if "sched" in key or "scaler" in key:
            return False
    if not name or "sched" in name or "scaler" in name:
        return False
    return bool(_OPT_NAME.search(name))


def _is_zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value == 0


def _mentions_grad(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in subtree(node))


def _is_grad_tensor(node: ast.AST) -> bool:
    """``p.grad`` or ``p.grad.data``."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "grad"


def _grad_root(node: ast.AST) -> Optional[str]:
    """The text of ``p.grad`` for ``p.grad`` or ``p.grad.data``; None for anything else."""
    if isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.value
    return text(node) if isinstance(node, ast.Attribute) and node.attr == "grad" else None


def _scaled_grad(stmt: ast.stmt) -> Tuple[Optional[ast.AST], Optional[str]]:
    """The node to mark and the ``.grad`` it divides, for ``p.grad /= n``, ``p.grad = p.grad / n`` and
    ``p.grad.div_(n)`` written as a statement."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Div):
        return stmt, _grad_root(stmt.target)
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.BinOp)
            and isinstance(stmt.value.op, ast.Div) and text(stmt.targets[0]) == text(stmt.value.left)):
        return stmt, _grad_root(stmt.targets[0])
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute) \
            and stmt.value.func.attr == "div_":
        return stmt.value, _grad_root(stmt.value.func.value)
    return None, None


_BLOCK_HOLDERS = (ast.mod, ast.stmt, ast.excepthandler, ast.match_case)


def mark_process_means(tree: ast.AST, source: str) -> None:
    """Mark the divisions of ``.grad`` that average a sum over processes: ``p.grad`` divided right
    after ``all_reduce(p.grad)`` (a sum, the default reduction) in the same block of statements. The
    sum over the processes divided by their number is each process's gradient on average: the weight
    of every backward pass in the window stays what it was, so such a division is no :data:`SCALE`
    of the window (an undivided mean loss summed over K passes is still K times too large).

    >>> src = "for p in ps:\\n    dist.all_reduce(p.grad.data)\\n    p.grad.data /= n\\n"
    >>> tree = ast.parse(src); mark_process_means(tree, src)
    >>> classify_statement(tree.body[0].body[1]) is None
    True
    >>> src = "for p in ps:\\n    p.grad.data /= n\\n"
    >>> tree = ast.parse(src); mark_process_means(tree, src)
    >>> classify_statement(tree.body[0].body[0])
    ('scale', '<grad>')
    """
    if "all_reduce" not in source:
        return
    # blocks of statements are fields of statements, handlers and match cases only (an expression's
    # `body`, a lambda's or a conditional's, is no list): the walk need not enter expressions
    for node in nodes_of(tree, _BLOCK_HOLDERS):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            reduced = set()
            for stmt in block:
                call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
                if call is not None and terminal(call.func) == "all_reduce" and call.args:
                    op = next((k.value for k in call.keywords if k.arg == "op"), call.args[1] if len(call.args) > 1 else None)
                    root = _grad_root(call.args[0])
                    if root is not None and (op is None or terminal(op) == "SUM"):
                        reduced.add(root)
                    continue
                marked, root = _scaled_grad(stmt)
                if marked is not None and root is not None and root in reduced:
                    marked._gg_process_mean = True


def classify_call(call: ast.Call, optimizers: frozenset = frozenset()) -> Optional[Tuple[str, str]]:
    """``(kind, target)`` for a call that is a gradient-buffer event, else None.

    >>> classify_call(ast.parse("opt.step()", mode="eval").body)
    ('step', 'opt')
    >>> classify_call(ast.parse("scheduler.step()", mode="eval").body) is None
    True
    """
    func = call.func
    if isinstance(func, ast.Attribute):
        attr, recv = func.attr, func.value
        if attr in ("backward", "manual_backward"):
            recv_text = text(recv)
            if "dist_autograd" in recv_text or recv_text.endswith("distributed.autograd"):
                return None  # gradients stay in the distributed-autograd context
            if recv_text in ("torch.autograd", "autograd") or _is_framework_object(recv) or attr == "manual_backward":
                # torch.autograd.backward(loss), accelerator.backward(loss), self.manual_backward(loss)
                return BACKWARD, text(call.args[0]) if call.args else ""
            return BACKWARD, recv_text
        if attr == "step":
            name = terminal(recv).lower()
            if "scaler" in name:  # GradScaler.step(optimizer) steps that optimizer
                return (STEP, text(call.args[0])) if call.args else None
            if is_optimizer_name(recv, optimizers):
                return STEP, text(recv)
            return None
        if attr == "zero_grad":
            return CLEAR, text(recv)
        if attr == "zero_" and _is_grad_tensor(recv):
            return CLEAR, PARTIAL
        if attr in ("fill_", "mul_") and _is_grad_tensor(recv) and len(call.args) == 1 and _is_zero(call.args[0]):
            return CLEAR, PARTIAL  # p.grad.fill_(0), p.grad.mul_(0): the same values as zero_()
        if attr in ("add_", "sub_") and isinstance(recv, ast.Attribute) and recv.attr == "data":
            # word_language_model: p.data.add_(p.grad, alpha=-lr) is a hand-written step
            if any(_mentions_grad(a) for a in call.args) or any(_mentions_grad(k.value) for k in call.keywords):
                return STEP, "<manual>"
            return None
        if attr == "_foreach_zero_":
            return CLEAR, PARTIAL
        if attr in ("div_", "mul_") and _is_grad_tensor(recv) and call.args:
            if getattr(call, "_gg_process_mean", False):
                return None  # the mean over processes of an all-reduced sum (mark_process_means)
            return SCALE, PARTIAL
        if attr in ("_foreach_div_", "_foreach_mul_") and call.args and _mentions_grad(call.args[0]):
            return SCALE, PARTIAL
        if _MAYBE_CLEAR_NAME.search(attr):
            return MAYBE_CLEAR, text(recv)
        return None
    if isinstance(func, ast.Name) and _MAYBE_CLEAR_NAME.search(func.id):
        return MAYBE_CLEAR, ""
    return None


# A receiver whose name says "accumulator" (``acc``, ``accum``, ``self.accumulator``).
_ACCUMULATOR_NAME = re.compile(r"^(?:acc|accum|\w*accumulator\w*)$", re.I)


def managed_call(call: ast.Call, accumulators: frozenset = frozenset(), unbound: Optional[Callable[[str], bool]] = None) -> Optional[str]:
    """The Accumulator a call works through, if it is one of its gradient-buffer calls, else None.

    ``acc.backward(loss)`` / ``acc.step()`` / ``acc.flush()`` on a name bound to
    ``gradguard.Accumulator(...)`` (or, with a loss argument, on a name that says so), and
    ``accumulate_batch(model, fn, batch, n, acc=acc)``.

    >>> managed_call(ast.parse("acc.backward(loss, count=n)", mode="eval").body)
    'acc'
    >>> managed_call(ast.parse("loss.backward()", mode="eval").body) is None
    True
    """
    func = call.func
    if terminal(func) == "accumulate_batch":
        acc = next((k.value for k in call.keywords if k.arg == "acc"), None)
        return text(acc) if acc is not None and not (isinstance(acc, ast.Constant) and acc.value is None) else None
    if not isinstance(func, ast.Attribute) or func.attr not in ("backward", "step", "flush"):
        return None
    recv = text(func.value)
    if recv in accumulators:
        return recv
    if func.attr == "backward" and call.args and _ACCUMULATOR_NAME.match(terminal(func.value)):
        # the name is a last resort for an object the file never binds (a parameter, an attribute
        # set elsewhere): one the file binds to something else (`self.acc = Accelerator()`) is that
        if unbound is None or unbound(recv):
            return recv
    return None


def _is_framework_object(recv: ast.AST) -> bool:
    """``accelerator``, ``self.fabric``, ``engine``: an object whose ``backward(loss)`` takes the loss."""
    return bool(_FRAMEWORK_RECEIVER.search(terminal(recv)))


# Objects whose backward(loss) takes the loss as an argument (Accelerate, Fabric,
# DeepSpeed, ColossalAI): still a backward pass the user's loop must clear after.
_FRAMEWORK_RECEIVER = re.compile(r"accelerator|fabric|engine|deepspeed|booster|strategy|precision", re.I)


def reads_grad(node: ast.AST, keep=None) -> bool:
    """Whether ``node`` reads some ``.grad`` as a value (not only tests it for None).

    ``keep(sub_expression)`` may prune the search (sub-expressions on lines without ``.grad``).
    """
    pending = [node]
    while pending:
        n = pending.pop()
        if isinstance(n, ast.Compare) and all(isinstance(c, ast.Constant) and c.value is None for c in n.comparators):
            continue
        if isinstance(n, ast.Attribute) and n.attr == "grad" and isinstance(n.ctx, ast.Load):
            return True
        pending.extend(c for c in child_nodes(n) if keep is None or not isinstance(c, ast.expr) or keep(c))
    return False


def classify_statement(stmt: ast.stmt) -> Optional[Tuple[str, str]]:
    """Events written as statements rather than calls: ``p.grad = None``, ``del p.grad``,
    ``p.data -= lr * p.grad``."""
    if isinstance(stmt, ast.Assign):
        if any(_is_grad_tensor(t) for t in stmt.targets):
            value = stmt.value
            if isinstance(value, ast.Constant) and value.value is None:
                return CLEAR, PARTIAL
            if isinstance(value, ast.Call) and terminal(value.func) in ("zeros_like", "zeros"):
                return CLEAR, PARTIAL
            if (
                len(stmt.targets) == 1 and isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Div, ast.Mult))
                and text(stmt.targets[0]) in (text(value.left), text(value.right))
            ):
                return None if getattr(stmt, "_gg_process_mean", False) else (SCALE, PARTIAL)  # p.grad = p.grad / k
        return None
    if isinstance(stmt, ast.Delete):
        if any(_is_grad_tensor(t) for t in stmt.targets):
            return CLEAR, PARTIAL
        return None
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, (ast.Div, ast.Mult)) and _is_grad_tensor(stmt.target):
        return None if getattr(stmt, "_gg_process_mean", False) else (SCALE, PARTIAL)  # p.grad /= k
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, (ast.Sub, ast.Add)):
        target = stmt.target
        if not _is_grad_tensor(target) and _mentions_grad(stmt.value):
            if isinstance(target, ast.Attribute) and target.attr == "data":
                return STEP, "<manual>"
            # A name moved by its own gradient (`w -= lr * w.grad`) is a step by hand; a number that adds up
            # some gradient's norm (`total += float(p.grad.norm())`) reads `.grad` and changes no weight.
            if isinstance(target, ast.Name) and any(
                isinstance(n, ast.Attribute) and n.attr == "grad" and isinstance(n.value, ast.Name) and n.value.id == target.id
                for n in subtree(stmt.value)
            ):
                return STEP, "<manual>"
    return None


def optimizer_constructor(value: ast.AST) -> Optional[ast.Call]:
    """The call if ``value`` builds an optimizer (``torch.optim.SGD(...)``), else None."""
    if not isinstance(value, ast.Call):
        return None
    name = terminal(value.func)
    if name in OPTIMIZER_CLASSES:
        return value
    func_text = text(value.func)
    if func_text.startswith(("torch.optim.", "optim.")) and name[:1].isupper() and not re.search(r"lr_scheduler|swa_utils", func_text):
        return value  # torch.optim.lr_scheduler.StepLR builds a scheduler, not an optimizer
    return None


def reevaluates_closure(ctor: ast.Call) -> bool:
    """Whether the optimizer ``ctor`` builds evaluates the closure handed to its ``step`` more than once
    per step, as its constructor's arguments prove: torch's ``LBFGS(params, lr, max_iter=20, max_eval=None)``
    calls it up to ``max_eval`` times (``max_iter * 5 // 4`` by default), reading the gradient after each
    call. An argument that is not a literal proves nothing (False), as does any other class."""
    if terminal(ctor.func) != "LBFGS" or any(isinstance(a, ast.Starred) for a in ctor.args) or any(
        k.arg is None for k in ctor.keywords
    ):
        return False
    given = {k.arg: k.value for k in ctor.keywords}
    for i, name in ((2, "max_iter"), (3, "max_eval")):
        if len(ctor.args) > i:
            given[name] = ctor.args[i]

    def literal(name, default):
        node = given.get(name)
        if node is None:
            return default
        if isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (int, float)):
            return node.value
        return False  # not known

    max_iter, max_eval = literal("max_iter", 20), literal("max_eval", None)
    if max_iter is False or max_eval is False or max_iter is None:
        return False
    evaluations = max_iter * 5 // 4 if max_eval is None else max_eval
    return evaluations > 1


def conditional_step(call: ast.Call, optimizers: frozenset = frozenset()):
    """``(optimizer, condition)`` of a call handed a loss first, then an optimizer, and a window
    condition (a comparison on a modulo) as an argument: ``loss_scaler(loss, optimizer,
    update_grad=(i + 1) % K == 0)`` (timm's NativeScaler) back-propagates the loss and steps the
    optimizer when the condition holds. The optimizer must be an argument the model knows as one
    (by what the code does with it, or by name): `log(loss, step, flush=i % 100 == 0)` is no step.
    Without ``optimizers`` (the builder's first look, which only marks lines) the second
    positional argument stands for it. None for any other call."""
    if len(call.args) < 2 or isinstance(call.args[0], ast.Starred):
        return None
    values = list(call.args[1:]) + [k.value for k in call.keywords]
    test = next(
        (v for v in values if isinstance(v, (ast.Compare, ast.BoolOp, ast.UnaryOp))
         and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in subtree(v))),
        None,
    )
    if test is None:
        return None
    opt = next((v for v in values if isinstance(v, (ast.Name, ast.Attribute)) and is_optimizer_name(v, optimizers)), None)
    if opt is None and not optimizers and isinstance(call.args[1], (ast.Name, ast.Attribute)):
        return call.args[1], test  # a candidate only (the builder's line marks), never an event
    return (opt, test) if opt is not None else None
