"""`gradguard demo` end to end, as a user runs it (a short run), and its command-line checks."""

import json
import re

import pytest
import torch

from gradguard.cli import main


@pytest.mark.slow  # the whole demo
def test_demo_runs_and_shows_exactness_on_real_text(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--steps", "6", "--no-progress"]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert captured.err == ""  # --no-progress: nothing on stderr

    # Part 1: the seed semantics.
    assert "[[2.0, 2.0, 2.0], [4.0, 4.0, 4.0], [6.0, 6.0, 6.0]]" in text
    # Part 2 names the frameworks' scheme as theirs.
    assert "what HF Accelerate," in text and "PyTorch Lightning and DeepSpeed do" in text

    for name in ("loss_curves.png", "weight_distance.png", "gradient_error.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((out / "results.json").read_text())
    assert results["training"] == {"steps": 6, "optimizer": "AdamW(lr=0.003)", "dtype": "float64"}
    curves = results["curves"]
    assert curves["eval_steps"][0] == 0 and curves["eval_steps"][-1] == 6  # --steps followed exactly

    # The reference is plain PyTorch's full batch, float64. gradguard stays at rounding level;
    # divide-by-K does not (the negative control: the same measurement that would catch an inexact gradguard).
    for k in (4, 16):
        exact = curves["weight_distance"][f"gradguard, K={k}"]
        naive = curves["weight_distance"][f"divide-by-K, K={k}"]
        assert len(exact) == len(naive) == 6
        assert max(exact) < 1e-10
        assert naive[-1] > 1e-4
    assert max(curves["weight_distance"]["full batch, reordered"]) < 1e-10
    for row in results["table"]:
        assert row["gradient_error"]["gradguard"] < 1e-12 < 1e-3 < row["gradient_error"]["divide-by-K"]
        assert abs(row["final_heldout_loss_minus_full_batch"]["gradguard"]) < 1e-10
        assert abs(row["final_heldout_loss_minus_full_batch"]["divide-by-K"]) > 1e-7
    assert [row["K"] for row in results["table"]] == [4, 16]
    sweep = results["gradient_error_sweep"]
    assert sweep["K"] == [2, 4, 8, 16]
    assert all(e < 1e-12 for e in sweep["gradguard"]) and all(e > 1e-3 for e in sweep["divide-by-K"])
    # The printed table carries the same figures.
    row4 = re.search(r"^  4 +\(4 paragraphs\) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+) +(\S+)$", text, flags=re.M)
    assert row4 and float(row4.group(1)) == pytest.approx(results["table"][0]["gradient_error"]["divide-by-K"], rel=0.06)

    # Parts 3 and 4: the watch and the linter both catch the bundled loop's bugs.
    watch_part, lint_part = text.split("== The run-time watch")[1].split("== The linter")
    for code in ("GG101", "GG102", "GG103", "GG104"):
        assert code in watch_part and code in lint_part
    assert "GG201" in lint_part
    assert results["watch"]["codes"] == ["GG101", "GG102", "GG103", "GG104"]


@pytest.mark.parametrize("steps", ["0", "-1", "2.5", "ten", ""])
def test_steps_must_be_a_positive_integer(tmp_path, capsys, steps):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--steps", steps]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "--steps must be a positive integer" in lines[0] and repr(steps) in lines[0]
    assert not out.exists()  # checked before any work


def test_unwritable_out_is_refused_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["demo", "--out", str(blocker / "demo"), "--steps", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # not even part 1 ran
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err
    assert "cannot write the demo's output folder" in lines[0] and "--out" in lines[0]


def test_padding_changes_nothing():
    """The demo's premise, checked against separately computed unpadded sequences (float64)."""
    from gradguard.demo.text import ByteLM, collate, mean_loss, token_count

    torch.manual_seed(0)
    model = ByteLM(dim=16, layers=1, max_len=32).double()
    seqs = [b"short one", b"a much longer paragraph of text", b"mid-size text"]
    with torch.no_grad():
        padded = mean_loss(model, collate(seqs))
        alone = [(mean_loss(model, collate([s])), token_count(collate([s]))) for s in seqs]
    by_tokens = sum(loss * n for loss, n in alone) / sum(n for _, n in alone)
    by_sequence = sum(loss for loss, _ in alone) / len(alone)
    assert float(padded) == pytest.approx(float(by_tokens), rel=1e-13)
    assert abs(float(padded) - float(by_sequence)) > 1e-4  # the weighting matters: the control
