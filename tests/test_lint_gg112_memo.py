"""GG112 keeps a helper's walk and reuses it: the same findings as walking the helper every time.

A loop's body is followed twice and a trainer's helper is called from several places with the same
states; GG112 keeps each helper's walk per (helper, call chain, bound arguments, states going in)
while nothing new has been met (a test or a loop collection seen for the first time). The reference
is the same rule with the kept walks turned off (every call walked again): the findings must be the
same, on a buggy program (a clip of scaled gradients inside a helper) and on its correct form (the
unscale before the clip, negative control: no finding).
"""

from __future__ import annotations

import textwrap

import pytest

import gradguard as gg
from gradguard.lint.rules import gg112_clip_before_unscale as gg112


def _program(unscale: bool) -> str:
    fix = "    scaler.unscale_(opt)\n" if unscale else ""
    return textwrap.dedent("""\
        import torch

        def clip(model, opt, scaler):
        {fix}    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

        def micro(model, opt, scaler, x):
            scaler.scale(model(x).sum()).backward()
            clip(model, opt, scaler)

        def train(model, opt, scaler, data, log):
            for x in data:
                micro(model, opt, scaler, x)
                if log:
                    print("step")
                micro(model, opt, scaler, x)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
        """).replace("{fix}", fix)


def _findings(source: str):
    return [(f.code, f.line, f.message) for f in gg.lint_source(source) if f.code == "GG112"]


@pytest.mark.parametrize("unscale", [False, True])
def test_kept_walks_give_the_findings_of_walking_every_call(monkeypatch, unscale):
    source = _program(unscale)
    walks = []
    walk = gg112.Flow._follow_walk

    def counted(self, fn, states, ctx):
        walks.append(fn.name)
        return walk(self, fn, states, ctx)

    monkeypatch.setattr(gg112.Flow, "_follow_walk", counted)
    kept = _findings(source)
    kept_walks = len(walks)

    # the reference: every call of a helper walked again
    walks.clear()
    monkeypatch.setattr(gg112.Flow, "_follow", lambda self, fn, states, ctx: counted(self, fn, states, ctx))
    every = _findings(source)

    assert kept == every
    assert bool(kept) != unscale  # the clip of scaled gradients is found; after the unscale, none
    assert kept_walks < len(walks)  # and the kept walks were reused
