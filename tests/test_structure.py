"""The project's structure, in one place: the import graph, what loads what, and the rule registry.

The import graph of ``src/gradguard`` (no circle, the core never reaches up,
no part imports another part's private names) is read with one ``ast`` parser,
``_graph`` (nothing is imported), so it also covers imports inside functions: a
lazy import hides a cycle from Python, not from a reader. Imports under
``if TYPE_CHECKING:`` are ignored (they never run). What a fresh interpreter
loads (``import gradguard``, the linter) is checked in a subprocess.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "gradguard"

# The parts that make gradients right. They may use the ground floor (errors, the
# channel the watch listens on, batch helpers) and the drivers of the training
# frameworks they run inside (accelerators), but never the diagnostics
# built on top of them: the watch, the linter, the command line, the demo, and the
# framework callbacks that run the watch.
CORE = ("accumulate", "distributed", "accelerators", "deepspeed", "memory", "semantics", "equivalence", "microbatches", "_batch")
ABOVE_CORE = (
    "gradguard.watcher", "gradguard.lint", "gradguard.cli", "gradguard.demo", "gradguard.integrations.pytest_plugin",
    "gradguard.integrations.lightning", "gradguard.integrations.transformers", "gradguard.integrations._watch",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, module: str, known: set) -> set:
    """The gradguard modules that ``module`` imports (resolved to known modules)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    targets = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # ``from . import x`` may name a submodule; otherwise it is the module itself.
            names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
    return targets


def _graph() -> dict:
    files = {_module_name(p): p for p in (SRC / PACKAGE).rglob("*.py")}
    known = set(files)
    return {m: _imports(p, m, known) for m, p in files.items()}


def _find_cycle(graph: dict):
    state = {}  # module -> 1 while on the stack, 2 when done
    stack = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_import_graph_has_no_cycle():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_core_imports_nothing_above_it():
    graph = _graph()
    arrows = [
        f"{m} -> {t}"
        for m, targets in graph.items()
        if m.split(".")[1:2] and m.split(".")[1] in CORE
        for t in targets
        if any(t == above or t.startswith(above + ".") for above in ABOVE_CORE)
    ]
    assert not arrows, "the core reaches into the diagnostics: " + ", ".join(sorted(arrows))


def test_cycle_finder_sees_a_cycle():
    # Negative control: the checker itself must report a planted cycle.
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.slow  # several seconds on a busy 2-core machine
@pytest.mark.parametrize("module", ["gradguard.accumulate", "gradguard.findings"])
def test_graph_reads_real_imports(module):
    # Another control: the parser resolves this project's relative imports.
    assert _graph()[module], f"{module} should import at least one gradguard module"


def _private_imports() -> list:
    """Imports of another part's private module or private name (``from ..x import _helper``).

    A part is a subpackage (``watcher``, ``lint``) or a top-level module. Private
    modules of the package itself (``gradguard._errors``, ``gradguard._channel``)
    are the ground floor every part may use; a subpackage's private modules
    (``gradguard.watcher._source``) and any ``_name`` are its own business.
    """
    files = {_module_name(p): p for p in (SRC / PACKAGE).rglob("*.py")}
    known = set(files)

    def part(module: str) -> str:
        return module.split(".")[1] if module.count(".") >= 1 else module

    found = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith(PACKAGE + ".") or part(target) == part(module):
                continue
            inner = target.split(".")[2:]  # below the part: gradguard.watcher._source -> ["_source"]
            if any(c.startswith("_") and not c.startswith("__") for c in inner):
                found.append(f"{module} imports {target}")
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") and f"{target}.{alias.name}" not in known:
                    found.append(f"{module} imports {target}.{alias.name}")
    return found


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_no_part_imports_another_parts_private_names():
    found = _private_imports()
    assert not found, "private names imported across parts: " + "; ".join(sorted(found))


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_rule_table_and_findings_do_not_import_each_other():
    """rules.py is the ground floor (data); findings.py builds on it, never the reverse."""
    graph = _graph()
    assert "gradguard.findings" not in graph["gradguard.rules"]
    assert "gradguard.rules" in graph["gradguard.findings"]


@pytest.mark.slow
def test_the_watch_is_reached_by_no_core_module_nor_the_channel():
    """The Accumulator tells the watch about its own passes through the channel, never by importing it."""
    graph = _graph()
    for module in [f"gradguard.{c}" for c in CORE] + ["gradguard._channel"]:
        assert not any(t.startswith("gradguard.watcher") for t in graph[module]), module


def test_every_runtime_rule_has_a_module_and_a_script_pair():
    from gradguard.rules import RULES
    from gradguard.watcher.rules import MODULES

    scripts = Path(__file__).parent / "watch_scripts"
    pairs = Path(__file__).parent / "rule_pairs"
    runtime = [code for code, rule in RULES.items() if rule.runtime]
    assert sorted(MODULES) == sorted(runtime)
    for code in runtime:
        assert MODULES[code].CODE == code
        events = getattr(MODULES[code], "EVENTS", {})  # what the rule listens to (the dispatch is derived from it)
        assert events and all(callable(getattr(MODULES[code], name, None)) or hasattr(MODULES[code], "State")
                              for name in events), (code, events)
        # its script pair, or its one program pair shared with the linter (tests/rule_pairs/)
        assert all((scripts / f"{code.lower()}_{kind}.py").is_file()
                   or len(list(pairs.glob(f"{code.lower()}_*_{kind}.py"))) == 1 for kind in ("bad", "good")), code


def test_import_gradguard_does_not_import_torch():
    """The linter's command line must start fast: the package loads torch only when asked."""
    code = "import sys, gradguard; assert 'torch' not in sys.modules; gradguard.RULES['GG101']; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_lint_does_not_import_torch():
    code = (
        "import sys, gradguard as gg\n"
        "gg.lint_source(open(gg.__file__.replace('__init__.py', 'demo/buggy_loop.py')).read())\n"
        "from gradguard.cli import main\n"
        "main(['rule', 'GG101'])\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_an_integration_whose_framework_is_missing_names_the_extra():
    code = ("import sys\nsys.modules['lightning'] = None\n"
            "try:\n    import gradguard.integrations.lightning\nexcept ImportError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    # the extra's requirements, not "gradguard[lightning]" (gradguard is not on a package index)
    assert 'pip install "torch>=2.1" "lightning>=2.2"' in done.stdout, done.stdout + done.stderr
