"""pytest plugin: ``pytest --gradguard`` runs every test under :func:`gradguard.watch`.

A test in which an error-severity finding occurs (GG101 stale gradient, GG102
discarded gradient) fails, with the findings in the failure message; warning-
and info-severity findings are shown as :class:`gradguard.GradientBugWarning`
in pytest's warnings summary. Registered through the ``pytest11`` entry point,
so it is available whenever gradguard is installed; without ``--gradguard`` it
does nothing and imports nothing (not even torch).

Example::

    pytest --gradguard tests/test_training.py
    pytest --gradguard --gradguard-ignore GG107,GG109

A test that shows a bug on purpose opts out with a marker::

    @pytest.mark.gradguard(ignore="GG101")      # or enabled=False
    def test_forgetting_zero_grad_diverges(): ...
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser) -> None:
    group = parser.getgroup("gradguard", "gradient-buffer bug checks (gradguard)")
    group.addoption(
        "--gradguard",
        action="store_true",
        default=False,
        help="run each test under gradguard.watch; fail tests with an error-severity finding (GG101, GG102)",
    )
    group.addoption(
        "--gradguard-ignore",
        metavar="CODES",
        default="",
        help="comma-separated rule codes or prefixes the watch skips, e.g. GG107,GG109",
    )


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "gradguard(ignore=CODES, enabled=True): rule codes this test may trigger under --gradguard, "
        "or enabled=False to run it unwatched",
    )
    if config.getoption("gradguard"):
        from .._torch import require_torch
        from ..rules import parse_codes

        try:
            require_torch("--gradguard")  # torch is not a hard dependency of gradguard
        except Exception as exc:  # a GradguardError: no torch, or an unusable one
            raise pytest.UsageError(str(exc)) from None
        try:
            ignore = parse_codes(config.getoption("gradguard_ignore"))
        except Exception as exc:  # a GradguardError: an unknown code
            raise pytest.UsageError(f"--gradguard-ignore: {exc}") from None
        config.pluginmanager.register(_WatchEachTest(ignore), "gradguard-watch")


class _WatchEachTest:
    def __init__(self, ignore: frozenset):
        self.ignore = ignore

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        import warnings

        from .._errors import GradientBugWarning
        from ..watcher import watch

        ignore = self.ignore
        marker = item.get_closest_marker("gradguard")
        if marker is not None:
            if not marker.kwargs.get("enabled", True):
                return (yield)
            from ..rules import parse_codes

            ignore = ignore | parse_codes(marker.kwargs.get("ignore", ()))
        w = watch(mode="record", ignore=ignore)
        with w:
            result = yield  # the test body; its own exception propagates unchanged
        errors = [f for f in w.findings if f.severity == "error"]
        for f in w.findings:
            if f.severity != "error":
                warnings.warn_explicit(f.warning_text(), GradientBugWarning, f.path or "<unknown>", f.line or 0)
        if errors:
            lines = "\n".join(f"  {f.format(full=True)}" for f in errors)
            pytest.fail(f"gradguard found {len(errors)} gradient bug(s) in {item.nodeid}:\n{lines}", pytrace=False)
        return result
