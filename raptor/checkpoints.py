"""Reading and writing our torch files safely: models, RL and pretraining checkpoints.

* Every file is read with ``torch.load(weights_only=True)``: tensors and plain data only. A file
  that carries other Python objects (a pickled payload can run code when loaded, which is how a
  model file from someone else could attack) is refused with :class:`UnsafeFileError`; nothing in
  it is executed.
* Every file holds ``{"format": ...}``; a file of another kind is refused with a clear error.
* A checkpoint is written atomically and the previous one is kept beside it (``<name>.prev``), so a
  truncated or corrupted latest checkpoint (a full disk, a crash of the file system) falls back to
  the previous epoch with a warning instead of ending the run in a traceback.
"""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Any

import torch

from .io import atomic_path

log = logging.getLogger("raptor")


class CheckpointError(ValueError):
    """A model or checkpoint file that cannot be used; the message names the file and why."""


class UnsafeFileError(CheckpointError):
    """A file holding Python objects beyond tensors and plain data: refused, never executed."""


class CorruptFileError(CheckpointError):
    """A file that cannot be read (truncated, corrupted, not a torch file)."""


def previous(path: str | Path) -> Path:
    """Where the checkpoint before ``path`` is kept."""
    path = Path(path)
    return path.with_name(path.name + ".prev")


def save(path: str | Path, obj: dict[str, Any], keep_previous: bool = False) -> None:
    """Write ``obj`` atomically; with ``keep_previous`` the file it replaces becomes ``<name>.prev``."""
    path = Path(path)
    if keep_previous and path.exists():
        os.replace(path, previous(path))
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def load(path: str | Path, fmt: str | tuple[str, ...], what: str, map_location="cpu") -> dict[str, Any]:
    """Read one of our files, refusing anything that is not tensors and plain data of format ``fmt``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        if "Weights only load failed" in text or "Unsupported global" in text or "not an allowed global" in text:
            raise UnsafeFileError(
                f"{path}: refused: it holds Python objects other than tensors and plain data, so loading it "
                f"could run code; it was not written by raptor-tkg ({text.splitlines()[0][:200]})") from None
        raise CorruptFileError(f"{path}: not a readable {what} (corrupted: {text[:200]})") from None
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds on a damaged file: all mean "corrupt"
        raise CorruptFileError(f"{path}: not a readable {what} (truncated or corrupted: "
                               f"{type(exc).__name__}: {str(exc)[:200]})") from None
    formats = (fmt,) if isinstance(fmt, str) else fmt
    if not isinstance(obj, dict) or obj.get("format") not in formats:
        got = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
        raise CheckpointError(f"{path}: not a {what} (format {got!r}, expected {' or '.join(formats)})")
    return obj


def load_latest(path: str | Path, fmt: str, what: str) -> dict[str, Any] | None:
    """The latest readable checkpoint at ``path``, else the previous one (with a warning); ``None``
    when there is none. Raises when neither can be read."""
    path, prev = Path(path), previous(path)
    if not path.exists() and not prev.exists():
        return None
    try:
        return load(path, fmt, what)
    except (CorruptFileError, FileNotFoundError) as exc:
        if not prev.exists():
            if isinstance(exc, FileNotFoundError):
                return None
            raise CorruptFileError(f"{exc}; no previous checkpoint to fall back to: delete the folder (or "
                                   "use --fresh) to start this run afresh") from None
        log.warning("%s; falling back to the previous checkpoint %s", exc, prev)
        return load(prev, fmt, what)
