"""The :class:`Finding` record and its text and JSON forms.

A finding is a small immutable record (like flake8's ``Violation``) shared by
the run-time watch and the linter: the watch fills ``step`` and ``params``, the
linter fills ``col``; whatever is not known is ``None``.
"""

from __future__ import annotations

import json
from typing import Iterable, NamedTuple, Optional, Tuple

SEVERITIES = ("error", "warning", "info")

#: The keys of a finding's JSON object, in the order of SPEC §3, and the fix (null where none).
JSON_KEYS = ("code", "name", "severity", "message", "path", "line", "col", "step", "params", "fix")


class Edit(NamedTuple):
    """Replace the text from (``line``, ``col``) up to (``end_line``, ``end_col``) with ``content``.

    Lines and columns are 1-based like :class:`Finding`'s; the end is exclusive
    (ruff's and SARIF's convention). An insertion has start == end.
    """

    line: int
    col: int
    end_line: int
    end_col: int
    content: str


class Fix(NamedTuple):
    """A repair of one finding: its edits, applied together or not at all.

    ``applicability`` is ``"safe"`` (keeps the program's meaning, applied by
    ``--fix``) or ``"unsafe"`` (changes numbers a user sees, e.g. reweighting
    micro-batches; applied only with ``--unsafe-fixes``), as in ruff.
    """

    message: str
    edits: Tuple[Edit, ...]
    applicability: str = "safe"


class Finding(NamedTuple):
    """One gradient-buffer problem.

    Attributes:
        code: the rule code, e.g. ``"GG101"`` (see :data:`gradguard.RULES`).
        name: the rule name, e.g. ``"stale-gradient"``.
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        message: what happened, its consequence and the fix.
        path: the file of the offending call or line.
        line: its line number (1-based).
        col: its column (0-based, lint only; ``None`` at run time).
        step: the optimizer step at which it happened (run time only).
        params: names of the parameters concerned (run time only).
        fix: the repair ``gradguard lint --fix`` can apply (lint only), or ``None``.

    >>> f = Finding("GG101", "stale-gradient", "error", "msg", "train.py", 3)
    >>> f.format()
    'train.py:3: GG101 msg'
    """

    code: str
    name: str
    severity: str
    message: str
    path: Optional[str] = None
    line: Optional[int] = None
    col: Optional[int] = None
    step: Optional[int] = None
    params: Optional[Tuple[str, ...]] = None
    fix: Optional[Fix] = None

    def location(self) -> str:
        """``path:line:col`` as far as it is known (ruff's form)."""
        parts = [self.path or "<unknown>"]
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)

    def format(self) -> str:
        """One line: ``path:line:col: CODE message``."""
        return f"{self.location()}: {self.code} {self.message}"

    def to_dict(self) -> dict:
        """The JSON object of SPEC §3 (``None`` becomes ``null``)."""
        d = {key: getattr(self, key) for key in JSON_KEYS}
        if d["params"] is not None:
            d["params"] = list(d["params"])
        if self.fix is not None:
            d["fix"] = {
                "message": self.fix.message,
                "applicability": self.fix.applicability,
                "edits": [e._asdict() for e in self.fix.edits],
            }
        return d


def to_json(findings: Iterable[Finding], indent: Optional[int] = 2) -> str:
    """A JSON array of findings, as written by ``--report`` and ``--format json``."""
    return json.dumps([f.to_dict() for f in findings], indent=indent)


def from_dict(d: dict) -> Finding:
    """The inverse of :meth:`Finding.to_dict` (reads a ``--report`` file back)."""
    params, fix = d.get("params"), d.get("fix")
    if fix is not None:
        fix = Fix(fix["message"], tuple(Edit(**e) for e in fix["edits"]), fix.get("applicability", "safe"))
    return Finding(**{**{k: d.get(k) for k in JSON_KEYS}, "params": tuple(params) if params is not None else None, "fix": fix})


def summary_line(findings: Iterable[Finding]) -> str:
    """``Found 3 findings (1 error, 2 warnings).`` or ``No findings.``"""
    findings = list(findings)
    if not findings:
        return "No findings."
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    noun = "finding" if len(findings) == 1 else "findings"
    return f"Found {len(findings)} {noun} ({', '.join(parts)})."


#: SARIF ``level`` for each severity (SARIF has no "info"; "note" is its equivalent).
_SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def _sarif_uri(path: str) -> str:
    """A relative URI reference for a path (forward slashes, spaces and the like escaped)."""
    from pathlib import PureWindowsPath
    from urllib.parse import quote

    posix = PureWindowsPath(path).as_posix() if "\\" in path else path
    return quote(posix, safe="/:@-._~!$&'()*+,;=")


def _sarif_fix(fix: Fix, path: str) -> dict:
    """A SARIF ``fix``: the edits as replacements (regions 1-based, end column exclusive, like :class:`Edit`)."""
    replacements = [
        {
            "deletedRegion": {"startLine": e.line, "startColumn": e.col, "endLine": e.end_line, "endColumn": e.end_col},
            "insertedContent": {"text": e.content},
        }
        for e in fix.edits
    ]
    return {
        "description": {"text": fix.message},
        "artifactChanges": [{"artifactLocation": {"uri": _sarif_uri(path)}, "replacements": replacements}],
        "properties": {"applicability": fix.applicability},
    }


def to_sarif(findings: Iterable[Finding]) -> dict:
    """The findings as one SARIF 2.1.0 log (a ``dict``; ``json.dumps`` it), for code-scanning upload.

    Every rule of the catalogue is listed in the tool's driver (with its long
    explanation as help), each finding is a result pointing at its rule, file,
    1-based line and 1-based column (SARIF counts columns from 1).

    >>> f = Finding("GG101", "stale-gradient", "error", "msg", "train.py", 3, 4)
    >>> log = to_sarif([f])
    >>> log["version"], log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    ('2.1.0', {'startLine': 3, 'startColumn': 5})
    """
    from . import __version__
    from .rules import RULES

    codes = list(RULES)
    rules = [
        {
            "id": r.code,
            "name": r.name,
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": f"{r.summary} {r.consequence}"},
            "help": {"text": f"{r.fix}\n\n{r.explain()}", "markdown": r.explain()},
            "defaultConfiguration": {"level": _SARIF_LEVELS.get(r.severity, "warning")},
            "properties": {"tags": ["gradguard", "pytorch"]},
        }
        for r in RULES.values()
    ]
    results = []
    for f in findings:
        result = {
            "ruleId": f.code,
            "level": _SARIF_LEVELS.get(f.severity, "warning"),
            "message": {"text": f.message},
        }
        if f.code in RULES:
            result["ruleIndex"] = codes.index(f.code)
        if f.path is not None:
            location: dict = {"artifactLocation": {"uri": _sarif_uri(f.path)}}
            if f.line is not None:
                region = {"startLine": max(int(f.line), 1)}
                if f.col is not None:
                    region["startColumn"] = int(f.col) + 1
                location["region"] = region
            result["locations"] = [{"physicalLocation": location}]
        if f.fix is not None and f.path is not None:
            result["fixes"] = [_sarif_fix(f.fix, f.path)]
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gradguard",
                        "version": __version__,
                        "informationUri": "https://pypi.org/project/gradguard/",
                        "rules": rules,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
