"""``gradguard run``: runs a script as ``python`` would, under the watch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradguard.cli import main
from gradguard.findings import JSON_KEYS

from _findings import codes

SCRIPTS = Path(__file__).parent / "watch_scripts"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_runs_like_python(tmp_path, capsys):
    write(tmp_path, "helper.py", "VALUE = 41\n")
    script = write(
        tmp_path,
        "train.py",
        "import sys\nfrom helper import VALUE\n"
        "print('name', __name__, 'argv', sys.argv[1:], 'value', VALUE + 1)\n"
        "if __name__ == '__main__':\n    sys.exit(int(sys.argv[2]))\n",
    )
    argv_before, path_before = list(sys.argv), list(sys.path)
    code = main(["run", str(script), "--epochs", "3"])
    out, err = capsys.readouterr()
    assert "name __main__ argv ['--epochs', '3'] value 42" in out
    assert code == 3  # the script's own exit code
    assert "No findings." in err
    assert sys.argv == argv_before and sys.path == path_before


def test_exit_codes(tmp_path, capsys):
    assert main(["run", str(write(tmp_path, "ok.py", "x = 1\n"))]) == 0
    assert main(["run", str(write(tmp_path, "msg.py", "import sys\nsys.exit('bye')\n"))]) == 1
    assert main(["run", str(write(tmp_path, "crash.py", "raise ValueError('boom')\n"))]) == 1
    err = capsys.readouterr().err
    assert "bye" in err and "ValueError: boom" in err


def test_error_finding_exit_1_and_report(tmp_path, capsys):
    report = tmp_path / "out" / "r.json"
    report.parent.mkdir()
    code = main(["run", "--mode", "record", "--report", str(report), str(SCRIPTS / "gg102_bad.py")])
    err = capsys.readouterr().err
    assert code == 1
    data = json.loads(report.read_text())
    assert [d["code"] for d in data] == ["GG102"] and list(data[0]) == list(JSON_KEYS)
    assert "gg102_bad.py:11: GG102" in err and "Found 1 finding (1 error)." in err
    assert "gradguard rule GG102" in err and str(report) in err  # the fix and the full message one step away


def test_warning_finding_keeps_the_scripts_exit_code(tmp_path):
    report = tmp_path / "r.json"
    assert main(["run", "--mode", "record", "--report", str(report), str(SCRIPTS / "gg104_bad.py")]) == 0
    assert [d["code"] for d in json.loads(report.read_text())] == ["GG104"]


def test_raise_mode_stops_the_script(tmp_path, capsys):
    script = write(
        tmp_path,
        "t.py",
        "import torch\nm = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for i in range(3):\n    m(torch.ones(1, 2)).sum().backward()\n    o.step()\n    print('stepped', i)\n",
    )
    code = main(["run", "--mode", "raise", str(script)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "stepped 0" in out and "stepped 1" not in out  # stopped before the second (stale) step
    assert "stopped at" in err and "GG101" in err


def test_usage_errors(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.py")]) == 2
    assert capsys.readouterr().err.startswith("gradguard run: error: no such script")
    assert main(["run", "--mode", "loud", "x.py"]) == 2
    assert main(["run", "--ignore", "GG999", str(write(tmp_path, "a.py", ""))]) == 2
    assert "GG999" in capsys.readouterr().err
    assert main(["run"]) == 2
    assert capsys.readouterr().err == (
        "gradguard run: error: a script is required: gradguard run [options] (SCRIPT | -m MODULE) [ARGS ...]\n")
    assert main(["run", "-m"]) == 2
    assert main(["run", "-m", "no_such_module_here"]) == 2
    assert "gradguard run: error: no module named 'no_such_module_here'" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["run", str(tmp_path / "empty")]) == 2
    assert "without __main__.py" in capsys.readouterr().err


def test_dash_m_runs_a_module_from_the_current_folder(tmp_path, capsys, monkeypatch):
    (tmp_path / "mypkg").mkdir()
    write(tmp_path / "mypkg", "__init__.py", "")
    write(tmp_path / "mypkg", "train.py",
          "import sys\nprint('name', __name__, 'argv', sys.argv[1:], 'file', sys.argv[0].endswith('train.py'))\n"
          "sys.exit(4)\n")
    monkeypatch.chdir(tmp_path)
    path_before = list(sys.path)
    assert main(["run", "--mode", "record", "-m", "mypkg.train", "--epochs", "1", "-m", "x"]) == 4
    assert "name __main__ argv ['--epochs', '1', '-m', 'x'] file True" in capsys.readouterr().out
    assert sys.path == path_before and "mypkg.train" not in sys.modules


def test_a_folder_with_main(tmp_path, capsys):
    (tmp_path / "app").mkdir()
    write(tmp_path / "app", "app_helper.py", "X = 5\n")
    write(tmp_path / "app", "__main__.py", "import sys\nfrom app_helper import X\nprint('x', X, sys.argv[1:])\n")
    assert main(["run", str(tmp_path / "app"), "a"]) == 0
    assert "x 5 ['a']" in capsys.readouterr().out


def test_output_path_checked_before_the_run(tmp_path, capsys):
    marker = tmp_path / "ran"
    script = write(tmp_path, "t.py", f"open({str(marker)!r}, 'w').close()\n")
    for bad in (tmp_path / "no" / "such" / "r.json", tmp_path):
        assert main(["run", "--report", str(bad), str(script)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gradguard run: error: --report ") and err.count("\n") == 1
        assert not marker.exists()


def test_report_that_cannot_be_written_at_the_end_goes_to_stderr(capsys):
    if not Path("/dev/full").exists():  # pragma: no cover - Linux has it
        pytest.skip("needs /dev/full to simulate a full disk")
    code = main(["run", "--mode", "record", "--report", "/dev/full", str(SCRIPTS / "gg102_bad.py")])
    err = capsys.readouterr().err
    assert code == 1
    assert "could not write the report to /dev/full: No space left on device" in err
    start = err.index("[", err.index("/dev/full"))
    data, _ = json.JSONDecoder().raw_decode(err, start)
    assert [d["code"] for d in data] == ["GG102"] and data[0]["line"] == 11


@pytest.mark.slow  # runs python in a subprocess
def test_traceback_shows_the_users_frames_only(tmp_path):
    """As python prints it: absolute paths, the script's frames, no gradguard or runpy frames."""
    write(tmp_path, "lib.py", "def f():\n    raise ValueError('boom')\n")
    write(tmp_path, "crash.py", "from lib import f\nf()\n")
    ours = subprocess.run([sys.executable, "-m", "gradguard", "run", "crash.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    python = subprocess.run([sys.executable, "crash.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert ours.returncode == python.returncode == 1
    assert ours.stderr.startswith(python.stderr)  # then the summary
    assert f'File "{tmp_path / "crash.py"}", line 2' in ours.stderr
    assert "runpy" not in ours.stderr and "gradguard/cli" not in ours.stderr


def test_no_progress_turns_off_tqdm_in_the_script(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    script = write(tmp_path, "t.py", "import os\nprint('tqdm off:', os.environ.get('TQDM_DISABLE'))\n")
    assert main(["run", "--no-progress", str(script)]) == 0
    assert "tqdm off: 1" in capsys.readouterr().out
    assert "TQDM_DISABLE" not in __import__("os").environ


def test_report_path_per_rank():
    from gradguard.cli.run import report_path

    assert report_path("findings.json", 0, 1) == "findings.json"
    assert report_path("out/findings.json", 0, 4) == "out/findings.json"
    assert report_path("out/findings.json", 3, 4) == "out/findings.rank3.json"


@pytest.mark.slow
def test_torchrun_two_ranks_one_report_each(tmp_path):
    """A real 2-process launch on CPU: each rank's findings in its own file, the rank in each summary."""
    write(tmp_path, "train.py", (
        "import os, torch\n"
        "m = torch.nn.Linear(2, 1)\n"
        "o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    if os.environ['RANK'] == '0':\n"
        "        o.zero_grad()\n"
        "    m(torch.ones(1, 2)).sum().backward()\n"
        "    o.step()\n"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "0",
           "-m", "gradguard", "run", "--mode", "record", "--report", "findings.json", "train.py"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, done.stderr  # rank 1 has an error-severity finding
    assert json.loads((tmp_path / "findings.json").read_text()) == []
    assert [d["code"] for d in json.loads((tmp_path / "findings.rank1.json").read_text())] == ["GG101"]
    assert "gradguard run [rank 0/2]: No findings." in done.stderr
    assert "gradguard run [rank 1/2]: Found 1 finding (1 error)." in done.stderr


def test_help_has_an_example(capsys):
    assert main(["run", "--help"]) == 0
    assert "examples:\n  gradguard run --mode raise" in capsys.readouterr().out


@pytest.mark.slow
def test_console_script_in_a_subprocess(tmp_path):
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gradguard", "run", "--report", str(report), str(SCRIPTS / "gg101_bad.py")],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert "GG101" in proc.stderr and "GradientBugWarning" in proc.stderr  # the default mode warns as it goes
    assert [d["code"] for d in json.loads(report.read_text())] == ["GG101"]


# ---------------------------------------------------------------- the whole program: threads, child processes
BUGGY_LOOP = (
    "def train():\n"
    "    import torch\n"
    "    m = torch.nn.Linear(2, 1)\n"
    "    o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
    "    for _ in range(3):\n"
    "        m(torch.ones(1, 2)).sum().backward()\n"
    "        o.step()  # no zero_grad: GG101\n"
)


def test_a_buggy_loop_in_a_thread_is_watched(tmp_path, capsys):
    script = write(tmp_path, "t.py", BUGGY_LOOP + (
        "import threading\n"
        "class Trainer(threading.Thread):  # a subclass overriding run() is watched too\n"
        "    def run(self):\n        train()\n"
        "t = threading.Thread(target=train); t.start(); t.join()\n"
        "Trainer().start()  # not joined: python waits for it at exit, so does gradguard run\n"))
    report = tmp_path / "r.json"
    assert main(["run", "--mode", "record", "--report", str(report), str(script)]) == 1
    assert codes(report) == ["GG101"]  # once per code and line, whichever thread made it
    assert "Found 1 finding (1 error)." in capsys.readouterr().err
    import threading
    assert threading.Thread.start.__module__ == "threading"  # everything gradguard run patched is restored


@pytest.mark.slow
@pytest.mark.parametrize("how", ["fork", "spawn", "forkserver", "torch.multiprocessing.spawn"])
def test_a_buggy_loop_in_a_child_process_is_watched(tmp_path, how):
    """Each child's findings in its own report (FILE.pidN.json) and summary; the run exits 1 for them."""
    start = ("import torch.multiprocessing as tmp\n    tmp.spawn(lambda_free, nprocs=1)\n"
             if how == "torch.multiprocessing.spawn" else
             f"import multiprocessing as mp\n    p = mp.get_context({how!r}).Process(target=train)\n"
             "    p.start(); p.join(); assert p.exitcode == 0\n")
    write(tmp_path, "t.py", BUGGY_LOOP + "def lambda_free(rank):\n    train()\n"
          "if __name__ == '__main__':\n    " + start)
    done = subprocess.run([sys.executable, "-m", "gradguard", "run", "--mode", "record", "--report", "findings.json",
                           "t.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert codes(tmp_path / "findings.json") == []  # the parent itself trained nothing
    children = sorted(tmp_path.glob("findings.pid*.json"))
    assert len(children) == 1 and codes(children[0]) == ["GG101"], done.stderr
    pid = children[0].name.split(".")[1][3:]
    assert f"gradguard run [pid {pid}]: Found 1 finding (1 error)." in done.stderr
    assert "t.py:7: GG101" in done.stderr
    assert not list(tmp_path.glob("*.tmp"))


def test_a_relative_report_is_resolved_before_the_script_changes_folder(tmp_path, capsys, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    script = write(tmp_path, "t.py", BUGGY_LOOP + "import os\nos.chdir('elsewhere')\ntrain()\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--mode", "record", "--report", "r.json", str(script)]) == 1
    assert codes(tmp_path / "r.json") == ["GG101"]
    assert not (tmp_path / "elsewhere" / "r.json").exists()
    assert "r.json has the full messages" in capsys.readouterr().err


@pytest.mark.slow
def test_os_exit_keeps_the_findings_and_the_exit_code(tmp_path):
    write(tmp_path, "t.py", BUGGY_LOOP + "import os\ntrain()\nos._exit(0)\n")
    done = subprocess.run([sys.executable, "-m", "gradguard", "run", "--mode", "record", "--report", "r.json", "t.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr  # an error finding, as for sys.exit(0)
    assert codes(tmp_path / "r.json") == ["GG101"]
    assert "gradguard run: Found 1 finding (1 error)." in done.stderr


@pytest.mark.slow
def test_torchrun_one_rank_os_exit_loses_no_rank_s_report(tmp_path):
    """Rank 1 ends with os._exit(0); torchrun then stops rank 0 (still running): both reports hold their findings."""
    write(tmp_path, "train.py", BUGGY_LOOP + (
        "import os, time\ntrain()\n"
        "if os.environ['RANK'] == '1':\n"
        "    while not os.path.exists('rank0_trained'):\n        time.sleep(0.1)\n"
        "    os._exit(0)\n"
        "open('rank0_trained', 'w').close()\n"
        "time.sleep(120)  # rank 0 is still busy when torchrun stops it\n"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "0",
           "-m", "gradguard", "run", "--mode", "record", "--report", "findings.json", "train.py"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, done.stderr
    assert codes(tmp_path / "findings.json") == ["GG101"]
    assert codes(tmp_path / "findings.rank1.json") == ["GG101"]
    assert "gradguard run [rank 1/2]: Found 1 finding (1 error)." in done.stderr


def test_the_script_gets_its_arguments_exactly_as_from_python(tmp_path, capsys, monkeypatch):
    write(tmp_path, "s.py", "import sys\nprint('argv', sys.argv)\n")
    monkeypatch.chdir(tmp_path)
    for args in (["--", "--lr", "3"], ["x", "--", "y"], ["--mode", "record"], []):
        assert main(["run", "s.py", *args]) == 0
        assert f"argv {['s.py', *args]}" in capsys.readouterr().out  # argv[0] as typed, `--` kept
    assert main(["run", "--mode", "record", "./s.py", "--report", "x"]) == 0
    assert "argv ['./s.py', '--report', 'x']" in capsys.readouterr().out


STALE = (
    "import os, sys, torch\n"
    "model = torch.nn.Linear(2, 1)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "if len(sys.argv) > 1:\n"
    "    os.chdir(sys.argv[1])\n"
    "for x in [torch.ones(1, 2)] * 3:\n"
    "    model(x).sum().backward()\n"
    "    optimizer.step()\n"
)


def test_paths_print_as_lint_prints_them(tmp_path, capsys, monkeypatch):
    """Below the current folder relative (as `gradguard lint` shows them), elsewhere absolute, whatever
    folder the script changes to and however it was named; the report (--report) too, as `gradguard lint
    --format json` writes them."""
    from gradguard.findings import short_path

    (tmp_path / "proj" / "src").mkdir(parents=True)
    script = write(tmp_path / "proj" / "src", "train.py", STALE)
    monkeypatch.chdir(tmp_path / "proj")
    report = tmp_path / "r.json"
    for named in ("src/train.py", "./src/train.py", str(script)):
        assert main(["run", "--mode", "record", "--report", str(report), named, str(tmp_path)]) == 1
        monkeypatch.chdir(tmp_path / "proj")  # the script moved away
        lines = [line for line in capsys.readouterr().err.splitlines() if ": GG101 " in line]
        assert [line.split(": GG101 ")[0] for line in lines] == ["src/train.py:8"], (named, lines)
        if not os.path.isabs(named):  # the linter names the same file the same way (an absolute one: as given)
            assert main(["lint", "--select", "GG101", named]) == 1
            assert capsys.readouterr().out.startswith("src/train.py:8:5: GG101")
        assert json.loads(report.read_text())[0]["path"] == "src/train.py", named
        assert main(["lint", "--select", "GG101", "--format", "json", named]) == 1
        assert [d["path"] for d in json.loads(capsys.readouterr().out)] == [
            "src/train.py" if not os.path.isabs(named) else named]
        # the report's own path as typed below the current folder, not made absolute
        main(["run", "--mode", "record", "--report", "r2.json", named, str(tmp_path)])
        monkeypatch.chdir(tmp_path / "proj")
        assert "; r2.json has the full messages" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path / "proj" / "src")
    assert main(["run", "--mode", "raise", str(script)]) == 1
    err = capsys.readouterr().err
    assert "gradguard run: stopped at train.py:8: GG101 stale-gradient" in err and "\ntrain.py:8: GG101" in err
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    main(["run", "--mode", "record", "--report", str(report), str(script)])
    assert f"\n{script}:8: GG101" in capsys.readouterr().err  # outside the current folder: absolute
    assert json.loads(report.read_text())[0]["path"] == str(script)  # in the report too
    assert short_path(str(script), str(other)) == str(script)
