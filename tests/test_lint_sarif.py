"""SARIF output validates against the SARIF 2.1.0 JSON schema (for code-scanning upload)."""

import json
from pathlib import Path

import pytest

import gradguard as gg
from gradguard.findings import Finding, to_sarif

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = Path(__file__).resolve().parents[2] / "shared/data/sarif-schema-2.1.0.json"
pytestmark = pytest.mark.skipif(not SCHEMA.is_file(), reason="SARIF schema not found beside the repository")


def _validate(log):
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema)(schema).validate(json.loads(json.dumps(log)))


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
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == list(gg.RULES)
