"""The arithmetic of one training epoch and one evaluated query, counted from the configuration.

What the hardware bound of ``benchmarks/bench_agent.py`` divides by a measured GEMM rate. The count
follows the implementation (``raptor/agents/policy.py``, ``raptor/agents/actor_critic/rl.py``, ``raptor/agents/beam.py``), not an
idealised model: the query parts of the first MLP layers are computed once per episode, the shared
initial state ``h_0`` enters the first LSTM step as one row, the critic reads a detached input (no
input gradient; with ``model.critic_detach`` false it has one), and the beam search computes the critic's query part too. ``tests/test_flops.py``
checks the GEMM part against ``torch.utils.flop_counter.FlopCounterMode`` on a real batch.

Notation (shapes per batch of ``B`` episodes, or ``Q`` queries in beam search)::

    d_e = entity_dim, d_r = relation_dim, d_t = time_dim, d_s = d_r - d_t (static relation part)
    d_a = d_e + d_r (action), d_h = lstm_hidden_dim or d_a (LSTM state), d_q = d_e + d_r (query), H = mlp_hidden_dim, d_k = step_dim
    A = candidate slots per state (max_actions + 1 with STOP), K = max_path_length
    R2 = 2 R + 2 relation ids (forward, inverse, STOP, padding), T = time-difference table rows

A GEMM ``[m, k] x [k, n]`` is ``2 m k n`` FLOPs forward; its backward is ``2 m k n`` for the
weight gradient plus ``2 m k n`` for the input gradient when the input needs one. The entity and
time parts of the action scores (a fused gather-dot kernel, not a GEMM: ``2 B A (d_e + d_t)``
forward, twice that backward) are counted separately: they run at memory speed, not at GEMM speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from raptor.config import EnvConfig, ModelConfig


@dataclass(frozen=True)
class Gemm:
    """``count`` GEMMs of ``[m, k] x [k, n]``; ``input_grad``: the backward also computes dX."""

    name: str
    m: int
    k: int
    n: int
    count: int = 1
    input_grad: bool = True
    weight_grad: bool = True

    @property
    def forward(self) -> float:
        return 2.0 * self.m * self.k * self.n * self.count

    @property
    def backward(self) -> float:
        return self.forward * (int(self.input_grad) + int(self.weight_grad))


def training_gemms(model: ModelConfig, batch: int, max_path_length: int, num_relations: int) -> list[Gemm]:
    """The GEMMs of one training batch (rollout forward, loss backward), CPU float path.

    The time part of the scores is not a GEMM there: :func:`scoring_kernel_flops` counts it with the
    entity part (the GPU path still computes ``S_t tau^T``, ``[B, T]``: more arithmetic than counted).
    """
    B, K = batch, max_path_length
    de, dr, dt, dk, H = model.entity_dim, model.relation_dim, model.time_dim, model.step_dim, model.mlp_hidden_dim
    da, dq, ds = de + dr, de + dr, dr - dt
    dh = model.lstm_hidden_dim or da
    R2 = 2 * num_relations + 2
    return [
        # once per batch: the query and step blocks of both first layers (Policy.precompute_query)
        Gemm("actor_query", B, dq, H),
        Gemm("critic_query", B, dq, H, input_grad=not model.critic_detach),
        Gemm("actor_step", K, dk, H),
        Gemm("critic_step", K, dk, H, input_grad=not model.critic_detach),
        # h_0 = LSTM(a_init, (h_init, c_init)): one row
        Gemm("lstm_init_ih", 1, da, 4 * dh),
        Gemm("lstm_init_hh", 1, dh, 4 * dh),
        # every step: actor and critic heads, relation score table
        Gemm("actor_h", B, dh, H, count=K),
        Gemm("actor_out", B, H, da, count=K),
        Gemm("critic_h", B, dh, H, count=K, input_grad=not model.critic_detach),
        Gemm("critic_out", B, H, 1, count=K),
        Gemm("score_relation", B, ds, R2, count=K),
        # K - 1 path updates; the first one's recurrent term is one row (h_0 is shared)
        Gemm("lstm_ih", B, da, 4 * dh, count=K - 1),
        Gemm("lstm_hh_first", 1, dh, 4 * dh, count=1 if K > 1 else 0),
        Gemm("lstm_hh", B, dh, 4 * dh, count=max(K - 2, 0)),
    ]


def scoring_kernel_flops(model: ModelConfig, rows: int, actions: int) -> tuple[float, float]:
    """``(forward, backward)`` FLOPs of the entity and time parts of the scores of ``rows`` states
    (gather-dots over ``d_e + d_t`` dimensions)."""
    f = 2.0 * rows * actions * (model.entity_dim + model.time_dim)
    return f, 2 * f


@dataclass(frozen=True)
class WorkCount:
    """FLOPs of a unit of work, split by where they run."""

    gemm: float
    kernel: float

    @property
    def total(self) -> float:
        return self.gemm + self.kernel


def training_epoch_flops(model: ModelConfig, queries: int, batch: int, max_path_length: int, max_actions: int,
                         num_relations: int) -> WorkCount:
    """FLOPs of one RL epoch over ``queries`` training queries (full batches of ``batch``; the last,
    partial one pro rata): forward and backward."""
    g = sum(x.forward + x.backward for x in training_gemms(model, batch, max_path_length, num_relations))
    f, b = scoring_kernel_flops(model, batch * max_path_length, max_actions + 1)
    scale = queries / batch
    return WorkCount(gemm=g * scale, kernel=(f + b) * scale)


def beam_rows(queries: int, beam: int, max_path_length: int, actions: int | Sequence[int]) -> list[int]:
    """Rows (live beams) scored at each step when every query has ``A_k`` candidate slots at step ``k``
    (``actions``: one value for every step or one per step): ``Q``, then ``Q * min(beam, width * A_k)``;
    the most a beam search can score (a query with fewer candidates keeps fewer beams)."""
    acts = [actions] * max_path_length if isinstance(actions, int) else list(actions)
    out, width = [], 1
    for k in range(max_path_length):
        out.append(queries * width)
        width = min(beam, width * acts[k])
    return out


def beam_gemms(model: ModelConfig, queries: int, rows: Sequence[int], num_relations: int) -> list[Gemm]:
    """The GEMMs of a beam search over ``queries`` queries (forward only; the actor only in the heads,
    but the critic's query block is computed with the actor's). ``rows[k]`` is the number of live beams
    scored at step ``k`` (``rows[0] = Q``; :func:`beam_rows` for the most), so ``K = len(rows)``; the LSTM
    after step ``k`` feeds the ``rows[k + 1]`` surviving beams."""
    de, dr, dt, dk, H = model.entity_dim, model.relation_dim, model.time_dim, model.step_dim, model.mlp_hidden_dim
    da, dq, ds = de + dr, de + dr, dr - dt
    dh = model.lstm_hidden_dim or da
    R2 = 2 * num_relations + 2
    K = len(rows)
    out = [Gemm("actor_query", queries, dq, H), Gemm("critic_query", queries, dq, H),
           Gemm("actor_step", K, dk, H), Gemm("critic_step", K, dk, H),
           Gemm("lstm_init_ih", 1, da, 4 * dh), Gemm("lstm_init_hh", 1, dh, 4 * dh)]
    for k in range(K):
        out += [Gemm(f"actor_h[{k}]", rows[k], dh, H), Gemm(f"actor_out[{k}]", rows[k], H, da),
                Gemm(f"score_relation[{k}]", rows[k], ds, R2)]
        if k < K - 1:
            # the input part W_ih a is a sum of table rows (path_table_gemms, once per search); W_hh h
            # is computed for one row while h is the shared h_0
            shared = k == 0
            out += [Gemm(f"lstm_hh[{k}]", 1 if shared else rows[k + 1], dh, 4 * dh)]
    return out


def path_table_gemms(model: ModelConfig, num_entities: int, num_relations: int, time_rows: int) -> list[Gemm]:
    """The GEMMs of :meth:`raptor.agents.policy.Policy.path_input_tables` (once per beam search call): the LSTM's
    input weights applied to every entity, relation and time difference (``time_rows = max dt + 1``)."""
    de, dr, dt = model.entity_dim, model.relation_dim, model.time_dim
    dh = model.lstm_hidden_dim or de + dr
    return [Gemm("path_table_entity", num_entities + 1, de, 4 * dh),
            Gemm("path_table_relation", 2 * num_relations + 2, dr - dt, 4 * dh),
            Gemm("path_table_time", time_rows, dt, 4 * dh)]


def beam_query_flops(model: ModelConfig, env: EnvConfig, beam: int, num_entities: int, num_relations: int,
                     time_rows: int, queries: int = 1000) -> WorkCount:
    """FLOPs of evaluating one query by beam search (``env.max_path_length`` steps) when every state
    has ``env.max_actions + 1`` actions (an upper bound: queries with fewer candidates keep fewer
    beams), amortised over a call of ``queries`` queries (the LSTM input tables are computed once
    per call)."""
    max_path_length, max_actions = env.max_path_length, env.max_actions
    rows = beam_rows(queries, beam, max_path_length, max_actions + 1)
    gemms = beam_gemms(model, queries, rows, num_relations)
    gemms += path_table_gemms(model, num_entities, num_relations, time_rows)
    f, _ = scoring_kernel_flops(model, sum(rows), max_actions + 1)
    return WorkCount(gemm=sum(g.forward for g in gemms) / queries, kernel=f / queries)


def gemm_shapes(gemms: list[Gemm]) -> dict[tuple[int, int, int], float]:
    """Forward FLOPs by distinct ``(m, k, n)`` shape: where a measured GEMM rate should be taken."""
    out: dict[tuple[int, int, int], float] = {}
    for g in gemms:
        if g.count:
            out[(g.m, g.k, g.n)] = out.get((g.m, g.k, g.n), 0.0) + g.forward
    return out
