"""Names <-> ids and dates <-> time steps, for queries typed by people (``raptor explain``)."""

from __future__ import annotations

import datetime as _dt
import difflib
import re
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
    same = [i for i, n in enumerate(names) if n == name] or [i for i, n in enumerate(normed) if n == key]
    if len(same) == 1:
        return same[0]
    if same:  # a dictionary that names two ids alike: say so rather than pick one
        raise UnknownNameError(f"{kind} {name!r} is ambiguous: ids {', '.join(map(str, same[:10]))} have that "
                               "name; give the id")
    # Whole words of exactly one name ("Obama" for "Barack Obama") are that name.
    words = re.compile(rf"(^|\s){re.escape(key)}($|\s)")
    holding = [i for i, n in enumerate(normed) if key and words.search(n)]
    if len(holding) == 1:
        return holding[0]
    close = difflib.get_close_matches(key, normed, n=n_suggestions, cutoff=0.5)
    contains = [n for n in normed if key in n and n not in close][: max(0, n_suggestions - len(close))]
    suggestions = [names[normed.index(c)] for c in close + contains]
    hint = f"; did you mean: {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
    raise UnknownNameError(f"unknown {kind} {name!r}{hint}")


#: Calendar length of one time step after ingest (``datasets.<name>.granularity``, meta.json ``calendar``).
GRANULARITIES = ("year", "day", "hour", "15min")
_STEP = {"day": _dt.timedelta(days=1), "hour": _dt.timedelta(hours=1), "15min": _dt.timedelta(minutes=15)}


def _parse_when(text: str) -> _dt.datetime:
    try:
        return _dt.datetime.fromisoformat(text.strip().replace(" ", "T", 1))
    except ValueError:
        raise ValueError(f"not a date (YYYY-MM-DD[ HH:MM]) or time step: {text!r}") from None


def date_to_step(date: str, start_date: Optional[str], granularity: Optional[str] = "day") -> int:
    """Time step holding ``date`` (``YYYY-MM-DD``, or ``YYYY-MM-DD HH:MM`` for finer steps) given the
    date of step 0 and the length of a step (:data:`GRANULARITIES`); an integer passes through as a step,
    except with yearly steps, where an integer from the start year on is a year (``1994``)."""
    if date.strip().lstrip("-").isdigit():
        if granularity == "year" and start_date and int(date) >= _parse_when(start_date).year:
            return int(date) - _parse_when(start_date).year
        return int(date)
    if not start_date:
        raise ValueError("dates need the dataset's start_date (params `datasets`, or a calendar in the "
                         "ingested meta.json); give the time step as an integer instead")
    when, start = _parse_when(date), _parse_when(start_date)
    granularity = granularity or "day"
    if granularity == "year":
        return when.year - start.year
    return int((when - start) // _STEP[granularity])


def step_to_date(step: int, start_date: Optional[str], granularity: Optional[str] = "day") -> str:
    """The calendar label of ``step``: ``2014`` (year), ``2014-01-05`` (day), ``2014-01-05 13:00`` (hour),
    ``2014-01-05 13:15`` (15min); ``t=step`` without a start date."""
    if not start_date:
        return f"t={step}"
    start = _parse_when(start_date)
    granularity = granularity or "day"
    if granularity == "year":
        return f"{start.year + int(step):04d}"
    when = start + int(step) * _STEP[granularity]
    return when.date().isoformat() if granularity == "day" else when.strftime("%Y-%m-%d %H:%M")
