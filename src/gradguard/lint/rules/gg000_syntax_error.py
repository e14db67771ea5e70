"""GG000 syntax-error: the file does not parse (or a part of it could not be checked).

A file that parses only with a newer Python than the one running gradguard is
not a syntax error: it is reported as not checked, naming the Python version
that parses it (exit 0 unless something else is found).
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from typing import NamedTuple, Optional, Tuple, Union

from .._newer_syntax import newer_constructs

CODE = "GG000"
#: Its fixture pair in tests/lint_fixtures/: code that must fire it, correct code that must not.
FIXTURES = ("gg000_syntax_error_bad.py", "gg000_syntax_error_good.py")
#: No automatic fix (``gradguard lint --fix`` leaves its findings as they are).
FIX_SAFETY = None

#: (version, what, pattern on the line the parser rejected): syntax newer than some Pythons.
_NEWER_SYNTAX = (
    ((3, 10), "a match statement", re.compile(r"^\s*match\b.*:\s*(#.*)?$")),
    ((3, 10), "parenthesized context managers", re.compile(r"^\s*(async\s+)?with\s*\(")),
    ((3, 11), "except*", re.compile(r"^\s*except\s*\*")),
    ((3, 12), "a type alias statement (PEP 695)", re.compile(r"^\s*type\s+[A-Za-z_]\w*\s*(\[.*\])?\s*=")),
    ((3, 12), "a generic function or class (PEP 695)", re.compile(r"^\s*((async\s+)?def|class)\s+[A-Za-z_]\w*\s*\[")),
    ((3, 13), "a type parameter default (PEP 696)", re.compile(r"^\s*((async\s+)?def|class|type)\s+[A-Za-z_]\w*\s*\[[^\]]*=")),
    ((3, 14), "except without parentheses (PEP 758)", re.compile(r"^\s*except\s+[^(\s][^:]*,[^:]*:")),
    ((3, 14), "a template string (PEP 750)", re.compile(r"""(?<![\w'"])t(['"])""")),
)


class Parsed(NamedTuple):
    """``tree`` (None if it did not parse), else ``error`` = (line, col, detail) for a GG000
    finding, or ``newer`` = (line, reason) when a newer Python would parse it."""

    tree: Optional[ast.Module]
    error: Optional[Tuple[int, int, str]] = None
    newer: Optional[Tuple[int, str]] = None


def check_parse(source: Union[str, bytes], filename: str, text: str) -> Parsed:
    """Parse ``source``; ``text`` is its decoded form (to read the rejected line).

    >>> check_parse("x = (", "t.py", "x = (").error[:2]
    (1, 5)
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning for invalid escapes in old code
            return Parsed(ast.parse(source, filename=filename))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", None) or 1
        offset = getattr(exc, "offset", None)
        msg = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
        if isinstance(exc, SyntaxError):
            judged = _judge_newer(text, line, msg)
            if judged is not None:
                return judged
        if isinstance(exc, RecursionError):
            msg = "nested too deeply for Python's parser"
        return Parsed(None, error=(line, max(offset or 1, 1), f"cannot parse this file: {msg}."))


def newer_python(text: str, line: int, msg: str = "") -> Optional[str]:
    """Why the rejected ``line`` is valid code for a newer Python, or None.

    >>> newer_python("type Alias = list[int]\\n", 1) if sys.version_info < (3, 12) else "skip"  # doctest: +ELLIPSIS
    '...Python 3.12...'
    """
    lines = text.split("\n")
    source_line = lines[line - 1] if 0 < line <= len(lines) else ""
    for version, what, pattern in _NEWER_SYNTAX:
        if sys.version_info >= version:
            continue
        if pattern.search(source_line):
            return _reason(version, what)
    return None


def _reason(version: Tuple[int, int], what: str) -> str:
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    need = f"{version[0]}.{version[1]}"
    return (
        f"uses {what}, syntax of Python {need} and newer; gradguard runs on Python {running} here, whose "
        f"parser rejects it: run gradguard with Python {need} or newer to check this file"
    )


def _judge_newer(text: str, line: int, msg: str) -> Optional[Parsed]:
    """A parse error at ``line``: the file is newer Python (``newer`` set), a real error found
    after the newer constructs were rewritten (``error`` set), or None (report it as it is).

    The constructs are found from the syntax (:mod:`gradguard.lint._newer_syntax`); a file
    that still fails once they are rewritten has a syntax error of its own, reported at its line.
    """
    found = newer_constructs(text)
    if found is None:
        newer = newer_python(text, line, msg)
        return Parsed(None, newer=(line, newer)) if newer is not None else None
    constructs = list(found.constructs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(found.text)
    except SyntaxError as exc:
        later_line = getattr(exc, "lineno", None) or 1
        later_msg = getattr(exc, "msg", None) or str(exc)
        # a construct the scan does not rewrite (except*, PEP 758 ...) on the line that fails now
        later = [(v, w) for v, w, pattern in _NEWER_SYNTAX if sys.version_info < v
                 and pattern.search((found.text.split("\n") + [""])[later_line - 1])]
        if not later:
            offset = getattr(exc, "offset", None) or 1
            return Parsed(None, error=(later_line, max(offset, 1), f"cannot parse this file: {later_msg}."))
        constructs.append((later[0][0], later[0][1], later_line))
    except (ValueError, RecursionError, MemoryError):
        return None
    version, what, where = max(constructs, key=lambda c: (c[0], -c[2]))
    at_error = [c for c in constructs if c[2] == line]
    return Parsed(None, newer=(at_error[0][2] if at_error else where, _reason(version, what)))
