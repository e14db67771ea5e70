"""The distribution: the sdist and the wheel build from a fresh clone with the pinned build backend,
carry what they promise, and the wheel installs into a fresh environment without torch, where the
linter works and the run-time commands say in one line that torch is missing.
"""

import email
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from _scripts import STALE_GRADIENT_PROGRAM as BUGGY

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_metadata_is_spdx_and_torch_is_an_extra():
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert not any(re.match(r"torch\b", d) for d in project["dependencies"]), project["dependencies"]
    assert project["optional-dependencies"]["torch"] == ["torch>=2.1"]
    # every extra for a run-time feature brings torch; the language server's does not need it
    for extra in ("demo", "plot", "lightning", "transformers", "accelerate", "deepspeed", "test"):
        assert "torch>=2.1" in project["optional-dependencies"][extra], extra
    assert not any("torch" in r for r in project["optional-dependencies"]["lsp"])
    requires = _pyproject()["build-system"]["requires"]
    assert requires == ["setuptools>=77.0.3,<85"], requires  # 77: the first that reads an SPDX license string


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sdist and the wheel of a fresh clone (committed files only), built with this environment's setuptools."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    pytest.importorskip("build")
    tmp = tmp_path_factory.mktemp("dist")
    clone = tmp / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-tags", str(ROOT), str(clone)], check=True, timeout=300)
    out = tmp / "dist"
    # --no-isolation: the backend of this environment (the test extra pins it to the build-system range);
    # build still checks that it satisfies [build-system] requires, and fails if not
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(clone)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = done.stdout + done.stderr
    assert "SetuptoolsDeprecationWarning" not in log and "License classifiers are deprecated" not in log, log
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel, tmp


@pytest.mark.slow
def test_the_sdist_holds_docs_examples_and_changelog(built):
    sdist, _, _ = built
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for required in ("CHANGELOG.md", "LICENSE", "README.md", "pyproject.toml", "docs/rules.md", "docs/editors.md",
                     "examples/exact_accumulation.py", "src/gradguard/__init__.py", "tests/conftest.py",
                     "tests/lint_fixtures/gg101_stale_gradient_bad.py"):
        assert required in names, required
    tracked = subprocess.run(["git", "ls-files", "docs", "examples"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert set(tracked) <= names, set(tracked) - names  # every committed doc and example


@pytest.mark.slow
def test_the_wheel_metadata(built):
    _, wheel, _ = built
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(zf.read(meta_name))
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    requires = meta.get_all("Requires-Dist")
    assert [r for r in requires if r.startswith("torch") and "extra ==" not in r] == [], requires
    assert 'torch>=2.1; extra == "torch"' in requires
    classifiers = meta.get_all("Classifier")
    assert "Programming Language :: Python :: 3.10" in classifiers and "Typing :: Typed" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # the SPDX expression replaces them
    assert "gradguard/py.typed" in names and "gradguard/demo/buggy_loop.py" in names
    assert not any(n.startswith("tests/") for n in names)


@pytest.mark.slow
def test_the_wheel_installs_without_torch_and_lints(built):
    _, wheel, tmp = built
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    # offline: the wheel's own dependencies must be none here (tomli only on Python 3.10, where it is fetched)
    offline = ["--no-index"] if sys.version_info >= (3, 11) else []
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", *offline, str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    gradguard = python.with_name("gradguard")
    project = tmp / "project"
    project.mkdir()
    (project / "train.py").write_text(BUGGY)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    has_torch = subprocess.run([str(python), "-c", "import torch"], capture_output=True, env=env, timeout=120)
    assert has_torch.returncode != 0  # a fresh environment: no torch came with gradguard
    lint = subprocess.run([str(gradguard), "lint", "train.py"], cwd=project, capture_output=True, text=True, env=env,
                          timeout=120)
    assert lint.returncode == 1 and "train.py:6:5: GG101" in lint.stdout, lint.stdout + lint.stderr
    where = subprocess.run([str(python), "-c", "import gradguard; print(gradguard.__file__)"], capture_output=True,
                           text=True, env=env, cwd=project, timeout=120).stdout
    assert where.startswith(str(venv)), where  # the installed copy ran, not this checkout
    run = subprocess.run([str(gradguard), "run", "train.py"], cwd=project, capture_output=True, text=True, env=env,
                         timeout=120)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "needs PyTorch (torch>=2.1), which is not installed" in run.stderr


def _python310():
    """A working Python 3.10: on PATH, or installed by pyenv (whose shim may name one that is not selected)."""
    import glob

    candidates = [shutil.which("python3.10"), *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10")))]
    for found in filter(None, candidates):
        probe = subprocess.run([found, "-c", "import sys; print(sys.version_info[:2] == (3, 10))"],
                               capture_output=True, text=True, timeout=60)
        if probe.stdout.strip() == "True":
            return found
    return None


@pytest.mark.slow
def test_the_linter_runs_on_the_oldest_python_it_declares():
    """requires-python says 3.10: the linter must import and work there (no 3.11-only regular expressions)."""
    python310 = _python310()
    if python310 is None:
        pytest.skip("needs a Python 3.10")
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from gradguard.lint import lint_source\n"
            f"print(sys.version_info[:2], [f.code for f in lint_source({BUGGY!r})])\n")
    done = subprocess.run([python310, "-c", code, str(ROOT / "src")], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0 and done.stdout.strip() == "(3, 10) ['GG101']", done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info < (3, 11), reason="the possessive form compiles on Python 3.11+ only")
def test_the_call_site_pattern_is_the_same_on_python_3_10():
    """The 3.10 form of the call-site search finds exactly what the possessive 3.11 form finds."""
    from hypothesis import given, settings, strategies as st

    from gradguard.lint import _line_filter

    possessive = re.compile(r"\b[^\W_A-Za-z]*+([A-Za-z_]\w*+)\s*+\(")
    plain = re.compile(r"\b[^\W_A-Za-z]*([A-Za-z_]\w*)\s*\(")
    assert _line_filter._CALL_SITE.pattern == possessive.pattern

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet="ab_9é \t\n(.)=", max_size=40))
    def same(text):
        assert [m.span(1) for m in plain.finditer(text)] == [m.span(1) for m in possessive.finditer(text)]

    same()


def test_missing_extra_messages_name_the_extras_own_requirements():
    """A message about a missing extra gives the extra's requirements as pyproject.toml declares them (read here
    with a TOML reader, independently of the installed metadata the messages read), never ``gradguard[extra]``, which
    would send pip to a package index that has no gradguard. Negative control: an extra the metadata lacks falls
    back to installing it from the clone."""
    from gradguard._extras import install_hint

    declared = _pyproject()["project"]["optional-dependencies"]
    for extra in ("torch", "plot", "demo", "lsp", "lightning", "transformers", "accelerate", "deepspeed"):
        hint = install_hint(extra)
        assert hint.startswith("pip install ") and "gradguard[" not in hint, hint
        shown = sorted(w.strip('"') for w in hint.split()[2:])
        want = sorted(_canonical(r) for r in declared[extra])
        assert sorted(_canonical(r) for r in shown) == want, (extra, shown, want)
    assert install_hint("no-such-extra") == 'pip install -e ".[no-such-extra]" in your clone of gradguard'


def _canonical(req: str) -> tuple:
    """A requirement as (name, sorted specifiers), so that ``pygls>=2,<3`` equals the metadata's ``pygls<3,>=2``."""
    import re

    name, spec = re.match(r"([A-Za-z0-9_.-]+)(.*)", req.replace(" ", "")).groups()
    return name.lower(), tuple(sorted(s for s in spec.split(",") if s))
