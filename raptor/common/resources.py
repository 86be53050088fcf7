"""Wall time and peak memory of one piece of work inside a long-lived process.

The pipeline runs its stages one after another in one process, so the process's lifetime peak
(``getrusage``'s ``ru_maxrss``) would report the largest stage for every later one. On Linux the peak
resident set (``VmHWM``) can be reset by writing ``5`` to ``/proc/self/clear_refs``: :func:`measure`
resets it on entry and reads it on exit, so each stage gets its own peak. Where that file cannot be
written (another OS, a restricted container) the lifetime peak is reported and marked as such.
Memory of other processes (Dask workers) is not counted. The peak is the process's resident memory,
so it includes heap that an earlier block freed but the allocator kept (:func:`raptor.common.runtime`'s
allocator tuning keeps up to 1 GiB): for a block after others it is an upper bound of its own need.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

_PROC = Path("/proc/self")


@dataclass
class Usage:
    """Filled in when the ``with measure()`` block ends."""

    seconds: float = 0.0
    peak_rss_bytes: int = 0
    peak_is_per_block: bool = False  # False: the process's lifetime peak (the reset was not possible)

    @property
    def peak_rss_gb(self) -> float:
        return self.peak_rss_bytes / 1e9

    def describe(self) -> str:
        peak = f"peak RSS {self.peak_rss_gb:.2f} GB" + ("" if self.peak_is_per_block else " (process lifetime)")
        return f"{self.seconds:.1f} s, {peak}"


def _reset_peak() -> bool:
    try:
        (_PROC / "clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> int:
    try:
        for line in (_PROC / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, kB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


@contextmanager
def measure():
    """``with measure() as usage: ...``; afterwards ``usage.seconds`` and ``usage.peak_rss_bytes``."""
    usage = Usage(peak_is_per_block=_reset_peak())
    started = time.perf_counter()
    try:
        yield usage
    finally:
        usage.seconds = time.perf_counter() - started
        usage.peak_rss_bytes = _peak_bytes()


def release_freed_memory() -> bool:
    """Return the heap that freed objects left behind to the OS (``gc``, then glibc's ``malloc_trim``).

    :func:`raptor.common.runtime.tune_malloc` keeps freed heap resident (up to 1 GiB per arena), which speeds
    up a hot loop but lets a long-lived process carry one piece of work's garbage into the next, and
    into the next one's measured peak. Call it between pieces of work, not inside a loop. ``False``
    where there is no glibc (nothing is released).
    """
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


# ------------------------------------------------------------------------------ the stage usage log
# One JSON object per line, appended as each pipeline stage ends: a record of what every stage cost,
# kept across pipeline runs (the last record of a stage is its latest run), read by `raptor results`.


def append_usage(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append ``record`` as one line of ``path`` (created with its folder if missing).

    One ``write`` of a short line to a file opened for appending: a reader sees the whole line or,
    if the process is killed mid-write, a torn last line that :func:`read_usage` skips.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(dict(record), sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_usage(path: str | Path) -> dict[str, dict[str, Any]]:
    """``{stage: its last record}`` from a usage log (``{}`` if there is none).

    A torn last line (a killed write) is skipped; a malformed line before it is an error naming the
    file and line, since something other than :func:`append_usage` wrote it.
    """
    path = Path(path)
    if not path.is_file():
        return {}
    lines = path.read_text().splitlines()
    last: dict[str, dict[str, Any]] = {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            stage = record["stage"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            if i == len(lines):
                continue
            raise ValueError(f"{path}, line {i}: not a stage usage record ({exc})") from None
        last[stage] = record
    return last
