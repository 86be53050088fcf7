"""One Prefect parent run per pipeline invocation, under a plain ``dvc repro`` too.

``python -m flows pipeline`` (scripts/run.sh, the scheduled deployment) runs every stage as a subflow
of its own flow run. Under ``dvc repro`` every stage is a process of its own, so the stages of one
``dvc repro`` find each other through the DVC process that runs them (their nearest ancestor process
that is ``dvc``): the first stage of that process creates a flow run ``pipeline-<datasets>`` of the
flow ``dvc-repro`` and records it in ``build/pipeline-run.json`` with the DVC process's pid and start
time; every stage of the same DVC process runs as a subflow of it. Another ``dvc repro`` is another
process, so it gets a new parent run. The parent is Running while a stage runs and Completed after
each one (a ``dvc repro`` has no hook at its end), and stays Failed once a stage failed.

Every flow run, task run and parent of an invocation carries the tag ``pipeline-<first 8 hex digits
of the parent's id>`` (filter on it in the UI); the MLflow runs carry the parent's whole id as the tag
``pipeline_run_id`` (:func:`tasks.tracking.prefect_ids`).

A stage run by hand (``python -m flows label ...`` from a shell) is a top-level flow run as before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional
from uuid import uuid4

from prefect import Flow, Task, flow, tags

#: Where the stages of one ``dvc repro`` find their parent run (git-ignored, rewritten per invocation).
RECORD = Path("build") / "pipeline-run.json"


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


@flow(name="dvc-repro")
def dvc_repro(command: str, datasets: list[str], profile: Optional[dict] = None) -> None:
    """A record, never run: one ``dvc repro`` whose stages are its subflows (:mod:`flows.invocation`)."""


def _parent(client, dvc: dict, datasets: list[str], profile: Optional[dict] = None):
    """The parent flow run of this DVC process: the recorded one, or a new one (recorded)."""
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Running

    try:
        rec = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        rec = {}
    if rec.get("dvc_pid") == dvc["pid"] and rec.get("dvc_start") == dvc["start"]:
        try:
            return client.read_flow_run(rec["flow_run_id"])
        except (ObjectNotFound, KeyError):
            pass  # another Prefect database since: a new parent
    run = client.create_flow_run(dvc_repro, name=f"pipeline-{'-'.join(datasets)}",
                                 parameters={"command": dvc["command"], "datasets": datasets,
                                             "profile": profile},
                                 tags=["dvc-repro"], state=Running())
    client.update_flow_run(run.id, tags=["dvc-repro", invocation_tag(run.id)])
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    tmp = RECORD.with_name(RECORD.name + ".tmp")
    tmp.write_text(json.dumps({"dvc_pid": dvc["pid"], "dvc_start": dvc["start"], "command": dvc["command"],
                               "flow_run_id": str(run.id), "name": run.name, "tag": invocation_tag(run.id)}) + "\n")
    tmp.replace(RECORD)
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


def run_stage_flow(fn: Flow, kwargs: dict, datasets: list[str]):
    """Run a stage's flow: inside the pipeline flow as its subflow (tagged with its invocation),
    under ``dvc repro`` as a subflow of that ``dvc repro``'s parent run, else on its own."""
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
