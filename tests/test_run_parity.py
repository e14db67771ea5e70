"""``gradguard run SCRIPT`` ends as ``python SCRIPT`` does, in every way a script can see.

Each script runs under both, in a subprocess; the exit status (a signal's
death included), the standard output, and what is left in the temporary folder
must be the same. gradguard's summary on stderr is the only difference.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,  # two interpreters per case
              pytest.mark.skipif(os.name != "posix", reason="os.fork, POSIX signals")]

CASES = {
    "closed stderr": "import sys\nsys.stderr.close()\n",
    "closed stdout": "import sys\nprint('out')\nsys.stdout.close()\n",
    "both closed": "import sys\nsys.stdout.close()\nsys.stderr.close()\n",
    "stderr replaced": "import io, sys\nsys.stderr = io.StringIO()\nprint('x', file=sys.stderr)\n",
    "stdout to a full disk": "import sys\nsys.stdout = open('/dev/full', 'w')\nprint('lost')\n",
    "sys.exit(message) on a closed stderr": "import sys\nsys.stderr.close()\nsys.exit('bye')\n",
    "crash on a closed stderr": "import sys\nsys.stderr.close()\nraise ValueError('boom')\n",
    "own excepthook": "import sys\nsys.excepthook = lambda *a: print('hooked', a[0].__name__)\nraise KeyError(1)\n",
    "exit code over 255": "import sys\nsys.exit(256 + 3)\n",
    "SIGTERM": "import os, signal\nprint('up', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)\n",
    "SIGHUP": "import os, signal\nos.kill(os.getpid(), signal.SIGHUP)\n",
    "SIGINT": "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n",
    "caught SIGINT": "import os, signal\ntry:\n    os.kill(os.getpid(), signal.SIGINT)\nexcept KeyboardInterrupt:\n"
                     "    print('caught')\n",
    "own SIGTERM handler": "import os, signal, sys\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(4))\n"
                           "os.kill(os.getpid(), signal.SIGTERM)\n",
    "signal dispositions": "import signal\nfor s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):\n"
                           "    print(s.name, signal.getsignal(s))\n"
                           "print('was', signal.signal(signal.SIGTERM, signal.SIG_IGN))\n"
                           "print('now', signal.getsignal(signal.SIGTERM))\n",
    "os._exit": "import os\nprint('flushed?')\nos._exit(7)\n",
    "sys.exit in a raw fork child": "import os, sys\npid = os.fork()\nif pid == 0:\n    sys.exit(3)\n"
                                    "_, status = os.waitpid(pid, 0)\nprint('child', os.waitstatus_to_exitcode(status))\n"
                                    "sys.exit(os.waitstatus_to_exitcode(status) + 10)\n",
    "a crash in a raw fork child": "import os\npid = os.fork()\nif pid == 0:\n    raise ValueError('child')\n"
                                   "_, status = os.waitpid(pid, 0)\nprint('child', os.waitstatus_to_exitcode(status))\n",
    "SIGTERM in a raw fork child": "import os, signal, time\npid = os.fork()\nif pid == 0:\n"
                                   "    os.kill(os.getpid(), signal.SIGTERM)\n    time.sleep(5)\n"
                                   "_, status = os.waitpid(pid, 0)\nprint('child', os.waitstatus_to_exitcode(status))\n",
    "sys.exit in multiprocessing children": (
        "import multiprocessing as mp, sys\n"
        "if __name__ == '__main__':\n"
        "    codes = []\n"
        "    for how in ('fork', 'spawn', 'forkserver'):\n"
        "        p = mp.get_context(how).Process(target=sys.exit, args=(5,))\n"
        "        p.start(); p.join(); codes.append(p.exitcode)\n"
        "    q = mp.get_context('fork').Process(target=sys.exit, args=('message',))\n"
        "    q.start(); q.join(); codes.append(q.exitcode)\n"
        "    print(codes)\n"
        "    sys.exit(sum(codes))\n"),
}


def _run(cmd, cwd, tmp):
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONHASHSEED": "0"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case", list(CASES))
def test_same_end_as_python(tmp_path, case):
    (tmp_path / "s.py").write_text(CASES[case])
    runs = {}
    for name, prefix in (("python", [sys.executable]), ("gradguard", [sys.executable, "-m", "gradguard", "run"])):
        # a short TMPDIR: forkserver's socket path under it must fit AF_UNIX's 108 bytes
        tmp = Path(tempfile.mkdtemp(prefix="ggp-"))
        try:
            runs[name] = _run([*prefix, "s.py"], tmp_path, tmp)
            left = [p.name for p in tmp.iterdir() if p.name.startswith("gradguard-run-")]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        assert left == [], f"{name} left {left}"
    python, ours = runs["python"], runs["gradguard"]
    assert ours.returncode == python.returncode, (python.stderr, ours.stderr)
    assert ours.stdout == python.stdout
    assert "gradguard run: No findings." in ours.stderr  # the summary comes, even when the script closed stderr


BUGGY_ON_A_CLOSED_STDERR = """import sys
import torch
sys.stderr.close()
w = torch.nn.Parameter(torch.ones(2))
opt = torch.optim.SGD([w], lr=0.1)
for _ in range(3):
    (w * 2).sum().backward()
    opt.step()  # no zero_grad: GG101 from the second step on, in warn mode a warning
print('trained', w.tolist())
"""


def test_a_finding_warned_on_a_closed_stderr_does_not_stop_the_script(tmp_path):
    """python's warnings ignore an OSError on stderr but not a closed one's ValueError: the watch's
    warning must not crash a program that python runs to the end; the run still reports the finding."""
    (tmp_path / "s.py").write_text(BUGGY_ON_A_CLOSED_STDERR)
    tmp = Path(tempfile.mkdtemp(prefix="ggp-"))
    try:
        plain = _run([sys.executable, "s.py"], tmp_path, tmp)
        watched = _run([sys.executable, "-m", "gradguard", "run", "s.py"], tmp_path, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert plain.returncode == 0 and plain.stdout.startswith("trained"), plain
    assert watched.stdout == plain.stdout, watched  # the script ran to its end, as under python
    assert watched.returncode == 1 and "GG101" in watched.stderr, watched  # and the finding is reported
