"""Where mapped Prefect tasks run: threads in this process (default) or a Dask cluster.

The training fan-out (variants x seeds) is a set of independent Prefect tasks, one per job
(:mod:`tasks.jobs`). :func:`map_jobs` maps a task over its jobs: in a Prefect flow run as mapped task
runs (``task.map(jobs)``), outside Prefect (a stage of a plain ``dvc repro``) on threads.
:func:`task_runner` picks the Prefect runner that executes them; :func:`fan_out` submits one task per
keyword-argument dict in a subflow on a runner of its own and returns the results in order.

Choosing the runner (first match wins):

- ``kind="thread"``: Prefect's :class:`~prefect.task_runners.ThreadPoolTaskRunner` in this process
  (``max_workers`` from the argument or ``RAPTOR_MAX_WORKERS``; default: Prefect's).
- ``kind="dask"`` or an ``address`` (argument, else ``RAPTOR_DASK_ADDRESS``, e.g.
  ``tcp://10.0.0.5:8786``): a :class:`prefect_dask.DaskTaskRunner` connected to that scheduler.
  With ``kind="dask"`` and no address: a temporary ``distributed.LocalCluster`` on 127.0.0.1 with
  ``max_workers`` workers (else ``RAPTOR_DASK_WORKERS``, default 2) of ``RAPTOR_DASK_THREADS``
  threads (default 1), in worker processes unless ``RAPTOR_DASK_PROCESSES=false``; its dashboard
  listens on a free loopback port.
- ``kind=None``: ``RAPTOR_TASK_RUNNER`` (``thread`` | ``dask``) if set, else ``dask`` when an address
  is known, else ``thread``.

On Dask the task function and its arguments are pickled to the workers (cloudpickle): define tasks
at module level and pass paths, not open handles. Workers must see the same files (shared
filesystem) and have the project installed (same image or ``scripts/setup.sh``). Set
``PREFECT_API_URL`` to a Prefect server when tasks run in other processes: without one, every
worker process starts its own temporary local API.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

from raptor.pipeline.runenv import apply_defaults

apply_defaults()

if TYPE_CHECKING:  # Prefect is imported where it runs something (a plain `dvc repro` stage never does)
    from prefect import Task
    from prefect.task_runners import TaskRunner

KINDS = ("thread", "dask")


def in_flow_run() -> bool:
    """Whether this runs inside a Prefect flow run (never before Prefect is imported: no import here)."""
    if "prefect" not in sys.modules:
        return False
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    return ctx is not None and ctx.flow_run is not None


def map_jobs(task_fn: "Task", jobs: Iterable[Any], max_workers: Optional[int] = None,
             runner: Optional["TaskRunner"] = None, name: str = "fan-out") -> list[Any]:
    """Run the task once per job (its one argument); results in the jobs' order.

    In a Prefect flow run: ``task_fn.map(jobs)``, mapped task runs on the flow's task runner (with
    ``runner``: in a subflow ``name`` on that runner instead, :func:`fan_out`). Outside Prefect: the
    task's function on ``max_workers`` threads (what the thread task runner does, without Prefect),
    and the first failure is raised once every job has ended."""
    jobs = list(jobs)
    if not jobs:
        return []
    if in_flow_run():
        if runner is not None:
            return fan_out(task_fn, [{"job": j} for j in jobs], runner, name=name)
        return [f.result() for f in task_fn.map(jobs)]
    fn = getattr(task_fn, "fn", task_fn)
    with ThreadPoolExecutor(max_workers=max_workers or 1) as pool:
        futures = [pool.submit(fn, j) for j in jobs]
    failed = [f.exception() for f in futures if f.exception() is not None]
    if failed:
        raise failed[0]
    return [f.result() for f in futures]


def _int_env(name: str, default: Optional[int]) -> Optional[int]:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: must be a positive integer") from None
    if n < 1:
        raise ValueError(f"{name}={value!r}: must be a positive integer")
    return n


def task_runner(kind: Optional[str] = None, address: Optional[str] = None, max_workers: Optional[int] = None) -> TaskRunner:
    """A Prefect task runner: threads (default) or Dask (a scheduler address, or a local cluster)."""
    address = address or os.environ.get("RAPTOR_DASK_ADDRESS") or None
    if kind is None:
        kind = os.environ.get("RAPTOR_TASK_RUNNER") or ("dask" if address else "thread")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise ValueError(f"task runner kind {kind!r}: must be one of {', '.join(KINDS)}")

    if kind == "thread":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=max_workers or _int_env("RAPTOR_MAX_WORKERS", None))

    from prefect_dask import DaskTaskRunner  # imported late: dask is only needed for this runner

    if address:
        return DaskTaskRunner(address=address)
    n_workers = max_workers or _int_env("RAPTOR_DASK_WORKERS", 2)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs={
            "n_workers": n_workers,
            "threads_per_worker": _int_env("RAPTOR_DASK_THREADS", 1),
            "processes": os.environ.get("RAPTOR_DASK_PROCESSES", "true").lower() not in ("0", "false", "no"),
            "protocol": "tcp://",                  # also with processes=False (inproc cannot take a host)
            "host": "127.0.0.1",                   # loopback only
            "dashboard_address": "127.0.0.1:0",    # loopback, a free port (the default is :8787)
        },
    )


def fan_out(
    task_fn: Callable[..., Any] | Task,
    kwargs_list: Iterable[Mapping[str, Any]],
    runner: Optional[TaskRunner] = None,
    name: str = "fan-out",
) -> list[Any]:
    """Run ``task_fn(**kwargs)`` for every dict in ``kwargs_list`` as mapped Prefect tasks; results in order.

    The tasks run in a subflow (or a flow, if called outside one) named ``name`` on ``runner``
    (default: :func:`task_runner`). A plain function is wrapped as a task. If any task fails, the
    first failure is raised after all have finished.
    """
    from prefect import Task, flow, task

    from tasks.lazy import LazyTask

    calls: Sequence[Mapping[str, Any]] = [dict(kw) for kw in kwargs_list]
    if isinstance(task_fn, LazyTask):  # a task of tasks/ (tasks.lazy): its Prefect task
        task_fn = task_fn.prefect_task
    the_task = task_fn if isinstance(task_fn, Task) else task(task_fn)
    runner = runner if runner is not None else task_runner()

    @flow(name=name, task_runner=runner, validate_parameters=False)
    def _fan_out() -> list[Any]:
        futures = [the_task.submit(**kw) for kw in calls]
        for f in futures:
            f.wait()
        failed = [f.state for f in futures if not f.state.is_completed()]
        if failed:
            failed[0].result()  # raises the first failed task's exception
        return [f.result() for f in futures]

    if not calls:
        return []
    return _fan_out()
