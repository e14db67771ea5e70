"""docs/rules.md is generated from the catalogue; the pre-commit hook and the demo part."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_script():
    spec = importlib.util.spec_from_file_location("gen_rules_md", ROOT / "scripts" / "gen_rules_md.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rules_md_is_up_to_date():
    script = _load_script()
    current = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert current == script.render(), "docs/rules.md is stale: run python scripts/gen_rules_md.py"


def test_readme_rule_table_is_up_to_date():
    script = _load_script()
    current = (ROOT / "README.md").read_text(encoding="utf-8")
    assert current == script.render_readme(current), "the README's rule table is stale: run python scripts/gen_rules_md.py"
    from gradguard import RULES

    table = current[current.index(script.TABLE_START):current.index(script.TABLE_END)]
    assert [line.split("|")[1].strip()[1:6] for line in table.splitlines()[3:]] == list(RULES)


def test_readme_rule_table_check_catches_a_stale_table(tmp_path, monkeypatch, capsys):
    # Negative control: a README whose table lost a row (or its markers) fails --check, and a
    # rewrite restores exactly the generated table and leaves the rest of the file as it was.
    script = _load_script()
    current = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in current.splitlines(keepends=True) if line.startswith("| [GG105]"))
    readme = tmp_path / "README.md"
    readme.write_text(current.replace(row, ""), encoding="utf-8")
    monkeypatch.setattr(script, "README", readme)
    monkeypatch.setattr(script, "DOC", ROOT / "docs" / "rules.md")
    assert script.main(["--check"]) == 1
    assert "README.md is out of date" in capsys.readouterr().err
    monkeypatch.setattr(script, "DOC", tmp_path / "rules.md")  # the rewrite must not touch the real page
    assert script.main([]) == 0 and readme.read_text(encoding="utf-8") == current
    readme.write_text(current.replace(script.TABLE_END, ""), encoding="utf-8")
    assert script.main(["--check"]) == 2
    assert "marker" in capsys.readouterr().err


def test_no_rule_text_is_a_stub():
    # scripts/add_rule.py writes the catalogue entry with this marker in every field to fill
    from gradguard import RULES

    marker = "TODO" + "(add_rule)"
    stubs = [f"{code}.{field}" for code, rule in RULES.items() for field, value in rule._asdict().items()
             if isinstance(value, str) and marker in value]
    assert not stubs, f"catalogue text still to write (src/gradguard/rules.py): {', '.join(stubs)}"


def test_rules_md_has_every_rule_and_heading():
    text = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    from gradguard import RULES

    for code in RULES:
        assert f"\n## {code}\n" in text
    for heading in ("### What it does", "### Why is this bad?", "### Example", "### Use instead"):
        assert text.count(heading) == len(RULES)


def test_pre_commit_hook_definition():
    yaml = pytest.importorskip("yaml")
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    by_id = {h["id"]: h for h in hooks}
    assert set(by_id) == {"gradguard-lint", "gradguard-lint-isolated"}
    # The default runs the project's own gradguard: no torch download inside pre-commit.
    assert by_id["gradguard-lint"]["language"] == "system"
    assert by_id["gradguard-lint-isolated"]["language"] == "python"
    for hook in hooks:
        # pre-commit names every file: the configured exclusions must apply to them too
        assert hook["entry"] == "gradguard lint --force-exclude --no-progress" and hook["types"] == ["python"]
    # the example in the file and in the README point at no placeholder repository, and at no tag a
    # clone does not have: `rev:` is a commit (tests/test_precommit.py runs both set-ups with pre-commit)
    for text in ((ROOT / ".pre-commit-hooks.yaml").read_text(), (ROOT / "README.md").read_text()):
        assert "<owner>" not in text and "rev: v0" not in text and "git rev-parse HEAD" in text


def test_demo_lint_part(tmp_path, capsys):
    from gradguard.demo.lint_part import run_lint_part

    summary = run_lint_part(tmp_path)
    out = capsys.readouterr().out
    assert summary["findings"] == sum(summary["by_code"].values()) >= 5
    assert summary["codes"] == ["GG101", "GG102", "GG103", "GG104", "GG201"]
    assert out.splitlines()[0].startswith("== The linter")
    assert "buggy_loop.py:22:9: GG101" in out  # 1-based columns
