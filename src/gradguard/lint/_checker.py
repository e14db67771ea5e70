"""The driver: builds the program model of a file once and runs every rule on it.

The rules live one per module in :mod:`.rules`; the model in :mod:`._model`, built by
:mod:`._builder`.
Each rule reports through :class:`~._model.Report`; the driver turns what it
reported into :class:`~gradguard.findings.Finding` records (1-based columns,
the words from the rule catalogue, one finding per code and place).

A rule that hits Python's recursion limit on a pathological expression (a
500-term sum) costs only the loop it was checking: that loop gets a GG000
finding saying it could not be checked, and every other finding is kept.
"""

from __future__ import annotations

import ast
from typing import Dict, List, Optional, Sequence, Tuple

from ..findings import Finding, Fix, make_finding
from ._ast import find_all, lines_of, walk_lines
from ._builder import build
from ._events import conditional_step
from ._edits import Tree
from ._model import Diagnostic, Module, Report, Skipped
from ._project import Project
from .rules import FIXES, LOOP_RULES, MODULE_RULES, PER_CALL_RULES

# Without one of these words a file holds nothing any rule looks at ("def forward": a file of model
# classes alone, whose statistics GG202 reads; "clip_grad": a LightningModule that clips in its
# training_step, before Lightning's backward pass, GG116).
_TRIGGERS = ("backward", "zero_grad", "num_items_in_batch", "def forward", "clip_grad")


def _other_autograd(tree: ast.Module) -> bool:
    """The file differentiates with another library's autograd (``from mxnet import autograd``, whose
    ``backward()`` writes fresh gradients, grad_req="write") and imports nothing of torch: its
    ``backward()``/``step()`` calls do not follow PyTorch's accumulate-into-``.grad`` contract."""
    other, torch = False, False
    for node in tree.body:
        if isinstance(node, ast.Import):
            torch = torch or any(a.name.split(".")[0] == "torch" for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            top = node.module.split(".")[0]
            torch = torch or top == "torch"
            other = other or (top != "torch" and any(a.name == "autograd" for a in node.names))
    return other and not torch


def _calls_conditional_step(tree: ast.Module, source: str) -> bool:
    """Some line with ``%`` calls :func:`~._events.conditional_step`'s shape (only those lines are walked)."""
    lines = lines_of(source, find_all(source, ("%",)))
    return any(isinstance(n, ast.Call) and conditional_step(n) is not None for n in walk_lines(tree, lines))


class Checker:
    """Lints one parsed module; ``source`` must have ``\\n`` line ends (as the parser counts lines).

    >>> src = "for x, y in loader:\\n    loss_fn(model(x), y).backward()\\n    opt.step()\\n"
    >>> [(f.code, f.line, f.col) for f in Checker(ast.parse(src), src, "t.py").run()]
    [('GG101', 3, 5)]
    """

    def __init__(self, tree: ast.Module, source: str, filename: str, project: Optional[Project] = None):
        self.tree = tree
        #: what the other files linted with this one say about its classes (this file alone by default)
        self.project = project
        self.source = source
        self.filename = filename
        #: the loops (and files) that could not be checked, filled by :meth:`run`
        self.skipped: List[Skipped] = []
        self.model: Module = None

    def run(self) -> List[Finding]:
        """All findings of the module (unsuppressed, unsorted, without duplicates)."""
        source = self.source
        own_words = (
            any(word in source for word in _TRIGGERS) or ("+=" in source and "loss" in source)
            # a call that back-propagates and steps on a window condition (`loss_scaler(loss, opt,
            # update_grad=(i + 1) % K == 0)`, see _events.conditional_step): a cheap gate only
            or ("%" in source and _calls_conditional_step(self.tree, source))
        )
        if not own_words and not (self.project is not None and self.project.imports_event_class(source)):
            return []
        if _other_autograd(self.tree):
            return []
        diagnostics: List[Diagnostic] = []
        try:
            project = self.project if self.project is not None else Project([(self.filename, source)])
            # a file without an event word of its own is read only for its calls into the
            # classes of other files it imports (an optimizer wrapper's update method)
            model = self.model = build(self.tree, source, self.filename, project, through_imports_only=not own_words)
        except RecursionError:
            return [self._not_checked(self.tree.body[0] if self.tree.body else None, "this file")]
        self.skipped.extend(model.skipped)
        failed: List[Finding] = []
        for loop in model.loops:
            report = Report()
            broken = []
            for code, check in LOOP_RULES:
                if loop.per_call and code not in PER_CALL_RULES:
                    continue
                try:
                    check(loop, report)
                except RecursionError:
                    broken.append(code)
            diagnostics += report.diagnostics
            if broken:
                failed.append(self._not_checked(loop.node, f"this loop (rule {', '.join(broken)})"))
        for code, check in MODULE_RULES:
            report = Report()
            try:
                check(model, report)
            except RecursionError:
                failed.append(self._not_checked(None, f"this file (rule {code})"))
            diagnostics += report.diagnostics
        diagnostics = with_model_fixes(diagnostics, source, self.tree)  # built from the model's facts, known here
        found: Dict[Tuple[str, int, int], Finding] = {}
        lines = source.split("\n") if diagnostics else []
        for d in diagnostics:
            finding = to_finding(d, self.filename, lines)
            found.setdefault((finding.code, finding.line, finding.col), finding)
        return list(found.values()) + failed

    def _not_checked(self, node, what: str) -> Finding:
        line = getattr(node, "lineno", 1) or 1
        col = char_column(self.source.split("\n"), line, getattr(node, "col_offset", 0) or 0)
        detail = (
            f"{what[0].upper()}{what[1:]} could not be checked: an expression in it is nested too deeply for the "
            f"checker (RecursionError). The other findings of the file are reported; split the expression "
            f"(e.g. sum(terms) instead of a long chain of +) to have it checked."
        )
        return make_finding("GG000", detail, path=self.filename, line=line, col=col)._replace(message=detail)


def to_finding(d: Diagnostic, filename: str, lines: Optional[List[str]] = None) -> Finding:
    """The finding of a diagnostic: the place of its node, the catalogue's words.

    The column is 1-based and counts characters, as the columns of a fix's edits do (the
    parser's ``col_offset`` counts UTF-8 bytes: they differ after a non-ASCII character).
    """
    line = getattr(d.node, "lineno", 1) or 1
    col = char_column(lines, line, getattr(d.node, "col_offset", 0) or 0)
    end_line, end_col = end_of(d.node, lines, line, col)
    finding = make_finding(d.code, d.detail, path=filename, line=line, col=col)._replace(end_line=end_line, end_col=end_col)
    return finding._replace(fix=d.fix) if d.fix is not None else finding


def end_of(node, lines: Optional[List[str]], line: int, col: int) -> Tuple[int, int]:
    """Where a finding's code ends: 1-based line and exclusive character column, as SARIF counts them.

    An expression or a simple statement ends where the parser says; a compound statement (a loop,
    a function) at the end of its header, so that an annotation marks ``for x in loader:``, not the
    whole body.

    >>> src = "for x in data:\\n    step(x)\\n"
    >>> end_of(ast.parse(src).body[0], src.split("\\n"), 1, 1)
    (1, 15)
    >>> end_of(ast.parse(src).body[0].body[0].value, src.split("\\n"), 2, 5)
    (2, 12)
    """
    header = _header_end(node)
    if header is not None:
        end_line, byte_col = header
    else:
        end_line = getattr(node, "end_lineno", None) or line
        byte_col = getattr(node, "end_col_offset", None) or 0
    end_col = char_column(lines, end_line, byte_col)
    if (end_line, end_col) <= (line, col):  # a node with positions made up by the model: one character
        return line, col + 1
    if header is not None and lines and 0 < end_line <= len(lines):
        text = lines[end_line - 1]
        colon = text.find(":", end_col - 1)
        if colon >= 0 and not text[end_col - 1 : colon].strip(" )\t"):
            end_col = colon + 2  # the header's colon, past closing parentheses
    return end_line, end_col


def _header_end(node) -> Optional[Tuple[int, int]]:
    """(line, byte offset) where a compound statement's header ends before its colon, else None."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        last = node.iter
    elif isinstance(node, (ast.While, ast.If)):
        last = node.test
    elif isinstance(node, (ast.With, ast.AsyncWith)) and node.items:
        item = node.items[-1]
        last = item.optional_vars or item.context_expr
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        # the name: where ruff marks a function; the signature may run over many lines
        start = node.col_offset + (len("async def ") if isinstance(node, ast.AsyncFunctionDef)
                                   else len("def ") if isinstance(node, ast.FunctionDef) else len("class "))
        return node.lineno, start + len(node.name.encode("utf-8"))
    else:
        return None
    return getattr(last, "end_lineno", None) or node.lineno, getattr(last, "end_col_offset", None) or 0


def char_column(lines: Optional[List[str]], line: int, byte_col: int) -> int:
    """The 1-based character column of a 0-based UTF-8 byte offset on a 1-based line."""
    text = lines[line - 1] if lines and 0 < line <= len(lines) else ""
    if text.isascii():
        return byte_col + 1
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore")) + 1


def fix_for(tree: Tree, d: Diagnostic) -> Optional[Fix]:
    """The fix of one diagnostic, or None (the rule has no fix, or no certain repair here)."""
    build_fix = FIXES.get(d.code)
    if build_fix is None or any(getattr(n, "gg_via", False) for n in (d.node, d.backward, d.step, d.clear, d.accum)):
        # a node standing for what a method of another file does: no edit of this file repairs it
        return None
    try:
        return build_fix(tree, d)
    except (ValueError, IndexError, AttributeError, KeyError, TypeError, StopIteration, RecursionError):
        return None  # a shape the rule's fix does not know: no fix rather than a wrong one


def with_model_fixes(diagnostics: Sequence[Diagnostic], source: str, tree: ast.Module) -> List[Diagnostic]:
    """``diagnostics`` with their ``fix`` filled in where a repair exists (``source`` with ``\\n`` ends)."""
    if not any(d.code in FIXES for d in diagnostics):
        return list(diagnostics)
    t = Tree(source, tree)
    return [d._replace(fix=fix_for(t, d)) if d.code in FIXES else d for d in diagnostics]
