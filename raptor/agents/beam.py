"""Beam search over ``K`` steps, batched over many queries at once, and per-query explanations.

For each query the search keeps the ``beam_size`` most probable partial paths (by the sum of the
policy's log-probabilities ``log pi(a_k | s_k)`` of their actions). Every kept path is expanded by all
its candidate actions (STOP included, so a path can stay where it is); the ``beam_size`` best of the
expansions of the query survive. After ``K`` steps every surviving path ends on an entity ``e_K``.

Entity scores (``EvalConfig.score_rule``) from the log-probabilities ``l_p`` of the final paths ``p``
ending on entity ``e``:

* ``max``: ``score(e) = max_p l_p`` (the most probable path reaching ``e``);
* ``logsumexp``: ``score(e) = log sum_p exp(l_p)`` (the beam's estimate of the probability of ending
  on ``e``).

Entities not reached by a final path are not candidates (score ``-inf`` for the ranking).

With ``EvalConfig.rank_last_expansions`` the final paths are every expansion of the last step (all
surviving beams of step ``K-2`` times all their actions, scored before the top-k cut), as TITer's
``Episode.beam_search`` returns them: the top-k cut then only picks the best path for explanations.
An entity's score is the same rule over those paths; for ``max`` the entities of the ``beam_size``
best paths keep their scores (an entity's best expansion is among the top-k if any of its expansions
is) and the others are added below them.

Output (:class:`BeamResult`): per query the reached entities and their scores as padded arrays
``cand_entity [Q, C]`` (pad ``-1``) and ``cand_score [Q, C]`` (pad ``-inf``), sorted by decreasing
score, with ``C = beam_size`` (with ``rank_last_expansions``: the most entities any query reached);
and the best path of each query (entities, relations and times of its ``K`` hops, STOP hops
included) for explanations.

All queries of a chunk are searched together: the rows of a step are ``[queries x beams]``; the
candidate construction, the policy forward and the top-k selection are batched over all of them.

Two backends (``SearchOptions.backend``): the host search (:func:`search_beams`, candidates from the host
environment, dead beams dropped) and the device search (:func:`search_beams_on_device`, every step on a
:class:`raptor.mdp.device_env.DeviceEnv`, dead beams padded), with the same beams. On the device the
scores are merged (:func:`aggregate_scores_on_device`), the last step's expansions kept when asked, and
the answers ranked (:func:`search_and_rank`) without leaving it; only each chunk's ranks and predictions
are copied back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numba
import numpy as np
import torch
import torch.nn.functional as F

from raptor.config import EvalConfig
from raptor.evaluation.ranking import DeviceFilter, FilterIndex, filtered_ranks, filtered_ranks_on_device
from raptor.mdp.env import TemporalEnv
from raptor.agents.policy import Policy
from raptor.agents.rollout import candidate_tensors, query_context
from raptor.common.runtime import autocast


@dataclass(frozen=True)
class BeamResult:
    cand_entity: np.ndarray  # int64 [Q, C], -1 = padding
    cand_score: np.ndarray  # float32 [Q, C], -inf = padding
    path_entity: np.ndarray  # int64 [Q, K] best path: entity after each hop
    path_relation: np.ndarray  # int64 [Q, K] relation of each hop (2R = STOP)
    path_time: np.ndarray  # int64 [Q, K] timestamp of each hop's edge (STOP keeps t_k)
    path_score: np.ndarray  # float32 [Q] log-probability of the best path


@dataclass(frozen=True)
class Beams:
    """All final beams of a set of queries: ``[Q, W]``, best first; a query with fewer than ``W`` beams is
    padded with dead ones (``score = -inf``, paths ``-1``)."""

    score: np.ndarray  # float32 [Q, W]
    entity: np.ndarray  # int64 [Q, W, K] entity after each hop
    relation: np.ndarray  # int64 [Q, W, K]
    time: np.ndarray  # int64 [Q, W, K]
    #: With ``last_expansions``: every expansion of the last step, before the top-k cut, ``[Q, X]``:
    #: the entity it ends on (``-1`` = none) and its path's log-probability (``-inf`` = none).
    expansion_entity: Optional[np.ndarray] = None
    expansion_score: Optional[np.ndarray] = None


@dataclass(frozen=True)
class SearchOptions:
    """How a beam search runs: ``precision`` (the autocast dtype of the policy's scores) and
    ``device``; ``chunk_size``: queries searched at once by the host search and ``progress``: a
    progress bar over the chunks (:func:`beam_search`)."""

    precision: str = "float32"
    device: Any = "cpu"
    chunk_size: int = 128
    progress: bool = False
    #: Where the search runs: ``host`` (the host environment, beams compacted on the host each step:
    #: :func:`search_beams`), ``device`` (every step on ``device``, beams padded to ``beam_size``:
    #: :func:`search_beams_on_device`) or ``auto`` (``device`` on CUDA). The same beams either way
    #: (tests/test_beam.py).
    backend: str = "auto"
    #: Queries searched at once by the device search (its tensors are ``[chunk x beam_size, A]``).
    device_chunk_size: int = 1024


@numba.njit(cache=True, nogil=True)
def _aggregate(final_entity, score, use_lse, out_ent, out_score):  # pragma: no cover - compiled
    Q, W = final_entity.shape
    for q in range(Q):
        order = np.argsort(final_entity[q])
        n = 0
        prev = -1
        for i in range(W):
            j = order[i]
            s = score[q, j]
            if not np.isfinite(s):
                continue
            e = final_entity[q, j]
            if n > 0 and e == prev:
                cur = out_score[q, n - 1]
                if use_lse:
                    hi = max(cur, s)
                    out_score[q, n - 1] = hi + np.log(np.exp(cur - hi) + np.exp(s - hi))
                else:
                    out_score[q, n - 1] = max(cur, s)
            else:
                out_ent[q, n] = e
                out_score[q, n] = s
                prev = e
                n += 1
        # sort the n candidates by decreasing score (stable on entity id)
        idx = np.argsort(-out_score[q, :n], kind="mergesort")
        ent_sorted = out_ent[q, :n][idx].copy()
        sc_sorted = out_score[q, :n][idx].copy()
        out_ent[q, :n] = ent_sorted
        out_score[q, :n] = sc_sorted


def aggregate_scores(final_entity: np.ndarray, score: np.ndarray, score_rule: str = "max") -> tuple[np.ndarray, np.ndarray]:
    """Entity candidates ``[Q, W]`` from final beams (see the module docstring for the rules)."""
    if score_rule not in ("max", "logsumexp"):
        raise ValueError(f"unknown score_rule {score_rule!r}")
    Q, W = final_entity.shape
    out_ent = np.full((Q, W), -1, dtype=np.int64)
    out_score = np.full((Q, W), -np.inf, dtype=np.float32)
    _aggregate(np.ascontiguousarray(final_entity, dtype=np.int64), np.ascontiguousarray(score, dtype=np.float32),
               score_rule == "logsumexp", out_ent, out_score)
    return out_ent, out_score


def path_tables(policy: Policy, queries: np.ndarray) -> Optional[dict]:
    """The policy's LSTM input tables (:meth:`raptor.agents.policy.Policy.path_input_tables`) for ``queries``
    (their largest ``t_q`` bounds every ``dt``), or ``None`` for a policy without them (TITer's)."""
    make = getattr(policy, "path_input_tables", None)
    return None if make is None else make(int(np.asarray(queries)[:, -1].max()))


@torch.inference_mode()
def search_beams(policy: Policy, env: TemporalEnv, queries: np.ndarray, beam_size: int,
                 options: SearchOptions = SearchOptions(), tables: Optional[dict] = None,
                 last_expansions: bool = False) -> Beams:
    """Final beams of ``[Q, >=3]`` queries ``(e_q, r_q, [o_q,] t_q)`` (one chunk, all at once).

    The live beams of all queries are one flat batch of rows, grouped by query, best first within a
    query. A query with fewer than ``beam_size`` expansions keeps fewer beams: no row is spent on a
    dead (``-inf``) beam, which at the first step after the start is about a quarter of ICEWS14's
    rows (queries with fewer than ``beam_size`` candidate actions). The top-k of a step is taken over
    ``[Q, W x A]``, every query's expansions padded with ``-inf`` to the widest query's.
    ``last_expansions``: also return that ``[Q, W x A]`` of the last step (:class:`Beams`).
    ``options``: its ``precision`` and ``device`` (the search is one chunk).
    """
    precision, device = options.precision, options.device
    queries = np.asarray(queries, dtype=np.int64)
    state = env.reset(queries, with_answer=False)
    Q = state.batch_size
    K = env.K
    policy.eval()
    if tables is None:
        tables = path_tables(policy, queries)
    lstm_kw = {} if tables is None else {"tables": tables}
    with autocast(precision, device):
        q_all = query_context(policy, state, device)
        h, c = policy.initial_path_state(Q)
        beam_score = torch.zeros(Q, device=device)  # [N] log-probability of each live beam
        row_query = np.arange(Q)  # [N] query of each row, non-decreasing
        for k in range(K):
            N = len(row_query)
            start = np.searchsorted(row_query, np.arange(Q))  # first row of each query
            rank = np.arange(N) - start[row_query]  # position of a row among its query's beams
            width = int(rank.max()) + 1
            cands = env.candidates(state)
            ct = candidate_tensors(state, cands, device)
            q = q_all if k == 0 else policy.select_rows(q_all, torch.from_numpy(row_query).to(device))
            s, _ = policy.heads(q, h, k, critic=False)
            z = policy.candidate_logits(s, ct.entity, ct.relation, ct.dt, ct.mask)
            logp = torch.log_softmax(z.float(), dim=1)  # [N, A]
            A = logp.shape[1]
            total = beam_score[:, None] + logp  # [N, A]
            if N < Q * width:  # some query has fewer beams: pad its rows with -inf (row copies)
                padded = torch.full((Q * width, A), -torch.inf, device=device)
                total = padded.index_copy_(0, torch.from_numpy(row_query * width + rank).to(device), total)
            total = total.view(Q, width * A)
            if last_expansions and k == K - 1:  # every expansion, laid out as `total`
                exp_entity = np.full((Q * width, A), -1, dtype=np.int64)
                exp_entity[row_query * width + rank] = cands.entity
                exp_entity = exp_entity.reshape(Q, width * A)
                exp_score = total.float().cpu().numpy()
                exp_entity[~np.isfinite(exp_score)] = -1  # padding slots and rows
            top_score, top_idx = torch.topk(total, min(beam_size, width * A), dim=1)  # sorted, best first
            keep = torch.isfinite(top_score).cpu().numpy()
            top_idx = top_idx.cpu().numpy()
            query_of = np.nonzero(keep)[0]  # row-major: grouped by query, best first
            idx = top_idx[keep]
            rows = start[query_of] + idx // A
            slot = idx % A
            e, r, t = cands.entity[rows, slot], cands.relation[rows, slot], cands.time[rows, slot]
            state = env.move(state.take(rows), e, r, t)
            beam_score = top_score[torch.from_numpy(keep).to(device)]
            row_query = query_of
            if k < K - 1:
                rows_t = torch.from_numpy(rows).to(device)
                if h.stride(0) == 0:  # still the shared h_0: keep it shared (cheaper LSTM step)
                    h, c = h[:1].expand(len(rows), -1), c[:1].expand(len(rows), -1)
                else:
                    h, c = h[rows_t], c[rows_t]
                dt = torch.from_numpy(state.query_time - state.time).to(device)
                h, c = policy.advance_path((h, c), torch.from_numpy(e).to(device), torch.from_numpy(r).to(device), dt,
                                           **lstm_kw)
    # back to [Q, W]: a query's beams first, then dead padding (score -inf, paths -1)
    start = np.searchsorted(row_query, np.arange(Q))
    rank = np.arange(len(row_query)) - start[row_query]
    W = int(rank.max()) + 1
    score = np.full((Q, W), -np.inf, dtype=np.float32)
    score[row_query, rank] = beam_score.float().cpu().numpy()
    paths = []
    for a in (state.path_entity, state.path_relation, state.path_time):
        out = np.full((Q, W, K), -1, dtype=np.int64)
        out[row_query, rank] = a
        paths.append(out)
    if last_expansions:
        return Beams(score, *paths, expansion_entity=exp_entity, expansion_score=exp_score)
    return Beams(score, *paths)


@torch.inference_mode()
def search_beams_on_device(policy: Policy, env, queries, beam_size: int, options: SearchOptions = SearchOptions(),
                           tables: Optional[dict] = None, last_expansions: bool = False) -> "DeviceBeams":
    """:func:`search_beams` with every step on the device of ``env`` (a
    :class:`raptor.mdp.device_env.DeviceEnv`): the same beams, nothing read back but the candidate
    widths the environment reads once per step.

    Instead of dropping dead beams, every query keeps ``beam_size`` rows (``1`` at the start): a dead
    row has score ``-inf`` and STOPs in place, so all shapes are ``[Q x width, A]`` and the top-k is
    over ``[Q, width x A]`` with each query's live beams first, best first, as the host search lays
    them out. ``queries``: ``[Q, >= 3]``, a host array or a tensor. ``last_expansions``: also every
    expansion of the last step, ``[Q, width x A]`` (:class:`DeviceBeams`), as :func:`search_beams`
    returns them (dead rows and padding slots: entity ``-1``, score ``-inf``)."""
    precision, device = options.precision, env.device
    state = env.reset(queries, with_answer=False)
    Q, K = state.batch_size, env.K
    policy.eval()
    if tables is None:
        tables = path_tables(policy, state.query_time.cpu().numpy()[:, None]) if Q else None
    lstm_kw = {} if tables is None else {"tables": tables}
    width = 1
    with autocast(precision, device):
        q_all = query_context(policy, state, device)
        h, c = policy.initial_path_state(Q)
        beam_score = torch.zeros(Q, device=device)  # [Q x width]
        query_of = torch.arange(Q, device=device)
        for k in range(K):
            cands = env.candidates(state)
            ct = candidate_tensors(state, cands, device)
            q = q_all if k == 0 else policy.select_rows(q_all, query_of)
            s, _ = policy.heads(q, h, k, critic=False)
            # (no ``time_rows``: TITer's scorer reads dt's bound itself; the step reads widths anyway)
            z = policy.candidate_logits(s, ct.entity, ct.relation, ct.dt, ct.mask)
            logp = torch.log_softmax(z.float(), dim=1)  # [Q x width, A]
            A = logp.shape[1]
            total = (beam_score[:, None] + logp).view(Q, width * A)
            if last_expansions and k == K - 1:
                exp_score = total.float()
                exp_entity = torch.where(torch.isfinite(exp_score), cands.entity.reshape(Q, width * A), -1)
            top_score, top_idx = torch.topk(total, min(beam_size, width * A), dim=1)  # sorted, best first
            alive = torch.isfinite(top_score)
            # a dead beam STOPs where its parent row is (slot 0 is always a real action)
            slot = torch.where(alive, top_idx % A, 0).reshape(-1)
            rows = (torch.arange(Q, device=device)[:, None] * width + top_idx // A).reshape(-1)
            e, r, t = cands.entity[rows, slot], cands.relation[rows, slot], cands.time[rows, slot]
            state = env.move(state.take(rows), e, r, t)
            beam_score = top_score.reshape(-1)
            width = top_score.shape[1]
            query_of = torch.arange(Q, device=device).repeat_interleave(width)
            if k < K - 1:
                h, c = h[rows], c[rows]
                h, c = policy.advance_path((h, c), e, r, state.query_time - state.time, **lstm_kw)
    extra = {"expansion_entity": exp_entity, "expansion_score": exp_score} if last_expansions else {}
    return DeviceBeams(beam_score.view(Q, width), *(a.view(Q, width, K) for a in
                                                    (state.path_entity, state.path_relation, state.path_time)),
                       **extra)


@dataclass(frozen=True)
class DeviceBeams:
    """:class:`Beams` as tensors on the search's device, ``beam_size`` wide (dead beams: ``-inf``)."""

    score: torch.Tensor  # float32 [Q, W]
    entity: torch.Tensor  # int64 [Q, W, K]
    relation: torch.Tensor  # int64 [Q, W, K]
    time: torch.Tensor  # int64 [Q, W, K]
    #: with ``last_expansions``: every expansion of the last step, ``[Q, X]`` (as :class:`Beams`)
    expansion_entity: Optional[torch.Tensor] = None
    expansion_score: Optional[torch.Tensor] = None


def aggregate_scores_on_device(final_entity: torch.Tensor, score: torch.Tensor, num_entities: int,
                               score_rule: str = "max") -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`aggregate_scores` as tensor operations: ``[Q, W]`` candidates sorted by decreasing score,
    ties by entity id, ``-1`` / ``-inf`` padding. Per query a dense ``[E]`` row of entity scores
    (``scatter_reduce``), then a stable sort. ``logsumexp`` sums in another order than the host
    (equal up to rounding)."""
    if score_rule not in ("max", "logsumexp"):
        raise ValueError(f"unknown score_rule {score_rule!r}")
    Q, W = score.shape
    live = torch.isfinite(score)
    ent = torch.where(live, final_entity, num_entities)  # dead beams go to a spill column
    dense = torch.full((Q, num_entities + 1), -torch.inf, device=score.device)
    dense.scatter_reduce_(1, ent, score.float(), "amax")
    if score_rule == "logsumexp":
        top = dense.gather(1, ent)  # each beam's entity's best score
        terms = torch.where(live, torch.exp(score.float() - top), 0.0)
        sums = torch.zeros_like(dense).scatter_add_(1, ent, terms)
        dense = torch.where(torch.isfinite(dense), dense + torch.log(sums), dense)
    dense[:, num_entities] = -torch.inf
    sorted_score, order = torch.sort(dense, dim=1, descending=True, stable=True)
    if W > num_entities + 1:  # more beams than entities: pad the columns to W
        sorted_score = F.pad(sorted_score, (0, W - num_entities - 1), value=-torch.inf)
        order = F.pad(order, (0, W - num_entities - 1), value=-1)
    cand_score = sorted_score[:, :W]
    cand_entity = torch.where(torch.isfinite(cand_score), order[:, :W], -1)
    return cand_entity, cand_score


def _device_search(policy: Policy, env: TemporalEnv, queries: np.ndarray, eval_cfg: EvalConfig,
                   options: SearchOptions, filter_index: Optional[FilterIndex] = None
                   ) -> tuple[BeamResult, Optional[np.ndarray]]:
    """:func:`beam_search` with :func:`search_beams_on_device`, ``options.device_chunk_size`` queries at a
    time; with ``filter_index`` (and ``[Q, 4]`` queries) also the filtered ranks of the answers, computed
    on the device (:func:`raptor.evaluation.ranking.filtered_ranks_on_device`), else ``None``."""
    from raptor.common.progress import progress_bar
    from raptor.mdp.device_env import on_device

    denv = on_device(env, options.device, "torch")
    E = env.num_entities
    Q, K, W = len(queries), env.K, eval_cfg.beam_size
    expansions = eval_cfg.rank_last_expansions
    out = {"cand_entity": np.full((Q, W), -1, dtype=np.int64), "cand_score": np.full((Q, W), -np.inf, dtype=np.float32),
           "path_entity": np.full((Q, K), -1, dtype=np.int64), "path_relation": np.full((Q, K), -1, dtype=np.int64),
           "path_time": np.full((Q, K), -1, dtype=np.int64), "path_score": np.full(Q, -np.inf, dtype=np.float32)}
    ranks = None
    if filter_index is not None:
        dfilter = DeviceFilter.of(filter_index, denv.device)
        ranks = np.empty(Q, dtype=np.float64)
    parts = []  # with `expansions`: (lo, hi, entities, scores) of each chunk, widened at the end
    with torch.inference_mode():
        tables = path_tables(policy, queries)
    step = options.device_chunk_size
    for lo in progress_bar(range(0, Q, step), desc="beam search", enabled=options.progress, nested=True):
        hi = min(Q, lo + step)
        beams = search_beams_on_device(policy, denv, queries[lo:hi], W, options, tables, last_expansions=expansions)
        if expansions:
            ent, sc = aggregate_scores_on_device(beams.expansion_entity, beams.expansion_score, E, eval_cfg.score_rule)
        else:
            ent, sc = aggregate_scores_on_device(beams.entity[:, :, -1], beams.score, E, eval_cfg.score_rule)
        if ranks is not None:
            chunk = torch.from_numpy(queries[lo:hi]).to(denv.device)
            ranks[lo:hi] = filtered_ranks_on_device(ent, sc, chunk[:, 2], chunk[:, [0, 1, 3]], dfilter, E).cpu().numpy()
        got = {"path_entity": beams.entity[:, 0], "path_relation": beams.relation[:, 0], "path_time": beams.time[:, 0],
               "path_score": beams.score[:, 0]}
        if expansions:  # as many columns as the chunk's widest candidate list (one read)
            w = int((ent >= 0).sum(1).max()) if hi > lo else 0
            parts.append((lo, hi, ent[:, :w].cpu().numpy(), sc[:, :w].cpu().numpy()))
        else:
            got.update(cand_entity=ent, cand_score=sc)
        for key, value in got.items():  # one copy per array and chunk
            value = value.cpu().numpy()
            if key.startswith("cand"):
                out[key][lo:hi, :value.shape[1]] = value
            else:
                out[key][lo:hi] = value
    if expansions:  # one width for all chunks: the most entities any query reached (at least 1), as the host's
        C = max([1] + [e.shape[1] for _, _, e, _ in parts])
        out["cand_entity"] = np.full((Q, C), -1, dtype=np.int64)
        out["cand_score"] = np.full((Q, C), -np.inf, dtype=np.float32)
        for lo, hi, ent, sc in parts:
            out["cand_entity"][lo:hi, :ent.shape[1]] = ent
            out["cand_score"][lo:hi, :sc.shape[1]] = sc
    return BeamResult(**out), ranks


def _use_device_search(options: SearchOptions, eval_cfg: EvalConfig) -> bool:
    if options.backend not in ("auto", "host", "device"):
        raise ValueError(f"unknown beam search backend {options.backend!r} (auto, host, device)")
    return options.backend == "device" or (options.backend == "auto" and torch.device(options.device).type == "cuda")


def beam_search(policy: Policy, env: TemporalEnv, queries: np.ndarray, eval_cfg: EvalConfig = EvalConfig(),
                options: SearchOptions = SearchOptions()) -> BeamResult:
    """Beam search for every query, ``options.chunk_size`` at a time; see the module docstring for
    the output."""
    from raptor.common.progress import progress_bar

    queries = np.asarray(queries, dtype=np.int64)
    if _use_device_search(options, eval_cfg):
        return _device_search(policy, env, queries, eval_cfg, options)[0]
    chunk_size, progress = options.chunk_size, options.progress
    Q, K, W = len(queries), env.K, eval_cfg.beam_size
    expansions = eval_cfg.rank_last_expansions
    cand_entity = np.full((Q, W), -1, dtype=np.int64)
    cand_score = np.full((Q, W), -np.inf, dtype=np.float32)
    parts = []  # with `expansions`: (lo, hi, entities, scores) of each chunk, widened at the end
    path_entity = np.full((Q, K), -1, dtype=np.int64)
    path_relation = np.full((Q, K), -1, dtype=np.int64)
    path_time = np.full((Q, K), -1, dtype=np.int64)
    path_score = np.full(Q, -np.inf, dtype=np.float32)
    with torch.inference_mode():
        tables = path_tables(policy, queries)  # once: the weights do not change during the search
    for lo in progress_bar(range(0, Q, chunk_size), desc="beam search", enabled=progress, nested=True):
        hi = min(Q, lo + chunk_size)
        beams = search_beams(policy, env, queries[lo:hi], W, options, tables, last_expansions=expansions)
        if expansions:
            ent, sc = aggregate_scores(beams.expansion_entity, beams.expansion_score, eval_cfg.score_rule)
            w = int((ent >= 0).sum(1).max(initial=0))
            parts.append((lo, hi, ent[:, :w].copy(), sc[:, :w].copy()))
        else:
            ent, sc = aggregate_scores(beams.entity[:, :, -1], beams.score, eval_cfg.score_rule)
            w = ent.shape[1]
            cand_entity[lo:hi, :w] = ent
            cand_score[lo:hi, :w] = sc
        # topk returns beams sorted by score: beam 0 is the best path.
        path_entity[lo:hi] = beams.entity[:, 0]
        path_relation[lo:hi] = beams.relation[:, 0]
        path_time[lo:hi] = beams.time[:, 0]
        path_score[lo:hi] = beams.score[:, 0]
    if expansions:  # one width for all chunks: the most entities any query reached (at least 1)
        C = max([1] + [e.shape[1] for _, _, e, _ in parts])
        cand_entity = np.full((Q, C), -1, dtype=np.int64)
        cand_score = np.full((Q, C), -np.inf, dtype=np.float32)
        for lo, hi, ent, sc in parts:
            cand_entity[lo:hi, :ent.shape[1]] = ent
            cand_score[lo:hi, :sc.shape[1]] = sc
    return BeamResult(cand_entity, cand_score, path_entity, path_relation, path_time, path_score)


def search_and_rank(policy: Policy, env: TemporalEnv, queries: np.ndarray, filter_index: FilterIndex,
                    eval_cfg: EvalConfig = EvalConfig(), options: SearchOptions = SearchOptions()
                    ) -> tuple[BeamResult, np.ndarray]:
    """:func:`beam_search` of int64 ``[Q, 4]`` queries ``(e_q, r_q, o_q, t_q)`` and the time-aware filtered
    rank of each answer ``o_q`` (float64 ``[Q]``, :func:`raptor.evaluation.ranking.filtered_ranks`). The
    device search ranks on the device, chunk by chunk (only the ranks and the predictions come back); the
    host search ranks its candidates on the host."""
    queries = np.asarray(queries, dtype=np.int64)
    if queries.ndim != 2 or queries.shape[1] != 4:
        raise ValueError(f"search_and_rank needs [Q, 4] queries (e_q, r_q, o_q, t_q), got shape {queries.shape}")
    if _use_device_search(options, eval_cfg):
        if filter_index.max_answer >= env.num_entities:
            raise ValueError(f"filter index holds entity {filter_index.max_answer} >= num_entities={env.num_entities}")
        return _device_search(policy, env, queries, eval_cfg, options, filter_index)
    res = beam_search(policy, env, queries, eval_cfg, options)
    return res, filtered_ranks(res.cand_entity, res.cand_score, queries[:, 2], queries[:, [0, 1, 3]], filter_index,
                               env.num_entities)


def explain(policy: Policy, env: TemporalEnv, query, eval_cfg: EvalConfig = EvalConfig(), top_k: int = 10,
            paths_per_entity: int = 3, options: SearchOptions = SearchOptions()) -> list[dict]:
    """Predicted top-``k`` entities of one query ``(e_q, r_q, t_q)`` (or ``(e_q, r_q, o_q, t_q)``), each
    with its score and up to ``paths_per_entity`` supporting paths (most probable first).

    Returns ``[{"entity", "score", "paths": [{"log_prob", "hops": [{"from", "relation", "to",
    "time"}, ...]}, ...]}, ...]``; STOP hops are kept (relation ``2R``, ``from == to``).
    """
    q = np.asarray(query, dtype=np.int64).reshape(1, -1)
    beams = search_beams(policy, env, q, eval_cfg.beam_size, options)
    ent, sc = aggregate_scores(beams.entity[:, :, -1], beams.score, eval_cfg.score_rule)
    out = []
    e_q = int(q[0, 0])
    for i in range(ent.shape[1]):
        if ent[0, i] < 0 or len(out) >= top_k:
            break
        e = int(ent[0, i])
        paths = []
        for w in np.flatnonzero((beams.entity[0, :, -1] == e) & np.isfinite(beams.score[0])):
            hops, prev = [], e_q
            for k in range(env.K):
                nxt = int(beams.entity[0, w, k])
                hops.append({"from": prev, "relation": int(beams.relation[0, w, k]), "to": nxt,
                             "time": int(beams.time[0, w, k])})
                prev = nxt
            paths.append({"log_prob": float(beams.score[0, w]), "hops": hops})
            if len(paths) >= paths_per_entity:
                break
        out.append({"entity": e, "score": float(sc[0, i]), "paths": paths})
    return out
