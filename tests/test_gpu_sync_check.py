"""benchmarks/gpu_sync_check.py: skips cleanly without CUDA; on a GPU, the watch and the Accumulator add no sync."""

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_sync_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_sync_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="the skip path needs a machine without CUDA")
def test_skips_cleanly_without_cuda(capsys):
    assert _load().main(["--rounds", "1", "--steps", "1"]) == 0
    assert "nothing measured" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_no_sync_added_per_microbatch(tmp_path):
    import json

    out = tmp_path / "r.json"
    assert _load().main(["--rounds", "1", "--steps", "3", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    for cond in ("watch", "accumulator", "accumulator+watch"):
        assert results[cond]["added_syncs_per_microbatch"] <= 0, (cond, results[cond])
    # At the window's end: the watch adds none, the Accumulator its one read of the window's losses.
    assert results["watch"]["added_syncs_per_window_end"] <= 0, results["watch"]
    for cond in ("accumulator", "accumulator+watch"):
        assert results[cond]["added_syncs_per_window_end"] <= 1, (cond, results[cond])
