"""The static checker: gradient-buffer bugs in training code, before it runs.

Works on Python's own :mod:`ast` and never imports torch, so it is fast enough
for pre-commit. The rules are the static forms of SPEC §2 (see
``gradguard rule CODE``); what fires where is in :mod:`._checker`.
"""

from __future__ import annotations

import ast
import os
import warnings
from pathlib import Path
from typing import Iterable, Iterator, List, Sequence, Union

from .._errors import GradguardError
from ..findings import Finding
from ..rules import RULES, make_finding, parse_codes
from ._checker import Checker
from ._config import Config, find_config
from ._suppress import find_suppressions, is_suppressed

__all__ = ["lint_source", "lint_paths", "iter_python_files", "find_config", "Config"]

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


def _lint(source: Union[str, bytes], filename: str, chosen: frozenset) -> List[Finding]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning for invalid escapes in old code
            tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", None) or 1
        offset = getattr(exc, "offset", None)
        detail = f"cannot parse this file: {getattr(exc, 'msg', None) or exc}."
        findings = [make_finding("GG000", detail, path=filename, line=line, col=max((offset or 1) - 1, 0))]
    else:
        text = _decode(source)
        try:
            findings = Checker(tree, text, filename).run()
        except RecursionError:  # pathologically nested code: nothing we can be sure about
            findings = []
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
    [('GG101', 5, 4)]
    """
    return _lint(source, filename, _chosen(select, ignore))


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
) -> List[Finding]:
    """Lint files and folders (``.py`` files, recursively).

    Findings carry the path as given (a file found in a folder: the folder
    joined with its relative path). ``pyproject.toml`` is not read here; the
    command line does that (:func:`find_config`).

    Args:
        paths: a path or several.
        select: codes (or prefixes) to report; default all.
        ignore: codes (or prefixes) not to report.

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
                findings.append(make_finding("GG000", f"cannot read this file: {exc.strerror or exc}.", path=file, line=1, col=0))
            continue
        findings.extend(_lint(data, file, chosen))
    return findings
