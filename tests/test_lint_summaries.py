"""Large loops are checked, not skipped: paths that a decision did not change are merged.

The merge must be exact: the event orders a loop can run are the same with and without it
(compared against the plain enumeration on the same programs), and a loop with many independent
options that used to be skipped as "too complex" is now checked, finding a missing clearing.
"""

import ast
import random
from pathlib import Path

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
