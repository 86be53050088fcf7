"""Several seeds of the actor-critic agent trained at once, in one process, as one batched step.

A GPU runs one seed's RL step far below its arithmetic rate: the step is a few hundred small
kernels, each waiting for its launch (issue 37). ``S`` seeds trained at once make every kernel ``S``
times wider instead of ``S`` times as many: their parameters are stacked along a leading seed axis
(:class:`StackedPolicy`), their batches stacked along the rows (seed ``s`` owns rows
``[s B, (s + 1) B)``), and one rollout in one environment, one loss and one optimizer step serve all
of them.

Each seed trains what it would train alone (:func:`raptor.agents.actor_critic.rl.train`):

* its batches: the shuffling order of epoch ``n`` from ``(seed, n)``, as alone;
* its episodes: the environment treats every row alone, and each seed's uniforms are drawn from its
  own generator, seeded as alone, in the same calls (:class:`SeedUniforms`);
* its gradient: the loss is the sum of the seeds' losses
  (:func:`raptor.agents.actor_critic.rl.grouped_actor_critic_terms`), and no parameter is shared, so
  seed ``s``'s slice gets the gradient of its own batch; gradient clipping is per seed
  (:func:`clip_per_seed`);
* its update: Adam (and its weight decay) is elementwise, so the stacked update is each seed's own.

What differs is floating-point order: a stacked product sums in another order than an unstacked one
(the tests check the same episodes and gradients equal within rounding, on CPU). The checkpoints are
each seed's own, in the format of a run trained alone (:func:`seed_optimizer_state`), so a stacked
run resumes alone and the other way round.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch
from torch import nn

from raptor.agents.actor_critic.rl import (CHECKPOINT_FORMAT, _write_history, entropy_coefficient,
                                           grouped_actor_critic_terms, make_optimizer, train)
from raptor.agents.policy import Policy, gather_dot, lookup
from raptor.agents.rollout import rollout
from raptor.common.runtime import autocast, epoch_seed
from raptor.config import EvalConfig, RLConfig
from raptor.mdp.device_env import on_device
from raptor.mdp.env import TemporalEnv
from raptor.runs import checkpoints
from raptor.runs.checkpoints import model_meta
from raptor.runs.loop import Phase, Selection, TrainResult, end_epoch, resume
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
# One epoch of S seeds
# ------------------------------------------------------------------------------------------------


def train_epoch(stack: StackedPolicy, optimizer: torch.optim.Optimizer, env: TemporalEnv, queries: np.ndarray,
                epoch: int, rl: RLConfig, runs: Sequence[RunOptions]) -> list[dict[str, float]]:
    """One pass over ``queries`` for each run's seed at once (each shuffled by ``(seed, epoch)``, as
    :func:`raptor.agents.actor_critic.rl.train_epoch` alone); returns each seed's epoch means. The
    device, precision and progress bar are the first run's (the same for all)."""
    from raptor.common.progress import progress_bar

    run, seeds = runs[0], [r.seed for r in runs]
    S, device = len(seeds), run.device
    stack.train()
    orders = [np.random.default_rng(epoch_seed(seed, epoch, 0)).permutation(len(queries)) for seed in seeds]
    gens = [torch.Generator(device=device).manual_seed(epoch_seed(seed, epoch, 1)) for seed in seeds]
    sums = torch.zeros(S, 5, dtype=torch.float64)  # the LOSS_PARTS, then grad_norm
    n_total = 0
    bs = rl.batch_size
    n_batches = math.ceil(len(queries) / bs)
    beta0 = entropy_coefficient(rl, epoch, 0, n_batches)
    bar = progress_bar(range(n_batches), desc=f"epoch {epoch}", enabled=run.progress, nested=True, mininterval=1.0)
    for i in bar:
        rows = [queries[order[i * bs:(i + 1) * bs]] for order in orders]
        n = len(rows[0])
        with autocast(run.precision, device):
            ro = rollout(stack, env, np.concatenate(rows), device=device, uniforms=SeedUniforms(gens, n, device))
        beta = beta0 if rl.entropy_decay_per == "epoch" else entropy_coefficient(rl, epoch, i, n_batches)
        loss, parts = grouped_actor_critic_terms(ro, rl.gamma, beta, S)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        norms = clip_per_seed(stack, rl.clip_gradient) if rl.clip_gradient else torch.zeros(S, device=parts.device)
        optimizer.step()
        # one device-to-host copy per batch for every seed's numbers
        sums += torch.cat([parts.double(), norms.double()[:, None]], 1).cpu() * n
        n_total += n
    means = (sums / max(n_total, 1)).tolist()
    keys = ("actor_loss", "critic_loss", "entropy", "reward") + (("grad_norm",) if rl.clip_gradient else ())
    return [{**dict(zip(keys, row)), "entropy_beta": beta0} for row in means]


# ------------------------------------------------------------------------------------------------
# The runs
# ------------------------------------------------------------------------------------------------


def train_seeds(policies: Sequence[Policy], env: TemporalEnv, train_queries: np.ndarray, rl: RLConfig = RLConfig(),
                eval_cfg: EvalConfig = EvalConfig(), runs: Sequence[RunOptions] = ()) -> list[TrainResult]:
    """:func:`raptor.agents.actor_critic.rl.train` of ``policies[s]`` with ``runs[s]`` for every ``s``,
    trained at once (the module docstring). The runs differ only in their seed, folder, hooks and
    ``meta``; each run folder ends as the run alone would leave it (checkpoints, history, ``best.pt``,
    ``final.pt``), its history rows saying how many seeds trained that epoch at once
    (``stacked_seeds``). Runs resumed at different epochs, or a single run, are trained alone."""
    from raptor.common.progress import progress_bar

    if len(policies) != len(runs) or not runs:
        raise ValueError(f"train_seeds: {len(policies)} policies for {len(runs)} runs")
    shared = {(r.epochs, str(r.device), r.precision, r.resume, r.env_backend, r.checkpoint_every) for r in runs}
    if len(shared) > 1:
        raise ValueError("train_seeds: the runs differ in epochs, device, precision, resume, env_backend or "
                         "checkpoint_every; only their seed, folder, hooks and meta may differ")
    if len({r.seed for r in runs}) != len(runs):
        raise ValueError(f"train_seeds: repeated seeds {[r.seed for r in runs]}")
    n_epochs = rl.epochs if runs[0].epochs is None else runs[0].epochs
    runs = [replace(r, epochs=n_epochs, out_dir=Path(r.out_dir) if r.out_dir is not None else None,
                    meta=model_meta(p, r.meta, r.seed)) for p, r in zip(policies, runs)]
    if len(runs) == 1 or len({_resume_epoch(r) for r in runs}) > 1:
        return [train(p, env, train_queries, rl, eval_cfg, r) for p, r in zip(policies, runs)]
    device = runs[0].device
    for policy in policies:
        policy.to(device)
    alone = [make_optimizer(p, rl) for p in policies]
    selections = [Selection(p, r.evaluate_fn, eval_cfg.valid_every, eval_cfg.patience, r.out_dir, r.meta,
                            early=(eval_cfg.valid_every_early, eval_cfg.valid_early_epochs))
                  for p, r in zip(policies, runs)]
    phases = [Phase("train", CHECKPOINT_FORMAT, "RAPTOR RL checkpoint", run_epoch=_not_alone, write_history=_write_history,
                    after_epoch=sel.after_epoch, state=sel.state, done=sel.done) for sel in selections]
    resumed = [resume(ph, p, opt, r) for ph, p, opt, r in zip(phases, policies, alone, runs)]
    starts = {start for _, start in resumed}
    histories = [h for h, _ in resumed]
    queries = np.ascontiguousarray(train_queries, dtype=np.int64)
    env = on_device(env, device, runs[0].env_backend)
    active = [s for s in range(len(runs)) if not selections[s].done()]
    stack, optimizer = _stack(policies, alone, active, rl)
    start = starts.pop()
    bar = progress_bar(range(start, n_epochs), desc=f"train {len(runs)} seeds", enabled=runs[0].progress,
                       initial=start, total=n_epochs)
    for epoch in bar:
        if not active:
            break
        t0 = time.perf_counter()
        rows = train_epoch(stack, optimizer, env, queries, epoch, rl, [runs[s] for s in active])
        seconds = time.perf_counter() - t0
        stack.unstack_into([policies[s] for s in active])
        opt_state = optimizer.state_dict()
        for j, s in enumerate(active):
            row = {"epoch": epoch, **rows[j], "seconds": seconds, "stacked_seeds": len(active)}
            end_epoch(phases[s], runs[s], row, histories[s],
                      lambda s=s, j=j: (policies[s].state_dict(), seed_optimizer_state(opt_state, j)))
        bar.set_postfix(reward=f"{np.mean([row['reward'] for row in rows]):.3f}")
        still = [s for s in active if not selections[s].done()]
        if still != active:  # early stopping ended some seeds: the others go on as a smaller stack
            for j, s in enumerate(active):
                alone[s].load_state_dict(seed_optimizer_state(opt_state, j))
            active = still
            if active:
                stack, optimizer = _stack(policies, alone, active, rl)
    bar.close()
    return [replace(sel.finish(h, n_epochs), stacked_seeds=max([row.get("stacked_seeds", 1) for row in h] or [1]))
            for sel, h in zip(selections, histories)]


def _resume_epoch(run: RunOptions, fmt: str = CHECKPOINT_FORMAT, what: str = "RAPTOR RL checkpoint") -> int:
    """The epoch ``run`` would resume at (0: none) from its checkpoint of format ``fmt`` (``what``:
    its name in errors), read without restoring anything."""
    if not run.resume or run.out_dir is None:
        return 0
    ck = checkpoints.load_latest(Path(run.out_dir) / RunDir.CHECKPOINT, fmt, what)
    return 0 if ck is None else int(ck["epoch"]) + 1


def _not_alone(epoch: int) -> dict[str, Any]:  # pragma: no cover - a stacked phase trains in train_seeds
    raise RuntimeError("a stacked seed's phase is trained by train_seeds, not by run_epochs")


def _stack(policies: Sequence[Policy], optimizers: Sequence[torch.optim.Optimizer], active: Sequence[int],
           rl: RLConfig) -> tuple[StackedPolicy, torch.optim.Optimizer]:
    """The stack of ``policies[active]`` and its optimizer, holding their optimizers' states."""
    device = next(policies[active[0]].parameters()).device
    stack = StackedPolicy([policies[s] for s in active]).to(device)
    optimizer = make_optimizer(stack, rl)
    states = [optimizers[s].state_dict() for s in active]
    if states[0]["state"]:  # resumed (or continued after early stopping): Adam's moments and step count
        optimizer.load_state_dict(stack_optimizer_states(states))
    return stack, optimizer
