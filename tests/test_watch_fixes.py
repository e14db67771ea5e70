"""The watch on real patterns it used to get wrong, and its safety with threads and out-of-order exits."""

import pytest
import ast
import gc
import importlib
import os
import subprocess
import sys
import textwrap
import threading
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_module

import gradguard as gg
from gradguard.microbatches import accumulate_batch
from _findings import codes

SRC = Path(gg.__file__).parent



def make(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def installed_state():
    return (
        len(optim_module._global_optimizer_pre_hooks),
        len(optim_module._global_optimizer_post_hooks),
        len(nn_module._global_forward_hooks),
        torch.autograd.backward,
        torch.optim.Optimizer.__dict__["zero_grad"],
        nn.Module.__dict__["zero_grad"],
        torch.amp.GradScaler.__dict__["scale"],
    )


# ------------------------------------------------------------------ in-place changes are not a use
def clipped_loop(zero_every_micro, windows=4, tail=0):
    model, opt = make()
    # A clip on every micro-batch is itself GG115 (clip inside the window, tests/test_rule_gg115.py); here
    # only whether an in-place clip hides a discarding zero_grad or a window never stepped is judged.
    with gg.watch(mode="record", ignore=("GG115",)) as w:
        for i in range(4 * windows + tail):
            x, y = torch.randn(8, 4), torch.randn(8, 1)
            (F.mse_loss(model(x), y) / 4).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # in place, every micro-batch
            if (i + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
            elif zero_every_micro:
                opt.zero_grad()
    return codes(w)


def test_clipping_every_micro_batch_does_not_hide_a_discarding_zero_grad():
    assert clipped_loop(zero_every_micro=True) == ["GG102"]
    assert clipped_loop(zero_every_micro=False) == []  # the control: the same loop, correct


def test_clipping_does_not_hide_a_final_window_never_stepped():
    assert clipped_loop(zero_every_micro=False, tail=2) == ["GG103"]


# ------------------------------------------------------------------ gradients moved into a buffer
def buffer_loop(move=True, k=4, windows=4):
    model, opt = make()
    buf = [torch.zeros_like(p) for p in model.parameters()]
    with gg.watch(mode="record") as w:
        for i in range(k * windows):
            x, y = torch.randn(8, 4), torch.randn(8, 1)
            F.mse_loss(model(x), y).backward()
            if move:
                for b, p in zip(buf, model.parameters()):
                    b.add_(p.grad)  # moved out of .grad ...
            opt.zero_grad()  # ... before clearing it
            if (i + 1) % k == 0:
                for b, p in zip(buf, model.parameters()):
                    p.grad = b / k
                    b.zero_()
                opt.step()
    return codes(w)


def test_gradients_moved_into_own_buffers_are_not_discarded():
    assert buffer_loop() == []
    # The control: without the copy into the buffer the gradient really is thrown away
    # (the step applies only zeros assigned by hand... so it is the last window's .grad = 0/k).
    model, opt = make()
    with gg.watch(mode="record") as w:
        for i in range(12):
            F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
            opt.zero_grad()
            if (i + 1) % 4 == 0:
                opt.step()
    assert "GG102" in codes(w)


# ------------------------------------------------------------------ GG105: running micro-step counter
def counter_loop(running):
    model, opt = make()
    with gg.watch(mode="record") as w:
        for i in range(8):
            x, y = torch.randn(8, 4), torch.randn(8, 1)
            micro = i % 4
            loss = F.mse_loss(model(x), y)
            (loss / (micro + 1) if running else loss / 4).backward()  # weights 1, 1/2, 1/3, 1/4
            if micro == 3:
                opt.step()
                opt.zero_grad()
    return w


def test_loss_divided_by_the_running_micro_step_is_unequal_weighting():
    w = counter_loop(running=True)
    assert codes(w) == ["GG105"]
    assert "loss factors (1, 0.5, 0.3333, 0.25)" in w.findings[0].message
    assert codes(counter_loop(running=False)) == []


def test_factors_proportional_to_item_counts_are_correct():
    model, opt = make()
    sizes = [5, 3, 8, 2]
    with gg.watch(mode="record") as w:
        for n in sizes:
            x, y = torch.randn(n, 4), torch.randn(n, 1)
            (F.mse_loss(model(x), y) * (n / sum(sizes))).backward()
        opt.step()
    assert w.findings == []


# ------------------------------------------------------------------ manual updates without clearing
def manual_loop(clear, clip=True, how="data"):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    with gg.watch(mode="record") as w:
        for _ in range(4):
            if clear == "zero_grad":
                model.zero_grad()
            F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            with torch.no_grad():
                for p in model.parameters():
                    if how == "data":
                        p.data.add_(p.grad, alpha=-0.1)
                    else:
                        p -= 0.1 * p.grad
                    if clear == "none":
                        p.grad = None
                    elif clear == "zero_":
                        p.grad.zero_()
    return codes(w)


@pytest.mark.slow
def test_manual_update_without_clearing_is_stale_gradient():
    assert manual_loop(clear=None) == ["GG101"]
    assert manual_loop(clear=None, clip=False, how="sub") == ["GG101"]
    for clear in ("zero_grad", "none", "zero_"):
        assert manual_loop(clear=clear) == [], clear


# ------------------------------------------------------------------ accumulate_batch without acc=
def test_accumulate_batch_in_a_correct_loop_is_clean():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gg.watch(mode="raise") as w:
        for _ in range(3):
            opt.zero_grad()
            for _ in range(2):
                batch = (torch.randn(12, 4), torch.randn(12, 1))
                accumulate_batch(model, lambda m, b: F.mse_loss(m(b[0]), b[1]), batch, micro_batch_size=4)
            opt.step()
    assert w.findings == []


# ------------------------------------------------------------------ whose line
@pytest.mark.slow  # runs python in a subprocess
def test_a_library_outside_site_packages_is_not_the_users_code(tmp_path):
    lib = tmp_path / "libs" / "trainlib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text(textwrap.dedent("""
        def train(model, opt, batches):
            for x, y in batches:
                ((model(x) - y) ** 2).mean().backward()
                opt.step()
    """))
    work = tmp_path / "project"
    work.mkdir()
    script = work / "train.py"
    script.write_text(textwrap.dedent("""
        import torch, gradguard as gg, trainlib
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        batches = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)]
        with gg.watch(mode="record") as w:
            trainlib.train(model, opt, batches)
        print([(f.code, f.path, f.line) for f in w.findings])
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "libs"), str(SRC.parent)]))
    out = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (found,) = eval(out.stdout.strip().splitlines()[-1])
    assert found[0] == "GG101" and found[1] == str(script) and found[2] == 7, found


@pytest.mark.slow  # runs python in a subprocess
def test_packages_installed_into_the_working_tree_are_a_library_but_its_own_folders_are_not(tmp_path):
    # pip install --target ./libs (a *.dist-info marks it) inside the project: a library.
    # ./helpers on sys.path (a src/ layout, the tests folder pytest adds): the user's code.
    work = tmp_path / "project"
    for folder, installed in (("libs", True), ("helpers", False)):
        pkg = work / folder / f"{folder}pkg"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(textwrap.dedent("""
            def train(model, opt, batches):
                for x, y in batches:
                    ((model(x) - y) ** 2).mean().backward()
                    opt.step()
        """))
        if installed:
            (work / folder / f"{folder}pkg-1.0.dist-info").mkdir()
    script = work / "train.py"
    script.write_text(textwrap.dedent("""
        import torch, gradguard as gg, libspkg, helperspkg
        def run(train):
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            batches = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)]
            with gg.watch(mode="record") as w:
                train(model, opt, batches)
            return [(f.code, f.path, f.line) for f in w.findings]
        print(run(libspkg.train) + run(helperspkg.train))
    """))
    paths = [str(work / "libs"), str(work / "helpers"), str(SRC.parent)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    out = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    in_lib, in_helpers = eval(out.stdout.strip().splitlines()[-1])
    assert in_lib == ("GG101", str(script), 8), in_lib
    assert in_helpers[0] == "GG101" and in_helpers[1].endswith("helperspkg/__init__.py"), in_helpers


# ------------------------------------------------------------------ threads
@pytest.mark.slow
def test_two_threads_each_under_its_own_watch_see_only_their_own_training():
    results, errors = {}, []

    def train(name, buggy):
        try:
            torch.manual_seed(len(name))
            model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            with gg.watch(mode="record") as w:
                for _ in range(300):
                    if not buggy:
                        opt.zero_grad()
                    F.mse_loss(model(torch.randn(8, 16)), torch.randn(8, 1)).backward()
                    opt.step()
            results[name] = (codes(w), {p for f in w.findings for p in (f.params or ())})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    before = installed_state()
    threads = [threading.Thread(target=train, args=("good", False)), threading.Thread(target=train, args=("bad", True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert results["good"][0] == []
    assert results["bad"][0] == ["GG101"]
    assert installed_state() == before


def test_a_watch_does_not_see_another_threads_training():
    model, opt = make()
    done = threading.Event()

    def other():
        for _ in range(3):  # no zero_grad: GG101, but not on the main thread's watch
            F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
            opt.step()
        done.set()

    with gg.watch(mode="record") as w:
        t = threading.Thread(target=other)
        t.start()
        t.join(60)
    assert done.is_set() and w.findings == []


# ------------------------------------------------------------------ out-of-order exits
@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_watches_exited_out_of_order_leave_torch_as_it_was():
    before = installed_state()
    for _ in range(3):
        model, opt = make()
        ref = weakref.ref(model)
        a, b = gg.watch(mode="record"), gg.watch(mode="record")
        a.__enter__()
        b.__enter__()
        for _ in range(2):
            F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
            opt.step()
        a.__exit__(None, None, None)
        assert codes(b) == ["GG101"]
        b.__exit__(None, None, None)
        assert codes(a) == ["GG101"]
        assert installed_state() == before
        del model, opt
        gc.collect()
        assert ref() is None  # nothing of the watches keeps the model alive
    assert torch.autograd.backward.__module__ == "torch.autograd"


def test_someone_elses_wrapper_on_top_is_kept_and_ours_not_stacked():
    """Another library wraps torch.autograd.backward while a watch is on: its wrapper stays after the
    watch ends, later watches do not wrap ours again, and they still see backward passes through it."""
    orig = torch.autograd.backward

    def chain():
        fns, fn = [], torch.autograd.backward
        while fn is not None:
            fns.append(fn)
            fn = getattr(fn, "__wrapped__", None)
        return fns

    try:
        theirs_all = []
        for _ in range(3):
            with gg.watch(mode="record"):
                inner = torch.autograd.backward

                def theirs(*a, _inner=inner, **k):
                    return _inner(*a, **k)

                theirs.__wrapped__ = inner
                torch.autograd.backward = theirs
                theirs_all.append(theirs)
            assert torch.autograd.backward is theirs  # kept: the watch's exit did not drop it
            ours = [fn for fn in chain() if fn.__module__ == "gradguard.watcher._hooks"]
            assert len(ours) == 1  # never stacked, however many watches came and went
        assert chain() == [*reversed(theirs_all), ours[0], orig]
        # a watch entered now still sees the passes that go through their wrappers
        model, opt = make()
        with gg.watch(mode="record") as w:
            for _ in range(2):
                F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
                opt.step()
        assert codes(w) == ["GG101"]
        # and with no watch on, their chain only forwards
        F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
    finally:
        torch.autograd.backward = orig