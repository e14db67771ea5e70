"""``gradguard rule``: a rule's documentation (what it does, why it is bad, example, use instead)."""

from __future__ import annotations

import argparse
import sys

EXAMPLES = """\
examples:
  gradguard rule GG101      explain stale-gradient
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
    p.add_argument("code", nargs="?", metavar="CODE", help="a rule code such as GG101 (omit to list all rules)")
    return p


def handle(args) -> int:
    from ..rules import RULES

    if args.code is None:
        for r in RULES.values():
            where = "/".join(k for k, on in (("watch", r.runtime), ("lint", r.static)) if on)
            print(f"{r.code}  {r.name:<26} {r.severity:<8} {where:<11} {r.summary}")
        return 0
    rule = RULES.get(args.code.strip().upper())
    if rule is None:
        print(f"gradguard rule: error: unknown rule code {args.code!r}; known codes: {', '.join(RULES)}", file=sys.stderr)
        return 2
    print(rule.explanation, end="")
    return 0
