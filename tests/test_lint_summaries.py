"""Large loops are checked, not skipped: paths that a decision did not change are merged.

The merge must be exact: the event orders a loop can run are the same with and without it
(compared against the plain enumeration on the same programs), and a loop with many independent
options that used to be skipped as "too complex" is now checked, finding a missing clearing.
"""

import ast
import random
from pathlib import Path

import pytest

import gradguard as gg
from gradguard.lint import _flow, check_paths

CORPUS = Path(__file__).parent / "lint_corpus"


def _event_orders(source: str, merge_at: int, monkeypatch) -> set:
    monkeypatch.setattr(_flow, "MERGE_AT", merge_at)
    monkeypatch.setattr(_flow, "MAX_PATHS", 10**6)
    monkeypatch.setattr(_flow, "MAX_WORK", 10**7)
    loop = ast.parse(source).body[0]
    paths = _flow.Walker(lambda node: True, {}, {}, frozenset()).iteration_paths(loop)
    return {(tuple((e.kind, e.target) for e in p.events), p.end) for p in paths}


def _random_loop(rng: random.Random, n: int) -> str:
    """A loop of ``n`` statements: events, option branches that change nothing, branches with
    events or jumps, repeated tests (correlated decisions)."""
    tests = ["a", "b", "c", "not a", "i % k == 0", "i % k != 0", "flag"]
    events = ["opt.zero_grad()", "loss.backward()", "opt.step()", "log(opt.param_groups)", "continue", "break"]
    lines = ["for i in data:"]
    for _ in range(n):
        kind = rng.random()
        if kind < 0.3:
            lines.append(f"    {rng.choice(events[:4])}")
        else:
            lines.append(f"    if {rng.choice(tests)}:")
            lines.append(f"        {rng.choice(events)}")
            if rng.random() < 0.4:
                lines.append("    else:")
                lines.append(f"        {rng.choice(events)}")
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_merging_keeps_exactly_the_event_orders_of_plain_enumeration(monkeypatch):
    rng = random.Random(0)
    differing = 0
    for _ in range(200):
        source = _random_loop(rng, rng.randint(3, 12))
        plain = _event_orders(source, 10**6, monkeypatch)  # reference: every path enumerated
        merged = _event_orders(source, 0, monkeypatch)  # merge after every statement
        assert merged == plain, source
        differing += len(plain) > 1
    assert differing > 100  # the programs do branch (a test of nothing would pass too)


def _random_program(rng: random.Random) -> str:
    """A loop calling helpers from its branches; the helpers branch on the loop's tests too."""
    tests = ["a", "not a", "b", "flag", "i % k == 0"]
    events = ["opt.zero_grad()", "loss.backward()", "opt.step()", "return", "h1()", "h2()"]

    def body(depth, names):
        lines = []
        for _ in range(rng.randint(1, 4)):
            event = rng.choice([e for e in events if e.rstrip("()") not in names])
            if rng.random() < 0.5:
                lines += [f"if {rng.choice(tests)}:", f"    {event}"]
                if rng.random() < 0.3:
                    lines += ["else:", f"    {rng.choice([e for e in events if e.rstrip('()') not in names])}"]
            else:
                lines.append(event)
        return lines

    out = []
    for name, callable_ in (("h2", {"h1", "h2"}), ("h1", {"h1"})):
        out.append(f"def {name}():")
        out += ["    " + line for line in body(1, callable_)]
    out.append("for i in data:")
    out += ["    " + line.replace("return", "continue") for line in body(0, set()) + body(0, set())]
    return "\n".join(out) + "\n"


@pytest.mark.slow
def test_helper_summaries_keep_exactly_the_event_orders_of_walking_the_helper_per_path(monkeypatch):
    # reference: the helper's body walked again from every path that reaches the call
    rng = random.Random(1)
    checked = 0
    for _ in range(150):
        source = _random_program(rng)
        tree = ast.parse(source)
        functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
        loop = tree.body[-1]

        def orders(walker):
            return {(tuple((e.kind, id(e.node)) for e in p.events), p.end) for p in walker.iteration_paths(loop)}

        summarised = orders(_flow.Walker(lambda node: True, functions, {}, frozenset()))
        with monkeypatch.context() as m:
            m.setattr(_flow.Walker, "_summarised", lambda self, fn, call, states, stack: self.block(fn.body, states, stack))
            plain = orders(_flow.Walker(lambda node: True, functions, {}, frozenset()))
        assert summarised == plain, source
        checked += len(plain) > 2
    assert checked > 50


def test_merging_drops_a_decision_only_when_both_values_ran_the_same_events():
    t = ast.parse("a", mode="eval").body
    u = ast.parse("b", mode="eval").body
    ev = _flow.Event("step", t, "opt")
    same = [_flow.Path((), (("a", True, t),)), _flow.Path((), (("a", False, t),))]
    assert [p.decisions for p in _flow.merge_paths(same)] == [()]
    # negative controls: different events, or the other decision differs too
    different = [_flow.Path((ev,), (("a", True, t),)), _flow.Path((), (("a", False, t),))]
    assert len(_flow.merge_paths(different)) == 2
    crossed = [_flow.Path((), (("a", True, t), ("b", True, u))), _flow.Path((), (("a", False, t), ("b", False, u)))]
    assert len(_flow.merge_paths(crossed)) == 2


def test_a_trainer_with_many_options_is_checked_not_skipped(tmp_path):
    source = (CORPUS / "trainer_many_options.py").read_text()
    correct = tmp_path / "trainer.py"
    correct.write_text(source)
    result = check_paths([correct])
    assert result.findings == [] and result.skipped == []
    # the same trainer without its clearing: the stale gradient is found (it was "too complex")
    broken = tmp_path / "broken.py"
    broken.write_text(source.replace("self.optimizer.zero_grad(set_to_none=True)\n        total", "total"))
    assert broken.read_text() != source
    result = check_paths([broken])
    assert [f.code for f in result.findings] == ["GG101"] and result.skipped == []


def test_a_call_back_into_the_function_holding_the_loop_is_not_followed(tmp_path):
    # `self.task.train_step(...)` is another object's method; following it into the trainer's own
    # train_step (the only class of the file defining the name) made the loop recurse into itself
    source = '''
class Trainer:
    def train_step(self, samples):
        self.optimizer.zero_grad()
        for sample in samples:
            loss = self.task.train_step(sample, self.model, self.optimizer)
''' + "".join(f"            if self.cfg.opt{i}:\n                self.optimizer.param_groups[0]['lr'] = {i}\n" for i in range(10)) + '''
            loss.backward()
        self.optimizer.step()

    def train(self, batches):
        for samples in batches:
            self.train_step(samples)
'''
    path = tmp_path / "trainer.py"
    path.write_text(source)
    result = check_paths([path])
    assert result.findings == [] and result.skipped == []  # walked, not given up on
    # negative control: without the clearing the same loop is reported
    path.write_text(source.replace("        self.optimizer.zero_grad()\n", ""))
    assert [f.code for f in check_paths([path]).findings] == ["GG101"]


def test_a_loop_beyond_the_fixed_allowance_draws_on_a_pool_proportional_to_the_file(monkeypatch, tmp_path):
    from gradguard.lint import _builder

    # a main loop reaching a long helper (one visit per statement per path): 4 paths x 60 lines
    helper = "".join(f"        self.log(self.optimizer.param_groups[0]['lr'] * {i})\n" for i in range(60))
    source = (
        "class Trainer:\n    def update(self, loss):\n        loss.backward()\n" + helper
        + "        self.optimizer.step()\n\n    def fit(self, loader):\n        for x in loader:\n"
        + "            if self.cfg.a:\n                self.optimizer.param_groups[0]['lr'] = 1\n"
        + "            if self.cfg.b:\n                self.optimizer.param_groups[0]['lr'] = 2\n"
        + "            self.update(self.loss(x))\n"
    )
    path = tmp_path / "trainer.py"
    path.write_text(source)
    monkeypatch.setattr(_builder, "MAX_WORK", 50)
    monkeypatch.setattr(_flow, "MAX_WORK", 50)
    monkeypatch.setattr(_builder, "WORK_PER_LINE", 0)  # negative control: no pool, the loop is skipped
    result = check_paths([path])
    assert result.findings == [] and [s.line for s in result.skipped] == [source[: source.index("for x")].count("\n") + 1]
    monkeypatch.setattr(_builder, "WORK_PER_LINE", 20)  # 20 visits per line of the file: checked
    result = check_paths([path])
    assert result.skipped == [] and [f.code for f in result.findings] == ["GG101"]
