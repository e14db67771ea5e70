"""``gradguard server``: a language server (LSP over stdio) for editors; see :mod:`gradguard.language_server`."""

from __future__ import annotations

import argparse

from .._errors import GradguardError

EXAMPLES = """\
examples:
  gradguard server          speak LSP on stdin/stdout (an editor starts this; see docs/editors.md)

Diagnostics on open, change and save; each finding's fix as a quick fix; "fix all" as
the code action source.fixAll.gradguard; the rule's explanation on hover.
Needs the extra lsp (pygls and lsprotocol).
"""


def register(sub) -> None:
    p = sub.add_parser(
        "server",
        help="a language server (LSP, stdio): findings in your editor as you type",
        description="Run gradguard's language server on stdin/stdout. Editors start it; it reads "
        "[tool.gradguard] from the nearest pyproject.toml as `gradguard lint` does.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--stdio", action="store_true", help="use stdin/stdout (the default and only transport; "
                   "accepted because many editors pass it)")
    return p


def handle(args) -> int:
    try:
        from ..language_server import serve
    except ImportError as exc:
        from .._extras import install_hint

        raise GradguardError(
            f"gradguard server needs pygls and lsprotocol ({exc.name or exc} is missing): {install_hint('lsp')}"
        ) from None
    serve()
    return 0
