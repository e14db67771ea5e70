"""``gradguard run``: runs a script as ``python`` would, under the watch."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradguard.cli import main
from gradguard.findings import JSON_KEYS

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
    assert "no such script" in capsys.readouterr().err
    assert main(["run", "--mode", "loud", "x.py"]) == 2
    assert main(["run", "--ignore", "GG999", str(write(tmp_path, "a.py", ""))]) == 2
    assert "GG999" in capsys.readouterr().err
    assert main(["run"]) == 2


def test_help_has_an_example(capsys):
    assert main(["run", "--help"]) == 0
    assert "example: gradguard run" in capsys.readouterr().out


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
