"""The one helper the tests use to read findings: their codes, in order."""

import json
import textwrap
from pathlib import Path


def codes(found, **lint_options) -> list:
    """The codes of ``found``: a watch (its ``.findings``), a list of findings, a JSON report file
    (a :class:`pathlib.Path`), or source text, which is linted (``lint_options`` go to ``lint_source``)."""
    if isinstance(found, Path):
        return [d["code"] for d in json.loads(found.read_text(encoding="utf-8"))]
    if isinstance(found, str):
        import gradguard as gg

        return [f.code for f in gg.lint_source(textwrap.dedent(found), **lint_options)]
    return [f.code for f in getattr(found, "findings", found)]
