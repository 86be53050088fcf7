"""The pipeline invocation a process's MLflow runs belong to when no Prefect run says it: the stages of
a plain ``dvc repro``, run without Prefect (:func:`flows.invocation.run_stage_plain` sets it;
:func:`tasks.tracking.invocation_id` reads it). Importing this imports no orchestration library."""

from __future__ import annotations

from typing import Optional

_INVOCATION: Optional[str] = None


def set_invocation(invocation: Optional[str]) -> None:
    """Name the pipeline invocation of this process's runs outside Prefect (None: none)."""
    global _INVOCATION
    _INVOCATION = invocation


def current() -> Optional[str]:
    return _INVOCATION
