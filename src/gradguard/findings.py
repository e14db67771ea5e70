"""The :class:`Finding` record and every form it takes: text, JSON, SARIF, warning.

A finding is a small immutable record (like flake8's ``Violation``) shared by
the run-time watch and the linter: the watch fills ``step`` and ``params``, the
linter fills ``col``; whatever is not known is ``None``. Its words come from
the rule table (:mod:`gradguard.rules`), which knows nothing of findings.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple

from .rules import RULES

SEVERITIES = ("error", "warning", "info")

#: The keys of a finding's JSON object, in this order; ``fix`` is null where there is none, and
#: ``end_line``/``end_col`` (where the flagged code ends, the column exclusive) are null at run time.
JSON_KEYS = ("code", "name", "severity", "message", "path", "line", "col", "step", "params", "fix", "end_line", "end_col")

#: A concise line longer than this keeps only its first clause.
_SHORT = 100


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
        col: its column (1-based like ruff and SARIF; lint only, ``None`` at run time).
        step: the optimizer step at which it happened (run time only).
        params: names of the parameters concerned (run time only).
        fix: the repair ``gradguard lint --fix`` can apply (lint only), or ``None``.
        detail: the checker's own observation, the first part of ``message``
            (``None`` when the finding was not made by :func:`make_finding`).
        advice: the fix the checker gave in place of the rule's, if any (the
            message's last part). ``detail`` and ``advice`` are the parts a
            rewrite starts from (see :func:`make_finding`); they are not in the JSON.
        end_line, end_col: where the flagged code ends (lint only; the column is
            1-based and exclusive, as ruff's and SARIF's ends are): a call, an
            assignment, or the header of a loop or function.

    >>> f = Finding("GG101", "stale-gradient", "error", "Step reused gradients. More words.", "train.py", 3, 5)
    >>> f.format()
    'train.py:3:5: GG101 Step reused gradients'
    >>> f._replace(step=7).format(full=True)
    'train.py:3:5: GG101 Step reused gradients. More words. [step 7]'
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
    detail: Optional[str] = None
    advice: Optional[str] = None
    end_line: Optional[int] = None
    end_col: Optional[int] = None

    def location(self) -> str:
        """``path:line:col`` as far as it is known (ruff's form)."""
        parts = [self.path or "<unknown>"]
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)

    @property
    def short_message(self) -> str:
        """What happened, without the rule's consequence and fix (``gradguard rule CODE`` has those).

        The checker's own observation when it made one, cut to its first clause
        when long; otherwise the message's first sentence.
        """
        text = self.message
        rule = RULES.get(self.code)
        if self.detail:  # the checker's part, kept as it was made
            text = self.detail
        elif rule is not None:  # a finding read back from JSON: its message has the rule's words after the detail
            for tail in (rule.consequence, rule.fix):
                at = text.find(tail) if tail else -1
                if at > 0:
                    text = text[:at]
                    break
        text = text.strip()
        if rule is None or text == self.message.strip():
            text = _first_sentence(text)
        if len(text) > _SHORT:
            text = _first_clause(text)
        return text.rstrip(". ")

    def format(self, full: bool = False) -> str:
        """One line: ``path:line:col: CODE what happened`` (``full``: the whole message), then ``[step N]`` at run time."""
        text = self.message if full else self.short_message
        return f"{self.location()}: {self.code} {text}{self._step_suffix(text)}"

    def warning_text(self) -> str:
        """The text of the :class:`gradguard.GradientBugWarning` (its location is the warning's own)."""
        return f"{self.code} {self.message}{self._step_suffix(self.message)}"

    def _step_suffix(self, text: str) -> str:
        """`` [step N]`` at run time, unless the text already names that step."""
        if self.step is None or f"(step {self.step})" in text:
            return ""
        return f" [step {self.step}]"

    def to_dict(self) -> dict:
        """The JSON object of one finding (``None`` becomes ``null``)."""
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

    @classmethod
    def from_dict(cls, d: dict) -> "Finding":
        """The finding back from its JSON object (what :meth:`to_dict` wrote).

        >>> f = Finding("GG101", "stale-gradient", "error", "Step reused gradients.", "t.py", 3, None, 2, ("w",))
        >>> Finding.from_dict(f.to_dict()) == f
        True
        """
        fix = d.get("fix")
        if fix is not None:
            fix = Fix(fix["message"], tuple(Edit(**e) for e in fix["edits"]), fix["applicability"])
        params = d.get("params")
        return cls(**{**{k: d.get(k) for k in JSON_KEYS}, "params": tuple(params) if params is not None else None,
                      "fix": fix})


def _first_sentence(text: str) -> str:
    at = text.find(". ")
    return text[: at + 1] if at > 0 else text


def _first_clause(text: str) -> str:
    """The text up to its first ``: `` outside backticks, when that leaves something to read."""
    ticks = 0
    for i, ch in enumerate(text):
        if ch == "`":
            ticks += 1
        elif ch == ":" and text[i + 1 : i + 2] == " " and ticks % 2 == 0 and i >= 20:
            return text[:i]
    return text


def make_finding(
    code: str,
    detail: str = "",
    *,
    path: Optional[str] = None,
    line: Optional[int] = None,
    col: Optional[int] = None,
    step: Optional[int] = None,
    params: Optional[Sequence[str]] = None,
    advice: Optional[str] = None,
) -> Finding:
    """Build a :class:`Finding` for ``code`` with the rule table's words.

    ``detail`` is the checker's specific observation (which step, which
    parameters, how many passes); the rule's consequence and fix follow it.
    ``advice`` replaces the rule's fix where the checker knows better (a file
    that cannot be read needs no syntax fixed). The message is rendered from
    these parts here, once; the finding keeps the parts, so a rewrite (a framework
    integration's relocation and advice) builds a new finding from them rather
    than editing the text.
    """
    rule = RULES[code]
    head = detail.strip() or rule.summary
    message = " ".join(part for part in (head, rule.consequence, advice or rule.fix) if part)
    return Finding(
        code=rule.code,
        name=rule.name,
        severity=rule.severity,
        message=message,
        path=path,
        line=line,
        col=col,
        step=step,
        params=tuple(params) if params is not None else None,
        detail=detail.strip() or None,
        advice=advice,
    )


def short_path(path: str, start: Optional[str] = None) -> str:
    """``path`` relative to the current folder (or ``start``) when it lies below it, else as it is: how
    gradguard shows a file (``gradguard lint`` and ``gradguard run`` alike).

    >>> import os
    >>> short_path(os.path.join(os.getcwd(), "train.py")), short_path("/elsewhere/x.py") in ("/elsewhere/x.py",)
    ('train.py', True)
    >>> short_path("/proj/src/train.py", start="/proj"), short_path("<stdin>")
    ('src/train.py', '<stdin>')
    """
    if not path or path.startswith("<"):  # <stdin>, <string>: not a file
        return path
    try:
        rel = os.path.relpath(path, start) if start else os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith(os.pardir) else rel


def to_json(findings: Iterable[Finding], indent: Optional[int] = 2) -> str:
    """A JSON array of findings, as written by ``--report`` and ``--format json``."""
    return json.dumps([f.to_dict() for f in findings], indent=indent)


def summary_line(findings: Iterable[Finding]) -> str:
    """``Found 3 findings (1 error, 2 warnings).`` or ``No findings.``"""
    findings = list(findings)
    if not findings:
        return "No findings."
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITIES}
    parts = [f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n]
    noun = "finding" if len(findings) == 1 else "findings"
    return f"Found {len(findings)} {noun} ({', '.join(parts)})."


def statistics(findings: Iterable[Finding]) -> List[Tuple[str, str, int]]:
    """``(code, name, count)`` per code, most frequent first (ruff's ``--statistics``)."""
    counts = Counter((f.code, f.name) for f in findings)
    return sorted(((code, name, n) for (code, name), n in counts.items()), key=lambda t: (-t[2], t[0]))


def format_statistics(findings: Iterable[Finding]) -> str:
    """The ``--statistics`` table: ``count<TAB>code<TAB>name`` per line.

    >>> f = Finding("GG101", "stale-gradient", "error", "m")
    >>> format_statistics([f, f, f._replace(code="GG201", name="graph-kept-by-logging")]).splitlines()
    ['2\\tGG101\\tstale-gradient', '1\\tGG201\\tgraph-kept-by-logging']
    """
    rows = statistics(findings)
    width = max((len(str(n)) for _, _, n in rows), default=1)
    return "\n".join(f"{n:>{width}}\t{code}\t{name}" for code, name, n in rows)


#: SARIF ``level`` for each severity (SARIF has no "info"; "note" is its equivalent).
_SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def _sarif_uri(path: str) -> str:
    r"""A URI reference for a path: relative paths stay relative, absolute ones become ``file:`` URIs.

    The path's bytes are percent-encoded as they are on disk, so a file name
    that is not UTF-8 still gives a valid URI; a first segment with a colon
    (``x:y.py``) is written ``./x:y.py`` so that it does not read as a scheme.

    >>> _sarif_uri("dir with space/x:y.py"), _sarif_uri("x:y.py"), _sarif_uri("C:\\proj\\x.py")
    ('dir%20with%20space/x:y.py', './x:y.py', 'file:///C:/proj/x.py')
    """
    import re
    from urllib.parse import quote

    safe = "/:@-._~!$&'()*+,;="
    windows = re.match(r"^[A-Za-z]:[\\/]", path)
    if windows or "\\" in path:
        path = path.replace("\\", "/")
    raw = os.fsencode(path)  # surrogate-escaped bytes of a non-UTF-8 name come back as they were
    if windows:
        return "file:///" + quote(raw, safe=safe)
    if path.startswith("/"):
        return "file://" + quote(raw, safe=safe)
    uri = quote(raw, safe=safe)
    if ":" in uri.split("/", 1)[0]:
        uri = "./" + uri
    return uri


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

    Every rule of the table is listed in the tool's driver (with its long
    explanation as help), each finding is a result pointing at its rule, file,
    line and column (both 1-based, as in :class:`Finding`), and where the flagged code ends
    (``endLine``/``endColumn``, the column exclusive) when the linter knows it.

    >>> f = Finding("GG101", "stale-gradient", "error", "msg", "train.py", 3, 5, end_line=3, end_col=21)
    >>> log = to_sarif([f])
    >>> log["version"], log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    ('2.1.0', {'startLine': 3, 'startColumn': 5, 'endLine': 3, 'endColumn': 21})
    """
    from ._version import __version__

    codes = list(RULES)
    rules = [
        {
            "id": r.code,
            "name": r.name,
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": f"{r.summary} {r.consequence}"},
            "help": {"text": f"{r.fix}\n\n{r.explanation}", "markdown": r.explanation},
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
                    region["startColumn"] = max(int(f.col), 1)
                if f.end_line is not None and f.end_line >= region["startLine"]:
                    region["endLine"] = int(f.end_line)
                    if f.end_col is not None and f.col is not None:
                        region["endColumn"] = max(int(f.end_col), 1)
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
                "tool": {"driver": {"name": "gradguard", "version": __version__, "rules": rules}},
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
