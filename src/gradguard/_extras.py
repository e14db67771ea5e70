"""What to install for one of gradguard's optional extras, as a command that works where gradguard came from.

gradguard is installed from a clone of its repository, not from a package index, so
``pip install "gradguard[lsp]"`` would look for it on an index that does not have it. The
messages that name a missing extra give the extra's own requirements instead, read from the
installed distribution's metadata (so they follow pyproject.toml), e.g.
``pip install "pygls<3,>=2" "lsprotocol>=2025.0.0"``.
"""

from __future__ import annotations

import re
from typing import List

_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def extra_requirements(extra: str) -> List[str]:
    """The requirements gradguard's installed metadata lists for ``extra`` (``[]`` if it has none, or no metadata).

    >>> extra_requirements("no-such-extra")
    []
    """
    try:
        from importlib.metadata import PackageNotFoundError, requires

        declared = requires("gradguard") or []
    except (ImportError, PackageNotFoundError):  # pragma: no cover - run from a source tree without metadata
        declared = []
    out = []
    for line in declared:
        spec, _, marker = line.partition(";")
        if extra in _EXTRA.findall(marker):
            out.append(spec.strip().replace(" ", ""))
    return out


def install_hint(extra: str) -> str:
    """``pip install "req" ...`` for ``extra``'s requirements; from a clone's folder where the metadata has none.

    >>> install_hint("no-such-extra")
    'pip install -e ".[no-such-extra]" in your clone of gradguard'
    """
    reqs = extra_requirements(extra)
    if not reqs:
        return f'pip install -e ".[{extra}]" in your clone of gradguard'
    return "pip install " + " ".join(f'"{r}"' for r in reqs)
