"""Every file gradguard writes is written where it was asked, and nowhere else.

Someone who can write in the folder of a report, of a linted file or of the
demo's output (a shared checkout, a CI workspace) plants a symbolic link, a pipe
or a folder at each temporary path a command used or could use. The command must
still write its target, and change no other file: not the link's victim, not the
planted things themselves.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gradguard._files import replace_file, replacing
from gradguard.cli import main

from _findings import codes

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links, pipes and os.fork as on POSIX")
ROOT = Path(__file__).resolve().parent.parent
KINDS = ("link", "fifo", "folder")
VICTIM_TEXT = "the user's own file\n"
STALE = """\
import torch


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x, y)
        loss.backward()
        optimizer.step()
"""
BUGGY_LOOP = (
    "def train():\n"
    "    import torch\n"
    "    m = torch.nn.Linear(2, 1)\n"
    "    o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
    "    for _ in range(3):\n"
    "        m(torch.ones(1, 2)).sum().backward()\n"
    "        o.step()  # no zero_grad: GG101\n"
)


def victim(tmp_path) -> Path:
    """A file of the user's elsewhere, owner-only, that nothing may touch."""
    folder = tmp_path / "elsewhere"
    folder.mkdir(exist_ok=True)
    path = folder / "victim.txt"
    path.write_text(VICTIM_TEXT)
    path.chmod(0o600)
    return path


def plant(path: Path, kind: str, target: Path) -> None:
    if kind == "link":
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def snapshot(folder: Path) -> dict:
    """Everything under ``folder`` as it is (links not followed): kind, content or link target, mode."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            what = ("link", os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            what = ("file", path.read_bytes())
        else:
            what = ("fifo" if stat.S_ISFIFO(st.st_mode) else "folder", None)
        out[str(path.relative_to(folder))] = (what, stat.S_IMODE(st.st_mode))
    return out


def changed(before: dict, after: dict) -> set:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


# ---------------------------------------------------------------- the helper itself
def test_the_new_file_is_owner_only_until_it_replaces_the_target(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old\n")
    target.chmod(0o640)
    with replacing(target) as fh:
        assert stat.S_IMODE(os.fstat(fh.fileno()).st_mode) == 0o600
        temporary = [p for p in tmp_path.iterdir() if p != target]
        assert len(temporary) == 1 and temporary[0].name.startswith(".out.json.")
        assert target.read_text() == "old\n"  # a reader sees the old file, never half the new one
        fh.write(b"new\n")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the target keeps its mode
    assert sorted(tmp_path.iterdir()) == [target]


def test_a_new_target_gets_the_mode_open_would_give(tmp_path):
    old = os.umask(0o027)
    try:
        replace_file(tmp_path / "new.txt", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640


def test_a_failed_write_leaves_the_target_and_no_temporary_file(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("kept\n")
    with pytest.raises(RuntimeError):
        with replacing(target) as fh:
            fh.write(b"half")
            raise RuntimeError("disk gone")
    assert target.read_text() == "kept\n" and sorted(tmp_path.iterdir()) == [target]
    with pytest.raises(IsADirectoryError):
        replace_file(tmp_path, b"x")


def test_a_link_at_the_target_is_followed_only_when_asked(tmp_path):
    real = victim(tmp_path)
    link = tmp_path / "named.txt"
    link.symlink_to(real)
    replace_file(link, b"asked for\n")  # the user named the link: its target is written, the link stays
    assert link.is_symlink() and real.read_text() == "asked for\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    replace_file(link, b"derived\n", follow_links=False)  # a name gradguard made up: the link is replaced
    assert not link.is_symlink() and link.read_text() == "derived\n" and real.read_text() == "asked for\n"


# ---------------------------------------------------------------- gradguard run --report
@pytest.mark.parametrize("kind", KINDS)
def test_run_report_never_writes_through_a_planted_temporary_path(tmp_path, kind, capsys):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "t.py"
    script.write_text(BUGGY_LOOP + "train()\n")
    report = out / "r.json"
    plant(out / f"r.json.{os.getpid()}.tmp", kind, victim(tmp_path))  # the name the report went through
    before = snapshot(tmp_path)
    assert main(["run", "--mode", "record", "--report", str(report), str(script)]) == 1
    assert codes(report) == ["GG101"]
    assert changed(before, snapshot(tmp_path)) == {"out/r.json"}
    assert "Found 1 finding (1 error)." in capsys.readouterr().err


@pytest.mark.slow  # python in a subprocess
def test_a_raw_fork_childs_report_never_follows_a_planted_link(tmp_path):
    """A child's report has a name gradguard made up (FILE.pidN.json): a link planted there, or at
    the temporary name it went through, is not followed."""
    target = victim(tmp_path)
    (tmp_path / "t.py").write_text(BUGGY_LOOP + (
        "import os, sys\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    me = os.getpid()\n"
        f"    for name in (f'r.pid{{me}}.json', f'r.pid{{me}}.json.{{me}}.tmp'):\n"
        f"        os.symlink({str(target)!r}, name)\n"
        "    train()\n"
        "    sys.exit(0)\n"
        "os.waitpid(pid, 0)\n"))
    done = subprocess.run([sys.executable, "-m", "gradguard", "run", "--mode", "record", "--report", "r.json", "t.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert target.read_text() == VICTIM_TEXT and stat.S_IMODE(target.stat().st_mode) == 0o600
    child = [p for p in tmp_path.glob("r.pid*.json") if not p.name.endswith(".tmp")]
    assert len(child) == 1 and not child[0].is_symlink() and codes(child[0]) == ["GG101"], done.stderr
    assert codes(tmp_path / "r.json") == []  # the parent trained nothing
    pid = child[0].name[len("r.pid"):-len(".json")]
    assert os.readlink(tmp_path / f"r.pid{pid}.json.{pid}.tmp") == str(target)  # left as it was


# ---------------------------------------------------------------- gradguard lint --fix
@pytest.mark.slow  # python in a subprocess
@pytest.mark.parametrize("kind", KINDS)
def test_lint_fix_never_writes_through_a_planted_temporary_path(tmp_path, kind):
    work = tmp_path / "work"
    work.mkdir()
    path = work / "train.py"
    path.write_text(STALE)
    plant(work / "train.py.gradguard-fix.tmp", kind, victim(tmp_path))
    before = snapshot(tmp_path)
    done = subprocess.run([sys.executable, "-m", "gradguard", "lint", "--no-config", "--fix", "train.py"],
                          cwd=work, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "optimizer.zero_grad(set_to_none=True)" in path.read_text()
    assert changed(before, snapshot(tmp_path)) == {"work/train.py"}


# ---------------------------------------------------------------- gradguard plan --plot, gradguard demo
@pytest.mark.slow
def test_plan_plot_writes_its_target_and_nothing_else(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    real = victim(tmp_path)
    link = tmp_path / "plan.png"
    link.symlink_to(real)  # the named path is a link: as before, its target gets the plot
    before = snapshot(tmp_path)
    assert main(["plan", "gradguard.demo.model:plan_factory", "--batch-size", "32", "--budget", "2MiB",
                 "--plot", str(link), "--no-progress"]) == 0
    assert changed(before, snapshot(tmp_path)) == {"elsewhere/victim.txt"}
    assert real.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and stat.S_IMODE(real.stat().st_mode) == 0o600
    capsys.readouterr()


@pytest.mark.parametrize("kind", KINDS)
def test_the_demos_write_test_never_follows_a_planted_link(tmp_path, kind):
    from gradguard.demo import check_out_dir

    out = tmp_path / "demo"
    out.mkdir()
    plant(out / ".gradguard-demo-write-test", kind, victim(tmp_path))  # the name the probe used
    before = snapshot(tmp_path)
    check_out_dir(out)
    assert changed(before, snapshot(tmp_path)) == set()


@pytest.mark.slow  # the whole demo
def test_the_demo_replaces_links_planted_at_its_outputs(tmp_path, capsys):
    """The demo's file names are its own, inside the folder it was given: a link there is replaced."""
    from gradguard.demo import PLOTS

    target = victim(tmp_path)
    out = tmp_path / "demo"
    out.mkdir()
    for name in ("results.json", *PLOTS):
        (out / name).symlink_to(target)
    assert main(["demo", "--out", str(out), "--steps", "1", "--no-progress"]) == 0
    capsys.readouterr()
    assert target.read_text() == VICTIM_TEXT and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not any((out / name).is_symlink() for name in ("results.json", *PLOTS))
    assert json.loads((out / "results.json").read_text())["training"]["steps"] == 1
    assert sorted(p.name for p in out.iterdir()) == sorted(("results.json", *PLOTS))
