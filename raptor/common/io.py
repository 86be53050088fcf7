"""Atomic output writing: a crash never leaves a half-written artifact that a later stage trusts.

Files are written to a temporary sibling and renamed into place (``os.replace`` is atomic on
POSIX); directories are assembled in a temporary sibling directory and swapped in whole.

A temporary sibling is named ``.<name>.tmp-<host>-<pid>-<random>`` (``.old-`` for the previous
directory set aside during a swap): a process killed while writing leaves it behind, and the next
write of the same output removes it (:func:`remove_stale_temps`) once its writer's process is gone,
never a temporary of a writer that still runs.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

log = logging.getLogger("raptor")


#: Errors of a full disk, a quota or a file-size limit: reported as :class:`OutputError`.
_NO_ROOM = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


class RunMismatchError(RuntimeError):
    """A run folder holds checkpoints that cannot be continued, and the caller asked not to delete them."""


class OutputError(OSError):
    """An output could not be written (no space left, a quota, a size limit); names the output. The
    previous output at that path, if any, is untouched."""


#: This machine in temporary names (a process id means something on its own machine only).
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
#: Temporaries named before writers put their process in the name: removed once this old (seconds;
#: no write of this project takes a day without touching its temporary).
LEGACY_TEMP_STALE_AFTER_S = 24 * 3600
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?:tmp|old)-(?:(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)-)?[0-9a-f]{8}$")


def _temp_sibling(path: Path, kind: str = "tmp") -> Path:
    return path.parent / f".{path.name}.{kind}-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Remove the temporary siblings of ``path`` (``.<name>.tmp-*``, ``.<name>.old-*``) that a killed
    writer left: those of a process of this machine that no longer runs, and unnamed (older) ones
    untouched for :data:`LEGACY_TEMP_STALE_AFTER_S`. A temporary of a running writer, of this process
    or of another machine is kept. Safe to call at any time; returns what was removed."""
    path = Path(path)
    prefix, removed = f".{path.name}.", []
    try:
        siblings = [p for p in path.parent.iterdir() if p.name.startswith(prefix)]
    except FileNotFoundError:
        return removed
    for p in siblings:
        m = _TEMP_NAME.match(p.name)
        if m is None or m["name"] != path.name:
            continue
        try:
            if m["pid"] is not None:
                pid = int(m["pid"])
                if m["host"] != _HOST or pid == os.getpid() or process_alive(pid):
                    continue
            elif time.time() - p.lstat().st_mtime < LEGACY_TEMP_STALE_AFTER_S:
                continue
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        except FileNotFoundError:  # removed meanwhile by another cleaner
            continue
        removed.append(p)
    if removed:
        log.info("removed %d temporary file(s) of %s left by a killed writer: %s", len(removed), path,
                 ", ".join(p.name for p in removed))
    return removed


@contextlib.contextmanager
def _naming_full_disk(path: Path) -> Iterator[None]:
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_ROOM and not any(f"[errno {n}]" in str(exc).lower() for n in _NO_ROOM):
            raise
        raise OutputError(exc.errno, f"no room to write {path} ({os.strerror(exc.errno or errno.ENOSPC)}: {exc}); "
                          f"nothing was replaced: the previous {path.name}, if any, is intact") from exc


#: Errors of an output that cannot be written at all (no permission, a read-only file system, a file
#: where a folder is needed or the reverse): reported as :class:`OutputError` naming the output.
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST}


@contextlib.contextmanager
def _naming_unwritable(path: Path, tmp: Path) -> Iterator[None]:
    """An :class:`OSError` about writing ``path`` (``path``, a folder above it, or its temporary ``tmp``
    and what lies in it) as one :class:`OutputError` naming ``path``. Errors about other files (an input
    the caller reads while writing) pass unchanged."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        names = [Path(n) for n in (exc.filename, exc.filename2) if n]
        ours = [n for n in names if n == path or n in path.parents or n == tmp or tmp in n.parents]
        if exc.errno not in _NOT_WRITABLE or not ours:
            raise
        raise OutputError(exc.errno, f"cannot write {path}: {os.strerror(exc.errno)} ({ours[0]}); nothing "
                          "was replaced") from exc


def check_writable(path: str | Path, folder: bool = False) -> None:
    """Raise :class:`OutputError` now if ``path`` (a file, or with ``folder`` a folder, to be written
    later, e.g. after an evaluation of many minutes) could not be written: its nearest existing ancestor
    must be a folder in which a file can be created (a probe file, removed at once), and a ``folder``
    must not be an existing file. Nothing is created at ``path``."""
    path = Path(path)
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        if probe == path and not folder:
            return  # an existing file is replaced (or refused) by the writer itself
        raise OutputError(errno.ENOTDIR, f"cannot write {path}: {probe} is a file, not a folder")
    try:
        fd, name = tempfile.mkstemp(prefix=".raptor-probe-", dir=probe)
    except OSError as exc:
        raise OutputError(exc.errno, f"cannot write {path}: {os.strerror(exc.errno or errno.EACCES)} "
                          f"({probe})") from None
    os.close(fd)
    os.unlink(name)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on normal exit rename it onto ``path``.

    On an exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    tmp = _temp_sibling(path)
    with _naming_unwritable(path, tmp):
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(path)
        try:
            with _naming_full_disk(path):
                yield tmp
                if tmp.exists():
                    with open(tmp, "rb+") as fh:
                        os.fsync(fh.fileno())
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        finally:
            if tmp.exists():
                tmp.unlink()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _refuse_unless_previous(path: Path, replaces: Optional[Callable[[Path], bool]], what: str) -> None:
    """:class:`OutputError` unless ``path`` is absent, an empty folder, or a folder ``replaces``
    recognises as a previous output (``what``): a file, an input or a user's folder is never replaced."""
    if path.exists() and not path.is_dir():
        raise OutputError(errno.EEXIST, f"{path} exists and is not a folder: move it or choose another output")
    if path.is_dir() and any(path.iterdir()) and not (replaces is not None and replaces(path)):
        raise OutputError(errno.EEXIST, f"{path} holds files and is not {what}: nothing was written; move it "
                          "or choose another output folder")


@contextlib.contextmanager
def atomic_dir(path: str | Path, replaces: Optional[Callable[[Path], bool]] = None,
               what: str = "an output of this kind") -> Iterator[Path]:
    """Yield an empty temporary directory; on normal exit it replaces ``path`` as a whole.

    A previous ``path`` stays intact until the new one is complete; on an exception the temporary
    directory is removed and ``path`` (old or absent) is untouched. Only an empty folder or one that
    ``replaces(path)`` recognises as a previous output (``what``) is replaced: anything else at
    ``path`` (a file, an input, a user's folder) is refused with :class:`OutputError` before any work.
    """
    path = Path(path)
    _refuse_unless_previous(path, replaces, what)
    tmp = _temp_sibling(path)
    with _naming_unwritable(path, tmp):
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(path)
        tmp.mkdir()
        try:
            with _naming_full_disk(path):  # fsync too: a full disk may only show when the data is flushed
                yield tmp
                for p in tmp.rglob("*"):
                    if p.is_file():
                        with open(p, "rb+") as fh:
                            os.fsync(fh.fileno())
            old = None
            if path.exists():
                old = _temp_sibling(path, "old")
                os.replace(path, old)
            os.replace(tmp, path)
            _fsync_dir(path.parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def clear_output_folder(path: str | Path, replaces: Callable[[Path], bool], what: str) -> None:
    """Empty the output folder ``path`` before a stage writes it again piece by piece, as ``dvc repro``
    removes a stage's outputs: only a folder that ``replaces`` recognises as a previous output
    (``what``); anything else holding files is refused with :class:`OutputError`, as in :func:`atomic_dir`."""
    path = Path(path)
    _refuse_unless_previous(path, replaces, what)
    if not path.is_dir():
        return
    for child in path.iterdir():
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()


def read_json_object(path: str | Path, remedy: str) -> dict:
    """The JSON object in the file ``path``; :class:`ValueError` naming the file and ``remedy`` (what
    makes it again, e.g. "re-run `raptor ingest`") when it is not valid JSON or not an object."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path}: not valid JSON ({exc}); {remedy}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(obj).__name__}; {remedy}")
    return obj


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
