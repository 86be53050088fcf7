"""What training several seeds at once as one batched step needs, whatever the phase (RL:
:mod:`raptor.agents.actor_critic.seeds`; pretraining: :mod:`raptor.agents.actor_critic.pretrain_seeds`):
the stacked policy, each seed's uniforms, per-seed gradient clipping, per-seed optimizer states, and
where a seed's run would resume. No phase's training code is imported here, so each phase's stage
depends only on its own (``tests/test_provenance.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from torch import nn

from raptor.agents.policy import Policy, gather_dot, lookup
from raptor.runs import checkpoints
from raptor.runs.rundir import RunDir, RunOptions

# ------------------------------------------------------------------------------------------------
# The stacked policy
# ------------------------------------------------------------------------------------------------


class StackedPolicy(nn.Module):
    """``S`` :class:`raptor.agents.policy.Policy` of the same shape as one module.

    Every parameter of a policy becomes one of shape ``[S, *shape]`` (in the policy's parameter order,
    so optimizer states map one to one). Inputs and outputs are the policy's, with ``S B`` rows,
    seed-major. It has the methods a training rollout calls (:func:`raptor.agents.rollout.rollout`):
    :meth:`query_embedding`, :meth:`precompute_query`, :meth:`initial_path_state`, :meth:`heads`,
    :meth:`candidate_logits` and :meth:`advance_path`. Embedding tables are looked up as one table of
    ``S`` blocks (an index plus its seed's offset), so the policy's own gather kernels serve.
    """

    def __init__(self, policies: Sequence[Policy]):
        super().__init__()
        if not policies:
            raise ValueError("StackedPolicy: no policies to stack")
        first = policies[0]
        for p in policies[1:]:
            if (p.num_entities, p.num_relations, p.config, p.max_path_length) != \
                    (first.num_entities, first.num_relations, first.config, first.max_path_length):
                raise ValueError("StackedPolicy: the policies differ in shape (dataset, model params or path length)")
        self.seeds = len(policies)
        self.num_entities, self.num_relations = first.num_entities, first.num_relations
        self.config, self.max_path_length = first.config, first.max_path_length
        self.d_entity, self.d_static, self.d_time = first.d_entity, first.d_static, first.d_time
        self.d_action, self.d_path = first.d_action, first.d_path
        self.names = [name for name, _ in first.named_parameters()]
        per_policy = [dict(p.named_parameters()) for p in policies]
        self.stacked = nn.ParameterList(
            nn.Parameter(torch.stack([params[name].detach() for params in per_policy]).clone()) for name in self.names)
        self._index = {name: i for i, name in enumerate(self.names)}

    def p(self, name: str) -> torch.Tensor:
        """The stacked parameter ``name`` (a policy's parameter name), ``[S, *shape]``."""
        return self.stacked[self._index[name]]

    @torch.no_grad()
    def unstack_into(self, policies: Sequence[Policy]) -> None:
        """Copy seed ``s``'s weights into ``policies[s]`` (e.g. before validating it)."""
        for s, policy in enumerate(policies):
            for name, param in policy.named_parameters():
                param.copy_(self.p(name)[s])

    # -------------------------------------------------------------- rows and blocks

    def _seed_of_row(self, n: int, device) -> torch.Tensor:
        if n % self.seeds:
            raise ValueError(f"StackedPolicy: {n} rows do not split into {self.seeds} seeds")
        return torch.arange(self.seeds, device=device).repeat_interleave(n // self.seeds)

    def _table(self, name: str) -> tuple[torch.Tensor, int]:
        """An embedding table ``[S, N, d]`` as one ``[S N, d]`` table, and ``N``."""
        w = self.p(name)
        return w.reshape(-1, w.shape[-1]), w.shape[1]

    def _offset(self, idx: torch.Tensor, rows_per_seed: int) -> torch.Tensor:
        """Indices ``[n, ...]`` into seed blocks of ``rows_per_seed`` rows: each row's index plus its seed's offset."""
        seed = self._seed_of_row(idx.shape[0], idx.device)
        return idx + (seed * rows_per_seed).view(-1, *([1] * (idx.dim() - 1)))

    def _linear(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Seed ``s``'s ``F.linear(x_s, weight[s], bias[s])`` for every seed: ``x [n, in]`` ->
        ``[n, out]`` (one batched GEMM)."""
        xs = x.reshape(self.seeds, -1, x.shape[-1])
        wt = weight.transpose(1, 2)
        y = torch.bmm(xs, wt) if bias is None else torch.baddbmm(bias.unsqueeze(1), xs, wt)
        return y.reshape(-1, weight.shape[1])

    # -------------------------------------------------------------- embeddings

    def time_encoding(self, dt: torch.Tensor) -> torch.Tensor:
        """``tau(dt) = cos(w_s dt + b_s)`` of each row's seed ``s``, shape ``dt.shape + (d_t,)``."""
        seed = self._seed_of_row(dt.shape[0], dt.device)
        shape = (-1,) + (1,) * (dt.dim() - 1) + (self.d_time,)
        w, b = self.p("time_w")[seed].view(shape), self.p("time_b")[seed].view(shape)
        return torch.cos(dt.to(w.dtype).unsqueeze(-1) * w + b)

    def relation_embedding(self, relation: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        table, n = self._table("relation_emb.weight")
        return torch.cat([lookup(table, self._offset(relation, n)), self.time_encoding(dt)], dim=-1)

    def action_embedding(self, entity: torch.Tensor, relation: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        table, n = self._table("entity_emb.weight")
        return torch.cat([lookup(table, self._offset(entity, n)), self.relation_embedding(relation, dt)], dim=-1)

    def query_embedding(self, query_entity: torch.Tensor, query_relation: torch.Tensor) -> torch.Tensor:
        table, n = self._table("entity_emb.weight")
        return torch.cat([lookup(table, self._offset(query_entity, n)),
                          self.relation_embedding(query_relation, torch.zeros_like(query_relation))], dim=-1)

    # -------------------------------------------------------------- path encoder

    def lstm_cell(self, x: torch.Tensor, hc: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`raptor.agents.policy.Policy.lstm_cell` (its autograd form) of every row's seed."""
        h, c = hc
        gates = self._linear(x, self.p("lstm_weight_ih")) + \
            self._linear(h.to(x.dtype), self.p("lstm_weight_hh"), self.p("lstm_bias"))
        i, f, g, o = gates.float().chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def initial_path_state(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h_0, c_0)`` of each seed, repeated over its ``batch_size / S`` rows."""
        h, c = self.lstm_cell(self.p("a_init"), (self.p("h_init"), self.p("c_init")))  # one row per seed
        rows = batch_size // self.seeds
        return h.repeat_interleave(rows, 0), c.repeat_interleave(rows, 0)

    def advance_path(self, hc, entity, relation, dt, tables=None):
        """``h_{k+1} = LSTM(a_k, h_k)`` of the taken actions (``tables``: unused, training only)."""
        return self.lstm_cell(self.action_embedding(entity, relation, dt), hc)

    # -------------------------------------------------------------- heads

    def _critic_input(self, x: torch.Tensor) -> torch.Tensor:
        return x.detach() if self.config.critic_detach else x

    def precompute_query(self, query: torch.Tensor) -> dict[str, torch.Tensor]:
        """:meth:`raptor.agents.policy.Policy.precompute_query` per seed: ``*_q`` ``[n, H]``,
        ``*_h`` ``[S, H, d_h]``, ``*_step`` ``[S, K, H]``."""
        dtype = query.dtype
        if torch.is_autocast_enabled(query.device.type):
            dtype = torch.get_autocast_dtype(query.device.type)
        steps = self.p("step_emb.weight")  # [S, K, d_step]
        d = self._critic_input
        return {
            "actor_q": self._linear(query, self.p("actor_mlp.0.weight_q"), self.p("actor_mlp.0.bias")),
            "critic_q": self._linear(d(query), self.p("critic_mlp.0.weight_q"), self.p("critic_mlp.0.bias")),
            "actor_h": self.p("actor_mlp.0.weight_h").to(dtype),
            "critic_h": self.p("critic_mlp.0.weight_h").to(dtype),
            "actor_step": torch.bmm(steps, self.p("actor_mlp.0.weight_k").transpose(1, 2)),
            "critic_step": torch.bmm(d(steps), self.p("critic_mlp.0.weight_k").transpose(1, 2)),
        }

    def heads(self, pre: dict[str, torch.Tensor], h: torch.Tensor, step: int,
              critic: bool = True) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``(s [n, d_a], V [n])`` of every row's seed (:meth:`raptor.agents.policy.Policy.heads`)."""
        S, n = self.seeds, h.shape[0]
        hh = h.to(pre["actor_h"].dtype).reshape(S, n // S, -1)

        def head(which: str, x: torch.Tensor) -> torch.Tensor:
            first = torch.baddbmm(pre[f"{which}_q"].reshape(S, n // S, -1) + pre[f"{which}_step"][:, step, None, :],
                                  x, pre[f"{which}_h"].transpose(1, 2))
            return self._linear(torch.relu(first).reshape(n, -1), self.p(f"{which}_mlp.2.weight"),
                                self.p(f"{which}_mlp.2.bias"))

        s = head("actor", hh)
        v = head("critic", self._critic_input(hh)).squeeze(-1) if critic else None
        return s, v

    def candidate_logits(self, s: torch.Tensor, entity: torch.Tensor, relation: torch.Tensor,
                         dt: torch.Tensor, mask: Optional[torch.Tensor] = None,
                         time_rows: Optional[int] = None) -> torch.Tensor:
        """Logits ``<s, a>`` of ``[n, A]`` candidates under each row's seed, float32, ``-inf`` where
        ``mask`` is false (:meth:`raptor.agents.policy.Policy.candidate_logits`, decomposed the same way)."""
        S, n = self.seeds, s.shape[0]
        if time_rows is not None and s.device.type != "cpu":
            n_dt = time_rows
        else:
            n_dt = int(dt.max()) + 1 if dt.numel() else 1
        de, ds = self.d_entity, self.d_static
        s_e, s_r, s_t = s[:, :de], s[:, de:de + ds], s[:, de + ds:]
        entities, n_e = self._table("entity_emb.weight")
        z = gather_dot(s_e, entities, self._offset(entity, n_e)).float()
        rel = self.p("relation_emb.weight")  # [S, 2R+2, d_s]
        g_rel = torch.bmm(s_r.reshape(S, n // S, ds), rel.to(s_r.dtype).transpose(1, 2)).reshape(n, -1)
        z = z + g_rel.float().gather(1, relation)
        with torch.autocast(device_type=s.device.type, enabled=False):
            w, b = self.p("time_w"), self.p("time_b")  # [S, d_t]
            times = torch.arange(n_dt, device=dt.device).to(w.dtype)
            table = torch.cos(times[None, :, None] * w[:, None, :] + b[:, None, :])  # [S, T, d_t]
        g_time = torch.bmm(s_t.reshape(S, n // S, -1), table.to(s_t.dtype).transpose(1, 2)).reshape(n, -1)
        z = z + g_time.float().gather(1, dt)
        if mask is not None:
            z = z.masked_fill(~mask, float("-inf"))
        return z


# ------------------------------------------------------------------------------------------------
# Per-seed pieces of a step: uniforms, clipping, optimizer states
# ------------------------------------------------------------------------------------------------


class SeedUniforms:
    """The uniforms of a stacked rollout's step ``k`` (``self[k]``, ``dtype`` ``[S B]``): seed ``s``'s
    ``B`` drawn from its own generator when the step asks, as :func:`raptor.agents.sampling.sample_step`
    (float64) or :func:`raptor.agents.sampling.sample_actions` (float32, pretraining) draws them alone."""

    def __init__(self, generators: Sequence[torch.Generator], rows_per_seed: int, device,
                 dtype: torch.dtype = torch.float64):
        self.generators, self.rows, self.device, self.dtype = generators, rows_per_seed, device, dtype

    def __getitem__(self, k: int) -> torch.Tensor:
        return torch.cat([torch.rand(self.rows, generator=g, device=self.device, dtype=self.dtype)
                          for g in self.generators])


def clip_per_seed(stack: StackedPolicy, max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` of each seed's gradient on its own: float32 ``[S]`` norms
    before clipping; each seed's gradients scaled by ``min(1, max_norm / (norm + 1e-6))``."""
    grads = [p.grad for p in stack.parameters() if p.grad is not None]
    norms = torch.stack([g.reshape(g.shape[0], -1).norm(dim=1) for g in grads], 1).norm(dim=1)  # [S]
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))).to(g.dtype))
    return norms


def seed_optimizer_state(state: dict[str, Any], seed_index: int) -> dict[str, Any]:
    """Seed ``seed_index``'s part of a stacked optimizer's ``state_dict()``: the ``state_dict()`` of
    the same optimizer over that seed's policy alone (its per-parameter tensors sliced, the rest kept)."""
    per_param = {}
    for i, st in state["state"].items():
        per_param[i] = {k: (v[seed_index].clone() if isinstance(v, torch.Tensor) and v.dim() > 0 else
                            (v.clone() if isinstance(v, torch.Tensor) else v)) for k, v in st.items()}
    return {"state": per_param, "param_groups": [dict(g) for g in state["param_groups"]]}


def stack_optimizer_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The inverse of :func:`seed_optimizer_state`: one seed's ``state_dict()`` each, in seed order,
    into the stacked optimizer's (every seed at the same step count, as stacked training keeps them)."""
    first = states[0]
    stacked = {}
    for i, st in first["state"].items():
        stacked[i] = {}
        for k, v in st.items():
            vs = [s["state"][i][k] for s in states]
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                stacked[i][k] = torch.stack(vs)
            else:
                if any(not torch.equal(torch.as_tensor(x), torch.as_tensor(v)) for x in vs):
                    raise ValueError(f"stack_optimizer_states: the seeds' optimizers differ in {k!r}")
                stacked[i][k] = v
    return {"state": stacked, "param_groups": [dict(g) for g in first["param_groups"]]}


# ------------------------------------------------------------------------------------------------
# Resuming
# ------------------------------------------------------------------------------------------------


def resume_epoch(run: RunOptions, fmt: str, what: str) -> int:
    """The epoch ``run`` would resume at (0: none) from its checkpoint of format ``fmt`` (``what``:
    its name in errors), read without restoring anything."""
    from raptor.runs.loop import checkpoint_progress

    if not run.resume or run.out_dir is None:
        return 0
    return checkpoint_progress(run.out_dir, fmt, what)[0]


def aligned_resume_epochs(runs: Sequence[RunOptions], fmt: str, what: str) -> list[int]:
    """The epochs ``runs`` resume at (:func:`resume_epoch`), made equal where an interrupted stacked run
    left them apart. A kill between two seeds' checkpoint writes of one stacked epoch leaves some seeds a
    checkpoint ahead of the others: when every seed ahead has a latest checkpoint whose last epoch was
    trained stacked with as many seeds as ``runs`` and a previous one (``checkpoint.pt.prev``; none: no
    checkpoint) where the others stand, each is set back to that previous checkpoint, and the epochs it
    drops are trained again, stacked, to the same bits. Otherwise the epochs are returned as they are
    (the seeds then train alone)."""
    import logging
    import os

    starts = [resume_epoch(r, fmt, what) for r in runs]
    low = min(starts, default=0)
    ahead = [Path(r.out_dir) / RunDir.CHECKPOINT for r, start in zip(runs, starts) if start > low]
    if len(runs) < 2 or not ahead:
        return starts
    for path in ahead:
        prev = checkpoints.previous(path)
        try:
            rows = checkpoints.load(path, fmt, what).get("history") or []
            back = int(checkpoints.load(prev, fmt, what)["epoch"]) + 1 if prev.exists() else 0
        except (checkpoints.CheckpointError, OSError):
            return starts
        if back != low or not rows or rows[-1].get("stacked_seeds") != len(runs):
            return starts
    for path in ahead:
        logging.getLogger("raptor").warning("%s: set back to the previous checkpoint, after epoch %d like the other "
                                            "seeds of its interrupted stacked run, to go on stacked", path, low)
        prev = checkpoints.previous(path)
        os.replace(prev, path) if prev.exists() else path.unlink()
    return [low] * len(runs)


def not_alone(epoch: int) -> dict[str, Any]:  # pragma: no cover - a stacked phase trains in its own loop
    """The ``run_epoch`` of a stacked seed's :class:`raptor.runs.loop.Phase`: never called (the stack trains
    its epochs; the phase only resumes and ends them)."""
    raise RuntimeError("a stacked seed's phase is trained by its stacked loop, not by run_epochs")


def check_stackable(what: str, policies: Sequence[Policy], runs: Sequence[RunOptions]) -> None:
    """Refuse seeds that cannot share a step, before anything trains (alone or stacked): one policy per
    run, runs that differ in more than their seed, folder, hooks and ``meta``, repeated seeds, policies
    of different shapes. ``what``: the caller, named in the errors."""
    if len(policies) != len(runs) or not runs:
        raise ValueError(f"{what}: {len(policies)} policies for {len(runs)} runs")
    shared = {(r.epochs, str(r.device), r.precision, r.resume, r.env_backend, r.checkpoint_every, r.cuda_graph,
               r.graph_scan_pad) for r in runs}
    if len(shared) > 1:
        raise ValueError(f"{what}: the runs differ in epochs, device, precision, resume, env_backend, "
                         "checkpoint_every, cuda_graph or graph_scan_pad; only their seed, folder, hooks and meta may differ")
    if len({r.seed for r in runs}) != len(runs):
        raise ValueError(f"{what}: repeated seeds {[r.seed for r in runs]}")
    first = policies[0]
    for p in policies[1:]:
        if (type(p), p.num_entities, p.num_relations, p.config, p.max_path_length) != \
                (type(first), first.num_entities, first.num_relations, first.config, first.max_path_length):
            raise ValueError(f"{what}: the policies differ in shape (dataset, model params or path length)")
