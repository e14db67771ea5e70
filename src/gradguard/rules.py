"""The rule catalogue: the one thing the run-time watch and the linter share.

Every code, name, severity, one-line summary, consequence, fix hint and the
long explanation shown by ``gradguard rule CODE`` live here, as data (the way
flake8-bugbear keeps its messages in one table). The watch and the linter only
decide *whether* a rule fired and *where*; the words come from here.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple, Optional, Sequence

from .findings import Finding


class Rule(NamedTuple):
    """One rule of SPEC §2.

    ``summary`` is the one-line "what happened"; ``consequence`` and ``fix`` are
    the two sentences appended to every finding's message; ``what``, ``why``,
    ``example`` and ``instead`` are the headed sections of ``gradguard rule``.
    ``runtime``/``static`` say which checker can report it.
    """

    code: str
    name: str
    severity: str
    summary: str
    consequence: str
    fix: str
    what: str
    why: str
    example: str
    instead: str
    runtime: bool = True
    static: bool = True

    def explain(self) -> str:
        """The text printed by ``gradguard rule CODE`` (also docs/rules.md)."""
        return (
            f"{self.code} {self.name} ({self.severity})\n\n{self.summary}\n\n"
            f"## What it does\n{self.what}\n\n## Why is this bad?\n{self.why}\n\n"
            f"## Example\n```python\n{self.example.strip()}\n```\n\n"
            f"## Use instead\n```python\n{self.instead.strip()}\n```\n\n"
            f"## Fix\n{fix_availability(self.code)}\n"
        )

    @property
    def explanation(self) -> str:
        """The longer explanation of SPEC §1 (the text of ``gradguard rule CODE``)."""
        return self.explain()


from ._rule_texts import RULE_LIST  # noqa: E402  (the data, kept apart from the type)

#: code -> :class:`Rule`, in code order.
RULES: Mapping[str, Rule] = MappingProxyType({r.code: r for r in RULE_LIST})

#: code -> the applicability of the repair ``gradguard lint --fix`` makes: ``"safe"`` (applied by
#: ``--fix``), ``"unsafe"`` (changes the numbers a user sees; only with ``--unsafe-fixes``). Codes
#: not listed have no automatic fix.
FIX_APPLICABILITY: Mapping[str, str] = MappingProxyType(
    {"GG101": "safe", "GG102": "safe", "GG104": "safe", "GG105": "unsafe", "GG107": "safe", "GG201": "safe"}
)


def fix_availability(code: str) -> str:
    """One line for ``gradguard rule CODE``: whether the rule has a safe, an unsafe or no fix.

    >>> fix_availability("GG105")
    'Fix: unsafe (applied by `gradguard lint --fix --unsafe-fixes`).'
    """
    kind = FIX_APPLICABILITY.get(code)
    if kind == "safe":
        return "Fix: safe (applied by `gradguard lint --fix`)."
    if kind == "unsafe":
        return "Fix: unsafe (applied by `gradguard lint --fix --unsafe-fixes`)."
    return "Fix: none (no automatic fix; see Use instead)."


def make_finding(
    code: str,
    detail: str = "",
    *,
    path: Optional[str] = None,
    line: Optional[int] = None,
    col: Optional[int] = None,
    step: Optional[int] = None,
    params: Optional[Sequence[str]] = None,
) -> Finding:
    """Build a :class:`Finding` for ``code`` with the catalogue's words.

    ``detail`` is the checker's specific observation (which step, which
    parameters, how many passes); the rule's consequence and fix follow it.
    """
    rule = RULES[code]
    head = detail.strip() or rule.summary
    message = " ".join(part for part in (head, rule.consequence, rule.fix) if part)
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
    )


def parse_codes(text: str | Sequence[str] | None) -> frozenset:
    """``"GG101,GG2"`` -> the set of known codes it names (prefixes allowed).

    Raises:
        GradguardError: for a code that matches no rule.
    """
    from ._errors import GradguardError

    if not text:
        return frozenset()
    items = text.split(",") if isinstance(text, str) else [c for t in text for c in str(t).split(",")]
    chosen = set()
    for item in (i.strip().upper() for i in items):
        if not item:
            continue
        matches = {c for c in RULES if c.startswith(item)}
        if not matches:
            raise GradguardError(
                f"unknown rule code {item!r}: known codes are {', '.join(RULES)} (a prefix such as 'GG1' also works)"
            )
        chosen |= matches
    return frozenset(chosen)
