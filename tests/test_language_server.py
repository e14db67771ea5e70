"""`gradguard server` driven by a real LSP client (pytest-lsp) over stdio: the server is the
real process an editor would start, and every assertion is on what the client receives."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
lsp = pytest.importorskip("lsprotocol.types")

from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

pytestmark = pytest.mark.slow  # each test starts a server process

from gradguard import lint_source  # noqa: E402
from gradguard.lint.autofix import fix_source  # noqa: E402

BUGGY = """\
import torch

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in [(torch.ones(1, 2), torch.ones(1, 1))] * 3:
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
"""
CLEAN = BUGGY.replace("    loss.backward()\n", "    optimizer.zero_grad()\n    loss.backward()\n")
SERVER = [sys.executable, "-m", "gradguard", "server"]


def _capabilities(encodings=None) -> lsp.ClientCapabilities:
    return lsp.ClientCapabilities(
        general=lsp.GeneralClientCapabilities(position_encodings=encodings) if encodings else None,
        text_document=lsp.TextDocumentClientCapabilities(
            publish_diagnostics=lsp.PublishDiagnosticsClientCapabilities(version_support=True),
            hover=lsp.HoverClientCapabilities(content_format=[lsp.MarkupKind.Markdown]),
            code_action=lsp.CodeActionClientCapabilities(
                code_action_literal_support=lsp.ClientCodeActionLiteralOptions(
                    code_action_kind=lsp.ClientCodeActionKindOptions(value_set=["quickfix", "source.fixAll"])
                )
            ),
        ),
    )


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient, tmp_path):
    result = await lsp_client.initialize_session(
        lsp.InitializeParams(capabilities=_capabilities(), root_uri=tmp_path.as_uri())
    )
    assert result.capabilities.position_encoding == lsp.PositionEncodingKind.Utf16
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def utf8_client(lsp_client: LanguageClient, tmp_path):
    result = await lsp_client.initialize_session(
        lsp.InitializeParams(capabilities=_capabilities([lsp.PositionEncodingKind.Utf8, lsp.PositionEncodingKind.Utf16]),
                             root_uri=tmp_path.as_uri())
    )
    assert result.capabilities.position_encoding == lsp.PositionEncodingKind.Utf8
    yield
    await lsp_client.shutdown_session()


async def _diagnostics(client: LanguageClient, uri: str, version: int, timeout: float = 30.0):
    """The diagnostics the server published for ``uri`` at ``version`` (waits for them)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        got = client.diagnostics.get(uri)
        params = getattr(client, "_gg_versions", {}).get(uri)
        if got is not None and params == version:
            return list(got)
        await asyncio.sleep(0.02)
    raise AssertionError(f"no diagnostics for {uri} at version {version}; have {client.diagnostics.get(uri)}")


def _track_versions(client: LanguageClient) -> None:
    """Remember the document version each publishDiagnostics was for (pytest-lsp keeps only the list)."""
    if hasattr(client, "_gg_versions"):
        return
    client._gg_versions = {}

    def published(params: lsp.PublishDiagnosticsParams):
        client.diagnostics[params.uri] = params.diagnostics
        client._gg_versions[params.uri] = params.version

    # pytest-lsp's own handler keeps only the list: replace it with one that keeps the version too
    client.protocol.fm.features[lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = published


def _open(client: LanguageClient, path: Path, text: str, version: int = 1) -> str:
    _track_versions(client)
    path.write_text(text)
    uri = path.as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))
    return uri


def _change(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)]))


def _apply(text: str, edits) -> str:
    """Apply LSP text edits (UTF-16 positions; ASCII here) to ``text``, last first."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos):
        return starts[pos.line] + pos.character if pos.line < len(lines) else len(text)

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end):]
    return text


@pytest.mark.asyncio
async def test_open_change_save_close(client: LanguageClient, tmp_path):
    uri = _open(client, tmp_path / "train.py", BUGGY)
    diags = await _diagnostics(client, uri, 1)
    expected = lint_source(BUGGY, str(tmp_path / "train.py"))
    assert [(d.code, d.range.start.line + 1, d.range.start.character + 1) for d in diags] == \
        [(f.code, f.line, f.col) for f in expected]
    assert diags and diags[0].code == "GG101" and diags[0].source == "gradguard"
    assert diags[0].severity == lsp.DiagnosticSeverity.Error
    assert "stale-gradient" in diags[0].message
    assert diags[0].code_description is None or diags[0].code_description.href.endswith("#gg101")

    _change(client, uri, CLEAN, 2)  # the fix typed in: the finding goes away
    assert await _diagnostics(client, uri, 2) == []
    _change(client, uri, BUGGY, 3)
    assert [d.code for d in await _diagnostics(client, uri, 3)] == ["GG101"]

    client.text_document_did_save(lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    assert [d.code for d in await _diagnostics(client, uri, 3)] == ["GG101"]

    client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while client.diagnostics.get(uri) and loop.time() < deadline:
        await asyncio.sleep(0.02)
    assert list(client.diagnostics.get(uri)) == []  # cleared on close


@pytest.mark.asyncio
async def test_quick_fix_and_fix_all_then_relint(client: LanguageClient, tmp_path):
    uri = _open(client, tmp_path / "train.py", BUGGY)
    diags = await _diagnostics(client, uri, 1)
    actions = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), range=diags[0].range,
        context=lsp.CodeActionContext(diagnostics=diags)))
    quick = [a for a in actions if a.kind == lsp.CodeActionKind.QuickFix]
    assert quick and quick[0].is_preferred and "GG101" in quick[0].title
    fixed = _apply(BUGGY, quick[0].edit.changes[uri])
    assert fixed == fix_source(BUGGY, str(tmp_path / "train.py")).text  # the same edit as `gradguard lint --fix`
    assert lint_source(fixed) == []

    fix_all = [a for a in actions if a.kind == "source.fixAll.gradguard"]
    assert len(fix_all) == 1 and _apply(BUGGY, fix_all[0].edit.changes[uri]) == fixed

    only = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), range=diags[0].range,
        context=lsp.CodeActionContext(diagnostics=[], only=["source.fixAll"])))
    assert [a.kind for a in only] == ["source.fixAll.gradguard"]

    _change(client, uri, fixed, 2)  # the editor applied it: re-linted clean
    assert await _diagnostics(client, uri, 2) == []
    again = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), range=diags[0].range,
        context=lsp.CodeActionContext(diagnostics=[])))
    assert not again  # nothing left to fix


@pytest.mark.asyncio
async def test_hover_explains_the_rule(client: LanguageClient, tmp_path):
    uri = _open(client, tmp_path / "train.py", BUGGY)
    diag = (await _diagnostics(client, uri, 1))[0]
    hover = await client.text_document_hover_async(lsp.HoverParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), position=diag.range.start))
    assert hover is not None and hover.contents.kind == lsp.MarkupKind.Markdown
    assert "stale-gradient" in hover.contents.value and "zero_grad" in hover.contents.value
    nothing = await client.text_document_hover_async(lsp.HoverParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=0, character=0)))
    assert nothing is None


@pytest.mark.asyncio
async def test_syntax_error_and_suppression_and_config(client: LanguageClient, tmp_path):
    uri = _open(client, tmp_path / "broken.py", "def f(:\n    pass\n")
    assert [d.code for d in await _diagnostics(client, uri, 1)] == ["GG000"]

    quiet = BUGGY.replace("    optimizer.step()\n", "    optimizer.step()  # gradguard: ignore[GG101]\n")
    uri2 = _open(client, tmp_path / "quiet.py", quiet)
    assert await _diagnostics(client, uri2, 1) == []

    ignoring = tmp_path / "ignoring"
    ignoring.mkdir()
    (ignoring / "pyproject.toml").write_text('[tool.gradguard]\nignore = ["GG101"]\n')
    uri3 = _open(client, ignoring / "train.py", BUGGY)
    assert await _diagnostics(client, uri3, 1) == []  # configured ignore honoured

    excluding = tmp_path / "excluding"
    (excluding / "gen").mkdir(parents=True)
    (excluding / "pyproject.toml").write_text('[tool.gradguard]\nextend-exclude = ["gen/*.py"]\n')
    uri4 = _open(client, excluding / "gen" / "other.py", BUGGY)
    assert await _diagnostics(client, uri4, 1) == []  # excluded: nothing, as with --force-exclude
    uri5 = _open(client, excluding / "kept.py", BUGGY)  # the control: the same project, not excluded
    assert [d.code for d in await _diagnostics(client, uri5, 1)] == ["GG101"]

    # `# noqa: GG101`, per-file-ignores and blanket-noqa as `gradguard lint` reads them
    uri6 = _open(client, tmp_path / "noqa.py", BUGGY.replace("    optimizer.step()\n", "    optimizer.step()  # noqa: GG101\n"))
    assert await _diagnostics(client, uri6, 1) == []
    per_file = tmp_path / "per_file"
    (per_file / "tests").mkdir(parents=True)
    (per_file / "pyproject.toml").write_text('[tool.gradguard]\nblanket-noqa = true\n'
                                             '[tool.gradguard.per-file-ignores]\n"tests/*" = ["GG101"]\n')
    uri7 = _open(client, per_file / "tests" / "test_loop.py", BUGGY)
    assert await _diagnostics(client, uri7, 1) == []
    uri8 = _open(client, per_file / "blanket.py", BUGGY.replace("    optimizer.step()\n", "    optimizer.step()  # noqa\n"))
    assert await _diagnostics(client, uri8, 1) == []
    uri9 = _open(client, per_file / "train.py", BUGGY)  # the control: outside tests/, no noqa
    assert [d.code for d in await _diagnostics(client, uri9, 1)] == ["GG101"]


@pytest.mark.asyncio
async def test_file_outside_any_project_and_unsaved_buffer(client: LanguageClient, tmp_path):
    # a folder with no pyproject.toml above it (tmp_path may sit under one on some machines: use '/')
    uri = _open(client, tmp_path / "lone.py", BUGGY)
    assert [d.code for d in await _diagnostics(client, uri, 1)] == ["GG101"]
    _track_versions(client)
    untitled = "untitled:Untitled-1"
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=untitled, language_id="python", version=1, text=BUGGY)))
    assert [d.code for d in await _diagnostics(client, untitled, 1)] == ["GG101"]


@pytest.mark.asyncio
async def test_positions_in_the_agreed_encoding(utf8_client: LanguageClient, tmp_path):
    # "é" is 1 character, 1 UTF-16 unit, 2 UTF-8 bytes: the column moves by one under UTF-8
    text = BUGGY.replace("    optimizer.step()\n", "    é = 1; optimizer.step()\n")
    uri = _open(utf8_client, tmp_path / "train.py", text)
    diags = await _diagnostics(utf8_client, uri, 1)
    (finding,) = lint_source(text)
    assert finding.code == "GG101"
    assert diags[0].range.start.character == finding.col - 1 + 1  # one extra byte before it


@pytest.mark.asyncio
async def test_positions_utf16_astral(client: LanguageClient, tmp_path):
    # an emoji is 1 character but 2 UTF-16 units
    text = BUGGY.replace("    optimizer.step()\n", "    s = '😋'; optimizer.step()\n")
    uri = _open(client, tmp_path / "train.py", text)
    diags = await _diagnostics(client, uri, 1)
    (finding,) = lint_source(text)
    assert diags[0].range.start.character == finding.col - 1 + 1


def test_server_never_imports_torch():
    """The server answers in milliseconds only because linting never loads torch (seconds)."""
    import subprocess

    code = ("import sys, gradguard.language_server, gradguard.cli.server; "
            "gradguard.language_server.build_server(); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_missing_extra_is_one_line(monkeypatch, capsys):
    """Without pygls, `gradguard server` says which extra to install: one line, exit 2."""
    import builtins

    from gradguard.cli import main

    real = builtins.__import__

    def no_pygls(name, *args, **kwargs):
        if name.startswith(("pygls", "lsprotocol")) or name.endswith("language_server"):
            raise ImportError(f"No module named {name!r}", name=name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pygls)
    assert main(["server"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # the extra's own requirements: gradguard is not on a package index, so "gradguard[lsp]" would not resolve
    assert len(err) == 1 and 'pip install "pygls<3,>=2" "lsprotocol>=2025.0.0"' in err[0] and "gradguard[" not in err[0]


def test_neovim_runs_the_documented_configuration(tmp_path):
    """docs/editors.md's Neovim configuration, as pasted into init.lua, gets the diagnostic at the right
    place from `gradguard server` (where `nvim` is installed; Debian 12 ships Neovim 0.7.2)."""
    import os
    import re
    import shutil
    import subprocess

    nvim = shutil.which("nvim")
    if nvim is None:
        pytest.skip("nvim is not installed")
    root = Path(__file__).resolve().parents[1]
    (config,) = re.findall(r"```lua\n(.*?)```", (root / "docs" / "editors.md").read_text(encoding="utf-8"), re.S)
    (tmp_path / "init.lua").write_text(config)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "check.lua").write_text("""
vim.wait(60000, function() return #vim.diagnostic.get(0) > 0 end, 100)
for _, d in ipairs(vim.diagnostic.get(0)) do
  io.stdout:write(string.format('%d:%d %s\\n', d.lnum + 1, d.col + 1, d.code or '?'))
end
vim.cmd('qa!')
""")
    # `gradguard` on PATH, as the page asks: this environment's, running this checkout's source
    env = {**os.environ, "PYTHONPATH": str(root / "src"),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    out = subprocess.run([nvim, "--headless", "-u", "init.lua", "train.py", "-c", "luafile check.lua"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    (expected,) = lint_source(BUGGY)
    assert out.stdout.strip().splitlines() == [f"{expected.line}:{expected.col} {expected.code}"], out.stdout + out.stderr
