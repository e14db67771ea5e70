"""Python interpreters a program starts under ``gradguard run`` are watched too.

A launcher that runs ``subprocess.run([sys.executable, "train.py"])``, a test
runner, a shell script that calls ``python``: the real training runs in another
interpreter, which ``multiprocessing``'s own hooks never see. As coverage.py does
for its subprocesses, ``gradguard run`` puts a folder holding a
``sitecustomize.py`` first on ``PYTHONPATH`` and names the run in the
environment variable :data:`ENV`; every Python that inherits the environment
(``subprocess``, ``os.system``, ``os.exec*``) imports the hook at start-up
(``site``), and the hook:

* takes its folder off ``sys.path`` again and runs any other ``sitecustomize``
  the interpreter would have run;
* does nothing in interpreters ``multiprocessing`` starts (it hands the run to
  its children itself), nor where gradguard cannot be imported;
* waits for ``torch`` to be imported: a child that never imports it (``pip``, a
  helper script) pays nothing but this check; when it is, the child watches
  itself as a child of the run, and at its end writes what it found into the
  run's folder, which the parent's summary shows with the child's pid and
  command. The child's exit code is its own: the parent's counts its errors.

An interpreter that ``os.exec*`` made from the run's own process is the run
now: it picks up the findings made before, prints the summary at its end,
removes the run's folder and exits 1 for an error-severity finding.

Interpreters started with ``-S``, ``-I`` or ``-E``, or with an environment that
drops ``PYTHONPATH`` or :data:`ENV`, are not watched.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Optional

from ._import_hook import forget_import_hooks
from ._import_hook import when_imported as _when_imported

#: The environment variable naming the run: its :class:`~._whole_program.Config`, as JSON.
ENV = "GRADGUARD_RUN"

HOOK = '''\
"""Written by `gradguard run` so that the Python processes a program starts are watched.

It removes itself from sys.path, runs the sitecustomize it hides, then hands over to gradguard.
"""


def _gradguard_hook():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import importlib.machinery
        import importlib.util

        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
    finally:
        try:
            from gradguard.cli._child_python import start
        except Exception:  # noqa: BLE001 - another Python, without gradguard: not watched
            return
        start()


_gradguard_hook()
del _gradguard_hook
'''


def write_hook(folder: str) -> None:
    """Put the start-up hook into ``folder`` (a new folder of the run, owner-only)."""
    from .._files import replace_file

    os.makedirs(folder, mode=0o700, exist_ok=False)
    replace_file(os.path.join(folder, "sitecustomize.py"), HOOK.encode("utf-8"), follow_links=False)


def environment(config, folder: str) -> dict:
    """The variables a child needs: ``PYTHONPATH`` with the hook's folder first, and :data:`ENV`."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": folder + (os.pathsep + path if path else ""), ENV: json.dumps(config._asdict())}


_state = {"disabled": False}


def disable() -> None:
    """``gradguard run`` started as a child of another run: it is a run of its own, not a watched child."""
    _state["disabled"] = True
    forget_import_hooks()


def _started_by_multiprocessing() -> bool:
    """spawn, forkserver and the resource tracker run ``python -c 'from multiprocessing... '``."""
    argv = list(getattr(sys, "orig_argv", ()))
    if "--multiprocessing-fork" in argv:
        return True
    if "-c" in argv[:-1]:
        return argv[argv.index("-c") + 1].lstrip().startswith("from multiprocessing.")
    return False


def start() -> None:
    """In the hook: join the run named by :data:`ENV`; watch once ``torch`` is imported."""
    raw = os.environ.get(ENV)
    if not raw or _started_by_multiprocessing():
        return
    try:
        from ._whole_program import Config

        config = Config(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(raw).items()})
    except (ValueError, TypeError):
        return
    import atexit

    # Registered first, so it runs last: after the program's own exit handlers, and
    # multiprocessing's, which join the children whose findings the summary shows.
    atexit.register(_ends)
    if os.getpid() == config.owner:  # the run's own process, made another program by os.exec*: it ends the run
        _install(config)
    # multiprocessing: its children must carry the run (a program may train only in them)
    when_imported("multiprocessing", lambda: _install(config))
    when_imported("torch", lambda: (_install(config), _watch_this_thread()))


def when_imported(name: str, callback) -> None:
    """Call ``callback()`` once ``name`` is imported, unless this Python became a run of its own by then."""
    _when_imported(name, lambda: None if _state["disabled"] else callback())


def _watch_this_thread() -> None:
    from ._whole_program import watch_this_thread

    watch_this_thread()


def _command() -> str:
    import shlex

    argv = list(getattr(sys, "orig_argv", None) or sys.argv)
    if argv:
        argv[0] = os.path.basename(argv[0])
    return shlex.join(argv)


def _install(config) -> None:
    from . import _whole_program

    if _state["disabled"] or _whole_program._run is not None:
        return
    parent = os.getpid() == config.owner
    _whole_program.install(config, parent=parent, command=None if parent else _command())


def _ends() -> None:
    """At the interpreter's exit: the end-of-run rules, the findings written; the run's end if this is the run."""
    from . import _whole_program

    run = _whole_program._run
    if _state["disabled"] or run is None or run.finished:
        return
    w = run.watches.pop(threading.get_ident(), None)
    if w is not None and w.active:
        exc: Optional[BaseException] = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        _whole_program._close(w, exc)
    if not run.is_owner:
        _whole_program._child_ends()
        return
    _whole_program.wait_for_the_program(set(threading.enumerate()))
    if _whole_program.finish_parent(0) == 1:  # an error-severity finding: the run exits 1, as gradguard run does
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        _whole_program._real_exit(1)
