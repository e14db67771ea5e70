"""``gradguard lint --fix``: apply the findings' repairs to the files.

A pass lints the text, collects the fixes of the findings (safe ones; unsafe ones too with
``unsafe=True``), applies every fix whose edits do not overlap one already taken, and lints
again; it stops when a pass changes nothing. Untouched text keeps its bytes (comments,
formatting, line endings: an inserted line ends like the file's lines do). A result that
does not parse is never written: the file is rolled back and reported. A file that changed
on disk after it was read is not written either.

>>> src = "for x in data:\\n    loss = f(x)\\n    loss.backward()\\n    opt.step()\\n"
>>> print(fix_source(src).text, end="")
for x in data:
    loss = f(x)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
"""

from __future__ import annotations

import ast
import difflib
import io
import os
import re
import stat
import tokenize
import warnings
from pathlib import Path
from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple

from .._files import replace_file
from ..findings import Edit, Finding, Fix
from ._edits import split_lines

__all__ = ["FixResult", "FileFix", "apply_edits", "attach_fixes", "fix_source", "fix_file", "with_fixes", "unified_diff"]

#: Passes before giving up on reaching a fixed point (each pass fixes what the previous one uncovered).
MAX_PASSES = 8


class FixResult(NamedTuple):
    """What fixing one source text did.

    ``text``: the fixed text (the original where nothing applied or a fix broke the syntax);
    ``fixed``: the findings whose fixes were applied; ``remaining``: the findings of ``text``
    (with their fixes); ``error``: why the file was left as it was, or None.
    """

    text: str
    fixed: List[Finding]
    remaining: List[Finding]
    error: Optional[str] = None


class FileFix(NamedTuple):
    path: str
    original: str
    result: FixResult
    written: bool


def _offsets(text: str) -> List[int]:
    starts, pos = [0], 0
    for line in split_lines(text):
        pos += len(line)
        starts.append(pos)
    return starts


def _span(edit: Edit, starts: Sequence[int]) -> Tuple[int, int]:
    def at(line: int, col: int) -> int:
        if line - 1 >= len(starts):
            return starts[-1]
        return starts[line - 1] + col - 1

    return at(edit.line, edit.col), at(edit.end_line, edit.end_col)


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """``text`` with non-overlapping ``edits`` applied (positions as in :class:`~gradguard.findings.Edit`).

    >>> apply_edits("a = 1\\r\\nb = 2\\r\\n", [Edit(2, 1, 2, 1, "c = 3\\r\\n")])
    'a = 1\\r\\nc = 3\\r\\nb = 2\\r\\n'
    """
    starts = _offsets(text)
    spans = sorted(((*_span(e, starts), e.content) for e in edits), key=lambda s: (s[0], s[1]), reverse=True)
    for a, b, content in spans:
        text = text[:a] + content + text[b:]
    return text


def _conflict(a: Tuple[int, int], b: Tuple[int, int]) -> bool:
    return a[0] == b[0] or (a[0] < b[1] and b[0] < a[1])


def _choose(findings: Sequence[Finding], text: str, unsafe: bool) -> List[Finding]:
    """Findings whose fixes apply in this pass: allowed, and not touching a range already taken."""
    starts = _offsets(text)
    taken: List[Tuple[int, int]] = []
    chosen = []
    for f in findings:
        fix = f.fix
        if fix is None or not fix.edits or (fix.applicability != "safe" and not unsafe):
            continue
        spans = [_span(e, starts) for e in fix.edits]
        if any(_conflict(s, t) for s in spans for t in taken):
            continue  # the next pass takes it up again, on the updated text
        taken += spans
        chosen.append(f)
    return chosen


def _parses(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def _lint(text: str, filename: str, select, ignore, blanket_noqa: bool = False) -> List[Finding]:
    from . import lint_source

    return attach_fixes(lint_source(text, filename, select=select, ignore=ignore, blanket_noqa=blanket_noqa), text)


def fix_source(
    text: str,
    filename: str = "<string>",
    *,
    select=None,
    ignore=None,
    unsafe: bool = False,
    blanket_noqa: bool = False,
) -> FixResult:
    """Apply the fixes of ``text``'s findings until none applies (see the module docstring).

    Args:
        text: the source.
        filename: the path written into the findings.
        select, ignore, blanket_noqa: as for :func:`gradguard.lint_source`.
        unsafe: also apply fixes that change the numbers a user sees.
    """
    # an unparsable text has only GG000, which has no fix: no separate parse needed here
    findings = _lint(text, filename, select, ignore, blanket_noqa)
    current, fixed = text, []
    for _ in range(MAX_PASSES):
        chosen = _choose(findings, current, unsafe)
        if not chosen:
            break
        new = apply_edits(current, [e for f in chosen for e in f.fix.edits])
        if new == current:
            break
        if not _parses(new):
            rule = ", ".join(sorted({f.code for f in chosen}))
            return FixResult(text, [], _lint(text, filename, select, ignore, blanket_noqa), f"a fix for {rule} would break the syntax; file left unchanged")
        current, fixed = new, fixed + chosen
        findings = _lint(current, filename, select, ignore, blanket_noqa)
    return FixResult(current, fixed, findings)


def _read(path: str) -> Tuple[bytes, str, str]:
    data = Path(path).read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data, data.decode(encoding), encoding


def fix_file(path: str, *, select=None, ignore=None, unsafe: bool = False, write: bool = True,
             blanket_noqa: bool = False, fixer=None) -> FileFix:
    """Fix one file; written only when something changed, it still parses and the file on disk
    is still the one that was read.

    ``fixer``: what computes the new text, :func:`fix_source` by default (``--add-noqa`` passes
    its own, which writes through here the same way).

    A symbolic link is followed: the file it points to is edited and the link stays a link.
    The file keeps its permission bits (an executable script stays executable). A read-only
    file (no write permission bit) is never written: the fixes are reported as not applied.
    """
    target = os.path.realpath(path)
    try:
        data, text, encoding = _read(target)
    except (OSError, SyntaxError, LookupError, UnicodeDecodeError) as exc:
        return FileFix(path, "", FixResult("", [], [], f"cannot read this file as Python source: {exc}"), False)
    result = (fixer or fix_source)(text, path, select=select, ignore=ignore, unsafe=unsafe, blanket_noqa=blanket_noqa)
    if not write or result.text == text:
        return FileFix(path, text, result, False)

    def refused(error: str) -> FileFix:
        # nothing was written: what the fixes would have repaired is still there
        return FileFix(path, text, result._replace(text=text, fixed=[], remaining=result.fixed + result.remaining, error=error), False)

    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
        if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(target, os.W_OK):
            return refused("read-only file; not written (make it writable to apply the fixes)")
        if Path(target).read_bytes() != data:
            return refused("changed on disk while it was being fixed; not written (run the fix again)")
        # a new file beside it, renamed over it: nothing planted at a temporary name is followed,
        # a crash never leaves half a file, and the file keeps its mode
        replace_file(target, result.text.encode(encoding))
    except OSError as exc:
        return refused(f"cannot write: {exc.strerror or exc}")
    return FileFix(path, text, result, True)


def unified_diff(path: str, old: str, new: str) -> str:
    """A unified diff of ``old`` -> ``new`` with ``a/``/``b/`` headers (line endings kept)."""
    lines = difflib.unified_diff(split_lines(old), split_lines(new), f"a/{path}", f"b/{path}")
    return "".join(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n" for line in lines)


def with_fixes(findings: Sequence[Finding]) -> List[Finding]:
    """Findings of files on disk with their ``fix`` filled in (for the JSON and SARIF forms)."""
    by_path: dict = {}
    for f in findings:
        by_path.setdefault(f.path, []).append(f)
    out: List[Finding] = []
    for path, group in by_path.items():
        try:
            text = _read(path)[1] if path is not None else None
        except (OSError, SyntaxError, LookupError, UnicodeDecodeError):
            text = None
        out += attach_fixes(group, text) if text is not None and _parses(text) else group
    return out  # lint_paths reports file by file, so the groups keep the order


def attach_fixes(findings: Sequence[Finding], source: str) -> List[Finding]:
    """``findings`` of one file (from the linter, which built their fixes from the program model)
    with the lines their fixes insert ending like ``source``'s lines (a CRLF file stays CRLF)."""
    nl = _newline(source)
    return [f._replace(fix=_with_newline(f.fix, nl)) if f.fix is not None else f for f in findings]


def _newline(text: str) -> str:
    m = re.search(r"\r\n|\r|\n", text)
    return m.group(0) if m else "\n"


def _with_newline(fix: Optional[Fix], nl: str) -> Optional[Fix]:
    """Inserted lines end like the file's lines (a CRLF file stays CRLF)."""
    if fix is None or nl == "\n":
        return fix
    return fix._replace(edits=tuple(e._replace(content=e.content.replace("\n", nl)) for e in fix.edits))
