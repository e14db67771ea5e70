"""Every code block of README.md and docs/*.md runs as pasted, or says why it does not.

A reader pastes what a page shows, so the pages are tested as pasted:

* a ``python`` block runs in a fresh temporary folder, in a fresh interpreter, and must exit 0;
* a ``bash`` block runs there too, line by line, with this environment's ``gradguard`` on PATH:
  each line must exit 0, or 1 for a ``gradguard lint`` that found something;
* ``<!-- fragment: PATH -->`` on the line before a block: an excerpt (it uses your model, your
  data) that is not run; PATH (from the repository root) is its runnable version, must exist and
  be linked from the page, where the reader sees it;
* ``<!-- not run: REASON -->`` before a ``bash`` block: it sets up, installs or starts many
  processes; its ``gradguard`` commands are still parsed by gradguard's own argument parser, so a
  flag renamed or removed breaks the test;
* configuration blocks are parsed (``toml``, ``yaml``, ``json``; a ``[tool.gradguard]`` table by
  gradguard's own configuration reader); ``lua`` is Neovim's, run by
  tests/test_language_server.py where ``nvim`` is installed; ``text`` is sample output.

Every block has a language, so none is left unchecked by accident.
"""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell"}
CONFIG = {"toml", "yaml", "json"}
UNCHECKED = {"lua", "elisp", "text"}  # see the module docstring
MARKER = re.compile(r"<!--\s*(fragment|not run):\s*(.*?)\s*-->")


class Block:
    def __init__(self, page: Path, line: int, lang: str, code: str, marker):
        self.page, self.line, self.lang, self.code, self.marker = page, line, lang, code, marker

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list:
    lines = page.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(`{3,})(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == fence.group(1))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.fullmatch(before.strip())
        out.append(Block(page, i + 1, fence.group(2).lower(), "\n".join(lines[i + 1:end]) + "\n",
                         (marker.group(1), marker.group(2)) if marker else None))
        i = end + 1
    return out


ALL = [b for page in PAGES for b in blocks(page)]
RUN_PYTHON = [b for b in ALL if b.lang == "python" and b.marker is None]
RUN_SHELL = [b for b in ALL if b.lang in SHELL and b.marker is None]


def _links(page: Path) -> set:
    """The repository paths the page links to (markdown links, resolved from the page's folder)."""
    text = page.read_text(encoding="utf-8")
    return {os.path.normpath(page.parent.joinpath(t.split("#")[0]).relative_to(ROOT))
            for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"\w+://", t) and t.split("#")[0]}


def test_blocks_found():
    assert len(ALL) > 40 and len(RUN_PYTHON) >= 3 and len(RUN_SHELL) >= 2, [b.id for b in ALL]


@pytest.mark.parametrize("block", ALL, ids=[b.id for b in ALL])
def test_block_runs_or_says_why_not(block):
    known = {"python"} | SHELL | CONFIG | UNCHECKED
    assert block.lang in known, f"{block.id}: give the block a language ({', '.join(sorted(known))})"
    if block.marker is None:
        return
    kind, value = block.marker
    if kind == "fragment":
        target = os.path.normpath(value)
        assert (ROOT / target).exists(), f"{block.id}: the fragment's runnable version {value} does not exist"
        assert target in _links(block.page), f"{block.id}: link {value} from the page, where the reader sees it"
    else:
        assert block.lang in SHELL and value, f"{block.id}: only a shell block may be left unrun, with a reason"


def _gradguard_commands(code: str) -> list:
    """The argument lists of the ``gradguard`` commands in a shell block (after ``.venv/bin/``, ``--no-python``)."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            for i, w in enumerate(words):
                if w == "gradguard" or w.endswith("/gradguard"):
                    args = words[i + 1:]
                    cut = next((j for j, a in enumerate(args) if a.startswith((">", "<", "2>"))), len(args))
                    commands.append(args[:cut])
                    break
    return commands


SHELL_BLOCKS = [b for b in ALL if b.lang in SHELL]


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[b.id for b in SHELL_BLOCKS])
def test_gradguard_commands_parse(block):
    """Each ``gradguard`` command a page shows is accepted by the command line's own parser."""
    from gradguard.cli import build_parser
    from gradguard.cli.run import split_script_args

    parser, parsers = build_parser()
    for argv in _gradguard_commands(block.code):
        if argv[:1] == ["run"]:
            own, _ = split_script_args(argv[1:])
            argv = ["run", *own]
        if "--help" in argv or "-h" in argv:
            assert argv[0] in parsers, f"{block.id}: no subcommand {argv[0]}"
            continue
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit:
            pytest.fail(f"{block.id}: gradguard {' '.join(argv)} is refused by the parser")
        assert not extra, f"{block.id}: gradguard {' '.join(argv)}: unknown {extra}"


@pytest.mark.parametrize("block", [b for b in ALL if b.lang in CONFIG],
                         ids=[b.id for b in ALL if b.lang in CONFIG])
def test_configuration_blocks_parse(block, tmp_path):
    if block.lang == "json":
        json.loads(block.code)
    elif block.lang == "yaml":
        yaml = pytest.importorskip("yaml")
        assert yaml.safe_load(block.code)
    else:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            tomllib = pytest.importorskip("tomli")
        data = tomllib.loads(block.code)
        if "gradguard" in data.get("tool", {}):
            from gradguard.lint._config import read_config

            (tmp_path / "pyproject.toml").write_text(block.code, encoding="utf-8")
            assert read_config(tmp_path / "pyproject.toml") is not None  # a bad key or value raises


def _env() -> dict:
    # This environment's interpreter and gradguard first on PATH, the checkout's source importable:
    # what a reader who followed the quick start has.
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p),
            "OMP_NUM_THREADS": "1"}


def _skip_without(code: str) -> None:
    """Skip a block whose optional framework (a gradguard extra) is not installed."""
    import importlib.util

    for name in ("lightning", "transformers", "accelerate", "deepspeed"):
        if re.search(rf"^\s*(import|from)\s+{name}\b", code, re.M) and importlib.util.find_spec(name) is None:
            pytest.skip(f"needs {name}, which is not installed")


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN_PYTHON, ids=[b.id for b in RUN_PYTHON])
def test_python_block_runs_as_pasted(block, tmp_path):
    _skip_without(block.code)
    (tmp_path / "snippet.py").write_text(block.code, encoding="utf-8")
    done = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{block.id} failed as pasted:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN_SHELL, ids=[b.id for b in RUN_SHELL])
def test_shell_block_runs_as_pasted(block, tmp_path):
    for line in block.code.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        done = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=tmp_path, env=_env(), capture_output=True,
                              text=True, timeout=600)
        lint = bool(re.match(r"\s*(cat .*\|\s*)?gradguard lint\b", line))
        assert done.returncode in ((0, 1) if lint else (0,)), f"{block.id}: {line}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, f"{block.id}: {line}\n{done.stderr}"


def test_rules_md_use_instead_has_no_finding_of_its_rule():
    """docs/rules.md's "Use instead" excerpts are what the linter accepts (the page recommends them)."""
    import gradguard as gg

    for rule in gg.RULES.values():
        codes = {f.code for f in gg.lint_source(rule.instead.strip() + "\n")}
        assert rule.code not in codes, (rule.code, codes)
