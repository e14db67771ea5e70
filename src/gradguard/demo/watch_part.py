"""The demo's run-time part: each loop of the bundled buggy script under ``gradguard.watch``.

Plain PyTorch runs every one of these loops without a word; under the watch
each mistake is reported at its line, with the step and the parameters.
"""

from __future__ import annotations

import os
from typing import Optional

from ..findings import short_path


def run_watch_part(out_dir: Optional[os.PathLike] = None, *, print_fn=print) -> dict:
    """Run each loop of ``gradguard/demo/buggy_loop.py`` under ``watch(mode="record")`` and print the findings.

    Args:
        out_dir: the demo's output folder (kept for the demo's interface; this part
            writes no file into it).
        print_fn: where the lines go (``print`` by default).

    Returns:
        ``{"findings": n, "codes": [sorted distinct codes], "by_loop": {loop name: [codes]}}``.

    >>> summary = run_watch_part(print_fn=lambda *a: None)
    >>> summary["codes"]
    ['GG101', 'GG102', 'GG103', 'GG104']
    """
    import torch
    from torch import nn

    import gradguard as gg

    from ..findings import summary_line
    from . import buggy_loop

    print_fn("== The run-time watch: each buggy loop under gradguard.watch(mode='record') ==")
    data = buggy_loop.make_data()
    everything, by_loop = [], {}
    for loop in buggy_loop.BUGGY_LOOPS:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        with gg.watch(mode="record") as w:
            loop(model, data)
        print_fn(f"-- {loop.__name__}: {summary_line(w.findings)}")
        for f in w.findings:
            where = f"{short_path(f.path)}:{f.line}" if f.path else "<unknown>"
            step = f"step {f.step}" if f.step is not None else "end of run"
            params = ", ".join(f.params) if f.params else "-"
            print_fn(f"   {f.code} {f.name} at {where} ({step}; params: {params})")
            print_fn(f"     {_source_line(f.path, f.line)}")
            print_fn(f"     {f.message}")
        by_loop[loop.__name__] = [f.code for f in w.findings]
        everything.extend(w.findings)
    print_fn(summary_line(everything))
    return {"findings": len(everything), "codes": sorted({f.code for f in everything}), "by_loop": by_loop}


def _source_line(path: Optional[str], line: Optional[int]) -> str:
    import linecache

    text = linecache.getline(path, line).strip() if path and line else ""
    return f"> {text}" if text else ""
