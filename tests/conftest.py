import os
import sys

# Tests import the independent reference helpers as a plain module.
sys.path.insert(0, os.path.dirname(__file__))

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
collect_ignore_glob = ["watch_scripts/*", "lint_fixtures/*"]
