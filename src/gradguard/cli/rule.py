"""``gradguard rule``."""

from __future__ import annotations


def register(sub) -> None:  # filled in by the issue that owns this subcommand
    p = sub.add_parser("rule", help="(not built yet)")
    p.set_defaults(handler=lambda args: (print("gradguard rule: not built yet"), 2)[1])
