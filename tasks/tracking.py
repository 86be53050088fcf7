"""MLflow tracking for the pipeline (orchestration layer: ``raptor/`` never imports mlflow).

Everything goes through an explicit :class:`mlflow.MlflowClient` and run ids, never MLflow's
fluent "active run" state, so seeds trained in parallel threads log to their own runs safely.

Layout: one experiment per (dataset, purpose), e.g. ``raptor/ICEWS14`` or
``raptor/ICEWS14/ablation-pretrain-epochs``; a parent run per stage invocation; one nested child
run per (variant, seed) with params, code version, data hashes, per-epoch metrics and artifacts.

A run's life is one ``with`` block (:func:`tracked_run`): created with its params and tags on
entry, FINISHED when the block ends, FAILED when it raises (the exception goes on). The pipeline
run above a stage's runs is one too (:func:`pipeline_parent`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

from raptor.common.io import process_alive
from raptor.pipeline.runenv import apply_defaults

from . import invocation

apply_defaults()
# A server that is down must not stall training for minutes per call (MLflow's default: 7 retries
# with exponential backoff, 120 s timeout); the Run below keeps the calls and retries them itself.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
# A stage's output is the stage's: no "Downloading artifacts" bars (hundreds of \r fragments in a log)
# and no INFO lines of MLflow's own ("Creating initial MLflow database tables...") between raptor's.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when mlflow configures its loggers (its import)
PROJECT_ROOT = Path.cwd()  # tasks run in the project root (dvc.yaml's commands, the deployment)

import mlflow  # noqa: E402
from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.utils.mlflow_tags import (  # noqa: E402
    MLFLOW_GIT_COMMIT,
    MLFLOW_PARENT_RUN_ID,
    MLFLOW_RUN_NAME,
    MLFLOW_SOURCE_NAME,
    MLFLOW_SOURCE_TYPE,
)

import requests  # noqa: E402

# MLflow caps a param value at 6000 characters and a batch at 100 params.
_MAX_PARAM_LEN = 6000
_BATCH = 100
#: Metrics per ``log_batch`` call (MLflow's limit: 1000).
_METRIC_BATCH = 1000
#: A tracking server that is down or gone: the run's calls wait and are retried (see :class:`Run`).
UNREACHABLE = (mlflow.exceptions.MlflowException, requests.exceptions.RequestException, OSError)
#: Seconds between retries while the server is unreachable (training is never held up longer).
RETRY_EVERY_S = 60.0
log = logging.getLogger("raptor.tracking")


#: Tags of the process that created a run (on this machine): a run left RUNNING whose process is gone
#: was killed, and the next run of the same name marks it so (:func:`close_stale_runs`).
HOST_TAG, PID_TAG = "process.host", "process.pid"
#: Tags that, with the run name, say which run a new one repeats (a stage's run of a dataset, variant, seed).
IDENTITY_TAGS = ("dataset", "variant", "seed", "stage")
#: The status a run left RUNNING by a killed process gets (MLflow's ``RunStatus``).
KILLED = "KILLED"
#: SQLite's error when its database file (or its folder, for the journal) cannot be written.
_READ_ONLY = ("readonly database", "read-only file system")


def store_file(uri: Optional[str] = None) -> Optional[Path]:
    """The SQLite file of a ``sqlite:`` tracking URI (``None`` for a server or another store)."""
    uri = uri if uri is not None else os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    return Path(path[len("file:"):] if path.startswith("file:") else path)


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """``(what, detail)`` of a failed MLflow call: ``what`` is ``"unreachable"``, or ``"read-only"``
    naming the store's file (or its folder) when MLflow answered that it cannot write it."""
    text = " ".join(str(e) for e in _chain(exc))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if any(marker in text.lower() for marker in _READ_ONLY):
        db = store_file()
        if db is None:
            where = "read-only: the tracking server cannot write its store"
        else:  # the file, or its folder when only that is read-only (SQLite writes a journal beside it)
            target = db.parent if os.access(db, os.W_OK) and not os.access(db.parent, os.W_OK) else db
            where = f"read-only: {target} cannot be written"
        detail = next((line for line in lines if any(m in line.lower() for m in _READ_ONLY)), lines[0] if lines else "")
        return where, detail[:200]
    return "unreachable", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def _chain(exc: Optional[BaseException]):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


#: MLflow's longest metric name (``MAX_ENTITY_KEY_LENGTH``); a longer one fails the whole batch.
MAX_METRIC_NAME = 250


def metric_name(key: str) -> str:
    """MLflow accepts only ``[A-Za-z0-9_-. :/]`` in metric names: ``hits@10`` -> ``hits_at_10``,
    any other character -> ``_`` (a sweep arm ``rl.gamma=0.9`` -> ``rl.gamma_0.9``)."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", key.replace("@", "_at_"))[:MAX_METRIC_NAME]


def code_version(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """Git commit of the code and whether the work tree had uncommitted changes."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""
    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    # MLflow's own source tags too: its runs table fills its Source and Version columns from them.
    source = git("config", "--get", "remote.origin.url") or str(root.resolve())
    tags = {"git_commit": commit, "git_dirty": str(dirty).lower(), MLFLOW_SOURCE_NAME: source,
            MLFLOW_SOURCE_TYPE: "PROJECT"}
    if commit != "unknown":
        tags[MLFLOW_GIT_COMMIT] = commit
    return tags


def data_hashes(ingested_dir: str | Path) -> dict[str, str]:
    """SHA-256 of every raw file of an ingested dataset (from its meta.json), as tags."""
    meta = json.loads((Path(ingested_dir) / "meta.json").read_text())
    return {f"data.sha256.{name}": digest for name, digest in sorted(meta.get("sha256", {}).items())}


#: MLflow's experiment-kind tag and the value for training runs (mlflow/server/js: ExperimentKind).
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"


def client() -> mlflow.MlflowClient:
    return mlflow.MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])


def experiment_id(name: str, artifact_root: Optional[str] = None) -> str:
    """Get or create an experiment; a new one gets an explicit artifact location (with a SQLite store:
    ``mlruns/`` beside its database file, so that a store elsewhere, such as a test's, never leaves
    artifacts in this project's ``mlruns/`` that no experiment of its ``mlflow.db`` lists)."""
    c = client()
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    db = store_file()
    if artifact_root is None and db is not None:
        artifact_root = (db.resolve().parent / "mlruns").as_uri()
    location = f"{artifact_root.rstrip('/')}/{name.replace('/', '_')}" if artifact_root else None
    # Tagged as model development (MLflow's own experiment kind); the UI still opens on its GenAI
    # overview in a browser that has not chosen "Model training" yet: links carry MODEL_TRAINING_VIEW.
    return c.create_experiment(name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})


@dataclass
class Run:
    """A handle on one MLflow run: log through it from any thread.

    Tracking never stops training. When the server cannot be reached (down when the run starts, or
    gone in the middle), the calls wait in order in ``pending``: a warning says so once, they are
    retried at most every :data:`RETRY_EVERY_S` seconds and at :meth:`finish`, and sent in order as
    soon as the server answers (a run that could not be created is created then). What is still
    pending at the end is not in MLflow; the run folder (``history.json``, ``summary.json``,
    ``metrics.json``) holds the same numbers.
    """

    run_id: Optional[str]
    experiment_id: Optional[str] = None
    create: Optional[dict] = field(default=None, repr=False)  # create_run arguments, until it exists
    pending: list = field(default_factory=list, repr=False)
    unreachable: Optional[str] = None  # the last error while calls wait
    #: Why calls wait: "unreachable", or "read-only: <file> cannot be written" (:func:`describe_failure`).
    failure: str = "unreachable"
    #: Ended by :meth:`finish`, :meth:`discard` or :meth:`delete` (:func:`tracked_run` leaves it so).
    ended: bool = False
    _next_try: float = field(default=0.0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._submit("_log_params", params)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self._submit("_set_tags", tags)

    def log_metrics(self, metrics: Mapping[str, float], step: int, defer: bool = False) -> None:
        """Log metrics at ``step``; ``defer``: only queue them, sent with the next call that is not
        deferred (a lazy run is not created for them alone)."""
        ts = int(time.time() * 1000)  # when it happened, not when a late server receives it
        items = [Metric(metric_name(k), float(v), ts, int(step)) for k, v in metrics.items() if v is not None]
        if items and defer:
            with self._lock:
                self.pending.append(("_log_metrics", (items,)))
        elif items:
            self._submit("_log_metrics", items)

    def log_series(self, rows: Sequence[tuple[Mapping[str, float], int]]) -> None:
        """Log many steps' metrics (``(metrics, step)`` pairs: a recorded run's history) in one call, sent
        in batches of :data:`_METRIC_BATCH` (one call per step takes seconds per hundred steps on SQLite)."""
        ts = int(time.time() * 1000)
        items = [Metric(metric_name(k), float(v), ts, int(step)) for metrics, step in rows
                 for k, v in metrics.items() if v is not None]
        if items:
            self._submit("_log_metrics", items)

    def log_artifact(self, path: str | Path, artifact_path: Optional[str] = None) -> None:
        self._submit("_log_artifact", str(path), artifact_path)

    def log_model(self, **kwargs: Any) -> None:
        """Log an MLflow pyfunc model (a LoggedModel linked to this run): ``mlflow.pyfunc.log_model``'s
        arguments (``name``, ``python_model``, ``artifacts``, ...), sent like every other call."""
        self._submit("_log_model", kwargs)

    def finish(self, status: str = "FINISHED") -> bool:
        """End the run; True when every call reached MLflow, else warns what is missing."""
        with self._lock:
            self.pending.append(("_set_terminated", (status,)))
            self.ended = True
        return self.sync()

    def sync(self) -> bool:
        """Send what waits now; True when nothing is left, else warns what is missing from MLflow."""
        with self._lock:
            if self.pending:
                self._flush()
        if self.pending:
            log.warning("MLflow (%s) still %s at the end of run %s: %d logging calls were not sent "
                        "(%s); the run folder holds its metrics", os.environ.get("MLFLOW_TRACKING_URI"),
                        self.failure, self.name, len(self.pending), self.unreachable)
        return not self.pending

    def discard(self) -> bool:
        """Forget a lazy run not created yet (True): what waits for it is dropped; False if it exists."""
        with self._lock:
            if self.run_id is not None:
                return False
            self.pending.clear()
            self.create = None
            self.ended = True
            return True

    def delete(self) -> None:
        """Delete the run (MLflow keeps it in its trash); a run not created yet is just forgotten."""
        if not self.discard():
            self._submit("_delete")
            self.ended = True

    def _delete(self) -> None:
        client().delete_run(self.run_id)

    @property
    def name(self) -> str:
        return (self.create or {}).get("run_name") or self.run_id or "?"

    # --- the calls, in order, retried while the server is unreachable

    def _submit(self, method: str, *args: Any) -> None:
        with self._lock:
            self.pending.append((method, args))
            if time.monotonic() >= self._next_try:
                self._flush()

    def _flush(self) -> None:
        waited = len(self.pending)
        try:
            if self.run_id is None and self.create is not None:
                c = self.create
                self.experiment_id = experiment_id(c["experiment"])
                close_stale_runs(self.experiment_id, c["run_name"], c["tags"])
                self.run_id = client().create_run(self.experiment_id, run_name=c["run_name"], tags=c["tags"]).info.run_id
            while self.pending:
                method, args = self.pending[0]
                getattr(self, method)(*args)
                self.pending.pop(0)
        except UNREACHABLE as exc:
            first = self.unreachable is None
            self.failure, self.unreachable = describe_failure(exc)
            self._next_try = time.monotonic() + RETRY_EVERY_S
            if first:
                log.warning("MLflow (%s) is %s (%s); training goes on. Run %s: its logging calls wait "
                            "and are retried every %.0f s and at its end", os.environ.get("MLFLOW_TRACKING_URI"),
                            self.failure, self.unreachable, self.name, RETRY_EVERY_S)
            return
        if self.unreachable is not None:
            log.warning("MLflow answers again: run %s sent its %d waiting calls", self.name, waited)
            self.unreachable = None

    def _log_params(self, params: Mapping[str, Any]) -> None:
        items = [Param(k, str(v)[:_MAX_PARAM_LEN]) for k, v in sorted(params.items())]
        for i in range(0, len(items), _BATCH):
            client().log_batch(self.run_id, params=items[i : i + _BATCH])

    def _set_tags(self, tags: Mapping[str, Any]) -> None:
        items = [RunTag(k, str(v)) for k, v in sorted(tags.items())]
        for i in range(0, len(items), _BATCH):
            client().log_batch(self.run_id, tags=items[i : i + _BATCH])

    def _log_metrics(self, items: list) -> None:
        for i in range(0, len(items), _METRIC_BATCH):
            client().log_batch(self.run_id, metrics=items[i : i + _METRIC_BATCH])

    def _log_artifact(self, path: str, artifact_path: Optional[str]) -> None:
        p = Path(path)
        if p.is_dir():
            client().log_artifacts(self.run_id, path, artifact_path)
        elif p.exists():
            client().log_artifact(self.run_id, path, artifact_path)

    def _log_model(self, kwargs: dict) -> None:
        # mlflow.pyfunc.log_model is Model.log(flavor=mlflow.pyfunc, ...) on the process's active run and,
        # without one, in the active (default) experiment; this run is neither (runs are logged from
        # threads, through the client): its LoggedModel is created in its experiment and both are named.
        import mlflow.pyfunc
        from mlflow.models import Model

        c = client()
        run = c.get_run(self.run_id)
        model = c.create_logged_model(run.info.experiment_id, name=kwargs.get("name"), source_run_id=self.run_id,
                                      params=run.data.params, model_type=kwargs.pop("model_type", None))
        Model.log(artifact_path=None, flavor=mlflow.pyfunc, run_id=self.run_id, model_id=model.model_id, **kwargs)

    def _set_terminated(self, status: str) -> None:
        client().set_terminated(self.run_id, status=status)


def find_runs(experiment: str, run_name: str) -> list:
    """The runs (``mlflow.entities.Run``) of ``experiment`` named ``run_name``, newest first; raises
    :data:`UNREACHABLE`'s errors when the store cannot be read."""
    if "'" in run_name:
        raise ValueError(f"run name {run_name!r}: a quote cannot be searched for in MLflow")
    exp = client().get_experiment_by_name(experiment)
    if exp is None:
        return []
    return list(client().search_runs([exp.experiment_id], f"attributes.run_name = '{run_name}'",
                                     order_by=["attributes.start_time DESC"]))


def find_run(experiment: str, run_name: str, metric: Optional[str] = None) -> Optional[str]:
    """The id of the newest run of ``experiment`` named ``run_name`` (that has logged ``metric``, if given), or
    ``None`` (:func:`find_runs`)."""
    return next((r.info.run_id for r in find_runs(experiment, run_name)
                 if metric is None or metric in r.data.metrics), None)


def start_run(
    experiment: str,
    run_name: str,
    params: Optional[Mapping[str, Any]] = None,
    tags: Optional[Mapping[str, Any]] = None,
    parent: Optional[Run] = None,
    lazy: bool = False,
) -> Run:
    """Create a run (nested under ``parent`` if given) with params and tags, including the code version.
    With the server unreachable, the run is created when it answers (see :class:`Run`); ``lazy``: only
    when something is first logged to it (:meth:`Run.discard` drops a run that logged nothing)."""
    all_tags = {MLFLOW_RUN_NAME: run_name, **code_version(), HOST_TAG: socket.gethostname(), PID_TAG: os.getpid(),
                **(tags or {})}
    if parent is not None and parent.run_id is not None:
        all_tags[MLFLOW_PARENT_RUN_ID] = parent.run_id
    run = Run(None, create={"experiment": experiment, "run_name": run_name,
                            "tags": {k: str(v) for k, v in all_tags.items()}})
    if lazy:
        if params:
            run.pending.append(("_log_params", (params,)))
        return run
    with run._lock:
        run._flush()
    if params:
        run.log_params(params)
    return run


@contextmanager
def tracked_run(
    experiment: str,
    run_name: str,
    params: Optional[Mapping[str, Any]] = None,
    tags: Optional[Mapping[str, Any]] = None,
    parent: Optional[Run] = None,
    lazy: bool = False,
) -> Iterator[Run]:
    """One MLflow run's whole life: started on entry (:func:`start_run`'s arguments: nested under
    ``parent``, with ``params``, ``tags`` and the code version; ``lazy``: created at its first logged
    call), FINISHED when the block ends, FAILED when it raises, and the exception goes on. A run the
    block ended itself (:meth:`Run.finish`, :meth:`Run.discard`, :meth:`Run.delete`) is left so.

        with tracked_run("raptor/ICEWS14", "ICEWS14-raptor-seed0", params=p, tags=t) as run:
            run.log_metrics({"rl/reward": 0.4}, step=1)
    """
    run = start_run(experiment, run_name, params=params, tags=tags, parent=parent, lazy=lazy)
    try:
        yield run
    except BaseException:
        if not run.ended:
            run.finish("FAILED")
        raise
    if not run.ended:
        run.finish()


def close_stale_runs(exp_id: str, run_name: str, tags: Mapping[str, Any]) -> list[str]:
    """Mark :data:`KILLED` the runs a new run ``run_name`` repeats that a killed process left RUNNING:
    same experiment (id), name and :data:`IDENTITY_TAGS`, created by a process of this machine that
    no longer runs. A run of a process still running, of another machine (a Dask worker) or without
    the process tags is left as it is. Returns the ids marked."""
    want = {k: str(tags[k]) for k in IDENTITY_TAGS if k in tags}
    here, marked = socket.gethostname(), []
    for r in client().search_runs([exp_id], "attributes.status = 'RUNNING'"):
        t = r.data.tags
        pid = t.get(PID_TAG, "")
        if (r.info.run_name != run_name or any(t.get(k) != v for k, v in want.items()) or t.get(HOST_TAG) != here
                or not pid.isdigit() or int(pid) == os.getpid() or process_alive(int(pid))):
            continue
        client().set_terminated(r.info.run_id, status=KILLED)
        marked.append(r.info.run_id)
        log.warning("MLflow run %s (%s) was left RUNNING by process %s, which is gone: marked %s",
                    r.info.run_id, run_name, pid, KILLED)
    return marked


#: MLflow 3's UI opens on its GenAI views unless the link (or the browser's remembered choice, the
#: "Model training" switch at the top left) selects the model-training one: runs table, charts.
MODEL_TRAINING_VIEW = "workflowType=machine_learning"


def run_url(experiment: str, run_id: str) -> Optional[str]:
    """The run's page in the MLflow UI when the tracking URI is a server (``None`` for a file store:
    open that with ``mlflow ui --backend-store-uri URI``)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri.startswith(("http://", "https://")):
        return None
    try:
        exp = client().get_experiment_by_name(experiment)
    except UNREACHABLE:
        return None
    return f"{uri.rstrip('/')}/#/experiments/{exp.experiment_id}/runs/{run_id}?{MODEL_TRAINING_VIEW}" if exp else None


def invocation_id() -> Optional[str]:
    """The pipeline invocation this run belongs to: the top-level Prefect flow run above this one
    (the pipeline flow, the parent of a ``dvc repro``'s stages, a sweep's flow), else the one set by
    :func:`tasks.invocation.set_invocation` (the stages of a plain ``dvc repro``, run without
    Prefect); None in a top-level flow run or a stage run by hand."""
    flow_id = None
    if "prefect" in sys.modules:  # no Prefect loaded: no Prefect run (and no import of it here)
        from prefect.runtime import flow_run

        flow_id = flow_run.id
        if flow_id:
            try:
                root = flow_run.root_flow_run_id
            except Exception:  # noqa: BLE001 - the Prefect API is gone: the tag is left out, training goes on
                root = None
            if root and str(root) != str(flow_id):
                return str(root)
    return None if flow_id else invocation.current()


def prefect_ids() -> dict[str, str]:
    """Tags linking an MLflow run to the Prefect flow and task run that logged it (none outside
    Prefect), and ``pipeline_run_id``: its pipeline invocation (:func:`invocation_id`)."""
    ids = {}
    if "prefect" in sys.modules:
        from prefect.runtime import flow_run, task_run

        ids = {"prefect_flow_run_id": flow_run.id, "prefect_task_run_id": task_run.id}
    ids["pipeline_run_id"] = invocation_id()
    return {k: str(v) for k, v in ids.items() if v}


PIPELINE_STAGE = "pipeline"


def pipeline_run(experiment: str, dataset: str) -> tuple[Optional[Run], bool]:
    """``(run, created)``: the MLflow run of this pipeline invocation in ``experiment`` (tag
    ``stage: pipeline``, named ``pipeline-<dataset>``), the parent of the stage runs logged there;
    found by its ``pipeline_run_id`` or created. ``(None, False)`` outside a pipeline invocation or
    when MLflow cannot be reached (the stage's runs are then top-level, as before)."""
    ids = prefect_ids()
    invocation = invocation_id()
    if not invocation:
        return None, False
    try:
        exp_id = experiment_id(experiment)
        found = client().search_runs([exp_id], max_results=1, filter_string=(
            f"tags.pipeline_run_id = '{invocation}' and tags.stage = '{PIPELINE_STAGE}'"))
    except UNREACHABLE:
        return None, False
    if found:
        return Run(found[0].info.run_id, exp_id), False
    ids.pop("prefect_task_run_id", None)
    run = start_run(experiment, f"pipeline-{dataset}", tags={"dataset": dataset, "stage": PIPELINE_STAGE, **ids})
    return (run, True) if run.run_id else (None, False)


def close_pipeline_run(run: Optional[Run], created: bool) -> None:
    """End a stage's use of its pipeline run: finished (its end time is the last stage's), or deleted
    again when this stage created it and logged nothing under it (a stage that trained nothing)."""
    if run is None:
        return
    if created:
        try:
            children = client().search_runs([run.experiment_id], max_results=1,
                                             filter_string=f"tags.mlflow.parentRunId = '{run.run_id}'")
            data = client().get_run(run.run_id).data
            empty = not children and not data.metrics and not client().list_artifacts(run.run_id)
        except UNREACHABLE:
            empty = False
        if empty:
            run.delete()
            return
    run.finish()


@contextmanager
def pipeline_parent(experiment: str, dataset: str, nest: bool = True) -> Iterator[Optional[Run]]:
    """The pipeline run of this invocation (:func:`pipeline_run`; None outside one, or with ``nest``
    false) for the block's runs to nest under, closed when the block ends, however it ends
    (:func:`close_pipeline_run`: its end time is the last stage's)."""
    run, created = pipeline_run(experiment, dataset) if nest else (None, False)
    try:
        yield run
    finally:
        close_pipeline_run(run, created)


def runs_markdown(experiment: str, rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """A Markdown table of runs (``columns`` of each row, then its MLflow run of ``experiment``: a
    link on a tracking server, else the run id), for a Prefect artifact."""
    head = "| " + " | ".join(columns) + " | MLflow run |\n|" + "---|" * (len(columns) + 1) + "\n"
    lines = []
    for r in rows:
        cells = [f"{r[c]:.4f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in columns]
        run_id = r.get("mlflow_run_id")
        url = run_url(experiment, run_id) if run_id else None
        cells.append(f"[{run_id[:8]}]({url})" if url else (f"`{run_id}`" if run_id else "-"))
        lines.append("| " + " | ".join(cells) + " |")
    return f"MLflow experiment `{experiment}`\n\n" + head + "\n".join(lines) + "\n"
