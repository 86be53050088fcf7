"""Shared fixtures: tiny hand-built raw datasets in the published layout."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

# A hand-built TKG: 5 entities, 3 relations, days 1..6 (raw), already in temporal split order.
TINY_ENTITIES = ["Barack Obama", "Angela Merkel", "China", "Iran", "United Nations"]
TINY_RELATIONS = ["Make statement", "Consult", "Host a visit"]
TINY_SPLITS = {
    "train": [(0, 0, 1, 1), (1, 1, 2, 2), (2, 2, 3, 3), (0, 1, 3, 3)],
    "valid": [(3, 0, 4, 4), (0, 0, 2, 4)],
    "test": [(4, 1, 0, 5), (1, 2, 4, 6)],
}


def write_raw_dataset(
    directory: Path,
    splits=None,
    entities=None,
    relations=None,
    time_scale: int = 1,
    crlf: bool = False,
    extra_column: bool = False,
) -> Path:
    """Write a raw dataset folder (tab-separated ids, ``name<TAB>id`` dictionaries)."""
    splits = TINY_SPLITS if splits is None else splits
    entities = TINY_ENTITIES if entities is None else entities
    relations = TINY_RELATIONS if relations is None else relations
    nl = "\r\n" if crlf else "\n"
    directory.mkdir(parents=True, exist_ok=True)
    for name, quads in splits.items():
        rows = []
        for s, r, o, t in quads:
            fields = [s, r, o, t * time_scale] + ([0] if extra_column else [])
            rows.append("\t".join(str(f) for f in fields))
        (directory / f"{name}.txt").write_text(nl.join(rows) + nl, newline="")
    (directory / "entity2id.txt").write_text(nl.join(f"{n}\t{i}" for i, n in enumerate(entities)) + nl, newline="")
    (directory / "relation2id.txt").write_text(nl.join(f"{n}\t{i}" for i, n in enumerate(relations)) + nl, newline="")
    return directory


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models: one torch thread is faster, and immune to OpenMP spin-waiting on a shared machine."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tiny_raw(tmp_path: Path) -> Path:
    return write_raw_dataset(tmp_path / "raw")


@pytest.fixture
def params_file(tmp_path: Path) -> Path:
    """A params file of the tests' own (never the repo's params.yaml, which users edit): the
    paper's defaults, one dataset."""
    f = tmp_path / "params-fixture.yaml"
    f.write_text("datasets:\n  TINY: {raw_dir: raw, start_date: '2014-01-01'}\n")
    return f


@pytest.fixture(scope="session")
def _mlflow_schema(tmp_path_factory) -> Path:
    """An empty MLflow SQLite store, created once per test process (MLflow's migrations cost about 1.5 s
    of CPU per new store)."""
    import mlflow

    db = tmp_path_factory.mktemp("mlflow-schema") / "mlflow.db"
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def mlflow_db(tmp_path: Path, _mlflow_schema: Path) -> Path:
    """``tmp_path/mlflow.db``: a new, empty MLflow store of this test's own (a copy of a store freshly
    created by this MLflow), what the test's first MLflow call would otherwise create there."""
    db = tmp_path / "mlflow.db"
    shutil.copyfile(_mlflow_schema, db)
    return db
