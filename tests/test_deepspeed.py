"""gg.Accumulator(engine, steps) on real DeepSpeed engines: ZeRO stages 0-3, 1 and 2 processes (gloo, CPU).

Two torchrun launches run every stage (tests/_deepspeed_helpers.py); each result is
compared with the plain-PyTorch float64 full-batch reference built there, and each
exactness check has a control beside it: DeepSpeed's own accumulation on the same
data must be measurably wrong. DeepSpeed trains in float32, so "exact" means equal
to float32 round-off (relative 1e-5 of the largest parameter).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

import _deepspeed_helpers as d
import _dist_helpers as h

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed"),
]
STAGES = (0, 1, 2, 3)
REL = 1e-5  # float32 round-off over a few SGD steps with momentum
WRONG = 1e-2  # the engine's own accumulation is off by far more than this


def _launch(tmp_path_factory, nproc: int) -> dict:
    out = tmp_path_factory.mktemp(f"deepspeed{nproc}")
    src = os.path.join(os.path.dirname(os.path.dirname(__file__)), "src")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
           "--master-port", str(h.free_port()), d.__file__, str(out), *map(str, STAGES)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    runs = {(s, r): torch.load(out / f"stage{s}-rank{r}.pt", weights_only=False) for s in STAGES for r in range(nproc)}
    runs.update({("accelerate", r): torch.load(out / f"accelerate-rank{r}.pt", weights_only=False) for r in range(nproc)})
    return runs


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return _launch(tmp_path_factory, 2)


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    return _launch(tmp_path_factory, 1)


def _rel(got, want) -> float:
    """Largest relative difference over windows and parameters (relative to the parameter's largest entry)."""
    return max(((g.double() - w).abs().max() / w.abs().max()).item()
               for gs, ws in zip(got, want) for g, w in zip(gs, ws))


@pytest.mark.parametrize("stage", STAGES)
def test_two_processes_equal_full_batch_and_engine_default_does_not(two, stage):
    ref = d.reference(2, d.schedule_for(2))
    naive_ref = d.reference(2, h.NAIVE_SCHEDULE)
    for rank in range(2):
        out = two[stage, rank]
        # One engine.step() per window, partial windows included.
        assert len(out["exact"]["params"]) == len(ref["params"]) == out["exact"]["optimizer_steps"] == out["exact"]["engine_steps"]
        assert _rel(out["exact"]["params"], ref["params"]) < REL
        for got, want in zip(out["exact"]["losses"], ref["losses"]):
            assert got == pytest.approx(want, rel=REL)
        # The control, same data: DeepSpeed's mean of means misses the full-batch update; the Accumulator does not.
        assert _rel(out["naive"]["params"], naive_ref["params"]) > WRONG
        assert _rel(out["gradguard"]["params"], naive_ref["params"]) < REL


@pytest.mark.parametrize("stage", STAGES)
def test_one_process_equals_full_batch_and_engine_default_does_not(one, stage):
    out = one[stage, 0]
    assert _rel(out["exact"]["params"], d.reference(1, d.schedule_for(1))["params"]) < REL
    assert _rel(out["naive"]["params"], d.reference(1, h.NAIVE_SCHEDULE)["params"]) > WRONG


@pytest.mark.parametrize("stage", STAGES)
def test_one_process_window_of_empty_micro_batches_is_dropped_and_the_engine_trains_on(one, stage):
    # Before, ZeRO 1/2 raised DeepSpeed's own IndexError / KeyError at the empty window's end (its
    # boundary reduction over nothing), and every later backward() was refused.
    out = one[stage, 0]["empty_window"]
    assert out["error"] == "" and out["stepped"] == [False, True, True] and out["skipped"] == 1
    assert out["engine_steps"] == 2
    ref = d.reference(1, d.EMPTY_FIRST_SCHEDULE, windows=[1, 2])["params"]
    assert _rel(out["params"][1:], ref) < REL
    assert _rel(out["params"][:1], [[p.detach().double() for p in d.make_model().parameters()]]) == 0  # nothing moved


# Where each stray call can reach the window: stages 0 and 1 keep it in .grad (every call empties or edits it);
# stage 3 in partitions that only the ZeRO optimizer's zero_grad() empties; stage 2 moves each pass out of reach.
REACHES = {0: set(d.STRAY_KINDS), 1: set(d.STRAY_KINDS), 2: set(), 3: {"optimizer.zero_grad"}}


@pytest.mark.parametrize("nproc", [1, 2])
@pytest.mark.parametrize("stage", STAGES)
def test_a_stray_zero_grad_or_edit_is_refused_on_every_rank_or_changes_nothing(one, two, stage, nproc):
    """The call on the last rank at the top of every iteration: refused on every rank before any update where it
    reaches the window, else every window exact; the same loop without it is exact (the control)."""
    runs = one if nproc == 1 else two
    ref = d.reference(nproc, d.schedule_for(nproc), windows=range(3))["params"]
    for rank in range(nproc):
        stray = runs[stage, rank]["stray"]
        control = stray[None]
        assert control["errors"] == [] and control["steps"] == 3
        assert _rel([control["params"]], [ref[-1]]) < REL
        for kind in d.STRAY_KINDS:
            out = stray[kind]
            if kind in REACHES[stage]:
                assert [w for w, _ in out["errors"]] == [0, 1, 2], (kind, out["errors"])
                assert (out["steps"], out["skipped"]) == (0, 3)
                assert all(torch.equal(a, b) for a, b in zip(out["params"], out["init"]))  # nothing moved
                here = rank == nproc - 1
                for _, message in out["errors"]:
                    assert ("Nothing was applied" in message) if here else ("on another rank" in message), message
            else:
                assert out["errors"] == [] and out["steps"] == 3, (kind, out["errors"])
                assert _rel([out["params"]], [ref[-1]]) < REL, kind


@pytest.mark.parametrize("stage", STAGES)
def test_engine_clips_the_exact_full_window_gradient(two, stage):
    clipped_ref = d.reference(2, h.NAIVE_SCHEDULE, clip=d.CLIP)
    got = two[stage, 0]["clipped"]["params"]
    assert _rel(got, clipped_ref["params"]) < REL
    assert _rel(got, d.reference(2, h.NAIVE_SCHEDULE)["params"]) > WRONG  # the clipping did act


@pytest.mark.parametrize("stage", STAGES)
def test_one_extra_all_reduce_per_window_at_most(two, stage):
    counts = two[stage, 0]["collectives"]
    assert counts["gradguard"] <= counts["engine"] + 1, counts


@pytest.mark.parametrize("stage", STAGES)
def test_refusals_name_what_to_do(two, one, stage):
    for runs, rank in ((two, 1), (one, 0)):
        msg = runs[stage, rank]["refusals"]
        assert "gradient_accumulation_steps=3" in msg["steps_mismatch"] and "steps=4" in msg["steps_mismatch"]
        assert "gradient_clipping" in msg["max_grad_norm"]
        assert "lr_scheduler" in msg["scheduler"]
        if stage == 0:
            assert msg["state_dict_mid_window"] == ""  # stage 0 keeps in-flight gradients in .grad: saved as usual
        else:
            assert "window boundary" in msg["state_dict_mid_window"], msg


@pytest.mark.parametrize("stage", STAGES)
def test_dropped_window_leaves_nothing_behind_in_the_engine(two, stage):
    # A NaN loss on rank 0 in window 0 (nonfinite="skip"): every rank drops that window, and the
    # next one equals full-batch training on window 1 alone, from the initial parameters.
    start = [p.detach().double() for p in d.make_model().parameters()]
    only_window_1 = d.reference(2, h.NAIVE_SCHEDULE, windows=[1])["params"]
    for rank in range(2):
        out = two[stage, rank]["skip"]
        assert (out["skipped"], out["steps"]) == (1, 1)
        assert _rel([out["params"][0]], [start]) < REL  # nothing moved
        assert _rel([out["params"][1]], only_window_1) < REL


def test_stage0_resume_mid_window_matches_full_batch(two):
    ref = d.reference(2, d.schedule_for(2))
    for rank in range(2):
        assert _rel(two[0, rank]["resume"]["params"], ref["params"]) < REL


@pytest.mark.parametrize("nproc", [1, 2])
def test_accelerate_deepspeed_plugin_refused_with_directions_that_are_exact(one, two, nproc):
    runs = one if nproc == 1 else two
    for rank in range(nproc):
        out = runs["accelerate", rank]
        assert out["distributed_type"] == "DistributedType.DEEPSPEED"
        assert "gg.Accumulator(engine, steps)" in out["refusal"] and "accelerator.prepare" in out["refusal"]
        assert _rel(out["params"], d.reference(nproc, d.schedule_for(nproc))["params"]) < REL


def test_lightning_deepspeed_strategy_refused_with_directions():
    L = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.strategies import DeepSpeedStrategy

    import gradguard as gg
    from gradguard.integrations.lightning import ExactAccumulation

    trainer = L.Trainer(strategy=DeepSpeedStrategy(stage=2), accelerator="cpu", devices=1, accumulate_grad_batches=2,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(gg.GradguardError, match=r"gradguard\.Accumulator\(engine, steps\)"):
        ExactAccumulation().setup(trainer, L.LightningModule(), "fit")
