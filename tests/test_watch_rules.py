"""Each run-time rule against its fixture pair in tests/watch_scripts/.

``ggXXX_bad.py`` must produce exactly that rule's code, ``ggXXX_good.py`` (the
same loop, fixed) must produce nothing, both run through ``gradguard run
--report`` as a user would, with that rule alone (the others ignored: a new rule
never has to edit another rule's scripts). The pair makes each test able to fail
both ways. The codes come from the catalogue: a run-time rule without its pair fails.
A rule on both sides may instead have one program pair in ``tests/rule_pairs/``
(``ggNNN_<name>_bad.py`` / ``_good.py``), run here and linted by tests/test_lint_fixtures.py.
"""

import sys
from pathlib import Path

import pytest

from gradguard.rules import RULES
from gradguard.watcher.rules import MODULES

from _scripts import SCRIPTS, alone, run_script

# gg108_bad.py's backward(create_graph=True) makes torch itself warn; that is the bug shown.
pytestmark = pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")

#: Every rule the watch can report, from the catalogue.
CODES = [code for code, rule in RULES.items() if rule.runtime]


#: The flags that leave a code the only rule reported.
_alone = alone


#: One program pair per rule that both tools check (``ggNNN_<name>_bad.py``/``_good.py``).
PAIRS = Path(__file__).parent / "rule_pairs"

#: The marker scripts/add_rule.py leaves in every stub (written in two parts: no grep finds it here).
SCAFFOLD_TODO = "TODO" + "(add_rule)"


def _script(code: str, kind: str):
    script = SCRIPTS / f"{code.lower()}_{kind}.py"
    shared = sorted(PAIRS.glob(f"{code.lower()}_*_{kind}.py"))
    assert script.is_file() or len(shared) == 1, (
        f"{code} has no {script.name} in tests/watch_scripts/ nor one {code.lower()}_<name>_{kind}.py in "
        f"tests/rule_pairs/ (a run-time rule needs its pair): {[p.name for p in shared]}")
    script = script if script.is_file() else shared[0]
    for path in (script, *([Path(MODULES[code].__file__)] if code in MODULES else [])):
        assert SCAFFOLD_TODO not in path.read_text(encoding="utf-8"), f"{path.name} is still the stub scripts/add_rule.py wrote"
    return script


@pytest.mark.parametrize("code", CODES)
def test_bad_script_triggers_exactly_its_rule(tmp_path, code):
    exit_code, findings = run_script(tmp_path, _script(code, "bad"), *_alone(code))
    assert [f["code"] for f in findings] == [code], findings
    f = findings[0]
    assert f["path"].endswith(_script(code, "bad").name) and isinstance(f["line"], int)
    assert f["col"] is None
    assert f["severity"] == RULES[code].severity and f["name"] == RULES[code].name
    assert RULES[code].fix in f["message"]
    assert exit_code == (1 if RULES[code].severity == "error" else 0)


@pytest.mark.parametrize("code", CODES)
def test_good_twin_is_clean(tmp_path, code):
    exit_code, findings = run_script(tmp_path, _script(code, "good"), *_alone(code))
    assert findings == []
    assert exit_code == 0


def _line_of(script, marker):
    for i, text in enumerate(script.read_text().splitlines(), 1):
        if marker in text:
            return i
    raise AssertionError(marker)


@pytest.mark.parametrize(
    "code, marker",
    [
        ("GG101", "optimizer.step()  # BUG"),
        ("GG102", "optimizer.zero_grad()  # BUG"),
        ("GG103", "loss.backward()"),
        ("GG104", "loss.backward()  # BUG"),
        ("GG105", "(loss / accum).backward()"),
        ("GG106", ".backward()"),
        ("GG107", "optimizer.step()"),
        ("GG108", "optimizer.step()"),
        ("GG109", "loss.backward()"),
        ("GG110", "opt_teacher.step()  # BUG"),
    ],
)
def test_finding_points_at_the_offending_line(tmp_path, code, marker):
    script = SCRIPTS / f"{code.lower()}_bad.py"
    _, findings = run_script(tmp_path, script, *_alone(code))
    assert [f["code"] for f in findings] == [code] and findings[0]["line"] == _line_of(script, marker)


def test_step_numbers_and_parameter_names(tmp_path):
    _, findings = run_script(tmp_path, SCRIPTS / "gg101_bad.py", *_alone("GG101"))
    assert findings[0]["step"] == 2  # the first step is fine, the second reuses its gradient
    assert findings[0]["params"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    _, findings = run_script(tmp_path, SCRIPTS / "gg106_bad.py", *_alone("GG106"))
    assert findings[0]["params"] == ["head.weight", "head.bias"]
    _, findings = run_script(tmp_path, SCRIPTS / "gg107_bad.py", *_alone("GG107"))
    assert findings[0]["params"] == ["b.weight", "b.bias"] and findings[0]["step"] == 2


def test_ignore_flag(tmp_path):
    exit_code, findings = run_script(tmp_path, SCRIPTS / "gg101_bad.py", "--ignore", "GG1")
    assert findings == [] and exit_code == 0


def test_every_runtime_rule_is_covered_and_alone_means_alone(tmp_path):
    # Negative controls: the list is the catalogue's (GG111 and later included); a code with no pair
    # fails; another rule's bug is invisible with a rule alone, and visible with its own.
    assert set(CODES) == {c for c, r in RULES.items() if r.runtime} and "GG114" in CODES and "GG201" not in CODES
    with pytest.raises(AssertionError, match="has no gg999_bad.py"):
        _script("GG999", "bad")
    assert run_script(tmp_path, SCRIPTS / "gg101_bad.py", *_alone("GG102"))[1] == []
    assert [f["code"] for f in run_script(tmp_path, SCRIPTS / "gg101_bad.py", *_alone("GG101"))[1]] == ["GG101"]


def test_a_shared_program_pair_is_found(tmp_path, monkeypatch):
    # A rule without a script pair runs its one program pair of tests/rule_pairs/; two candidates
    # for one half, or none, fail rather than pick one.
    pairs = tmp_path / "pairs"
    pairs.mkdir()
    monkeypatch.setattr(sys.modules[__name__], "PAIRS", pairs)
    with pytest.raises(AssertionError, match="nor one gg999_<name>_bad.py in tests/rule_pairs/"):
        _script("GG999", "bad")
    (pairs / "gg999_some_name_bad.py").write_text("x = 1\n", encoding="utf-8")
    (pairs / "gg999_some_name_good.py").write_text("x = 1\n", encoding="utf-8")
    assert _script("GG999", "bad") == pairs / "gg999_some_name_bad.py"
    assert _script("GG999", "good") == pairs / "gg999_some_name_good.py"
    assert _script("GG101", "bad") == SCRIPTS / "gg101_bad.py"  # a script pair stays where it is
    (pairs / "gg999_other_name_bad.py").write_text("x = 1\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="gg999_other_name_bad.py"):
        _script("GG999", "bad")
    (pairs / "gg999_other_name_bad.py").unlink()
    (pairs / "gg999_some_name_bad.py").write_text("# TODO" + "(add_rule)\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="still the stub"):
        _script("GG999", "bad")
