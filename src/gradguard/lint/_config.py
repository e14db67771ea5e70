"""``[tool.gradguard]`` in ``pyproject.toml``: ``select`` and ``ignore``.

The file is found the way ruff finds its own: walk up from each linted path
(then from the current directory) to the first ``pyproject.toml`` that has a
``[tool.gradguard]`` table. Command-line flags win over it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, NamedTuple, Optional

from .._errors import GradguardError


class Config(NamedTuple):
    """What ``[tool.gradguard]`` says; ``source`` is the file it came from (None: none found)."""

    select: Optional[list] = None
    ignore: Optional[list] = None
    source: Optional[Path] = None


def _load_toml(path: Path) -> dict:
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            return _minimal_toml(path.read_text(encoding="utf-8"))
    with open(path, "rb") as fh:
        try:
            return tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise GradguardError(f"cannot read {path}: {exc}") from None


def _minimal_toml(text: str) -> dict:  # pragma: no cover - only without tomllib/tomli
    """Enough TOML for ``[tool.gradguard]`` with one-line string or list values."""
    import ast

    table: dict = {}
    inside = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            inside = line == "[tool.gradguard]"
        elif inside and "=" in line:
            key, value = (part.strip() for part in line.split("=", 1))
            try:
                table[key] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise GradguardError(f"cannot read [tool.gradguard] {key} = {value}") from None
    return {"tool": {"gradguard": table}} if table else {}


def _as_list(value, key: str, path: Path) -> Optional[list]:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise GradguardError(f"{path}: [tool.gradguard] {key} must be a list of rule codes, got {value!r}")


def read_config(pyproject: Path) -> Optional[Config]:
    """The ``[tool.gradguard]`` table of one file, or None if it has none."""
    table = _load_toml(pyproject).get("tool", {}).get("gradguard")
    if table is None:
        return None
    unknown = set(table) - {"select", "ignore"}
    if unknown:
        raise GradguardError(f"{pyproject}: unknown [tool.gradguard] keys {sorted(unknown)} (known: select, ignore)")
    return Config(_as_list(table.get("select"), "select", pyproject), _as_list(table.get("ignore"), "ignore", pyproject), pyproject)


def find_config(paths: Iterable[str] = (), cwd: Optional[str] = None) -> Config:
    """The nearest ``[tool.gradguard]`` above the paths, else above ``cwd``; empty if none.

    >>> find_config(["/"], cwd="/").source is None
    True
    """
    starts = []
    for p in paths:
        path = Path(p).resolve()
        starts.append(path if path.is_dir() else path.parent)
    starts.append(Path(cwd or os.getcwd()).resolve())
    seen = set()
    for start in starts:
        for folder in (start, *start.parents):
            if folder in seen:
                break
            seen.add(folder)
            candidate = folder / "pyproject.toml"
            if candidate.is_file():
                config = read_config(candidate)
                if config is not None:
                    return config
    return Config()
