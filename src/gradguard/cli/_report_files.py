"""Where each process of ``gradguard run`` keeps its findings: its report, and a file for the parent.

Each process writes its findings as each one is made (a temporary file renamed over the
report, so a reader never sees half a file, and a process killed by a signal loses nothing it
found): to its report (a child's is ``FILE`` with ``.pidN`` before its suffix), and, for a child,
to a file in the folder the run shares, which the parent reads at the end
(:func:`children_findings`). How the processes are found and followed is :mod:`._whole_program`.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Dict, List, Optional, Tuple

from .._files import replace_file
from ..findings import Finding, short_path, to_json


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
    process's threads. ``paths``: the reports (JSON arrays); ``followed``: those
    the user named, where a symbolic link is followed; ``shared``: the file in
    the run's folder the parent reads (with ``command``, how the summary names
    the process), whose earlier content, left by the program this process was
    before an ``os.exec*``, is taken over. ``cwd``: the folder the run started in; the reports show a file
    below it relative to it, as ``gradguard lint`` does (the shared file keeps absolute paths).
    """

    def __init__(self, paths: List[str], *, write_empty: bool, followed=(), shared: Optional[str] = None,
                 command: Optional[str] = None, cwd: str = ""):
        self.pid = os.getpid()
        self.paths = paths
        self.cwd = cwd
        self.followed = set(followed)
        self.shared = shared
        self.command = command
        self.items: List[Finding] = []
        self.failed: Dict[str, OSError] = {}  # path -> why the last write to it failed
        self._keys: set = set()
        self._lock = threading.Lock()
        if shared is not None:
            for f in _read_shared(shared)[1]:
                self._keys.add((f.code, f.path, f.line))
                self.items.append(f)
        if write_empty or self.items:
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
        data = (to_json(shown_paths(self.items, self.cwd)) + "\n").encode("utf-8") if self.paths else b""
        for path in self.paths:
            try:
                # a new file renamed over the report: a reader never sees half of it, and nothing
                # planted at a temporary name is followed (gradguard._files)
                replace_file(path, data, follow_links=path in self.followed)
                self.failed.pop(path, None)
            except OSError as exc:
                self.failed[path] = exc
        if self.shared is not None:
            record = {"pid": self.pid, "command": self.command, "findings": json.loads(to_json(self.items))}
            try:
                replace_file(self.shared, (json.dumps(record) + "\n").encode("utf-8"), follow_links=False)
            except OSError:
                pass  # the run has ended (its folder is gone), or the disk is full: the report has them


def shown_paths(findings: List[Finding], cwd: str = "") -> List[Finding]:
    """``findings`` with each file below ``cwd`` (the folder the run started in; the current one if empty)
    relative to it, as ``gradguard lint`` shows them; elsewhere absolute."""
    return [f._replace(path=short_path(f.path, cwd or None)) if f.path else f for f in findings]


def _read_shared(path: str) -> Tuple[Optional[str], List[Finding]]:
    """``(command, findings)`` of one file of the run's folder; ``(None, [])`` when there is none."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data.get("command"), [Finding.from_dict(d) for d in data["findings"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, []


def children_findings(shared: str, owner: int = 0) -> List[Tuple[int, Optional[str], List[Finding]]]:
    """``(pid, command, findings)`` for each child process that left findings in the shared folder, by pid."""
    out = []
    try:
        names = os.listdir(shared)
    except OSError:
        return out
    for name in names:
        stem, ext = os.path.splitext(name)
        if ext != ".json" or not stem.isdigit() or int(stem) == owner:
            continue
        command, found = _read_shared(os.path.join(shared, name))
        if found:
            out.append((int(stem), command, found))
    return sorted(out, key=lambda t: t[0])
