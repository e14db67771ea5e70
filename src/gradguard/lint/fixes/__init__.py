"""Fix generators: one module per rule, each turning a diagnostic of the program model into a
:class:`~gradguard.findings.Fix`.

A generator gets the diagnostic a rule reported (its loop, optimizer, backward, step,
clearing and accumulation nodes: what the model knows) and the file as a :class:`._tree.Tree`
(positions and indentation), and returns the edits, or ``None`` where no repair is certain.
The driver (:mod:`.._checker`) calls :func:`model_fixes` once per file with findings;
:func:`attach_fixes` then gives the inserted lines the file's own line ends.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Dict, List, Optional, Sequence

from ...findings import Finding, Fix
from .._model import Diagnostic
from . import gg101_stale_gradient, gg102_discarded_gradient, gg104_unscaled_accumulation
from . import gg105_unequal_weighting, gg107_zero_not_none, gg201_graph_kept_by_logging
from ._tree import Tree

Generator = Callable[[Tree, Diagnostic], Optional[Fix]]

#: code -> the generator of its fix.
GENERATORS: Dict[str, Generator] = {
    "GG101": gg101_stale_gradient.fix,
    "GG102": gg102_discarded_gradient.fix,
    "GG104": gg104_unscaled_accumulation.fix,
    "GG105": gg105_unequal_weighting.fix,
    "GG107": gg107_zero_not_none.fix,
    "GG201": gg201_graph_kept_by_logging.fix,
}

__all__ = ["GENERATORS", "attach_fixes", "fix_for", "model_fixes"]


def fix_for(tree: Tree, d: Diagnostic) -> Optional[Fix]:
    """The fix of one diagnostic, or None (no generator, or no certain repair here)."""
    generator = GENERATORS.get(d.code)
    if generator is None:
        return None
    try:
        return generator(tree, d)
    except (ValueError, IndexError, AttributeError, KeyError, TypeError, StopIteration, RecursionError):
        return None  # a shape the generator does not know: no fix rather than a wrong one


def model_fixes(diagnostics: Sequence[Diagnostic], source: str, tree: ast.Module) -> List[Diagnostic]:
    """``diagnostics`` with their ``fix`` filled in where a repair exists (``source`` with ``\\n`` ends)."""
    if not any(d.code in GENERATORS for d in diagnostics):
        return list(diagnostics)
    t = Tree(source, tree)
    return [d._replace(fix=fix_for(t, d)) if d.code in GENERATORS else d for d in diagnostics]


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
