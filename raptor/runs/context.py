"""What every run on one dataset shares: the dataset, its graph and environment, the params and the
training queries (:class:`Context`, loaded once and shared by the seeds and the variants)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from raptor.config import Params
from raptor.data.dataset import Dataset, load_dataset, with_inverse_queries
from raptor.mdp.env import TemporalEnv
from raptor.data.graph import TemporalGraph
from raptor.common.provenance import content_hash


@dataclass
class Context:
    """Everything a run needs that does not depend on the variant or the seed (shared by seeds)."""

    dataset: Dataset
    graph: TemporalGraph
    env: TemporalEnv
    params: Params
    train_queries: np.ndarray
    data_dir: Optional[Path] = None
    graph_path: Optional[Path] = None
    #: What the stages derive from the context once and share (the evaluation's filter index).
    cache: dict[str, Any] = field(default_factory=dict, repr=False)
    _hashes: Optional[dict[str, str]] = field(default=None, repr=False)

    def input_hashes(self) -> dict[str, Optional[str]]:
        """Content hashes of the ingested data and the graph (computed once)."""
        if self._hashes is None:
            self._hashes = {"data": content_hash(self.data_dir) if self.data_dir else None,
                            "graph": content_hash(self.graph_path) if self.graph_path else None}
        return self._hashes

    def check_model(self, meta: dict, path: str | Path) -> None:
        """Refuse a model (its ``meta``, read from ``path``) that was not trained on data of this shape:
        its entity and relation counts must be this dataset's (ids index its embeddings), and a model
        that walks paths must have been trained with this ``env.max_path_length``. Raises
        :class:`raptor.runs.checkpoints.CheckpointError` naming both sides."""
        from raptor.runs.checkpoints import CheckpointError

        ds = self.dataset
        have = (meta.get("num_entities"), meta.get("num_relations"))
        want = (ds.num_entities, ds.num_relations)
        if have != want:
            where = self.data_dir or ds.meta.get("dataset")
            raise CheckpointError(
                f"{path}: a model of dataset {meta.get('dataset')!r} ({have[0]} entities, {have[1]} relations) "
                f"does not fit {where} ({want[0]} entities, {want[1]} relations): use it with the data it was "
                "trained on")
        k, K = meta.get("max_path_length"), self.params.env.max_path_length
        if k and k != K:  # 0: a model that walks no paths (recurrency)
            raise CheckpointError(f"{path}: trained with env.max_path_length = {k}, the params say {K}: set "
                                  f"env.max_path_length: {k} to use it")

    def queries(self, split: str) -> np.ndarray:
        """int64 ``[2n, 4]`` queries of a split in both directions."""
        if split not in self.dataset.splits:
            raise ValueError(f"unknown split {split!r} (have {sorted(self.dataset.splits)})")
        return with_inverse_queries(self.dataset.splits[split], self.dataset.num_relations).astype(np.int64)


def load_context(data_dir: str | Path, graph_path: str | Path, params: Params) -> Context:
    dataset = load_dataset(data_dir)
    graph = TemporalGraph.load(graph_path)
    if graph.num_entities != dataset.num_entities or graph.num_relations != dataset.num_relations:
        raise ValueError(
            f"graph {graph_path} ({graph.num_entities} entities, {graph.num_relations} relations) does not match "
            f"dataset {data_dir} ({dataset.num_entities}, {dataset.num_relations})"
        )
    env = TemporalEnv(graph, params.env)
    train_q = with_inverse_queries(dataset.splits["train"], dataset.num_relations)
    return Context(dataset=dataset, graph=graph, env=env, params=params, train_queries=train_q,
                   data_dir=Path(data_dir), graph_path=Path(graph_path))
