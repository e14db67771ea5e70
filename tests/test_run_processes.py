"""``gradguard run`` loses no finding, whatever processes the program makes, and owns its temporary state.

Raw ``os.fork()`` children, Python interpreters started with ``subprocess`` or
``os.exec*`` (a launcher, a test runner), and the end of a run by a signal.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from _findings import codes

pytestmark = [pytest.mark.slow,  # python in subprocesses
              pytest.mark.skipif(os.name != "posix", reason="os.fork, POSIX signals")]

BUGGY_TRAIN = (
    "import torch\n"
    "m = torch.nn.Linear(2, 1)\n"
    "o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
    "for _ in range(3):\n"
    "    m(torch.ones(1, 2)).sum().backward()\n"
    "    o.step()  # no zero_grad: GG101\n"
)
CORRECT_TRAIN = BUGGY_TRAIN.replace("    m(torch", "    o.zero_grad()\n    m(torch")


def gradguard_run(tmp_path, *args, env=None):
    # a short TMPDIR of its own: forkserver's socket path under it must fit AF_UNIX's 108 bytes
    tmp = tempfile.mkdtemp(prefix="ggp-")
    try:
        done = subprocess.run([sys.executable, "-m", "gradguard", "run", *args], cwd=tmp_path,
                              env={**os.environ, "TMPDIR": tmp, **(env or {})},
                              capture_output=True, text=True, timeout=300)
        left = [name for name in os.listdir(tmp) if name.startswith("gradguard-run-")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert left == [], f"the run left {left} behind\n{done.stderr}"
    return done


def child_reports(tmp_path, stem="r"):
    return sorted(p for p in tmp_path.glob(f"{stem}.pid*.json"))


# ---------------------------------------------------------------- raw os.fork()
def test_a_raw_fork_child_ending_by_sys_exit_loses_no_later_finding(tmp_path):
    """The forked child ends through gradguard run's own code: it must not end the run (its summary,
    its folder); a multiprocessing child's GG101 made afterwards is still reported."""
    (tmp_path / "train.py").write_text(BUGGY_TRAIN)
    (tmp_path / "t.py").write_text(
        "import multiprocessing as mp, os, runpy, sys\n"
        "def train():\n    runpy.run_path('train.py')\n"
        "if __name__ == '__main__':\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n        sys.exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "    for how in ('fork', 'spawn'):\n"
        "        p = mp.get_context(how).Process(target=train); p.start(); p.join()\n")
    done = gradguard_run(tmp_path, "--mode", "record", "--report", "r.json", "t.py")
    assert done.returncode == 1, done.stderr
    assert [codes(p) for p in child_reports(tmp_path)] == [["GG101"], ["GG101"]], done.stderr
    assert done.stderr.count("Found 1 finding (1 error).") == 2
    assert done.stderr.count("gradguard run: No findings.") == 1  # one summary of the parent's own: not the child's


def test_a_raw_fork_childs_own_finding_is_reported_by_the_parent(tmp_path):
    (tmp_path / "train.py").write_text(BUGGY_TRAIN)
    (tmp_path / "t.py").write_text(
        "import os, runpy, sys\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    runpy.run_path('train.py')\n    sys.exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print('parent done')\n")
    done = gradguard_run(tmp_path, "--mode", "record", "t.py")
    assert done.returncode == 1, done.stderr
    assert done.stdout == "parent done\n"
    assert "train.py:6: GG101" in done.stderr and "gradguard run [pid " in done.stderr


# ---------------------------------------------------------------- signals
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_run_ended_by_a_signal_prints_its_findings_keeps_its_report_and_leaves_nothing(tmp_path, signame):
    import signal

    if signal.getsignal(getattr(signal, signame)) is signal.SIG_IGN:
        # an ignored signal stays ignored in child processes (`nohup` ignores SIGHUP): python would not die by it either
        pytest.skip(f"{signame} is ignored in this environment")
    (tmp_path / "t.py").write_text(BUGGY_TRAIN + f"import os, signal\nos.kill(os.getpid(), signal.{signame})\n")
    done = gradguard_run(tmp_path, "--mode", "record", "--report", "r.json", "t.py")

    assert done.returncode == -getattr(signal, signame), done.stderr  # died by the signal, as python does
    assert codes(tmp_path / "r.json") == ["GG101"]
    assert "gradguard run: Found 1 finding (1 error)." in done.stderr


# ---------------------------------------------------------------- child Pythons
LAUNCHER = "import subprocess, sys\nr = subprocess.run([sys.executable, 'train.py'])\nprint('child exit', r.returncode)\n"


def test_a_python_started_by_subprocess_is_watched(tmp_path):
    (tmp_path / "train.py").write_text(BUGGY_TRAIN)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    done = gradguard_run(tmp_path, "--mode", "record", "--report", "r.json", "launcher.py")
    assert done.returncode == 1, done.stderr
    assert done.stdout == "child exit 0\n"  # the child's own exit code is untouched
    [child] = child_reports(tmp_path)
    pid = child.name[len("r.pid"):-len(".json")]
    assert codes(child) == ["GG101"] and codes(tmp_path / "r.json") == []
    assert f"gradguard run [pid {pid}: python train.py]: Found 1 finding (1 error)." in done.stderr
    assert "\ntrain.py:6: GG101" in done.stderr  # relative to where the run started, as lint shows it


def test_no_subprocess_turns_it_off(tmp_path):
    (tmp_path / "train.py").write_text(BUGGY_TRAIN)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    done = gradguard_run(tmp_path, "--mode", "record", "--no-subprocess", "--report", "r.json", "launcher.py")
    assert done.returncode == 0, done.stderr
    assert "gradguard run: No findings." in done.stderr and "pid" not in done.stderr
    assert child_reports(tmp_path) == []


def test_a_correct_child_python_has_no_findings(tmp_path):
    """Negative control: the same launcher with a loop that clears its gradients."""
    (tmp_path / "train.py").write_text(CORRECT_TRAIN)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    done = gradguard_run(tmp_path, "--mode", "record", "launcher.py")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith("gradguard run: No findings.")


def test_a_child_python_sees_what_it_would_under_python(tmp_path):
    """The hook leaves no trace a child can see in sys.path, runs the sitecustomize it hides,
    and costs a child that never imports torch no torch import."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    (tmp_path / "child.py").write_text(
        "import json, os, sys\n"
        "print(json.dumps([sys.path, os.environ.get('USER_SITECUSTOMIZE'), 'torch' in sys.modules]))\n")
    (tmp_path / "launcher.py").write_text(
        "import subprocess, sys\nsys.exit(subprocess.run([sys.executable, 'child.py']).returncode)\n")
    env = {"PYTHONPATH": str(site)}
    python = subprocess.run([sys.executable, "launcher.py"], cwd=tmp_path, env={**os.environ, **env},
                            capture_output=True, text=True, timeout=120)
    ours = gradguard_run(tmp_path, "launcher.py", env=env)
    assert ours.returncode == python.returncode == 0, ours.stderr
    assert json.loads(ours.stdout) == json.loads(python.stdout)
    assert json.loads(ours.stdout)[1:] == ["ran", False]


def test_a_multiprocessing_child_of_a_child_python_is_watched(tmp_path):
    (tmp_path / "train.py").write_text(
        "import multiprocessing as mp, runpy\n"
        "def work():\n    runpy.run_path('buggy.py')\n"
        "if __name__ == '__main__':\n"
        "    p = mp.get_context('spawn').Process(target=work); p.start(); p.join()\n")
    (tmp_path / "buggy.py").write_text(BUGGY_TRAIN)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    done = gradguard_run(tmp_path, "--mode", "record", "--report", "r.json", "launcher.py")
    assert done.returncode == 1, done.stderr
    assert [codes(p) for p in child_reports(tmp_path)] == [["GG101"]], done.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_os_exec_keeps_the_findings_on_either_side(tmp_path, where):
    """The run's own process becomes another Python by os.execv: findings made before it are kept,
    and the new program's are made, summarised and counted in the exit code."""
    (tmp_path / "buggy.py").write_text(BUGGY_TRAIN)
    (tmp_path / "ok.py").write_text("print('ok ran')\n")
    first, then = ("buggy.py", "ok.py") if where == "before" else ("ok.py", "buggy.py")
    (tmp_path / "t.py").write_text(
        f"import os, runpy, sys\nrunpy.run_path({first!r})\n"
        f"os.execv(sys.executable, [sys.executable, {then!r}])\n")
    python = subprocess.run([sys.executable, "t.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    done = gradguard_run(tmp_path, "--mode", "record", "--report", "r.json", "t.py")
    assert python.returncode == 0
    assert done.returncode == 1, done.stderr
    assert done.stdout == python.stdout
    assert codes(tmp_path / "r.json") == ["GG101"]
    assert done.stderr.count("gradguard run: Found 1 finding (1 error).") == 1, done.stderr


def test_os_exec_in_a_child_python_keeps_both_programs_findings(tmp_path):
    (tmp_path / "buggy.py").write_text(BUGGY_TRAIN)
    (tmp_path / "buggy2.py").write_text("# another program, another line\n" + BUGGY_TRAIN)
    (tmp_path / "train.py").write_text(
        "import os, runpy, sys\nrunpy.run_path('buggy.py')\nos.execv(sys.executable, [sys.executable, 'buggy2.py'])\n")
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    done = gradguard_run(tmp_path, "--mode", "record", "--report", "r.json", "launcher.py")
    assert done.returncode == 1, done.stderr
    [child] = child_reports(tmp_path)
    found = json.loads(child.read_text())
    assert sorted((os.path.basename(d["path"]), d["line"]) for d in found) == [("buggy.py", 6), ("buggy2.py", 7)]
