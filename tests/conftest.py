import ast
import os
import sys

# Tests import the independent reference helpers as a plain module.
sys.path.insert(0, os.path.dirname(__file__))

# Torch on one thread unless the user set OMP_NUM_THREADS: the tests' tensors are tiny, so intra-op
# threads only add synchronisation, and on a busy machine an op waits until both of its threads get
# a core (the fast loop took twice the CPU time with two). The variable reaches the Python processes
# that tests start; this process's torch is set once the test modules have imported it.
_USER_THREADS = "OMP_NUM_THREADS" in os.environ
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_collection_finish(session):
    torch = sys.modules.get("torch")
    if torch is not None and not _USER_THREADS:
        torch.set_num_threads(1)

# Hypothesis: deterministic in CI, no example database in the checkout.
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "gradguard",
        deadline=None,
        derandomize=bool(os.environ.get("CI")),
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.load_profile("gradguard")
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass

# Scripts and fixtures that the tests run or lint themselves; not modules to import
# (the run scripts train at import time), so keep them out of doctest collection.
collect_ignore_glob = ["watch_scripts/*", "lint_fixtures/*", "rule_pairs/*"]


# Benchmark tests (`@pytest.mark.bench`) time code on the wall clock: on a busy machine they are
# slow and can fail for reasons that are not the code's, so they stay out of the default run and
# of CI. A skip hook rather than `addopts = -m "not bench"`: a user's own `-m "not slow"` would
# replace that expression and bring them back. Run them with `pytest --run-bench`.
def pytest_addoption(parser):
    parser.addoption("--run-bench", action="store_true", default=False,
                     help="also run the wall-clock benchmark tests (marked bench)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-bench"):
        return
    import pytest

    skip = pytest.mark.skip(reason="wall-clock benchmark test: run with --run-bench")
    for item in items:
        if "bench" in item.keywords:
            item.add_marker(skip)


# The fast loop (`pytest -m "not slow"`) stays fast only while every test over about a second is
# marked slow. In a run whose -m expression names "slow" (the fast loop), the tests that took over
# 2 s (setup included: a slow fixture counts) are named at the end: a report, never a failure, since
# a busy machine slows everything.
SLOW_UNMARKED_S = 2.0
_unmarked_durations: dict = {}


def pytest_runtest_logreport(report):
    if "slow" not in report.keywords and "bench" not in report.keywords:
        _unmarked_durations[report.nodeid] = _unmarked_durations.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if "slow" not in (config.getoption("markexpr", "") or ""):
        return
    over = sorted(((d, n) for n, d in _unmarked_durations.items() if d > SLOW_UNMARKED_S), reverse=True)
    if over:
        terminalreporter.section("tests over 2 s without @pytest.mark.slow (mark them: docs/contributing.md)")
        for d, n in over:
            terminalreporter.write_line(f"{d:6.2f}s {n}")


# The fast loop imports nothing that only slow tests need. Collecting a module imports it: a test
# module whose tests are all slow (a module-level `pytestmark` with the slow mark), or a module under
# src/ whose import needs a package beyond the standard library, torch and pytest (a framework
# integration: Lightning alone took ~4.7 s of CPU to import, about 8 % of the fast loop), is not
# collected in a run whose -m expression deselects every slow test. Its tests and docstring examples
# run in every other run, CI's included. Decided from the source (ast), without importing it.
def _slow_deselected(config) -> bool:
    expr = config.getoption("markexpr", "") or ""
    if "slow" not in expr:
        return False
    try:
        import itertools
        import re

        from _pytest.mark.expression import Expression

        compiled = Expression.compile(expr)
        others = sorted(set(re.findall(r"[A-Za-z_][\w.]*", expr)) - {"slow", "and", "or", "not"})
        # Deselected whatever other marks a slow test carries (e.g. slow + gpu under -m gpu is kept).
        for values in itertools.product((False, True), repeat=len(others)):
            marks = {"slow"} | {o for o, v in zip(others, values) if v}
            if compiled.evaluate(lambda name, **kwargs: name in marks):
                return False
        return True
    except Exception:  # an expression this cannot read: collect everything, as pytest would
        return False


def _module_is_marked_slow(tree) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            return any(ast.unparse(v) == "pytest.mark.slow" for v in values)
    return False


_PLAIN_ROOTS = set(sys.stdlib_module_names) | {"gradguard", "torch", "pytest", "__future__"}


def _needs_extra(path, seen=None) -> bool:
    """Whether importing the module at ``path`` imports a package beyond ``_PLAIN_ROOTS`` at module level,
    itself or through the modules of its own package that it imports relatively."""
    seen = set() if seen is None else seen
    if path in seen or not path.is_file():
        return False
    seen.add(path)
    extra, relative = _module_imports(path)
    return extra or any(_needs_extra(n, seen) for n in relative)


_IMPORTS: dict = {}  # path -> _module_imports(path): every file is read and parsed once per run


def _module_imports(path):
    """``(whether the module at path imports a package beyond _PLAIN_ROOTS at module level, the files its relative
    imports may be)``. Kept per path: the modules of a package import each other, and the walk of every
    module under src/ would otherwise parse the shared ones again each time (2.7 s of CPU per run)."""
    if path in _IMPORTS:
        return _IMPORTS[path]
    extra, relative = False, []
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        tree = ast.Module(body=[], type_ignores=[])
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] not in _PLAIN_ROOTS for a in node.names):
            extra = True
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if (node.module or "").split(".")[0] not in _PLAIN_ROOTS:
                    extra = True
                continue
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            parts = (node.module or "").split(".") if node.module else []
            target = base.joinpath(*parts)
            relative += [target / "__init__.py", target.with_suffix(".py")] if parts else [base / "__init__.py"]
            relative += [target / a.name / "__init__.py" for a in node.names] + [target / f"{a.name}.py" for a in node.names]
    _IMPORTS[path] = (extra, relative)
    return extra, relative


class _FastLoopCollection:
    """Registered as a plugin (not a conftest hook) so that it also sees the src/ tree of testpaths."""

    @staticmethod
    def pytest_ignore_collect(collection_path, config):
        if collection_path.suffix != ".py" or not _slow_deselected(config):
            return None
        src = collection_path.name != "conftest.py" and "src" in collection_path.parts
        if src and config.getoption("doctestmodules", False):
            return True if _needs_extra(collection_path) else None
        if collection_path.name.startswith("test_"):
            try:
                text = collection_path.read_text(encoding="utf-8")
                # Parsed only where a slow pytestmark can be (pytest parses every module it collects again).
                tree = ast.parse(text) if "pytestmark" in text and "slow" in text else None
            except (OSError, SyntaxError, UnicodeDecodeError):
                return None
            return True if tree is not None and _module_is_marked_slow(tree) else None
        return None


def pytest_configure(config):
    config.pluginmanager.register(_FastLoopCollection(), "gradguard-fast-loop-collection")
