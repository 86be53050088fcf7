"""Tasks of the data stages: ingest and graph."""

from __future__ import annotations

from raptor.data.graph import build_graph
from raptor.data.ingest import IngestOptions, IngestResult, ingest, ingest_from_url

from .lazy import NO_CACHE, task


@task(name="ingest", cache_policy=NO_CACHE)
def ingest_task(raw_dir: str, out_dir: str, options: IngestOptions) -> IngestResult:
    """``options``: :func:`raptor.data.ingest.dataset_options` of the dataset."""
    return ingest(raw_dir, out_dir, options)


def retry_on_io_errors(task, task_run, state) -> bool:
    """Prefect retry condition: retry a download that failed on I/O, never invalid data
    (an ``IngestError``: a wrong checksum or a malformed file fails the same way every time)."""
    return "IngestError" not in str(state.message or "")


# Downloads can fail transiently; validation errors cannot, and are not retried.
@task(name="ingest-from-url", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=[5, 30, 120],
      retry_condition_fn=retry_on_io_errors)
def ingest_url_task(url: str, sha256: str, out_dir: str, options: IngestOptions) -> IngestResult:
    return ingest_from_url(url, sha256, out_dir, options)


@task(name="graph", cache_policy=NO_CACHE)
def graph_task(data_dir: str, out_path: str) -> dict:
    return build_graph(data_dir, out_path)
