"""Recall of ``gradguard lint`` on seeded bugs: a corpus of correct training programs, mutated.

The corpus (``tests/lint_corpus/*.py``) holds correct training programs in the styles real
projects use. Seven mutation operators put one kind of gradient-buffer bug into them,
mechanically (``ast`` + source positions, never by hand):

=========================  ======  ===============================================================
operator                   expect  what it does
=========================  ======  ===============================================================
remove-clear               GG101   delete every gradient clearing (``zero_grad()``, ``p.grad = None``,
                                   ``p.grad.zero_()``, ``for p in ...: p.grad = None``)
clear-before-backward      GG102   in an accumulation loop, move the clearing that ends the window to
                                   just before the backward pass
drop-loss-division         GG104   remove the division of the loss by the accumulation count
loss-tensor-in-sum         GG201   ``total += loss.item()`` -> ``total += loss`` (outside ``no_grad``; not
                                   where the value is detached first: ``loss.detach().item()``,
                                   ``loss.data.item()`` sum no graph without ``.item()`` either)
divide-by-micro-step       GG105   divide the loss by the running micro-step counter instead of the
                                   accumulation count (weights 1, 1/2, 1/3, ...)
drop-last-window           GG103   in a loop that steps on a modulo window and also steps the last,
                                   partial window, remove that flush: the last-batch term of the
                                   window's test (``or i + 1 == len(loader)``, ``last_batch or``)
                                   and the block after the loop that steps
clear-after-backward       GG102   in an accumulation loop whose backward pass sits in a micro-step
                                   loop (or under the window's ``if``), move the clearing that ends
                                   the window to just after the backward pass: every micro-batch's
                                   gradient is wiped, the step applies nothing
=========================  ======  ===============================================================

A mutant is caught when the linter reports more findings of the expected code on it than
on the original. The originals must give no finding at all (false positives).
A corpus file opts out of an operator with a first-lines comment
``# mutation: skip OPERATOR (why)`` when the mutant would not be a bug (an equivalent mutant).

Usage (from the repository root)::

    python benchmarks/lint_recall.py            # table
    python benchmarks/lint_recall.py --json     # machine-readable report
    python benchmarks/lint_recall.py -v         # also list every missed mutant
    python benchmarks/lint_recall.py --fix -v   # `lint --fix --unsafe-fixes` on every mutant: repaired?
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "lint_corpus"

# ---------------------------------------------------------------------------------------------
# source editing by position


class Mutant(NamedTuple):
    program: str  # corpus file name
    operator: str
    expect: str  # the rule code the bug should raise
    index: int  # which site of the program (0.. for operators with one mutant per site)
    source: str


def _line_starts(source: str) -> List[int]:
    starts = [0]
    for m in re.finditer(r"\r\n|\r|\n", source):
        starts.append(m.end())
    return starts


class _Src:
    """A source text with ast positions (1-based line, UTF-8 byte column) mapped to offsets."""

    def __init__(self, source: str):
        self.text = source
        self.starts = _line_starts(source)

    def offset(self, line: int, col: int) -> int:
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        prefix = self.text[start:end].encode("utf-8")[:col].decode("utf-8", errors="ignore")
        return start + len(prefix)

    def span(self, node: ast.AST) -> Tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.text[a:b]

    def line_span(self, node: ast.stmt) -> Tuple[int, int]:
        """The whole lines of a statement, newline included."""
        a = self.starts[node.lineno - 1]
        b = self.starts[node.end_lineno] if node.end_lineno < len(self.starts) else len(self.text)
        return a, b

    def indent(self, node: ast.stmt) -> str:
        a = self.starts[node.lineno - 1]
        line = self.text[a : self.offset(node.lineno, node.col_offset)]
        return line if not line.strip() else " " * node.col_offset


def _apply(text: str, edits: Sequence[Tuple[int, int, str]]) -> str:
    for a, b, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        text = text[:a] + new + text[b:]
    return text


def _newline(text: str) -> str:
    m = re.search(r"\r\n|\r|\n", text)
    return m.group(0) if m else "\n"


# ---------------------------------------------------------------------------------------------
# what the statements are (small, syntactic: the mutants need no program model)

_BACKWARD_FUNCS = {"backward", "manual_backward"}


def _calls(node: ast.AST) -> Iterator[ast.Call]:
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            yield n


def _attr(call: ast.Call) -> Optional[str]:
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def is_backward_stmt(stmt: ast.stmt) -> bool:
    """``loss.backward()``, ``scaler.scale(l).backward()``, ``accelerator.backward(l)``, ``self.manual_backward(l)``."""
    if not isinstance(stmt, ast.Expr):
        return False
    return any(_attr(c) in _BACKWARD_FUNCS for c in _calls(stmt.value))


def _is_scheduler(expr: ast.AST) -> bool:
    text = ast.unparse(expr).lower()
    return "sched" in text or text.endswith("lr") or "ema" in text


def is_step_stmt(stmt: ast.stmt) -> bool:
    """``opt.step()`` / ``scaler.step(opt)`` / ``optimizer.step(closure)``, not an LR scheduler's or an EMA's."""
    if not isinstance(stmt, (ast.Expr, ast.Assign)):
        return False
    call = stmt.value
    return isinstance(call, ast.Call) and _attr(call) == "step" and not _is_scheduler(call.func.value)


def _is_grad(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr == "grad"


def is_clear_stmt(stmt: ast.stmt) -> bool:
    """A statement whose whole effect is clearing gradients."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        attr = _attr(stmt.value)
        if attr == "zero_grad":
            return True
        if attr in ("zero_", "detach_") and _is_grad(stmt.value.func.value):
            return True
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
        return all(_is_grad(t) for t in stmt.targets)
    if isinstance(stmt, ast.For) and not stmt.orelse:
        return all(is_clear_stmt(s) for s in stmt.body)
    return False


_NO_GRAD = re.compile(r"\b(no_grad|inference_mode)\b")


class _Tree:
    """The parsed program with parent links and the statement lists each statement sits in."""

    def __init__(self, source: str):
        self.src = _Src(source)
        self.tree = ast.parse(source)
        self.parent: Dict[ast.AST, ast.AST] = {}
        self.block: Dict[ast.stmt, List[ast.stmt]] = {}
        for node in ast.walk(self.tree):
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(node, field, None)
                if isinstance(stmts, list):
                    for s in stmts:
                        if isinstance(s, ast.stmt):
                            self.block[s] = stmts
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.stmts = [n for n in ast.walk(self.tree) if isinstance(n, ast.stmt)]
        self.stmts.sort(key=lambda s: (s.lineno, s.col_offset))

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parent:
            node = self.parent[node]
            yield node

    def contains(self, outer: ast.AST, inner: ast.AST) -> bool:
        return inner is outer or outer in set(self.ancestors(inner))

    def in_no_grad(self, node: ast.AST) -> bool:
        for a in self.ancestors(node):
            if isinstance(a, (ast.With, ast.AsyncWith)) and any(_NO_GRAD.search(ast.unparse(i.context_expr)) for i in a.items):
                return True
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(_NO_GRAD.search(ast.unparse(d)) for d in a.decorator_list):
                return True
        return False

    def top_clears(self) -> List[ast.stmt]:
        """Clearing statements, outermost only (a clearing ``for`` loop, not its body)."""
        found = [s for s in self.stmts if is_clear_stmt(s)]
        return [s for s in found if not any(self.contains(o, s) for o in found if o is not s)]

    def shares_line(self, s: ast.stmt) -> bool:
        """Whether ``s`` has a line in common with another statement of its block (``a(); b()``) or with
        the header of the statement holding it (``if x: opt.zero_grad()``)."""
        if any(t is not s and t.lineno <= s.end_lineno and t.end_lineno >= s.lineno for t in self.block[s]):
            return True
        parent = self.parent.get(s)
        return isinstance(parent, ast.stmt) and parent.lineno == s.lineno

    def remove(self, stmts: Sequence[ast.stmt]) -> List[Tuple[int, int, str]]:
        """Edits deleting whole statements; a block left empty keeps a ``pass``. A statement sharing its
        line with others (``loss.backward(); opt.zero_grad()``) loses only its own text and one ``;``."""
        edits = []
        gone = set(map(id, stmts))
        for s in stmts:
            block = self.block[s]
            survivors = [t for t in block if id(t) not in gone]
            if self.shares_line(s):
                edits.append(self._remove_in_line(s, block, keep_pass=not survivors and s is block[0]))
                continue
            a, b = self.src.line_span(s)
            if not survivors and s is block[0]:
                nl = _newline(self.src.text)
                edits.append((a, b, f"{self.src.indent(s)}pass{nl}"))
            else:
                edits.append((a, b, ""))
        return edits

    def _remove_in_line(self, s: ast.stmt, block: List[ast.stmt], keep_pass: bool) -> Tuple[int, int, str]:
        a, b = self.src.span(s)
        if keep_pass:
            return a, b, "pass"
        at = block.index(s)
        after = block[at + 1] if at + 1 < len(block) else None
        before = block[at - 1] if at else None
        if after is not None and after.lineno == s.end_lineno:
            return a, self.src.span(after)[0], ""  # `clear; rest` -> `rest`
        if before is not None and before.end_lineno == s.lineno:
            return self.src.span(before)[1], b, ""  # `rest; clear` -> `rest`
        return a, b, "pass"  # `if x: clear` alone in its block


# ---------------------------------------------------------------------------------------------
# accumulation windows: a backward and the step that ends its window


class Window(NamedTuple):
    scope: ast.AST  # the innermost loop or function holding both
    backward: ast.stmt
    step: ast.stmt
    counts: Tuple[str, ...]  # source of the accumulation count(s): `K` of `i % K` / `range(K)`
    counter: Optional[str]  # source of the running micro-step number (1, 2, ..., K)


_SCOPES = (ast.For, ast.While, ast.AsyncFor, ast.FunctionDef, ast.AsyncFunctionDef)


def _operand(node: ast.AST, t: _Tree) -> str:
    text = t.src.segment(node)
    return text if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)) else f"({text})"


def _mod_counter(mod: ast.BinOp, t: _Tree) -> str:
    """The micro-step number 1..K of a window closed by ``L % K``: ``(N % K + 1)`` for ``L = N + 1``."""
    k = _operand(mod.right, t)
    left = mod.left
    if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add) and isinstance(left.right, ast.Constant) and left.right.value == 1:
        left = left.left
    return f"({_operand(left, t)} % {k} + 1)"


def find_windows(t: _Tree) -> List[Window]:
    windows: List[Window] = []
    backwards = [s for s in t.stmts if is_backward_stmt(s)]
    for step in (s for s in t.stmts if is_step_stmt(s)):
        for scope in (a for a in t.ancestors(step) if isinstance(a, _SCOPES)):
            before = [b for b in backwards if t.contains(scope, b) and b.lineno < step.lineno]
            if not before:
                continue
            back = before[-1]
            step_path = [a for a in t.ancestors(step) if t.contains(scope, a) and a is not scope]
            back_path = [a for a in t.ancestors(back) if t.contains(scope, a) and a is not scope]
            guarded = any(isinstance(a, ast.If) and not t.contains(a, back) for a in step_path)
            inner = [a for a in back_path if isinstance(a, (ast.For, ast.AsyncFor, ast.While)) and not t.contains(a, step)]
            accumulate = any(
                isinstance(a, (ast.With, ast.AsyncWith)) and any(".accumulate(" in ast.unparse(i.context_expr) for i in a.items)
                for a in t.ancestors(step)
            )
            if guarded or inner or accumulate:
                # counts, counter, clears and divisions are looked for in the loop around the step
                # (timm divides in a `_forward` closure and steps in a `_backward` one, both in the loop)
                region = next((a for a in t.ancestors(step) if isinstance(a, (ast.For, ast.While, ast.AsyncFor))), scope)
                counts, counter = [], None
                for loop in inner:
                    it = getattr(loop, "iter", None)
                    if isinstance(it, ast.Call) and ast.unparse(it.func) == "range" and len(it.args) == 1:
                        counts.append(t.src.segment(it.args[0]))
                        if counter is None and isinstance(loop.target, ast.Name):
                            counter = f"({loop.target.id} + 1)"
                # the micro-step number comes from the modulo of the test that guards the step (not
                # an `assert a % b == 0` or a logging interval elsewhere in the loop)
                tests = [a.test for a in t.ancestors(step) if isinstance(a, ast.If) and t.contains(region, a)]
                read = {n.id for test in tests for n in ast.walk(test) if isinstance(n, ast.Name)}
                tests += [n.value for n in ast.walk(region)
                          if isinstance(n, ast.Assign) and any(isinstance(tg, ast.Name) and tg.id in read for tg in n.targets)]
                guard_mods = [n for test in tests for n in ast.walk(test) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)]
                for n in ast.walk(region):
                    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                        counts.append(t.src.segment(n.right))
                if guard_mods:
                    counter = counter or _mod_counter(guard_mods[0], t)
                if all(w.backward is not back for w in windows):  # one window per backward: the first step ends it
                    windows.append(Window(region, back, step, tuple(dict.fromkeys(counts)), counter))
            break
    return windows


def _divisions(t: _Tree, w: Window) -> List[ast.AST]:
    """Divisions of a loss by the window's accumulation count, inside the window's scope."""
    found = []
    for n in ast.walk(w.scope):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and t.src.segment(n.right) in w.counts:
            if not t.in_no_grad(n) and "item()" not in t.src.segment(n.left):
                found.append(n)
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Div) and t.src.segment(n.value) in w.counts:
            found.append(n)
    return found


def _accumulates(t: _Tree, w: Window) -> bool:
    """Whether the window sums more than one backward pass into one step, so that a clearing moved
    before its backward pass, or a loss division dropped, changes what the step applies:

    - a clearing that runs on every pass before the backward pass (the same loop body, no ``if``
      around it) leaves one pass per step: no window;
    - a step guarded by a test that picks no window (``if iteration < max_iter + 1:``, ``if (i + 1) %
      1 == 0:``) with no micro-step loop around the backward pass steps every pass: no window. A
      window test is a modulo by anything but the literal 1, or ``==`` / ``>=`` against a name or
      attribute the file counts up or down (``self.task_index += 1``, ``count[0] -= 1``)."""
    loops = (ast.For, ast.AsyncFor, ast.While)
    # the loop or function holding both (the window's region may be a loop around the step alone)
    scope = next((a for a in t.ancestors(w.step) if isinstance(a, _SCOPES) and t.contains(a, w.backward)), w.scope)
    home = next((a for a in t.ancestors(w.backward) if isinstance(a, loops) or a is scope), scope)
    for c in t.top_clears():
        if c.lineno >= w.backward.lineno or not t.contains(home, c):
            continue
        between = []
        for a in t.ancestors(c):
            if a is home:
                break
            between.append(a)
        if all(isinstance(a, (ast.With, ast.AsyncWith, ast.Try)) for a in between):
            return False
    inner = [a for a in t.ancestors(w.backward) if isinstance(a, loops) and t.contains(scope, a)
             and a is not scope and not t.contains(a, w.step)]
    accumulate = any(isinstance(a, (ast.With, ast.AsyncWith)) and any(".accumulate(" in ast.unparse(i.context_expr) for i in a.items)
                     for a in t.ancestors(w.step))
    if inner or accumulate:
        return True
    # counted up or down (fastai's `count[0] -= 1` ... `if count[0] == 0:`)
    counted = {ast.unparse(n.target) for n in ast.walk(t.tree) if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Add, ast.Sub))}
    for g in _guards(t, w._replace(scope=scope)):
        for n in ast.walk(g):
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and not (isinstance(n.right, ast.Constant) and n.right.value == 1):
                return True
            if isinstance(n, ast.Compare) and any(isinstance(op, (ast.Eq, ast.GtE)) for op in n.ops) and any(
                    ast.unparse(side) in counted for side in [n.left, *n.comparators]):
                return True
    return False


# ---------------------------------------------------------------------------------------------
# the operators: program text -> mutant texts


def remove_clear(t: _Tree) -> List[str]:
    clears = t.top_clears()
    return [_apply(t.src.text, t.remove(clears))] if clears else []


def _stepped_optimizer(step: ast.stmt) -> Optional[str]:
    """The optimizer a step statement steps: ``opt`` of ``opt.step()`` or of ``scaler.step(opt)``."""
    call = step.value
    return ast.unparse(call.args[0] if call.args and not _is_scheduler(call.args[0]) and "scal" in ast.unparse(call.func.value).lower()
                       else call.func.value)


def _window_clears(t: "_Tree", w: "Window") -> List[ast.stmt]:
    """The clearings after the window's step in its scope, less those of another optimizer the file
    steps elsewhere (``optim_D.zero_grad()`` after ``optimizer.step()``: moving it leaves the window's
    own gradients alone, so the mutant is no bug of this window)."""
    own = _stepped_optimizer(w.step)
    others = {_stepped_optimizer(s) for s in t.stmts if is_step_stmt(s)} - {own}

    def receiver(c: ast.stmt) -> Optional[str]:
        call = c.value if isinstance(c, ast.Expr) and isinstance(c.value, ast.Call) else None
        return ast.unparse(call.func.value) if call is not None and _attr(call) == "zero_grad" else None

    return [c for c in t.top_clears() if t.contains(w.scope, c) and c.lineno > w.step.end_lineno
            and receiver(c) not in others]


def _line_statement(t: _Tree, stmt: ast.stmt) -> ast.stmt:
    """The statement whose line ``stmt`` sits on: ``if not skip: loss.backward()`` for the backward
    pass written on its ``if``'s line (a clearing moved beside it goes before or after that line, at
    the ``if``'s indentation, never into the middle of it)."""
    parent = t.parent.get(stmt)
    while isinstance(parent, ast.stmt) and parent.lineno == stmt.lineno:
        stmt, parent = parent, t.parent.get(parent)
    return stmt


def clear_before_backward(t: _Tree) -> List[str]:
    out = []
    for w in find_windows(t):
        clears = _window_clears(t, w) if _accumulates(t, w) else []
        if not clears:
            continue
        clear = clears[0]
        nl = _newline(t.src.text)
        anchor = _line_statement(t, w.backward)
        old_indent, new_indent = t.src.indent(clear), t.src.indent(anchor)
        if t.shares_line(clear):  # only the clearing's own text moves, not the statements beside it
            lines = [t.src.segment(clear)]
            old_indent = ""
            moved = new_indent + lines[0]
        else:
            a, b = t.src.line_span(clear)
            lines = t.src.text[a:b].splitlines(keepends=True)
            moved = "".join(new_indent + line[len(old_indent) :] if line.startswith(old_indent) else line for line in lines)
        if not moved.endswith(("\n", "\r")):
            moved += nl
        at = t.src.line_span(anchor)[0]
        out.append(_apply(t.src.text, t.remove([clear]) + [(at, at, moved)]))
    return list(dict.fromkeys(out))


def clear_after_backward(t: _Tree) -> List[str]:
    """The clearing that ends a window moved to the line after the window's backward pass, at
    its indentation: inside the micro-step loop (or the per-micro-batch body) the gradient of every
    micro-batch is cleared before any step reads it."""
    out = []
    for w in find_windows(t):
        clears = _window_clears(t, w)
        if not clears:
            continue
        clear = clears[0]
        nl = _newline(t.src.text)
        anchor = _line_statement(t, w.backward)
        old_indent, new_indent = t.src.indent(clear), t.src.indent(anchor)
        if t.shares_line(clear):  # only the clearing's own text moves, not the statements beside it
            lines = [t.src.segment(clear)]
            old_indent = ""
            moved = new_indent + lines[0]
        else:
            a, b = t.src.line_span(clear)
            lines = t.src.text[a:b].splitlines(keepends=True)
            moved = "".join(new_indent + line[len(old_indent) :] if line.startswith(old_indent) else line for line in lines)
        if not moved.endswith(("\n", "\r")):
            moved += nl
        at = t.src.line_span(anchor)[1]
        out.append(_apply(t.src.text, t.remove([clear]) + [(at, at, moved)]))
    return list(dict.fromkeys(out))


def _feeds_backward(t: _Tree, w: Window, d: ast.AST) -> bool:
    """The division scales what the window's backward pass back-propagates: it sits in the
    backward statement, or it is assigned to a name that statement reads (``loss = loss / K``),
    not a division of a logged number (``total / log_interval``)."""
    if t.contains(w.backward, d):
        return True
    stmt = d if isinstance(d, ast.AugAssign) else t.parent.get(d)
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) else []
    names = {n.id for tg in targets for n in ast.walk(tg) if isinstance(n, ast.Name)}
    read = {n.id for n in ast.walk(w.backward) if isinstance(n, ast.Name)}
    return bool(names & read) and d.lineno <= w.backward.lineno


def drop_loss_division(t: _Tree) -> List[str]:
    out = []
    for w in (w for w in find_windows(t) if _accumulates(t, w)):
        for d in (d for d in _divisions(t, w) if _feeds_backward(t, w, d)):
            if isinstance(d, ast.AugAssign):
                edits = t.remove([d])
            else:
                parent = t.parent.get(d)
                if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and t.src.segment(parent.targets[0]) == t.src.segment(d.left):
                    edits = t.remove([parent])  # `loss = loss / K`: the whole statement goes
                else:
                    a, b = t.src.span(d)
                    left = t.src.segment(d.left)
                    simple = isinstance(d.left, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
                    edits = [(a, b, left if simple else f"({left})")]
            out.append(_apply(t.src.text, edits))
    return list(dict.fromkeys(out))


def divide_by_micro_step(t: _Tree) -> List[str]:
    out = []
    for w in find_windows(t):
        if w.counter is None:
            continue
        # only a division of the loss before its backward weights micro-batches (one of the
        # step's buffer, after the window, divides by the counter's last value: K)
        for d in (d for d in _divisions(t, w) if d.lineno <= w.backward.end_lineno and _feeds_backward(t, w, d)):
            divisor = d.value if isinstance(d, ast.AugAssign) else d.right
            a, b = t.src.span(divisor)
            out.append(_apply(t.src.text, [(a, b, w.counter)]))
    return list(dict.fromkeys(out))


def loss_tensor_in_sum(t: _Tree) -> List[str]:
    out = []
    for s in t.stmts:
        if not (isinstance(s, ast.AugAssign) and isinstance(s.op, ast.Add)) or t.in_no_grad(s):
            continue
        for call in _calls(s.value):
            if _attr(call) != "item":
                continue
            receiver = call.func.value
            if (not call.args and "loss" in t.src.segment(receiver).lower() and not _no_graph(receiver)
                    and not _detached(receiver) and not _converted(t, call, s) and not _bound_without_graph(t, receiver, s)
                    and not _reset_each_update(t, s) and not _one_term(t, s)):
                a, b = t.src.span(call)
                out.append(_apply(t.src.text, [(a, b, t.src.segment(call.func.value))]))
    return out


def _one_term(t: _Tree, stmt: ast.AugAssign) -> bool:
    """The total is bound to a number at the top level of the innermost loop (or function) around the sum,
    before it, and no loop lies between (``for t in tasks: total = 0.0; ...; total += loss.item() * n``): each
    binding receives one term, so summing the tensor holds one graph until the next binding lets it go,
    never a growing chain (an equivalent mutant)."""
    name = t.src.segment(stmt.target)
    scope = next((a for a in t.ancestors(stmt) if isinstance(a, _SCOPES)), None)
    if scope is None:
        return False
    top = next((s for s in scope.body if t.contains(s, stmt)), None)
    if top is None:
        return False
    return any(isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant) and any(t.src.segment(tg) == name for tg in s.targets)
               for s in scope.body[: scope.body.index(top)])


def _reset_each_update(t: _Tree, stmt: ast.AugAssign) -> bool:
    """The total is set back to a number in the body of a loop around the sum that also steps an
    optimizer there (``while ...: total = 0.; for _ in range(K): total += loss / K ...; opt.step()``):
    it holds the graphs of one update's passes at most, which the backward passes have already
    freed, so summing the tensor keeps nothing alive across updates (an equivalent mutant)."""
    name = t.src.segment(stmt.target)
    for loop in (a for a in t.ancestors(stmt) if isinstance(a, (ast.For, ast.While, ast.AsyncFor))):
        resets = [s for s in loop.body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)
                  and any(t.src.segment(tg) == name for tg in s.targets)]
        if resets and any(is_step_stmt(s) for s in _own_statements(loop.body)):
            return True
    return False


def _own_statements(body: List[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a loop's body that run once per iteration of it: through ``if``, ``with`` and
    ``try``, not into a nested loop or function."""
    for s in body:
        yield s
        if isinstance(s, (ast.For, ast.While, ast.AsyncFor, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _own_statements(getattr(s, field, None) or [])
        for h in getattr(s, "handlers", None) or []:
            yield from _own_statements(h.body)


def _converted(t: _Tree, call: ast.Call, stmt: ast.stmt) -> bool:
    """The ``.item()`` is an argument of another call (``"{:.3f}".format(loss.item())``,
    ``float(loss.item())``): that call turns the tensor into a string or a number as well, so dropping
    ``.item()`` sums no graph (an equivalent mutant)."""
    node = call
    while node is not stmt and node in t.parent:
        parent = t.parent[node]
        if isinstance(parent, ast.Call) and node is not parent.func:
            return True
        if isinstance(parent, ast.keyword):
            return True
        node = parent
    return False


def _bound_without_graph(t: _Tree, receiver: ast.AST, stmt: ast.stmt) -> bool:
    """The name the ``.item()`` reads is bound, in the function around the sum, only inside
    ``torch.no_grad()`` (``with torch.no_grad(): tmp_eval_loss = model(...)`` then ``eval_loss +=
    tmp_eval_loss.mean().item()``): it holds no graph (an equivalent mutant)."""
    base = receiver
    while isinstance(base, (ast.Attribute, ast.Call, ast.Subscript)):
        base = base.func if isinstance(base, ast.Call) else base.value
    if not isinstance(base, ast.Name):
        return False
    scope = next((a for a in t.ancestors(stmt) if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), t.tree)
    binds = [n for n in ast.walk(scope) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
             and any(isinstance(c, ast.Name) and c.id == base.id
                     for tg in (n.targets if isinstance(n, ast.Assign) else [n.target]) for c in ast.walk(tg))]
    return bool(binds) and all(t.in_no_grad(n) or _returns_without_graph(t, n.value, 0) for n in binds)


def _returns_without_graph(t: _Tree, value: Optional[ast.AST], depth: int) -> bool:
    """``loss = self.validation_step(batch)`` where the function or method of the file that the call runs
    (by its name) hands back, in every ``return``, a value it computed only under ``torch.no_grad()``
    (``with torch.no_grad(): out, loss = self.model.step(batch)`` then ``return loss``): no graph."""
    if depth > 2 or not isinstance(value, ast.Call):
        return False
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" \
        else func.id if isinstance(func, ast.Name) else None
    defs = [n for n in ast.walk(t.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if len(defs) != 1:
        return False
    fn = defs[0]
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    if not returns or any(r.value is None for r in returns):
        return False
    for r in returns:
        if t.in_no_grad(r):
            continue
        if not isinstance(r.value, ast.Name):
            return False
        binds = [n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AnnAssign))
                 and any(isinstance(c, ast.Name) and c.id == r.value.id
                         for tg in (n.targets if isinstance(n, ast.Assign) else [n.target]) for c in ast.walk(tg))]
        if not binds or not all(t.in_no_grad(n) or _returns_without_graph(t, n.value, depth + 1) for n in binds):
            return False
    return True


def _no_graph(expr: ast.AST) -> bool:
    """A value built from numbers (``torch.Tensor(list_of_floats).mean()``): dropping its
    ``.item()`` keeps no graph, the mutant would be no bug."""
    return any(isinstance(c, ast.Call) and ast.unparse(c.func) in ("torch.Tensor", "torch.tensor", "np.array", "np.mean")
               for c in ast.walk(expr))


def _detached(expr: ast.AST) -> bool:
    """A value cut from the graph on the way to ``.item()`` (``loss.detach().item()``,
    ``loss.data.item()``, ``loss.detach().cpu().item()``): dropping its ``.item()`` sums a tensor
    that holds no graph, so the mutant would be no bug (an equivalent mutant)."""
    node = expr
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        if isinstance(node, ast.Attribute) and node.attr == "data":
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("detach", "detach_"):
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def _divides_test(expr: ast.AST) -> Optional[bool]:
    """True for ``X % K == 0`` (the window closes), False for ``X % K != 0`` / ``X % K`` (it stays
    open), None for a test that is no modulo comparison."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        inner = _divides_test(expr.operand)
        return None if inner is None else not inner
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        return False
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], (ast.Eq, ast.NotEq)):
        sides = (expr.left, expr.comparators[0])
        mod = any(isinstance(s, ast.BinOp) and isinstance(s.op, ast.Mod) for s in sides)
        zero = any(isinstance(s, ast.Constant) and s.value == 0 for s in sides)
        if mod and zero:
            return isinstance(expr.ops[0], ast.Eq)
    return None


_LAST = re.compile(r"last|final", re.I)


def _is_last_term(expr: ast.AST, index: set) -> bool:
    """A test for the last micro-batch, no modulo in it: it names the loop's index, a length
    (``i + 1 == len(loader)``, ``step + 1 == steps_in_epoch``) or something called last
    (``last_batch``, ``is_last``)."""
    if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(expr)):
        return False
    for n in ast.walk(expr):
        if isinstance(n, ast.Name) and (n.id in index or _LAST.search(n.id)):
            return True
        if isinstance(n, ast.Attribute) and _LAST.search(n.attr):
            return True
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "len":
            return True
    return False


def _guards(t: _Tree, w: Window) -> List[ast.expr]:
    """The tests that decide whether the window's step runs: those of the ``if`` statements around
    it in its loop, and the values the loop assigns to names they read (``need_update = ...``)."""
    tests = [a.test for a in t.ancestors(w.step) if isinstance(a, ast.If) and t.contains(w.scope, a) and a is not w.scope]
    read = {n.id for test in tests for n in ast.walk(test) if isinstance(n, ast.Name)}
    return tests + [
        n.value for n in ast.walk(w.scope)
        if isinstance(n, ast.Assign) and any(isinstance(tg, ast.Name) and tg.id in read for tg in n.targets)
    ]


def _flush_terms(t: _Tree, w: Window) -> List[Tuple[int, int, str]]:
    """Edits removing the last-window terms from the tests that close the window: ``(i + 1) % K
    == 0 or i + 1 == len(loader)`` -> ``(i + 1) % K == 0``, and ``is_accumulating = (i + 1) % K
    != 0 and i + 1 < len(loader)`` -> ``(i + 1) % K != 0``."""
    target = getattr(w.scope, "target", None)  # a `while` loop has no index
    index = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} if target is not None else set()
    edits = []
    for test in _guards(t, w):
        for op in (n for n in ast.walk(test) if isinstance(n, ast.BoolOp)):
            closes = isinstance(op.op, ast.Or)  # `closes or last`; `stays_open and not last`
            window = [v for v in op.values if _divides_test(v) is closes]
            last = [v for v in op.values if v not in window and _is_last_term(v, index)]
            if not window or not last:
                continue
            kept = [v for v in op.values if v not in last]
            # a kept operand that binds looser than `and`/`or` keeps its parentheses
            texts = [f"({t.src.segment(v)})" if isinstance(v, (ast.BoolOp, ast.IfExp, ast.NamedExpr)) else t.src.segment(v) for v in kept]
            a, b = t.src.span(op)
            edits.append((a, b, (" or " if closes else " and ").join(texts)))
            break  # one edit per test: the outermost such operation
    return edits


def _flush_after(t: _Tree, loop: ast.stmt) -> List[ast.stmt]:
    """The statements right after the loop (or a loop around it, where the window runs on
    across epochs) that step the last window: an ``if`` that steps, or a step with the clearing
    and scaler update that follow it."""
    for outer in [loop] + [a for a in t.ancestors(loop) if isinstance(a, (ast.For, ast.AsyncFor, ast.While))]:
        block = t.block.get(outer, [])
        rest = [] if outer.orelse else block[block.index(outer) + 1 :]
        if rest and isinstance(rest[0], ast.If) and any(is_step_stmt(s) for s in ast.walk(rest[0]) if isinstance(s, ast.stmt)):
            return rest[:1]
        run = []
        for s in rest:
            update = isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and _attr(s.value) == "update" and "scaler" in ast.unparse(s.value.func).lower()
            if not (is_step_stmt(s) or is_clear_stmt(s) or update):
                break
            run.append(s)
        if run and is_step_stmt(run[0]):
            return run
    return []


def drop_last_window(t: _Tree) -> List[str]:
    """In a loop that steps when a modulo window closes and also steps the last, partial window,
    remove that flush: the last-window terms of the window's tests and the stepping block after
    the loop, all of one loop's together (where an AMP branch and a plain one each test for the
    last batch, the mutant drops both)."""
    by_loop: Dict[ast.AST, List[Tuple[int, int, str]]] = {}
    for w in find_windows(t):
        modulo = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for g in _guards(t, w) for n in ast.walk(g))
        if modulo and isinstance(w.scope, (ast.For, ast.AsyncFor, ast.While)):
            edits = by_loop.setdefault(w.scope, [])
            edits += [e for e in _flush_terms(t, w) if e not in edits]
    out = []
    for loop, edits in by_loop.items():
        after = _flush_after(t, loop)
        if after or edits:
            out.append(_apply(t.src.text, edits + t.remove(after)))
    return list(dict.fromkeys(out))


#: name -> (expected code, operator)
OPERATORS: Dict[str, Tuple[str, Callable[[_Tree], List[str]]]] = {
    "remove-clear": ("GG101", remove_clear),
    "clear-before-backward": ("GG102", clear_before_backward),
    "drop-loss-division": ("GG104", drop_loss_division),
    "loss-tensor-in-sum": ("GG201", loss_tensor_in_sum),
    "divide-by-micro-step": ("GG105", divide_by_micro_step),
    "drop-last-window": ("GG103", drop_last_window),
    "clear-after-backward": ("GG102", clear_after_backward),
}

_SKIP = re.compile(r"^#\s*mutation:\s*skip\s+([\w-]+)", re.M)


def corpus(root: Path = CORPUS) -> List[Tuple[str, str]]:
    """``(file name, source)`` of every corpus program, sorted."""
    return [(p.name, p.read_text()) for p in sorted(root.glob("*.py")) if not p.name.startswith(("_", "conftest"))]


def mutants(name: str, source: str, operators: Sequence[str] = tuple(OPERATORS)) -> List[Mutant]:
    skipped = set(_SKIP.findall(source[:2000]))
    t = _Tree(source)
    found = []
    for op in operators:
        if op in skipped:
            continue
        code, fn = OPERATORS[op]
        for i, text in enumerate(fn(t)):
            if text != source:
                found.append(Mutant(name, op, code, i, text))
    return found


def is_runnable(source: str) -> bool:
    """A corpus program with a ``main()`` that trains and returns the final parameters."""
    return re.search(r"^def main\(\):", source, re.M) is not None


def train(source: str, name: str = "<corpus>") -> list:
    """Run a runnable program's ``main()`` in this process (its prints swallowed): the final parameters."""
    import contextlib
    import io

    namespace = {"__name__": "gradguard_corpus_program", "__file__": name}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, name, "exec"), namespace)
        return namespace["main"]()


# ---------------------------------------------------------------------------------------------
# the measurement


def evaluate(lint: Optional[Callable] = None, root: Path = CORPUS) -> dict:
    """Lint every original and every mutant; the report as a dict (see ``--json``)."""
    if lint is None:
        from gradguard import lint_source as lint
    programs = corpus(root)
    false_positives = []
    per_op = {op: {"expect": code, "mutants": 0, "caught": 0, "missed": []} for op, (code, _) in OPERATORS.items()}
    for name, source in programs:
        base = lint(source, name)
        false_positives += [{"program": name, "code": f.code, "line": f.line} for f in base]
        base_counts: Dict[str, int] = {}
        for f in base:
            base_counts[f.code] = base_counts.get(f.code, 0) + 1
        for m in mutants(name, source):
            got = sum(f.code == m.expect for f in lint(m.source, name))
            row = per_op[m.operator]
            row["mutants"] += 1
            if got > base_counts.get(m.expect, 0):
                row["caught"] += 1
            else:
                row["missed"].append(f"{name}#{m.index}")
    total = sum(r["mutants"] for r in per_op.values())
    caught = sum(r["caught"] for r in per_op.values())
    for r in per_op.values():
        r["recall"] = r["caught"] / r["mutants"] if r["mutants"] else None
    return {
        "programs": len(programs),
        "runnable": sum(is_runnable(s) for _, s in programs),
        "mutants": total,
        "caught": caught,
        "recall": caught / total if total else None,
        "operators": per_op,
        "false_positives": false_positives,
    }


def _same_params(a: list, b: list, tol: float = 1e-12) -> bool:
    import torch

    return len(a) == len(b) and all(x.shape == y.shape and torch.allclose(x, y, rtol=0, atol=tol) for x, y in zip(a, b))


def evaluate_fixes(root: Path = CORPUS, unsafe: bool = True) -> dict:
    """``gradguard lint --fix`` on every mutant: how many it repairs, per operator.

    A mutant is *repaired* when a fix applied, the result parses, lints as clean as the
    original (no finding the original does not have) and, for a runnable program, trains to
    the original's parameters (float64, 1e-12).
    """
    from gradguard.lint.autofix import fix_source

    per_op = {op: {"expect": code, "mutants": 0, "caught": 0, "fixed": 0, "repaired": 0, "failed": []} for op, (code, _) in OPERATORS.items()}
    for name, source in corpus(root):
        base = sorted(f.code for f in _lint(source, name))
        reference = train(source, name) if is_runnable(source) else None
        for m in mutants(name, source):
            row = per_op[m.operator]
            row["mutants"] += 1
            row["caught"] += sum(f.code == m.expect for f in _lint(m.source, name)) > base.count(m.expect)
            result = fix_source(m.source, name, unsafe=unsafe)
            if not result.fixed:
                continue
            row["fixed"] += 1
            ok = _parses(result.text) and sorted(f.code for f in _lint(result.text, name)) == base
            if ok and reference is not None:
                try:
                    ok = _same_params(reference, train(result.text, name))
                except Exception:  # the repaired program no longer runs: not repaired
                    ok = False
            if ok:
                row["repaired"] += 1
            else:
                row["failed"].append(f"{name}#{m.index}")
    for r in per_op.values():
        r["share"] = r["repaired"] / r["mutants"] if r["mutants"] else None
        r["share_of_caught"] = r["repaired"] / r["caught"] if r["caught"] else None
    total = sum(r["mutants"] for r in per_op.values())
    caught = sum(r["caught"] for r in per_op.values())
    repaired = sum(r["repaired"] for r in per_op.values())
    return {
        "mutants": total, "caught": caught, "repaired": repaired,
        "share": repaired / total if total else None,
        "share_of_caught": repaired / caught if caught else None,
        "operators": per_op,
    }


def _lint(text: str, name: str):
    from gradguard import lint_source

    return lint_source(text, name)


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except SyntaxError:
        return False


def _fix_table(report: dict, verbose: bool) -> str:
    lines = [f"{'operator':<24}{'expect':<8}{'mutants':>8}{'caught':>8}{'fixed':>7}{'repaired':>10}{'of caught':>11}"]
    for op, r in report["operators"].items():
        share = "-" if r["share_of_caught"] is None else f"{100 * r['share_of_caught']:.0f}%"
        lines.append(f"{op:<24}{r['expect']:<8}{r['mutants']:>8}{r['caught']:>8}{r['fixed']:>7}{r['repaired']:>10}{share:>11}")
        if verbose and r["failed"]:
            lines.append("    fixed but not repaired: " + ", ".join(r["failed"]))
    overall = 100 * (report["share_of_caught"] or 0)
    lines.append(f"{'overall':<32}{report['mutants']:>8}{report['caught']:>8}{'':>7}{report['repaired']:>10}{overall:>10.0f}%")
    return "\n".join(lines)


def _table(report: dict, verbose: bool) -> str:
    lines = [
        f"corpus: {report['programs']} programs ({report['runnable']} runnable), {report['mutants']} mutants",
        "",
        f"{'operator':<24}{'expect':<8}{'mutants':>8}{'caught':>8}{'recall':>9}",
    ]
    for op, r in report["operators"].items():
        rec = "-" if r["recall"] is None else f"{100 * r['recall']:.0f}%"
        lines.append(f"{op:<24}{r['expect']:<8}{r['mutants']:>8}{r['caught']:>8}{rec:>9}")
        if verbose and r["missed"]:
            lines.append("    missed: " + ", ".join(r["missed"]))
    lines.append(f"{'overall':<32}{report['mutants']:>8}{report['caught']:>8}{100 * (report['recall'] or 0):>8.0f}%")
    lines.append("")
    fps = report["false_positives"]
    lines.append(f"false positives on the originals: {len(fps)}")
    lines += [f"    {fp['program']}:{fp['line']}: {fp['code']}" for fp in fps]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="list the missed mutants")
    parser.add_argument("--fix", action="store_true", help="measure `lint --fix` on the mutants instead of recall")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    report = evaluate_fixes() if args.fix else evaluate()
    table = _fix_table if args.fix else _table
    try:
        print(json.dumps(report, indent=2) if args.json else table(report, args.verbose))
    except BrokenPipeError:  # `| head`
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
