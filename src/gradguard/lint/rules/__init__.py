"""One module per rule, ruff-style: ``ggNNN_rule_name.py`` holds that rule's check and nothing else.

A rule module defines ``CODE`` and ``check_loop(loop, report)`` (run on every
training loop of the program model), ``check_module(module, report)`` (run once
per file), or both. The model is built once per file by :mod:`.._checker`.
"""

from __future__ import annotations

from . import (
    gg000_syntax_error,
    gg101_stale_gradient,
    gg102_discarded_gradient,
    gg103_unapplied_gradient,
    gg104_unscaled_accumulation,
    gg105_unequal_weighting,
    gg107_zero_not_none,
    gg108_graph_in_grad,
    gg201_graph_kept_by_logging,
    gg301_ignored_num_items_in_batch,
)

#: Every rule module, in code order.
RULE_MODULES = (
    gg000_syntax_error,
    gg101_stale_gradient,
    gg102_discarded_gradient,
    gg103_unapplied_gradient,
    gg104_unscaled_accumulation,
    gg105_unequal_weighting,
    gg107_zero_not_none,
    gg108_graph_in_grad,
    gg201_graph_kept_by_logging,
    gg301_ignored_num_items_in_batch,
)
#: (code, check) run on every training loop.
LOOP_RULES = tuple((m.CODE, m.check_loop) for m in RULE_MODULES if hasattr(m, "check_loop"))
#: (code, check) run once per file.
MODULE_RULES = tuple((m.CODE, m.check_module) for m in RULE_MODULES if hasattr(m, "check_module"))
