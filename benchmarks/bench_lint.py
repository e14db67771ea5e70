"""Linter speed: ``gradguard lint`` against ``ast.parse`` of the same corpus (and TorchFix).

The corpus is the installed ``torch/nn`` and ``torch/optim`` (found without
importing torch). Sources are read into memory first, so the timings compare
parsing and checking only, not disk reads. Parse and lint are timed in
alternation ``--repeat`` times and the best run of each is kept (timeit's advice:
the minimum is the least disturbed by other processes). TorchFix (libcst-based) is timed once, if
it is installed; it is optional and not a test dependency.

    python benchmarks/bench_lint.py                 # print the tables, write the PNGs
    python benchmarks/bench_lint.py --update-docs   # also rewrite the section in docs/benchmarks.md

Targets: lint time at most 2.5x the parse time on torch/nn + torch/optim, and linear in the
size of a file of many training loops (``--scaling``: 500 to 8,000 lines of two-loop training
functions, and of a script of module-level loops, timed in interleaved rounds with the parse).
"""

from __future__ import annotations

import argparse
import ast
import gc
import importlib.util
import json
import os
import platform
import shlex
import sys
import time
import warnings
from pathlib import Path

from _compare import load_copy

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
DOCS = ROOT / "docs" / "benchmarks.md"
HEADING = "## Linter speed"
COMMAND = "python benchmarks/bench_lint.py --update-docs"
TARGET_RATIO = 2.5
#: The scaling curve is kept in the repository, beside the page that shows it.
SCALING_PNG = ROOT / "docs" / "img" / "lint_scaling.png"


def _progress(iterable, desc, total=None):
    from gradguard._progress import progress  # a bar on a terminal, plain lines in a log

    return progress(iterable, desc=desc, total=total)


def corpus():
    """``[(path, source)]`` of every .py file under torch/nn and torch/optim."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("torch is not installed: the corpus is the installed torch/nn and torch/optim")
    torch_dir = Path(list(spec.submodule_search_locations)[0])
    files = sorted(p for sub in ("nn", "optim") for p in (torch_dir / sub).rglob("*.py"))
    return torch_dir, [(str(p), p.read_text(encoding="utf-8")) for p in files]


def lint_each(lint, sources) -> int:
    """Every file linted alone (``lint_source``, as the editor server and ``lint -`` do)."""
    return sum(len(lint.lint_source(src, path)) for path, src in sources)


def lint_tree(lint, sources) -> int:
    """What ``gradguard lint DIR`` does once it has read the files: the index of every file's
    classes first, then each file linted with it (so that a loop is followed into the classes of
    other files it imports). The command's own function reads the files from disk; this one is
    given them from memory, so that disk reads are not timed."""
    project = lint.Project()
    for path, src in sources:
        project.add(src, path)
    chosen = lint._chosen(None, None)
    return sum(len(lint._lint(src, path, chosen, None, None, project)) for path, src in sources)


def time_parse_and_lint(sources, repeat, before=None):
    """``{condition: best-of-repeat seconds}`` and ``{condition: findings}`` for parsing every
    source (``parse``), linting each file alone (``each``) and linting them together as the
    command does (``tree``); with ``before`` (another checkout's linter), ``before each`` and
    ``before tree`` too.

    Every round runs every condition once, in an order that turns by one place each round,
    so that a busy machine slows them all alike; the minimum of the rounds is kept (timeit's
    advice: the least disturbed by other processes).
    """
    import gradguard.lint as this

    def parse_all():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for path, src in sources:
                ast.parse(src, filename=path)
        return 0

    conditions = {"parse": parse_all, "each": lambda: lint_each(this, sources), "tree": lambda: lint_tree(this, sources)}
    if before is not None:
        conditions["before each"] = lambda: lint_each(before, sources)
        conditions["before tree"] = lambda: lint_tree(before, sources)
    names = list(conditions)
    best = {name: float("inf") for name in names}
    found = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a suppression comment naming a code this version lacks
        for r in _progress(range(repeat), "parse+lint rounds", total=repeat):
            for name in names[r % len(names):] + names[: r % len(names)]:
                start = time.perf_counter()
                found[name] = conditions[name]()
                best[name] = min(best[name], time.perf_counter() - start)
    return best, found


def time_torchfix(sources):
    """Seconds for TorchFix's flake8 checker over the corpus, or None if not installed."""
    try:
        from torchfix.torchfix import TorchChecker
    except ImportError:
        return None, None
    start = time.perf_counter()
    n = 0
    for path, src in _progress(sources, "torchfix"):
        n += len(list(TorchChecker(None, src.splitlines(keepends=True)).run()))
    return time.perf_counter() - start, n


def helper_module(n: int) -> str:
    """``n`` helper functions calling each other (5 lines each), each holding a backward pass,
    and one training loop that calls the first: the shape that once made the checker quadratic."""
    helpers = "".join(
        f"def h{i}(model, x):\n    y = model(x)\n    z = y.backward() if x else y\n    return h{i + 1}(model, y) if x else y\n\n"
        for i in range(n)
    )
    return helpers + "def train(model, loader, opt):\n    for x in loader:\n        h0(model, x).backward()\n        opt.step()\n"


def two_loop_function(i: int) -> str:
    """A correct training function with two loops: an accumulation loop (its last partial window
    stepped at its true weight) and an evaluation loop under ``torch.no_grad()`` (22 lines)."""
    return f'''
def train_{i}(model, loader, val_loader, optimizer, loss_fn, accum):
    model.train()
    i = -1
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    if (i + 1) % accum != 0:
        [p.grad.mul_(accum / ((i + 1) % accum)) for p in model.parameters() if p.grad is not None]
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in val_loader:
            total += loss_fn(model(x), y).item()
    return total / max(len(val_loader), 1)
'''


def script_loop(i: int) -> str:
    """A module-level training loop (a script: every loop shares one scope, 8 lines)."""
    return f'''
for epoch in range(epochs):
    for x, y in loader_{i}:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
'''


SHAPES = {"two-loop functions": two_loop_function, "module-level loops": script_loop}


def scaling_source(shape: str, lines: int) -> str:
    parts, n, i = ["import torch\n"], 1, 0
    while n < lines:
        part = SHAPES[shape](i)
        parts.append(part)
        n += part.count("\n")
        i += 1
    return "".join(parts)


def time_scaling(sizes, repeat):
    """``{shape: [(lines, loops, parse_s, lint_s, findings)]}``, best of ``repeat`` rounds; every
    round parses and lints every file in turn, so that load on the machine hits all alike."""
    from gradguard.lint import lint_source

    sources = {(shape, n): scaling_source(shape, n) for shape in SHAPES for n in sizes}
    best = {key: [float("inf"), float("inf"), 0] for key in sources}
    for _ in _progress(range(repeat), "scaling rounds", total=repeat):
        for key, src in sources.items():
            # as timeit does: the collector off while timing, run between, so that a full
            # collection of what an earlier size left behind is not charged to this one
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                ast.parse(src)
                parse_s = time.perf_counter() - start
                gc.collect()
                start = time.perf_counter()
                found = len(lint_source(src))
                lint_s = time.perf_counter() - start
            finally:
                gc.enable()
            row = best[key]
            row[0], row[1], row[2] = min(row[0], parse_s), min(row[1], lint_s), found
    out = {shape: [] for shape in SHAPES}
    for (shape, n), (parse_s, lint_s, found) in best.items():
        src = sources[(shape, n)]
        loops = sum(isinstance(n, (ast.For, ast.AsyncFor, ast.While)) for n in ast.walk(ast.parse(src)))
        out[shape].append((src.count("\n"), loops, parse_s, lint_s, found))
    return out


def linear_fit(rows):
    """Least-squares ``seconds = a * lines`` through the origin, and the worst relative residual."""
    a = sum(n * t for n, _, _, t, _ in rows) / sum(n * n for n, *_ in rows)
    worst = max(abs(t - a * n) / (a * n) for n, _, _, t, _ in rows)
    return a, worst


def plot_scaling(scaling, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    colors = {"two-loop functions": "#1f77b4", "module-level loops": "#2ca02c"}
    for shape, rows in scaling.items():
        xs = [r[0] for r in rows]
        ax.plot(xs, [r[3] for r in rows], "o-", color=colors[shape], label=f"gradguard lint: {shape}")
        ax.plot(xs, [r[2] for r in rows], "x--", color=colors[shape], alpha=0.6, label=f"ast.parse: {shape}")
        a, _ = linear_fit(rows)
        ax.plot(xs, [a * x for x in xs], ":", color="#7f7f7f", linewidth=1)
    ax.plot([], [], ":", color="#7f7f7f", label="linear fit through 0 (lint)")
    ax.set_xlabel("file size (lines)")
    ax.set_ylabel("seconds (best of rounds)")
    ax.set_title("Lint time against file size: many training loops in one file", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def time_helpers(counts):
    """``[(helpers, lines, parse_s, lint_s)]``: lint time against parse time as the helpers grow."""
    from gradguard.lint import lint_source

    rows = []
    for n in counts:
        src = helper_module(n)
        start = time.perf_counter()
        ast.parse(src)
        parse_s = time.perf_counter() - start
        start = time.perf_counter()
        found = lint_source(src)
        lint_s = time.perf_counter() - start
        assert [f.code for f in found] == ["GG101"], found
        rows.append((n, src.count("\n"), parse_s, lint_s))
    return rows


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["ast.parse", "gradguard lint"]
    values = [results["parse_s"], results["lint_s"]]
    if results.get("torchfix_s") is not None:
        labels.append("TorchFix")
        values.append(results["torchfix_s"])
    fig, ax = plt.subplots(figsize=(6, 3.2))
    bars = ax.barh(labels, values, color=["#9e9e9e", "#1f77b4", "#ff7f0e"][: len(values)])
    ax.set_xscale("log")
    ax.set_xlabel("seconds (log scale, best of runs)")
    ax.set_title(f"Linting torch/nn + torch/optim ({results['files']} files, {results['lines']} lines)", fontsize=9)
    for bar, value in zip(bars, values):
        ax.text(value, bar.get_y() + bar.get_height() / 2, f" {value:.3f}s ({value / results['parse_s']:.1f}x parse)", va="center", fontsize=8)
    ax.set_xlim(right=max(values) * 20)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(results):
    lines = [
        HEADING,
        "",
        f"Command: `{results.get('command') or COMMAND}` (from the repository root; writes `benchmarks/out/bench_lint.png` and `.json`).",
        "",
        f"Corpus: the installed `torch/nn` and `torch/optim` (torch {results['torch_version']}), "
        f"{results['files']} files, {results['lines']} lines, read into memory first. "
        f"Best of {results['repeat']} rounds, each running every row once in an order that turns by one place "
        f"per round; Python {results['python']} on {results['machine']}, "
        f"{results['cpus']} CPUs shared with other jobs, so the seconds vary from run to run and the ratios are the figures to read.",
        "",
        "| what | seconds | vs `ast.parse` |",
        "|---|---|---|",
        f"| `ast.parse` of every file | {results['parse_s']:.3f} | 1.00x |",
        f"| `gradguard.lint_source` of each file alone (parse included) | {results['lint_s']:.3f} | {results['lint_ratio']:.2f}x |",
        f"| the files linted together, as `gradguard lint DIR` does once it has read them (parse included) | "
        f"{results['tree_s']:.3f} | {results['tree_ratio']:.2f}x |",
    ]
    if results.get("before_lint_s") is not None:
        lines += [
            f"| {results['compare']}: each file alone | {results['before_lint_s']:.3f} | {results['before_lint_ratio']:.2f}x |",
            f"| {results['compare']}: the files together | {results['before_tree_s']:.3f} | {results['before_tree_ratio']:.2f}x |",
        ]
    if results.get("torchfix_s") is not None:
        lines.append(
            f"| TorchFix {results['torchfix_version']} (libcst, flake8 checker, one run) | {results['torchfix_s']:.3f} | "
            f"{results['torchfix_ratio']:.1f}x |"
        )
    worst = max(results["lint_ratio"], results["tree_ratio"])
    if results.get("before_lint_s") is not None:
        lines += [
            "",
            f"The rows of {results['compare']} time the linter of that version's `src` folder (written out with "
            f"`git archive <commit> src | tar -x -C <folder>`), given to `--compare` and run in the same rounds.",
        ]
    spread = results.get("spread") or {}
    if results.get("runs", 1) > 1:
        names = {"each": "each file alone", "tree": "the files together",
                 "before each": f"{results['compare']}, each file alone", "before tree": f"{results['compare']}, the files together"}
        lines += [
            "",
            f"The table gives the best of all {results['runs']} runs of {results['repeat']} rounds; each run's own ratio "
            f"(its best lint against its best parse) spread over: "
            + "; ".join(f"{names[k]} {lo:.2f}x to {hi:.2f}x" for k, (lo, hi) in spread.items()) + ".",
        ]
        worst = max(spread["each"][1], spread["tree"][1])
    lines += [
        "",
        f"Target: lint at most {TARGET_RATIO:.1f}x the parse time: "
        f"{'met' if worst <= TARGET_RATIO else 'NOT met'} ({worst:.2f}x at most{' in any run' if results.get('runs', 1) > 1 else ''}). "
        f"The linter searches each file's text for the few words a gradient-buffer event needs "
        f"(`backward`, `zero_grad`, `.grad`, `.step`, optimizer names) and looks closely only at "
        f"statements on those lines, so most of its time is the parse itself. Linted together, a "
        f"file's loops are also followed into the classes of other files it imports (a class is "
        f"parsed once per run, and only when a call of one of its methods is seen).",
    ]
    if results.get("torchfix_s") is not None:
        lines.append(
            f"TorchFix checks different things (deprecated and misused torch APIs) on a concrete syntax tree; "
            f"the row shows the cost of a CST-based checker on the same files: gradguard is "
            f"{results['torchfix_s'] / results['lint_s']:.0f}x faster."
        )
    else:
        lines.append("TorchFix was not installed for this run (`pip install torchfix` to add its row).")
    if results.get("scaling"):
        lines += [
            "",
            f"Many training loops in one file (`--scaling`; best of {results['scaling_repeat']} rounds, each "
            "parsing and linting every size in turn, the garbage collector off while timing as in `timeit`): correct two-loop training functions (an accumulation "
            "loop whose last window is stepped at its true weight, and an evaluation loop), and a script of "
            "module-level loops sharing one scope.",
            "",
            "![lint and parse time against file size, two shapes of training code](img/lint_scaling.png)",
            "",
            "| shape | lines | loops | `ast.parse` s | lint s (parse included) | vs `ast.parse` | lint µs per line |",
            "|---|---|---|---|---|---|---|",
        ]
        for shape, rows in results["scaling"].items():
            lines += [
                f"| {shape} | {n} | {loops} | {p:.3f} | {l:.3f} | {l / p:.1f}x | {1e6 * l / n:.0f} |"
                for n, loops, p, l, _ in rows
            ]
        fits = "; ".join(
            f"{shape}: {1e6 * a:.0f} µs per line, every size within {100 * worst:.0f} % of it"
            for shape, (a, worst) in ((shape, linear_fit(rows)) for shape, rows in results["scaling"].items())
        )
        lines += [
            "",
            f"Linear fit through the origin: {fits}. What made the time grow faster than the file was "
            "work over the whole file done once per loop or per finding: each module-level loop walked "
            "the whole module again (for the window's size, for checks that the length divides, for "
            "the loss's assignments), each fix re-split the whole file to read a node's text "
            "(`ast.get_source_segment`), and each function with a closure summed every line before it. "
            "Each is now done once per scope and kept.",
        ]
    if results.get("helpers"):
        lines += [
            "",
            "Many helper functions (each holding a backward pass, each calling the next; one training loop "
            "calling the first): the calls of a file's first 48 helpers are found by searching for each "
            "name, and past those in one pass over the text for every name, so the time grows linearly "
            "with the file, like the parse.",
            "",
            "| helpers | lines | `ast.parse` s | lint s (parse included) | vs `ast.parse` |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {n} | {n_lines} | {p:.2f} | {l:.2f} | {l / p:.2f}x |" for n, n_lines, p, l in results["helpers"]]
    lines += ["", ""]
    return "\n".join(lines)


def update_docs(section: str) -> None:
    """Replace (or append) only this benchmark's section of docs/benchmarks.md."""
    text = DOCS.read_text(encoding="utf-8") if DOCS.is_file() else "# Benchmarks\n"
    start = text.find(HEADING)
    if start == -1:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(HEADING))
        text = text[:start] + section + (text[end + 1 :] if end != -1 else "")
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="rounds of parse and lint; the best is kept (default 7)")
    parser.add_argument("--runs", type=int, default=1,
                        help="measure this many times (--repeat rounds each) and report the spread of the ratios between runs (default 1)")
    parser.add_argument("--no-torchfix", action="store_true", help="skip TorchFix even if it is installed")
    parser.add_argument(
        "--helpers", type=int, nargs="*", default=[2000, 8000, 16000],
        help="helper counts of the call-graph scaling rows (5 lines each; default 2000 8000 16000; a file of 5 lines per helper, under the linter's 100,000-line bound)",
    )
    parser.add_argument(
        "--scaling", type=int, nargs="*", default=[500, 1000, 2000, 4000, 8000],
        help="file sizes in lines of the many-loops scaling rows (default 500 1000 2000 4000 8000)",
    )
    parser.add_argument("--scaling-repeat", type=int, default=3, help="rounds of the scaling rows (default 3)")
    parser.add_argument(
        "--compare", metavar="SRC", default=None,
        help="also time the linter of another checkout's src folder (e.g. an older commit's, from git archive) in the same rounds",
    )
    parser.add_argument("--compare-label", default=None, help="what to call the --compare version in the output (default: its path)")
    parser.add_argument("--update-docs", action="store_true", help=f"rewrite '{HEADING}' in docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.compare and not (Path(args.compare) / "gradguard" / "__init__.py").is_file():
        parser.error(f"--compare {args.compare}: no gradguard package there; pass the src folder of another checkout")

    torch_dir, sources = corpus()
    version_file = torch_dir / "version.py"
    torch_version = "?"
    if version_file.is_file():
        for line in version_file.read_text().splitlines():
            if line.startswith("__version__"):
                torch_version = line.split("=", 1)[1].strip().strip("'\"")
    print(f"corpus: {len(sources)} files under {torch_dir}/{{nn,optim}}", file=sys.stderr)

    before = importlib.import_module(load_copy(args.compare).__name__ + ".lint") if args.compare else None
    runs = []  # each run's best-of-rounds seconds: the spread between runs shows the noise
    for run in range(args.runs):
        best, found = time_parse_and_lint(sources, args.repeat, before)
        runs.append(best)
        if args.runs > 1:
            print(f"run {run + 1}: " + ", ".join(f"{k} {v / best['parse']:.2f}x" for k, v in best.items() if k != "parse"), file=sys.stderr)
    best = {k: min(run[k] for run in runs) for k in runs[0]}
    parse_s, lint_s, tree_s = best["parse"], best["each"], best["tree"]
    torchfix_s, torchfix_n = (None, None) if args.no_torchfix else time_torchfix(sources)
    results = {
        "files": len(sources),
        "lines": sum(src.count("\n") for _, src in sources),
        "repeat": args.repeat,
        "parse_s": parse_s,
        "lint_s": lint_s,
        "lint_ratio": lint_s / parse_s,
        "lint_findings": found["each"],
        "tree_s": tree_s,
        "tree_ratio": tree_s / parse_s,
        "tree_findings": found["tree"],
        "command": "python benchmarks/bench_lint.py " + shlex.join(sys.argv[1:] if argv is None else argv),
        "compare": args.compare_label or args.compare,
        "runs": args.runs,
        # per condition, the lowest and highest ratio to the parse of the same run
        "spread": {k: (min(r[k] / r["parse"] for r in runs), max(r[k] / r["parse"] for r in runs)) for k in runs[0] if k != "parse"},
        "before_lint_s": best.get("before each"),
        "before_tree_s": best.get("before tree"),
        "before_lint_ratio": best["before each"] / parse_s if before is not None else None,
        "before_tree_ratio": best["before tree"] / parse_s if before is not None else None,
        "torchfix_s": torchfix_s,
        "torchfix_ratio": torchfix_s / parse_s if torchfix_s is not None else None,
        "torchfix_findings": torchfix_n,
        "torchfix_version": None,
        "torch_version": torch_version,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {platform.system()}",
        "cpus": os.cpu_count(),
        "helpers": time_helpers(args.helpers) if args.helpers else [],
        "scaling": time_scaling(args.scaling, args.scaling_repeat) if args.scaling else {},
        "scaling_repeat": args.scaling_repeat,
    }
    if torchfix_s is not None:
        from importlib.metadata import version

        results["torchfix_version"] = version("torchfix")

    print(f"ast.parse                  {parse_s:8.3f} s   1.00x")
    print(f"lint_source of each file   {lint_s:8.3f} s   {results['lint_ratio']:.2f}x parse   ({found['each']} findings)")
    print(f"gradguard lint of the tree {tree_s:8.3f} s   {results['tree_ratio']:.2f}x parse   ({found['tree']} findings)")
    if before is not None:
        print(f"  {results['compare']}: each file {results['before_lint_ratio']:.2f}x parse ({found['before each']} findings), "
              f"the tree {results['before_tree_ratio']:.2f}x parse ({found['before tree']} findings)")
    if torchfix_s is not None:
        print(f"TorchFix        {torchfix_s:8.3f} s   {results['torchfix_ratio']:.1f}x parse   ({torchfix_n} findings)")
    print(f"target <= {TARGET_RATIO:.1f}x parse: {'met' if _met(results) else 'NOT met'}")
    for shape, rows in results["scaling"].items():
        for n, loops, p, l, _ in rows:
            print(f"{shape:20s} {n:6d} lines {loops:5d} loops  parse {p:7.3f} s  lint {l:7.3f} s  {1e6 * l / n:5.0f} us/line")

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_lint.json").write_text(json.dumps(results, indent=2) + "\n")
    try:
        plot(results, OUT / "bench_lint.png")
        print(f"wrote {OUT / 'bench_lint.png'}")
        if results["scaling"]:
            plot_scaling(results["scaling"], SCALING_PNG)
            print(f"wrote {SCALING_PNG}")
    except ImportError:
        print("matplotlib not installed: no chart", file=sys.stderr)
    if args.update_docs:
        update_docs(markdown(results))
        print(f"updated '{HEADING}' in {DOCS}")
    return 0 if _met(results) else 1


def _met(results) -> bool:
    """The target holds for a file linted alone and for the tree linted together (in every run)."""
    worst = max(hi for key, (_, hi) in results["spread"].items() if not key.startswith("before"))
    return max(results["lint_ratio"], results["tree_ratio"], worst) <= TARGET_RATIO


if __name__ == "__main__":
    raise SystemExit(main())
