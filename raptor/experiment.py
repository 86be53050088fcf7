"""One training run of a variant and the evaluation of a trained model: what the stages call.

Variants (:mod:`raptor.variants`): every variant is actor-critic RL for ``rl.epochs`` epochs,
from a random initialisation (``pure_rl``) or from the weights of a reachability pretraining run
(``raptor``: :func:`raptor.pretrain.pretrain_run` writes them; embeddings, time encoding, LSTM path
encoder and actor MLP carry over, the critic keeps its initial weights, Adam starts afresh).

A run writes to its own folder, checkpoints as it goes and resumes where it stopped when started
again on the same folder, but only from a checkpoint whose fingerprint (:func:`run_fingerprint`:
resolved params, the content of its inputs, the code) equals its own and that can continue toward
its epoch budget (:func:`raptor.loop.budget_mismatch`: a larger budget extends a run, a smaller one
is trained afresh); otherwise it starts afresh and says why. A finished result is never reused for
inputs, or an epoch budget, it was not computed from.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from . import variants
from .agents import PAPER_AGENT, agent_of, get_agent
from .agents.base import RunOptions, load_model
from .beam import beam_search
from .config import Params, params_to_dict, result_params
from .constants import METRIC_KEYS, RUN_CONFIG_FILE
from .data import Dataset, load_dataset, with_inverse_queries
from .env import TemporalEnv
from .graph import TemporalGraph
from .io import RunMismatchError, atomic_write_json
from .loop import checkpoint_budget_mismatch
from .policy import Policy
from .provenance import code_hash, content_hash
from .ranking import FilterIndex, build_filter, evaluation_metrics, filtered_ranks, write_metrics, write_predictions
from .runtime import configure_runtime, resolve_device

log = logging.getLogger("raptor")


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
    data_dir: Optional[Path] = None
    graph_path: Optional[Path] = None
    _filter: Optional[FilterIndex] = field(default=None, repr=False)
    _hashes: Optional[dict[str, str]] = field(default=None, repr=False)

    def input_hashes(self) -> dict[str, Optional[str]]:
        """Content hashes of the ingested data and the graph (computed once)."""
        if self._hashes is None:
            self._hashes = {"data": content_hash(self.data_dir) if self.data_dir else None,
                            "graph": content_hash(self.graph_path) if self.graph_path else None}
        return self._hashes

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
    return Context(dataset=dataset, graph=graph, env=env, params=params, train_queries=train_q,
                   data_dir=Path(data_dir), graph_path=Path(graph_path))


def rank_queries(ctx: Context, policy, queries: np.ndarray, precision: str = "float32", device="cpu",
                 agent: str = PAPER_AGENT):
    """Candidates and time-aware filtered ranks of ``[Q, 4]`` queries by ``agent``'s search (beam search
    by default): ``(BeamResult, ranks [Q])``."""
    return get_agent(agent).rank(ctx, policy, queries, precision, device)


def make_validator(ctx: Context, split: str = "valid", precision: str = "float32", device="cpu",
                   agent: str = PAPER_AGENT):
    """``policy -> metrics`` on ``split`` (for checkpoint selection during RL)."""
    queries = ctx.queries(split)

    def validate(policy) -> dict[str, float]:
        _, ranks = rank_queries(ctx, policy, queries, precision, device, agent)
        m = evaluation_metrics(ranks, queries[:, 1], ctx.dataset.num_relations)
        return {k: m[k] for k in METRIC_KEYS}

    return validate


def snapshot_path(run_dir: str | Path, epochs: int) -> Path:
    """Where a pretraining run (:func:`raptor.pretrain.pretrain_run`) keeps its weights after
    ``epochs`` epochs: what a pretrained variant's RL phase starts from."""
    return Path(run_dir) / f"pretrained-e{epochs}.pt"




def run_fingerprint(params: Params, kind: str, seed: int, inputs: dict[str, Optional[str]], code: str,
                    continued: Sequence[str] = (), ignored_sections: Sequence[str] = (),
                    **extra: Any) -> dict[str, Any]:
    """Everything that changes a run's results: every params field that can (the schema marks the
    others, :func:`raptor.config.result_params`) except ``continued`` (epoch counts: more epochs
    continue a run) and ``ignored_sections`` (those whose effect reaches the run through an input,
    e.g. pretraining through its weights), the content hashes of its ``inputs`` and the ``code``
    hash of the modules it runs."""
    flat = {k: v for k, v in result_params(params).items()
            if k not in continued and not any(k.startswith(s + ".") for s in ignored_sections)}
    return {"kind": kind, "seed": int(seed), "params": flat, "inputs": dict(inputs), "code": code, **extra}


def _differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, name + ".")
        elif a != b:
            out.append(name if prefix.startswith(("inputs", "code")) or name == "code"
                       else f"{name}: {a!r} -> {b!r}")
    return out


def rl_fingerprint(params: Params, variant: str, seed: int, inputs: dict[str, Optional[str]], code: str,
                   pretrain_epochs: int = 0) -> dict[str, Any]:
    """The fingerprint of one RL run: labels and pretraining reach it through ``init_model`` (an
    input), and it holds only the params its agent reads (actor-critic: model, rl; TITer: titer)."""
    return run_fingerprint(params, "rl", seed, inputs, code, continued=("rl.epochs",),
                           ignored_sections=("pretrain", "labeling") + variants.get(variant).unread_params,
                           variant=variant, pretrain_epochs=int(pretrain_epochs))


def prepare_run_dir(out: Path, fingerprint: dict[str, Any], resume: bool = True,
                    cannot_continue: Optional[Callable[[Path], Optional[str]]] = None,
                    resume_only: bool = False) -> Optional[str]:
    """Make ``out`` hold only checkpoints of this ``fingerprint``: a folder written by any other
    configuration (or any folder, without ``resume``, or one that ``cannot_continue(out)`` gives a
    reason against) is emptied. Returns why it was emptied (also logged), or ``None`` when the
    folder was new or is continued.

    ``resume_only``: never empty a folder that holds files; raise :class:`RunMismatchError` naming
    the reason instead, and leave the folder as it was (hours of a long run are not thrown away
    because the code or a param moved under it)."""
    out.mkdir(parents=True, exist_ok=True)
    marker = out / RUN_CONFIG_FILE
    reason = None
    if marker.exists():
        try:
            old = json.loads(marker.read_text())
        except ValueError:
            old = {}
        if not resume:
            reason = "asked to start afresh"
        elif old != fingerprint:
            diff = _differences(old, fingerprint)
            reason = "changed since its checkpoints were written: " + "; ".join(diff[:8]) + (
                f" (+{len(diff) - 8} more)" if len(diff) > 8 else "")
    elif any(out.iterdir()):
        reason = f"holds files of an unknown run (no {RUN_CONFIG_FILE})" if resume else "asked to start afresh"
    if reason is None and cannot_continue is not None:
        reason = cannot_continue(out)
    if reason is not None and resume_only:
        raise RunMismatchError(f"{out}: refusing to start afresh (it holds a run that cannot be continued: {reason}); "
                               "move or delete the folder to start a new run there")
    if reason is not None:
        log.warning("%s: starting afresh, %s", out, reason)
        for child in out.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    atomic_write_json(marker, fingerprint)
    return reason


def effective_epochs(params: Params, variant: str, pretrain_epochs: int, rl_epochs: Optional[int] = None) -> int:
    """RL epochs a run of ``variant`` trains: ``rl.epochs`` (or ``rl_epochs``), plus
    ``pretrain.epochs`` for a variant without pretraining under ``train.equal_total_epochs`` (the
    same total budget as pretraining + RL)."""
    n_rl = params.rl.epochs if rl_epochs is None else rl_epochs
    if not variants.get(variant).pretrained and rl_epochs is None and params.train.equal_total_epochs:
        n_rl += params.pretrain.epochs
    return n_rl


def variant_precision(params: Params, variant: str, device) -> str:
    """The resolved autocast precision of ``variant``'s runs: its agent's (:attr:`raptor.agents.Agent.precision_key`)."""
    return get_agent(variants.get(variant).agent).precision(params, device)


def run_code(variant: str) -> list[str]:
    """The modules a run of ``variant`` runs (its code hash): this one and its agent's."""
    return [__name__, *get_agent(variants.get(variant).agent).code]


def run_variant(
    ctx: Context,
    variant: str,
    seed: int,
    out_dir: str | Path,
    *,
    init_model: Optional[str | Path] = None,
    pretrain_epochs: int = 0,
    rl_epochs: Optional[int] = None,
    on_epoch_end: Optional[EpochHook] = None,
    resume: bool = True,
    progress: bool = True,
    num_threads: Optional[int] = None,
    resume_only: bool = False,
) -> dict[str, Any]:
    """Train one (variant, seed) with RL; returns a summary (also written to ``out_dir/summary.json``).

    ``init_model``: the weights the RL phase starts from (a pretrained variant's checkpoint after
    ``pretrain_epochs`` epochs); ``None`` with ``pretrain_epochs = 0`` starts from a random
    initialisation (the ablation's 0-epoch arm).

    Outputs in ``out_dir``: ``best.pt`` (best validation MRR), ``final.pt``, ``history.json/csv``,
    ``checkpoint.pt``, ``summary.json`` and ``run_config.json`` (:func:`run_fingerprint`).
    """
    v = variants.get(variant)
    agent = get_agent(v.agent)
    p = ctx.params
    if v.pretrained and init_model is None and pretrain_epochs:
        raise ValueError(f"variant {variant!r} starts from a pretrained checkpoint: give init_model "
                         "(the pretrain stage writes it)")
    configure_runtime(p.train.num_threads if num_threads is None else num_threads)
    device = resolve_device(p.train.device)
    precision = variant_precision(p, variant, device)
    out = Path(out_dir)
    n_rl = effective_epochs(p, variant, pretrain_epochs, rl_epochs) if agent.iterates else 0
    if init_model is not None and not Path(init_model).is_file():
        raise FileNotFoundError(f"initial weights not found: {init_model} (run the pretrain stage first)")
    inputs = {**ctx.input_hashes(), "init_model": content_hash(init_model) if init_model else None}
    fingerprint = rl_fingerprint(p, variant, seed, inputs, code_hash(run_code(variant)), pretrain_epochs)

    def past_the_budget(run: Path) -> Optional[str]:  # a run never stands for a smaller epoch budget
        return checkpoint_budget_mismatch(run, agent.checkpoint_format, "RL checkpoint", n_rl)

    restarted = prepare_run_dir(out, fingerprint, resume, cannot_continue=past_the_budget, resume_only=resume_only)
    started = time.perf_counter()

    meta = {"variant": variant, "dataset": ctx.dataset.meta.get("dataset"), "params": params_to_dict(p),
            "pretrain_epochs": int(pretrain_epochs), "rl_epochs": n_rl}
    hook = (lambda e, m: on_epoch_end("rl", e, m)) if on_epoch_end else None
    validator = make_validator(ctx, "valid", precision, device, v.agent)
    policy = agent.build(ctx, seed)
    if init_model is not None:
        init, _ = load_model(init_model, device=device)
        policy.load_state_dict(init.state_dict())
        meta["init_model"] = str(init_model)

    result = agent.train(ctx, policy, RunOptions(
        seed=seed, epochs=n_rl, out_dir=out, device=device, precision=precision, resume=resume, progress=progress,
        evaluate_fn=validator, on_epoch_end=hook, meta=meta))
    return _finish_run(out, variant, seed, pretrain_epochs, n_rl, precision, device, result, restarted, started)


def _device_name(device) -> str:
    """``cpu``, or the accelerator's model (``cuda: NVIDIA H100 80GB HBM3``): where a run's numbers come from."""
    device = torch.device(device)
    return f"cuda: {torch.cuda.get_device_name(device)}" if device.type == "cuda" else device.type


def _finish_run(out: Path, variant: str, seed: int, pretrain_epochs: int, n_rl: int, precision: str, device,
                result, restarted, started: float) -> dict[str, Any]:
    """The run's ``summary.json`` (written atomically) from its :class:`raptor.loop.TrainResult`."""
    summary = {
        "variant": variant, "seed": seed, "pretrain_epochs": int(pretrain_epochs), "rl_epochs": n_rl,
        "precision": precision, "device": _device_name(device), "best_val_mrr": result.best_mrr,
        "best_epoch": result.best_epoch,
        "epochs_trained": len(result.history), "stopped_early": result.stopped_early,
        "final_reward": result.history[-1].get("reward") if result.history else None,
        "model": str(out / "best.pt"), "restarted": restarted,
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
    policy, meta = load_model(model_path, device=device)
    policy.eval()
    queries = ctx.queries(split)
    started = time.perf_counter()
    agent = get_agent(agent_of(meta))
    precision = agent.precision(p, device)
    with agent.test_time(ctx, policy, meta, split):  # e.g. TITer's inductive mean on the test split
        res, ranks = agent.rank(ctx, policy, queries, precision, device)
    seconds = time.perf_counter() - started
    metrics = evaluation_metrics(ranks, queries[:, 1], ctx.dataset.num_relations)
    metrics["split"] = split
    metrics["precision"] = precision
    metrics["seconds"] = round(seconds, 3)
    metrics["ms_per_query"] = round(1000 * seconds / max(len(queries), 1), 4)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # The predictions first (the larger file): a full disk leaves the previous metrics with their predictions.
    write_predictions(
        out / "predictions.parquet", queries[:, 0], queries[:, 1], queries[:, 2], queries[:, 3],
        res.cand_entity, res.cand_score, ranks,
        best_path={"path_entities": res.path_entity, "path_relations": res.path_relation,
                   "path_times": res.path_time},
    )
    write_metrics(out / "metrics.json", metrics)
    return metrics
