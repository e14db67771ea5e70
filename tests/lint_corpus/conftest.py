# The corpus programs are data for the linter's recall harness (tests/test_lint_recall.py),
# not test modules: keep them out of collection and doctest import (some need accelerate,
# lightning or transformers, others train when run).
collect_ignore_glob = ["*.py"]
