"""The pytest plugin: ``pytest --gradguard`` fails a test with an error-severity finding."""

import pytest

pytest_plugins = ["pytester"]

TESTS = '''
import torch
import torch.nn.functional as F


def _loop(zero_grad):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        if zero_grad:
            opt.zero_grad()
        F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
        opt.step()


def test_correct():
    _loop(zero_grad=True)


def test_forgot_zero_grad():
    _loop(zero_grad=False)


import pytest


@pytest.mark.gradguard(ignore="GG101")
def test_bug_on_purpose():
    _loop(zero_grad=False)


@pytest.mark.gradguard(enabled=False)
def test_unwatched():
    _loop(zero_grad=False)


def test_only_a_warning():
    a = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(a.parameters(), lr=0.1)
    opt.step()  # GG110, a warning: reported, not a failure
'''


@pytest.mark.slow  # more than one process
def test_fails_only_the_buggy_test(pytester):
    pytester.makepyfile(test_loops=TESTS)
    result = pytester.runpytest_subprocess("--gradguard", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*test_forgot_zero_grad*", "*gradguard found 1 gradient bug(s)*", "*test_loops.py:13: GG101*"])
    result.stdout.fnmatch_lines(["*GradientBugWarning*GG110*"])


@pytest.mark.slow  # more than one process
def test_off_by_default(pytester):
    pytester.makepyfile(test_loops=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=5)


@pytest.mark.slow  # more than one process
def test_ignore_and_bad_code(pytester):
    pytester.makepyfile(test_loops=TESTS)
    result = pytester.runpytest_subprocess("--gradguard", "--gradguard-ignore", "GG101", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    result = pytester.runpytest_subprocess("--gradguard", "--gradguard-ignore", "GG999", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*GG999*"])
