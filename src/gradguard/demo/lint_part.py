"""The demo's linter part: ``gradguard lint`` on the bundled buggy loop.

The same three loops that the run-time part runs under the watch are checked
here before they run, from their source alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional


def run_lint_part(out_dir: Optional[os.PathLike] = None, *, print_fn=print) -> dict:
    """Lint ``gradguard/demo/buggy_loop.py``, print the findings ruff-style, return a summary.

    Args:
        out_dir: the demo's output folder (kept for the demo's interface; this part
            writes no file into it).
        print_fn: where the lines go (``print`` by default).

    Returns:
        ``{"path": ..., "findings": n, "codes": [sorted distinct codes], "by_code": {code: n}}``.

    >>> summary = run_lint_part(print_fn=lambda *a: None)
    >>> summary["codes"]
    ['GG101', 'GG102', 'GG103', 'GG104', 'GG201']
    """
    import gradguard as gg

    from ..findings import short_path, summary_line
    from . import buggy_loop

    path = Path(buggy_loop.__file__).resolve()
    shown = short_path(str(path))  # a short path when the package sits below the current folder
    findings = gg.lint_source(path.read_text(encoding="utf-8"), filename=shown)
    print_fn("== The linter: gradguard lint on the bundled buggy loop (before it runs) ==")
    for f in findings:
        print_fn(f.format())
    print_fn(summary_line(findings))
    by_code: dict = {}
    for f in findings:
        by_code[f.code] = by_code.get(f.code, 0) + 1
    return {"path": str(path), "findings": len(findings), "codes": sorted(by_code), "by_code": by_code}
