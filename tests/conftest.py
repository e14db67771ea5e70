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
