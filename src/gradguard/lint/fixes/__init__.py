"""Fix generators: one module per rule, each turning a finding into a :class:`~gradguard.findings.Fix`.

A generator reads the parsed file and the finding's line, finds the statements the
repair touches (the loop, its backward, step and clearing calls, the optimizer) with
the small helpers of :mod:`._tree`, and returns the edits, or ``None`` where no repair
is certain. :func:`attach_fixes` fills the ``fix`` field of a file's findings.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Dict, List, Optional, Sequence

from ...findings import Finding, Fix
from . import gg101_stale_gradient, gg102_discarded_gradient, gg104_unscaled_accumulation
from . import gg105_unequal_weighting, gg107_zero_not_none, gg201_graph_kept_by_logging
from ._tree import Tree

Generator = Callable[[Tree, Finding], Optional[Fix]]

#: code -> the generator of its fix.
GENERATORS: Dict[str, Generator] = {
    "GG101": gg101_stale_gradient.fix,
    "GG102": gg102_discarded_gradient.fix,
    "GG104": gg104_unscaled_accumulation.fix,
    "GG105": gg105_unequal_weighting.fix,
    "GG107": gg107_zero_not_none.fix,
    "GG201": gg201_graph_kept_by_logging.fix,
}

__all__ = ["GENERATORS", "attach_fixes", "fix_for"]


def fix_for(tree: Tree, finding: Finding) -> Optional[Fix]:
    """The fix of one finding, or None (no generator, or no certain repair here)."""
    generator = GENERATORS.get(finding.code)
    if generator is None or finding.line is None:
        return None
    try:
        return generator(tree, finding)
    except (ValueError, IndexError, AttributeError, KeyError, TypeError, RecursionError):
        return None  # a shape the generator does not know: no fix rather than a wrong one


def attach_fixes(findings: Sequence[Finding], source: str, tree: Optional[ast.Module] = None) -> List[Finding]:
    """``findings`` of one file with their ``fix`` filled in where a repair exists."""
    if not any(f.code in GENERATORS for f in findings):
        return list(findings)
    try:
        t = Tree(source, tree)
    except (SyntaxError, ValueError, RecursionError):
        return list(findings)
    nl = _newline(source)
    return [f._replace(fix=_with_newline(fix_for(t, f), nl)) if f.code in GENERATORS else f for f in findings]


def _newline(text: str) -> str:
    m = re.search(r"\r\n|\r|\n", text)
    return m.group(0) if m else "\n"


def _with_newline(fix: Optional[Fix], nl: str) -> Optional[Fix]:
    """Inserted lines end like the file's lines (a CRLF file stays CRLF)."""
    if fix is None or nl == "\n":
        return fix
    return fix._replace(edits=tuple(e._replace(content=e.content.replace("\n", nl)) for e in fix.edits))
