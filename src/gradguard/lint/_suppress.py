"""``# gradguard: ignore[GG101]`` comments (and bare ``# gradguard: ignore``).

Only real comments count (found with :mod:`tokenize`, so the text inside a string
never suppresses anything), and only on the line a finding is reported on.
"""

from __future__ import annotations

import io
import re
import tokenize
from typing import Dict, List, Optional, Tuple

#: line -> codes (prefixes allowed, as in ``--ignore``), or None for "everything".
Suppressions = Dict[int, Optional[frozenset]]

_PATTERN = re.compile(r"#\s*gradguard\s*:\s*ignore\b(?:\[([^\]]*)\])?", re.IGNORECASE)


def _codes(group: Optional[str]) -> Optional[frozenset]:
    if group is None:
        return None
    codes = frozenset(c.strip().upper() for c in group.split(",") if c.strip())
    return codes or None


def find_suppressions(source: str) -> Suppressions:
    """The suppression comments of ``source``, by line.

    >>> sorted(find_suppressions("loss.backward()  # gradguard: ignore[GG101, GG2]\\n")[1])
    ['GG101', 'GG2']
    >>> find_suppressions("x = 1  # gradguard: ignore\\n")
    {1: None}
    """
    if "gradguard" not in source:  # the common case costs one substring search
        return {}
    found: Suppressions = {}

    def add(line: int, match) -> None:
        codes = _codes(match.group(1))
        if codes is None or (line in found and found[line] is None):
            found[line] = None  # a bare ignore silences everything on the line
        else:
            found[line] = found.get(line, frozenset()) | codes

    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                match = _PATTERN.search(tok.string)
                if match:
                    add(tok.start[0], match)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # unparsable text: fall back to a line scan (a GG000 is then reported anyway)
        for number, line in enumerate(source.splitlines(), 1):
            match = _PATTERN.search(line)
            if match:
                add(number, match)
    return found


def is_suppressed(code: str, line: Optional[int], suppressions: Suppressions) -> bool:
    """Whether a finding of ``code`` on ``line`` is silenced by a comment there."""
    if line is None or line not in suppressions:
        return False
    codes = suppressions[line]
    return codes is None or any(code.startswith(c) for c in codes)


def unknown_codes(suppressions: Suppressions) -> List[Tuple[int, str]]:
    """``(line, code)`` for each code in a suppression comment that names no rule (a typo silences nothing).

    >>> unknown_codes(find_suppressions("x = 1  # gradguard: ignore[GG101, GG999]\\n"))
    [(1, 'GG999')]
    """
    from ..rules import RULES

    return [
        (line, code)
        for line, codes in sorted(suppressions.items())
        for code in sorted(codes or ())
        if not any(known.startswith(code) for known in RULES)
    ]
