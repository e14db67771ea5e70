"""``[tool.gradguard]`` in ``pyproject.toml``: ``select``, ``extend-select``, ``ignore``, ``exclude``,
``extend-exclude``, ``per-file-ignores`` (and ``extend-per-file-ignores``), ``blanket-noqa``.

The file is found the way ruff finds its own: walk up from each linted path
(then from the current directory) to the first ``pyproject.toml`` that has a
``[tool.gradguard]`` table. Command-line flags win over it (:func:`merge`).
"""

from __future__ import annotations

import os
from fnmatch import fnmatch
from pathlib import Path
from typing import Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

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

KEYS = ("select", "extend-select", "ignore", "exclude", "extend-exclude", "per-file-ignores",
        "extend-per-file-ignores", "blanket-noqa")


class Config(NamedTuple):
    """What ``[tool.gradguard]`` says; ``source`` is the file it came from (None: none found).

    ``exclude``/``extend_exclude`` are glob patterns, relative to the folder of ``source``;
    ``per_file_ignores`` is ``[(pattern, codes), ...]`` (``per-file-ignores`` then
    ``extend-per-file-ignores``), its patterns relative to that folder too.
    """

    select: Optional[list] = None
    ignore: Optional[list] = None
    source: Optional[Path] = None
    exclude: Optional[list] = None
    extend_exclude: Optional[list] = None
    extend_select: Optional[list] = None
    per_file_ignores: Optional[list] = None
    blanket_noqa: bool = False


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
    codes = key in ("select", "extend-select", "ignore") or "per-file-ignores" in key
    what = "rule codes" if codes else "glob patterns"
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise GradguardError(f"{_shown(path)}: [tool.gradguard] {key}: must be a list of {what}, got {value!r}")
    if codes:
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
    lists = {key: _as_list(table.get(key), key, pyproject) for key in ("select", "extend-select", "ignore", "exclude",
                                                                       "extend-exclude")}
    per_file = []
    for key in ("per-file-ignores", "extend-per-file-ignores"):
        value = table.get(key, {})
        if not isinstance(value, dict):
            raise GradguardError(f"{_shown(pyproject)}: [tool.gradguard] {key}: must be a table of glob pattern = "
                                 f"[rule codes], e.g. {key} = {{ \"tests/*\" = [\"GG101\"] }}; got {value!r}")
        for pattern, codes in value.items():
            per_file.append((pattern, _as_list(codes, f"{key} {pattern!r}", pyproject)))
    blanket = table.get("blanket-noqa", False)
    if not isinstance(blanket, bool):
        raise GradguardError(f"{_shown(pyproject)}: [tool.gradguard] blanket-noqa: must be true or false, got {blanket!r}")
    return Config(lists["select"], lists["ignore"], pyproject, lists["exclude"], lists["extend-exclude"],
                  lists["extend-select"], per_file or None, blanket)


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
    config: Optional[Config], select: Union[str, Sequence[str], None], ignore: Union[str, Sequence[str], None],
    extend_select: Union[str, Sequence[str], None] = None,
) -> Tuple[Optional[list], Optional[list]]:
    """The ``(select, ignore)`` to lint with, from the command-line flags and ``config``.

    Command-line flags win:

    * a flag replaces the configuration's value for its own key (``--select``
      replaces ``select`` and the configured ``extend-select`` with it, ``--ignore``
      replaces ``ignore``); a key without a flag keeps the configured value;
    * ``extend-select`` (configured, or ``--extend-select``) adds to the selection
      (which is every rule unless ``select`` narrows it), as in ruff;
    * ``--select`` and ``--extend-select`` also beat the configured ``ignore`` for
      what they name: a code that a flag entry asks for is reported although an
      ``ignore`` entry as broad or broader (the same code, or a prefix of it) is
      configured. A configured ``ignore`` narrower than the flag's entry still
      applies (``ignore = ["GG107"]`` with ``--select GG1``: every GG1 rule but
      GG107), as in ruff, where the more specific selector wins.

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
    >>> merge(Config(select=["GG2"], extend_select=["GG101"]), None, None)
    (['GG2', 'GG101'], None)
    >>> merge(Config(select=["GG2"], extend_select=["GG101"]), "GG201", None, "GG104")
    (['GG201', 'GG104'], [])
    >>> merge(Config(ignore=["GG107"]), None, None, "GG107")
    (None, [])
    """
    from ..rules import parse_codes

    config = config or Config()
    flag_select, flag_ignore, flag_extend = _entries(select), _entries(ignore), _entries(extend_select)
    for flag, entries in (("--select", flag_select), ("--ignore", flag_ignore), ("--extend-select", flag_extend)):
        for entry in entries:
            try:
                parse_codes(entry)
            except GradguardError as exc:
                raise GradguardError(f"{flag}: {exc}") from None
    if select is not None:
        base = flag_select
    else:
        configured = _entries(config.select)
        # extend-select only widens a narrowed selection: without `select`, every rule is selected already
        base = configured + [e for e in _entries(config.extend_select) if e not in configured] if configured else []
    # an empty selection is every rule, so --extend-select adds nothing to it
    out_select = base + [e for e in flag_extend if e not in base] if base else (flag_select if select is not None else None)
    if ignore is not None:
        return out_select, flag_ignore
    asked = flag_select + flag_extend
    if select is None and extend_select is None:
        return out_select, _entries(config.ignore) or None
    ignored = []
    for entry in _entries(config.ignore):
        for code in sorted(parse_codes(entry)):
            wanted = any(code.startswith(s) and len(s) >= len(entry) for s in asked)
            if not wanted and code not in ignored:
                ignored.append(code)
    return out_select, ignored


class PerFileIgnores:
    """Glob pattern -> rule codes not to report in the files it matches (ruff's ``per-file-ignores``).

    A pattern without ``/`` matches a file's name or the name of a folder on its path
    (``"tests"``, ``"test_*.py"``); one with a ``/`` matches the path from its base folder
    (the ``pyproject.toml``'s for configured patterns, the current folder for flags;
    ``*`` spans folders). A leading ``!`` negates: the codes are ignored in the files the
    rest does not match.

    >>> ignores = PerFileIgnores([("tests/*", ["GG101"], "/p"), ("!train_*.py", ["GG2"], "/p")])
    >>> sorted(ignores("/p/tests/unit/test_a.py")), sorted(ignores("/p/train_big.py"))
    (['GG101', 'GG201', 'GG202', 'GG203'], [])
    """

    def __init__(self, entries: Iterable[Tuple[str, Sequence[str], Union[str, Path]]]):
        from ..rules import parse_codes

        self.entries = []
        for pattern, codes, base in entries:
            negated = pattern.startswith("!")
            pattern = (pattern[1:] if negated else pattern).rstrip("/")
            base = os.path.abspath(base)
            anchored = os.path.join(base, pattern) if "/" in pattern else None
            self.entries.append((pattern, anchored, base, negated, parse_codes(codes)))
        self._seen: dict = {}

    @classmethod
    def of(cls, mapping: Mapping[str, Union[str, Sequence[str]]], base: str = ".") -> "PerFileIgnores":
        """From ``{pattern: codes}``, the patterns relative to ``base``."""
        return cls((p, [c] if isinstance(c, str) else list(c), base) for p, c in mapping.items())

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __call__(self, path: str) -> frozenset:
        """The codes not to report in ``path``."""
        if path in self._seen:
            return self._seen[path]
        full = os.path.abspath(path)
        out: set = set()
        for pattern, anchored, base, negated, codes in self.entries:
            if anchored is not None:
                hit = fnmatch(full, anchored)
            else:
                rel = os.path.relpath(full, base)
                names = rel.split(os.sep) if not rel.startswith(os.pardir) else [os.path.basename(full)]
                hit = any(fnmatch(name, pattern) for name in names)
            if hit != negated:
                out |= codes
        self._seen[path] = frozenset(out)
        return self._seen[path]


def parse_per_file_flag(text: str) -> List[Tuple[str, List[str]]]:
    """``--per-file-ignores`` as ruff spells it: ``PATTERN:CODE`` pairs, comma-separated; a code
    without a pattern joins the pattern before it.

    >>> parse_per_file_flag("tests/*:GG101,GG104, scripts/*.py:GG2")
    [('tests/*', ['GG101', 'GG104']), ('scripts/*.py', ['GG2'])]

    Raises:
        GradguardError: a pair without a pattern or without a code.
    """
    pairs: List[Tuple[str, List[str]]] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        pattern, colon, code = item.rpartition(":")
        if not colon:
            if not pairs:
                raise GradguardError(f"--per-file-ignores: {item!r} has no pattern: write PATTERN:CODES, "
                                     f"e.g. 'tests/*:GG101'")
            pairs[-1][1].append(item.upper())
            continue
        if not pattern.strip() or not code.strip():
            raise GradguardError(f"--per-file-ignores: {item!r}: write PATTERN:CODES, e.g. 'tests/*:GG101'")
        pairs.append((pattern.strip(), [code.strip().upper()]))
    return pairs
