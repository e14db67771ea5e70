"""Suppression comments: ``# gradguard: ignore[GG101]`` (or bare ``# gradguard: ignore``) and
``# noqa: GG101`` (flake8's and ruff's form; several codes with commas or spaces).

Only real comments count (found with :mod:`tokenize`, so the text inside a string
never suppresses anything), and only on the line a finding is reported on. A
blanket ``# noqa`` (no codes) is left to the other linters on the line: it silences
gradguard only with ``blanket-noqa = true`` in ``[tool.gradguard]``, since a line
silenced for a style checker would otherwise hide a gradient bug. Codes of other
tools in a ``# noqa`` list (``E501``) are theirs and ignored here.
"""

from __future__ import annotations

import io
import re
import tokenize
from typing import Callable, Dict, List, Optional, Tuple

#: line -> codes (prefixes allowed, as in ``--ignore``), or None for "everything".
Suppressions = Dict[int, Optional[frozenset]]

_PATTERN = re.compile(r"#\s*gradguard\s*:\s*ignore\b(?:\[([^\]]*)\])?", re.IGNORECASE)
# `# noqa`, `# noqa: E501, GG101`, `#noqa:GG101 GG104 why`; the codes are read by noqa_codes
NOQA = re.compile(r"#\s*noqa(?![\w-])(?P<colon>\s*:)?(?P<rest>[^#]*)", re.IGNORECASE)
_CODE = re.compile(r"[A-Za-z]+[0-9]+")
_SEPARATORS = re.compile(r"[\s,]+")
_NOQA_WORD = re.compile("noqa", re.IGNORECASE)


def _codes(group: Optional[str]) -> Optional[frozenset]:
    if group is None:
        return None
    codes = frozenset(c.strip().upper() for c in group.split(",") if c.strip())
    return codes or None


def noqa_codes(rest: str) -> List[str]:
    """The codes after ``# noqa:``, as written, up to the first word that is no code (a reason).

    >>> noqa_codes(" E501, GG101 GG1O1 because of the loop")
    ['E501', 'GG101', 'GG1O1']

    A code quoted in prose keeps its code (``# `# noqa: GG101`, as lint reads it``):

    >>> noqa_codes(" GG101`, per-file-ignores")
    ['GG101']
    """
    codes = []
    for word in _SEPARATORS.split(rest.strip()):
        # the punctuation prose puts after a code (a closing backtick, quote, bracket or full stop) is no part of it
        word = word.rstrip("`'\".;:)]}")
        if _CODE.fullmatch(word) or word.upper().startswith("GG"):  # a mistyped GG code is reported, not skipped
            codes.append(word)
        else:
            break
    return codes


def find_suppressions(source: str, *, blanket_noqa: bool = False,
                      notify: Optional[Callable[[int, str], None]] = None) -> Suppressions:
    """The suppression comments of ``source``, by line.

    ``blanket_noqa``: a ``# noqa`` without codes silences every rule on its line (off by
    default: it is meant for the other linters). ``notify(line, text)`` hears of a
    ``# noqa GG101`` without its colon (a blanket noqa to flake8 and ruff, so not read as codes).

    >>> sorted(find_suppressions("loss.backward()  # gradguard: ignore[GG101, GG2]\\n")[1])
    ['GG101', 'GG2']
    >>> find_suppressions("x = 1  # gradguard: ignore\\n")
    {1: None}
    >>> sorted(find_suppressions("opt.step()  # noqa: E501,GG101 GG104 (the test needs it)\\n")[1])
    ['GG101', 'GG104']
    >>> find_suppressions("opt.step()  # noqa\\n"), find_suppressions("opt.step()  # noqa\\n", blanket_noqa=True)
    ({}, {1: None})
    """
    if "gradguard" not in source and not _has_noqa(source):  # the common case costs a substring search
        return {}
    found: Suppressions = {}

    def add(line: int, codes: Optional[frozenset]) -> None:
        if codes is None or (line in found and found[line] is None):
            found[line] = None  # a bare ignore silences everything on the line
        else:
            found[line] = found.get(line, frozenset()) | codes

    def comment(line: int, text: str) -> None:
        match = _PATTERN.search(text)
        if match:
            add(line, _codes(match.group(1)))
        for noqa in NOQA.finditer(text):  # every directive: `# noqa  # noqa: GG101` (--add-noqa's form) too
            codes = noqa_codes(noqa.group("rest"))
            if noqa.group("colon") is None:
                if blanket_noqa:
                    add(line, None)
                elif notify is not None and any(c.upper().startswith("GG") for c in codes):
                    written = " ".join(codes)
                    notify(line, f"'# noqa {written}' has no colon, so it is a blanket noqa (for the other "
                                 f"linters), not read as codes: write '# noqa: {written}'")
                continue
            ours = frozenset(c.upper() for c in codes if c.upper().startswith("GG"))
            if ours:
                add(line, ours)

    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comment(tok.start[0], tok.string)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # unparsable text: fall back to a line scan (a GG000 is then reported anyway)
        found.clear()
        for number, line in enumerate(source.splitlines(), 1):
            at = line.find("#")
            if at >= 0:
                comment(number, line[at:])
    return found


def noqa_near(source: str, lines) -> bool:
    """Whether any of ``lines`` (1-based) of ``source`` mentions noqa: only then can a ``# noqa`` matter."""
    if not lines or _NOQA_WORD.search(source) is None:
        return False
    text = source.split("\n")
    return any(0 < n <= len(text) and _NOQA_WORD.search(text[n - 1]) for n in lines if n)


def _has_noqa(source: str) -> bool:
    return _NOQA_WORD.search(source) is not None


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
