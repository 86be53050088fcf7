"""Reading and writing our torch files safely: models, RL and pretraining checkpoints (plain file I/O:
which agent rebuilds a model is :func:`raptor.agents.load_model`'s business).

* Every file is read with ``torch.load(weights_only=True)``: tensors and plain data only. A file
  that carries other Python objects (a pickled payload can run code when loaded, which is how a
  model file from someone else could attack) is refused with :class:`UnsafeFileError`; nothing in
  it is executed.
* Every file holds ``{"format": ...}``; a file of another kind is refused with a clear error.
* A checkpoint is written atomically and the previous one is kept beside it (``<name>.prev``), so a
  truncated or corrupted latest checkpoint (a crash of the file system) falls back to the previous
  epoch with a warning instead of ending the run in a traceback. A full disk while writing is one
  line naming the file (:class:`raptor.common.io.OutputError`), the files already there untouched.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from raptor.common.io import atomic_path

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
    """Write ``obj`` atomically; with ``keep_previous`` the file it replaces becomes ``<name>.prev``.

    ``obj`` is serialised in memory first and written with plain file writes: a full disk is then
    :class:`raptor.common.io.OutputError` naming ``path`` (one line), not torch's ``unexpected pos``
    traceback; ``path`` (and ``<name>.prev``) stay as they were until the new file is complete.

    ``path`` exists at every moment once written: the old file becomes ``<name>.prev`` as a second
    name (a hard link, else a copy) before the new one is renamed over it. (Moving it aside first left
    a moment with only ``.prev`` and the temporary file; a run killed then was parked without a
    checkpoint and started again from epoch 0.)"""
    path = Path(path)
    buf = io.BytesIO()
    torch.save(obj, buf)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(buf.getbuffer())
            fh.flush()
            os.fsync(fh.fileno())
        if keep_previous and path.exists():  # only once the new one is written whole
            _keep_as_previous(path)


def _keep_as_previous(path: Path) -> None:
    """``<name>.prev`` := the file now at ``path`` (which stays): linked or copied under a temporary
    name, then renamed, so ``.prev`` too is always whole."""
    import shutil

    prev = previous(path)
    with atomic_path(prev) as tmp:
        try:
            os.link(path, tmp)
        except OSError:  # (a file system without hard links)
            shutil.copyfile(path, tmp)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _unsafe_detail(text: str) -> str:
    """What torch's weights-only unpickler refused (``Unsupported global: GLOBAL io.open ...``), without
    its advice: re-running with ``weights_only=False`` or allowlisting the global is exactly what
    would run the file's code, so neither is ever quoted."""
    for line in _ANSI.sub("", text).splitlines():
        line = line.strip()
        if "WeightsUnpickler error:" in line:
            line = line.split("WeightsUnpickler error:", 1)[1].strip()
        if not line or "weights_only" in line or line.startswith(("Weights only load failed", "Please ", "(1)",
                                                                  "(2)", "Check the documentation")):
            continue
        return re.split(r"\.\s+Please\b", line)[0].rstrip(". ")[:200]
    return "a Python object that is not a tensor nor plain data"


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
                f"could run code; it was not written by raptor-tkg ({_unsafe_detail(text)})") from None
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


# Models: the policy's weights plus what rebuilds it

def model_meta(policy: nn.Module, meta: Optional[dict], seed: int) -> dict:
    """``meta`` plus what rebuilds ``policy`` (its sizes, its config dataclass, its path length) and the
    seed: every agent's policy has ``num_entities``, ``num_relations``, ``config`` and ``max_path_length``."""
    meta = dict(meta or {})
    meta.setdefault("num_entities", policy.num_entities)
    meta.setdefault("num_relations", policy.num_relations)
    meta.setdefault("model", asdict(policy.config))
    meta.setdefault("max_path_length", policy.max_path_length)
    meta["seed"] = seed
    return meta


MODEL_FORMAT = "raptor.agents.policy/v1"
#: Format of the RL phase's checkpoints (:mod:`raptor.agents.actor_critic.rl`): a model can be taken from one.
RL_CHECKPOINT_FORMAT = "raptor.agents.actor_critic.rl-checkpoint/v1"


def save_model(path: Path, policy: nn.Module, meta: dict) -> None:
    """The policy weights plus what is needed to rebuild it (``meta``: sizes and configs); read back
    with :func:`raptor.agents.load_model`."""
    save(path, {"format": MODEL_FORMAT, "policy": policy.state_dict(), "meta": meta})
