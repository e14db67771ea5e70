"""An ``if`` whose branches change nothing but its own decision is not forked once a loop's paths are merged.

Past ``MERGE_AT`` paths the flow merges, after every statement, the paths that differ only in the
value of one decision (``_flow.merge_paths``). A trainer's ``if args.option: x = f(y)`` (a line the
pre-filter keeps, no gradient-buffer event) used to double every path only for the merge to halve
them again, one statement later, at a cost that grew with the number of paths times the number of
decisions. The walk now makes the two branches one path where both ran through the same events
and ended alike, and only while the statement's paths are merged anyway; below the threshold the
paths keep every decision, as before.

The reference is the same walk with that shortcut turned off: the findings must be the same, and
so must the set of paths a loop is reduced to (events, end, decisions) where the merge is
order-independent. The negative control checks that the reference does fork (the counts differ).
"""

from __future__ import annotations

import ast

from gradguard.lint import _flow, check_source
from gradguard.lint._flow import MERGE_AT, Walker

TRAINER = '''
def train(model, opt, loader, args, scaler):
    for step, batch in enumerate(loader):
{forks}
        if args.fp16:
            scaler.scale(loss).backward()
        else:
            loss.backward()
{options}
        if (step + 1) % args.accum == 0:
            if args.fp16:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad()
'''

# each doubles the paths with different events: 2**5 = 32 paths, past the merge threshold
FORK = '''        if args.flag{i}:
            opt.zero_grad()
'''

# lines the pre-filter keeps (they name the optimizer) that run no gradient-buffer event
OPTION = '''        if args.option{i}:
            lr = opt.param_groups[0]["lr"] * {i}
        else:
            lr = opt.param_groups[0]["lr"]
'''


def _source(forks: int, options: int) -> str:
    return TRAINER.format(forks="".join(FORK.format(i=i) for i in range(forks)),
                          options="".join(OPTION.format(i=i) for i in range(options)))


def _no_shortcut(monkeypatch):
    monkeypatch.setattr(_flow, "_only_decided", lambda a, b, key: False)


def _paths(source):
    """The paths of the first loop of ``source`` (text, or a tree parsed once for two walks to compare)."""
    tree = ast.parse(source) if isinstance(source, str) else source
    loop = next(n for n in ast.walk(tree) if isinstance(n, ast.For))
    walker = Walker(lambda node: True, {}, {}, frozenset({"opt"}))
    return walker.iteration_paths(loop)


def _as_set(paths):
    return {(p.events, p.end, frozenset((k, v) for k, v, _ in p.decisions)) for p in paths}


def _count_merges(monkeypatch, source):
    calls = []
    real = _flow.merge_paths

    def counting(states):
        calls.append(len(states))
        return real(states)

    monkeypatch.setattr(_flow, "merge_paths", counting)
    paths = _paths(source)
    monkeypatch.setattr(_flow, "merge_paths", real)
    return paths, calls


def test_options_that_change_no_event_do_not_fork_a_merged_loop(monkeypatch):
    source = _source(forks=5, options=8)
    paths, calls = _count_merges(monkeypatch, source)
    # the forks of the options are never made: no statement of theirs has to be merged back
    # (the merges left are those of the forks that run different events: the flags, fp16, the step)
    assert len(calls) < 8


def test_the_paths_are_those_the_forking_walk_merges_to(monkeypatch):
    source = ast.parse(_source(forks=5, options=8))
    fast = _paths(source)
    _no_shortcut(monkeypatch)
    plain = _paths(source)
    assert len(fast) > MERGE_AT  # the shape is past the threshold
    assert _as_set(fast) == _as_set(plain)


def test_negative_control_the_forking_walk_merges_once_per_option(monkeypatch):
    _no_shortcut(monkeypatch)
    _, calls = _count_merges(monkeypatch, _source(forks=5, options=8))
    assert len(calls) >= 8


def test_findings_are_the_forking_walks(monkeypatch):
    source = _source(forks=5, options=8)
    fast = [tuple(f) for f in check_source(source, "trainer.py").findings]
    _no_shortcut(monkeypatch)
    plain = [tuple(f) for f in check_source(source, "trainer.py").findings]
    assert fast == plain
    assert fast  # the flags clear the gradients inside the window: there is something to find


def test_below_the_threshold_every_decision_is_kept(monkeypatch):
    """A small loop keeps the decision of an ``if`` that changed nothing, as before (the rules read it)."""
    paths = _paths(_source(forks=0, options=2))
    assert len(paths) <= MERGE_AT
    assert any(t.lineno and "option" in ast.unparse(t) for p in paths for _, _, t in p.decisions)
