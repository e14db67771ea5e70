"""Exact accumulation across real process groups (2 gloo ranks on CPU).

Every check is against the single-process, full-batch, float64 gradient on the
union of the ranks' data (tests/_dist_helpers.py builds both), with unequal
item counts per rank, empty micro-batches, a rank with 0 items in a window,
and partial windows stepped by flush().
"""

import math

import pytest
import torch
from torch.testing import assert_close

import _dist_helpers as h
import gradguard as gg
from gradguard.distributed import LocalSync, zeroed_backward, sync_for

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")
TOL = dict(rtol=1e-10, atol=1e-10)


def _has_fsdp2() -> bool:
    try:  # FSDP2's public API (torch >= 2.6)
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        from torch.distributed.tensor import distribute_tensor  # noqa: F401
    except ImportError:
        return False
    return True


# A string condition: evaluated when an FSDP2 test is about to run, not when the module is collected (importing
# FSDP takes ~0.7 s of CPU, and the fast loop runs none of these tests).
needs_fsdp2 = pytest.mark.skipif("not _has_fsdp2()", reason="needs FSDP2 (torch.distributed.fsdp.fully_shard)")


@pytest.fixture(scope="module")
def ref():
    return h.reference()


@pytest.fixture(scope="module")
def ddp():
    return h.run_ranks(h.scenario_ddp)


def _check_against_reference(ranks, ref, tol=TOL):
    for rank, out in enumerate(ranks):
        assert len(out["grads"]) == len(ref["grads"]), f"rank {rank} stepped {len(out['grads'])} times"
        for w, (got, want) in enumerate(zip(out["grads"], ref["grads"])):
            for g, r in zip(got, want):
                assert_close(g, r, **tol, msg=lambda m: f"rank {rank}, window {w}: {m}")
        for p, r in zip(out["params"], ref["params"]):
            assert_close(p, r, **tol)
        for got, want in zip(out["losses"], ref["losses"]):
            assert math.isclose(got, want, rel_tol=max(1e-12, tol["rtol"])), (rank, got, want)


@pytest.mark.slow  # more than one process
def test_ddp_gradients_params_and_loss_equal_full_batch(ddp, ref):
    _check_against_reference(ddp, ref)


@pytest.mark.slow  # more than one process
def test_ddp_non_final_microbatches_send_no_gradients(ddp):
    for rank, out in enumerate(ddp):
        for window, micro, allreduces in out["per_micro"]:
            full_window = len(h.SCHEDULE[window][rank]) == h.STEPS
            if full_window and micro == h.STEPS - 1:
                assert allreduces >= 1, f"rank {rank}: window {window} ended without DDP's all-reduce"
            else:
                # Non-final micro-batches, and partial windows (reduced by finish_window, not by DDP).
                assert allreduces == 0, f"rank {rank}: window {window} micro-batch {micro} sent {allreduces} all-reduces"


@pytest.mark.slow  # more than one process
def test_ddp_naive_scaling_is_wrong_gradguard_is_exact():
    ranks = h.run_ranks(h.scenario_ddp_naive)
    ref = h.reference(schedule=h.NAIVE_SCHEDULE)
    worst = max(
        (g - r).abs().max().item()
        for g, r in zip(ranks[0]["naive"]["grads"][0], ref["grads"][0])
    )
    assert worst > 1e-3, f"the negative control should be off, was within {worst}"
    for rank, out in enumerate(ranks):
        for got, want in zip(out["gradguard"]["grads"], ref["grads"]):
            for g, r in zip(got, want):
                assert_close(g, r, **TOL)


@pytest.mark.slow  # more than one process
@pytest.mark.parametrize("kind", ["ddp", pytest.param("fsdp2", marks=needs_fsdp2)])
def test_resume_mid_window_matches_uninterrupted(kind):
    ranks = h.run_ranks(h.scenario_resume, kind=kind)
    want = h.reference_prefix([0, 1, 2])
    for out in ranks:
        for p, r in zip(out["params"], want):
            assert_close(p, r, **TOL)


@pytest.mark.slow  # more than one process
@needs_fsdp2
@pytest.mark.parametrize("defer_reduce", [False, True], ids=["reduce-every-micro-batch", "defer-to-window-end"])
def test_fsdp2_gradients_params_and_loss_equal_full_batch(defer_reduce, ref):
    ranks = h.run_ranks(h.scenario_fsdp2, defer_reduce=defer_reduce)
    assert all(out["defers_sync"] == defer_reduce for out in ranks)
    _check_against_reference(ranks, ref)


@pytest.mark.slow  # more than one process
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_ddp_on_cuda_tensors_equals_full_batch(ref):
    # nccl needs one GPU per rank; gloo reduces CUDA tensors too, so two ranks can share one GPU
    # and every tensor the accumulator and the sync object create must be on the right device.
    _check_against_reference(h.run_ranks(h.scenario_ddp, device="cuda"), ref)


@pytest.mark.slow  # more than one process
@needs_fsdp2
def test_fsdp2_deferred_with_mixed_precision_flushes_fsdp_own_buffer(ref):
    # reduce_dtype != param_dtype: the deferred gradient lives in FSDP's float64 buffer, which
    # flush() must reach (else the partial windows lose their gradients, an O(1) error).
    ranks = h.run_ranks(h.scenario_fsdp2, defer_reduce=True, mixed_precision=True)
    _check_against_reference(ranks, ref, tol=dict(rtol=1e-5, atol=1e-6))  # float32 compute


# ------------------------------------------------------ one-process units
def test_sync_for_plain_models_and_passthrough():
    assert isinstance(sync_for(None), LocalSync)
    assert isinstance(sync_for(torch.nn.Linear(2, 1)), LocalSync)
    sync = LocalSync()
    assert sync_for(sync) is sync
    with pytest.raises(gg.GradguardError, match="torch.nn.Module"):
        sync_for("model")


def test_zeroed_backward_adds_exact_zeros_even_through_nan():
    model = torch.nn.Linear(3, 2).double()
    x = torch.randn(4, 3, dtype=torch.float64)
    model(x).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    mask = torch.zeros(4, dtype=torch.float64)
    loss = (model(x).sum(dim=1) * mask).sum() / mask.sum()  # 0/0: its real gradient is NaN
    assert zeroed_backward(loss) == 2
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.grad, b)
    detached = torch.zeros((), requires_grad=True) * 0
    assert zeroed_backward(detached.detach().requires_grad_()) == 0


@pytest.mark.slow  # more than one process
def test_ddp_nonfinite_skip_drops_the_window_on_every_rank():
    ranks = h.run_ranks(h.scenario_ddp_nonfinite_skip)
    assert [(r["skipped"], r["steps"]) for r in ranks] == [(1, 1), (1, 1)]
    # The one window that stepped is window 1, on the union of both ranks' items.
    model = h.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=h.LR, momentum=h.MOMENTUM)
    xs, ys = zip(*[h.micro_batch(1, r, m, 2)[:2] for r in range(2) for m in range(h.STEPS)])
    x, y = torch.cat([t[:2] for t in xs]), torch.cat([t[:2] for t in ys])
    ((model(x) - y) ** 2).sum(dim=1).mean().backward()
    opt.step()
    for out in ranks:
        for p, r in zip(out["params"], model.parameters()):
            assert_close(p, r.detach(), **TOL)


@pytest.mark.slow  # more than one process
def test_under_torchrun(tmp_path, ref):
    """The real launcher: env:// rendezvous, 2 gloo ranks, DDP, the same exact result."""
    import os
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys, torch, torch.distributed as dist\n"
        f"sys.path.insert(0, {os.path.dirname(h.__file__)!r})\n"
        "import _dist_helpers as h\n"
        "torch.set_num_threads(1)\n"
        "dist.init_process_group('gloo')\n"
        "out = h.scenario_ddp(dist.get_rank(), dist.get_world_size())\n"
        "torch.save(out, sys.argv[1] + f'/rank{dist.get_rank()}.pt')\n"
        "dist.destroy_process_group()\n"
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(h.free_port()), str(script), str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    _check_against_reference(ranks, ref)


@pytest.mark.slow
def test_ddp_rank_whose_loss_reaches_no_parameter_is_refused_on_every_rank():
    """One collective at the window's end: every rank refuses the window, none hangs, the others step exactly."""
    ranks = h.run_ranks(h.scenario_ddp_rank_loss_reaches_nothing)
    for out in ranks:
        assert len(out["errors"]) == 1 and "reached none of the optimizer's parameters" in out["errors"][0]
        assert (out["steps"], out["skipped"]) == (2, 1)
    assert "micro-batch 0" in ranks[1]["errors"][0] and "another rank" in ranks[0]["errors"][0]
    # Reference: full batch over windows 0 and 2 only (window 1 refused, nothing applied).
    model = h.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=h.LR, momentum=h.MOMENTUM)
    for w in (0, 2):
        if w == 2:
            for out in ranks:  # the refusal left every rank's parameters as after window 0
                for p, r in zip(out["after_refusal"], model.parameters()):
                    assert_close(p, r.detach(), **TOL)
        xs, ys = zip(*[h.micro_batch(w, r, m, 2)[:2] for r in range(2) for m in range(h.STEPS)])
        ((model(torch.cat([t[:2] for t in xs])) - torch.cat([t[:2] for t in ys])) ** 2).sum(dim=1).mean().backward()
        opt.step()
        opt.zero_grad()
    for out in ranks:
        for p, r in zip(out["params"], model.parameters()):
            assert_close(p, r.detach(), **TOL)


# ------------------------------------------- .grad changed behind the Accumulator, on several ranks
_STRAY_KINDS = ("zero_grad", "zero_grad_keep", "model_zero_grad", "scale")
_DDP_MODES = [dict(bucket_view=bv, microbatch=mb) for bv in (False, True) for mb in (True, False)]


@pytest.fixture(scope="module")
def stray():
    """One 2-rank group runs every configuration (spawning costs more than the runs)."""
    configs = []
    for mode in _DDP_MODES:
        configs.append(dict(mode))  # the negative control: the same program without the clearing
        configs += [dict(mode, clearing=kind) for kind in _STRAY_KINDS]
        configs.append(dict(mode, clearing="zero_grad", on_ranks=(1,), windows=(1,)))
    ranks = h.run_ranks(h.scenario_ddp_stray_clearing, configs=configs)
    return {i: (cfg, [r[i] for r in ranks]) for i, cfg in enumerate(configs)}


def _runs(stray, **want):
    return [(cfg, outs) for cfg, outs in stray.values() if all(cfg.get(k) == v for k, v in want.items())]


@pytest.mark.slow  # more than one process
@pytest.mark.parametrize("mode", _DDP_MODES, ids=lambda m: f"bucket_view={m['bucket_view']}-microbatch={m['microbatch']}")
def test_ddp_same_loop_without_stray_clearing_equals_full_batch(stray, mode):
    (cfg, outs), = _runs(stray, clearing=None, **mode)
    want = h.reference_prefix(range(3))
    for out in outs:
        assert out["errors"] == [] and (out["steps"], out["skipped"]) == (3, 0)
        for p, r in zip(out["params"], want):
            assert_close(p, r, **TOL)


@pytest.mark.slow  # more than one process
@pytest.mark.parametrize("kind", _STRAY_KINDS)
@pytest.mark.parametrize("mode", _DDP_MODES, ids=lambda m: f"bucket_view={m['bucket_view']}-microbatch={m['microbatch']}")
def test_ddp_stray_clearing_every_iteration_is_refused_on_every_rank_before_any_update(stray, mode, kind):
    (cfg, outs), = [(c, o) for c, o in _runs(stray, clearing=kind, **mode) if "on_ranks" not in c]
    start = h.reference_prefix([])
    for rank, out in enumerate(outs):
        assert [w for w, _ in out["errors"]] == [0, 1, 2], (rank, out["errors"])
        assert (out["steps"], out["skipped"]) == (0, 3)
        for _, message in out["errors"]:
            assert "something other than the Accumulator" in message or "on another rank" in message
        for snapshot in out["at_refusal"]:  # nothing applied: the parameters as built, bit for bit
            for p, r in zip(snapshot, start):
                assert torch.equal(p, r)


@pytest.mark.slow  # more than one process
@pytest.mark.parametrize("mode", _DDP_MODES, ids=lambda m: f"bucket_view={m['bucket_view']}-microbatch={m['microbatch']}")
def test_ddp_clearing_on_one_rank_in_one_window_is_refused_by_both_and_the_rest_stays_exact(stray, mode):
    (cfg, outs), = [(c, o) for c, o in _runs(stray, clearing="zero_grad", **mode) if c.get("on_ranks") == (1,)]
    for out in outs:
        assert [w for w, _ in out["errors"]] == [1] and (out["steps"], out["skipped"]) == (2, 1)
        for p, r in zip(out["at_refusal"][0], h.reference_prefix([0])):
            assert_close(p, r, **TOL)  # window 1 refused: parameters (and momentum) as after window 0
        for p, r in zip(out["params"], h.reference_prefix([0, 2])):
            assert_close(p, r, **TOL)
    assert "'module.0.weight'" in outs[1]["errors"][0][1] and "on another rank" in outs[0]["errors"][0][1]


@pytest.fixture(scope="module")
def stray_resumed():
    """A clearing on rank 1 at the top of micro-batch 1 of window 1, the state saved and loaded after that step().

    Every pass synchronised (microbatch=False): rank 1 finds the change before micro-batch 1's pass, so the finding
    is pending when the state is saved. Passes in no_sync (microbatch=True): nothing looked at .grad since the
    clearing, so state_dict() itself must find it. Beside each, the same program without the clearing (control).
    """
    configs = [dict(mode, resume_at=(1, 1), **extra) for mode in _DDP_MODES
               for extra in ({}, dict(clearing="zero_grad", on_ranks=(1,), windows=(1,), at_micro=1))]
    ranks = h.run_ranks(h.scenario_ddp_stray_clearing, configs=configs)
    return [(cfg, [r[i] for r in ranks]) for i, cfg in enumerate(configs)]


@pytest.mark.slow  # more than one process
@pytest.mark.parametrize("mode", _DDP_MODES, ids=lambda m: f"bucket_view={m['bucket_view']}-microbatch={m['microbatch']}")
def test_ddp_a_finding_survives_state_dict_and_load_state_dict_in_the_middle_of_the_window(stray_resumed, mode):
    """Resumed mid-window, the window the clearing hit is refused once on both ranks; the others stay exact."""
    runs = [(c, o) for c, o in stray_resumed if all(c[k] == v for k, v in mode.items())]
    (_, control), = [(c, o) for c, o in runs if "clearing" not in c]
    (_, cleared), = [(c, o) for c, o in runs if "clearing" in c]
    for out in control:  # resuming itself loses nothing: all three windows exact
        assert out["errors"] == [] and (out["steps"], out["skipped"]) == (3, 0)
        for p, r in zip(out["params"], h.reference_prefix(range(3))):
            assert_close(p, r, **TOL)
    for out in cleared:  # refused once (not lost, not twice), before any update, on both ranks
        assert [w for w, _ in out["errors"]] == [1] and (out["steps"], out["skipped"]) == (2, 1), out["errors"]
        for p, r in zip(out["at_refusal"][0], h.reference_prefix([0])):
            assert_close(p, r, **TOL)
        for p, r in zip(out["params"], h.reference_prefix([0, 2])):
            assert_close(p, r, **TOL)
    assert "'module.0.weight'" in cleared[1]["errors"][0][1] and "on another rank" in cleared[0]["errors"][0][1]


@pytest.fixture(scope="module")
def stray_fsdp2():
    configs = [dict(fsdp2_defer=defer, clearing=kind) for defer in (False, True) for kind in (None, *_STRAY_KINDS)]
    ranks = h.run_ranks(h.scenario_ddp_stray_clearing, configs=configs)
    return {(cfg["fsdp2_defer"], cfg["clearing"]): [r[i] for r in ranks] for i, cfg in enumerate(configs)}


@needs_fsdp2
@pytest.mark.slow  # more than one process
@pytest.mark.parametrize("kind", _STRAY_KINDS)
def test_fsdp2_reducing_every_micro_batch_refuses_a_stray_clearing_on_every_rank(stray_fsdp2, kind):
    """defer_reduce=False: each pass reduce-scatters into the sharded .grad, so a clearing between passes loses them."""
    start = h.reference_prefix([])
    for rank, out in enumerate(stray_fsdp2[(False, kind)]):
        assert [w for w, _ in out["errors"]] == [0, 1, 2], (rank, out["errors"])
        assert (out["steps"], out["skipped"]) == (0, 3)
        for snapshot in out["at_refusal"] + [out["params"]]:
            for p, r in zip(snapshot, start):
                assert torch.equal(p, r)
    # Negative control: the same program without the clearing steps exactly.
    for out in stray_fsdp2[(False, None)]:
        assert out["errors"] == [] and out["steps"] == 3
        for p, r in zip(out["params"], h.reference_prefix(range(3))):
            assert_close(p, r, **TOL)


@needs_fsdp2
@pytest.mark.slow  # more than one process
@pytest.mark.parametrize("kind", [None, *_STRAY_KINDS])
def test_fsdp2_deferred_window_is_out_of_reach_of_a_stray_clearing_and_stays_exact(stray_fsdp2, kind):
    """Deferred (the default): the window's gradients stay inside FSDP until its last pass, so a clearing of
    the optimizer's .grad before then clears nothing; the result is the full batch's, and nothing is refused."""
    for out in stray_fsdp2[(True, kind)]:
        assert out["errors"] == [] and out["steps"] == 3
        for p, r in zip(out["params"], h.reference_prefix(range(3))):
            assert_close(p, r, **TOL)
