"""Progress bars that suit both a terminal and a log file.

On a terminal every bar is a live tqdm bar (nested ones, such as the batches of an epoch, below their
parent). In a log file (DVC's stage output, a Prefect worker, ``nohup``) cursor movements become
debris (``ESC[A``) and live updates become thousands of lines, so there nested bars are off and a
top-level bar writes a line at most every ``LOG_INTERVAL_S`` seconds; per-epoch numbers go to the
run's logger and MLflow anyway.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, Optional

#: Seconds between two lines of a top-level bar when stderr is not a terminal.
LOG_INTERVAL_S = 60.0


def on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def progress_bar(iterable: Optional[Iterable] = None, *, enabled: bool = True, nested: bool = False, **kwargs: Any):
    """A ``tqdm`` bar over ``iterable`` (``kwargs`` as for tqdm), shown as described above: a nested bar
    only on a terminal; a top-level one in a log file rate-limited to one line per ``LOG_INTERVAL_S``."""
    from tqdm.auto import tqdm

    terminal = on_terminal()
    if nested:
        kwargs.setdefault("leave", False)
    if not terminal:
        kwargs["mininterval"] = max(kwargs.get("mininterval", 0.1), LOG_INTERVAL_S)
        kwargs.setdefault("ascii", True)
        kwargs["dynamic_ncols"] = False
    return tqdm(iterable, disable=not enabled or (nested and not terminal), **kwargs)
