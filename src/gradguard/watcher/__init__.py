"""The run-time watch: :class:`watch` (``gradguard.watch``) and what ``gradguard run`` uses.

The package is named ``watcher`` so that ``gradguard.watch`` is always the class.

Usage (see :class:`watch`)::

    with gradguard.watch(mode="raise") as w:     # or "warn" (default), "record"
        train()
    print(w.findings)

Modules, each using only those after it: ``_session`` (one active watch:
events in order, dispatched to the rules) -> ``_hooks`` (what is installed into
torch, and per-thread dispatch), ``rules/`` (one module per code: its criteria,
its memory, its words' specifics; reading ``_view``'s views), ``_reporter``
(dedupe, parameter names, warn/raise/record) -> ``_view`` -> ``_tracker`` (which
backward pass's gradient is in which ``.grad`` buffer) -> ``_by_hand`` (the few checks
that read values) -> ``_columns`` (the buffers as columns), ``_records`` (one record per
backward pass, one per optimizer) -> ``_graph`` (reading a loss's autograd graph),
``_source`` (the user's line). The Accumulator's marks come through
:mod:`gradguard._channel`.
"""

from __future__ import annotations

from contextlib import ContextDecorator
from typing import Callable, Iterable, List, Optional, Tuple, Union

from .._errors import GradguardError
from ..findings import Finding
from ..rules import parse_codes
from .._channel import accumulator_backward, in_accumulator_backward

__all__ = ["watch", "user_site", "describe_site", "accumulator_backward", "in_accumulator_backward"]

_MODES = ("warn", "raise", "record")


class watch(ContextDecorator):
    """Watch every optimizer, parameter and backward pass for gradient-buffer bugs.

    Use it as a context manager or a decorator. While it is active it sees every
    optimizer (built before or inside the block), every backward pass and every
    clearing of ``.grad`` (``zero_grad``, ``p.grad = None``, ``p.grad.zero_()``),
    and reports the run-time rules GG101–GG111 (``gradguard rule CODE``).
    Everything it installs is removed on exit, also when the block raises,
    and whatever order several watches exit in.

    A watch belongs to the thread that entered it: it sees the backward
    passes, clearings and steps made on that thread, and never reads the
    parameters of another thread's training. Two threads can each train
    under their own watch.
    End-of-run rules (GG103 unapplied gradient, GG106 orphan gradient) are
    checked when the block ends normally. A discarded gradient (GG102) is
    reported once it is systematic: the same clearing line discarded finite
    gradient in three consecutive optimizer-step intervals (a ``zero_grad``
    between ``backward`` and ``step``, or on every micro-batch); skipping an
    update on purpose now and then (NaN/Inf, a loss spike) is not reported.

    Args:
        mode: ``"warn"`` (emit a :class:`gradguard.GradientBugWarning` at the
            user's line), ``"raise"`` (raise :class:`gradguard.GradientBugError`
            at the offending ``step()``, ``zero_grad()`` or ``backward()``, before
            the optimizer applies a bad update) or ``"record"`` (only collect).
        ignore: rule codes (or prefixes) not to report, e.g. ``("GG107",)`` or ``"GG107,GG109"``.
        rewrite: for framework integrations: a function applied to each finding
            before it is recorded, warned or raised (to point at the user's
            ``training_step`` rather than the ``fit`` call, and give the
            framework's advice). ``None`` keeps findings as found.

    Attributes:
        findings: the :class:`gradguard.Finding` list, each reported once per
            code and source line; it keeps growing if the watch is entered again.

    Raises:
        GradguardError: for an unknown mode or rule code.

    >>> import torch, gradguard as gg
    >>> model = torch.nn.Linear(2, 1)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> with gg.watch(mode="record") as w:
    ...     for _ in range(2):
    ...         model(torch.ones(4, 2)).mean().backward()
    ...         opt.step()          # no zero_grad: the second step reuses the first gradient
    >>> [f.code for f in w.findings]
    ['GG101']
    """

    def __init__(
        self,
        *,
        mode: str = "warn",
        ignore: Union[str, Iterable[str], None] = (),
        rewrite: Optional[Callable[[Finding], Finding]] = None,
    ):
        if mode not in _MODES:
            raise GradguardError(f"watch(mode={mode!r}): mode must be one of {', '.join(map(repr, _MODES))}")
        self.mode = mode
        self.ignore = parse_codes(ignore)
        self.rewrite = rewrite
        self.findings: List[Finding] = []
        self._reported: set = set()
        self._engine = None

    def __enter__(self) -> "watch":
        if self._engine is not None:
            raise GradguardError("this watch is already active: use a new gradguard.watch() for a nested block")
        try:
            from ._session import Session
        except ModuleNotFoundError as exc:
            from .._torch import is_missing_torch, missing_error  # torch is not a hard dependency

            if not is_missing_torch(exc):
                raise
            raise missing_error("gradguard.watch") from None
        engine = Session(self.mode, self.ignore, self.findings, self._reported, self.rewrite)
        engine.install()
        self._engine = engine
        return self

    def __exit__(self, exc_type, exc, tb) -> Optional[bool]:
        engine, self._engine = self._engine, None
        if engine is None:
            return None
        # End-of-run rules only for a block that ended normally or by sys.exit():
        # after a crash, gradients left in .grad say nothing about the loop.
        if exc_type is None:
            engine.close(check=True)  # may raise GradientBugError in "raise" mode
        else:
            try:
                engine.close(check=issubclass(exc_type, SystemExit))
            except GradguardError:
                pass  # recorded in .findings; never mask the block's own exception
        return None

    @property
    def active(self) -> bool:
        """Whether the watch is entered (between ``__enter__`` and ``__exit__``)."""
        return self._engine is not None

    @property
    def codes(self) -> List[str]:
        """Sorted codes of the findings so far.

        >>> watch(mode="record").codes
        []
        """
        return sorted({f.code for f in self.findings})

    def __repr__(self) -> str:
        return f"watch(mode={self.mode!r}, findings={len(self.findings)})"


def user_site(depth: int = 1) -> Tuple[Optional[str], Optional[int]]:
    """``(path, line)`` of the innermost frame of the user's own code, ``depth`` frames out from the caller.

    Frames of torch and gradguard are skipped, and so are installed libraries
    when a user frame lies further out (inside ``trainer.fit()`` that is the
    ``fit`` call). ``(None, None)`` when there is no frame outside them.
    """
    from ._source import Source

    return Source().site(depth + 1)


def describe_site(site: Tuple[Optional[str], Optional[int]], here=None) -> str:
    """How findings name a location: ``line 12`` inside the finding's own file ``here``, else ``path:line``."""
    from ._view import at

    return at(site, here)
