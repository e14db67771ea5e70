"""One module per rule, ruff-style: ``ggNNN_rule_name.py`` holds everything the linter knows
about that rule, and the registries below are read from those modules.

A rule module defines:

* ``CODE``: its code in the rule catalogue (:data:`gradguard.RULES`, where its name,
  severity and explanation live);
* ``check_loop(loop, report)`` (run on every training loop of the program model),
  ``check_module(module, report)`` (run once per file), or both;
* optionally ``fix(tree, diagnostic)``: the repair of what it reported, or None where the
  model cannot prove the repair changes nothing but the bug (see :mod:`.._edits`);
* optionally ``PER_CALL = True``: ``check_loop`` also reads the functions the model takes for one
  update of a loop it cannot see (:mod:`.._per_call`);
* ``FIX_SAFETY``: ``"safe"`` or ``"unsafe"`` when it has a ``fix`` (the applicability of the
  repairs it builds, shown by ``gradguard rule``), ``None`` when it has none; one literal line,
  which :mod:`gradguard.rules` reads as text;
* ``FIXTURES``: its fixture pair in ``tests/lint_fixtures/`` (or, for a rule the watch also
  reports, the one program pair of both tools in ``tests/rule_pairs/``): code that must fire the
  rule (lines marked ``# expect: CODE``) and correct code of the same shapes that must not.

Adding a rule is adding its module here, its fixture pair and its catalogue entry:
nothing lists the modules by hand. ``python scripts/add_rule.py GGnnn name --severity ...``
writes all of them as stubs (docs/contributing.md, "Adding a rule").
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Callable, Dict, Tuple


def _discover() -> Tuple[ModuleType, ...]:
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name[:2] == "gg" and m.name[2:5].isdigit())
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in names)


#: Every rule module, in code order.
RULE_MODULES: Tuple[ModuleType, ...] = _discover()
#: (code, check) run on every training loop.
LOOP_RULES = tuple((m.CODE, m.check_loop) for m in RULE_MODULES if hasattr(m, "check_loop"))
#: The loop rules that also read a function taken for one update (``PER_CALL = True`` in the module,
#: see :mod:`.._per_call`): a verdict on what one call leaves in ``.grad`` for the next.
PER_CALL_RULES = frozenset(m.CODE for m in RULE_MODULES if getattr(m, "PER_CALL", False))
#: (code, check) run once per file.
MODULE_RULES = tuple((m.CODE, m.check_module) for m in RULE_MODULES if hasattr(m, "check_module"))
#: code -> the function building the fix of that rule's diagnostics.
FIXES: Dict[str, Callable] = {m.CODE: m.fix for m in RULE_MODULES if hasattr(m, "fix")}
