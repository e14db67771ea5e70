"""Windows read through helpers in another module, step helpers returning a flag, and K set through a
subclass's constructor. Truth of each program: a float64 run (a window of unequal micro-batch means,
a dropped remainder) as benchmarks/oracle decides it; each has a correct twin that draws nothing."""

import subprocess
import sys
import textwrap

import gradguard as gg

UTILS = textwrap.dedent("""
    def clear_grads(o, m):
        for q in m.parameters():
            q.grad = None


    def compute_loss(m, xb, yb, d=1):
        return ((m(xb) - yb) ** 2).sum(dim=1).mean() / d


    def apply_update(o, m):
        o.step()
""")

MAIN = textwrap.dedent("""
    import torch

    from train_utils import clear_grads, compute_loss, apply_update


    def train(m, o, bs, k):
        for t, (xb, yb) in enumerate(bs):
            l = compute_loss(m, xb, yb, k)
            l.backward()
            {clear_here}
            if t % k == k - 1:
                apply_update(o, m)
                clear_grads(o, m)


    net = torch.nn.Linear(2, 1).double()
    data = [(torch.randn(2, 2, dtype=torch.float64), torch.randn(2, 1, dtype=torch.float64)) for _ in range(6)]
    train(net, torch.optim.SGD(net.parameters(), lr=0.1), data, 3)
""")


def _codes(tmp_path, main, utils=UTILS):
    (tmp_path / "train_utils.py").write_text(utils)
    (tmp_path / "main.py").write_text(main)
    return sorted({(f.code, f.path.endswith("main.py")) for f in gg.lint_paths(str(tmp_path))})


def test_a_clearing_in_an_imported_helper_after_backward_is_gg102_at_the_call(tmp_path):
    found = _codes(tmp_path, MAIN.format(clear_here="clear_grads(o, m)"))
    assert ("GG102", True) in found


def test_negative_control_the_clearing_after_the_step_only(tmp_path):
    assert _codes(tmp_path, MAIN.format(clear_here="pass")) == []


def test_the_cli_follows_the_helper_module(tmp_path):
    (tmp_path / "train_utils.py").write_text(UTILS)
    (tmp_path / "main.py").write_text(MAIN.format(clear_here="clear_grads(o, m)"))
    out = subprocess.run([sys.executable, "-m", "gradguard", "lint", str(tmp_path)], capture_output=True, text=True)
    assert "main.py" in out.stdout and "GG102" in out.stdout


STEP_HELPER = textwrap.dedent("""
    import torch


    def step_if_due(opt, i, k):
        if not ((i + 1) % k == 0):
            return False
        opt.step()
        return True


    def train(m, o, bs, k):
        for t, (xb, yb) in enumerate(bs):
            l = ((m(xb) - yb) ** 2).sum(dim=1).mean() / k
            l.backward()
            if step_if_due(o, t, k):
                o.zero_grad()
        {after}


    net = torch.nn.Linear(2, 1).double()
    data = [(torch.randn(2, 2, dtype=torch.float64), torch.randn(2, 1, dtype=torch.float64)) for _ in range(7)]
    train(net, torch.optim.SGD(net.parameters(), lr=0.1), data, 3)
""")


def test_a_step_helper_returning_a_flag_keeps_the_dropped_remainder():
    codes = {f.code for f in gg.lint_source(STEP_HELPER.format(after="return None"), "t.py")}
    assert "GG103" in codes


def test_negative_control_the_remainder_stepped_after_the_loop():
    codes = {f.code for f in gg.lint_source(STEP_HELPER.format(after="o.step()\n        o.zero_grad()"), "t.py")}
    assert "GG103" not in codes and "GG102" not in codes


SUBCLASS = textwrap.dedent("""
    import torch


    class Trainer:
        def __init__(self, accumulation_steps):
            self.model = None
            self.opt = None
            self.accumulation_steps = accumulation_steps

        def fit(self, batches):
            for i, (x, y) in enumerate(batches):
                loss = ((self.model(x) - y) ** 2).sum(dim=1).mean()
                loss.backward()
                if i % self.accumulation_steps == self.accumulation_steps - 1:
                    self.opt.step()
                    self.opt.zero_grad()


    class LinearTrainer(Trainer):
        def __init__(self, model, accumulation_steps):
            super().__init__(accumulation_steps)
            self.model = model
            self.opt = torch.optim.SGD(model.parameters(), lr=0.05)


    SIZES = {sizes}
    _X = torch.randn(sum(SIZES), 2, dtype=torch.float64)
    _Y = torch.randn(sum(SIZES), 1, dtype=torch.float64)
    _ends = [sum(SIZES[:n + 1]) for n in range(len(SIZES))]
    batches = [(_X[e - z:e], _Y[e - z:e]) for e, z in zip(_ends, SIZES)]
    trainer = LinearTrainer(torch.nn.Linear(2, 1).double(), 3)
    trainer.fit(batches)
""")


def test_k_through_the_subclass_constructor_reads_unequal_windows():
    codes = {f.code for f in gg.lint_source(SUBCLASS.format(sizes="[3, 1, 1, 2, 4, 1]"), "t.py")}
    assert "GG105" in codes


def test_negative_control_equal_micro_batches():
    codes = {f.code for f in gg.lint_source(SUBCLASS.format(sizes="[2, 2, 2, 2, 2, 2]"), "t.py")}
    assert "GG105" not in codes and "GG104" in codes
