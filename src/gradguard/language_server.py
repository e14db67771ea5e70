"""``gradguard server``: the linter's findings in the editor, over the Language Server Protocol.

A stdio server built on pygls (the optional extra ``gradguard[lsp]``), shaped like
ruff's: diagnostics for open Python documents on open, on change (debounced, so a
burst of keystrokes costs one lint) and on save, cleared on close; each finding's
fix as a quick fix (safe fixes preferred, unsafe ones marked) and "fix all" as the
``source.fixAll.gradguard`` code action; the rule's explanation on hover.

It lints exactly as ``gradguard lint FILE --force-exclude`` would: the nearest
``[tool.gradguard]`` above the file (select, extend-select, ignore, exclude, extend-exclude,
per-file-ignores, blanket-noqa) and ``# gradguard: ignore[...]``/``# noqa: GG...`` comments. The linter never imports torch, so the
server starts in well under a second. Positions are converted to the encoding
agreed at ``initialize`` (UTF-16 unless the client offers UTF-8 or UTF-32): a
finding's column counts characters, a client's may count UTF-16 units.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import ServerTextPosition, ServerTextRange, TextDocument

from ._version import __version__
from .findings import Finding
from .rules import RULES

#: The code action kind of "fix all gradguard findings" (as ruff's ``source.fixAll.ruff``).
FIX_ALL = "source.fixAll.gradguard"
#: The ``source`` of every diagnostic this server publishes.
SOURCE = "gradguard"
#: Seconds a document must stay unchanged before it is linted again (one lint per burst of typing).
DEBOUNCE_S = 0.05

_SEVERITY = {
    "error": lsp.DiagnosticSeverity.Error,
    "warning": lsp.DiagnosticSeverity.Warning,
    "info": lsp.DiagnosticSeverity.Information,
}
_DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules.md"

log = logging.getLogger(__name__)


class Linted(NamedTuple):
    """The findings of one version of a document, kept for its code actions and hovers."""

    version: Optional[int]
    findings: List[Finding]
    diagnostics: List[lsp.Diagnostic]


class GradguardServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("gradguard", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
        self.linted: Dict[str, Linted] = {}
        self.pending: Dict[str, asyncio.TimerHandle] = {}
        # one lint at a time, off the event loop (the GIL makes more threads no faster)
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradguard-lint")

    # ------------------------------------------------------------- linting
    def settings_for(self, doc: TextDocument):
        """``(path, select, ignore, excluded, blanket_noqa)``: what ``gradguard lint PATH --force-exclude`` would use."""
        from .lint import PerFileIgnores, find_config, iter_python_files, merge_config

        path = to_fs_path(doc.uri) if doc.uri.startswith("file:") else None
        if path is None:  # an unsaved buffer: no project, every rule
            return doc.uri, None, None, False, False
        folder = os.path.dirname(path)
        config = find_config([path], cwd=folder)  # a file outside any project finds no configuration
        select, ignore = merge_config(config, None, None)
        exclude, extend = None, []
        if config.source is not None:
            def anchored(patterns):  # a pattern with a "/" counts from the pyproject.toml's folder
                base = str(config.source.parent)
                return [os.path.join(base, p) if "/" in p.rstrip("/") else p for p in patterns or ()]

            exclude = anchored(config.exclude) if config.exclude is not None else None
            extend = anchored(config.extend_exclude)
            per_file = PerFileIgnores((p, codes, config.source.parent) for p, codes in config.per_file_ignores or ())
            ignore = [*(ignore or []), *sorted(per_file(path))] if per_file and per_file(path) else ignore
        kept = list(iter_python_files([path], exclude=exclude, extend_exclude=extend, force_exclude=True, notify=log.info)) \
            if os.path.exists(path) else [path]
        return path, select, ignore, not kept, config.blanket_noqa

    def findings_of(self, doc: TextDocument, text: str) -> List[Finding]:
        """The findings of ``text`` (the document's source at one version), fixes attached."""
        path, select, ignore, excluded, blanket = self.settings_for(doc)
        if excluded:
            return []
        from .lint import lint_source
        from .lint.autofix import attach_fixes

        return attach_fixes(lint_source(text, path, select=select, ignore=ignore, notify=self.show,
                                        blanket_noqa=blanket), text)

    async def lint(self, uri: str) -> None:
        """Lint the document as it is now and publish its diagnostics.

        The lint runs in a worker thread, so the server keeps answering (hovers, further
        changes) meanwhile; a result for a version the editor has already moved past is
        dropped, since the newer version's lint is on its way.
        """
        self.pending.pop(uri, None)
        doc = self.workspace.get_text_document(uri)
        if not doc.uri.endswith((".py", ".pyi")) and doc.language_id not in (None, "python"):
            return
        version, text = doc.version, doc.source
        try:
            findings = await asyncio.get_running_loop().run_in_executor(self.worker, self.findings_of, doc, text)
        except Exception as exc:  # a broken pyproject.toml, an unknown code: say so, never crash the editor
            self.show(f"gradguard: {exc}", lsp.MessageType.Error)
            findings = []
        if uri not in self.workspace.text_documents or self.workspace.get_text_document(uri).version != version:
            return  # closed, or changed while it was linted
        diagnostics = [to_diagnostic(f, doc) for f in findings]
        self.linted[uri] = Linted(version, findings, diagnostics)
        self.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=diagnostics)
        )

    def lint_later(self, uri: str, delay: float = DEBOUNCE_S) -> None:
        """Lint after ``delay`` seconds without a further change."""
        old = self.pending.pop(uri, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self.pending[uri] = loop.call_later(delay, lambda: loop.create_task(self.lint(uri)))

    def forget(self, uri: str) -> None:
        old = self.pending.pop(uri, None)
        if old is not None:
            old.cancel()
        self.linted.pop(uri, None)
        self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def show(self, text: str, kind: lsp.MessageType = lsp.MessageType.Warning) -> None:
        self.window_show_message(lsp.ShowMessageParams(type=kind, message=text))

    # ------------------------------------------------------- code actions
    def quick_fixes(self, uri: str, doc: TextDocument, wanted: Sequence[lsp.Diagnostic]) -> List[lsp.CodeAction]:
        linted = self.linted.get(uri)
        if linted is None or linted.version != doc.version:
            return []  # the document changed since it was linted: its edits would land in the wrong place
        keys = {(d.code, d.range.start.line, d.range.start.character) for d in wanted if d.source == SOURCE}
        actions = []
        for finding, diag in zip(linted.findings, linted.diagnostics):
            if finding.fix is None or (diag.code, diag.range.start.line, diag.range.start.character) not in keys:
                continue
            safe = finding.fix.applicability == "safe"
            title = f"{finding.fix.message} ({finding.code})" if safe else f"{finding.fix.message} ({finding.code}, unsafe: changes the numbers you see)"
            edits = [lsp.TextEdit(range=to_range(doc, e.line, e.col, e.end_line, e.end_col), new_text=e.content)
                     for e in finding.fix.edits]
            actions.append(lsp.CodeAction(
                title=title, kind=lsp.CodeActionKind.QuickFix, diagnostics=[diag], is_preferred=safe,
                edit=lsp.WorkspaceEdit(changes={uri: edits}),
            ))
        actions.sort(key=lambda a: not a.is_preferred)  # safe fixes first
        return actions

    def fix_all(self, uri: str, doc: TextDocument) -> Optional[lsp.CodeAction]:
        """Every safe fix, as ``gradguard lint --fix`` applies them, as one edit of the whole document."""
        from .lint.autofix import fix_source

        path, select, ignore, excluded, blanket = self.settings_for(doc)
        text = doc.source
        if excluded:
            return None
        result = fix_source(text, path, select=select, ignore=ignore, blanket_noqa=blanket)
        if result.error or result.text == text:
            return None
        end = doc.client_position_at_offset(len(text))
        whole = lsp.Range(start=lsp.Position(line=0, character=0), end=end)
        return lsp.CodeAction(
            title=f"Fix all gradguard findings ({len(result.fixed)} safe {'fix' if len(result.fixed) == 1 else 'fixes'})",
            kind=FIX_ALL, edit=lsp.WorkspaceEdit(changes={uri: [lsp.TextEdit(range=whole, new_text=result.text)]}),
        )


def to_range(doc: TextDocument, line: int, col: int, end_line: int, end_col: int) -> lsp.Range:
    """1-based, character-counted (line, col) .. (end_line, end_col) as an LSP range in the client's encoding."""
    start = ServerTextPosition(line=max(line - 1, 0), character=max(col - 1, 0))
    end = ServerTextPosition(line=max(end_line - 1, 0), character=max(end_col - 1, 0))
    return doc.range_to_client_units(ServerTextRange(start=start, end=end))


def to_diagnostic(f: Finding, doc: TextDocument) -> lsp.Diagnostic:
    """A finding as an LSP diagnostic, underlining the rest of its line (a finding names where a call starts)."""
    lines = doc.lines
    line = max((f.line or 1), 1)
    col = f.col or 1
    text = lines[line - 1].rstrip("\r\n") if line - 1 < len(lines) else ""
    end_col = max(len(text.rstrip()) + 1, col + 1) if text.strip() else col
    rule = RULES.get(f.code)
    return lsp.Diagnostic(
        range=to_range(doc, line, col, line, end_col),
        message=f"{f.short_message} ({rule.name})" if rule is not None else f.message,
        severity=_SEVERITY.get(f.severity, lsp.DiagnosticSeverity.Warning),
        code=f.code,
        code_description=lsp.CodeDescription(href=f"{_DOCS.as_uri()}#{f.code.lower()}") if _DOCS.exists() else None,
        source=SOURCE,
        data={"name": f.name, "fix": f.fix.applicability if f.fix is not None else None},
    )


def hover_text(code: str) -> str:
    rule = RULES[code]
    # The explanation opens with the same title line; the hover shows it once, in bold.
    body = rule.explanation.partition("\n\n")[2]
    return f"**{rule.code} {rule.name}** ({rule.severity})\n\n{body}"


def build_server() -> GradguardServer:
    server = GradguardServer()

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: GradguardServer, params: lsp.DidOpenTextDocumentParams) -> None:
        await ls.lint(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: GradguardServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.lint_later(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: GradguardServer, params: lsp.DidSaveTextDocumentParams) -> None:
        ls.lint_later(params.text_document.uri, 0)  # a saved pyproject change or an external edit shows at once

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: GradguardServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri)

    @server.feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=False),
    )
    async def code_action(ls: GradguardServer, params: lsp.CodeActionParams) -> List[lsp.CodeAction]:
        uri = params.text_document.uri
        doc = ls.workspace.get_text_document(uri)
        only = params.context.only
        actions: List[lsp.CodeAction] = []
        if not only or any(lsp.CodeActionKind.QuickFix.value.startswith(k) for k in only):
            actions += ls.quick_fixes(uri, doc, params.context.diagnostics)
        if not only or any(FIX_ALL.startswith(k) for k in only):
            fix_all = await asyncio.get_running_loop().run_in_executor(ls.worker, ls.fix_all, uri, doc)
            if fix_all is not None:
                actions.append(fix_all)
        return actions

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: GradguardServer, params: lsp.HoverParams) -> Optional[lsp.Hover]:
        linted = ls.linted.get(params.text_document.uri)
        if linted is None:
            return None
        pos = params.position
        for diag in linted.diagnostics:
            r = diag.range
            if r.start.line <= pos.line <= r.end.line and (
                (pos.line, pos.character) >= (r.start.line, r.start.character)
                and (pos.line, pos.character) <= (r.end.line, r.end.character)
            ):
                return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=hover_text(diag.code)),
                                 range=r)
        return None

    return server


def serve() -> None:
    """Run the server on stdin/stdout until the client says exit."""
    build_server().start_io()
