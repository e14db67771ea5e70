"""The storage of the watch's tracker: per-parameter columns, held as one value while alike.

A column is a list over the tracker's parameters (in a fixed order), or one value while every
position holds it (:class:`Column`); :class:`Subset` addresses some positions, as one slice
of the columns when they are contiguous (read and written in C). :class:`ColumnStore` holds
the writes that keep a column as one value where they can (a base class of
``_tracker.Tracker``, whose parameters are ``self.params``). The C loops that read the
``.grad`` list and combine masks over the columns (:func:`grads_of`, :func:`versions_of`,
:func:`where`, :func:`pick`) are here too. Why the columns are kept this way is in
``_tracker``'s docstring.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import add, attrgetter, is_, is_not, mul, not_
from typing import List, Optional

import torch

_grad = attrgetter("grad")
_version = attrgetter("_version")


def grads_of(params: List[torch.Tensor]) -> list:
    """``[p.grad for p in params]``, in one C loop."""
    return list(map(_grad, params))


def versions_of(grads: list) -> List[int]:
    """The ``._version`` of each buffer, -1 for ``None``."""
    if any(map(is_, grads, repeat(None))):
        if not any(map(is_not, grads, repeat(None))):
            return [-1] * len(grads)
        return [-1 if g is None else g._version for g in grads]
    return list(map(_version, grads))


def where(mask) -> List[int]:
    """The positions where ``mask`` is true."""
    return list(compress(range(len(mask)), mask))


def pick(mask, bools_or_ints, value):
    """``value`` where ``mask`` is true, else the element of ``bools_or_ints`` (ints and bools only)."""
    if all(mask):  # the steady state of a correct loop: every position (one C scan, no arithmetic)
        return [value] * len(mask)
    return list(map(add, map(mul, mask, repeat(value)), map(mul, map(not_, mask), bools_or_ints)))


class Subset:
    """Some of the tracker's positions: one slice of the columns when they are contiguous (read and written in C)."""

    __slots__ = ("sl", "idx")

    def __init__(self, idx: List[int]):
        if idx and idx == list(range(idx[0], idx[0] + len(idx))):
            self.sl, self.idx = slice(idx[0], idx[0] + len(idx)), idx
        else:
            self.sl, self.idx = None, idx

    def get(self, col: list) -> list:
        if self.sl is not None:
            return col[self.sl]
        return [col[i] for i in self.idx]

    def put(self, col: list, values: list) -> None:
        if self.sl is not None:
            col[self.sl] = values
        else:
            for i, v in zip(self.idx, values):
                col[i] = v


MIXED = object()  # a column's one value when its positions do not (or may not) all hold the same


def _same(a, b) -> bool:
    """``a`` and ``b`` are the same column value (ints by value, everything else by identity)."""
    return a is b or (type(a) is int and type(b) is int and a == b)


class Column:
    """A column of the tracker: a list over its parameters, or one value while every position holds it.

    A correct loop's events set whole columns to one value (every buffer cleared
    at the same pass, every parameter reached by the last one, every gradient
    applied by the step). Held as that value (``flat_<name>``), such a write costs
    nothing per parameter, and the questions the next event asks ("is any
    gradient consumed? pending?") take one comparison. The list is made when
    something reads the column as one (then ``flat_<name>`` still tells the value
    if they are all alike, else it is ``MIXED``).
    """

    def __set_name__(self, owner, name):
        self.store, self.flat = "_" + name, "flat_" + name

    def __get__(self, tracker, owner=None):
        if tracker is None:
            return self
        d = tracker.__dict__
        col = d[self.store]
        if col is None:
            col = d[self.store] = [d[self.flat]] * len(tracker.params)
        return col

    def __set__(self, tracker, values: list) -> None:
        d = tracker.__dict__
        d[self.store] = values
        d[self.flat] = MIXED


class ColumnStore:
    """The writes into the columns of :class:`_tracker.Tracker` (its :class:`Column` attributes)."""

    def uniform(self, name: str, value) -> None:
        """Every position of column ``name`` holds ``value`` now."""
        d = self.__dict__
        d["_" + name] = None
        d["flat_" + name] = value

    def _put(self, name: str, sub: Subset, values: Optional[list], value=MIXED) -> None:
        """``values`` (over ``sub``; None: ``value`` at each) into column ``name``. ``value``: what they all
        are, when known (then a write over every position keeps one value, not a list)."""
        d = self.__dict__
        flat = d["flat_" + name]
        if value is not MIXED:
            if self._whole(sub):
                self.uniform(name, value)
                return
            if d["_" + name] is None and _same(flat, value):
                return  # it is that value everywhere already
        sub.put(getattr(self, name), values if values is not None else [value] * len(sub.idx))
        if not _same(flat, value):
            d["flat_" + name] = MIXED

    def _whole(self, sub: Subset) -> bool:
        """``sub`` is every position (its length alone does not say: an optimizer may list a parameter twice)."""
        sl = sub.sl
        return sl is not None and sl.start == 0 and sl.stop == len(self.params)

    def _set_at(self, name: str, positions: List[int], value) -> None:
        """Column ``name`` holds ``value`` at ``positions``."""
        d = self.__dict__
        alike = _same(d["flat_" + name], value)
        if alike and d["_" + name] is None:
            return
        col = getattr(self, name)
        for i in positions:
            col[i] = value
        if not alike:
            d["flat_" + name] = MIXED
