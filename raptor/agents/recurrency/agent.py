"""The recurrency baseline (Gastinger et al., IJCAI 2024, "History repeats itself"): no network and no
training; its decay ``lambda`` and weight ``alpha`` per relation are chosen on the valid split
(:func:`raptor.agents.recurrency.method.fit`, params section ``recurrency``), and it ranks every entity by strict
plus relaxed recurrency over the facts before the query time (:func:`raptor.agents.recurrency.method.rank_queries`).

Through the registry it is a system like the others: its finetune stage "trains" (selects) one run per
seed (the selection is deterministic, so every seed holds the same model), writes ``best.pt`` /
``final.pt`` and a one-row history; its evaluate stage ranks the test split; significance and the
report compare it with the baseline.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from raptor.runs import checkpoints
from raptor.agents.beam import BeamResult
from raptor.runs.loop import TrainResult, write_history
from raptor.evaluation.ranking import context_filter
from raptor.agents.recurrency.method import RecurrencyModel, build_history, fit, rank_queries, score
from raptor.runs.rundir import RunDir
from raptor.agents.base import AGENT_KEY, Agent, RunOptions

#: The columns of its ``history.csv``: one row, the selection (it has no epochs and no reward).
HISTORY_FIELDS = ("epoch", "val_mrr", "val_hits@1", "val_hits@3", "val_hits@10", "seconds")


@dataclass(frozen=True)
class TablesConfig:
    """What scoring needs besides the tables (from the ``recurrency`` section)."""

    window: int = 0
    min_denominator: float = 1.0e-15


class RecurrencyTables(nn.Module):
    """The selected ``lambda`` and ``alpha`` of every relation (inverse relations ``r + R`` included) as
    float64 buffers ``[2R]``: a model file of the project's safe format (tensors and plain data) that
    :func:`raptor.agents.base.load_model` rebuilds like any agent's (it has the sizes, ``config`` and
    ``max_path_length`` that :func:`raptor.runs.checkpoints.model_meta` records; it walks no paths: 0)."""

    max_path_length = 0

    def __init__(self, num_entities: int, num_relations: int, config: TablesConfig = TablesConfig(),
                 default_lambda: float = 1.0001, default_alpha: float = 0.99999):
        super().__init__()
        self.num_entities, self.num_relations, self.config = int(num_entities), int(num_relations), config
        self.register_buffer("lambdas", torch.full((2 * num_relations,), float(default_lambda), dtype=torch.float64))
        self.register_buffer("alphas", torch.full((2 * num_relations,), float(default_alpha), dtype=torch.float64))

    def model(self) -> RecurrencyModel:
        """The scoring model of :mod:`raptor.agents.recurrency.method` (without the selection record)."""
        return RecurrencyModel(self.lambdas.cpu().numpy().copy(), self.alphas.cpu().numpy().copy(),
                               self.num_entities, self.num_relations, self.config.window, self.config.min_denominator)

    def select(self, model: RecurrencyModel) -> None:
        """Take the ``lambda``/``alpha`` of a fitted model."""
        self.lambdas.copy_(torch.from_numpy(np.asarray(model.lambdas, np.float64)))
        self.alphas.copy_(torch.from_numpy(np.asarray(model.alphas, np.float64)))


class Recurrency(Agent):
    name = "recurrency"
    checkpoint_format = "raptor.agents.recurrency.method-checkpoint/v1"  # never written: a selection has no epochs to resume

    def build(self, ctx, seed: int) -> RecurrencyTables:
        cfg = ctx.params.recurrency
        return RecurrencyTables(ctx.dataset.num_entities, ctx.dataset.num_relations,
                                TablesConfig(cfg.window, cfg.min_denominator), cfg.default_lambda, cfg.default_alpha)

    def train(self, ctx, policy: RecurrencyTables, run: RunOptions) -> TrainResult:
        """Select ``lambda`` and ``alpha`` on the valid split (history: train and valid facts before each
        query); validate the selection (``run.evaluate_fn``); write ``best.pt`` = ``final.pt`` and a
        one-row history to ``run.out_dir``. ``run.epochs`` does not apply: there is nothing to iterate."""
        if run.out_dir is not None and run.resume:
            done = RunDir(run.out_dir)
            if done.best.is_file() and done.history.is_file():
                # a finished selection of this fingerprint (RunDir.prepare empties any other): replay it
                history = json.loads(done.history.read_text())
                policy.load_state_dict(self.load(done.best)[0].state_dict())
                for row in history:
                    if run.on_epoch_end is not None:
                        run.on_epoch_end(row["epoch"], {**row, "replayed": True})
                best = history[-1].get("val_mrr") if history else None
                return TrainResult(history=history, best_mrr=best, best_epoch=0 if best is not None else None,
                                   out_dir=str(run.out_dir))
        started = time.perf_counter()
        ds = ctx.dataset
        fitted = fit(ds.splits["train"], ds.splits["valid"], ds.num_entities, ds.num_relations, ctx.params.recurrency)
        policy.select(fitted)
        row: dict[str, Any] = {"epoch": 0, "seconds": time.perf_counter() - started, "val_mrr": None}
        if run.evaluate_fn is not None:
            metrics = run.evaluate_fn(policy)
            row["val_mrr"] = float(metrics["mrr"])
            row.update({f"val_{k}": v for k, v in metrics.items() if k != "mrr"})
        if run.on_epoch_end is not None:
            run.on_epoch_end(0, row)
        if run.out_dir is not None:
            out = Path(run.out_dir)
            meta = checkpoints.model_meta(policy, {**(run.meta or {}), AGENT_KEY: self.name, "epoch": 0,
                                                   "val_mrr": row["val_mrr"]}, run.seed)
            for name in ("final.pt", "best.pt"):  # the selection is both
                checkpoints.save_model(out / name, policy, meta)
            write_history(out, [row], HISTORY_FIELDS)
        return TrainResult(history=[row], best_mrr=row["val_mrr"], best_epoch=0 if row["val_mrr"] is not None else None,
                           out_dir=str(run.out_dir) if run.out_dir is not None else None)

    def rebuild(self, weights: dict[str, Any], meta: dict[str, Any], device) -> RecurrencyTables:
        tables = RecurrencyTables(meta["num_entities"], meta["num_relations"], TablesConfig(**meta["model"]))
        tables.load_state_dict(weights)
        return tables

    def rank(self, ctx, model: RecurrencyTables, queries, precision: str = "float64", device="cpu"):
        """Exact ranks over every entity (not only the top ``eval.beam_size``), with the history of every
        split's facts before each query's time (the reference's single-step setting); the candidates kept
        for ``predictions.parquet`` are the ``eval.beam_size`` best (no paths: ``-1``)."""
        m = model.model()
        history = build_history(ctx.dataset.all_quadruples(), ctx.dataset.num_entities, ctx.dataset.num_relations)
        q = np.asarray(queries, dtype=np.int64)
        ranks = rank_queries(m, history, q, context_filter(ctx))
        ent, sc = score(m, history, q, top_k=ctx.params.eval.beam_size)
        K = ctx.params.env.max_path_length
        none = np.full((len(q), K), -1, dtype=np.int64)
        res = BeamResult(cand_entity=ent, cand_score=sc.astype(np.float32), path_entity=none, path_relation=none,
                         path_time=none, path_score=np.full(len(q), np.nan, dtype=np.float32))
        return res, ranks


AGENT = Recurrency()
