"""GG104 unscaled-accumulation: an accumulation loop back-propagates a mean loss that
nothing divided by the number of micro-batches (not inside ``accelerator.accumulate``,
which divides for the user)."""

from __future__ import annotations

import ast
import re
from typing import Optional

from ...findings import Edit, Fix
from .._ast import called, assignments, bind_arguments, body_nodes, returns_of, self_ref, subtree, terminal, text
from .._edits import Tree, parenthesize
from .._events import BACKWARD, CLEAR, PARTIAL
from .._literals import literal_int, literal_number
from .._flow import _defaults, condition_key
from .._model import ACCUM_NAME, Diagnostic, Loop, Report, backward_tensor, tests
from .._weights import may_close_short
from .._ast import child_nodes

CODE = "GG104"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg104_unscaled_accumulation_bad.py", "gg104_unscaled_accumulation_good.py")
#: How far ``gradguard lint --fix`` may go with its fix: "safe" (``--fix``) or "unsafe" (``--unsafe-fixes``).
FIX_SAFETY = "safe"


def check_loop(loop: Loop, report: Report) -> None:
    # inside `accelerator.accumulate(model)` Accelerate divides the loss itself; a window whose
    # gradients are rescaled before the step (`p.grad /= K`, in a helper too) is weighted there
    if not loop.trains or loop.accumulate or scales_gradients(loop.node) or loop.scaled_on_gradients():
        return
    if hooks_rescale(loop.module.tree):
        return  # a tensor hook of the file rescales gradients inside the pass: the loss's divisor is not its weight
    if _cached_window(loop.node, loop.scope if isinstance(loop.scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else loop.node):
        return
    windows = loop.window_paths()
    if windows:
        if all(any(e.kind == CLEAR and e.target != PARTIAL for e in m.events) for m in windows):
            return  # every micro-batch is cleared (GG102): the step applies one pass, a mean, no sum
        candidates = [e for m in windows for e in m.events if e.kind == BACKWARD]
    else:
        # a micro-step loop (`for _ in range(K)`, `for part in x.chunk(K)`) back-propagating,
        # then one step for the window: this loop, or a nested loop of it
        micro = loop._micro_loop()
        if micro is None:
            return
        mark = ("loop", id(micro))
        if micro is loop.node:
            every = [c for c in loop.full_clears if not c.stack]  # unconditional, in this loop's own body
        else:
            every = [c for c in loop.full_clears if mark in c.stack and not tests(c)]
        if every:
            return  # cleared on every pass of the micro-step loop (GG102): the step applies one pass
        inside = [c for c in loop.full_clears if (micro is loop.node or mark in c.stack) and tests(c)]
        if any(not _first_pass_only(c, micro) for c in inside):
            # cleared on some pass after the first (PGD's `if t != K - 1: zero_grad()`): the step applies
            # the passes made since the last clear, not the loop's K of them
            return
        candidates = [b for b in loop.backwards if micro is loop.node or mark in b.stack]
    if _lr_divided_by_window(loop):
        return  # plain SGD at lr / K applies the window's summed gradient as lr times its mean
    # the window's size, or what the loop's header counts (`range(1, acc.gradient_accumulation_steps + 1)`)
    sizes = [loop.window_size()] + [n for n in subtree(getattr(loop.node, "iter", None) or ast.Pass()) if isinstance(n, ast.Attribute)]
    for b in dict.fromkeys(candidates):
        if any(_divides_by_its_own_size(b.node, size) for size in sizes):
            continue
        assigns = _straight_line(loop.scope_of(b), b) if b.frame else reaching(
            {**loop.scope_of(b), **_attribute_assignments(loop.node, backward_tensor(b.node), b.node)}, b.node.lineno, b.node, loop.node, loop)
        if loss_scale(backward_tensor(b.node), assigns, loop) == "raw":
            report(
                CODE,
                b.node,
                f"`{called(b.node)}` accumulates over several micro-batches a mean loss that is not divided "
                f"by the number of micro-batches.",
                loop=loop, backward=b.node, accum=loop.window_size(),
            )


def _divides_by_its_own_size(call: ast.AST, size: Optional[ast.AST]) -> bool:
    """``accelerator.backward(loss)`` in a window of ``accelerator.gradient_accumulation_steps`` passes: the
    object that back-propagates holds the window's size and divides the loss by it itself (Accelerate
    does, outside ``accumulate()`` too)."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.args and isinstance(size, ast.Attribute)):
        return False
    receiver = text(call.func.value)
    return text(size.value) == receiver


def _cached_window(loop_node: ast.AST, scope: ast.AST) -> bool:
    """Gradient caching (open_clip's ``accum_freq``): the loop keeps every micro-batch's outputs of the
    window in lists under ``torch.no_grad()``, then each pass re-computes one micro-batch and hands
    those lists to the loss with the pass's number, a whole-window loss with that one part live. The K passes
    add up one gradient of the window's loss, each part once: no division by K is missing."""
    cached = set()
    for n in body_nodes(scope):
        if isinstance(n, (ast.With, ast.AsyncWith)) and any(
                terminal(i.context_expr.func if isinstance(i.context_expr, ast.Call) else i.context_expr) in ("no_grad", "inference_mode")
                for i in n.items):
            cached |= {c.func.value.id for c in subtree(n) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                       and c.func.attr == "append" and isinstance(c.func.value, ast.Name)}
    counters = {n.id for f in [loop_node, *body_nodes(loop_node)] if isinstance(f, (ast.For, ast.AsyncFor))
                for n in subtree(f.target) if isinstance(n, ast.Name)}
    if not cached or not counters:
        return False
    # the call is handed the kept outputs and the counter of this loop (or of one in it): which part is live
    for n in body_nodes(loop_node):
        if isinstance(n, ast.Call):
            handed = [a for a in list(n.args) + [k.value for k in n.keywords] if isinstance(a, ast.Name)]
            if any(a.id in cached for a in handed) and any(a.id in counters for a in handed):
                return True
    return False


def _straight_line(assigns: dict, b) -> dict:
    """A pass in a helper: the helper runs top to bottom once per call, so where the name it back-propagates
    is bound last before it by a statement of the helper's own body (no ``if``, no loop around either), that
    binding alone reaches it (``loss = ce(..., reduction="none") * mask`` then ``loss = loss.sum() / n``:
    the second)."""
    fn = b.frame[-1][0]
    tensor = backward_tensor(b.node)
    if not isinstance(tensor, ast.Name) or not hasattr(fn, "body"):
        return assigns
    statement = next((st for st in fn.body if _contains(st, b.node)), None)
    values = assigns.get(tensor.id) or []
    if statement is None or isinstance(statement, (ast.For, ast.AsyncFor, ast.While)) or not values:
        return assigns
    top = [st for st in fn.body if isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign))
           and st.lineno < statement.lineno and any(_node(v) is st.value or _node(v) is st for v in values)]
    if not top:
        return assigns
    last = top[-1]
    chosen = [v for v in values if _node(v) is last.value or _node(v) is last]
    later = [v for v in values if (_line(v) or 0) > last.lineno and (_line(v) or 0) < statement.lineno]
    return assigns if later or not chosen else {**assigns, tensor.id: chosen}


def _contains(root: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in subtree(root))


def _attribute_assignments(loop_node: ast.AST, tensor: Optional[ast.AST], at: Optional[ast.AST] = None) -> dict:
    """``result.loss /= K`` or ``out.loss = out.loss / K`` in the loop, where the pass back-propagates
    ``result.loss``: the values bound to that attribute, keyed by its text (never an identifier), read
    like a name's by :func:`loss_scale`."""
    # an entry of a dict of outputs (`out["elbo"] = out["elbo"] / K`) is read the same way, by its text
    keyed = (ast.Attribute, ast.Subscript)
    if not isinstance(tensor, ast.Attribute) and not (isinstance(tensor, ast.Subscript) and isinstance(tensor.slice, ast.Constant)):
        return {}
    key, out = text(tensor), {}
    found = []
    for n in body_nodes(loop_node):
        if isinstance(n, ast.AugAssign) and isinstance(n.target, keyed) and text(n.target) == key:
            found.append((n, ("aug", n.op, n)))
        elif isinstance(n, ast.Assign) and any(isinstance(t, keyed) and text(t) == key for t in n.targets):
            found.append((n, n.value))
    if isinstance(tensor, ast.Subscript) and at is not None:
        # a dict entry: only writes between the last binding of the dict (`out = model(x)`) and the pass
        # (`out["elbo"] *= K` after it, for logging, writes the next iteration's old dict)
        base = text(tensor.value)
        bound = [n.lineno for n in body_nodes(loop_node) if isinstance(n, ast.Assign) and n.lineno < at.lineno
                 and any(text(t) == base for tg in n.targets for t in (tg.elts if isinstance(tg, (ast.Tuple, ast.List)) else [tg]))]
        since = max(bound, default=0)
        found = [(n, v) for n, v in found if since < n.lineno < at.lineno]
    for _, v in found:
        out.setdefault(key, []).append(v)
    return out


def _first_pass_only(clear, micro: ast.AST) -> bool:
    """The clear's ``if`` pins the micro-step loop's counter at 0 (``if i == 0:``, ``if not i:``): it runs
    before the window's first pass, so every pass of the loop still reaches the step."""
    counters = set()
    if isinstance(micro, (ast.For, ast.AsyncFor)):
        target = micro.target
        if isinstance(target, ast.Tuple) and target.elts and terminal(micro.iter.func if isinstance(micro.iter, ast.Call) else micro.iter) == "enumerate":
            target = target.elts[0]
        counters = {target.id} if isinstance(target, ast.Name) else set()

    def zero(e) -> bool:
        return isinstance(e, ast.Constant) and e.value == 0 and not isinstance(e.value, bool)

    for test, taken in tests(clear):
        if not isinstance(test, ast.expr):
            continue
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) and test.left.id in counters:
            if zero(test.comparators[0]) and (isinstance(test.ops[0], ast.Eq) if taken else isinstance(test.ops[0], ast.NotEq)):
                return True
        if isinstance(test, ast.Name) and test.id in counters and not taken:
            return True
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name) \
                and test.operand.id in counters and taken:
            return True
    return False


def reaching(assigns: dict, line: int, at: Optional[ast.AST] = None, loop_node: Optional[ast.AST] = None,
             loop: Optional[Loop] = None) -> dict:
    """The loop's assignments that can give a name its value at ``line``: those written above it
    when there are any (``loss = meter.compute().item()`` after the backward pass, for logging,
    is overwritten before the next backward reads ``loss``), less those on the other side of an
    ``if`` that ``at`` sits in (``if amp: loss /= K; scaler(loss, ...)`` ``else: loss.backward()``: the
    division of one branch is not the other branch's)."""
    parents = _parents(loop_node) if at is not None and loop_node is not None else None
    out = {}
    for name, values in assigns.items():
        lines = [_line(v) for v in values]
        above = [v for v, n in zip(values, lines) if n is not None and n < line]
        if parents is not None and above:
            apart = [v for v in above if _other_branch(_node(v), at, parents, loop)]
            # a value bound on the same path is still above the line: it, not a value of another branch, reaches
            if len(apart) < len(above):
                above = [v for v in above if not any(v is a for a in apart)]
        out[name] = above if above and all(n is not None for n in lines) else values
    return out


def _node(value) -> Optional[ast.AST]:
    return value[2] if isinstance(value, tuple) and len(value) > 2 else value if isinstance(value, ast.AST) else None


def _parents(root: ast.AST) -> dict:
    cached = root.__dict__.get("_gg104_parents")
    if cached is None:
        cached = root._gg104_parents = {id(c): n for n in subtree(root) for c in child_nodes(n)}
    return cached


def _branches(node: Optional[ast.AST], parents: dict) -> dict:
    """id of each ``if`` above ``node`` -> the branch (``body``/``orelse``) it is in."""
    out = {}
    while node is not None:
        parent = parents.get(id(node))
        if isinstance(parent, ast.If):
            for field in ("body", "orelse"):
                if any(s is node for s in getattr(parent, field)):
                    out[id(parent)] = field
        node = parent
    return out


def _other_branch(a: Optional[ast.AST], b: ast.AST, parents: dict, loop: Optional[Loop] = None) -> bool:
    """``a`` and ``b`` sit in different branches of one ``if``: one iteration never runs both; or in
    opposite branches of two ``if`` statements on one flag fixed for the run (``if amp: loss = f(x) / K``
    ``else: loss = f(x)``, then ``if amp: scaler.scale(loss).backward()`` ``else: loss.backward()``):
    the run takes the same side of both."""
    if a is None:
        return False
    mine, theirs = _branches(a, parents), _branches(b, parents)
    if any(theirs.get(k) not in (None, side) for k, side in mine.items()):
        return True
    if loop is None:
        return False
    sides = {}
    for owner, found in ((0, mine), (1, theirs)):
        for k, side in found.items():
            node = _if_nodes(parents).get(k)
            if node is None or not loop.fixed_for_run(node.test):
                continue
            key, negated = condition_key(node.test)
            sides.setdefault(key, [set(), set()])[owner].add((side == "body") != negated)
    return any(len(x) == 1 and len(y) == 1 and x != y for x, y in sides.values())


def _if_nodes(parents: dict) -> dict:
    """id -> the ``if`` statements among the parents' values."""
    found = parents.get("_gg104_ifs")
    if found is None:
        found = parents["_gg104_ifs"] = {id(n): n for n in parents.values() if isinstance(n, ast.If)}
    return found


def _line(value) -> Optional[int]:
    node = value[2] if isinstance(value, tuple) and len(value) > 2 else value
    return getattr(node, "lineno", None)


# Tensor methods that are an arithmetic operator (``x.mul(w)`` is ``x * w``).
_ARITH = {"mul": ast.Mult, "multiply": ast.Mult, "div": ast.Div, "divide": ast.Div, "true_divide": ast.Div}
# An attribute holding a loss object (``self.loss_fn``, ``self.criterion``), not a method.
def _lr_divided_by_window(loop: Loop) -> bool:
    """Every optimizer the loop steps is ``torch.optim.SGD`` built in the loop's function with a learning
    rate divided by the window's K (``lr=base / K``, through names the function binds), every learning
    rate the function sets later (``group["lr"] = ...``) divided too, and weight decay absent or multiplied
    by K. SGD (momentum, Nesterov and dampening included) is linear in the product of the learning rate
    and the gradient, so the summed window at ``lr / K`` is the mean window at ``lr``; an adaptive
    optimizer (Adam) is not, so only SGD counts (YOLOv3's ``LR / batch_size / subdivision``)."""
    k = loop.window_size()
    scope = loop.scope
    if k is None or scope is None:
        return False
    words = text(k)
    assigns = assignments(scope)
    # the loop's own steps; for a micro-step loop stepped after it, the optimizers its function steps
    targets = {e.target for e in loop.steps} or {
        text(n.func.value) for n in subtree(scope) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and n.func.attr == "step" and text(n.func.value) in loop.module.optimizer_names}
    if not targets or "" in targets:
        return False
    for target in targets:
        built = [v for v in assigns.get(target, ()) if isinstance(v, ast.AST)]
        if len(built) != 1 or not isinstance(built[0], ast.Call) or terminal(built[0].func) != "SGD":
            return False
        lr = next((kw.value for kw in built[0].keywords if kw.arg == "lr"), built[0].args[1] if len(built[0].args) > 1 else None)
        if lr is None or not _divided_by(lr, words, assigns, 0):
            return False
    for n in subtree(scope):
        if isinstance(n, ast.Assign) and any(_key(t, "lr") for t in n.targets) and not _divided_by(n.value, words, assigns, 0):
            return False
        decay = [kw.value for kw in n.keywords if kw.arg == "weight_decay"] if isinstance(n, ast.Call) else []
        if isinstance(n, ast.Dict):
            decay += [v for key, v in zip(n.keys, n.values) if isinstance(key, ast.Constant) and key.value == "weight_decay"]
        if any(not _zero(v) and not _multiplied_by(v, words) for v in decay):
            return False
    return True


def _key(target: ast.AST, name: str) -> bool:
    return isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) and target.slice.value == name


def _zero(v: ast.AST) -> bool:
    return isinstance(v, ast.Constant) and v.value == 0


def _multiplied_by(v: ast.AST, words: str) -> bool:
    if text(v) == words:
        return True
    return isinstance(v, ast.BinOp) and isinstance(v.op, ast.Mult) and (
        _multiplied_by(v.left, words) or _multiplied_by(v.right, words))


def _divided_by(v: ast.AST, words: str, assigns: dict, depth: int) -> bool:
    """``v`` is a quotient whose divisor has ``words`` as a factor (``a / b / K``, ``a / (b * K)``), through
    the names the function binds (every binding)."""
    if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Div):
        return _multiplied_by(v.right, words) or _divided_by(v.left, words, assigns, depth)
    if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Mult):  # `base / K * factor`
        return _divided_by(v.left, words, assigns, depth) or _divided_by(v.right, words, assigns, depth)
    if isinstance(v, ast.Name) and depth < 3:
        values = [x for x in assigns.get(v.id, ()) if isinstance(x, ast.AST)]
        return bool(values) and len(values) == len(assigns.get(v.id, ())) and all(
            _divided_by(x, words, assigns, depth + 1) for x in values)
    return False


_LOSS_OBJECT = re.compile(r"loss|criterion", re.IGNORECASE)
# An attribute holding the model whose forward returns its (mean) loss: ``loss = self.model(x)``.
_MODEL_OBJECT = re.compile(r"^(model|net|network|module|diffusion|unet|transformer)$", re.IGNORECASE)


def scales_gradients(loop_node: ast.AST) -> bool:
    """The loop rescales ``.grad`` itself (``p.grad.div_(k)``, ``p.grad /= k``), or moves it
    into its own buffer (Opacus' virtual step: ``p.summed_grad += p.grad``), where it may divide."""
    for n in body_nodes(loop_node):
        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)) and "grad" in text(n.target):
            if not getattr(n, "_gg_process_mean", False):  # not the mean over processes of an all-reduced sum
                return True
        if isinstance(n, (ast.AugAssign, ast.Assign)) and _copies_grad(n):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if n.func.attr in ("div_", "mul_", "_foreach_div_", "_foreach_mul_") and ("grad" in text(n.func.value) or "grad" in text(n)):
                if not getattr(n, "_gg_process_mean", False):
                    return True
            if n.func.attr in ("add_", "copy_", "append") and not _is_grad(n.func.value) and terminal(n.func.value) != "data":
                if any(_is_grad(a) for a in n.args):  # buf.add_(p.grad), grads.append(p.grad)
                    return True
    return False


def hooks_rescale(tree: ast.AST) -> bool:
    """The file registers a tensor gradient hook (``x.register_hook(f)``) whose ``f`` returns its gradient
    multiplied or divided (``lambda g: g / k``; a function of the file, or one a function of the file returns,
    whose ``return`` does): inside the backward pass, the gradient that reaches the parameters is rescaled
    (a pipeline stage dividing by its accumulation steps), so the loss's divisor is not the pass's weight."""
    found = tree.__dict__.get("_gg104_hooks")
    if found is None:
        functions = {n.name: n for n in subtree(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        found = tree._gg104_hooks = any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                n.func.attr == "register_hook" and len(n.args) == 1 and _rescaling_callback(n.args[0], functions, 0)
                or n.func.attr == "register_comm_hook" and len(n.args) == 2 and _rescaling_comm_hook(n.args[1], functions, 0)
                and _defers_sync(tree))
            for n in subtree(tree))
    return found


def _rescaling_comm_hook(node: ast.AST, functions: dict, depth: int) -> bool:
    """A DDP communication hook (``model.register_comm_hook(state, hook)``) that multiplies or divides its
    bucket's gradients before or after reducing them (``bucket.buffer().div_(k)``); a function of the file,
    or one a function of the file returns (a wrapper around ``allreduce_hook``)."""
    if depth > 3:
        return False
    if isinstance(node, ast.Call):
        fn = functions.get(terminal(node.func))
        return fn is not None and any(_rescaling_comm_hook(r, functions, depth + 1) for r in returns_of(fn))
    if isinstance(node, (ast.Name, ast.Attribute)):
        fn = functions.get(terminal(node))
        return fn is not None and _scales_bucket(fn)
    return False


def _defers_sync(tree: ast.AST) -> bool:
    """The file back-propagates inside ``with model.no_sync():``: DDP reduces, and runs its hook, once per
    window on the gradients summed over it (a hook dividing on every pass would divide the partial sums
    again and again)."""
    return any(isinstance(n, (ast.With, ast.AsyncWith)) and any(
        isinstance(i.context_expr, ast.Call) and terminal(i.context_expr.func) == "no_sync" for i in n.items)
        for n in subtree(tree))


def _scales_bucket(fn: ast.AST) -> bool:
    """``fn(state, bucket)`` multiplies or divides what it reads from its bucket (its last parameter)."""
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args if a.arg not in ("self", "cls")]
    if len(params) != 2:
        return False

    def reads_bucket(expr: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id == params[1] for n in subtree(expr))

    for n in subtree(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("div_", "mul_", "div", "mul") \
                and reads_bucket(n.func.value):
            return True
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.Mult)) and (reads_bucket(n.left) or reads_bucket(n.right)):
            return True
    return False


def _rescaling_callback(node: ast.AST, functions: dict, depth: int) -> bool:
    if depth > 3:
        return False
    if isinstance(node, ast.Lambda):
        return _rescales_param(node.body, node)
    if isinstance(node, ast.Call):  # a factory: `self._scale_hook(i)` returns the hook
        fn = functions.get(terminal(node.func))
        return fn is not None and any(_rescaling_callback(r, functions, depth + 1) for r in returns_of(fn))
    if isinstance(node, (ast.Name, ast.Attribute)):
        fn = functions.get(terminal(node))
        return fn is not None and any(_rescales_param(r, fn) for r in returns_of(fn))
    return False


def _rescales_param(expr: ast.AST, fn: ast.AST) -> bool:
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args if a.arg not in ("self", "cls")]
    return (bool(params) and isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Div))
            and any(isinstance(side, ast.Name) and side.id == params[0] for side in (expr.left, expr.right)))


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
    if isinstance(expr, tuple):  # ("aug", op, node)
        if isinstance(expr[1], (ast.Add, ast.Sub)) and len(expr) > 2:
            # `total += term`: the sum holds the term as it is (a mean added stays undivided)
            return loss_scale(expr[2].value, assigns, loop, depth + 1)
        return "scaled" if isinstance(expr[1], (ast.Div, ast.Mult, ast.FloorDiv)) else "unknown"
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.Mult):
            # `alpha * kd + (1 - alpha) * ce`: a mean times a weight that is no 1/K is still a
            # mean, and a weighted sum of means is one too
            for side, weight in ((expr.left, expr.right), (expr.right, expr.left)):
                if _is_weight(weight, loop) and loss_scale(side, assigns, loop, depth + 1) == "raw":
                    return "raw"
            return "scaled"
        if isinstance(expr.op, (ast.Div, ast.FloorDiv)):
            if _is_one(expr.right, assigns):  # `loss / d` with `d` left at its default 1: no division
                return loss_scale(expr.left, assigns, loop, depth + 1)
            if _mean_of_terms(expr, loop):  # `(start_loss + end_loss) / 2`: a mean of the pass's terms
                return loss_scale(expr.left, assigns, loop, depth + 1)
            if _is_sum(expr.left, assigns) and _counts_micro_batch(expr.right, assigns, loop):
                # `(ce * mask).sum() / mask.sum()`: a token mean of this micro-batch, divided by its own
                # count, no window's number of micro-batches
                return "raw"
            return "scaled"
        if isinstance(expr.op, (ast.Add, ast.Sub)):
            # a term left as a plain mean is not divided by the window, whatever scales the other
            # (`aux + 0.5 * mse`, or `ce + reg / accum` that forgot the first term)
            sides = {loss_scale(expr.left, assigns, loop, depth + 1), loss_scale(expr.right, assigns, loop, depth + 1)}
            return "raw" if sides <= {"raw", "scaled"} and "raw" in sides else ("scaled" if "scaled" in sides else "unknown")
        return "unknown"
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        # `-(advantages * logprobs).mean()`: a sign changes no divisor (the mean stays undivided)
        return loss_scale(expr.operand, assigns, loop, depth + 1)
    if isinstance(expr, ast.Name):
        values = assigns.get(expr.id)
        if values and any(v is None for v in values):
            # bound by `with f(...) as name`: the call; a name a `for` binds stays unknown
            context = _context_values(expr.id, loop)
            if context and values.count(None) <= len(context):
                values = [v for v in values if v is not None] + context
        if not values:
            return "unknown"  # computed outside the loop: cannot tell
        # a number (`total = 0.` before `total += term`) has no gradient: it weighs no pass
        values = [v for v in values if not _is_number(v)] or values
        added, base = _added_terms(values, expr.id)
        kinds = {loss_scale(v, assigns if not self_ref(v, expr.id) else {**assigns, expr.id: _earlier(values, v)}, loop, depth + 1)
                 for v in base or values}
        kind = "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
        if base and added:
            # `loss = ce(...)` then `loss += reg`: the name holds the sum of both, read like `ce + reg`
            # (a mean left undivided stays one whatever the added term weighs), not as alternatives
            sides = {kind} | {loss_scale(v, assigns, loop, depth + 1) for v in added}
            return "raw" if sides <= {"raw", "scaled"} and "raw" in sides else ("scaled" if "scaled" in sides else "unknown")
        return kind
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and assigns.get(text(expr)):
        # `out["elbo"] = out["elbo"] / K` in the loop (see _attribute_assignments)
        kinds = {loss_scale(v, {**assigns, text(expr): []}, loop, depth + 1) for v in assigns[text(expr)]}
        return "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
    if (isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant)
            and any(_every_entry_divided(root, text(expr.value))
                    for root in [loop.node] + [f for b in loop.backwards for f, _ in b.frame])):
        return "scaled"  # `for k, v in out.items(): out[k] = v / K` before `loss = out["loss"]`
    if isinstance(expr, ast.Subscript):  # outputs[0]; `loss, result = forward()` (see assignments)
        element = loop.returned_element(expr)
        if element is not None:
            helper, values = element
            inner = {**assigns, **_defaults(helper), **bind_arguments(helper, expr.value), **assignments(helper)}
            kinds = {loss_scale(v, inner, loop, depth + 1) for v in values}
            return "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
        element = _forward_element(expr, assigns, loop)
        if element is not None:  # `logits, loss = model(x, y)`: the i-th element of what its forward returns
            inner, values = element
            kinds = {loss_scale(v, inner, loop, depth + 1) for v in values}
            return "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
        return loss_scale(expr.value, assigns, loop, depth + 1)
    if isinstance(expr, ast.Attribute):  # outputs.loss
        values = assigns.get(text(expr))  # `outputs.loss /= K` in the loop (see _attribute_assignments)
        if values:
            kinds = {loss_scale(v, {**assigns, text(expr): []}, loop, depth + 1) for v in values}
            return "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
        return loss_scale(expr.value, assigns, loop, depth + 1)
    if isinstance(expr, ast.Call):
        func = expr.func
        name = terminal(func)
        if isinstance(func, ast.Attribute) and name == "scale" and "scaler" in terminal(func.value).lower() and expr.args:
            return loss_scale(expr.args[0], assigns, loop, depth + 1)  # GradScaler.scale(loss)
        if name == "scale_loss" and expr.args:
            # apex's `with amp.scale_loss(loss, opt) as scaled:`: a factor the optimizer takes off again
            return loss_scale(expr.args[0], assigns, loop, depth + 1)
        if isinstance(func, ast.Attribute) and name in _ARITH and len(expr.args) == 1 and not expr.keywords:
            # `loss.sum().mul(c / n)`, `loss.div(k)`: the operator written as a method, read as the operator
            op = ast.BinOp(func.value, _ARITH[name](), expr.args[0])
            return loss_scale(ast.copy_location(op, expr), assigns, loop, depth + 1)
        if name == "cast" and len(expr.args) == 2:
            return loss_scale(expr.args[1], assigns, loop, depth + 1)  # typing.cast(torch.Tensor, loss)
        if isinstance(func, ast.Attribute) and name in ("mean", "float", "squeeze", "to", "cuda", "contiguous"):
            return loss_scale(func.value, assigns, loop, depth + 1) if name != "mean" else "raw"
        helper = loop.callee(expr)
        if helper is not None:  # what the helper returns, its parameters bound to the arguments
            inner = {**assigns, **_defaults(helper), **bind_arguments(helper, expr), **assignments(helper)}
            kinds = {loss_scale(v, inner, loop, depth + 1) for v in returns_of(helper)}
            return "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
        lambdas = loop.lambdas_of(expr)
        if lambdas:  # `loss_fn = lambda out, y: F.mse_loss(out, y) / K`: what its body computes
            kinds = {loss_scale(f.body, {**assigns, **_defaults(f), **bind_arguments(f, expr)}, loop, depth + 1)
                     for f in lambdas}
            return "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
        forward = _forward_of(func, assigns, loop)
        if forward is not None:  # a module object of this file: what its forward returns
            inner = _forward_scope(forward, expr, assigns)
            kinds = {loss_scale(v, inner, loop, depth + 1) for v in returns_of(forward)}
            return "scaled" if "scaled" in kinds else ("raw" if kinds == {"raw"} else "unknown")
        if isinstance(func, ast.Name) and func.id in module.functions:
            return "unknown"
        if terminal(func) in module.sum_losses:
            return "unknown"  # a loss object built with reduction="sum" elsewhere in the file
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
                and not _LOSS_OBJECT.search(name) and not _MODEL_OBJECT.search(name) and name not in _object_attrs(loop)):
            return "unknown"  # an inherited method (a Trainer's compute_loss) may scale
        if name in ("sum", "item") or re.search(r"scale|norm|weight|accum", name, re.IGNORECASE):
            return "unknown"
        for k in expr.keywords:
            if k.arg == "reduction" and not (isinstance(k.value, ast.Constant) and k.value.value in ("mean", "batchmean")):
                return "unknown"
        if ACCUM_NAME.search(text(expr)):
            return "unknown"
        return "raw"
    return "unknown"


def _every_entry_divided(root: ast.AST, container: str) -> bool:
    """A loop over every entry of ``container`` (``for k, v in d.items()``, ``for k in d``) whose body, at its
    top level, divides the entry it is at in place (``d[k] = v / K``, ``d[k] = d[k] / K``, ``d[k] /= K``):
    every term read out of it afterwards is divided."""
    for n in subtree(root):
        if not isinstance(n, (ast.For, ast.AsyncFor)):
            continue
        it, target = n.iter, n.target
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "keys") and not it.args:
            over = it.func.value
        else:
            over = it
        if text(over) != container:
            continue
        key = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else target
        value = target.elts[1] if isinstance(target, ast.Tuple) and len(target.elts) == 2 else None
        if not isinstance(key, ast.Name):
            continue
        entry = f"{container}[{key.id}]"
        for st in n.body:
            if isinstance(st, ast.AugAssign) and isinstance(st.op, ast.Div) and text(st.target) == entry:
                return True
            if (isinstance(st, ast.Assign) and len(st.targets) == 1 and text(st.targets[0]) == entry
                    and isinstance(st.value, ast.BinOp) and isinstance(st.value.op, ast.Div)
                    and (text(st.value.left) == entry or (isinstance(value, ast.Name) and text(st.value.left) == value.id))):
                return True
    return False


def _earlier(values: list, value) -> list:
    """What ``loss = loss.mean()`` reads as ``loss``: the bindings on lines above it (the loop's
    body runs top to bottom); none known, nothing (read as unknown)."""
    line = _line(value)
    if line is None or any(_line(v) is None for v in values):
        return []
    return [v for v in values if _line(v) < line]


def _added_terms(values: list, name: str) -> tuple:
    """A name's bindings split into the ``name += term`` values that add to what the name held and
    the others; those above the last rebinding from the name itself (``loss += aux`` then ``loss =
    loss / K``, read through it) are left out of both."""
    rebinds = [_line(v) for v in values if not isinstance(v, tuple) and self_ref(v, name) and _line(v) is not None]
    last = max(rebinds, default=None)
    if last is not None and any(_line(v) is None for v in values):
        last = None
    kept = [v for v in values if last is None or _line(v) >= last]
    added = [v for v in kept if isinstance(v, tuple) and len(v) > 2 and isinstance(v[1], (ast.Add, ast.Sub))]
    return added, [v for v in kept if not any(v is a for a in added)]


def _forward_of(func: ast.expr, assigns: dict, loop: Loop):
    """The ``forward`` of a module object of this file that ``func`` calls; a helper's parameter
    bound to the caller's object (``def loss_of(m, x): return m(x)``) is read as that object."""
    values = assigns.get(func.id) if isinstance(func, ast.Name) else None
    if values and len(values) == 1 and isinstance(values[0], (ast.Name, ast.Attribute)):
        func = values[0]
    return loop.module.forward_of(func, loop.scope)


def _forward_scope(forward: ast.AST, call: ast.Call, assigns: dict) -> dict:
    """The names inside ``forward`` when ``call`` runs it: its parameters (less ``self``) bound
    to the call's arguments, over its defaults and the caller's names."""
    params = [a.arg for a in forward.args.posonlyargs + forward.args.args][1:]
    bound = {p: [a] for p, a in zip(params, call.args) if not isinstance(a, ast.Starred)}
    bound.update({k.arg: [k.value] for k in call.keywords if k.arg is not None})
    return {**assigns, **_defaults(forward), **bound, **assignments(forward)}


def _forward_element(expr: ast.Subscript, assigns: dict, loop: Loop):
    """``model(x)[i]`` (``logits, loss = model(x, y)``, see ``assignments``) of a module object of
    this file whose forward returns tuples only: ``(its names, [the i-th element of each])``;
    None otherwise."""
    index, call = expr.slice, expr.value
    if not (isinstance(index, ast.Constant) and type(index.value) is int and index.value >= 0):
        return None
    if not isinstance(call, ast.Call):
        return None
    forward = _forward_of(call.func, assigns, loop)
    values = returns_of(forward) if forward is not None else []
    if not values or not all(isinstance(v, ast.Tuple) and len(v.elts) > index.value for v in values):
        return None
    return _forward_scope(forward, call, assigns), [v.elts[index.value] for v in values]


def _object_attrs(loop: Loop) -> frozenset:
    """The attributes the loop's class assigns (``self.student = student``): calling one calls an
    object the class holds (a model, a loss), not an inherited method that may scale."""
    cls = loop.cls
    if not isinstance(cls, ast.ClassDef):
        return frozenset()
    cached = cls.__dict__.get("_gg104_attrs")
    if cached is None:
        found = set()
        for n in subtree(cls):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
            for t in targets:
                for e in t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                        found.add(e.attr)
        cached = cls._gg104_attrs = frozenset(found)
    return cached


def _context_values(name: str, loop: Loop) -> list:
    """What the loop binds ``name`` to with ``with f(...) as name``: the call ``f(...)`` (read by
    :func:`loss_scale` like a value assigned to it)."""
    return [i.context_expr for n in body_nodes(loop.node) if isinstance(n, (ast.With, ast.AsyncWith))
            for i in n.items if isinstance(i.optional_vars, ast.Name) and i.optional_vars.id == name]


def _mean_of_terms(div: ast.BinOp, loop: Loop) -> bool:
    """``(a + b) / 2``: a sum of n terms divided by the literal n, a mean of this pass's terms, not a
    division by the window (unless the window's literal size is that n too)."""
    n = div.right.value if isinstance(div.right, ast.Constant) and type(div.right.value) is int else None
    if n is None or n < 2:
        return False
    terms, stack = 0, [div.left]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
            stack += [e.left, e.right]
        else:
            terms += 1
    if terms != n:
        return False
    window = loop.window_size()
    return (literal_int(window, loop) if window is not None else None) != n


def _is_number(value) -> bool:
    """A literal int or float (not a bool): a value with no gradient."""
    return isinstance(value, ast.Constant) and type(value.value) in (int, float)


def _is_sum(expr: ast.expr, assigns: dict, depth: int = 0) -> bool:
    """``x.sum()`` / ``torch.sum(x)`` (no ``dim``), or a name every value of which is one."""
    if isinstance(expr, ast.Name) and depth < 4:
        values = assigns.get(expr.id) or []
        return bool(values) and all(isinstance(v, ast.AST) and _is_sum(v, {**assigns, expr.id: []}, depth + 1) for v in values)
    return (isinstance(expr, ast.Call) and terminal(expr.func) == "sum" and not expr.keywords
            and len(expr.args) == (0 if _is_method_on_tensor(expr) else 1))


def _is_method_on_tensor(call: ast.Call) -> bool:
    """``x.sum()`` rather than ``torch.sum(x)``."""
    return isinstance(call.func, ast.Attribute) and text(call.func.value) not in ("torch",)


_COUNTS = ("sum", "numel", "count_nonzero")


def _counts_micro_batch(expr: ast.expr, assigns: dict, loop: Loop, depth: int = 0) -> bool:
    """``mask.sum()``, ``mask.sum() + 1e-8``, ``mask.sum().clamp(min=1)``, ``labels.numel()``, or a name bound to
    one: a count taken of a tensor the iteration derives from its own micro-batch (the loop's variable, through
    the names, unpackings, attributes, subscripts and method calls that lead to it), not of the whole window."""
    if depth > 6 or expr is None:
        return False
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):  # an epsilon against an empty mask
        for count, other in ((expr.left, expr.right), (expr.right, expr.left)):
            if isinstance(other, ast.Constant) and isinstance(other.value, (int, float)) and not isinstance(other.value, bool):
                return _counts_micro_batch(count, assigns, loop, depth + 1)
        return False
    if isinstance(expr, ast.Name):
        values = assigns.get(expr.id) or []
        return len(values) == 1 and isinstance(values[0], ast.AST) and _counts_micro_batch(values[0], assigns, loop, depth + 1)
    if not isinstance(expr, ast.Call):
        return False
    name = terminal(expr.func)
    if name in ("clamp", "clamp_min", "float", "to") and isinstance(expr.func, ast.Attribute):
        return _counts_micro_batch(expr.func.value, assigns, loop, depth + 1)
    if name not in _COUNTS or expr.keywords:
        return False
    if _is_method_on_tensor(expr):
        counted = expr.func.value if not expr.args else None
    else:
        counted = expr.args[0] if len(expr.args) == 1 else None
    return counted is not None and _from_micro_batch(counted, assigns, loop)


def _from_micro_batch(expr: ast.expr, assigns: dict, loop: Loop, depth: int = 0) -> bool:
    """``expr`` is read from the iteration's micro-batch: its root name is the loop's variable (or its
    micro-step loop's), or is bound only to values read from it."""
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)) and depth < 12:
        depth += 1
        if isinstance(expr, ast.Call):
            if not isinstance(expr.func, ast.Attribute):
                return False
            expr = expr.func.value  # `mask.flatten()`, `batch["mask"].float()`
        else:
            expr = expr.value
    if not isinstance(expr, ast.Name) or depth > 12:
        return False
    if expr.id in _loop_variables(loop):
        return True
    values = assigns.get(expr.id) or []
    return len(values) == 1 and isinstance(values[0], ast.AST) and _from_micro_batch(values[0], {**assigns, expr.id: []}, loop, depth + 1)


def _loop_variables(loop: Loop) -> set:
    """The names the loop (and its micro-step loop) binds each micro-batch to."""
    out = set()
    for node in (loop.node, loop._micro_loop()):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            out.update(n.id for n in subtree(node.target) if isinstance(n, ast.Name))
    return out


def _is_one(expr: ast.expr, assigns: dict) -> bool:
    """``1`` or a name every value of which is the literal 1 (a helper's default divisor)."""
    if isinstance(expr, ast.Constant):
        return expr.value == 1 and not isinstance(expr.value, bool)
    if isinstance(expr, ast.Name):
        values = assigns.get(expr.id)
        return bool(values) and all(isinstance(v, ast.Constant) and v.value == 1 and not isinstance(v.value, bool) for v in values)
    return False


def _is_weight(expr: ast.expr, loop: Loop) -> bool:
    """A loss weight the source proves is no division by the window size: a literal (or names
    bound once to literals, ``alpha = 0.5``) that is not 1/K for the window's literal K (with K
    not known, a weight of magnitude 1 or more, which no 1/K is)."""
    value = literal_number(expr, loop)
    if value is None:
        return _sibling_setting(expr, loop)
    if value == 0:
        return False
    window = loop.window_size()
    k = literal_int(window, loop) if window is not None else None
    return abs(value * k - 1) > 1e-9 if k else abs(value) >= 1


def _sibling_setting(expr: ast.expr, loop: Loop) -> bool:
    """``args.alpha_ce`` where the window's size is ``args.gradient_accumulation_steps``: another
    setting of the object that holds the window's size, which the file never assigns. The user sets
    it, next to the size; a divisor by the window is computed from the size, so this weight is none."""
    window = loop.window_size()
    # (a window a modulo test closes only: each of its passes is a new batch of the data loop, where a
    # `for _ in range(K)` loop may be K refinements of one batch, a sum the program means)
    if not isinstance(window, ast.Attribute) or not loop.window_paths():
        return False
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Pow)):  # `args.temperature ** 2`
        return all(_sibling_setting(side, loop) or literal_number(side, loop) is not None for side in (expr.left, expr.right)) \
            and not all(literal_number(side, loop) is not None for side in (expr.left, expr.right))
    if not isinstance(expr, ast.Attribute):
        return False
    return text(expr.value) == text(window.value) and expr.attr != window.attr and loop.module.unbound(text(expr))


# --- the fix ---------------------------------------------------------------------
def fix(t: Tree, d: Diagnostic) -> Optional[Fix]:
    """GG104 unscaled-accumulation: divide the loss by the window's number of micro-batches.

    The divisor is the accumulation variable the model found for the loop (``K`` of the
    ``% K`` test that closes the window, ``range(K)`` of the micro-step loop). The loss is
    divided where it is back-propagated (``(loss / K).backward()``), so that the loss the code
    logs keeps its value: the gradient is the only thing that changes. Without such a variable,
    when it is not visible where the backward runs (a test in the loop, the backward in a
    helper), or when a step also closes a shorter window (``or i + 1 == len(loader)``, or a step
    after the loop applying the remainder, whose micro-batches dividing by K would weigh K'/K of
    their mean), there is no certain fix (use
    ``gradguard.Accumulator``).
    """
    count, back = d.accum, t.statement_of(d.backward)
    if d.loop is not None and count is not None and may_close_short(d.loop, count):
        return None  # a short window divided by K would weigh K'/K of its mean (GG111)
    if d.loop is not None and back is not None and count is not None and _micro_loop_unsized(t, d.loop.node, back, count):
        return None  # the same, for a micro-step loop over a slice or chunks that may hold fewer than K
    loss = backward_tensor(d.backward)
    if isinstance(loss, ast.Call) and isinstance(loss.func, ast.Attribute) and loss.func.attr == "scale" and loss.args:
        loss = loss.args[0]  # scaler.scale(loss).backward(): divide the loss, not the scaled one
    if count is None or loss is None or back is None or not _visible(t, count, back):
        return None
    k = parenthesize(t, count)
    # divided where it is back-propagated and nowhere else: the loss the code logs keeps its value
    (line, col), (end_line, end_col) = t.start(loss), t.end(loss)
    return Fix(f"Divide the loss by `{t.segment(count)}`", (Edit(line, col, end_line, end_col, f"({parenthesize(t, loss)} / {k})"),))


def _micro_loop_unsized(t: Tree, loop_node: ast.AST, back: ast.AST, count: ast.AST) -> bool:
    """The pass runs in a loop nested in the window's loop that iterates something other than
    ``range(K)`` (``enumerate(batches[i:i + K])``, ``x.chunk(K)``): its last run may hold fewer than K
    micro-batches, and dividing each of them by K would weigh that window K'/K of its mean."""
    for n in subtree(loop_node):
        if n is loop_node or not isinstance(n, (ast.For, ast.AsyncFor)) or not t.contains(n, back):
            continue
        it = n.iter
        if isinstance(it, ast.Call) and terminal(it.func) == "enumerate" and it.args:
            it = it.args[0]
        if not (isinstance(it, ast.Call) and terminal(it.func) == "range" and len(it.args) == 1
                and text(it.args[0]) == text(count)):
            return True
    return False


def _visible(t: Tree, count: ast.AST, at: ast.AST) -> bool:
    """The names of ``count`` mean the same at ``at``: a constant, or written in the function of
    ``at`` or in one enclosing it (a closure reads its enclosing function's names)."""
    if not any(isinstance(n, ast.Name) for n in subtree(count)):
        return True
    home = t.function_of(count)
    return home is t.function_of(at) or (home is not None and t.contains(home, at))
