"""The linter and the language server work where torch cannot be imported; the run-time parts say so in one line.

torch is not a hard dependency (pyproject.toml): `gradguard lint`, `--fix`, `rule` and `server` must
never import it, and `run`, `demo`, `plan`, `pytest --gradguard` and the run-time API must refuse with
one line (exit 2 for the CLI), never a traceback. Each check runs in a fresh interpreter whose import
system refuses torch and records every attempt to import it, so an import that something catches
and ignores is caught too.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _scripts import STALE_GRADIENT_PROGRAM as BUGGY

ROOT = Path(__file__).resolve().parent.parent

# Installed first in the child: `import torch` (and any torch.*) fails as if torch were not installed,
# and every attempt is written to the file named by GG_TORCH_ATTEMPTS.
BLOCKER = textwrap.dedent("""\
    import importlib.abc, os, sys

    class _NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                with open(os.environ["GG_TORCH_ATTEMPTS"], "a") as fh:
                    fh.write(name + "\\n")
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoTorch())
""")


def run_without_torch(tmp_path, code: str, stdin: str = "", timeout: int = 120):
    """Run ``code`` after the blocker; returns (the process, the torch imports it attempted)."""
    attempts = tmp_path / "torch-attempts.txt"
    attempts.write_text("")
    env = {**os.environ, "GG_TORCH_ATTEMPTS": str(attempts), "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", BLOCKER + code], input=stdin, capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=timeout)
    return done, attempts.read_text().split()


def cli(*args) -> str:
    return f"from gradguard.cli import main\nraise SystemExit(main({list(args)!r}))\n"


@pytest.mark.slow
def test_lint_finds_and_fixes_without_torch(tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    done, attempts = run_without_torch(tmp_path, cli("lint", "train.py"))
    assert done.returncode == 1 and "train.py:6:5: GG101" in done.stdout, done.stdout + done.stderr
    assert attempts == []
    for fmt in ("json", "sarif", "github", "full"):
        done, attempts = run_without_torch(tmp_path, cli("lint", "train.py", "--format", fmt))
        assert done.returncode == 1 and "GG101" in done.stdout and attempts == [], (fmt, done.stderr, attempts)
    done, attempts = run_without_torch(tmp_path, cli("lint", "train.py", "--fix"))
    assert done.returncode == 0 and "Fixed 1 finding" in done.stdout, done.stdout + done.stderr
    assert "optimizer.zero_grad(set_to_none=True)" in (tmp_path / "train.py").read_text() and attempts == []
    done, attempts = run_without_torch(tmp_path, cli("rule", "GG101"))
    assert done.returncode == 0 and "stale-gradient" in done.stdout and attempts == []


def test_the_blocker_sees_an_import_of_torch(tmp_path):
    """Negative control: the recorder does catch an import of torch that is caught and ignored."""
    done, attempts = run_without_torch(tmp_path, "try:\n    import torch.nn\nexcept ImportError:\n    pass\n")
    assert done.returncode == 0 and attempts == ["torch"], (done.stderr, attempts)


@pytest.mark.parametrize("argv", [
    ["run", "train.py"],
    ["run", "-m", "train"],
    ["demo", "--out", "out"],
    ["plan", "m:f", "--batch-size", "8", "--budget", "1GiB"],
])
def test_runtime_commands_say_torch_is_missing_in_one_line(tmp_path, argv):
    (tmp_path / "train.py").write_text(BUGGY)
    done, _ = run_without_torch(tmp_path, cli(*argv))
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr
    assert err[0].startswith(f"gradguard {argv[0]}: error: ") and "needs PyTorch (torch>=2.1)" in err[0], err
    assert "https://pytorch.org/get-started/locally/" in err[0] and "Traceback" not in done.stderr
    assert "gradguard[" not in err[0]  # gradguard is not on a package index: no install line that looks it up there
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.slow
def test_the_api_names_what_to_install(tmp_path):
    code = textwrap.dedent("""\
        import gradguard as gg
        assert gg.lint_source(open("train.py").read())[0].code == "GG101"
        for use in (lambda: gg.Accumulator, lambda: gg.grads_per_step, lambda: gg.watch().__enter__()):
            try:
                use()
            except ModuleNotFoundError as exc:
                assert exc.name == "torch", exc.name
                print(exc)
    """)
    (tmp_path / "train.py").write_text(BUGGY)
    done, attempts = run_without_torch(tmp_path, code)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 3, done.stdout + done.stderr
    assert all("needs PyTorch (torch>=2.1), which is not installed" in line for line in lines), lines
    assert lines[0].startswith("gradguard.Accumulator needs") and attempts  # the API did try torch


@pytest.mark.slow
def test_pytest_gradguard_without_torch_is_a_usage_error(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    done, _ = run_without_torch(tmp_path, "import pytest\nraise SystemExit(pytest.main(['--gradguard', '-q', "
                                          "'-p', 'no:cacheprovider', 'test_x.py']))\n")
    assert done.returncode == 4 and "needs PyTorch (torch>=2.1)" in done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def _message(body: dict) -> bytes:
    data = json.dumps(body).encode()
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def _read_messages(raw: bytes) -> list:
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
        out.append(json.loads(rest[:length]))
        raw = rest[length:]
    return out


@pytest.mark.slow
def test_the_language_server_publishes_findings_without_torch(tmp_path):
    pytest.importorskip("pygls")
    import select

    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    attempts = tmp_path / "torch-attempts.txt"
    attempts.write_text("")
    env = {**os.environ, "GG_TORCH_ATTEMPTS": str(attempts), "PYTHONPATH": str(ROOT / "src")}
    server = subprocess.Popen([sys.executable, "-c", BLOCKER + cli("server")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    try:
        server.stdin.write(b"".join(_message(m) for m in [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}},
            {"jsonrpc": "2.0", "method": "initialized", "params": {}},
            {"jsonrpc": "2.0", "method": "textDocument/didOpen",
             "params": {"textDocument": {"uri": path.as_uri(), "languageId": "python", "version": 1, "text": BUGGY}}},
        ]))
        server.stdin.flush()
        seen = b""
        while b"publishDiagnostics" not in seen:  # the lint runs in the server's worker thread
            ready, _, _ = select.select([server.stdout], [], [], 60)
            chunk = os.read(server.stdout.fileno(), 65536) if ready else b""
            assert chunk, f"no diagnostics from the server: {seen!r} {server.stderr.read1() if not ready else b''}"
            seen += chunk
        server.stdin.write(_message({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
                           + _message({"jsonrpc": "2.0", "method": "exit"}))
        server.stdin.flush()
        rest, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0, err.decode()[-2000:]
    messages = _read_messages(seen + rest)
    published = [m for m in messages if m.get("method") == "textDocument/publishDiagnostics"]
    assert published and [d["code"] for d in published[0]["params"]["diagnostics"]] == ["GG101"], messages
    assert attempts.read_text() == ""
