"""The whole pipeline as one Prefect flow (what a scheduled deployment runs).

It reads like the pipeline diagram; each step is the same stage flow that ``dvc.yaml`` runs, so a
scheduled run and ``dvc repro`` produce the same artifacts. Output paths come from ``params.yaml``
(``data.dataset``) through :func:`stage_paths`, the same layout ``dvc.yaml`` declares.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from raptor.config import load_params

from .stages import graph_flow, ingest_flow


def stage_paths(dataset: str, root: str | Path = ".") -> dict[str, Path]:
    """Artifact paths of one dataset, mirroring ``dvc.yaml``."""
    base = Path(root) / "data" / dataset
    return {"ingested": base / "ingested", "graph": base / "graph.npz"}


@flow(name="raptor-pipeline")
def pipeline_flow(params_path: str = "params.yaml", root: str = ".") -> dict:
    """ingest -> graph (-> label -> pretrain -> finetune -> evaluate -> significance -> report as they land)."""
    params = load_params(params_path)
    paths = stage_paths(params.data.dataset, root)
    summary = {"ingest": ingest_flow(out_dir=str(paths["ingested"]), params_path=params_path)}
    summary["graph"] = graph_flow(data_dir=str(paths["ingested"]), out_path=str(paths["graph"]))
    return summary
