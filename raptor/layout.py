"""Where each stage's artifacts live, relative to the project root (mirrored by ``dvc.yaml``).

::

    data/<dataset>/ingested/                  ingest
    data/<dataset>/graph.npz                  graph
    data/<dataset>/labels/                    label
    runs/<dataset>/<variant>/train/seed<S>/   finetune (pretrain/ and rl/ inside)
    runs/<dataset>/<variant>/eval/seed<S>/    evaluate (metrics.json, predictions.parquet)
    runs/<dataset>/<variant>/metrics.json     evaluate: mean and std over seeds (DVC metrics)
    reports/<dataset>/significance.json       significance
    reports/<dataset>/report/                 report
    runs/<dataset>/ablation/...               the pretraining-epochs ablation (ablation/dvc.yaml)
"""

from __future__ import annotations

from pathlib import Path


def data_dir(root: str | Path, dataset: str) -> Path:
    return Path(root) / "data" / dataset


def ingested(root, dataset) -> Path:
    return data_dir(root, dataset) / "ingested"


def graph(root, dataset) -> Path:
    return data_dir(root, dataset) / "graph.npz"


def labels(root, dataset) -> Path:
    return data_dir(root, dataset) / "labels"


def variant_dir(root, dataset, variant) -> Path:
    return Path(root) / "runs" / dataset / variant


def train_dir(root, dataset, variant) -> Path:
    return variant_dir(root, dataset, variant) / "train"


def eval_dir(root, dataset, variant) -> Path:
    return variant_dir(root, dataset, variant) / "eval"


def seed_dir(folder: str | Path, seed: int) -> Path:
    return Path(folder) / f"seed{seed}"


def significance(root, dataset) -> Path:
    return Path(root) / "reports" / dataset / "significance.json"


def report(root, dataset) -> Path:
    return Path(root) / "reports" / dataset / "report"


def ablation_dir(root, dataset) -> Path:
    return Path(root) / "runs" / dataset / "ablation"
