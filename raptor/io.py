"""Atomic output writing: a crash never leaves a half-written artifact that a later stage trusts.

Files are written to a temporary sibling and renamed into place (``os.replace`` is atomic on
POSIX); directories are assembled in a temporary sibling directory and swapped in whole.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator


#: Errors of a full disk, a quota or a file-size limit: reported as :class:`OutputError`.
_NO_ROOM = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


class RunMismatchError(RuntimeError):
    """A run folder holds checkpoints that cannot be continued, and the caller asked not to delete them."""


class OutputError(OSError):
    """An output could not be written (no space left, a quota, a size limit); names the output. The
    previous output at that path, if any, is untouched."""


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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
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


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary directory; on normal exit it replaces ``path`` as a whole.

    A previous ``path`` stays intact until the new one is complete; on an exception the temporary
    directory is removed and ``path`` (old or absent) is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    tmp = path.parent / f".{path.name}.tmp-{tag}"
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
            old = path.parent / f".{path.name}.old-{tag}"
            os.replace(path, old)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
