"""One training run of a variant and the evaluation of a trained model: what the stages call.

Variants (``train.variants``):

* ``pure_rl``: actor-critic from a random initialisation for ``rl.epochs`` epochs;
* ``raptor``: ``pretrain.epochs`` epochs of reachability pretraining (:mod:`raptor.pretrain`), then
  the same RL phase starting from the pretrained weights (embeddings, time encoding, LSTM path
  encoder, actor MLP; the critic keeps its initial weights, since pretraining does not train it;
  Adam starts afresh).

A run writes to its own folder (``pretrain/`` and ``rl/`` inside), checkpoints as it goes and
resumes where it stopped when started again on the same folder.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from .beam import beam_search
from .config import Params, flatten, params_to_dict
from .data import Dataset, load_dataset, with_inverse_queries
from .env import TemporalEnv
from .graph import TemporalGraph
from .io import atomic_write_json
from .labeling import LabelTable, load_label_table
from .policy import Policy
from .pretrain import pretrain
from .ranking import FilterIndex, build_filter, evaluation_metrics, filtered_ranks, write_metrics, write_predictions
from .rl import configure_runtime, load_model, resolve_device, train

VARIANTS = ("pure_rl", "raptor")

#: ``(phase, epoch, metrics)``: phase is "pretrain" or "rl".
EpochHook = Callable[[str, int, dict[str, Any]], None]


@dataclass
class Context:
    """Everything a run needs that does not depend on the variant or the seed (shared by seeds)."""

    dataset: Dataset
    graph: TemporalGraph
    env: TemporalEnv
    params: Params
    train_queries: np.ndarray
    _filter: Optional[FilterIndex] = field(default=None, repr=False)

    @property
    def filter(self) -> FilterIndex:
        if self._filter is None:
            self._filter = build_filter(self.dataset.all_quadruples(), self.dataset.num_relations)
        return self._filter

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
    return Context(dataset=dataset, graph=graph, env=env, params=params, train_queries=train_q)


def rank_queries(ctx: Context, policy: Policy, queries: np.ndarray, precision: str = "float32", device="cpu"):
    """Beam search + time-aware filtered ranks of ``[Q, 4]`` queries: ``(BeamResult, ranks [Q])``."""
    res = beam_search(policy, ctx.env, queries, ctx.params.eval, precision=precision, device=device)
    ranks = filtered_ranks(res.cand_entity, res.cand_score, queries[:, 2], queries[:, [0, 1, 3]], ctx.filter,
                           ctx.dataset.num_entities)
    return res, ranks


def make_validator(ctx: Context, split: str = "valid", precision: str = "float32", device="cpu"):
    """``policy -> metrics`` on ``split`` (for checkpoint selection during RL)."""
    queries = ctx.queries(split)

    def validate(policy: Policy) -> dict[str, float]:
        _, ranks = rank_queries(ctx, policy, queries, precision, device)
        m = evaluation_metrics(ranks, queries[:, 1], ctx.dataset.num_relations)
        return {k: m[k] for k in ("mrr", "hits@1", "hits@3", "hits@10")}

    return validate


#: Written into a run folder: what a checkpoint there may be continued with.
RUN_CONFIG_FILE = "run_config.json"

#: Settings that do not change a run's trajectory, so a checkpoint stays valid when they change:
#: more RL epochs continue a run; threads, validation spacing and orchestration are irrelevant.
_RESUMABLE_KEYS = ("profile", "rl.epochs", "eval.valid_every", "train.seeds", "train.variants",
                   "train.num_threads", "train.parallel_runs", "train.equal_total_epochs", "ablation", "data.url",
                   "data.sha256", "data.raw_dir", "data.start_date")


def run_fingerprint(params: Params, variant: str, seed: int, pretrain_epochs: int,
                    init_model: Optional[str | Path] = None) -> dict[str, Any]:
    """What determines a run's trajectory (resolved params, variant, seed, pretraining epochs)."""
    ignored = _RESUMABLE_KEYS + (("pretrain", "labeling") if variant == "pure_rl" else ())
    flat = {k: v for k, v in flatten(params_to_dict(params)).items()
            if not any(k == r or k.startswith(r + ".") for r in ignored)}
    return {"variant": variant, "seed": int(seed), "pretrain_epochs": int(pretrain_epochs),
            "init_model": str(init_model) if init_model else None, "params": flat}


def run_variant(
    ctx: Context,
    variant: str,
    seed: int,
    out_dir: str | Path,
    *,
    labels: Optional[LabelTable | str | Path] = None,
    pretrain_epochs: Optional[int] = None,
    rl_epochs: Optional[int] = None,
    on_epoch_end: Optional[EpochHook] = None,
    resume: bool = True,
    progress: bool = True,
    num_threads: Optional[int] = None,
    init_model: Optional[str | Path] = None,
) -> dict[str, Any]:
    """Train one (variant, seed); returns a summary (also written to ``out_dir/summary.json``).

    ``init_model`` starts the RL phase from saved weights instead of pretraining here (the
    ablation's shared pretraining snapshots); the run then records ``pretrain_epochs`` as given.

    Outputs: ``out_dir/pretrain/`` (raptor only: ``pretrained.pt``, history, checkpoint) and
    ``out_dir/rl/`` (``best.pt`` = best validation MRR, ``final.pt``, ``history.json/csv``,
    ``checkpoint.pt``), ``out_dir/run_config.json`` (:func:`run_fingerprint`).

    Resuming: with ``resume`` a run continues from the checkpoints in ``out_dir`` when they were
    written with the same :func:`run_fingerprint` (more ``rl.epochs`` extend a finished run); a
    folder from any other configuration is emptied first, so stale checkpoints are never continued.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
    p = ctx.params
    configure_runtime(p.train.num_threads if num_threads is None else num_threads)
    device = resolve_device(p.train.device)
    precision = p.train.precision
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_pre = p.pretrain.epochs if pretrain_epochs is None else pretrain_epochs
    n_rl = p.rl.epochs if rl_epochs is None else rl_epochs
    if variant == "pure_rl":
        if rl_epochs is None and p.train.equal_total_epochs:
            n_rl += n_pre  # the same total epoch budget as pretraining + RL
        n_pre = 0
    meta = {"variant": variant, "dataset": ctx.dataset.meta.get("dataset"), "params": params_to_dict(p),
            "pretrain_epochs": n_pre, "rl_epochs": n_rl}
    fingerprint = run_fingerprint(p, variant, seed, n_pre, init_model)
    marker = out / RUN_CONFIG_FILE
    if marker.exists() and (not resume or json.loads(marker.read_text()) != fingerprint):
        # Checkpoints of another configuration cannot be continued: start this run afresh.
        for child in out.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    atomic_write_json(marker, fingerprint)
    started = time.perf_counter()
    torch.manual_seed(seed)
    policy = Policy(ctx.dataset.num_entities, ctx.dataset.num_relations, p.model, p.env.max_path_length)

    pre_hist: list[dict] = []
    if init_model is not None:
        init, _ = load_model(init_model, device=device)
        policy.load_state_dict(init.state_dict())
        meta["init_model"] = str(init_model)
    elif n_pre > 0:
        if labels is None:
            raise ValueError("variant 'raptor' needs the reachability label table (run `raptor label` first)")
        table = labels if isinstance(labels, LabelTable) else load_label_table(labels)
        if table.max_path_length != p.env.max_path_length:
            raise ValueError(f"label table was built for K = {table.max_path_length}, "
                             f"but env.max_path_length = {p.env.max_path_length}")
        hook = (lambda e, m: on_epoch_end("pretrain", e, m)) if on_epoch_end else None
        pre_hist = pretrain(policy, ctx.env, table, ctx.train_queries, p.pretrain, seed=seed, precision=precision,
                            device=device, out_dir=out / "pretrain", resume=resume, epochs=n_pre,
                            on_epoch_end=hook, meta=meta, progress=progress)
        pre_model, _ = load_model(out / "pretrain" / "pretrained.pt", device=device)
        policy.load_state_dict(pre_model.state_dict())

    hook = (lambda e, m: on_epoch_end("rl", e, m)) if on_epoch_end else None
    result = train(policy, ctx.env, ctx.train_queries, p.rl, p.eval, seed=seed, precision=precision,
                   device=device, out_dir=out / "rl", evaluate_fn=make_validator(ctx, "valid", precision, device),
                   resume=resume, epochs=n_rl, on_epoch_end=hook, meta=meta, progress=progress)
    summary = {
        "variant": variant, "seed": seed, "pretrain_epochs": n_pre, "rl_epochs": n_rl,
        "best_val_mrr": result.best_mrr, "best_epoch": result.best_epoch,
        "final_reward": result.history[-1]["reward"] if result.history else None,
        "model": str(out / "rl" / "best.pt"),
        "pretrain_final": pre_hist[-1] if pre_hist else None,
        "seconds": round(time.perf_counter() - started, 2),
    }
    atomic_write_json(out / "summary.json", summary)
    return summary


def evaluate_model(
    ctx: Context,
    model_path: str | Path,
    out_dir: str | Path,
    split: str = "test",
    num_threads: Optional[int] = None,
) -> dict[str, Any]:
    """Beam-search evaluation of a saved model on ``split``: writes ``metrics.json`` and
    ``predictions.parquet`` to ``out_dir``; returns the metrics."""
    p = ctx.params
    configure_runtime(p.train.num_threads if num_threads is None else num_threads)
    device = resolve_device(p.train.device)
    model_path = Path(model_path)
    if not model_path.exists():
        raise FileNotFoundError(f"model not found: {model_path} (train it first)")
    policy, _ = load_model(model_path, device=device)
    policy.eval()
    queries = ctx.queries(split)
    started = time.perf_counter()
    res, ranks = rank_queries(ctx, policy, queries, p.train.precision, device)
    seconds = time.perf_counter() - started
    metrics = evaluation_metrics(ranks, queries[:, 1], ctx.dataset.num_relations)
    metrics["split"] = split
    metrics["seconds"] = round(seconds, 3)
    metrics["ms_per_query"] = round(1000 * seconds / max(len(queries), 1), 4)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_metrics(out / "metrics.json", metrics)
    write_predictions(
        out / "predictions.parquet", queries[:, 0], queries[:, 1], queries[:, 2], queries[:, 3],
        res.cand_entity, res.cand_score, ranks,
        best_path={"path_entities": res.path_entity, "path_relations": res.path_relation,
                   "path_times": res.path_time},
    )
    return metrics


def pretrain_snapshots(
    ctx: Context,
    seed: int,
    out_dir: str | Path,
    epochs: list[int],
    labels: LabelTable | str | Path,
    *,
    on_epoch_end: Optional[EpochHook] = None,
    num_threads: Optional[int] = None,
    progress: bool = True,
) -> dict[int, Optional[str]]:
    """Pretrain once for ``max(epochs)`` epochs, saving the weights after each ``n`` in ``epochs``.

    Returns ``{n: model path}`` (``None`` for ``n = 0``: RL from a random initialisation). Equal to
    separate ``n``-epoch pretraining runs (see :func:`raptor.pretrain.pretrain`), at the cost of one.
    """
    p = ctx.params
    configure_runtime(p.train.num_threads if num_threads is None else num_threads)
    device = resolve_device(p.train.device)
    out = Path(out_dir)
    wanted = sorted({int(n) for n in epochs if int(n) > 0})
    paths: dict[int, Optional[str]] = {0: None} if 0 in epochs else {}
    if not wanted:
        return paths
    table = labels if isinstance(labels, LabelTable) else load_label_table(labels)
    torch.manual_seed(seed)
    policy = Policy(ctx.dataset.num_entities, ctx.dataset.num_relations, p.model, p.env.max_path_length)
    hook = (lambda e, m: on_epoch_end("pretrain", e, m)) if on_epoch_end else None
    pretrain(policy, ctx.env, table, ctx.train_queries, p.pretrain, seed=seed, precision=p.train.precision,
             device=device, out_dir=out, resume=True, epochs=wanted[-1], on_epoch_end=hook,
             meta={"variant": "raptor", "dataset": ctx.dataset.meta.get("dataset")}, progress=progress,
             snapshots=tuple(wanted))
    for n in wanted:
        paths[n] = str(out / f"pretrained-e{n}.pt")
    return paths
