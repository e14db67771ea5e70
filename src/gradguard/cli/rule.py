"""``gradguard rule``: a rule's documentation (what it does, why it is bad, example, use instead)."""

from __future__ import annotations

import argparse
import sys

EXAMPLES = """\
examples:
  gradguard rule GG101      explain stale-gradient
  gradguard rule stale-gradient   the same, by name
  gradguard rule            list every rule
"""


def register(sub) -> None:
    p = sub.add_parser(
        "rule",
        help="explain a rule: what it does, why it is bad, an example, the fix",
        description="Print a rule's documentation (the same text as docs/rules.md).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("code", nargs="?", metavar="CODE", help="a rule code such as GG101, or its name such as stale-gradient (omit to list all rules)")
    return p


def handle(args) -> int:
    from ..rules import RULES

    if args.code is None:
        for r in RULES.values():
            where = "/".join(k for k, on in (("watch", r.runtime), ("lint", r.static)) if on)
            print(f"{r.code}  {r.name:<26} {r.severity:<8} {where:<11} {r.summary}")
        return 0
    asked = args.code.strip()
    by_name = {r.name: r for r in RULES.values()}
    rule = RULES.get(asked.upper()) or by_name.get(asked.lower())
    if rule is None:
        import difflib

        close = difflib.get_close_matches(asked.lower(), list(by_name), n=1)
        hint = f"; did you mean {close[0]} ({by_name[close[0]].code})?" if close else ""
        print(f"gradguard rule: error: unknown rule {args.code!r}{hint}; known codes: {', '.join(RULES)}",
              file=sys.stderr)
        return 2
    print(rule.explanation, end="")
    return 0
