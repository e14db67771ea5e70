"""Small syntactic helpers the fix generators share: positions, statements, loops, events.

A fix needs to know where a statement starts and ends, what indentation its block
uses, which loop or function holds it and which statements around it back-propagate,
step or clear. That is all read from :mod:`ast` here; nothing depends on how the
checker found the problem.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from ...findings import Edit

LOOPS = (ast.For, ast.AsyncFor, ast.While)
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
SCOPES = LOOPS + FUNCS


def split_lines(text: str) -> List[str]:
    """Lines with their endings, split where Python's tokenizer splits (``\\r\\n``, ``\\r``, ``\\n``
    only: ``str.splitlines`` also breaks at form feeds and would shift every line number)."""
    return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)


class Tree:
    """A parsed source with parent links, statement blocks and character positions."""

    def __init__(self, source: str, tree: Optional[ast.Module] = None):
        self.text = source
        self.tree = tree if tree is not None else ast.parse(source)
        self.lines = split_lines(source)
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
        self.stmts = sorted((n for n in ast.walk(self.tree) if isinstance(n, ast.stmt)), key=lambda s: (s.lineno, s.col_offset))

    # -- positions (Edit columns are 1-based characters; ast columns are 0-based UTF-8 bytes)

    def col(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if line <= len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore")) + 1

    def start(self, node: ast.AST) -> Tuple[int, int]:
        return node.lineno, self.col(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> Tuple[int, int]:
        return node.end_lineno, self.col(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ast.unparse(node)

    def indent(self, stmt: ast.stmt) -> str:
        """The whitespace before a statement that starts its line (tabs kept)."""
        line = self.lines[stmt.lineno - 1]
        return line[: len(line) - len(line.lstrip(" \t"))]

    def starts_line(self, stmt: ast.stmt) -> bool:
        return not self.lines[stmt.lineno - 1][: self.col(stmt.lineno, stmt.col_offset) - 1].strip()

    def ends_line(self, stmt: ast.stmt) -> bool:
        """Nothing but a comment follows the statement on its last line (no ``; more``)."""
        rest = self.lines[stmt.end_lineno - 1][self.col(stmt.end_lineno, stmt.end_col_offset) - 1 :]
        return rest.strip() == "" or rest.lstrip().startswith("#")

    def line_end(self, line: int) -> int:
        """1-based column just past the last character of ``line`` (before its newline)."""
        return len(self.lines[line - 1].rstrip("\r\n")) + 1

    # -- edits

    def insert_after(self, stmt: ast.stmt, code: str, indent: Optional[str] = None) -> Edit:
        """A new line with ``code`` after ``stmt`` (after its trailing comment)."""
        indent = self.indent(stmt) if indent is None else indent
        line = stmt.end_lineno
        col = self.line_end(line)
        return Edit(line, col, line, col, f"\n{indent}{code}")

    def insert_before(self, stmt: ast.stmt, code: str, indent: Optional[str] = None) -> Edit:
        indent = self.indent(stmt) if indent is None else indent
        return Edit(stmt.lineno, 1, stmt.lineno, 1, f"{indent}{code}\n")

    def delete(self, stmt: ast.stmt) -> Edit:
        """Delete a statement's whole lines; a block left empty gets ``pass``."""
        block = self.block.get(stmt, [])
        if len(block) == 1:
            return Edit(stmt.lineno, 1, stmt.end_lineno, self.line_end(stmt.end_lineno), f"{self.indent(stmt)}pass")
        if stmt.end_lineno < len(self.lines):
            return Edit(stmt.lineno, 1, stmt.end_lineno + 1, 1, "")
        # the last line of the file: take the newline before it instead
        prev = stmt.lineno - 1
        return Edit(prev, self.line_end(prev), stmt.end_lineno, self.line_end(stmt.end_lineno), "")

    def statement_text(self, stmt: ast.stmt, indent: str) -> str:
        """The statement's source lines (with comments), re-indented to ``indent``."""
        old = self.indent(stmt)
        out = []
        for line in self.lines[stmt.lineno - 1 : stmt.end_lineno]:
            line = line.rstrip("\r\n")
            out.append(indent + line[len(old) :] if line.startswith(old) else line)
        return "\n".join(out)

    # -- structure

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parent:
            node = self.parent[node]
            yield node

    def contains(self, outer: ast.AST, inner: ast.AST) -> bool:
        return inner is outer or any(a is outer for a in self.ancestors(inner))

    def statement_at(self, line: int, pred=None) -> Optional[ast.stmt]:
        """The innermost simple statement starting on ``line`` (matching ``pred`` if given)."""
        found = [s for s in self.stmts if s.lineno <= line <= s.end_lineno and (pred is None or pred(s))]
        found = [s for s in found if not isinstance(s, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef)) or pred]
        return max(found, key=lambda s: (s.lineno, s.col_offset), default=None)

    def scope_of(self, node: ast.AST) -> Optional[ast.AST]:
        return next((a for a in self.ancestors(node) if isinstance(a, SCOPES)), None)

    def loop_of(self, node: ast.AST) -> Optional[ast.AST]:
        """The innermost loop around ``node`` in the same function."""
        for a in self.ancestors(node):
            if isinstance(a, LOOPS):
                return a
            if isinstance(a, FUNCS):
                return None
        return None

    def within(self, scope: ast.AST, pred) -> List[ast.stmt]:
        return [s for s in self.stmts if self.contains(scope, s) and s is not scope and pred(s)]


# -- events (syntactic)

_BACKWARD = {"backward", "manual_backward"}


def call_attr(call: ast.AST) -> Optional[str]:
    return call.func.attr if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) else None


def backward_call(stmt: ast.stmt) -> Optional[ast.Call]:
    """The backward call of a statement, if it is one (``loss.backward()``, ``accelerator.backward(l)``...)."""
    if isinstance(stmt, ast.Expr):
        for n in ast.walk(stmt.value):
            if call_attr(n) in _BACKWARD:
                return n
    return None


def backward_loss(call: ast.Call) -> Optional[ast.AST]:
    """The loss expression a backward call back-propagates."""
    func = call.func
    if func.attr == "manual_backward" or (func.attr == "backward" and call.args and not _is_tensor_method(call)):
        return call.args[0] if call.args else None
    receiver = func.value
    if call_attr(receiver) == "scale" and receiver.args:  # scaler.scale(loss).backward()
        return receiver.args[0]
    return receiver


def _is_tensor_method(call: ast.Call) -> bool:
    """``loss.backward(gradient)`` vs ``accelerator.backward(loss)``: the receiver names the owner."""
    receiver = ast.unparse(call.func.value).lower()
    return not re.search(r"accelerator|fabric|autograd|engine|model_engine|self$", receiver)


def _scheduler(expr: ast.AST) -> bool:
    text = ast.unparse(expr).lower()
    return "sched" in text or "ema" in text or text.endswith("lr")


def step_optimizer(stmt: ast.stmt) -> Optional[ast.AST]:
    """The optimizer a statement steps (``opt.step()``, ``scaler.step(opt)``), or None."""
    value = getattr(stmt, "value", None) if isinstance(stmt, (ast.Expr, ast.Assign)) else None
    if call_attr(value) != "step" or _scheduler(value.func.value):
        return None
    receiver = value.func.value
    if "scaler" in ast.unparse(receiver).lower() and value.args:
        return value.args[0]
    return receiver


def clear_target(stmt: ast.stmt) -> Optional[ast.AST]:
    """What a clearing statement clears (``opt`` of ``opt.zero_grad()``), or None."""
    if isinstance(stmt, ast.Expr) and call_attr(stmt.value) == "zero_grad":
        return stmt.value.func.value
    return None


def is_clear(stmt: ast.stmt) -> bool:
    if clear_target(stmt) is not None:
        return True
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
        return all(isinstance(t, ast.Attribute) and t.attr == "grad" for t in stmt.targets)
    if isinstance(stmt, ast.Expr) and call_attr(stmt.value) == "zero_":
        recv = stmt.value.func.value
        return isinstance(recv, ast.Attribute) and recv.attr == "grad"
    return isinstance(stmt, ast.For) and all(is_clear(s) for s in stmt.body)


def same(a: Optional[ast.AST], b: Optional[ast.AST]) -> bool:
    return a is not None and b is not None and ast.dump(a) == ast.dump(b)


def accumulation_count(t: Tree, backward: ast.stmt, step: Optional[ast.stmt]) -> Optional[ast.AST]:
    """The variable holding the number of micro-batches of the window ``backward`` is in.

    ``range(K)`` of a micro-step loop around the backward (not around the step), else ``K`` of a
    ``% K`` in the test that guards the step (or in a name that test reads), else None.
    """
    for loop in (a for a in t.ancestors(backward) if isinstance(a, (ast.For, ast.AsyncFor))):
        if step is not None and t.contains(loop, step):
            break
        it = loop.iter
        if isinstance(it, ast.Call) and ast.unparse(it.func) == "range" and len(it.args) == 1:
            return it.args[0]
        if isinstance(t.parent.get(loop), FUNCS):
            break
    if step is None:
        return None
    region = t.loop_of(step) or t.scope_of(step) or t.tree
    tests = [a.test for a in t.ancestors(step) if isinstance(a, ast.If) and t.contains(region, a)]
    names = {n.id for test in tests for n in ast.walk(test) if isinstance(n, ast.Name)}
    for s in t.within(region, lambda s: isinstance(s, ast.Assign)):
        if any(isinstance(tg, ast.Name) and tg.id in names for tg in s.targets):
            tests.append(s.value)
    for test in tests:
        for n in ast.walk(test):
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                return n.right
    return None


def window_step(t: Tree, backward: ast.stmt) -> Optional[ast.stmt]:
    """The first step after ``backward`` in the loops/functions around it (the step ending its window)."""
    for scope in (a for a in t.ancestors(backward) if isinstance(a, SCOPES)):
        steps = t.within(scope, lambda s: step_optimizer(s) is not None and s.lineno > backward.end_lineno)
        if steps:
            return steps[0]
    return None


def is_accumulating(t: Tree, backward: ast.stmt, step: ast.stmt) -> bool:
    """Several backward passes per step: the step under an ``if`` the backward is not in, the
    backward in a micro-step loop the step is not in, or an ``accelerator.accumulate`` block."""
    scope = next((a for a in t.ancestors(step) if isinstance(a, SCOPES) and t.contains(a, backward)), None)
    if scope is None:
        return False
    for a in t.ancestors(step):
        if a is scope:
            break
        if isinstance(a, ast.If) and not t.contains(a, backward):
            return True
        if isinstance(a, (ast.With, ast.AsyncWith)) and any(".accumulate(" in ast.unparse(i.context_expr) for i in a.items):
            return True
    for a in t.ancestors(backward):
        if a is scope:
            break
        if isinstance(a, LOOPS) and not t.contains(a, step):
            return True
    return False


def parenthesize(t: Tree, node: ast.AST) -> str:
    text = t.segment(node)
    simple = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)
    return text if isinstance(node, simple) else f"({text})"


def first(seq: Sequence):
    return seq[0] if seq else None
