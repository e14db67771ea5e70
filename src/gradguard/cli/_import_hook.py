"""Run a callback once a module has been imported (the start-up hook of child Pythons waits on torch).

Below both :mod:`._whole_program` and :mod:`._child_python`, so neither imports the other for it.
"""

from __future__ import annotations

import sys


def when_imported(name: str, callback) -> None:
    """Call ``callback()`` once the top-level module ``name`` has been imported (now, if it is)."""
    if name in sys.modules:
        callback()
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))


class _AfterImport:
    """A meta-path finder that finds nothing itself: it calls back when one module has been imported."""

    def __init__(self, name: str, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        import importlib.util

        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        spec = importlib.util.find_spec(name)  # by the other finders
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        real_exec = loader.exec_module
        callback = self.callback

        def exec_module(module):
            real_exec(module)
            callback()

        loader.exec_module = exec_module  # this spec's own loader object: nothing else sees the change
        return spec



def forget_import_hooks() -> None:
    """Drop every callback still waiting for an import."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterImport)]
