"""``[tool.gradguard]`` in ``pyproject.toml``: ``select``, ``ignore``, ``exclude``, ``extend-exclude``.

The file is found the way ruff finds its own: walk up from each linted path
(then from the current directory) to the first ``pyproject.toml`` that has a
``[tool.gradguard]`` table. Command-line flags win over it (:func:`merge`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from .._errors import GradguardError


#: Not walked into unless ``exclude`` says otherwise: hidden folders (``.git``,
#: ``.venv``, ``.tox``, ``.eggs``, ...), caches, build output, virtual environments.
DEFAULT_EXCLUDE = (".*", "__pycache__", "__pypackages__", "_build", "buck-out", "build", "dist",
                   "node_modules", "site-packages", "venv")
#: Default patterns excluded only at a project root (a folder named on the command line, or one
#: holding ``pyproject.toml``, ``setup.py`` or ``setup.cfg``), where they are build output: a source
#: package named ``build`` or ``dist`` inside a package is checked.
ROOT_ONLY_EXCLUDE = ("build", "dist")
#: The files that make a folder a project root.
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg")

KEYS = ("select", "ignore", "exclude", "extend-exclude")


class Config(NamedTuple):
    """What ``[tool.gradguard]`` says; ``source`` is the file it came from (None: none found).

    ``exclude``/``extend_exclude`` are glob patterns, relative to the folder of ``source``.
    """

    select: Optional[list] = None
    ignore: Optional[list] = None
    source: Optional[Path] = None
    exclude: Optional[list] = None
    extend_exclude: Optional[list] = None


def _load_toml(path: Path) -> dict:
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")  # TOML is UTF-8
    except OSError as exc:
        raise GradguardError(f"{_shown(path)}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise GradguardError(f"{_shown(path)}: not UTF-8 text (byte {exc.start}); TOML files must be UTF-8") from None
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            return _minimal_toml(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GradguardError(f"{_shown(path)}: cannot read [tool.gradguard]: {exc}") from None


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


def _shown(path: Path) -> str:
    """The file as a user would name it: relative to the current folder when inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _as_list(value, key: str, path: Path) -> Optional[list]:
    what = "rule codes" if key in ("select", "ignore") else "glob patterns"
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise GradguardError(f"{_shown(path)}: [tool.gradguard] {key}: must be a list of {what}, got {value!r}")
    if key in ("select", "ignore"):
        from ..rules import parse_codes

        try:
            parse_codes(value)
        except GradguardError as exc:
            raise GradguardError(f"{_shown(path)}: [tool.gradguard] {key}: {exc}") from None
    return list(value)


def read_config(pyproject: Path) -> Optional[Config]:
    """The ``[tool.gradguard]`` table of one file, or None if it has none.

    Raises:
        GradguardError: naming the file and the key, for an unknown key, a
            value of the wrong type or an unknown rule code.
    """
    table = _load_toml(pyproject).get("tool", {}).get("gradguard")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise GradguardError(f"{_shown(pyproject)}: [tool.gradguard] must be a table")
    for key in table:
        if key not in KEYS:
            import difflib

            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise GradguardError(f"{_shown(pyproject)}: [tool.gradguard] {key}: unknown key{hint}; "
                                 f"known keys: {', '.join(KEYS)}")
    lists = {key: _as_list(table.get(key), key, pyproject) for key in KEYS}
    return Config(lists["select"], lists["ignore"], pyproject, lists["exclude"], lists["extend-exclude"])


def find_config(paths: Iterable[str] = (), cwd: Optional[str] = None) -> Config:
    """The nearest ``[tool.gradguard]`` above the paths, else above ``cwd``; empty if none.

    >>> find_config(["/"], cwd="/").source is None
    True
    """
    starts = []
    for p in paths:
        path = Path(os.path.abspath(p))  # not resolve(): a path may be a link that loops
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


def _entries(codes: Union[str, Sequence[str], None]) -> List[str]:
    """``"GG101, gg2"`` or ``["GG101", "GG2"]`` -> ``["GG101", "GG2"]``."""
    if not codes:
        return []
    items = codes.split(",") if isinstance(codes, str) else [c for t in codes for c in str(t).split(",")]
    return [i.strip().upper() for i in items if i.strip()]


def merge(
    config: Optional[Config], select: Union[str, Sequence[str], None], ignore: Union[str, Sequence[str], None]
) -> Tuple[Optional[list], Optional[list]]:
    """The ``(select, ignore)`` to lint with, from the command-line flags and ``config``.

    Command-line flags win:

    * a flag replaces the configuration's value for its own key (``--select``
      replaces ``select``, ``--ignore`` replaces ``ignore``); a key without a flag
      keeps the configured value;
    * ``--select`` also beats the configured ``ignore`` for what it names: a code
      that a ``--select`` entry asks for is reported although an ``ignore`` entry
      as broad or broader (the same code, or a prefix of it) is configured. A
      configured ``ignore`` narrower than the ``--select`` entry still applies
      (``ignore = ["GG107"]`` with ``--select GG1``: every GG1 rule but GG107),
      as in ruff, where the more specific selector wins.

    Raises:
        GradguardError: an unknown code in the flags (the configuration's codes
            were checked when it was read, by :func:`read_config`).

    >>> merge(Config(ignore=["GG101"]), "GG101", None)
    (['GG101'], [])
    >>> select, ignore = merge(Config(ignore=["GG1"]), "GG101,GG2", None)
    >>> select, "GG101" in ignore, "GG102" in ignore
    (['GG101', 'GG2'], False, True)
    >>> merge(Config(select=["GG2"]), None, "GG201")
    (['GG2'], ['GG201'])
    >>> merge(Config(select=["GG1"], ignore=["GG107"]), "GG1", None)
    (['GG1'], ['GG107'])
    """
    from ..rules import parse_codes

    config = config or Config()
    flag_select, flag_ignore = _entries(select), _entries(ignore)
    for flag, entries in (("--select", flag_select), ("--ignore", flag_ignore)):
        for entry in entries:
            try:
                parse_codes(entry)
            except GradguardError as exc:
                raise GradguardError(f"{flag}: {exc}") from None
    out_select = flag_select if select is not None else (_entries(config.select) or None)
    if ignore is not None:
        return out_select, flag_ignore
    if select is None:
        return out_select, _entries(config.ignore) or None
    ignored = []
    for entry in _entries(config.ignore):
        for code in sorted(parse_codes(entry)):
            asked = any(code.startswith(s) and len(s) >= len(entry) for s in flag_select)
            if not asked and code not in ignored:
                ignored.append(code)
    return out_select, ignored
