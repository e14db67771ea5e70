"""The flow's merge of paths (``_flow.merge_paths``) gives exactly what its definition gives.

The definition: to a fixed point, for each decision key in turn, group the paths by (events, end,
their other decisions) in order of first appearance; a group holding both values of the key
becomes its first path without that key, every other group stays as it is. The rules read the
merged list (its paths, their order, the test kept for each decision), so the fast version must
return the same list, not only the same set. The reference below is that definition written
plainly; it is compared on random lists, on every merge made while linting the fixtures and corpus
programs, and on a trainer whose options fork the paths many times (the shape that made a
repository of such trainers lint 200x slower than ``ast.parse``).
"""

from __future__ import annotations

import ast
import random
from pathlib import Path as FilePath

import pytest

from gradguard.lint import _flow, check_source
from gradguard.lint._events import Event
from gradguard.lint._flow import Path, merge_paths

HERE = FilePath(__file__).resolve().parent
FILES = sorted((HERE / "lint_fixtures").rglob("*.py")) + sorted((HERE / "lint_corpus").rglob("*.py"))


def reference(states):
    changed = True
    while changed:
        changed = False
        keys = {k for s in states for k, _, _ in s.decisions}
        for key in keys:
            groups = {}
            for s in states:
                rest = tuple(sorted((k, v) for k, v, _ in s.decisions if k != key))
                groups.setdefault((s.events, s.end, rest), []).append(s)
            out = []
            for members in groups.values():
                values = {s.decided(key) for s in members}
                if True in values and False in values:
                    first = members[0]
                    out.append(first._replace(decisions=tuple(d for d in first.decisions if d[0] != key)))
                    changed = True
                else:
                    out += members
            states = out
    return states


def same(a, b):
    """Equal lists, and each decision keeps the very test node the reference keeps."""
    return a == b and all(
        len(x.decisions) == len(y.decisions) and all(p[2] is q[2] for p, q in zip(x.decisions, y.decisions))
        for x, y in zip(a, b)
    )


def random_paths(rng, n_paths, n_keys):
    nodes = [ast.Name(id=f"n{i}") for i in range(3)]
    events = [(), (Event("backward", nodes[0], "loss"),), (Event("step", nodes[1], "opt"),)]
    events.append(tuple(events[1] + events[2]))  # equal to a sum of two, a different object
    keys = [f"k{i}" for i in range(n_keys)]
    paths = []
    for _ in range(n_paths):
        if paths and rng.random() < 0.1:
            paths.append(rng.choice(paths))  # the same path twice
            continue
        chosen = rng.sample(keys, rng.randint(0, n_keys))
        decisions = tuple((k, rng.random() < 0.5, ast.Name(id=k)) for k in chosen)
        end = rng.choice([None, None, None, "continue", "return"])
        paths.append(Path(rng.choice(events), decisions, end))
    return paths


def test_random_lists_merge_as_the_definition_says():
    rng = random.Random(20261206)
    merged = reordered = 0
    for case in range(800):
        states = random_paths(rng, rng.randint(0, 40), rng.randint(1, 6))
        want = reference(list(states))
        got = merge_paths(list(states))
        assert same(got, want), case
        merged += len(want) < len(states)
        reordered += len(want) == len(states) and want != states
    # the cases exercise both what the merge does and the order it leaves
    assert merged > 100 and reordered > 10


def test_colliding_sums_fall_back_to_the_definition(monkeypatch):
    class Constant(random.Random):
        def getrandbits(self, k):
            return 1  # every (key, value) gets the same number: every sum collides

    rng = random.Random(7)  # made before the patch: it draws real numbers
    monkeypatch.setattr(_flow.random, "Random", Constant)
    for case in range(300):
        states = random_paths(rng, rng.randint(2, 30), rng.randint(1, 5))
        assert same(merge_paths(list(states)), reference(list(states))), case


def test_a_wrong_merge_is_told_apart():
    """Negative control: a merge that forgets the paths' ends differs from the definition here."""
    t = ast.Name(id="t")
    states = [Path((), (("a", True, t),), None), Path((), (("a", False, t),), "return")]
    assert reference(list(states)) == states
    wrong = [states[0]._replace(decisions=())]
    assert not same(wrong, reference(list(states)))


TRAINER = '''
def train(model, opt, loader, args, scaler):
    for step, batch in enumerate(loader):
{branches}
        if args.fp16:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (step + 1) % args.accum == 0:
            if args.fp16:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad()
'''

BRANCH = '''        if args.flag{i}:
            loss = model(batch, mode={i})
            if args.skip{i}:
                continue
        else:
            loss = model(batch)
            if args.skip{i}:
                continue
'''


def _recorded_merges(monkeypatch, sources):
    calls = []

    def recording(states):
        calls.append(list(states))
        return merge_paths(states)

    monkeypatch.setattr(_flow, "merge_paths", recording)
    for name, source in sources:
        check_source(source, name)
    return calls


TRAINER_SOURCE = TRAINER.format(branches="".join(BRANCH.format(i=i) for i in range(6)))


def test_every_merge_made_while_linting_a_trainer_with_many_options_is_the_definitions(monkeypatch):
    calls = _recorded_merges(monkeypatch, [("trainer.py", TRAINER_SOURCE)])
    assert calls  # its options fork the paths past the merge threshold
    assert any(merge_paths(list(states)) != states for states in calls)  # the merges change something
    for states in calls:
        assert same(merge_paths(list(states)), reference(list(states)))


@pytest.mark.slow
def test_every_merge_made_while_linting_the_fixtures_and_corpus_is_the_definitions(monkeypatch):
    calls = _recorded_merges(monkeypatch, [(str(p), p.read_text(errors="replace")) for p in FILES])
    assert calls
    for states in calls:
        assert same(merge_paths(list(states)), reference(list(states)))


def test_merging_does_not_sort_the_decisions_once_per_key_and_path(monkeypatch):
    """Counts work: the old merge sorted every path's decisions again for every key in every pass
    (seconds on a trainer with a few dozen paths and tests); the merge now reads each path once."""
    rng = random.Random(3)
    states = random_paths(rng, 40, 12)
    sorts = []

    def counting_sorted(*args, **kwargs):
        sorts.append(1)
        return sorted(*args, **kwargs)

    monkeypatch.setattr(_flow, "sorted", counting_sorted, raising=False)
    got = merge_paths(list(states))
    assert same(got, reference(list(states)))
    assert len(sorts) <= len(states)
