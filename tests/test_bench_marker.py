"""The wall-clock benchmark tests stay out of the default run (also under a user's own ``-m``) and run with --run-bench."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILE = "tests/test_bench_watch_own_time.py"


def _pytest(*args):
    return subprocess.run([sys.executable, "-m", "pytest", FILE, "-q", "-rs", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_bench_tests_skipped_by_default_and_run_with_the_flag():
    fast_loop = _pytest("-m", "not slow")  # the README's fast loop: its -m must not bring them back
    assert fast_loop.returncode == 0, fast_loop.stdout
    assert " passed" not in fast_loop.stdout and "skipped" in fast_loop.stdout, fast_loop.stdout
    assert "run with --run-bench" in fast_loop.stdout
    # the negative control: the flag runs them (one that asserts output, not timings: CI runs this test)
    ran = _pytest("--run-bench", "-k", "first_grad_read")
    assert ran.returncode == 0, ran.stdout
    assert "1 passed" in ran.stdout and "skipped" not in ran.stdout, ran.stdout
