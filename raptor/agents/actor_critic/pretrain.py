"""Self-supervised reachability pretraining (paper, "Self-Supervised Pretraining").

For a batch of training queries (both directions) the agent walks ``K`` steps from ``e_q``. At
every step ``k`` every valid candidate action ``a`` (STOP included) gets the label ``y(a)`` from the
precomputed label table (:func:`raptor.labeling.actions.action_labels`: reachable iff the table holds
``(e', t̄, h̄)`` with ``t' <= t̄`` and ``h̄ < K - k``; the target itself is reachable; STOP on ``o_q``,
and elsewhere as ``pretrain.stop_label`` says; the moves off ``o_q`` as ``pretrain.on_answer`` says),
and the loss is::

    L_k   = - 1/|A_s| sum_{a in A_s} [ y log sigmoid(z(a)) + (1 - y) log(1 - sigmoid(z(a))) ]
    L_ep  = sum_{k=0}^{K-1} L_k          (averaged over the episodes of a batch)

with ``z(a) = <s, a>`` the same logits the RL phase feeds to its softmax. The next state is sampled
from the policy's distribution *restricted to the reachable actions* (softmax of ``z`` over
``{a : y(a) = 1}``). When no candidate is reachable (the answer cannot be reached from here within
the remaining budget, or was never reachable in the history), the step samples from the policy's
full distribution over the valid candidates instead; the labels of such states are all 0 and still
train the policy to score those dead ends low. ``pretrain.no_reachable`` = ``"stop"`` takes STOP
instead (the agent stays where it is), an alternative reading.

No graph search happens per batch: labels are lookups in the in-memory :class:`LabelTable` (or, with
``pretrain.labels_in_memory: part``, in one part of a partitioned table at a time: :func:`epoch_blocks`).
Where the walk runs follows ``train.env_backend`` as in RL (:func:`raptor.mdp.device_env.on_device`): on
the host environment the labels are looked up on the host (numba), on the device environment in a
device copy of the table (:mod:`raptor.labeling.device`, one per table or part), so a step's
candidates, labels and draw stay on the device; both give the same labels and the same batches.
The critic is not trained here (there is no reward); fine-tuning starts from the pretrained
embeddings, time encoding, LSTM path encoder and actor MLP, and from the critic's initial weights.

Checkpoints (atomic, per epoch) make pretraining resumable, bit-identically on the same machine.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from raptor.agents import variants
from raptor.agents import AGENT_KEY
from raptor.config import PretrainConfig
from raptor.mdp.device_env import DeviceEnv, on_device
from raptor.mdp.env import TemporalEnv
from raptor.common.io import atomic_write_json
from raptor.labeling.actions import ActionCandidates, LabelRule, action_labels
from raptor.labeling.device import DeviceLabels, device_labels
from raptor.labeling.store import PartitionedLabels
from raptor.labeling.table import LabelTable
from raptor.runs.loop import Phase, run_epochs
from raptor.agents.policy import Policy
from raptor.runs.checkpoints import model_meta, save_model
from raptor.agents.rollout import advance, as_tensor, candidate_tensors, query_context, score_candidates
from raptor.runs.rundir import RunDir, RunOptions
from raptor.agents.actor_critic.graph_step import GraphStep, draw_uniforms, graph_step
from raptor.agents.actor_critic.stack import SeedUniforms
from raptor.common.runtime import adam, autocast, epoch_seed, seeded_init
from raptor.agents.sampling import sample_actions
from raptor.agents.variants import PRETRAINED_VARIANT

PRETRAIN_CHECKPOINT_FORMAT = "raptor.agents.actor_critic.pretrain-checkpoint/v1"

log = logging.getLogger("raptor")


@dataclass
class PretrainBatch:
    loss: torch.Tensor
    stats: dict[str, float]


def reachability_bce(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-row BCE averaged over the valid candidates: ``[B]``.

    Args:
        logits: ``[B, A]`` raw ``z(a)`` (padding slots may hold ``-inf``; they are ignored).
        labels: ``[B, A]`` 0/1.
        mask: bool ``[B, A]``, true for the valid candidates ``A_s``.
    """
    z = torch.where(mask, logits.float(), torch.zeros((), dtype=torch.float32, device=logits.device))
    per = F.binary_cross_entropy_with_logits(z, labels.float(), reduction="none")
    per = per * mask
    return per.sum(1) / mask.sum(1).clamp_min(1)


def label_rule(cfg: PretrainConfig) -> LabelRule:
    """The :class:`~raptor.labeling.actions.LabelRule` of ``pretrain.stop_label`` and ``pretrain.on_answer``."""
    return LabelRule(stop=cfg.stop_label, on_answer=cfg.on_answer)


def step_labels(labels: LabelTable | DeviceLabels, env: TemporalEnv | DeviceEnv, state, cands, rule: LabelRule,
                device) -> torch.Tensor:
    """uint8 ``[B, A]`` on ``device``: the reachability labels of the candidates ``cands`` of ``state`` (at
    its step ``k``) under ``rule``: looked up on the host (:func:`raptor.labeling.actions.action_labels`) for
    the host environment's arrays, on the device (:class:`raptor.labeling.device.DeviceLabels`) for the device
    environment's tensors. The same labels either way (tests/test_device_labels.py)."""
    cand = ActionCandidates(cands.entity, cands.time, relation=cands.relation, num_relations=env.num_relations,
                            mask=cands.mask, current_entity=state.entity)
    if isinstance(labels, DeviceLabels):
        return labels.labels(state.answer, state.query_time, state.step, cand, rule, query_subject=state.query_entity)
    y = action_labels(labels, state.answer, state.query_time, state.step, cand, rule, query_subject=state.query_entity)
    return torch.from_numpy(y).to(device)


#: What :func:`pretrain_terms` returns per seed (and :func:`pretrain_batch` reads back once per batch), in this order.
_READ = ("bce", "valid", "positive", "correct", "any_reachable", "reached", "unlabeled")


def pretrain_terms(policy, env: TemporalEnv | DeviceEnv, labels: LabelTable | DeviceLabels, queries,
                   uniforms, cfg: PretrainConfig = PretrainConfig(), device="cpu"):
    """The pretraining loss of ``G`` seeds' batches stacked in the rows of ``queries`` (int ``[G B, 4]``,
    seed-major; ``policy`` a :class:`~raptor.agents.actor_critic.stack.StackedPolicy` of ``G`` seeds, or a
    :class:`Policy`: ``G = 1``), reading nothing back.

    Per step ``k``: the candidates, the policy's logits, the labels (``labels`` on the host or the
    device, as the environment), the per-row BCE averaged within each seed's rows, and the draw among
    the reachable actions with the uniforms ``uniforms[k]`` (float32 ``[G B]``, each seed's from its own
    generator); ``cfg``'s ``no_reachable``, ``stop_label`` and ``on_answer`` say how the walk labels and
    draws. Returns ``(loss, seed_loss [G], read [G, 7] float64 in _READ order, overflow)``: the sum of
    the seeds' losses (each the sum over steps of its mean BCE), each seed's loss, each seed's
    statistics (the ``unlabeled`` column counts the whole batch's rows whose pair is not in a device
    table), and the fixed-shape environment's overflow flag (``None`` for the others)."""
    labels_on_device = isinstance(labels, DeviceLabels)
    rule = label_rule(cfg)
    state = env.reset(queries)
    G = getattr(policy, "seeds", 1)
    B = state.batch_size // G
    q = query_context(policy, state, device)
    hc = policy.initial_path_state(G * B)
    total = torch.zeros(G, device=device)
    counts = torch.zeros(G, 3, dtype=torch.int64, device=device)  # valid, positive, correct candidates
    any_reachable = torch.zeros(G, dtype=torch.float64, device=device)  # sum over steps of a row mean
    unlabeled = (labels.missing(state.answer, state.query_time).sum() if labels_on_device
                 else torch.zeros((), dtype=torch.int64, device=device))
    overflow = None
    for k in range(env.K):
        cands = env.candidates(state)
        flags = getattr(cands, "overflow", None)
        if flags is not None:
            overflow = flags.any() if overflow is None else overflow | flags.any()
        ct = candidate_tensors(state, cands, device)
        z, _ = score_candidates(policy, state, ct, hc[0], q, critic=False)
        y = step_labels(labels, env, state, cands, rule, device)
        # each seed's mean over its own B rows: its gradient is the one of its batch alone
        total = total + reachability_bce(z, y, ct.mask).view(G, B).mean(1)
        with torch.no_grad():
            m = ct.mask
            allowed = y.bool() & m
            per_row = torch.stack([m.sum(1), allowed.sum(1), (((z.float() > 0) == y.bool()) & m).sum(1)], 1)
            counts += per_row.view(G, B, 3).sum(1)
            any_reachable += allowed.any(1).float().view(G, B).mean(1).double()
        if cfg.no_reachable == "stop":
            allowed = allowed.clone()
            allowed[:, 0] |= ~allowed.any(1)  # slot 0 is STOP
        choice = sample_actions(z, allowed=allowed, u=uniforms[k])
        state, hc = advance(policy, env, state, cands, choice, hc, need_path=k < env.K - 1)
    reached = as_tensor(env.reward(state), device).float().view(G, B).mean(1)
    read = torch.cat([total.detach().double()[:, None], counts.double(), any_reachable[:, None],
                      reached.double()[:, None], unlabeled.double().expand(G)[:, None]], 1)
    return total.sum(), total, read, overflow


def read_stats(read: Sequence[float], K: int) -> dict[str, float]:
    """A seed's statistics of a batch from its row of :func:`pretrain_terms`' ``read``."""
    r = dict(zip(_READ, read))
    n_valid = max(r["valid"], 1.0)
    return {
        "bce": r["bce"],
        "label_positive_rate": r["positive"] / n_valid,
        "label_accuracy": r["correct"] / n_valid,
        "steps_with_reachable": r["any_reachable"] / K,
        "walk_reaches_answer": r["reached"],
    }


def pretrain_batch(
    policy: Policy,
    env: TemporalEnv | DeviceEnv,
    table: LabelTable | DeviceLabels,
    queries: np.ndarray,
    generator: Optional[torch.Generator] = None,
    device="cpu",
    cfg: PretrainConfig = PretrainConfig(),
) -> PretrainBatch:
    """Pretraining loss of one batch of ``[B, 4]`` training queries (one labeled walk each):
    :func:`pretrain_terms` of one seed, drawing from ``generator``, and its statistics read once.

    On the host environment the labels are looked up on the host; on a
    :class:`raptor.mdp.device_env.DeviceEnv` on its device (``table``'s device copy, made once:
    :func:`raptor.labeling.device.device_labels`). The statistics are summed as tensors and read once,
    at the end (the device path's only read besides the environment's own, one per step); a query
    whose pair is not in the table is a ``ValueError`` on both paths (on the device, found at that read).
    Same candidates, labels and draws on both, so the same loss and statistics (on the CPU bit for bit).
    """
    labels = device_labels(table, env.device) if isinstance(env, DeviceEnv) else table
    uniforms = SeedUniforms([generator], len(queries), device, torch.float32)  # what sample_actions draws
    loss, _, read, _ = pretrain_terms(policy, env, labels, queries, uniforms, cfg, device)
    row = read[0].tolist()  # the batch's one read
    if row[_READ.index("unlabeled")]:
        raise_unlabeled(labels, env, queries)
    return PretrainBatch(loss=loss, stats=read_stats(row, env.K))


def raise_unlabeled(labels, env, queries) -> None:
    """The ``ValueError`` naming a batch's queries whose pair a device table does not hold."""
    state = env.reset(queries)
    labels.raise_missing(state.answer, state.query_time)


def pretrain_step(model, env, host_env: TemporalEnv, table, groups: int, cfg: PretrainConfig, run: RunOptions):
    """What a pretraining epoch steps through: ``env``, or (``run.cuda_graph`` on a CUDA device with the
    device environment, a label table in memory) a
    :class:`~raptor.agents.actor_critic.graph_step.GraphStep` replaying :func:`pretrain_terms` of
    ``groups`` seeds' batches of ``cfg.batch_size`` rows each (:func:`graph_batch` runs a batch through it)."""
    if not isinstance(table, LabelTable) or not isinstance(env, DeviceEnv):
        return env
    labels = device_labels(table, env.device)
    precision, device = run.precision, run.device

    def forward(env_, queries, uniforms, beta):
        with autocast(precision, device):
            loss, _, read, overflow = pretrain_terms(model, env_, labels, queries, uniforms, cfg, device)
        return loss, read, overflow

    return graph_step(model, env, host_env, groups * cfg.batch_size, forward, run, torch.float32)


def graph_batch(step: GraphStep, table: LabelTable, batch: np.ndarray, generators: Sequence[torch.Generator],
                device) -> list[dict[str, float]]:
    """One pretraining batch (``len(generators)`` seeds' rows, seed-major) through ``step``: the gradients
    are left in the parameters; returns each seed's statistics, as :func:`pretrain_batch` alone."""
    K = step.fixed.K
    read = step(batch, draw_uniforms(generators, len(batch) // len(generators), K, device, torch.float32))
    rows = read.tolist()  # the batch's one read
    if rows[0][_READ.index("unlabeled")]:
        raise_unlabeled(device_labels(table, step.exact.device), step.exact, batch)
    return [read_stats(r, K) for r in rows]


def epoch_blocks(queries: np.ndarray, table, rng: np.random.Generator) -> list[tuple[Optional[int], np.ndarray]]:
    """One epoch's order of ``[Q, 4]`` queries as ``(part, positions)`` blocks.

    A :class:`LabelTable` in memory: one block ``(None, permutation of all queries)``. A
    :class:`PartitionedLabels`: the parts in a permuted order, each block holding the queries whose
    target (column 2) is in that part's target range, permuted: only that part's labels are needed.
    """
    if not isinstance(table, PartitionedLabels):
        return [(None, rng.permutation(len(queries)))]
    blocks = []
    for part in rng.permutation(table.num_parts):
        lo, hi = table.target_ranges[part]
        idx = np.flatnonzero((queries[:, 2] >= lo) & (queries[:, 2] < hi))
        blocks.append((int(part), idx[rng.permutation(len(idx))]))
    return blocks


def pretrain(policy: Policy, env: TemporalEnv, table: LabelTable | PartitionedLabels, train_queries: np.ndarray,
             cfg: PretrainConfig = PretrainConfig(), run: RunOptions = RunOptions(resume=False), *,
             snapshots: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """Pretrain ``policy`` for ``run.epochs`` (default ``cfg.epochs``) epochs; returns the per-epoch history.

    Writes ``checkpoint.pt`` (after every epoch, atomic), ``pretrained.pt`` (the final weights, in the
    :func:`raptor.runs.checkpoints.save_model` format that fine-tuning loads) and ``history.json`` to ``out_dir``;
    plus ``pretrained-e{n}.pt`` after ``n`` epochs for every ``n`` in ``snapshots``. Epoch ``n``'s
    shuffling and sampling depend on ``(seed, n)`` only, so a snapshot after ``n`` epochs equals a
    separate ``n``-epoch run: the pretraining-epochs ablation pretrains once per seed.
    """
    from raptor.common.progress import progress_bar

    n_epochs = cfg.epochs if run.epochs is None else run.epochs
    seed, precision, device, progress = run.seed, run.precision, run.device, run.progress
    out = Path(run.out_dir) if run.out_dir is not None else None
    meta = model_meta(policy, run.meta, seed)
    meta["phase"] = "pretrain"
    policy.to(device)
    optimizer = adam(policy.parameters(), cfg.learning_rate)
    queries = np.ascontiguousarray(train_queries, dtype=np.int64)
    bs = cfg.batch_size
    host_env, env = env, on_device(env, device, run.env_backend)  # the device environment labels on the device too
    step = pretrain_step(policy, env, host_env, table, 1, cfg, run)  # or a CUDA-graph step

    trained: list[int] = []

    def run_epoch(epoch: int) -> dict[str, Any]:
        trained.append(epoch)
        policy.train()
        # Streams 2 and 3: distinct from the RL phase's (0, 1) for the same seed.
        blocks = epoch_blocks(queries, table, np.random.default_rng(epoch_seed(seed, epoch, 2)))
        gen = torch.Generator(device=device).manual_seed(epoch_seed(seed, epoch, 3))
        sums: dict[str, float] = {}
        n_total = 0
        ticks = iter(progress_bar(range(sum(math.ceil(len(o) / bs) for _, o in blocks)), desc=f"epoch {epoch}",
                                  enabled=progress, nested=True, mininterval=1.0))
        block_table = None
        for part, order in blocks:
            block_table = None  # release the previous part before loading the next
            block_table = table if part is None else table.load(part)
            for i in range(math.ceil(len(order) / bs)):
                next(ticks, None)
                batch = queries[order[i * bs:(i + 1) * bs]]
                if isinstance(step, GraphStep):  # the same batch replayed from a CUDA graph
                    stats = graph_batch(step, block_table, batch, [gen], device)[0]
                else:
                    with autocast(precision, device):
                        pb = pretrain_batch(policy, env, block_table, batch, gen, device, cfg)
                    optimizer.zero_grad(set_to_none=False)  # keep the .grad buffers the fused kernels add into
                    pb.loss.backward()
                    stats = pb.stats
                optimizer.step()
                n = len(batch)
                n_total += n
                for key, val in stats.items():
                    sums[key] = sums.get(key, 0.0) + val * n
        next(ticks, None)
        return {k: v / max(n_total, 1) for k, v in sums.items()}

    def snapshot(epoch: int, row: dict[str, Any], last: bool) -> bool:
        """The weights after ``epoch + 1`` epochs, when asked for (written before the checkpoint
        that moves past them, so a crash in between redoes the epoch rather than losing them)."""
        if out is not None and epoch + 1 in snapshots:
            save_model(RunDir(out).snapshot(epoch + 1), policy, {**meta, "epoch": epoch})
        return False

    def write_history(folder: Path, history: list[dict[str, Any]]) -> None:
        atomic_write_json(RunDir(folder).history, history)

    phase = Phase("pretrain", PRETRAIN_CHECKPOINT_FORMAT, "RAPTOR pretraining checkpoint", run_epoch,
                  write_history, snapshot,
                  postfix=lambda r: {"bce": f"{r['bce']:.3f}", "acc": f"{r['label_accuracy']:.3f}"},
                  budget_bound=False)  # its results are the snapshots, the same for every longer run
    history = run_epochs(phase, policy, optimizer, replace(run, epochs=n_epochs, out_dir=out, meta=meta))
    if out is not None and (trained or not RunDir(out).pretrained.exists()):  # a finished run: left as it is
        save_model(RunDir(out).pretrained, policy, {**meta, "epoch": n_epochs - 1})
        atomic_write_json(RunDir(out).history, history)
    return history


def pretrain_run(ctx, labels: LabelTable | str | Path, epochs: Sequence[int], run: RunOptions,
                 on_epoch_end: Optional[Callable[[str, int, dict[str, Any]], None]] = None) -> dict[int, str]:
    """One seed's pretraining run (``run``: its seed, folder ``out_dir``, ``resume``, ``resume_only``,
    ``num_threads`` and progress bar; its precision, device and ``train.env_backend`` come from the params)
    for ``max(epochs)`` epochs, saving ``pretrained-e{n}.pt`` after
    ``n`` epochs for every ``n`` in ``epochs`` (a snapshot after ``n`` epochs equals a separate
    ``n``-epoch run, see :func:`pretrain`). Returns ``{n: path}`` for ``n > 0``.

    ``ctx`` is a :class:`raptor.runs.context.Context`. The folder continues only a run of the same
    fingerprint (params, content of data, graph and labels, code; more epochs continue a run) that
    can still write every snapshot asked for; otherwise it starts afresh and says why (or, with
    ``resume_only``, raises :class:`raptor.common.io.RunMismatchError` and deletes nothing).
    Several seeds at once: :func:`raptor.agents.actor_critic.pretrain_seeds.pretrain_runs`.
    """
    wanted = wanted_snapshots(epochs)
    if not wanted:
        return {}
    table = prepare_pretrain_runs(ctx, labels, wanted, [run])
    policy, options = pretrain_options(ctx, run, wanted, on_epoch_end)
    pretrain(policy, ctx.env, table, ctx.train_queries, ctx.params.pretrain, options, snapshots=tuple(wanted))
    return {n: str(RunDir(run.out_dir).snapshot(n)) for n in wanted}


def wanted_snapshots(epochs: Sequence[int]) -> list[int]:
    """The epoch counts ``n > 0`` of ``epochs`` whose snapshots a run writes, sorted, once each."""
    return sorted({int(n) for n in epochs if int(n) > 0})


def prepare_pretrain_runs(ctx, labels: LabelTable | str | Path, wanted: Sequence[int],
                          runs: Sequence[RunOptions]) -> LabelTable | PartitionedLabels:
    """What comes before pretraining ``runs`` (one per seed, :func:`pretrain_run`'s ``run``): the
    threads set (the first run's ``num_threads``), every run folder prepared against its seed's
    fingerprint (the same whether its seed trains alone or stacked, so either continues the other),
    and the label table loaded once and checked against the params; returns the table."""
    from raptor.labeling.store import label_table_hash, load_label_table
    from raptor.common.runtime import configure_runtime, resolve_device

    p = ctx.params
    num_threads = runs[0].num_threads
    configure_runtime(p.train.num_threads if num_threads is None else num_threads,
                      p.train.deterministic and resolve_device(p.train.device).type == "cuda")
    label_hash = label_table_hash(labels) if not isinstance(labels, LabelTable) else None

    # The table is read and checked before any run folder is prepared: labels of other data or other
    # settings must not cost a pretraining run its checkpoints.
    if isinstance(labels, LabelTable):
        table = labels
    elif p.pretrain.labels_in_memory == "part":
        table = PartitionedLabels(labels)
    else:
        table = load_label_table(labels)
    check_labels_fit(ctx, table, f"label table {labels}" if not isinstance(labels, LabelTable) else "label table")
    for run in runs:
        RunDir(Path(run.out_dir)).prepare(_fingerprint(ctx, run.seed, label_hash), run.resume,
                                          cannot_continue=_past_a_snapshot(wanted), resume_only=run.resume_only)
    return table


def pretrain_verdict(ctx, labels: str | Path, epochs: Sequence[int], run: RunOptions) -> Optional[str]:
    """What :func:`pretrain_run` would do with ``run.out_dir``, touching nothing: why it would start
    afresh (:meth:`raptor.runs.rundir.RunDir.verdict`), or ``None`` (new, or continued)."""
    from raptor.labeling.store import label_table_hash

    return RunDir(Path(run.out_dir)).verdict(_fingerprint(ctx, run.seed, label_table_hash(labels)), run.resume,
                                             cannot_continue=_past_a_snapshot(wanted_snapshots(epochs)))


def _fingerprint(ctx, seed: int, label_hash: Optional[str]) -> dict[str, Any]:
    """Seed ``seed``'s pretraining fingerprint: the params pretraining reads (more epochs continue a run),
    the data, graph and labels by content, this module's code, and the precision it trains in."""
    from raptor.common.provenance import code_hash
    from raptor.common.runtime import resolve_device, resolve_precision

    p = ctx.params
    fingerprint = RunDir.fingerprint(p, "pretrain", seed, {**ctx.input_hashes(), "labels": label_hash},
                                     code_hash([__name__]), continued=("pretrain.epochs",),
                                     ignored_sections=("rl", "eval", "labeling"),
                                     precision=resolve_precision(p.train.precision, resolve_device(p.train.device)))
    fingerprint["params"].pop("train.equal_total_epochs", None)
    return fingerprint


def _past_a_snapshot(wanted: Sequence[int]) -> Callable[[Path], Optional[str]]:
    """A run folder's reason against continuing: it is past an epoch count whose snapshot it lacks."""
    def past_a_snapshot(run: Path) -> Optional[str]:
        done = RunDir(run).epochs_done()
        missing = [n for n in wanted if n <= done and not RunDir(run).snapshot(n).exists()]
        return f"the run is past the snapshots asked for after {missing} epochs" if missing else None

    return past_a_snapshot


def check_labels_fit(ctx, table: LabelTable | PartitionedLabels, where: str) -> None:
    """Refuse (:class:`ValueError` naming ``where`` and the remedy) a label table that does not fit the
    run: built for another ``env.max_path_length`` or ``labeling.visited`` than the params', on a graph
    of another entity count, or (tables that record it) from an ingested dataset of other content than
    ``ctx``'s (its ``data_hash``, :func:`raptor.common.provenance.content_hash` of the data folder)."""
    p = ctx.params
    if table.max_path_length != p.env.max_path_length:
        raise ValueError(f"{where} was built for K = {table.max_path_length}, "
                         f"but env.max_path_length = {p.env.max_path_length}")
    visited = table.meta.get("visited", "target") if isinstance(table, PartitionedLabels) else table.visited
    if visited != p.labeling.visited:
        raise ValueError(f"{where} was built with labeling.visited = {visited!r}, but params say "
                         f"{p.labeling.visited!r}: run the label stage again")
    remedy = "label this data (`raptor label`) and pretrain with those labels"
    n_ent = table.meta.get("num_entities") if isinstance(table, PartitionedLabels) else table.num_entities
    if n_ent is not None and int(n_ent) != ctx.dataset.num_entities:
        raise ValueError(f"{where} was built on a graph of {n_ent} entities, the data "
                         f"{ctx.data_dir or ''} has {ctx.dataset.num_entities}: {remedy}")
    data_hash = table.meta.get("data_hash")
    if data_hash and ctx.data_dir and ctx.input_hashes()["data"] != data_hash:
        raise ValueError(f"{where} was labeled from {table.meta.get('data_dir', 'other data')} (dataset "
                         f"{table.meta.get('dataset')!r}), whose content is not that of {ctx.data_dir}: {remedy}")


def pretrain_options(ctx, run: RunOptions, wanted: Sequence[int],
                     on_epoch_end: Optional[Callable[[str, int, dict[str, Any]], None]] = None
                     ) -> tuple[Policy, RunOptions]:
    """``run``'s seed's freshly initialised policy (``seeded_init(seed)``) and the options
    :func:`pretrain` trains it with (device, precision and ``train.env_backend`` from the params,
    ``max(wanted)`` epochs, resumed from its folder)."""
    from raptor.common.runtime import resolve_device, resolve_precision

    p = ctx.params
    device = resolve_device(p.train.device)
    with seeded_init(run.seed):
        policy = Policy(ctx.dataset.num_entities, ctx.dataset.num_relations, p.model, p.env.max_path_length)
    hook = (lambda e, m: on_epoch_end("pretrain", e, m)) if on_epoch_end else None
    precision = resolve_precision(p.train.precision, device)
    meta = {"variant": PRETRAINED_VARIANT, AGENT_KEY: variants.get(PRETRAINED_VARIANT).agent,
            "dataset": ctx.dataset.meta.get("dataset")}
    return policy, RunOptions(seed=run.seed, epochs=wanted[-1], out_dir=Path(run.out_dir), device=device,
                              precision=precision, resume=True, progress=run.progress, on_epoch_end=hook, meta=meta,
                              env_backend=p.train.env_backend, cuda_graph=p.train.cuda_graph,
                              graph_scan_pad=p.train.graph_scan_pad)
