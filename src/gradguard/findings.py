"""The :class:`Finding` record and its text and JSON forms.

A finding is a small immutable record (like flake8's ``Violation``) shared by
the run-time watch and the linter: the watch fills ``step`` and ``params``, the
linter fills ``col``; whatever is not known is ``None``.
"""

from __future__ import annotations

import json
from typing import Iterable, NamedTuple, Optional, Tuple

SEVERITIES = ("error", "warning", "info")

#: The keys of a finding's JSON object, in the order of SPEC §3.
JSON_KEYS = ("code", "name", "severity", "message", "path", "line", "col", "step", "params")


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
        return d


def to_json(findings: Iterable[Finding], indent: Optional[int] = 2) -> str:
    """A JSON array of findings, as written by ``--report`` and ``--format json``."""
    return json.dumps([f.to_dict() for f in findings], indent=indent)


def from_dict(d: dict) -> Finding:
    """The inverse of :meth:`Finding.to_dict` (reads a ``--report`` file back)."""
    params = d.get("params")
    return Finding(**{**{k: d.get(k) for k in JSON_KEYS}, "params": tuple(params) if params is not None else None})


def summary_line(findings: Iterable[Finding]) -> str:
    """``Found 3 findings (1 error, 2 warnings).`` or ``No findings.``"""
    findings = list(findings)
    if not findings:
        return "No findings."
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    noun = "finding" if len(findings) == 1 else "findings"
    return f"Found {len(findings)} {noun} ({', '.join(parts)})."
