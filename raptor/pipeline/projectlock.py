"""One lock per project, taken by every orchestration entry point before it writes anything.

Why DVC's own lock is not enough: ``dvc repro`` releases its repository lock while a stage's command
runs (so that the command may call DVC itself). A ``python -m flows pipeline`` started meanwhile
therefore got DVC's lock, resolved the params again (``build/params.json``) and trained; the running
``dvc repro`` then recorded the *new* params in ``dvc.lock`` for a stage that had run with the old
ones, and every later ``dvc repro`` said "didn't change".

So every entry point that writes into the project takes this lock first: the pipeline flow
(:func:`flows.pipeline.pipeline_flow`, also what the scheduled deployment runs), every stage command
(``python -m flows STAGE ...``), the ``params`` stage (``python -m raptor.pipeline.stages resolve``) and a
sweep. Between the stages of a ``dvc repro`` DVC's lock protects the project; inside a stage its
command holds this one, so a concurrent pipeline run is refused at once, before it writes anything.

* **flock(2), not a pid file**: the kernel drops the lock when its process ends, however it ends
  (kill -9 included), so no stale lock is ever left to remove by hand. The file itself stays.
* **Re-entrant within a process**: the pipeline flow runs each stage command in its own process
  (:func:`flows.pipeline._run_command`), and that command takes the lock again. flock locks belong to
  an open file, so a second ``open`` + ``flock`` by the same process would refuse itself; a count per
  lock file avoids that.
* **Never blocks**: a busy project is reported at once, in one line naming the lock file and its
  holder (pid, start time, command: written into the lock file by whoever holds it).
* **Where**: ``<root>/.dvc/tmp/raptor.lock`` beside DVC's own ``lock`` (git-ignored by DVC's
  ``.dvc/.gitignore``, never part of an experiment's copy, not removed by cleaning ``build/``: a lock
  file deleted while held would let a second process lock a new file of the same name). A folder that
  is not a DVC project (a stage run by hand in a scratch folder) uses ``<root>/build/raptor.lock``;
  ``.dvc`` is never created, since ``dvc init`` would then refuse the folder.

The project root is the folder DVC runs the stage commands in (their working directory; the
ablation's ``wdir: ..`` is the root too), the pipeline's ``root`` and the params file's folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Union

#: The lock file's name, in ``.dvc/tmp`` (or ``build`` outside a DVC project).
LOCK_NAME = "raptor.lock"
#: Where the lock lives in a DVC project (beside DVC's ``.dvc/tmp/lock``) and outside one.
DVC_TMP = Path(".dvc") / "tmp"
FALLBACK_DIR = Path("build")
#: The holder line is cut to this many characters in a message: a stage command lists every path.
HOLDER_CHARS = 300
#: At most this many bytes of a holder line are read back.
HOLDER_BYTES = 4096


class ProjectBusy(RuntimeError):
    """Another process holds the project lock: the caller must stop before writing anything."""


#: Lock file -> [file descriptor, depth] of the locks this process holds.
_held: dict[Path, list[int]] = {}
_guard = threading.Lock()


def lock_path(root: Union[str, Path] = ".") -> Path:
    """The project lock file of the project at ``root`` (absolute, so that every path naming it agrees)."""
    root = Path(root).resolve()
    return (root / DVC_TMP if (root / ".dvc").is_dir() else root / FALLBACK_DIR) / LOCK_NAME


def _describe_self() -> str:
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    if argv:
        argv[0] = Path(argv[0]).name
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = " ".join(shlex.join(argv).split())  # one line, whatever the arguments hold
    return f"pid {os.getpid()} since {started}: {command}"


def _holder(fd: int) -> str:
    """What the lock file says about its holder (it writes that line right after locking)."""
    try:
        text = os.pread(fd, HOLDER_BYTES, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    line = text.splitlines()[0] if text else ""
    if not line:
        return "a process that has not written its name yet"
    return line if len(line) <= HOLDER_CHARS else line[:HOLDER_CHARS] + " ..."


def held(root: Union[str, Path] = ".") -> bool:
    """Whether this process holds the lock of the project at ``root``."""
    return lock_path(root) in _held


@contextlib.contextmanager
def project_lock(root: Union[str, Path] = ".") -> Iterator[Path]:
    """Hold the project lock of ``root`` for the block; yields the lock file.

    Raises :class:`ProjectBusy` at once (nothing waits, nothing is written) when another process
    holds it. Taking it again in the same process nests.
    """
    path = lock_path(root)
    with _guard:
        entry = _held.get(path)
        if entry is not None:
            entry[1] += 1
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise ProjectBusy(
                    f"this project is busy: {path} is held by {holder}; wait for that run to end (the lock "
                    f"goes with its process, there is nothing to remove); nothing was written") from None
            except BaseException:
                os.close(fd)
                raise
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, (_describe_self() + "\n").encode("utf-8", "replace"), 0)
            except OSError:
                pass  # the lock holds without its description: a refused run says less about it
            entry = _held[path] = [fd, 1]
    try:
        yield path
    finally:
        with _guard:
            entry[1] -= 1
            if entry[1] == 0:
                del _held[path]
                fd = entry[0]
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)  # the file names no one when no one holds it
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
