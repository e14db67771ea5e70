"""The linter's fast text searches give exactly what the plain searches they replace give.

Each search below was made faster by looking only where a match can start (a name's
occurrences, the lines whose first word is ``class``/``from``/``import``) or by reading AST
fields directly; the reference each is compared with is the plain, slow form (a regular
expression tried at every character, ``ast.walk``). The inputs hold the shapes where a
shortcut could go wrong: a name inside a longer word or after digits, non-ASCII letters, a
``class`` line inside a string or inside the parentheses of another header, an import whose
names span lines.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gradguard.lint._ast import child_nodes, subtree
from gradguard.lint._line_filter import _CALL_SITE, _CallSites
from gradguard.lint._project import _CLASS, _FROM_IMPORT, _IMPORT, line_matches, matches_at

# The search the call sites were read with before: every name followed by "(".
REFERENCE_CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")

TRICKY = '''\
import os, sys as system
from .module import (Module,
    Linear as Lin)  # a comment
from torch import optim
class Net(Module):
    """A docstring that mentions
class Fake(Base):
    and from x import y, and 2D (tensors) and éfoo(1) and 9abc(2)
"""
    def step(self):
        self.optim.step()
        helper (1); _helper(2); helper2(3); ahelper(4); x.helper(5)
        partial(self.step, 1)
class Other(
    Net,
    Base2,
):
    pass
    def é_name(self): pass
if True:
    class Nested(Net): pass
"""
class Broken(
"""
class After(Net):
    pass
'''


def reference_sites(source: str, names) -> dict:
    out: dict = {}
    for match in REFERENCE_CALL.finditer(source):
        if match.group(1) in names:
            out.setdefault(match.group(1), []).append(match.start())
    return out


def torch_sources(limit: int = 40):
    torch_spec = __import__("importlib").util.find_spec("torch")
    if torch_spec is None or not torch_spec.submodule_search_locations:
        return []
    root = Path(list(torch_spec.submodule_search_locations)[0])
    return [p.read_text(encoding="utf-8") for p in sorted((root / "nn" / "modules").glob("*.py"))[:limit]]


@pytest.mark.slow
@pytest.mark.parametrize("one_at_a_time", [0, 3, 10**6])  # one pass at once, after three names, never
def test_call_sites_match_the_plain_search_by_name_and_in_one_pass(one_at_a_time, monkeypatch):
    monkeypatch.setattr(_CallSites, "ONE_AT_A_TIME", one_at_a_time)
    for source in [TRICKY] + torch_sources():
        names = {m.group(1) for m in REFERENCE_CALL.finditer(source)} | {"helper", "D", "abc", "foo", "é_name", "éfoo"}
        sites = _CallSites(source, names)
        expected = reference_sites(source, names)
        partial_sites = {m.group(1): m.start() for m in re.finditer(r"\bpartial\s*\(\s*(?:self\s*\.\s*)?([A-Za-z_]\w*)", source)}
        for name in sorted(names):
            want = sorted(expected.get(name, []) + ([partial_sites[name]] if name in partial_sites else []))
            assert sorted(sites[name]) == want, (name, one_at_a_time)
    # negative control: the tricky text has calls a plain word search would get wrong
    sites = _CallSites(TRICKY, {"helper", "D", "abc", "éfoo"})
    assert len(sites["helper"]) == 2  # `helper (1)` and `x.helper(5)`, not _helper/helper2/ahelper
    assert sites["D"] and sites["abc"]  # after digits: `2D (` and `9abc(` are calls of D and abc
    assert sites["éfoo"] == [] and not re.search(r"\bhelper\s*\(", "ahelper(") and re.search(r"helper\(", "ahelper(")


def test_the_call_site_expression_finds_what_the_plain_one_finds():
    for source in [TRICKY] + torch_sources():
        plain = [(m.group(1), m.start()) for m in REFERENCE_CALL.finditer(source)]
        assert [(m.group(1), m.start(1)) for m in _CALL_SITE.finditer(source)] == plain


@pytest.mark.parametrize("pattern,word", [(_CLASS, "class"), (_FROM_IMPORT, "from"), (_IMPORT, "import")])
def test_line_matches_are_what_finditer_gives(pattern, word):
    for source in [TRICKY] + torch_sources():
        expected = [(m.start(), m.end(), m.groups()) for m in pattern.finditer(source)]
        assert [(m.start(), m.end(), m.groups()) for m in line_matches(pattern, source, word)] == expected
    # negative control: the string's `class Fake` line is a match of the expression, and the
    # `class After` line is not tried: it is inside the match before (the bases of `Broken`
    # run to the first ")")
    names = [m.group(2) for m in line_matches(_CLASS, TRICKY, "class")]
    assert names == ["Net", "Fake", "Other", "Nested", "Broken"]


def test_matches_at_skips_starts_inside_the_match_before():
    pattern = re.compile(r"ab+")
    text = "abbb ab abb"
    starts = [0, 1, 2, 5, 8]  # 1 and 2 lie inside the first match
    assert [m.span() for m in matches_at(pattern, text, starts)] == [m.span() for m in pattern.finditer(text)]
    assert [m.span() for m in matches_at(pattern, text, [5])] == [(5, 7)]  # a start not given is not tried


@pytest.mark.slow
def test_subtree_and_child_nodes_are_ast_walk_and_iter_child_nodes():
    for source in [TRICKY] + torch_sources(10):
        tree = ast.parse(source)
        assert list(subtree(tree)) == list(ast.walk(tree))
        for node in ast.walk(tree):
            assert child_nodes(node) == list(ast.iter_child_nodes(node))
    # negative control: the order matters (breadth first), and a depth-first walk differs
    tree = ast.parse("f(g(x), y)")
    depth_first, pending = [], [tree]
    while pending:
        node = pending.pop()
        depth_first.append(node)
        pending.extend(reversed(list(ast.iter_child_nodes(node))))
    assert list(subtree(tree)) != depth_first and sorted(map(id, subtree(tree))) == sorted(map(id, depth_first))
