"""How ``gradguard run`` watches the whole program, and keeps what it found.

A :class:`gradguard.watch` belongs to the thread that entered it, and to its
process. A script reaches further: it starts threads, and child processes
through :mod:`multiprocessing` (``fork``, ``spawn``, ``forkserver``;
``torch.multiprocessing.spawn``, process pools and DataLoader workers are built
on it). While the script runs:

* every thread it starts runs its ``run()`` under a watch of its own
  (``threading.Thread.start`` is wrapped, so subclasses that override ``run``
  are covered too); its findings belong to the process;
* every :mod:`multiprocessing` child process watches itself: a forked child
  keeps the watch it inherited, a spawned one (a fresh interpreter) starts one
  when it unpickles its ``Process`` object, which carries a small marker whose
  unpickling switches gradguard on; the child's end-of-run rules run when the
  child ends (multiprocessing's own exit finalizers);
* each process writes its findings to its report file as each one is made (a
  temporary file renamed over the report, so a reader never sees half a file),
  so a process killed by a signal, or ended by ``os._exit``, loses nothing it
  found. ``os._exit`` itself is wrapped: the process's summary is printed and
  its exit code raised to 1 for an error-severity finding, at the last moment
  the process allows.

How each process keeps its findings on disk is :mod:`._report_files`.
A child process writes its findings into a folder the run shares with its
children (and, with ``--report FILE``, to ``FILE`` with ``.pidN`` before its
suffix); the parent reads that folder at the end, prints each child's findings
and counts their errors in its exit code. A child without findings writes
nothing: DataLoader workers leave no empty files behind.

The folder belongs to the process that made it (``Config.owner``): only that
process prints the summary and removes the folder, on every end it can see (a
normal end, an exception, ``os._exit``, SIGTERM, SIGHUP, SIGINT). A child made by
a raw ``os.fork()`` that ends by ``sys.exit`` is a child like any other.

Python interpreters the program starts (``subprocess``, ``os.exec*``) are
watched through a start-up hook (:mod:`._child_python`) and report into the same
folder; a process that replaces itself with ``os.exec*`` leaves its findings there
first, and the new program picks them up.
"""

from __future__ import annotations

import json
import multiprocessing.process
import multiprocessing.util
import os
import signal
import sys
import threading
from typing import Dict, List, NamedTuple, Optional, Tuple

from .._files import replace_file
from ..findings import Finding, short_path, summary_line, to_json
from ._report_files import ProcessFindings, _read_shared, child_report_path, children_findings, shown_paths

_real_exit = os._exit
_real_execv = os.execv
_real_execve = os.execve
_real_signal = signal.signal
_real_getsignal = signal.getsignal
_real_thread_start = threading.Thread.start
_real_process_start = multiprocessing.process.BaseProcess.start


class Config(NamedTuple):
    """What every process of one ``gradguard run`` needs to know (picklable: it travels to spawned children)."""

    mode: str
    ignore: Tuple[str, ...]
    report: Optional[str]  # absolute path of this rank's report, or None
    shared: str  # the folder where child processes leave their findings for the parent
    who: str  # how summaries name the run: "gradguard run" or "gradguard run [rank 1/2]"
    cwd: str = ""  # the folder gradguard run started in: summaries show paths below it relative to it, as lint does
    owner: int = 0  # the pid of the process that made ``shared``: it alone summarises and removes it
    report_named: bool = True  # ``report`` is the path the user typed (a link there is followed)


class _Run:
    """The state of one ``gradguard run`` inside one process (the parent, or a child it started)."""

    def __init__(self, config: Config, parent: bool, command: Optional[str] = None):
        self.config = config
        self.main_pid = os.getpid() if parent else None
        self.command = command  # a child Python's command line, for the summary
        self.command_pid = os.getpid()  # the process it names (not a raw fork of it)
        self.watches: Dict[int, object] = {}  # thread ident -> the watch of that thread
        self.findings: Optional[ProcessFindings] = None
        self.finished = False
        self.finalizer = None  # a child's: multiprocessing calls it when the child ends
        self.stderr = sys.stderr  # where the summary goes, whatever the script does to sys.stderr

    # The process's findings: made lazily in a child, and again after a fork (the pid changed).
    def process_findings(self) -> ProcessFindings:
        pid = os.getpid()
        if self.findings is None or self.findings.pid != pid:
            shared = os.path.join(self.config.shared, f"{pid}.json")
            if pid == self.main_pid:
                paths = [self.config.report] if self.config.report else []
                followed = paths if self.config.report_named else ()
                # what this process found before an os.exec* made it the program it is now
                earlier = _read_shared(shared)[1]
                self.findings = ProcessFindings(paths, write_empty=True, followed=followed, cwd=self.config.cwd)
                for f in earlier:
                    self.findings.add(f)
                _unlink(shared)
            else:
                paths = [child_report_path(self.config.report, pid)] if self.config.report else []
                self.findings = ProcessFindings(paths, write_empty=False, shared=shared, cwd=self.config.cwd,
                                                command=self.command if pid == self.command_pid else None)
                self.finished = False
        return self.findings

    def record(self, finding: Finding) -> Finding:
        return self.process_findings().add(finding)

    def new_watch(self):
        from ..watcher import watch

        return watch(mode=self.config.mode, ignore=self.config.ignore, rewrite=self.record)

    @property
    def is_parent(self) -> bool:
        return os.getpid() == self.main_pid

    @property
    def is_owner(self) -> bool:
        """This process made the run's folder: it prints the summary and removes the folder."""
        return os.getpid() == self.config.owner


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_run: Optional[_Run] = None


# ---------------------------------------------------------------- threads
def _thread_start(thread: threading.Thread) -> None:
    run = _run
    # (a Python the program started, before it imports torch: nothing to watch yet, and no torch import forced)
    if run is not None and "torch" in sys.modules:
        inner = thread.run  # the subclass's own run(), bound

        def watched_run():
            w = run.new_watch()
            with w:
                run.watches[threading.get_ident()] = w
                try:
                    inner()
                finally:
                    run.watches.pop(threading.get_ident(), None)

        thread.run = watched_run  # Thread's bootstrap calls self.run(): the instance attribute wins
    return _real_thread_start(thread)


# ---------------------------------------------------------------- processes
class _Marker:
    """Set on every ``Process`` started during the run: unpickled in a spawned child, it switches the watch on."""

    def __init__(self, config: Config):
        self.config = config

    def __reduce__(self):
        return (_spawned, (self.config,))


def _spawned(config: Config) -> _Marker:
    """In a fresh (spawned or forkserver) child, while its ``Process`` is unpickled: install the run."""
    if _run is None:
        install(config, parent=False)
        # A spawned child runs no after-fork callbacks (forkserver ones do): start watching now, just before run().
        _child_begins(_ANCHOR)
    return _Marker(config)


def _process_start(process) -> None:
    if _run is not None:
        process._gradguard_run = _Marker(_run.config)
    return _real_process_start(process)


class _Anchor:
    """multiprocessing's after-fork registry holds its objects weakly: this one lives as long as the module."""


_ANCHOR = _Anchor()


def _child_begins(_anchor) -> None:
    """In every multiprocessing child, just before its ``run()``: a watch for its main thread, a finalizer for its end."""
    run = _run
    if run is None or run.is_parent:
        return
    run.process_findings()
    from ._import_hook import when_imported

    # spawned, or forked from a thread the run did not watch: a watch of its own; a child of a
    # Python the program started that has not imported torch yet: once it does
    when_imported("torch", watch_this_thread)
    # multiprocessing runs these finalizers when the child's run() ends (normally or not), before os._exit.
    if run.finalizer is None or not run.finalizer.still_active():
        run.finalizer = multiprocessing.util.Finalize(None, _child_ends, exitpriority=100)


def watch_this_thread() -> None:
    """A watch for the calling thread, unless it has one (the thread that imported torch)."""
    run = _run
    if run is None:
        return
    ident = threading.get_ident()
    w = run.watches.get(ident)
    if w is None or not w.active:
        w = run.new_watch()
        w.__enter__()
        run.watches[ident] = w


def _child_ends() -> None:
    """A child's last moment: its end-of-run rules, then its findings written (once)."""
    run = _run
    if run is None or run.is_parent or run.finished:
        return
    run.finished = True
    w = run.watches.pop(threading.get_ident(), None)
    if w is not None and w.active:
        exc = sys.exc_info()[1]
        _close(w, exc if exc is not None else None)
    if run.process_findings().items:  # a child without findings (a DataLoader worker) leaves no file
        run.process_findings().write()


def _close(w, exc: Optional[BaseException]) -> None:
    """Exit a watch as a ``with`` block would after ``exc`` (None: a normal end); a finding it raises is recorded."""
    from .._errors import GradguardError

    try:
        w.__exit__(type(exc) if exc is not None else None, exc, None)
    except GradguardError:
        pass


# ---------------------------------------------------------------- os._exit
def _exit(code: int) -> None:
    """``os._exit`` while the run is on: the findings are kept and reported first."""
    run = _run
    try:
        if run is not None:
            if run.is_parent:
                w = run.watches.get(threading.get_ident())
                if w is not None and w.active:
                    _close(w, SystemExit(code))  # the script chose to end here, as sys.exit does
                code = finish_parent(code)
            else:
                _child_ends()
    finally:
        _real_exit(code)


# ---------------------------------------------------------------- os.exec*
def _before_exec() -> None:
    """This program is about to be replaced: its findings so far go where the next one will find them."""
    run = _run
    if run is None:
        return
    mine = run.process_findings()
    if run.is_parent and mine.items:  # a child's are there already; the parent's went to the report only
        shared = os.path.join(run.config.shared, f"{os.getpid()}.json")
        try:
            replace_file(shared, (json.dumps({"pid": os.getpid(), "command": None,
                                              "findings": json.loads(to_json(mine.items))}) + "\n").encode("utf-8"),
                         follow_links=False)
        except OSError:
            pass


def _execv(path, args):
    _before_exec()
    return _real_execv(path, args)


def _execve(path, args, env):
    _before_exec()
    return _real_execve(path, args, env)


# ---------------------------------------------------------------- signals
# SIGTERM and SIGHUP end python without a word; the run's owner first prints what it
# found and removes its folder, then ends by the same signal (the same exit status).
# SIGINT needs nothing here: python turns it into KeyboardInterrupt, which the run sees.
_HANDLED = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
_before: Dict[int, object] = {}  # signal -> the disposition the script would see (ours is hidden from it)


def _on_signal(signum, frame) -> None:
    run = _run
    if run is not None and run.is_owner and not run.finished:
        try:
            finish_parent(0)
        except BaseException:  # noqa: BLE001 - the signal's own end comes first
            pass
    die_by_signal(signum)


def die_by_signal(signum: int) -> None:
    """End this process by ``signum`` with its default action, as python's own end by it would."""
    from .._files import remove_pending

    remove_pending()  # a report being written when the signal came: its temporary file
    try:
        _real_signal(signum, signal.SIG_DFL)
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        pass
    os.kill(os.getpid(), signum)
    _real_exit(128 + signum)  # the signal is blocked: the shell's convention


def _getsignal(signum):
    handler = _real_getsignal(signum)
    return _before.get(signum, handler) if handler is _on_signal else handler


def _signal(signum, handler):
    previous = _real_signal(signum, handler)
    return _before.get(signum, previous) if previous is _on_signal else previous


def _install_signals() -> None:
    for signum in _HANDLED:
        current = _real_getsignal(signum)
        if current is signal.SIG_DFL:  # ignored (nohup) or handled by someone: left alone
            try:
                _real_signal(signum, _on_signal)
                _before[signum] = current
            except (ValueError, OSError):  # not the main thread
                pass
    signal.getsignal = _getsignal
    signal.signal = _signal


def _restore_signals() -> None:
    for signum, before in list(_before.items()):
        try:
            if _real_getsignal(signum) is _on_signal:
                _real_signal(signum, before)
        except (ValueError, OSError):
            pass
    _before.clear()
    signal.getsignal = _real_getsignal
    signal.signal = _real_signal


def _after_fork_in_child() -> None:
    """A forked child is not the owner: it dies by a signal as python's child would."""
    if _before:
        _restore_signals()


# ---------------------------------------------------------------- the run
_after_fork_registered = False


def install(config: Config, *, parent: bool, command: Optional[str] = None) -> _Run:
    """Switch the whole-program watch on in this process (the parent, or a child)."""
    global _run, _after_fork_registered
    _run = _Run(config, parent, command)
    threading.Thread.start = _thread_start
    multiprocessing.process.BaseProcess.start = _process_start
    if not _after_fork_registered:  # once per process: it stays, and does nothing while no run is on
        multiprocessing.util.register_after_fork(_ANCHOR, _child_begins)
        if hasattr(os, "register_at_fork"):  # POSIX
            os.register_at_fork(after_in_child=_after_fork_in_child)
        _after_fork_registered = True
    os._exit = _exit
    os.execv, os.execve = _execv, _execve  # every os.exec* function ends in one of these two
    if parent:
        _run.process_findings()  # the report exists (empty) from the start
        if _run.is_owner:
            _install_signals()
    return _run


def uninstall() -> None:
    """Undo :func:`install` (the parent, at the end of ``gradguard run``; tests call ``main`` many times)."""
    global _run
    _run = None
    threading.Thread.start = _real_thread_start
    multiprocessing.process.BaseProcess.start = _real_process_start
    os._exit = _real_exit
    os.execv, os.execve = _real_execv, _real_execve
    _restore_signals()


def wait_for_the_program(before: set) -> None:
    """Wait, as Python does at exit, for the script's non-daemon threads and multiprocessing children."""
    for t in threading.enumerate():
        if t not in before and not t.daemon and t is not threading.current_thread():
            t.join()
    for p in multiprocessing.active_children():
        if not p.daemon:
            p.join()


def finish_parent(code: int) -> int:
    """The end of the run in the parent: reports, summaries, and the exit code (once)."""
    import shutil

    run = _run
    if run is None or run.finished or not run.is_owner:
        return code
    run.finished = True
    config = run.config
    mine = run.process_findings()
    mine.write()  # retries a write that failed during the run
    who = config.who
    out = _Stderr(run.stderr)
    _print_findings(out, mine.items, who,
                    config.report if config.report and config.report not in mine.failed else None, config.cwd)
    for path, exc in mine.failed.items():
        out.write(f"{who}: error: could not write the report to {short_path(path, config.cwd or None)}: "
                  f"{exc.strerror or exc}; the findings as JSON follow\n")
        out.write(to_json(shown_paths(mine.items, config.cwd)) + "\n")
    everything = list(mine.items)
    for pid, command, found in children_findings(config.shared, config.owner):
        name = f"pid {pid}: {command}" if command else f"pid {pid}"
        child_who = f"{who[:-1]}, {name}]" if who.endswith("]") else f"{who} [{name}]"
        report = child_report_path(config.report, pid) if config.report else None
        _print_findings(out, found, child_who, report, config.cwd)
        everything.extend(found)
    shutil.rmtree(config.shared, ignore_errors=True)
    if any(f.severity == "error" for f in everything):
        return 1
    return code


class _Stderr:
    """Where the summary goes: the stderr ``gradguard run`` started with, whatever the script did to it.

    A script may close or replace ``sys.stderr``; python then ends as usual, and so
    does the run: the summary goes to file descriptor 2 if the stream is closed,
    and a summary that cannot be written at all is dropped, never an error.
    """

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        stream = self.stream
        try:
            if stream is None or getattr(stream, "closed", False):
                stream = self.stream = open(2, "w", closefd=False, errors="backslashreplace")
            stream.write(text)
            stream.flush()
        except (OSError, ValueError, AttributeError, TypeError):
            pass


def _print_findings(out: _Stderr, findings: List[Finding], who: str, report: Optional[str], cwd: str = "") -> None:
    if findings:
        out.write(f"\n{who}: findings\n")
        for f in findings:
            # relative to where the run started (the script may have changed folder), as `gradguard lint` shows it
            shown = f._replace(path=short_path(f.path, cwd or None)) if f.path else f
            out.write(shown.format() + "\n")
        out.write(f"`gradguard rule {findings[0].code}` explains a rule and its fix"
                  + (f"; {short_path(report, cwd or None)} has the full messages" if report else "") + "\n")
    out.write(f"{who}: {summary_line(findings)}\n")
