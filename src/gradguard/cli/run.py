"""``gradguard run``."""

from __future__ import annotations


def register(sub) -> None:  # filled in by the issue that owns this subcommand
    p = sub.add_parser("run", help="(not built yet)")
    p.set_defaults(handler=lambda args: (print("gradguard run: not built yet"), 2)[1])
