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

A child process writes its findings into a folder the run shares with its
children (and, with ``--report FILE``, to ``FILE`` with ``.pidN`` before its
suffix); the parent reads that folder at the end, prints each child's findings
and counts their errors in its exit code. A child without findings writes
nothing: DataLoader workers leave no empty files behind.
"""

from __future__ import annotations

import json
import multiprocessing.process
import multiprocessing.util
import os
import sys
import threading
from typing import Dict, List, NamedTuple, Optional, Tuple

from ..findings import Finding, short_path, summary_line, to_json

_real_exit = os._exit
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


def child_report_path(report: str, pid: int) -> str:
    """A child process's report: ``FILE`` with ``.pidN`` before its suffix.

    >>> child_report_path("out/findings.json", 4242), child_report_path("out/findings.rank1.json", 7)
    ('out/findings.pid4242.json', 'out/findings.rank1.pid7.json')
    """
    stem, suffix = os.path.splitext(report)
    return f"{stem}.pid{pid}{suffix}"


class ProcessFindings:
    """One process's findings, from all its threads, each written out as soon as it is made.

    Deduplicated by code and source line, as one watch does, across the
    process's threads.
    """

    def __init__(self, paths: List[str], *, write_empty: bool):
        self.pid = os.getpid()
        self.paths = paths
        self.items: List[Finding] = []
        self.failed: Dict[str, OSError] = {}  # path -> why the last write to it failed
        self._keys: set = set()
        self._lock = threading.Lock()
        if write_empty:
            self.write()

    def add(self, finding: Finding) -> Finding:
        """Record ``finding`` and write the files now; returns it unchanged (a watch's ``rewrite``)."""
        with self._lock:
            key = (finding.code, finding.path, finding.line)
            if key not in self._keys:
                self._keys.add(key)
                self.items.append(finding)
                self.write()
        return finding

    def write(self) -> None:
        text = to_json(self.items) + "\n"
        for path in self.paths:
            try:
                _write_whole(path, text)
                self.failed.pop(path, None)
            except OSError as exc:
                self.failed[path] = exc


def _write_whole(path: str, text: str) -> None:
    """Replace ``path``'s content at once: a new file renamed over it (a device such as /dev/full: in place)."""
    if os.path.exists(path) and not os.path.isfile(path):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class _Run:
    """The state of one ``gradguard run`` inside one process (the parent, or a child it started)."""

    def __init__(self, config: Config, parent: bool):
        self.config = config
        self.main_pid = os.getpid() if parent else None
        self.watches: Dict[int, object] = {}  # thread ident -> the watch of that thread
        self.findings: Optional[ProcessFindings] = None
        self.finished = False
        self.finalizer = None  # a child's: multiprocessing calls it when the child ends

    # The process's findings: made lazily in a child, and again after a fork (the pid changed).
    def process_findings(self) -> ProcessFindings:
        pid = os.getpid()
        if self.findings is None or self.findings.pid != pid:
            if pid == self.main_pid:
                paths = [self.config.report] if self.config.report else []
                self.findings = ProcessFindings(paths, write_empty=True)
            else:
                paths = [os.path.join(self.config.shared, f"{pid}.json")]
                if self.config.report:
                    paths.append(child_report_path(self.config.report, pid))
                self.findings = ProcessFindings(paths, write_empty=False)
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


_run: Optional[_Run] = None


# ---------------------------------------------------------------- threads
def _thread_start(thread: threading.Thread) -> None:
    run = _run
    if run is not None:
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
    ident = threading.get_ident()
    w = run.watches.get(ident)
    if w is None or not w.active:  # spawned, or forked from a thread the run did not watch
        w = run.new_watch()
        w.__enter__()
        run.watches[ident] = w
    # multiprocessing runs these finalizers when the child's run() ends (normally or not), before os._exit.
    if run.finalizer is None or not run.finalizer.still_active():
        run.finalizer = multiprocessing.util.Finalize(None, _child_ends, exitpriority=100)


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


# ---------------------------------------------------------------- the run
_after_fork_registered = False


def install(config: Config, *, parent: bool) -> _Run:
    """Switch the whole-program watch on in this process (the parent, or a spawned child)."""
    global _run, _after_fork_registered
    _run = _Run(config, parent)
    threading.Thread.start = _thread_start
    multiprocessing.process.BaseProcess.start = _process_start
    if not _after_fork_registered:  # once per process: it stays, and does nothing while no run is on
        multiprocessing.util.register_after_fork(_ANCHOR, _child_begins)
        _after_fork_registered = True
    os._exit = _exit
    if parent:
        _run.process_findings()  # the report exists (empty) from the start
    return _run


def uninstall() -> None:
    """Undo :func:`install` (the parent, at the end of ``gradguard run``; tests call ``main`` many times)."""
    global _run
    _run = None
    threading.Thread.start = _real_thread_start
    multiprocessing.process.BaseProcess.start = _real_process_start
    os._exit = _real_exit


def wait_for_the_program(before: set) -> None:
    """Wait, as Python does at exit, for the script's non-daemon threads and multiprocessing children."""
    for t in threading.enumerate():
        if t not in before and not t.daemon and t is not threading.current_thread():
            t.join()
    for p in multiprocessing.active_children():
        if not p.daemon:
            p.join()


def children_findings(shared: str) -> List[Tuple[int, List[Finding]]]:
    """``(pid, findings)`` for each child process that left findings in the shared folder, by pid."""
    out = []
    try:
        names = os.listdir(shared)
    except OSError:
        return out
    for name in names:
        stem, ext = os.path.splitext(name)
        if ext != ".json" or not stem.isdigit():
            continue
        try:
            with open(os.path.join(shared, name), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        out.append((int(stem), [Finding.from_dict(d) for d in data]))
    return sorted(out)


def finish_parent(code: int) -> int:
    """The end of the run in the parent: reports, summaries, and the exit code (once)."""
    import shutil

    run = _run
    if run is None or run.finished:
        return code
    run.finished = True
    config = run.config
    mine = run.process_findings()
    mine.write()  # retries a write that failed during the run
    who = config.who
    _print_findings(mine.items, who, config.report if config.report and config.report not in mine.failed else None,
                    config.cwd)
    for path, exc in mine.failed.items():
        print(f"{who}: error: could not write the report to {path}: {exc.strerror or exc}; "
              "the findings as JSON follow", file=sys.stderr)
        sys.stderr.write(to_json(mine.items) + "\n")
    everything = list(mine.items)
    for pid, found in children_findings(config.shared):
        child_who = f"{who[:-1]}, pid {pid}]" if who.endswith("]") else f"{who} [pid {pid}]"
        report = child_report_path(config.report, pid) if config.report else None
        _print_findings(found, child_who, report, config.cwd)
        everything.extend(found)
    shutil.rmtree(config.shared, ignore_errors=True)
    if any(f.severity == "error" for f in everything):
        return 1
    return code


def _print_findings(findings: List[Finding], who: str, report: Optional[str], cwd: str = "") -> None:
    if findings:
        print(f"\n{who}: findings", file=sys.stderr)
        for f in findings:
            # relative to where the run started (the script may have changed folder), as `gradguard lint` shows it
            shown = f._replace(path=short_path(f.path, cwd or None)) if f.path else f
            print(shown.format(), file=sys.stderr)
        print(f"`gradguard rule {findings[0].code}` explains a rule and its fix"
              + (f"; {report} has the full messages" if report else ""), file=sys.stderr)
    print(f"{who}: {summary_line(findings)}", file=sys.stderr)
