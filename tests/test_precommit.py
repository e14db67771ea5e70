"""The README's pre-commit set-ups, run by pre-commit itself against a fresh clone of this repository.

A clone carries no release tags, so both forms must work from what a clone has: the
``repo: local`` hook (the gradguard installed beside torch) and this repository as
``repo:`` at a commit hash. "Installed" here is the clone's own ``src`` on the path
behind a ``gradguard`` command, as ``pip install -e`` would give.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _scripts import STALE_GRADIENT_PROGRAM as BUGGY

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a git checkout"),
]


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    after = text[text.index("**pre-commit**"):]
    return re.search(r"```yaml\n(.*?)```", after, re.S).group(1)


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=120)


@pytest.fixture
def setup(tmp_path):
    """A fresh clone of this repository (no tags), a `gradguard` command from it, and a user project."""
    pre_commit = Path(sys.executable).with_name("pre-commit")
    if not pre_commit.exists():
        pytest.skip("pre-commit is not installed (it is in the test extra's environment)")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-tags", str(ROOT), str(clone)], check=True, timeout=300)
    assert subprocess.run(["git", "tag"], cwd=clone, capture_output=True, text=True).stdout == ""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    command = bin_dir / "gradguard"
    command.write_text(f"#!{sys.executable}\nfrom gradguard.cli import main\nraise SystemExit(main())\n")
    command.chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    git("init", "--quiet", cwd=project)
    (project / "train.py").write_text(BUGGY)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(clone / "src"),
           "PRE_COMMIT_HOME": str(tmp_path / "cache"), "GIT_CONFIG_NOSYSTEM": "1"}
    return clone, project, env, pre_commit


def run_hooks(project, env, pre_commit, config: str):
    (project / ".pre-commit-config.yaml").write_text(config)
    git("add", "-A", cwd=project)
    return subprocess.run([str(pre_commit), "run", "--all-files"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)


def test_readme_local_hook_fails_on_a_bug_and_passes_when_fixed(setup):
    clone, project, env, pre_commit = setup
    done = run_hooks(project, env, pre_commit, readme_snippet())
    assert done.returncode == 1 and "train.py:6:5: GG101" in done.stdout, done.stdout + done.stderr
    (project / "train.py").write_text(BUGGY.replace("    optimizer.step()\n",
                                                    "    optimizer.step()\n    optimizer.zero_grad()\n"))
    done = run_hooks(project, env, pre_commit, readme_snippet())
    assert done.returncode == 0, done.stdout + done.stderr


def test_this_repository_as_repo_at_a_commit_hash(setup):
    clone, project, env, pre_commit = setup
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    config = f"repos:\n  - repo: {clone}\n    rev: {rev}\n    hooks:\n      - id: gradguard-lint\n"
    done = run_hooks(project, env, pre_commit, config)
    assert done.returncode == 1 and "train.py:6:5: GG101" in done.stdout, done.stdout + done.stderr


def test_the_isolated_hook_installs_gradguard_without_torch(setup):
    """`gradguard-lint-isolated`: pre-commit builds the hook's environment from the clone itself; torch
    is no dependency, so that environment holds gradguard (and what it needs) and no torch."""
    clone, project, env, pre_commit = setup
    env = {k: v for k, v in env.items() if k != "PYTHONPATH"}  # the hook runs the gradguard pre-commit installed
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    config = f"repos:\n  - repo: {clone}\n    rev: {rev}\n    hooks:\n      - id: gradguard-lint-isolated\n"
    done = run_hooks(project, env, pre_commit, config)
    assert done.returncode == 1 and "train.py:6:5: GG101" in done.stdout, done.stdout + done.stderr
    pythons = sorted((Path(env["PRE_COMMIT_HOME"])).glob("repo*/py_env-*/bin/python"))
    assert len(pythons) == 1, pythons
    probe = ("import importlib.util, gradguard\n"
             "print(importlib.util.find_spec('torch') is None, gradguard.__file__)\n")
    found = subprocess.run([str(pythons[0]), "-c", probe], capture_output=True, text=True, timeout=60)
    no_torch, where = found.stdout.split()
    assert no_torch == "True", found.stdout + found.stderr  # pre-commit did not install torch
    assert where.startswith(str(pythons[0].parent.parent)), where  # the hook's own gradguard, not the clone's src
