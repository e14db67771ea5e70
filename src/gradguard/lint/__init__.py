"""The static checker: gradient-buffer bugs in training code, before it runs.

Works on Python's own :mod:`ast` and never imports torch, so it is fast enough
for pre-commit. The rules are the static forms of the rule catalogue (see
``gradguard rule CODE``), one module each in :mod:`.rules`; the program model
they read is built once per file by :mod:`._model` (driver: :mod:`._checker`).

Loops the analysis cannot follow are never dropped silently: :func:`check_source`
and :func:`check_paths` return them as :class:`Skipped` records next to the
findings (``gradguard lint --show-skipped`` prints them).
"""

from __future__ import annotations

import ast
import os
import warnings
from pathlib import Path
from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence, Union

from .._errors import GradguardError
from ..findings import Finding
from ..rules import RULES, make_finding, parse_codes
from ._checker import Checker
from ._config import Config, find_config
from ._model import Skipped
from ._suppress import find_suppressions, is_suppressed
from .rules.gg000_syntax_error import check_parse

__all__ = [
    "lint_source", "lint_paths", "check_source", "check_paths", "LintResult", "Skipped",
    "iter_python_files", "find_config", "Config",
]


class LintResult(NamedTuple):
    """What a lint run found and what it could not check.

    Attributes:
        findings: the findings, as :func:`lint_source`/:func:`lint_paths` return them.
        skipped: :class:`Skipped` records ``(path, line, reason)``: loops beyond the
            analysis, and files only a newer Python can parse.
    """

    findings: List[Finding]
    skipped: List[Skipped]

#: Folders never descended into when a folder is linted.
_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "venv", "site-packages", "build", "dist"})

Codes = Union[str, Sequence[str], None]


def _chosen(select: Codes, ignore: Codes) -> frozenset:
    chosen = parse_codes(select) if select else frozenset(RULES)
    return chosen - parse_codes(ignore)


def _decode(source: Union[str, bytes]) -> str:
    if isinstance(source, str):
        return source
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        return source.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return source.decode("utf-8", errors="replace")


def _lint(source: Union[str, bytes], filename: str, chosen: frozenset, skipped: Optional[list] = None) -> List[Finding]:
    # the parser counts "\r\n", "\r" and "\n" as line ends: so must the checker's text
    text = _decode(source).replace("\r\n", "\n").replace("\r", "\n")
    parsed = check_parse(source, filename, text)
    if parsed.tree is None:
        findings = []
        if parsed.error is not None:
            line, col, detail = parsed.error
            findings = [make_finding("GG000", detail, path=filename, line=line, col=col)]
        elif skipped is not None:
            skipped.append(Skipped(filename, parsed.newer[0], parsed.newer[1]))
    else:
        checker = Checker(parsed.tree, text, filename)
        findings = checker.run()
        if skipped is not None:
            skipped.extend(checker.skipped)
        if findings:
            suppressions = find_suppressions(text)
            findings = [f for f in findings if not is_suppressed(f.code, f.line, suppressions)]
    findings = [f for f in findings if f.code in chosen]
    findings.sort(key=lambda f: (f.line or 0, f.col or 0, f.code))
    return findings


def lint_source(
    source: Union[str, bytes],
    filename: str = "<string>",
    *,
    select: Codes = None,
    ignore: Codes = None,
) -> List[Finding]:
    """Lint Python source text.

    Args:
        source: the code (``str``, or ``bytes`` honouring a coding declaration).
        filename: the path written into each finding.
        select: codes (or prefixes such as ``"GG1"``) to report; default all.
        ignore: codes (or prefixes) not to report.

    Returns:
        The findings, sorted by line and column; ``# gradguard: ignore[...]``
        comments on a finding's line remove it. An unparsable source gives one
        GG000 finding.

    Raises:
        GradguardError: an unknown code in ``select`` or ``ignore``.

    >>> src = '''
    ... for x, y in loader:
    ...     loss = loss_fn(model(x), y)
    ...     loss.backward()
    ...     optimizer.step()
    ... '''
    >>> [(f.code, f.line, f.col) for f in lint_source(src)]
    [('GG101', 5, 5)]
    """
    return _lint(source, filename, _chosen(select, ignore))


def check_source(
    source: Union[str, bytes],
    filename: str = "<string>",
    *,
    select: Codes = None,
    ignore: Codes = None,
) -> LintResult:
    """:func:`lint_source`, plus the loops it could not check.

    >>> src = "type Vec = list[float]\\n"
    >>> result = check_source(src, "new.py")
    >>> result.findings, [s.line for s in result.skipped] if result.skipped else "parsed"  # doctest: +ELLIPSIS
    ([], ...)
    """
    skipped: List[Skipped] = []
    findings = _lint(source, filename, _chosen(select, ignore), skipped)
    return LintResult(findings, skipped)


def iter_python_files(paths: Iterable[Union[str, os.PathLike]]) -> Iterator[str]:
    """The ``.py`` files under ``paths`` (files as given, folders walked in sorted order).

    Hidden folders, ``__pycache__`` and virtual environments are skipped.

    Raises:
        GradguardError: a path that does not exist.
    """
    for raw in paths:
        path = os.fspath(raw)
        if os.path.isfile(path):
            yield path
        elif os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
                for name in sorted(files):
                    if name.endswith(".py") and not name.startswith("."):
                        yield os.path.join(root, name)
        else:
            raise GradguardError(f"no such file or folder: {path!r}")


def lint_paths(
    paths: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]],
    *,
    select: Codes = None,
    ignore: Codes = None,
    skipped: Optional[List[Skipped]] = None,
) -> List[Finding]:
    """Lint files and folders (``.py`` files, recursively).

    Findings carry the path as given (a file found in a folder: the folder
    joined with its relative path). ``pyproject.toml`` is not read here; the
    command line does that (:func:`find_config`).

    Args:
        paths: a path or several.
        select: codes (or prefixes) to report; default all.
        ignore: codes (or prefixes) not to report.
        skipped: a list to which the :class:`Skipped` records are appended
            (what could not be checked); :func:`check_paths` returns both.

    Raises:
        GradguardError: a path that does not exist, or an unknown code.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "ok.py").write_text("x = 1\\n")
    >>> lint_paths([d])
    []
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    chosen = _chosen(select, ignore)
    files = list(iter_python_files(paths))  # raises before any output for a missing path
    findings: List[Finding] = []
    for file in files:
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            if "GG000" in chosen:
                findings.append(make_finding("GG000", f"cannot read this file: {exc.strerror or exc}.", path=file, line=1, col=1))
            continue
        findings.extend(_lint(data, file, chosen, skipped))
    return findings


def check_paths(
    paths: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]],
    *,
    select: Codes = None,
    ignore: Codes = None,
) -> LintResult:
    """:func:`lint_paths`, plus the loops and files it could not check."""
    skipped: List[Skipped] = []
    findings = lint_paths(paths, select=select, ignore=ignore, skipped=skipped)
    return LintResult(findings, skipped)
