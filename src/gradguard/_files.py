"""Writing the files gradguard was asked to write, and no other.

Every file gradguard writes (``run --report``, ``lint --fix``, the demo's results
and plots, ``plan --plot``) goes through :func:`replacing`: the new content goes
into a new file created exclusively in the target's own folder (``O_CREAT|O_EXCL``
and ``O_NOFOLLOW``, owner-only mode, an unpredictable name: ``tempfile.mkstemp``),
which is then renamed over the target. Nothing planted at a temporary path (a
symbolic link, a pipe, a folder) is ever opened or followed, a reader never sees
half a file, and a crash leaves the old file as it was.

The target keeps its permission bits. A symbolic link at the target itself is
followed when the user named that path (``follow_links=True``: the link's target
is rewritten and the link stays); for a name gradguard derived on its own (a
child process's report, a file inside the demo's folder) the link is replaced.
A target that is not a regular file (``/dev/stdout``, ``/dev/full``, a pipe the
user made) is written in place, as ``open(path, "w")`` would: there is nothing to
rename over it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from typing import BinaryIO, Iterator, Union

__all__ = ["replacing", "replace_file", "probe_folder", "remove_pending"]

#: Temporary files being written now: a process about to die by a signal removes them first.
_pending: set = set()
if hasattr(os, "register_at_fork"):  # a forked child's are its parent's, not its own
    os.register_at_fork(after_in_child=_pending.clear)

PathLike = Union[str, "os.PathLike[str]"]


def _umask() -> int:
    """The process's umask, read without changing it (another thread may be creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: the only portable way, briefly
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replacing(path: PathLike, *, follow_links: bool = True) -> Iterator[BinaryIO]:
    """A binary file whose content replaces ``path``'s when the block ends without an exception.

    On an exception (or a failed write) the temporary file is removed and
    ``path`` is left as it was. Raises ``OSError`` as ``open`` would (a missing
    folder, no permission, ``path`` a folder).
    """
    path = os.fspath(path)
    target = os.path.realpath(path) if follow_links else os.path.abspath(path)
    try:
        st = os.stat(target) if follow_links else os.lstat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        with open(target, "wb") as fh:  # a device or a pipe the user named
            yield fh
        return
    folder, name = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)  # O_EXCL|O_NOFOLLOW, mode 0600
    _pending.add(tmp)
    try:
        keep = stat.S_IMODE(st.st_mode) if st is not None and stat.S_ISREG(st.st_mode) else 0o666 & ~_umask()
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), keep)
        if not hasattr(os, "fchmod"):  # pragma: no cover - Windows before Python 3.13
            os.chmod(tmp, keep)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        _pending.discard(tmp)


def replace_file(path: PathLike, data: bytes, *, follow_links: bool = True) -> None:
    """Replace ``path``'s content with ``data`` through :func:`replacing`."""
    with replacing(path, follow_links=follow_links) as fh:
        fh.write(data)


def remove_pending() -> None:
    """Remove the temporary files this process is writing (it is about to die by a signal)."""
    for tmp in list(_pending):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def probe_folder(folder: PathLike) -> None:
    """Raise ``OSError`` unless a file can be created in ``folder`` (a new one, removed at once)."""
    fd, tmp = tempfile.mkstemp(prefix=".gradguard-write-test.", dir=os.fspath(folder))
    os.close(fd)
    os.unlink(tmp)
