"""Small syntactic helpers the fix generators share: positions, statements, loops, events.

A fix needs to know where a statement starts and ends, what indentation its block
uses, which loop or function holds it and which statements around it back-propagate,
step or clear comes from the program model (the finding's diagnostic); what is left here
is where those nodes sit in the text.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, Iterator, List, Optional, Tuple

from ..findings import Edit
from ._ast import child_nodes, subtree

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
        for node in subtree(self.tree):  # (ast.walk's nodes in its order, read faster)
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(node, field, None)
                if isinstance(stmts, list):
                    for s in stmts:
                        if isinstance(s, ast.stmt):
                            self.block[s] = stmts
            for child in child_nodes(node):
                self.parent[child] = node
        self.stmts = sorted((n for n in subtree(self.tree) if isinstance(n, ast.stmt)), key=lambda s: (s.lineno, s.col_offset))

    # -- positions (Edit columns are 1-based characters; ast columns are 0-based UTF-8 bytes)

    def col(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if line <= len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore")) + 1

    def start(self, node: ast.AST) -> Tuple[int, int]:
        return node.lineno, self.col(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> Tuple[int, int]:
        return node.end_lineno, self.col(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        """The source text of ``node`` (from the lines already split: ``ast.get_source_segment``
        splits the whole file on every call, which made the fixes of a file quadratic)."""
        if getattr(node, "end_lineno", None) is None or node.lineno > len(self.lines):
            return ast.unparse(node)
        (l1, c1), (l2, c2) = self.start(node), self.end(node)
        if l1 == l2:
            return self.lines[l1 - 1][c1 - 1 : c2 - 1]
        return "".join([self.lines[l1 - 1][c1 - 1 :], *self.lines[l1 : l2 - 1], self.lines[l2 - 1][: c2 - 1]])

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

    def statement_of(self, node: Optional[ast.AST]) -> Optional[ast.stmt]:
        """The statement holding ``node`` (``node`` itself if it is one)."""
        while node is not None and not isinstance(node, ast.stmt):
            node = self.parent.get(node)
        return node

    def scope_of(self, node: ast.AST) -> Optional[ast.AST]:
        return next((a for a in self.ancestors(node) if isinstance(a, SCOPES)), None)

    def function_of(self, node: ast.AST) -> Optional[ast.AST]:
        """The function whose body holds ``node`` (None at module level)."""
        return next((a for a in self.ancestors(node) if isinstance(a, FUNCS)), None)

    def next_statement(self, stmt: ast.stmt) -> Optional[ast.stmt]:
        block = self.block.get(stmt, [])
        i = next(i for i, s in enumerate(block) if s is stmt)
        return block[i + 1] if i + 1 < len(block) else None

    def alone(self, stmt: Optional[ast.stmt]) -> bool:
        """A statement on lines of its own (no ``a; b``), so that whole lines can move."""
        return stmt is not None and self.starts_line(stmt) and self.ends_line(stmt)


def parenthesize(t: Tree, node: ast.AST) -> str:
    text = t.segment(node)
    simple = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)
    return text if isinstance(node, simple) else f"({text})"
