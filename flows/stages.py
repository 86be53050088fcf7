"""One Prefect flow per pipeline stage; ``dvc.yaml`` runs each through ``python -m flows STAGE``."""

from __future__ import annotations

from typing import Optional

from prefect import flow

from raptor.config import load_params
from tasks.data import graph_task, ingest_task, ingest_url_task


@flow(name="ingest")
def ingest_flow(out_dir: str, params_path: str = "params.yaml", raw_dir: Optional[str] = None) -> dict:
    """Raw splits -> Parquet. ``raw_dir`` overrides ``data.raw_dir``; ``data.url`` fetches instead."""
    params = load_params(params_path)
    d = params.data
    if d.url and not raw_dir:
        result = ingest_url_task(d.url, d.sha256, out_dir, params.ingest.time_step, d.dataset)
    else:
        result = ingest_task(raw_dir or d.raw_dir, out_dir, params.ingest.time_step, d.dataset)
    return {"counts": result.counts, "time_step": result.time_step, "seconds": result.seconds}


@flow(name="graph")
def graph_flow(data_dir: str, out_path: str) -> dict:
    """Parquet dataset -> inverse-augmented CSR graph."""
    return graph_task(data_dir, out_path)
