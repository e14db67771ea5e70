"""Work the walks no longer repeat, and the answers they give without it are the same.

Two walks did the same work again on large trainers (a repository of them linted 80x slower than
``ast.parse``):

* the flow (``_flow.Walker.block``) merged its paths after every statement once a loop had more than
  ``MERGE_AT`` of them, even after lines that leave the paths as they were, or that add the same
  events to every path still running; such a list merges as the one before it did, so a list the
  merge returned unchanged is not merged again (``_flow._extends`` says when that holds);
* GG112's walk kept a branch test again each time it met it (a helper's ``if`` at every call and
  loop pass), so the list of tests per key grew with the walk and every question asked of it was
  asked again of a longer list; and it walked an assignment's subtree again at every visit.

Each check compares against the definition (merging after every statement; every test kept; the
subtree walked) and counts the work, so that it fails on the code before the change.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path as FilePath

import pytest

from gradguard.lint import _flow, check_source
from gradguard.lint._ast import subtree
from gradguard.lint._checker import Checker
from gradguard.lint._events import Event
from gradguard.lint._flow import Path, merge_paths
from gradguard.lint.rules import gg112_clip_before_unscale as gg112

HERE = FilePath(__file__).resolve().parent
FILES = sorted((HERE / "lint_fixtures").rglob("*.py")) + sorted((HERE / "lint_corpus").rglob("*.py"))

TRAINER = '''
import torch

def train(model, opt, loader, args, scaler):
    for step, batch in enumerate(loader):
{branches}
{quiet}
        if args.fp16:
            scaler.scale(loss).backward()
        else:
            loss.backward()
{quiet}
        if (step + 1) % args.accum == 0:
            if args.fp16:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad()
'''

# each option runs a clearing or not: the paths differ in their events and never merge away
BRANCH = '''        if args.flag{i}:
            loss = model(batch, mode={i})
            opt.zero_grad()
        else:
            loss = model(batch)
'''

QUIET = "        note{i} = len(batch) + {i}\n"  # a line with no event: the paths stay as they were


def trainer(branches: int = 5, quiet: int = 20) -> str:
    return TRAINER.format(branches="".join(BRANCH.format(i=i) for i in range(branches)),
                          quiet="".join(QUIET.format(i=i) for i in range(quiet)))


def same(a, b):
    """Equal path lists, each decision keeping the very test node (the rules read the list whole)."""
    return a == b and all(
        len(x.decisions) == len(y.decisions) and all(p[2] is q[2] for p, q in zip(x.decisions, y.decisions))
        for x, y in zip(a, b)
    )


def _walk(monkeypatch, source: str, every_statement: bool):
    """The paths of every loop the linter follows in ``source``, and the findings, with the merge made
    after every statement (the definition) or as the walk does it now; and the number of merges."""
    tree = ast.parse(source)
    paths, merges = [], []
    walk = _flow.Walker.iteration_paths

    def recording(self, loop, enclosing=None):
        out = walk(self, loop, enclosing)
        paths.append(out)
        return out

    def counting(states):
        merges.append(len(states))
        return merge_paths(states)

    with monkeypatch.context() as m:
        m.setattr(_flow.Walker, "iteration_paths", recording)
        m.setattr(_flow, "merge_paths", counting)
        if every_statement:
            m.setattr(_flow, "_extends", lambda new, old: False, raising=False)
        findings = Checker(tree, source, "trainer.py").run()
    return tree, paths, sorted(map(tuple, findings)), len(merges)


def test_a_trainer_walks_to_the_same_paths_with_fewer_merges(monkeypatch):
    source = trainer()
    tree, now, found_now, merges_now = _walk(monkeypatch, source, every_statement=False)
    # the definition on the very same tree (its nodes are the events' nodes)
    _, definition, found_def, merges_def = _walk(monkeypatch, source, every_statement=True)
    assert len(now) == len(definition) > 0
    # the same paths, compared by what they hold (the two runs parsed the source apart: nodes by place)
    assert [[(tuple((e.kind, e.node.lineno, e.target) for e in p.events), tuple((k, v) for k, v, _ in p.decisions), p.end)
             for p in ps] for ps in now] == \
           [[(tuple((e.kind, e.node.lineno, e.target) for e in p.events), tuple((k, v) for k, v, _ in p.decisions), p.end)
             for p in ps] for ps in definition]
    assert found_now == found_def
    # Work: 40 quiet lines each merged the list again (merge_paths returned it as it was); now
    # each run of them merges once
    assert merges_def >= 40
    assert merges_now <= merges_def - 35  # 87 and 7 today


def test_the_same_tree_gives_the_same_path_objects_as_the_definition(monkeypatch):
    """On one parsed tree (the events' nodes shared), the lists are equal and keep the same test nodes."""
    source = trainer(branches=5, quiet=8)
    tree = ast.parse(source)
    loop = next(n for n in ast.walk(tree) if isinstance(n, ast.For))
    optimizers = frozenset({"opt"})

    def paths(every_statement):
        with monkeypatch.context() as m:
            if every_statement:
                m.setattr(_flow, "_extends", lambda new, old: False, raising=False)
            return _flow.Walker(lambda node: True, {}, {}, optimizers).iteration_paths(loop)

    now, definition = paths(False), paths(True)
    assert len(now) > _flow.MERGE_AT  # past the threshold: the merges ran
    assert same(now, definition)


@pytest.mark.slow
def test_the_fixtures_and_corpus_lint_the_same_as_with_a_merge_after_every_statement(monkeypatch):
    for path in FILES:
        source = path.read_text(errors="replace")
        with monkeypatch.context() as m:
            m.setattr(_flow, "_extends", lambda new, old: False, raising=False)
            definition = [tuple(f) for f in check_source(source, str(path)).findings]
        assert [tuple(f) for f in check_source(source, str(path)).findings] == definition, path


# ------------------------------------------------------------------ _extends: when a list merges as before

def _random_paths(rng, n_paths, n_keys):
    nodes = [ast.Name(id=f"n{i}") for i in range(3)]
    events = [(), (Event("backward", nodes[0], "loss"),), (Event("step", nodes[1], "opt"),)]
    keys = [f"k{i}" for i in range(n_keys)]
    out = []
    for _ in range(n_paths):
        chosen = rng.sample(keys, rng.randint(0, n_keys))
        decisions = tuple((k, rng.random() < 0.5, ast.Name(id=k)) for k in chosen)
        out.append(Path(rng.choice(events), decisions, rng.choice([None, None, None, "continue", "return"])))
    return out


def test_a_list_the_merge_left_as_it_was_still_merges_to_itself_with_the_same_events_added():
    """The claim ``_extends`` rests on, checked against the merge itself on random lists."""
    rng = random.Random(20261207)
    added = (Event("clear", ast.Name(id="z"), "opt"), Event("backward", ast.Name(id="w"), "loss"))
    checked = 0
    for case in range(400):
        merged = merge_paths(_random_paths(rng, rng.randint(2, 30), rng.randint(1, 5)))
        if merge_paths(list(merged)) != merged or not all(a is b for a, b in zip(merge_paths(list(merged)), merged)):
            continue  # not a list the merge leaves as it is: the walk merges it again
        for tail in ((), added[:1], added):
            new = [p if p.end is not None else p._replace(events=p.events + tail) for p in merged]
            assert _flow._extends(new, merged)
            assert same(merge_paths(list(new)), new), case
            checked += 1
    assert checked > 100


def test_extends_refuses_what_can_merge_otherwise():
    """Negative controls: each change below can make a list merge differently, and is refused."""
    t = ast.Name(id="t")
    ev = Event("step", ast.Name(id="s"), "opt")
    other = Event("clear", ast.Name(id="c"), "opt")
    old = [Path((), (("a", True, t),)), Path((), (("a", False, t),), "return"), Path((), (("b", True, t),))]
    assert _flow._extends(list(old), old)
    assert _flow._extends([old[0]._replace(events=(ev,)), old[1], old[2]._replace(events=(ev,))], old)
    # one live path gets an event the other does not (they could now merge with an ended one, or split)
    assert not _flow._extends([old[0]._replace(events=(ev,)), old[1], old[2]], old)
    assert not _flow._extends([old[0]._replace(events=(ev,)), old[1], old[2]._replace(events=(other,))], old)
    # a path ends, an ended one changes, a decision changes, the order or the length changes
    assert not _flow._extends([old[0]._replace(end="continue"), old[1], old[2]], old)
    assert not _flow._extends([old[0], old[1]._replace(end=None), old[2]], old)
    assert not _flow._extends([old[0]._replace(decisions=()), old[1], old[2]], old)
    assert not _flow._extends([old[2], old[1], old[0]], old)
    assert not _flow._extends(old[:2], old)
    # the merge indeed treats the first and last refusals differently from the list before
    a = Path((), (("k", True, t),), None)
    b = Path((ev,), (("k", False, t),), None)
    assert merge_paths([a, b]) == [a, b]
    assert merge_paths([a._replace(events=(ev,)), b]) != [a._replace(events=(ev,)), b]


# ------------------------------------------------------------------ GG112's walk

GG112_TRAINER = '''
import torch
from torch.cuda.amp import GradScaler

def clip_and_step(model, opt, scaler, args):
    if args.fp16:
        scaler.unscale_(opt)
    if args.max_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
    if args.fp16:
        scaler.step(opt)
    else:
        opt.step()

def train(model, opt, loader, args):
    scaler = GradScaler()
    for epoch in range(args.epochs):
        for step, batch in enumerate(loader):
            loss = model(batch)
            if args.fp16:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            if args.mode == 1:
                clip_and_step(model, opt, scaler, args)
            elif args.mode == 2:
                clip_and_step(model, opt, scaler, args)
            else:
                clip_and_step(model, opt, scaler, args)
            opt.zero_grad()
'''


def _gg112_flows(monkeypatch, source):
    flows = []
    init = gg112.Flow.__init__

    def recording(self, module):
        init(self, module)
        flows.append(self)

    monkeypatch.setattr(gg112.Flow, "__init__", recording)
    findings = check_source(source, "t.py").findings
    return flows, findings


def test_gg112_keeps_each_branch_test_once(monkeypatch):
    flows, findings = _gg112_flows(monkeypatch, GG112_TRAINER)
    assert len(flows) == 1
    tests = flows[0].tests
    # the helper's `if args.fp16:` is met at three calls and two passes of each loop: kept once per node
    fp16 = [key for key, seen in tests.items() if any("fp16" in ast.dump(t) for t in seen)]
    assert fp16
    for key, seen in tests.items():
        assert len(seen) == len({id(t) for t in seen}), key
    every_if = [n.test for n in ast.walk(ast.parse(GG112_TRAINER)) if isinstance(n, ast.If)]
    assert sum(len(seen) for seen in tests.values()) <= len(every_if)
    assert not [f for f in findings if f.code == "GG112"]  # unscaled before the clip on every path


def test_gg112_stores_are_the_subtree_definition():
    for path in FILES[:20] + [FilePath(__file__)]:
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue  # a fixture of the GG000 report
        for node in ast.walk(tree):
            if isinstance(node, ast.stmt):
                want = [n for n in subtree(node)
                        if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del))]
                got = gg112._stores(node)
                assert len(got) == len(want) and all(a is b for a, b in zip(got, want))
