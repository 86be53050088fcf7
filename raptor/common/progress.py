"""Progress bars that suit both a terminal and a log file.

On a terminal every bar is a live tqdm bar (nested ones, such as the batches of an epoch, below their
parent). In a log file (DVC's stage output, a Prefect worker, ``nohup``) cursor movements become
debris (``ESC[A``) and live updates become thousands of carriage-return fragments, so there nested
bars are off and a top-level bar writes a plain line (``\n``-terminated, no ``\r``) at most every
``LOG_INTERVAL_S`` seconds; per-epoch numbers go to the run's logger (one line per epoch in the
Prefect task run's log, ``tasks/train.py``) and MLflow anyway.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Iterable, Optional, TextIO

#: Seconds between two lines of a top-level bar when stderr is not a terminal.
LOG_INTERVAL_S = 60.0


def on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class LineFile:
    """A file for a bar in a log: each of tqdm's in-place updates (``\r`` + status, cursor moves)
    becomes one plain line, so a log file holds whole lines only."""

    _CONTROL = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

    def __init__(self, target: Optional[TextIO] = None) -> None:
        self.target = target

    def _out(self) -> TextIO:
        return self.target if self.target is not None else sys.stderr

    def write(self, text: str) -> int:
        for piece in self._CONTROL.sub("", text).replace("\r", "\n").split("\n"):
            piece = piece.rstrip()
            if piece:
                self._out().write(piece + "\n")
        return len(text)

    def flush(self) -> None:
        try:
            self._out().flush()
        except (AttributeError, ValueError):
            pass


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
        kwargs["file"] = LineFile(kwargs.get("file"))
    return tqdm(iterable, disable=not enabled or (nested and not terminal), **kwargs)
