"""``gradguard lint --add-noqa``: a ``# noqa: GGnnn`` comment on each line that has findings.

As ruff's ``--add-noqa``: the codes join an existing ``# noqa: ...`` list on the line, or a new
comment goes at the end of the line (after any comment already there, a blanket ``# noqa``
included, which gradguard leaves to the other linters). A line whose end lies inside a string
or after a backslash continuation cannot hold a comment; its findings stay reported. The result
must parse to the same syntax tree as the original (comments only), or nothing is written.

>>> src = "for x in data:\\n    loss = f(x)\\n    loss.backward()\\n    opt.step()  # the update\\n"
>>> print(add_noqa(src).text, end="")
for x in data:
    loss = f(x)
    loss.backward()
    opt.step()  # the update  # noqa: GG101
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from typing import Dict, List, Optional, Set, Tuple

from ..findings import Edit, Finding
from ._edits import split_lines
from ._suppress import NOQA, noqa_codes

_WORD = re.compile(r"[^\s,]+")


def _comment_lines(text: str) -> Tuple[Set[int], Dict[int, tokenize.TokenInfo]]:
    """(the lines whose end may take a comment, the comment token of each line that has one).

    A line may take a comment where the tokenizer ends a line (NEWLINE, or NL inside brackets
    and on blank lines); the lines of a multi-line string and those continued with a backslash
    have no such end.
    """
    ends: Set[int] = set()
    comments: Dict[int, tokenize.TokenInfo] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.NEWLINE, tokenize.NL):
            ends.add(tok.start[0])
        elif tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok
            ends.add(tok.start[0])
    return ends, comments


def _merge_into(comment: str, codes: List[str]) -> Optional[Tuple[int, int, str]]:
    """(start, end, replacement) in ``comment`` adding ``codes`` to its ``# noqa: ...`` list, or None without one."""
    for match in NOQA.finditer(comment):
        if match.group("colon") is None:
            continue
        written = noqa_codes(match.group("rest"))
        if not written:
            continue
        start_rest = match.start("rest")
        end = start_rest
        for word, _ in zip(_WORD.finditer(match.group("rest")), written):
            end = start_rest + word.end()
        upper = {w.upper() for w in written}
        merged = written + [c for c in codes if c not in upper]
        return match.start(), end, "# noqa: " + ", ".join(merged)
    return None


def _same_code(a: str, b: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def add_noqa(text: str, filename: str = "<string>", *, select=None, ignore=None, unsafe: bool = False,
             blanket_noqa: bool = False):
    """``text`` with a ``# noqa: CODES`` comment on each line that has findings (see the module docstring).

    Returns a :class:`~gradguard.lint.autofix.FixResult`: ``fixed`` the findings now silenced,
    ``remaining`` those of the new text. ``unsafe`` is accepted for the signature of ``fix_source``.
    """
    from . import lint_source
    from .autofix import FixResult, apply_edits

    def lint(source: str) -> List[Finding]:
        return lint_source(source, filename, select=select, ignore=ignore, blanket_noqa=blanket_noqa,
                           notify=lambda note: None)  # the notes were given when the file was linted

    findings = lint(text)
    normal = text.replace("\r\n", "\n").replace("\r", "\n")  # the line numbers the findings count
    wanted: Dict[int, List[str]] = {}
    for f in findings:
        if f.code != "GG000" and f.line is not None and f.code not in wanted.get(f.line, []):
            wanted.setdefault(f.line, []).append(f.code)
    if not wanted or any(f.code == "GG000" for f in findings):
        return FixResult(text, [], findings)  # nothing to do, or a file that does not parse: left as it is
    try:
        ends, comments = _comment_lines(normal)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return FixResult(text, [], findings, "cannot tokenize this file; no noqa comment added")
    lines = split_lines(text)
    edits = []
    for line, codes in sorted(wanted.items()):
        if line not in ends or line > len(lines):
            continue  # inside a string or a backslash continuation: no comment can go there
        codes = sorted(codes)
        content = lines[line - 1].rstrip("\r\n")
        comment = comments.get(line)
        merged = _merge_into(comment.string, codes) if comment is not None else None
        if merged is not None:
            start, end, new = merged
            col = comment.start[1] + 1
            edits.append(Edit(line, col + start, line, col + end, new))
        else:
            kept = content.rstrip()
            edits.append(Edit(line, len(kept) + 1, line, len(content) + 1, f"  # noqa: {', '.join(codes)}"))
    if not edits:
        return FixResult(text, [], findings)
    new = apply_edits(text, edits)
    if not _same_code(text, new):
        return FixResult(text, [], findings, "adding noqa comments would change the code; file left unchanged")
    remaining = lint(new)
    left = {(f.code, f.line) for f in remaining}
    return FixResult(new, [f for f in findings if (f.code, f.line) not in left], remaining)
