"""One training run of a variant and the evaluation of a trained model: what the stages call.

Variants (:mod:`raptor.agents.variants`): every variant is actor-critic RL for ``rl.epochs`` epochs,
from a random initialisation (``pure_rl``) or from the weights of a reachability pretraining run
(``raptor``: :func:`raptor.agents.actor_critic.pretrain.pretrain_run` writes them; embeddings, time encoding, LSTM path
encoder and actor MLP carry over, the critic keeps its initial weights, Adam starts afresh).

A run writes to its own folder, checkpoints as it goes and resumes where it stopped when started
again on the same folder, but only from a checkpoint whose fingerprint (:meth:`raptor.runs.rundir.RunDir.fingerprint`:
resolved params, the content of its inputs, the code) equals its own and that can continue toward
its epoch budget (:func:`raptor.runs.loop.budget_mismatch`: a larger budget extends a run, a smaller one
is trained afresh); otherwise it starts afresh and says why. A finished result is never reused for
inputs, or an epoch budget, it was not computed from.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pyarrow.parquet as pq
import torch

from raptor.agents import variants
from raptor.agents import PAPER_AGENT, agent_facts, agent_of, get_agent
from raptor.agents.base import load_model
from raptor.agents.beam import beam_search
from raptor.config import Params, params_to_dict
from raptor.constants import METRIC_KEYS
from raptor.runs.context import Context, load_context  # noqa: F401 (load_context: the stages' entry point, re-exported)
from raptor.common.io import atomic_path, atomic_write_json, check_writable, sha256_file
from raptor.runs.loop import checkpoint_budget_mismatch, phase_seconds, resumed_at
from raptor.agents.policy import Policy
from raptor.common.provenance import code_hash, content_hash, runtime_record
from raptor.evaluation.ranking import (FilterIndex, build_filter, evaluation_metrics, filtered_ranks, predictions_table,
                                       write_metrics)
from raptor.runs.checkpoints import CheckpointError
from raptor.runs.rundir import RunDir, RunOptions
from raptor.common.runtime import configure_runtime, resolve_device

log = logging.getLogger("raptor")


#: ``(phase, epoch, metrics)``: phase is "pretrain" or "rl".
EpochHook = Callable[[str, int, dict[str, Any]], None]


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


def effective_epochs(params: Params, variant: str, pretrain_epochs: int, rl_epochs: Optional[int] = None) -> int:
    """RL epochs a run of ``variant`` trains: ``rl.epochs`` (or ``rl_epochs``), plus
    ``pretrain.epochs`` for a variant without pretraining under ``train.equal_total_epochs`` (the
    same total budget as pretraining + RL)."""
    if not agent_facts(variants.get(variant).agent).iterates:
        return 0  # a training-free agent (the recurrency baseline) has no epoch budget
    n_rl = params.rl.epochs if rl_epochs is None else rl_epochs
    if not variants.get(variant).pretrained and rl_epochs is None and params.train.equal_total_epochs:
        n_rl += params.pretrain.epochs
    return n_rl


def variant_precision(params: Params, variant: str, device) -> str:
    """The resolved autocast precision of ``variant``'s runs: its agent's (:attr:`raptor.agents.Agent.precision_key`)."""
    return get_agent(variants.get(variant).agent).precision(params, device)


def precision_setting(params: Params, variant: str) -> str:
    """``variant``'s precision param as written (``auto`` unresolved), or its agent's fixed precision."""
    key = get_agent(variants.get(variant).agent).precision_key
    return functools.reduce(getattr, key.split("."), params) if key else agent_facts(variants.get(variant).agent).fixed_precision


def resolved_precision(params: Params, variant: str) -> str:
    """:func:`variant_precision` on the device ``train.device`` resolves to here: what a run's fingerprint holds."""
    return variant_precision(params, variant, resolve_device(params.train.device))


def run_code(variant: str) -> list[str]:
    """The modules a run of ``variant`` runs (its code hash): this one and its agent's."""
    return [__name__, *agent_facts(variants.get(variant).agent).code]


def run_variant(ctx: Context, variant: str, run: RunOptions, *, init_model: Optional[str | Path] = None,
                pretrain_epochs: int = 0, on_epoch_end: Optional[EpochHook] = None) -> dict[str, Any]:
    """Train one (variant, seed) with RL; returns a summary (also written to ``out_dir/summary.json``).

    ``run``: its ``seed``, folder ``out_dir``, ``epochs`` (the RL epochs; ``None``:
    :func:`effective_epochs`), ``resume``, ``resume_only``, ``num_threads`` and progress bar; its
    precision and device come from the params (``run.precision``/``device`` are not read), its
    validation and metadata from here. ``on_epoch_end``: ``(phase, epoch, metrics)``.

    ``init_model``: the weights the RL phase starts from (a pretrained variant's checkpoint after
    ``pretrain_epochs`` epochs); ``None`` with ``pretrain_epochs = 0`` starts from a random
    initialisation (the ablation's 0-epoch arm).

    Outputs in ``out_dir``: ``best.pt`` (best validation MRR), ``final.pt``, ``history.json/csv``,
    ``checkpoint.pt``, ``summary.json`` and ``run_config.json`` (:class:`raptor.runs.rundir.RunDir`).
    """
    return run_variants(ctx, variant, [run], init_models=[init_model], pretrain_epochs=pretrain_epochs,
                        hooks=[on_epoch_end])[0]


def run_variants(ctx: Context, variant: str, runs: Sequence[RunOptions], *,
                 init_models: Optional[Sequence[Optional[str | Path]]] = None, pretrain_epochs: int = 0,
                 hooks: Optional[Sequence[Optional[EpochHook]]] = None) -> list[dict[str, Any]]:
    """:func:`run_variant` of several seeds of ``variant`` trained together: at once, as one batched
    step, where the agent can (:meth:`raptor.agents.base.Agent.train_many`; the actor-critic agent:
    :mod:`raptor.agents.actor_critic.seeds`), else one after the other. ``runs[i]``, ``init_models[i]``
    and ``hooks[i]`` are seed ``i``'s; the runs share their epoch budget and thread count. Each run
    folder is prepared, resumed and summarised as :func:`run_variant` does it; the summaries say how
    many seeds its epochs were trained with at once (``stacked_seeds``, 1: alone)."""
    v = variants.get(variant)
    agent = get_agent(v.agent)
    p = ctx.params
    runs = list(runs)
    init_models = list(init_models) if init_models is not None else [None] * len(runs)
    hooks = list(hooks) if hooks is not None else [None] * len(runs)
    if not (len(runs) == len(init_models) == len(hooks)) or not runs:
        raise ValueError(f"run_variants: {len(runs)} runs, {len(init_models)} initial models, {len(hooks)} hooks")
    if len({(r.epochs, r.num_threads) for r in runs}) > 1:
        raise ValueError("run_variants: the runs differ in their epoch budget or thread count")
    if v.pretrained and pretrain_epochs and any(m is None for m in init_models):
        raise ValueError(f"variant {variant!r} starts from a pretrained checkpoint: give init_model "
                         "(the pretrain stage writes it)")
    num_threads = runs[0].num_threads
    device = resolve_device(p.train.device)
    configure_runtime(p.train.num_threads if num_threads is None else num_threads,
                      p.train.deterministic and device.type == "cuda")
    precision = variant_precision(p, variant, device)
    n_rl = effective_epochs(p, variant, pretrain_epochs, runs[0].epochs)
    validator = make_validator(ctx, "valid", precision, device, v.agent)
    # The initial weights are read and checked before any run folder is prepared: a damaged or foreign
    # pretrained model must not cost a finished run its checkpoints.
    policies = [_initial_policy(ctx, agent, run.seed, init_model, device) for run, init_model in zip(runs, init_models)]
    prepared = [_prepare_run(ctx, variant, run, init_model, pretrain_epochs, n_rl, precision)
                for run, init_model in zip(runs, init_models)]
    started = time.perf_counter()
    train_runs = []
    for run, init_model, hook, (meta, _) in zip(runs, init_models, hooks, prepared):
        if init_model is not None:
            meta["init_model_sha256"] = sha256_file(init_model)  # by content: a path would make equal models differ
        train_runs.append(RunOptions(
            seed=run.seed, epochs=n_rl, out_dir=Path(run.out_dir), device=device, precision=precision, resume=run.resume,
            progress=run.progress, evaluate_fn=validator, on_epoch_end=_rl_hook(hook), meta=meta,
            env_backend=p.train.env_backend, cuda_graph=p.train.cuda_graph, graph_scan_pad=p.train.graph_scan_pad))
    results = agent.train_many(ctx, policies, train_runs)
    return [_finish_run(Path(run.out_dir), variant, run.seed, pretrain_epochs, n_rl, precision, device, result,
                        restarted, started)
            for run, result, (_, restarted) in zip(runs, results, prepared)]


def _initial_policy(ctx: Context, agent, seed: int, init_model: Optional[str | Path], device):
    """Seed ``seed``'s policy as ``agent`` builds it, with the weights of ``init_model`` when given
    (checked against the data and the params' model first: :class:`CheckpointError` naming the file)."""
    policy = agent.build(ctx, seed)
    if init_model is None:
        return policy
    if not Path(init_model).is_file():
        raise FileNotFoundError(f"initial weights not found: {init_model} (run the pretrain stage first)")
    init, _ = load_model(init_model, device=device, ctx=ctx)
    try:
        policy.load_state_dict(init.state_dict())
    except RuntimeError as exc:  # the same data, another model configuration (params' `model:`)
        detail = str(exc).strip().splitlines()
        raise CheckpointError(f"{init_model}: its weights do not fit the model these params build "
                              f"({detail[1].strip() if len(detail) > 1 else detail[0]}): pretrain again with "
                              "these params") from None
    return policy


def _rl_hook(hook: Optional[EpochHook]):
    return (lambda e, m: hook("rl", e, m)) if hook else None


def _prepare_run(ctx: Context, variant: str, run: RunOptions, init_model: Optional[str | Path],
                 pretrain_epochs: int, n_rl: int, precision: str) -> tuple[dict[str, Any], Any]:
    """Seed ``run.seed``'s run folder made ready (:meth:`raptor.runs.rundir.RunDir.prepare`: resumable,
    or emptied and why); ``(meta its models record, what prepare said)``."""
    fingerprint, past_the_budget = _rl_folder_rules(ctx, variant, run.seed, init_model, (pretrain_epochs, n_rl),
                                                    precision)
    restarted = RunDir(Path(run.out_dir)).prepare(fingerprint, run.resume, cannot_continue=past_the_budget,
                                                  resume_only=run.resume_only)
    meta = {"variant": variant, "dataset": ctx.dataset.meta.get("dataset"), "params": params_to_dict(ctx.params),
            "pretrain_epochs": int(pretrain_epochs), "rl_epochs": n_rl}
    return meta, restarted


def rl_verdict(ctx: Context, variant: str, run: RunOptions, init_model: Optional[str | Path] = None,
               pretrain_epochs: int = 0) -> Optional[str]:
    """What :func:`run_variant` would do with ``run.out_dir``, touching nothing: why it would start afresh
    (:meth:`raptor.runs.rundir.RunDir.verdict`), or ``None`` (new, or continued)."""
    n_rl = effective_epochs(ctx.params, variant, pretrain_epochs, run.epochs)
    fingerprint, past_the_budget = _rl_folder_rules(ctx, variant, run.seed, init_model, (pretrain_epochs, n_rl),
                                                    resolved_precision(ctx.params, variant))
    return RunDir(Path(run.out_dir)).verdict(fingerprint, run.resume, cannot_continue=past_the_budget)


def _rl_folder_rules(ctx: Context, variant: str, seed: int, init_model: Optional[str | Path],
                     epochs: tuple[int, int], precision: str) -> tuple[dict[str, Any], Callable[[Path], Optional[str]]]:
    """An RL run folder's fingerprint and its reason against continuing (a checkpoint of a larger budget);
    ``epochs``: ``(pretraining epochs, RL epochs)``; ``precision``: the resolved one it trains in."""
    pretrain_epochs, n_rl = epochs
    agent = get_agent(variants.get(variant).agent)
    inputs = {**ctx.input_hashes(), "init_model": content_hash(init_model) if init_model else None}
    fingerprint = RunDir.rl_fingerprint(ctx.params, variant, seed, inputs, code_hash(run_code(variant)),
                                        pretrain_epochs, precision)

    def past_the_budget(folder: Path) -> Optional[str]:  # a run never stands for a smaller epoch budget
        return checkpoint_budget_mismatch(folder, agent.checkpoint_format, "RL checkpoint", n_rl)

    return fingerprint, past_the_budget


def _device_name(device) -> str:
    """``cpu``, or the accelerator's model (``cuda: NVIDIA H100 80GB HBM3``): where a run's numbers come from."""
    device = torch.device(device)
    return f"cuda: {torch.cuda.get_device_name(device)}" if device.type == "cuda" else device.type


def _finish_run(out: Path, variant: str, seed: int, pretrain_epochs: int, n_rl: int, precision: str, device,
                result, restarted, started: float) -> dict[str, Any]:
    """The run's ``summary.json`` (written atomically) from its :class:`raptor.runs.loop.TrainResult`."""
    summary = {
        "variant": variant, "seed": seed, "pretrain_epochs": int(pretrain_epochs), "rl_epochs": n_rl,
        "precision": precision, "device": _device_name(device), "best_val_mrr": result.best_mrr,
        "best_epoch": result.best_epoch,
        "epochs_trained": len(result.history), "stopped_early": result.stopped_early,
        "final_reward": result.history[-1].get("reward") if result.history else None,
        "model": str(RunDir(out).best), "restarted": restarted,
        "model_sha256": sha256_file(RunDir(out).best) if RunDir(out).best.is_file() else None,
        "seconds": round(time.perf_counter() - started, 2), "stacked_seeds": result.stacked_seeds,
        # every epoch's training and validation, whichever process trained it (`seconds`: this one's)
        "train_seconds": round(phase_seconds(result.history), 2),
        "runtime": runtime_record(device),
        "resumed_at": resumed_at(result.history),  # epochs where another process continued the run
    }
    atomic_write_json(RunDir(out).summary, summary)
    return summary


#: The ``eval`` params a test evaluation reads (the others say when and how long to validate).
TEST_EVAL_PARAMS = ("beam_size", "score_rule", "rank_last_expansions")


def _env_params(params: Params, meta: dict[str, Any], model_path: Path) -> dict[str, Any]:
    """The MDP's params an evaluation ran with (the same model ranks otherwise under another action cap),
    with a warning where they are not the ones the model was trained with."""
    env = params_to_dict(params)["env"]
    trained = (meta.get("params") or {}).get("env") or {}
    changed = [f"env.{k}={v!r} (trained with {trained[k]!r})" for k, v in env.items() if k in trained and trained[k] != v]
    if changed:
        log.warning("evaluating %s with other MDP params than it was trained with: %s", model_path, ", ".join(changed))
    return env


def _search(ctx: Context, model_path: Path, queries: np.ndarray, split: str, device: torch.device):
    """``(BeamResult, ranks, meta, agent, precision)`` of the saved model on ``queries`` of ``split``."""
    policy, meta = load_model(model_path, device=device, ctx=ctx)
    policy.eval()
    agent = get_agent(agent_of(meta))
    precision = agent.precision(ctx.params, device)
    with agent.test_time(ctx, policy, meta, split):  # e.g. TITer's inductive mean on the test split
        res, ranks = agent.rank(ctx, policy, queries, precision, device)
    return res, ranks, meta, agent, precision


def model_ranks(ctx: Context, model_path: str | Path, split: str, limit: int,
                num_threads: Optional[int] = None) -> np.ndarray:
    """float64 ``[limit]``: the time-aware filtered ranks of the first ``limit`` queries of ``split`` (both
    directions, in :meth:`~raptor.runs.context.Context.queries` order) as :func:`evaluate_model` ranks them,
    nothing written: what shows which model an evaluation was of."""
    device = resolve_device(ctx.params.train.device)
    configure_runtime(ctx.params.train.num_threads if num_threads is None else num_threads,
                      ctx.params.train.deterministic and device.type == "cuda")
    return _search(ctx, Path(model_path), ctx.queries(split)[:limit], split, device)[1]


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
    device = resolve_device(p.train.device)
    configure_runtime(p.train.num_threads if num_threads is None else num_threads,
                      p.train.deterministic and device.type == "cuda")
    model_path = Path(model_path)
    if not model_path.exists():
        raise FileNotFoundError(f"model not found: {model_path} (train it first)")
    check_writable(out_dir, folder=True)  # now, not after minutes of beam search
    model_sha256 = sha256_file(model_path)  # the model evaluated, read before it is loaded
    queries = ctx.queries(split)
    started = time.perf_counter()
    res, ranks, meta, agent, precision = _search(ctx, model_path, queries, split, device)
    seconds = time.perf_counter() - started
    metrics = evaluation_metrics(ranks, queries[:, 1], ctx.dataset.num_relations)
    metrics["split"] = split
    metrics["precision"] = precision
    metrics["seconds"] = round(seconds, 3)
    metrics["ms_per_query"] = round(1000 * seconds / max(len(queries), 1), 4)
    # What the numbers depend on besides the data: the model (by content: a path would tie tracked records
    # to one machine) and the eval params a test evaluation reads (the same model scores otherwise under
    # another beam).
    metrics["model_sha256"] = model_sha256
    metrics["eval_params"] = {k: getattr(p.eval, k) for k in TEST_EVAL_PARAMS}
    metrics["env_params"] = _env_params(p, meta, model_path)
    metrics["inputs"] = ctx.input_hashes()
    metrics["code"] = code_hash([__name__, *agent_facts(agent_of(meta)).code])
    metrics["runtime"] = runtime_record(device)
    out = RunDir(out_dir)
    out.path.mkdir(parents=True, exist_ok=True)
    table = predictions_table(
        queries[:, :4], res.cand_entity, res.cand_score, ranks,
        best_path={"path_entities": res.path_entity, "path_relations": res.path_relation,
                   "path_times": res.path_time},
        names=(ctx.dataset.entity_names, ctx.dataset.relation_labels()),
    )
    # metrics.json, written last, says the evaluation is whole. A full disk while the predictions are written
    # leaves both previous files; once they are complete the previous metrics go before they land, so a kill
    # between the two files leaves these predictions without metrics, never beside another evaluation's.
    with atomic_path(out.predictions) as tmp:
        pq.write_table(table, tmp)
        out.metrics.unlink(missing_ok=True)
    write_metrics(out.metrics, metrics)
    return metrics
