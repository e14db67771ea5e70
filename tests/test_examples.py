"""Every ``examples/*.py`` runs as a user runs it: ``python examples/NAME.py``, in a fresh process.

The examples are the README's and the docs' code, each made runnable with its imports and
small data, so no snippet can drift from the code. New files in ``examples/`` are picked up
here without a change. An example whose optional framework (a gradguard extra: Lightning,
Transformers, ...) is not importable is skipped, naming it; any other missing import fails.
"""

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def optional_modules() -> set:
    """Top-level module names of the packages in pyproject.toml's extras (the optional frameworks)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = set()
    for requirements in extras.values():
        for req in requirements:
            name = req.split(";")[0].split("[")[0]
            for sep in "<>=!~ ":
                name = name.split(sep)[0]
            names.add(name.strip().lower().replace("-", "_"))
    return names


def imported_modules(path: Path) -> set:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_there_are_examples():
    assert len(EXAMPLES) >= 5, EXAMPLES


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path, tmp_path):
    optional = optional_modules()
    for name in sorted(imported_modules(path)):
        if importlib.util.find_spec(name) is None:
            if name.lower() in optional:
                pytest.skip(f"{path.name} needs {name}, which is not installed")
            pytest.fail(f"{path.name} imports {name}, which is neither installed nor an optional extra")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
                                                       if p)}
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{path.name} failed:\n{done.stdout}\n{done.stderr}"
