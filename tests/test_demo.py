"""`gradguard demo` end to end, as a user runs it (a short run)."""

import re

from gradguard.cli import main


def test_demo_runs_and_writes_its_plots(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--steps", "12"]) == 0
    text = capsys.readouterr().out

    # Part 1: the seed semantics.
    assert "[[2.0, 2.0, 2.0], [4.0, 4.0, 4.0], [6.0, 6.0, 6.0]]" in text
    # Part 2: the sweep table: divide-by-N measurably wrong, gradguard exact, at every N.
    rows = re.findall(r"^\s+(\d+)\s+([\d.e+-]+)\s+([\d.e+-]+)$", text, flags=re.M)
    assert [int(n) for n, _, _ in rows] == [2, 4, 8, 16, 32]
    for _, naive, exact in rows:
        assert float(naive) > 1e-3 and float(exact) < 1e-12
    assert re.search(r"^\s+gradguard\s+[\d.e+-]+\s+[\d.e+-]+\s+[\d.]+", text, flags=re.M)
    # Parts 3 and 4: the watch and the linter both catch the bundled loop's bugs.
    watch_part, lint_part = text.split("== The run-time watch")[1].split("== The linter")
    for code in ("GG101", "GG102", "GG103", "GG104"):
        assert code in watch_part and code in lint_part
    assert "GG201" in lint_part

    for name in ("loss_curves.png", "gradient_error.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
