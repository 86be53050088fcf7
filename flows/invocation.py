"""How a stage runs: as a Prefect flow (one parent run per pipeline invocation), or without Prefect.

**Prefect or not** (:func:`use_prefect`). A stage runs as its Prefect flow inside the pipeline flow
(``python -m flows pipeline``: scripts/run.sh, the scheduled deployment), and wherever a Prefect API
is configured (``PREFECT_API_URL`` in the environment or the active Prefect profile: ``python -m
flows.server -- dvc repro``, a server of your own), or a Dask task runner (``RAPTOR_DASK_ADDRESS``,
``RAPTOR_TASK_RUNNER=dask``). Under a plain ``dvc repro`` none is: DVC orchestrates, and a stage
runs its flow's function without Prefect (:func:`run_stage_plain`: the same library calls, MLflow
runs and outputs, its runs mapped on threads; no flow run, no Prefect artifacts), instead of starting
Prefect's temporary server for each stage (a stage's start-up went from about 30 s to about 4 s:
docs/pipeline.md, Orchestration overhead). ``RAPTOR_PREFECT=1`` runs the flows anyway (a temporary
server per stage when none is configured), ``RAPTOR_PREFECT=0`` never.

**One parent run per invocation.** ``python -m flows pipeline`` runs every stage as a subflow of its
own flow run. Under ``dvc repro`` every stage is a process of its own, so the stages of one
``dvc repro`` find each other through the DVC process that runs them (their nearest ancestor process
that is ``dvc``): with Prefect, the first stage of that process creates a flow run
``pipeline-<datasets>`` of the flow ``dvc-repro`` and records it in ``build/pipeline-run.json`` with
the DVC process's pid and start time; every stage of the same DVC process runs as a subflow of it.
Another ``dvc repro`` is another process, so it gets a new parent run. The parent is Running while a
stage runs and Completed after each one (a ``dvc repro`` has no hook at its end), and stays Failed
once a stage failed. Without Prefect the record holds an invocation id instead
(:func:`invocation_outside_prefect`), so the stages' MLflow runs still share one pipeline run.

Every flow run, task run and parent of an invocation carries the tag ``pipeline-<first 8 hex digits
of the parent's id>`` (filter on it in the UI); the MLflow runs carry the parent's whole id (or the
invocation id) as the tag ``pipeline_run_id`` (:func:`tasks.tracking.invocation_id`).

A stage run by hand (``python -m flows label ...`` from a shell) is a top-level flow run as before
(with Prefect), or a stage of no invocation (without).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional
from uuid import uuid4

if TYPE_CHECKING:
    from prefect import Flow

#: Where the stages of one ``dvc repro`` find their parent run (git-ignored, rewritten per invocation).
RECORD = Path("build") / "pipeline-run.json"
#: ``RAPTOR_PREFECT``: ``1`` stages always run as Prefect flows, ``0`` never; unset or ``auto``: :func:`use_prefect`.
SETTING = "RAPTOR_PREFECT"


def _prefect_api_configured() -> bool:
    """``PREFECT_API_URL`` in the environment or in the active profile of ``PREFECT_HOME/profiles.toml``
    (read as a file: Prefect is not imported for it)."""
    if os.environ.get("PREFECT_API_URL"):
        return True
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        import tomllib

        profiles = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return False
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    return bool(profiles.get("profiles", {}).get(active, {}).get("PREFECT_API_URL"))


def use_prefect() -> bool:
    """Whether a stage runs as its Prefect flow (the module's docstring): inside a Prefect flow run,
    with a Prefect API configured or a Dask task runner; ``RAPTOR_PREFECT=1``/``0`` decides instead."""
    from .runners import in_flow_run

    if in_flow_run():
        return True
    setting = os.environ.get(SETTING, "").strip().lower()
    if setting in ("1", "true", "yes"):
        return True
    if setting in ("0", "false", "no"):
        return False
    if setting not in ("", "auto"):
        raise ValueError(f"{SETTING}={setting!r}: must be 1 (always a Prefect flow), 0 (never) or auto")
    dask = bool(os.environ.get("RAPTOR_DASK_ADDRESS")) or os.environ.get("RAPTOR_TASK_RUNNER", "").strip().lower() == "dask"
    return dask or _prefect_api_configured()


def invocation_tag(flow_run_id: Any) -> str:
    """The Prefect tag of every run of the pipeline invocation whose parent run is ``flow_run_id``."""
    return f"pipeline-{str(flow_run_id).replace('-', '')[:8]}"


def _process(pid: int) -> Optional[tuple[int, int, list[str]]]:
    """``(parent pid, start time in clock ticks, argv)`` of a process (Linux ``/proc``), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
    return int(fields[1]), int(fields[19]), [a.decode(errors="replace") for a in argv if a]


def _is_dvc(argv: list[str]) -> bool:
    return any(Path(a).name == "dvc" for a in argv[:2]) or argv[1:3] == ["-m", "dvc"]


def dvc_process(pid: Optional[int] = None) -> Optional[dict]:
    """The DVC process this one runs under (its nearest ancestor that is ``dvc``): ``{"pid",
    "start", "command"}``, or None (run by hand, or not on Linux)."""
    pid = os.getppid() if pid is None else pid
    while pid > 1:
        proc = _process(pid)
        if proc is None:
            return None
        ppid, start, argv = proc
        if _is_dvc(argv):
            i = next(i for i, a in enumerate(argv) if Path(a).name == "dvc" or a == "dvc")
            return {"pid": pid, "start": start, "command": " ".join(["dvc", *argv[i + 1:]])}
        pid = ppid
    return None


@functools.cache
def _dvc_repro_flow():
    """The flow ``dvc-repro``: a record, never run, one ``dvc repro`` whose stages are its subflows."""
    from prefect import flow

    @flow(name="dvc-repro")
    def dvc_repro(command: str, datasets: list[str], profile: Optional[dict] = None) -> None:
        """A record, never run: one ``dvc repro`` whose stages are its subflows (:mod:`flows.invocation`)."""

    return dvc_repro


def _read_record(dvc: dict) -> dict:
    """The record of this DVC process's invocation (empty when it is another one's, or none)."""
    try:
        rec = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return {}
    return rec if rec.get("dvc_pid") == dvc["pid"] and rec.get("dvc_start") == dvc["start"] else {}


def _write_record(dvc: dict, **fields: Any) -> None:
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    tmp = RECORD.with_name(RECORD.name + ".tmp")
    tmp.write_text(json.dumps({"dvc_pid": dvc["pid"], "dvc_start": dvc["start"], "command": dvc["command"],
                               **fields}) + "\n")
    tmp.replace(RECORD)


def invocation_outside_prefect(dvc: dict) -> str:
    """The id of this DVC process's invocation for stages run without Prefect: the recorded one, or a
    new one (recorded), as the Prefect parent run's id is with Prefect."""
    rec = _read_record(dvc)
    if rec.get("invocation_id"):
        return rec["invocation_id"]
    invocation = str(uuid4())
    _write_record(dvc, invocation_id=invocation)
    return invocation


def _parent(client, dvc: dict, datasets: list[str], profile: Optional[dict] = None):
    """The parent flow run of this DVC process: the recorded one, or a new one (recorded)."""
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Running

    rec = _read_record(dvc)
    if rec.get("flow_run_id"):
        try:
            return client.read_flow_run(rec["flow_run_id"])
        except ObjectNotFound:
            pass  # another Prefect database since: a new parent
    run = client.create_flow_run(_dvc_repro_flow(), name=f"pipeline-{'-'.join(datasets)}",
                                 parameters={"command": dvc["command"], "datasets": datasets,
                                             "profile": profile},
                                 tags=["dvc-repro"], state=Running())
    client.update_flow_run(run.id, tags=["dvc-repro", invocation_tag(run.id)])
    _write_record(dvc, flow_run_id=str(run.id), name=run.name, tag=invocation_tag(run.id))
    return client.read_flow_run(run.id)


def _set_parent_state(client, parent_id, state, line: str) -> None:
    """Running / Completed / Failed, and a line in the parent's log; a parent that is Failed stays
    so (``dvc repro --keep-going``)."""
    from datetime import datetime, timezone

    from prefect.client.schemas.actions import LogCreate

    client.create_logs([LogCreate(name="raptor.invocation", level=40 if state.is_failed() else 20, message=line,
                                  timestamp=datetime.now(timezone.utc), flow_run_id=parent_id)])
    if client.read_flow_run(parent_id).state_type.value == "FAILED":
        return
    client.set_flow_run_state(parent_id, state, force=True)


def _profile(params_path: Optional[str]) -> Optional[dict]:
    """The resolved profile and what it changes (a parameter of the parent run, shown on its page)."""
    if not params_path:
        return None
    from .stages import resolved_profile

    try:
        return resolved_profile(params_path)
    except Exception:  # noqa: BLE001 - a record only: the stage itself reports a broken params file
        return None


def run_stage_plain(fn: Callable[..., Any], kwargs: dict, name: str):
    """Run a stage's flow function without Prefect (a plain ``dvc repro``: DVC orchestrates): its MLflow
    runs belong to the ``dvc repro`` it runs under (:func:`invocation_outside_prefect`), its log lines
    go to the console (``Beginning stage 'NAME'``, ``Finished stage 'NAME' in S s``)."""
    from tasks.invocation import set_invocation

    dvc = dvc_process()
    set_invocation(invocation_outside_prefect(dvc) if dvc else None)
    log = console_log()
    log.info("Beginning stage %r (without Prefect: no Prefect API configured)", name)
    start = time.perf_counter()
    try:
        result = fn(**kwargs)
    except BaseException as exc:
        log.error("Stage %r failed after %.2f s: %r", name, time.perf_counter() - start, exc)
        raise
    log.info("Finished stage %r in %.2f s", name, time.perf_counter() - start)
    return result


def console_log() -> logging.Logger:
    """The ``raptor`` loggers (the stage's, ``raptor.train``'s epoch lines, ``raptor.tracking``'s
    warnings) on stderr at INFO, in the format of Prefect's console lines, when nothing else shows them."""
    root = logging.getLogger("raptor")
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d | %(levelname)-7s | %(name)s - %(message)s",
                                               "%H:%M:%S"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False
    return logging.getLogger("raptor.stage")


def run_stage_flow(fn: Flow, kwargs: dict, datasets: list[str]):
    """Run a stage's flow: inside the pipeline flow as its subflow (tagged with its invocation),
    under ``dvc repro`` as a subflow of that ``dvc repro``'s parent run, else on its own."""
    from prefect import Task, tags
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is not None and ctx.flow_run is not None:  # the pipeline flow: a subflow already
        with tags(invocation_tag(ctx.flow_run.id)):
            return fn(**kwargs)
    dvc = dvc_process()
    if dvc is None:
        return fn(**kwargs)

    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow
    from prefect.states import Completed, Failed, Pending, Running

    stage = " ".join(str(kwargs[k]) for k in ("dataset", "variant") if k in kwargs)
    stage = f"{fn.name} {stage}".strip()
    with get_client(sync_client=True) as client:
        parent = _parent(client, dvc, datasets, _profile(kwargs.get("params")))
        tag = invocation_tag(parent.id)
        tracker = client.create_task_run(Task(name=fn.name, fn=fn.fn), flow_run_id=parent.id,
                                         dynamic_key=uuid4().hex, name=f"{fn.name}-{uuid4().hex[:3]}",
                                         extra_tags=[tag], state=Pending())
        run = client.create_flow_run(fn, parameters=fn.serialize_parameters(kwargs), parent_task_run_id=tracker.id,
                                     tags=[tag], state=Pending())
        _set_parent_state(client, parent.id, Running(), f"{stage}: running (flow run {run.id})")
    try:
        with tags(tag):
            result = run_flow(fn, flow_run=run, parameters=kwargs)
    except BaseException as exc:
        with get_client(sync_client=True) as client:
            _set_parent_state(client, parent.id, Failed(message=f"{stage} failed: {exc!r}"[:500]),
                              f"{stage}: failed ({exc!r})"[:2000])
        raise
    with get_client(sync_client=True) as client:
        _set_parent_state(client, parent.id, Completed(message="the stages so far completed"), f"{stage}: completed")
    return result
