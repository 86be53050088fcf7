"""The whole pipeline as one Prefect flow (what a scheduled deployment runs), driven by DVC's stage graph.

DVC decides, Prefect runs, DVC records: for every stage of ``dvc.yaml`` in dependency order the flow
asks DVC whether it changed (``dvc status`` for that stage), runs the changed ones in this process
(the same argv as the stage's DVC command, so each shows as a named subflow: ``label-ICEWS14``,
``finetune-ICEWS14-raptor``, ...) and then ``dvc commit``s it, so ``dvc.lock`` holds what ran. A
second run on unchanged inputs runs nothing (only the ``params`` stage, which resolves params in a
fraction of a second), and ``dvc repro`` afterwards agrees. A stage that fails blocks the stages
that depend on it; the others (another dataset's, say) still run, and the flow fails at the end.

Every stage that runs is measured (:mod:`raptor.common.resources`): its wall time and its own peak resident
memory go to the log, to the flow's result (``stages``), to a ``pipeline-resources`` table
artifact in Prefect's UI and, one line per stage, to ``runs/stage-usage.jsonl``
(:data:`raptor.pipeline.stages.USAGE_LOG`), which ``raptor results`` turns into a table.

The flow holds the project lock (:mod:`raptor.pipeline.projectlock`) and DVC's repository lock from start to
end: a second pipeline run or a ``dvc repro`` started meanwhile in the same project stops at once
with a clear error instead of training into the same run folders. DVC's lock alone is not enough:
``dvc repro`` releases it while a stage's command runs, and that command holds the project lock, so
a pipeline run started then is refused before it writes anything (build/params.json included).
"""

from __future__ import annotations

import contextlib
import shlex
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from prefect import flow, get_run_logger

from raptor.pipeline.projectlock import project_lock
from raptor.common.resources import append_usage, measure, release_freed_memory
from raptor.pipeline.stages import PARAMS_FILE, USAGE_LOG, ensure_local_params

FLOWS_CMD = ["python", "-m", "flows"]


class PipelineBusy(RuntimeError):
    """The project's DVC lock is held by another pipeline run or ``dvc repro``."""


STAGES_CMD = ["python", "-m", "raptor.pipeline.stages"]


def _run_command(cmd: str) -> None:
    """Run a stage's DVC command in this process (only the two kinds dvc.yaml holds)."""
    argv = shlex.split(cmd)
    if argv[:3] == FLOWS_CMD:
        from .__main__ import main
    elif argv[:3] == STAGES_CMD:
        from raptor.pipeline.stages import main
    else:
        raise ValueError(f"not a stage command of this project: {cmd!r}")
    rc = main(argv[3:])
    if rc:
        raise RuntimeError(f"{cmd!r} exited with {rc}")


def _tag_invocation() -> None:
    """Tag this flow run as its stages are tagged (``pipeline-<id>``: :mod:`flows.invocation`)."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    from .invocation import invocation_tag

    run = FlowRunContext.get().flow_run
    with get_client(sync_client=True) as client:
        client.update_flow_run(run.id, tags=sorted({*run.tags, invocation_tag(run.id)}))


def _resources_artifact(usage: dict[str, dict]) -> None:
    """A table of the stages that ran, their wall time and peak memory, on the flow run's page."""
    from prefect.artifacts import create_markdown_artifact

    rows = [f"| {name} | {u['seconds']:.1f} | {u['peak_rss_gb']:.2f}{'' if u['peak_is_per_stage'] else ' *'} |"
            for name, u in usage.items()]
    note = ("\n\n\\* the process's lifetime peak: this system does not allow resetting it per stage"
            if not all(u["peak_is_per_stage"] for u in usage.values()) else "")
    create_markdown_artifact(
        key="pipeline-resources", description="wall time and peak memory of each stage that ran",
        markdown="| stage | seconds | peak RSS (GB) |\n|---|---:|---:|\n" + "\n".join(rows) + note)


@flow(name="raptor-pipeline", flow_run_name="pipeline")
def pipeline_flow(root: str = ".", dvcfile: str = "dvc.yaml", targets: Optional[list[str]] = None) -> dict:
    """Run every changed stage of ``dvcfile`` (or of ``targets`` and what they depend on) in order.

    Returns ``{"ran": [...], "skipped": [...], "blocked": [...], "failed": {...}, "seconds": s,
    "stages": {name: {"seconds", "peak_rss_gb", "peak_is_per_stage", "released_before"}}}`` (``stages``: those that ran or failed).
    """
    import networkx as nx
    from dvc.lock import LockError
    from dvc.repo import Repo, lock_repo

    log = get_run_logger()
    started = time.perf_counter()
    ran, skipped, blocked, failed = [], [], [], {}
    # The project lock first, before anything is written (raises raptor.pipeline.projectlock.ProjectBusy):
    # a `dvc repro` inside a stage has released DVC's lock, but its stage command holds this one.
    with project_lock(root), Repo(str(Path(root).resolve())) as repo, contextlib.ExitStack() as held:
        _tag_invocation()
        ensure_local_params(root)  # the params stage's dependency (an empty one in a fresh clone)
        try:
            held.enter_context(lock_repo(repo))
        except LockError:
            raise PipelineBusy(
                f"another `dvc repro` or pipeline run holds this project's DVC lock ({repo.tmp_dir}/lock): wait "
                f"for it to end (if none is running, a killed one left the lock: remove that file)") from None
        graph = repo.index.graph
        stages = [s for s in reversed(list(nx.topological_sort(graph))) if s.dvcfile.relpath == dvcfile]
        if targets:
            wanted = {s for s in stages if s.addressing in targets}
            missing = set(targets) - {s.addressing for s in wanted}
            if missing:
                raise ValueError(f"no stage named {', '.join(sorted(missing))} in {dvcfile}")
            for s in list(wanted):
                wanted |= nx.descendants(graph, s)  # what they depend on
            stages = [s for s in stages if s in wanted]
        bad: set = set()
        usage: dict[str, dict] = {}
        for stage in stages:
            name = stage.addressing
            if bad & nx.descendants(graph, stage):
                blocked.append(name)
                log.warning("%s: blocked (a stage it depends on failed)", name)
                continue
            if not repo.status(targets=[name]):
                skipped.append(name)
                log.info("%s: up to date, skipped", name)
                continue
            log.info("%s: running `%s`", name, stage.cmd)
            ok = False  # stays False for an interrupt too: the record must not call a killed stage done
            released = False
            try:
                released = release_freed_memory()  # the stage's peak is then not an earlier stage's garbage
                with measure() as used:
                    _run_command(stage.cmd)
                ok = True
            except Exception as exc:  # noqa: BLE001 - recorded, reported at the end
                failed[name] = f"{type(exc).__name__}: {exc}"
                bad.add(stage)
                log.error("%s failed: %s", name, failed[name])
                continue
            finally:
                usage[name] = {"seconds": round(used.seconds, 2), "peak_rss_gb": round(used.peak_rss_gb, 3),
                               "peak_is_per_stage": used.peak_is_per_block, "released_before": released}
                append_usage(Path(root) / USAGE_LOG, {
                    "stage": name, "ok": ok, **usage[name],
                    "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")})
            log.info("%s: done in %s", name, used.describe())
            repo.commit(name, force=True)
            repo._reset()  # what `dvc repro` does between stages: the next status sees this stage's outputs
            ran.append(name)
    result = {"ran": ran, "skipped": skipped, "blocked": blocked, "failed": failed, "stages": usage,
              "seconds": round(time.perf_counter() - started, 2)}
    if usage:
        _resources_artifact(usage)
    resolved = Path(root) / PARAMS_FILE
    if resolved.is_file():  # what the params stage resolved: the profile this run trained with
        from .stages import publish_resolved_params

        publish_resolved_params(resolved)
    log.info("pipeline: %d ran, %d up to date, %d failed, %d blocked in %.1f s",
             len(ran), len(skipped), len(failed), len(blocked), result["seconds"])
    if failed:
        raise RuntimeError(f"stages failed: {failed} (blocked: {blocked})")
    return result
