"""Editor latency of ``gradguard server``: from a change of a large file to its new diagnostics.

Starts the real server process (``python -m gradguard server``) and drives it with pygls's own
client over stdio, as an editor would: opens a file of N lines of two-loop training functions
(half of them missing their ``zero_grad``), then sends whole-document changes, each flipping one
function between buggy and clean, and times change -> publishDiagnostics for that version. The
figure includes the server's debounce (it waits that long for more keystrokes before linting).
Also reports the same file's ``gradguard.lint_source`` time in this process, side by side, so the
ratio says what the protocol and the debounce add.

    python benchmarks/bench_server.py                 # 2,000 lines, 20 changes
    python benchmarks/bench_server.py --lines 500 2000 4000 --changes 10
    python benchmarks/bench_server.py --file .venv/lib/python3.11/site-packages/torch/optim/lr_scheduler.py

``--file`` times a real file instead (each change appends a comment line): generated files put a
two-loop training function every ten lines, far denser than real code, so they are the worst case.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

FUNCTION = '''\
def train_{i}(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
{clear}            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        for x, y in loader:
            print(model(x).sum().item())

'''


def training_file(lines: int, flip: int = -1) -> str:
    """About ``lines`` lines; function ``i`` clears its gradients when ``i`` is even, except ``flip``."""
    parts, i = ["import torch\n\n\n"], 0
    while sum(p.count("\n") for p in parts) < lines:
        clean = (i % 2 == 0) != (i == flip)
        parts.append(FUNCTION.format(i=i, clear="            optimizer.zero_grad()\n" if clean else ""))
        i += 1
    return "".join(parts)


async def measure(lines: int, changes: int, real: str = "") -> dict:
    from lsprotocol import types as lsp
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("gradguard-bench", "1")
    published: dict = {}
    arrived = asyncio.Event()

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_diagnostics(params: lsp.PublishDiagnosticsParams):
        published[params.version] = (time.perf_counter(), len(params.diagnostics))
        arrived.set()

    started = time.perf_counter()
    await client.start_io(sys.executable, "-m", "gradguard", "server")
    await client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities()))
    client.initialized(lsp.InitializedParams())
    ready = time.perf_counter() - started

    from gradguard import lint_source

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.py"
        text = Path(real).read_text() if real else training_file(lines)
        path.write_text(text)
        uri = path.as_uri()
        client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        while 1 not in published:
            arrived.clear()
            await arrived.wait()
        latencies, direct, counts = [], [], []
        for k in range(changes):
            version = k + 2
            if real:
                new = text + f"# edit {k}\n"
            else:
                new = training_file(lines, flip=2 * (k % 4))  # an even (clean) function loses its zero_grad
            t = time.perf_counter()
            lint_source(new, str(path))
            direct.append(time.perf_counter() - t)
            sent = time.perf_counter()
            client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=new)]))
            while version not in published:
                arrived.clear()
                await arrived.wait()
            latencies.append(published[version][0] - sent)
            counts.append(published[version][1])
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    from gradguard.language_server import DEBOUNCE_S

    return {
        "lines": text.count("\n"), "name": Path(real).name if real else "generated", "changes": changes, "startup_s": ready, "debounce_s": DEBOUNCE_S,
        "median_ms": 1000 * statistics.median(latencies), "max_ms": 1000 * max(latencies),
        "lint_ms": 1000 * statistics.median(direct), "findings": counts[-1],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[2000], help="file sizes in lines (default 2000)")
    parser.add_argument("--changes", type=int, default=20, help="changes timed per size (default 20)")
    parser.add_argument("--file", action="append", default=[], help="time this real file too (repeatable)")
    args = parser.parse_args(argv)
    print("| file | lines | server start s | change -> diagnostics, median ms | max ms | of which debounce ms | "
          "lint_source alone, median ms | findings |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for n, real in [(n, "") for n in args.lines] + [(0, f) for f in args.file]:
        r = asyncio.run(measure(n, args.changes, real))
        print(f"| {r['name']} | {r['lines']} | {r['startup_s']:.2f} | {r['median_ms']:.0f} | {r['max_ms']:.0f} | "
              f"{1000 * r['debounce_s']:.0f} | {r['lint_ms']:.0f} | {r['findings']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
