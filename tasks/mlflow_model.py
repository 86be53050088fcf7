"""A training run's best model as an MLflow pyfunc model, logged "from code" (no pickle).

MLflow copies this file into the logged model and runs it when the model is loaded
(``mlflow.pyfunc.load_model("models:/<model_id>")`` or ``"runs:/<run_id>/model"``): :class:`RaptorModel`
reads the project's weights-only checkpoint (``best.pt``, :func:`raptor.agents.base.load_model`, any
agent) and the context it ranks in (the ingested dataset, its graph and the run's resolved params,
:func:`raptor.runs.context.load_context`) from the model's artifacts, and ranks queries with the agent's
own ranking (:meth:`raptor.agents.base.Agent.rank`: beam search, or the recurrency baseline's scores).

Input: a DataFrame of int queries ``subject``, ``relation`` (``relation + R`` asks for the subject of
an inverse query), ``time`` (the dataset's time steps). Output: one row per (query, answer), best
first: ``query`` (the input row's position), ``rank`` (1-based), ``entity``, ``score``, ``name``.

It imports ``raptor`` and MLflow only (never ``tasks``, ``flows``, Prefect): the logged model carries
``raptor/`` as its code (``code_paths``) and this file, and loads in any environment with the
requirements it records. :func:`tasks.train.log_best_model` logs it.
"""

from __future__ import annotations

from typing import Any, Optional

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel

#: The query columns a model is given (long), and the answer columns it returns.
INPUT_COLUMNS = ("subject", "relation", "time")
OUTPUT_COLUMNS = {"query": "long", "rank": "long", "entity": "long", "score": "double", "name": "string"}
#: The model's artifacts: the checkpoint file, the ingested dataset folder (quadruples, names, meta), the
#: graph file, the resolved params (JSON).
ARTIFACTS = ("checkpoint", "data", "graph", "params")


class RaptorModel(PythonModel):
    """A RAPTOR model of any agent, ranking TKG queries (see the module's docstring)."""

    def load_context(self, context) -> None:
        from raptor.agents import agent_of, get_agent
        from raptor.agents.base import load_model
        from raptor.config import load_resolved
        from raptor.runs.context import load_context

        a = context.artifacts
        self.ctx = load_context(a["data"], a["graph"], load_resolved(a["params"]))
        self.model, self.meta = load_model(a["checkpoint"], device="cpu", ctx=self.ctx)
        self.model.eval()
        self.agent = get_agent(agent_of(self.meta))
        self.precision = self.agent.precision(self.ctx.params, "cpu")

    def queries(self, model_input) -> Any:
        """int64 ``[Q, 4]`` ``(subject, relation, 0, time)`` of the input rows, checked against the
        dataset (the object column is a placeholder: the ranks of a known answer are not returned)."""
        import numpy as np

        missing = [c for c in INPUT_COLUMNS if c not in model_input.columns]
        if missing:
            raise ValueError(f"missing query columns {missing} (a query is {', '.join(INPUT_COLUMNS)})")
        s, r, t = (np.asarray(model_input[c], dtype=np.int64) for c in INPUT_COLUMNS)
        ds = self.ctx.dataset
        for name, values, high in (("subject", s, ds.num_entities), ("relation", r, 2 * ds.num_relations)):
            bad = (values < 0) | (values >= high)
            if bad.any():
                raise ValueError(f"{name} {int(values[bad][0])} out of range [0, {high})")
        if (t < 0).any():
            raise ValueError(f"time {int(t[t < 0][0])} is negative")
        return np.stack([s, r, np.zeros_like(s), t], axis=1)

    def predict(self, context, model_input: pd.DataFrame, params: Optional[dict[str, Any]] = None) -> pd.DataFrame:
        """The ``top_k`` (param; default: all the agent keeps, ``eval.beam_size``) best answers of each
        query, in the agent's order, as rows ``query, rank, entity, score, name``."""
        import numpy as np
        import torch

        q = self.queries(model_input)
        top_k = int((params or {}).get("top_k") or 0)
        with torch.no_grad(), self.agent.test_time(self.ctx, self.model, self.meta, "test"):
            res, _ = self.agent.rank(self.ctx, self.model, q, self.precision, "cpu")
        ent, score = np.asarray(res.cand_entity), np.asarray(res.cand_score, dtype=np.float64)
        order = np.argsort(-score, axis=1, kind="stable")  # best first (the candidates may come unsorted)
        ent, score = np.take_along_axis(ent, order, 1), np.take_along_axis(score, order, 1)
        keep = (ent >= 0) & np.isfinite(score)  # padding and unreached candidates are no answers
        if top_k > 0:
            keep &= np.cumsum(keep, axis=1) <= top_k
        rows, cols = np.nonzero(keep)
        rank = np.cumsum(keep, axis=1)[rows, cols]
        names = np.asarray(self.ctx.dataset.entity_names, dtype=object)
        return pd.DataFrame({"query": rows.astype(np.int64), "rank": rank.astype(np.int64),
                             "entity": ent[rows, cols].astype(np.int64), "score": score[rows, cols],
                             "name": names[ent[rows, cols]].astype(str)})


def signature(top_k: int):
    """The model's signature: long ``subject, relation, time`` in; :data:`OUTPUT_COLUMNS` out; the
    param ``top_k`` (default ``top_k``: every candidate the agent keeps)."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

    return ModelSignature(inputs=Schema([ColSpec("long", c) for c in INPUT_COLUMNS]),
                          outputs=Schema([ColSpec(t, c) for c, t in OUTPUT_COLUMNS.items()]),
                          params=ParamSchema([ParamSpec("top_k", "long", int(top_k))]))


mlflow.models.set_model(RaptorModel())
