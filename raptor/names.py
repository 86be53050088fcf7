"""Names <-> ids and dates <-> time steps, for queries typed by people (``raptor explain``)."""

from __future__ import annotations

import datetime as _dt
import difflib
from typing import Optional, Sequence


class UnknownNameError(ValueError):
    """A name that is not in the dictionary; the message suggests the closest ones."""


def _norm(name: str) -> str:
    return " ".join(name.replace("_", " ").lower().split())


def resolve(name: str, names: Sequence[str], kind: str, n_suggestions: int = 5) -> int:
    """Id of ``name`` in ``names`` (case-, space- and underscore-insensitive; an integer id works too)."""
    if name.strip().lstrip("-").isdigit():
        idx = int(name)
        if 0 <= idx < len(names):
            return idx
        raise UnknownNameError(f"{kind} id {idx} is outside 0..{len(names) - 1}")
    normed = [_norm(n) for n in names]
    key = _norm(name)
    if key in normed:
        return normed.index(key)
    close = difflib.get_close_matches(key, normed, n=n_suggestions, cutoff=0.5)
    contains = [n for n in normed if key in n and n not in close][: max(0, n_suggestions - len(close))]
    suggestions = [names[normed.index(c)] for c in close + contains]
    hint = f"; did you mean: {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
    raise UnknownNameError(f"unknown {kind} {name!r}{hint}")


def date_to_step(date: str, start_date: Optional[str]) -> int:
    """Time step of ``date`` (``YYYY-MM-DD``) given the date of step 0; an integer passes through."""
    if date.strip().lstrip("-").isdigit():
        return int(date)
    if not start_date:
        raise ValueError("dates need data.start_date in params (or give the time step as an integer)")
    try:
        d = _dt.date.fromisoformat(date)
    except ValueError:
        raise ValueError(f"not a date (YYYY-MM-DD) or time step: {date!r}") from None
    return (d - _dt.date.fromisoformat(start_date)).days


def step_to_date(step: int, start_date: Optional[str]) -> str:
    if not start_date:
        return f"t={step}"
    return (_dt.date.fromisoformat(start_date) + _dt.timedelta(days=int(step))).isoformat()
