"""TITer-150: TITer's agent and training (Sun et al., EMNLP 2021) in our MDP, beam search and loop.

The paper compares RL-RAPTOR and Pure-RL with *TITer-150*, TITer with the same 150-action cap. This
module rebuilds TITer's model and training from its published code (github.com/JHL-HUST/TITer at
2f79a63: ``model/agent.py``, ``model/episode.py``, ``model/policyGradient.py``,
``model/baseline.py``, ``model/dirichlet.py``, ``utils/trainer.py``, ``utils/tester.py``,
``main.py``) on top of OUR environment (:class:`raptor.mdp.env.TemporalEnv`: candidate window, cap,
STOP and padding ids of :mod:`raptor.constants`; or its device copy :class:`raptor.mdp.device_env.DeviceEnv`,
the same episodes), OUR beam search (:func:`raptor.agents.beam.beam_search`,
unchanged) and OUR epoch loop (:mod:`raptor.runs.loop`), so that only the agent and its training differ
from Pure-RL. Deviations from TITer's code are listed in docs/titer.md.

Agent (``model/agent.py``), dims from ``main.py``'s defaults (:class:`TITerConfig`):

* entity ``e(x, dt) = [Emb_E(x); cos(w * c * dt + b)]`` (``DynamicEmbedding``: ``d_e - d_t`` static
  dims + ``d_t`` time dims, ``w = 1 / 10^linspace(0, 9, d_t)``, ``b = 0``), ``dt = t_q - t`` in our
  time steps and ``c = time_scale`` converting them to TITer's units (hours on its ICEWS files);
* relation ``Emb_R(r)`` (``d_r`` dims, static);
* path history: ``nn.LSTMCell`` (input ``d_r + d_e``, hidden ``d_s``) from ``h = c = 0``, fed
  ``[Emb_R(r_prev); e(e_k, t_q - t_k)]`` at the start of every step; at step 0 ``r_prev`` is STOP
  (TITer's NO_OP) and ``e_0 = e_q`` with ``dt = 0`` (TITer starts the agent at the query time);
* agent state ``u = [h_k; e(e_q, 0); Emb_R(r_q)]``; ``o = W2 relu(W1 u + b1) + b2`` (``PolicyMLP``),
  split ``o = [o_r (d_r); o_e (d_e)]``;
* candidate ``(r', x', t')``: ``rel = <o_r, Emb_R(r')>``, ``ent = <o_e, e(x', t_q - t')>``, gate
  ``a = sigmoid(w . [Emb_R(r'); e(x', t_q - t'); u] + b)`` (``score_weighted_fc``) and score
  ``z = (1 - a) rel + a ent``; ``pi = softmax(z)`` over the valid candidates.

:meth:`TITerPolicy.candidate_logits` computes ``z`` without building ``[B, A, d]`` tensors: every
term is a dot product with a row of a table, so the relation and time parts are small GEMMs gathered
at ``r'`` / ``dt`` and the entity part is the compiled gather-dot of :mod:`raptor.agents.policy` (sparse
backward into the table's gradient). :meth:`TITerPolicy.candidate_logits_naive` is TITer's literal
formula; the tests check both agree (values and gradients).

Training (``utils/trainer.py``, ``model/policyGradient.py``): REINFORCE with the terminal reward
``R = 1[e_K = o_q]``, shaped ``R (1 + p)`` with ``p`` the ``(t_q - t_K)``-th component of a draw of
the query relation's Dirichlet distribution (:mod:`raptor.agents.titer.dirichlet`,
:func:`~raptor.agents.titer.dirichlet.fit_dirichlet`); returns ``g_k = gamma^(K-1-k) R``; advantages
``g - b`` normalised over the batch (``(x - mean) / (std + 1e-6)``), ``b`` the
:class:`ReactiveBaseline`; loss ``mean(-log pi(a_k) * adv) - beta_n * mean H(pi(.|s_k))`` with
``beta_n = beta_0 zeta^n`` (``n`` counts batches, as TITer's trainer); Adam with weight decay and
gradient-norm clipping.

Test-time inductive mean (``utils/tester.py --IM``): for a query whose entity was never seen in
training, TITer replaces its embedding, for that query only, by ``mu Emb_E(e_q) + (1 - mu) IM(r_q)``
(``IM(r)`` = mean embedding of the training entities that were subjects of ``r``):
:func:`inductive_mean` installs it on a policy before evaluation (see its docstring).
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from raptor.runs import checkpoints
from raptor.runs.rundir import RunOptions
from raptor.config import EvalConfig, TITerConfig
from raptor.constants import entity_vocab_size, relation_vocab_size, stop_relation
from raptor.mdp.device_env import DeviceEnv, on_device
from raptor.mdp.env import State, TemporalEnv
from raptor.runs.loop import Phase, Selection, TrainResult, rl_postfix, run_epochs, write_history
from raptor.agents.policy import gather_dot, lookup
from raptor.agents.rollout import advance, as_tensor, candidate_tensors, query_context
from raptor.common.runtime import adam, autocast, epoch_seed, seeded_init
from raptor.agents.sampling import sample_step
from raptor.agents.titer.dirichlet import DirichletFit, fit_time_prior, shaped_reward

log = logging.getLogger("raptor")

#: ``meta["architecture"]`` of a saved TITer model (``checkpoints.save_model`` meta).
ARCHITECTURE = "titer"
#: Format of train_titer's checkpoints (:mod:`raptor.runs.checkpoints`); a model can be taken from one.
TITER_CHECKPOINT_FORMAT = "raptor.agents.titer.training-checkpoint/v1"


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------------
# The agent (model/agent.py)
# ------------------------------------------------------------------------------------------------


@dataclass
class InductiveMean:
    """TITer's test-time inductive mean, installed on a policy (:func:`inductive_mean`).

    For a query whose entity was not seen in training and whose relation had training subjects,
    the entity's static embedding is, for that query, ``mu Emb_E(e_q) + (1 - mu) IM(r_q)``.
    """

    unseen: torch.Tensor  # bool [E + 1]: not in any training fact
    mean: torch.Tensor  # [2R + 2, d_e - d_t]: IM(r), the mean embedding of r's training subjects
    has_mean: torch.Tensor  # bool [2R + 2]: r had training subjects (TITer: rel in RelEntCooccurrence)
    mu: float


class TITerPolicy(nn.Module):
    """TITer's agent with the policy interface of :class:`raptor.agents.policy.Policy` that
    :func:`raptor.agents.beam.beam_search` and :mod:`raptor.agents.actor_critic.rl`'s building blocks use:

    ``query_embedding -> precompute_query -> initial_path_state -> heads -> candidate_logits``, then
    ``advance_path`` after each action, ``select_rows`` to repeat query rows for beams.

    * The path state is ``(h, c)`` of TITer's LSTM *after* its step-0 input
      ``[Emb_R(STOP); e(e_q, 0)]``, which depends on the query: :meth:`precompute_query` computes
      it and :meth:`initial_path_state` hands it out (beam search calls the two back to back; pass
      the query context explicitly elsewhere).
    * ``heads`` returns no value (TITer has no critic) and a state tensor ``s = [o_r; o_e; g; d]``:
      the MLP output, the query/history part ``g`` of the gate's logit, and (only with an inductive
      mean installed) the row's embedding shift ``d``.
    * With an inductive mean, ``h`` carries ``d`` as extra columns, so that the shift follows the
      rows through beam reordering into :meth:`advance_path` (see :func:`inductive_mean`).

    All index inputs are int64 tensors; ``dt`` are non-negative integer time steps.
    """

    def __init__(self, num_entities: int, num_relations: int, config: TITerConfig = TITerConfig(),
                 max_path_length: int = 3):
        super().__init__()
        self.num_entities = num_entities
        self.num_relations = num_relations
        self.config = config
        self.max_path_length = max_path_length
        self.stop = stop_relation(num_relations)
        de, dr, dt, ds = config.entity_dim, config.relation_dim, config.time_dim, config.state_dim
        self.d_static = de - dt
        # Modules in TITer's construction order, with torch's default initialisations as TITer
        # (Embedding ~ N(0, 1), LSTMCell and Linear uniform): DynamicEmbedding, rel_embs, LSTM,
        # PolicyMLP, score_weighted_fc.
        self.entity_emb = nn.Embedding(entity_vocab_size(num_entities), self.d_static)
        self.time_w = nn.Parameter(torch.from_numpy(1 / 10 ** np.linspace(0, 9, dt)).float())
        self.time_b = nn.Parameter(torch.zeros(dt).float())
        # TITer sizes this table by num_ent (a slip; only ids < 2R + 2 are used): ours has 2R + 2 rows
        self.relation_emb = nn.Embedding(relation_vocab_size(num_relations), dr)
        self.lstm = nn.LSTMCell(input_size=de + dr, hidden_size=ds)
        self.mlp_l1 = nn.Linear(ds + de + dr, config.mlp_hidden_dim)  # u = [h; e(e_q, 0); Emb_R(r_q)]
        self.mlp_l2 = nn.Linear(config.mlp_hidden_dim, dr + de)  # o = [o_r; o_e]
        self.score_weighted_fc = nn.Linear(2 * de + 2 * dr + ds, 1)  # [Emb_R(r'); e(x', dt'); u]
        self.inductive: Optional[InductiveMean] = None
        self._pending_path_state: Optional[tuple[torch.Tensor, torch.Tensor]] = None

    # -------------------------------------------------------------- embeddings

    def time_encoding(self, dt: torch.Tensor) -> torch.Tensor:
        """``cos(w * time_scale * dt + b)``, shape ``dt.shape + (d_t,)``."""
        x = dt.to(self.time_w.dtype) * self.config.time_scale
        return torch.cos(x.unsqueeze(-1) * self.time_w + self.time_b)

    def _gate_weights(self):
        """Blocks of ``score_weighted_fc``'s weight over ``[Emb_R(r'); Emb_E(x'); tau(dt'); h; q_e; q_r]``."""
        de, dr, ds = self.config.entity_dim, self.config.relation_dim, self.config.state_dim
        w = self.score_weighted_fc.weight[0]
        sizes = (dr, self.d_static, self.config.time_dim, ds, de, dr)
        return torch.split(w, sizes)

    # -------------------------------------------------------------- query, path state, heads

    def query_embedding(self, query_entity: torch.Tensor, query_relation: torch.Tensor) -> dict[str, torch.Tensor]:
        """``e(e_q, 0)`` and ``Emb_R(r_q)`` (with the inductive-mean shift of unseen ``e_q`` when one
        is installed); a dict for :meth:`precompute_query`."""
        static = lookup(self.entity_emb.weight, query_entity)
        out = {}
        if self.inductive is not None:
            delta = self._im_shift(query_entity, query_relation, static)
            static = static + delta
            out["shift"] = delta
        zero = torch.zeros_like(query_entity)
        out["entity_emb"] = torch.cat([static, self.time_encoding(zero)], dim=-1)
        out["relation_emb"] = lookup(self.relation_emb.weight, query_relation)
        return out

    def _im_shift(self, entity: torch.Tensor, relation: torch.Tensor, static: torch.Tensor) -> torch.Tensor:
        """``(1 - mu) (IM(r_q) - Emb_E(e_q))`` where TITer shifts (unseen ``e_q``, ``r_q`` with a
        mean), else 0: ``[B, d_e - d_t]``."""
        im = self.inductive
        on = (im.unseen[entity] & im.has_mean[relation]).unsqueeze(-1)
        delta = (1.0 - im.mu) * (im.mean[relation].to(static.dtype) - static)
        return torch.where(on, delta, torch.zeros_like(delta)).detach()

    def precompute_query(self, query: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What is constant over an episode: the query blocks of the MLP's first layer and of the
        gate (``W1_q q + b1``, ``w_q . q + b``), and TITer's step-0 LSTM state
        ``LSTM([Emb_R(STOP); e(e_q, 0)], (0, 0))``, kept for :meth:`initial_path_state`."""
        cfg = self.config
        ds = cfg.state_dim
        qv = torch.cat([query["entity_emb"], query["relation_emb"]], dim=-1)  # [B, d_e + d_r]
        w1 = self.mlp_l1.weight
        _, _, _, _, wg_qe, wg_qr = self._gate_weights()
        B = qv.shape[0]
        pre = {
            "mlp_q": F.linear(qv, w1[:, ds:], self.mlp_l1.bias),
            "gate_q": qv @ torch.cat([wg_qe, wg_qr]).to(qv.dtype) + self.score_weighted_fc.bias,
        }
        stop = torch.full((B,), self.stop, dtype=torch.long, device=qv.device)
        x0 = torch.cat([lookup(self.relation_emb.weight, stop), query["entity_emb"]], dim=-1)
        zeros = torch.zeros(B, ds, dtype=x0.dtype, device=x0.device)
        h0, c0 = self.lstm(x0, (zeros, zeros))
        if "shift" in query:
            h0 = torch.cat([h0, query["shift"].to(h0.dtype)], dim=-1)
        pre["h0"], pre["c0"] = h0, c0
        self._pending_path_state = (h0, c0)
        return pre

    def initial_path_state(self, batch_size: int, query: Optional[dict[str, torch.Tensor]] = None):
        """``(h, c)`` after TITer's step-0 LSTM input, ``[B, d_s]`` each (``h`` with the inductive
        shift appended when one is installed). ``query`` is :meth:`precompute_query`'s output; without
        it, the state of the last :meth:`precompute_query` call is handed out (once), which is how
        :func:`raptor.agents.beam.search_beams` calls the two."""
        if query is not None:
            hc = (query["h0"], query["c0"])
            self._pending_path_state = None  # drop the reference (it holds the batch's autograd graph)
        else:
            if self._pending_path_state is None:
                raise RuntimeError("TITerPolicy.initial_path_state needs the query: call precompute_query "
                                   "(rollout.query_context) first, or pass its output as `query`")
            hc, self._pending_path_state = self._pending_path_state, None
        if hc[0].shape[0] != batch_size:
            raise ValueError(f"initial_path_state({batch_size}) but the query context has {hc[0].shape[0]} rows")
        return hc

    def heads(self, pre: dict[str, torch.Tensor], h: torch.Tensor, step: int,
              critic: bool = True) -> tuple[torch.Tensor, None]:
        """``(s, None)``: ``s = [o (d_r + d_e); g (1); shift]`` with ``o = PolicyMLP(u)``, ``g`` the
        gate logit's ``u`` part plus its bias (TITer has no critic: the value is ``None``). ``step``
        is not an input of TITer's agent."""
        ds = self.config.state_dim
        hs = h[:, :ds]
        w1h = self.mlp_l1.weight[:, :ds]
        _, _, _, wg_h, _, _ = self._gate_weights()
        x = torch.addmm(pre["mlp_q"], hs.to(pre["mlp_q"].dtype), w1h.t().to(pre["mlp_q"].dtype))
        o = self.mlp_l2(torch.relu(x))
        g = pre["gate_q"] + hs.to(wg_h.dtype) @ wg_h
        parts = [o, g.to(o.dtype).unsqueeze(-1)]
        if h.shape[1] > ds:  # inductive shift carried by the path state
            parts.append(h[:, ds:].to(o.dtype))
        return torch.cat(parts, dim=-1), None

    @staticmethod
    def select_rows(pre: dict[str, torch.Tensor], rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """:meth:`precompute_query` output for a subset / repetition of its rows (beam search)."""
        return {k: v[rows] for k, v in pre.items()}

    # -------------------------------------------------------------- scoring

    def candidate_logits(self, s: torch.Tensor, entity: torch.Tensor, relation: torch.Tensor,
                         dt: torch.Tensor, mask: Optional[torch.Tensor] = None,
                         time_rows: Optional[int] = None) -> torch.Tensor:
        """TITer's scores ``z = (1 - a) <o_r, Emb_R(r')> + a <o_e, e(x', dt')>`` of ``[B, A]``
        candidates, ``a = sigmoid(w . [Emb_R(r'); e(x', dt'); u] + b)``; float32 ``[B, A]``, ``-inf``
        where ``mask`` is false. ``time_rows``: a bound on ``dt`` (``dt < time_rows``) known without
        reading ``dt`` (the device environment's), so that a GPU step need not wait for ``dt.max()``
        (on the CPU ``dt`` is read regardless, as :meth:`raptor.agents.policy.Policy.candidate_logits`).

        Decomposed, without ``[B, A, d]`` tensors: ``<o_r, Emb_R(r')>`` and ``<o_e^static, Emb_E(x')>``
        are the compiled gather-dot of :mod:`raptor.agents.policy` (sparse backward; a ``[B, 2R+2]`` GEMM
        for the relations would compute 3x more dot products: ``A = 151``, ``2R + 2 = 462`` on
        ICEWS14); the time encodings are tabulated for ``dt = 0..max(dt)`` (``[T, d_t]``) and
        ``<o_e^time, tau(dt')>`` is a gather-dot from that table on the CPU (a ``[B, T]`` GEMM on a GPU); the gate's ``w_r . Emb_R(r')`` and
        ``w_e . Emb_E(x')`` are ``[2R+2]`` / ``[E+1]`` vectors gathered at ``r'`` / ``x'``.
        """
        cfg = self.config
        dr, dsx, dtm = cfg.relation_dim, self.d_static, cfg.time_dim
        s = s.float() if s.dtype not in (torch.float32, torch.float64) else s
        dtype = s.dtype
        o_r, o_es, o_et = s[:, :dr], s[:, dr:dr + dsx], s[:, dr + dsx:dr + dsx + dtm]
        g = s[:, dr + dsx + dtm]
        if time_rows is not None and s.device.type != "cpu":
            n_dt = time_rows  # a few more rows of the [T, d_t] table instead of a sync per step
        else:
            n_dt = int(dt.max()) + 1 if dt.numel() else 1
        with torch.autocast(device_type=s.device.type, enabled=False):
            tau = self.time_encoding(torch.arange(n_dt, device=dt.device)).to(dtype)  # [T, d_t]
            wg_r, wg_es, wg_et, _, _, _ = (w.to(dtype) for w in self._gate_weights())
            R = self.relation_emb.weight.to(dtype)
            E = self.entity_emb.weight
            rel_score = gather_dot(o_r, self.relation_emb.weight, relation).to(dtype)  # [B, A]
            # the time part as a gather-dot on the CPU: a [B, T] GEMM costs more than the rest of the
            # scorer where T (the largest dt) is thousands of days (ICEWS05-15)
            t_score = gather_dot(o_et, tau, dt).to(dtype) if s.device.type == "cpu" else (o_et @ tau.t()).gather(1, dt)
            ent_score = gather_dot(o_es, E, entity).to(dtype) + t_score
            gate = (R @ wg_r)[relation] + (E.to(dtype) @ wg_es)[entity] + (tau @ wg_et)[dt] + g.unsqueeze(1)
            if s.shape[1] > dr + dsx + dtm + 1:
                # inductive shift: the STOP slot of a row that has not left e_q is e_q itself
                shift = s[:, dr + dsx + dtm + 1:]
                at_stop = (relation == self.stop).to(dtype)
                ent_score = ent_score + at_stop * (o_es * shift).sum(-1, keepdim=True)
                gate = gate + at_stop * (shift @ wg_es).unsqueeze(1)
            a = torch.sigmoid(gate)
            z = (1 - a) * rel_score + a * ent_score
        if mask is not None:
            z = z.masked_fill(~mask, float("-inf"))
        return z

    def candidate_logits_naive(self, h: torch.Tensor, query_entity: torch.Tensor, query_relation: torch.Tensor,
                               entity: torch.Tensor, relation: torch.Tensor, dt: torch.Tensor,
                               mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """TITer's ``Agent.forward`` scoring, literally (tests only; materialises ``[B, A, d]``).

        ``h`` is the LSTM output ``[B, d_s]`` (without any inductive shift); padding gets ``-inf``
        (TITer: ``-1e10``, the same softmax)."""
        dr = self.config.relation_dim
        zero = torch.zeros_like(query_entity)
        query_entities = torch.cat([self.entity_emb(query_entity), self.time_encoding(zero)], -1)
        query_relations = self.relation_emb(query_relation)
        neighbors_entities = torch.cat([self.entity_emb(entity), self.time_encoding(dt)], -1)
        neighbors_relations = self.relation_emb(relation)
        agent_state = torch.cat([h, query_entities, query_relations], dim=-1)
        output = self.mlp_l2(torch.relu(self.mlp_l1(agent_state))).unsqueeze(1)
        entities_output, relation_output = output[:, :, dr:], output[:, :, :dr]
        relation_score = torch.sum(neighbors_relations * relation_output, dim=2)
        entities_score = torch.sum(neighbors_entities * entities_output, dim=2)
        actions = torch.cat([neighbors_relations, neighbors_entities], dim=-1)
        state_repeats = agent_state.unsqueeze(1).repeat(1, actions.shape[1], 1)
        a = torch.sigmoid(self.score_weighted_fc(torch.cat([actions, state_repeats], dim=-1))).squeeze(-1)
        scores = (1 - a) * relation_score + a * entities_score
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return scores

    # -------------------------------------------------------------- path encoder

    def advance_path(self, hc, entity: torch.Tensor, relation: torch.Tensor, dt: torch.Tensor):
        """TITer's ``HistoryEncoder`` step after action ``(r_k, e_{k+1})``: ``LSTM([Emb_R(r_k);
        e(e_{k+1}, t_q - t_{k+1})], (h, c))``. TITer skips the update after NO_OP only through a mask
        that compares with id ``2R + 2``, which no action has, so it always updates; so does this."""
        h, c = hc
        ds = self.config.state_dim
        hs, shift = h[:, :ds], (h[:, ds:] if h.shape[1] > ds else None)
        static = lookup(self.entity_emb.weight, entity)
        if shift is not None:
            # still at e_q (only STOPs so far): its embedding is the shifted one; the shift ends
            # with the first move (e_q is visited, the agent never comes back to it)
            stay = (relation == self.stop).unsqueeze(-1).to(static.dtype)
            shift = shift.to(static.dtype) * stay
            static = static + shift
        x = torch.cat([lookup(self.relation_emb.weight, relation), static, self.time_encoding(dt)], dim=-1)
        h1, c1 = self.lstm(x, (hs.to(x.dtype), c.to(x.dtype)))
        if shift is not None:
            h1 = torch.cat([h1, shift.to(h1.dtype)], dim=-1)
        return h1, c1


# ------------------------------------------------------------------------------------------------
# Inductive mean (utils/tester.py --IM, model/agent.py get_im_embedding / entities_embedding_shift)
# ------------------------------------------------------------------------------------------------


def relation_subjects(train_quads: np.ndarray, num_entities: int, num_relations: int) -> np.ndarray:
    """bool ``[2R, E]``: entity ``e`` was the subject of relation ``r`` in training (inverse
    relations ``r + R`` have the objects of ``r``): TITer's ``RelEntCooccurrence['subject']``."""
    q = np.asarray(train_quads, dtype=np.int64)
    out = np.zeros((2 * num_relations, num_entities), dtype=bool)
    out[q[:, 1], q[:, 0]] = True
    out[q[:, 1] + num_relations, q[:, 2]] = True
    return out


def inductive_mean_table(policy: TITerPolicy, train_quads: np.ndarray, mu: Optional[float] = None) -> InductiveMean:
    """The :class:`InductiveMean` of ``policy``'s current embeddings: ``IM(r)`` = mean static
    embedding of ``r``'s training subjects (TITer's ``get_im_embedding``), unseen = in no training
    fact (TITer's ``train_entities``). One ``[2R, E] x [E, d]`` product."""
    E, R = policy.num_entities, policy.num_relations
    subj = relation_subjects(train_quads, E, R)
    q = np.asarray(train_quads, dtype=np.int64)
    seen = np.zeros(E + 1, dtype=bool)
    seen[q[:, 0]] = True
    seen[q[:, 2]] = True
    weight = policy.entity_emb.weight.detach()
    counts = subj.sum(1)
    sums = torch.from_numpy(subj.astype(np.float64)) @ weight[:E].double().cpu()
    mean = torch.zeros(relation_vocab_size(R), weight.shape[1], dtype=weight.dtype)
    mean[:2 * R] = (sums / torch.from_numpy(np.maximum(counts, 1)).double()[:, None]).to(weight.dtype)
    has = np.zeros(relation_vocab_size(R), dtype=bool)
    has[:2 * R] = counts > 0
    dev = weight.device
    return InductiveMean(unseen=torch.from_numpy(~seen).to(dev), mean=mean.to(dev),
                         has_mean=torch.from_numpy(has).to(dev), mu=policy.config.im_mu if mu is None else mu)


@contextlib.contextmanager
def inductive_mean(policy: TITerPolicy, train_quads: np.ndarray, mu: Optional[float] = None, enabled: bool = True):
    """Evaluate ``policy`` with TITer's inductive mean (``with inductive_mean(policy, train): ...``).

    For every query ``(e_q, r_q, t_q)`` whose ``e_q`` is in no training fact and whose ``r_q`` had
    training subjects, ``e_q``'s static embedding becomes, within that query's search only,
    ``mu Emb_E(e_q) + (1 - mu) IM(r_q)`` (TITer's ``entities_embedding_shift`` before, and
    ``back_entities_embedding`` after, each test query): in the agent state, in the step-0 LSTM
    input and wherever the search reads ``e_q`` again (in our environment: its STOP actions and the
    LSTM inputs after them, as ``e_q`` is visited and never a move target). Per query, not per
    entity, because the shift depends on ``r_q``; the shift rides along in the path state so that
    beam search (unchanged) applies it. TITer's other IM step, the permanent update of an unseen
    entity's embedding toward its shifts at each new test timestamp (``update_entity_embedding``),
    is not reproduced: it depends on the order the test file is read in (docs/titer.md).
    """
    if not enabled:
        yield policy
        return
    previous = policy.inductive
    policy.inductive = inductive_mean_table(policy, train_quads, mu)
    try:
        yield policy
    finally:
        policy.inductive = previous


# ------------------------------------------------------------------------------------------------
# REINFORCE (model/policyGradient.py, model/baseline.py, utils/trainer.py)
# ------------------------------------------------------------------------------------------------


@dataclass
class ReactiveBaseline:
    """TITer's ``ReactiveBaseline``: ``b <- (1 - lambda) b + lambda mean(g)`` after every batch."""

    update_rate: float
    value: float = 0.0

    def update(self, target: float) -> None:
        self.value = (1 - self.update_rate) * self.value + self.update_rate * target


def discounted_returns(reward: torch.Tensor, K: int, gamma: float) -> torch.Tensor:
    """``g_k = gamma^(K-1-k) R`` (TITer's ``calc_cum_discounted_reward`` with the reward at the last
    step), ``[B, K]``."""
    disc = gamma ** torch.arange(K - 1, -1, -1, dtype=reward.dtype, device=reward.device)
    return reward[:, None] * disc[None, :]


#: The parts of :func:`reinforce_loss` in the order of :func:`reinforce_terms`' second tensor.
REINFORCE_PARTS = ("actor_loss", "entropy", "loss")


def reinforce_loss(log_prob: torch.Tensor, entropy: torch.Tensor, returns: torch.Tensor, baseline: float,
                   beta: float, std_eps: float = 1.0e-6) -> tuple[torch.Tensor, dict[str, float]]:
    """TITer's ``calc_reinforce_loss``: ``mean(-log pi(a_k) * A) - beta * mean H(pi(.|s_k))`` with
    ``A = ((g - b) - mean) / (std + eps)`` over all ``[B, K]`` entries (``torch.std``, unbiased).

    ``log_prob``, ``entropy``, ``returns``: ``[B, K]``. Returns the loss and its parts (one read).
    """
    loss, parts = reinforce_terms(log_prob, entropy, returns, baseline, beta, std_eps)
    return loss, dict(zip(REINFORCE_PARTS, parts.tolist()))


def reinforce_terms(log_prob: torch.Tensor, entropy: torch.Tensor, returns: torch.Tensor, baseline: float,
                    beta: float, std_eps: float = 1.0e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`reinforce_loss` without reading anything back: ``(loss, parts)`` with ``parts`` float64
    ``[3]`` in the order of :data:`REINFORCE_PARTS` (float64 holds each float32 part exactly, so a later
    read gives the numbers ``float()`` of each would)."""
    adv = returns - baseline
    adv = (adv - adv.mean()) / (adv.std() + std_eps)
    actor = (-log_prob * adv.detach()).mean()
    ent = entropy.mean()
    loss = actor - beta * ent
    parts = torch.stack([actor.detach().double(), ent.detach().double(), loss.detach().double()])
    return loss, parts


@dataclass
class TITerRollout:
    log_prob: torch.Tensor  # [B, K] log pi(a_k | s_k)
    entropy: torch.Tensor  # [B, K]
    final: State  # the host environment's State, or the device environment's DeviceState
    #: float32 ``[B]``, ``1[e_K = o_q]``: a host array (:class:`TemporalEnv`) or a tensor on the device
    #: (:class:`~raptor.mdp.device_env.DeviceEnv`), as the environment gives it (the host one is read
    #: on the host for the reward shaping, so it is not copied to the device and back)
    reward: np.ndarray | torch.Tensor


def rollout(policy: TITerPolicy, env: TemporalEnv | DeviceEnv, queries: np.ndarray,
            generator: Optional[torch.Generator] = None, device="cpu") -> TITerRollout:
    """``K`` sampled actions for a batch of ``[B, 4]`` training queries (one episode each), in the host
    environment or the device one (:func:`raptor.mdp.device_env.on_device`): the same candidates in the
    same slots, so the same episodes from the same ``generator``."""
    state = env.reset(queries)
    q = query_context(policy, state, device)
    hc = policy.initial_path_state(state.batch_size, q)
    logps, ents = [], []
    for k in range(env.K):
        cands = env.candidates(state)
        ct = candidate_tensors(state, cands, device)
        s, _ = policy.heads(q, hc[0], k, critic=False)
        z = policy.candidate_logits(s, ct.entity, ct.relation, ct.dt, ct.mask, ct.time_rows)
        choice, logp, ent = sample_step(z, ct.mask, generator)
        logps.append(logp)
        ents.append(ent)
        state, hc = advance(policy, env, state, cands, choice, hc, need_path=k < env.K - 1)
    return TITerRollout(torch.stack(logps, 1), torch.stack(ents, 1), state, env.reward(state))


def shaping_inputs(ro: TITerRollout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the reward shaping reads, on the host: float64 reward, int64 ``r_q`` and ``t_q - t_K``, ``[B]``
    each. From the device environment, one device-to-host copy of the three vectors stacked as float64
    (0/1 rewards, relation ids and time steps are exact in it)."""
    f = ro.final
    if isinstance(ro.reward, np.ndarray):
        return ro.reward.astype(np.float64), f.query_relation, f.query_time - f.time
    x = torch.stack([ro.reward.double(), f.query_relation.double(), (f.query_time - f.time).double()]).cpu().numpy()
    return x[0], x[1].astype(np.int64), x[2].astype(np.int64)


def entropy_coefficient(cfg: TITerConfig, epoch: int, batch: int, batches_per_epoch: int) -> float:
    """``beta_0 zeta^n``; ``n`` = batches trained before this one (TITer), or the epoch."""
    n = epoch * batches_per_epoch + batch if cfg.entropy_decay_per == "batch" else epoch
    return cfg.entropy_beta * cfg.entropy_decay ** n


def make_optimizer(policy: nn.Module, cfg: TITerConfig) -> torch.optim.Optimizer:
    """Adam with TITer's weight decay."""
    return adam(policy.parameters(), cfg.learning_rate, cfg.weight_decay)


@dataclass(frozen=True)
class Reinforce:
    """What TITer's REINFORCE update uses besides the batch: its params, the Dirichlet prior of the
    reward shaping (``None``: no shaping) and the reactive baseline (updated in place)."""

    cfg: TITerConfig
    prior: Optional[DirichletFit]
    baseline: ReactiveBaseline


def train_epoch(policy: TITerPolicy, optimizer: torch.optim.Optimizer, env: TemporalEnv | DeviceEnv,
                queries: np.ndarray, epoch: int, algo: Reinforce,
                run: RunOptions = RunOptions(progress=False)) -> dict[str, float]:
    """One pass over ``queries`` (shuffled by ``(run.seed, epoch)``; sampling and the reward-shaping draws
    seeded by ``(run.seed, epoch)`` too); updates ``algo.baseline``; returns the epoch means.

    ``env``: the host environment or the device one (:func:`raptor.mdp.device_env.on_device`; the same
    episodes, shaping draws and numbers). With the device one a batch reads back, besides each step's
    widths, one copy of the ``[B]`` vectors the reward shaping needs and one of the batch's numbers."""
    from raptor.common.progress import progress_bar

    cfg, prior, baseline = algo.cfg, algo.prior, algo.baseline
    seed, precision, device, progress = run.seed, run.precision, run.device, run.progress

    policy.train()
    order = np.random.default_rng(epoch_seed(seed, epoch, 0)).permutation(len(queries))
    gen = torch.Generator(device=device).manual_seed(epoch_seed(seed, epoch, 1))
    shaping_rng = np.random.default_rng(epoch_seed(seed, epoch, 2))
    bs = cfg.batch_size
    n_batches = math.ceil(len(queries) / bs)
    sums: dict[str, float] = {}
    n_total = 0
    beta0 = entropy_coefficient(cfg, epoch, 0, n_batches)
    bar = progress_bar(range(n_batches), desc=f"epoch {epoch}", enabled=progress, nested=True, mininterval=1.0)
    for i in bar:
        batch = queries[order[i * bs:(i + 1) * bs]]
        with autocast(precision, device):
            ro = rollout(policy, env, batch, gen, device)
        dev = ro.log_prob.device
        reward = as_tensor(ro.reward, dev)  # float32 [B] 0/1
        names, stats = list(REINFORCE_PARTS), []  # the batch's numbers, read back once at its end
        if prior is None:
            shaped = reward
        else:
            # TITer's draws are data-dependent (only rows with a reward draw, from a NumPy stream that must
            # stay the same on both environments): the shaping runs on the host, from one copy of the [B]
            # reward, r_q and t_q - t_K (none with the host environment, which has them there).
            r, rel, dt = shaping_inputs(ro)
            host_shaped = shaped_reward(r, prior, rel, dt, shaping_rng)
            shaped = torch.from_numpy(host_shaped).float().to(dev)
        returns = discounted_returns(shaped, env.K, cfg.gamma)
        beta = entropy_coefficient(cfg, epoch, i, n_batches)
        loss, parts = reinforce_terms(ro.log_prob, ro.entropy, returns, baseline.value, beta, cfg.reward_std_eps)
        stats.append(parts)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        if cfg.clip_gradient:  # the norm before clipping goes to the history
            names.append("grad_norm")
            stats.append(torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.clip_gradient).double()[None])
        optimizer.step()
        # float32 means as float64 (exact): the numbers float() of each would give; the unshaped 0/1
        # reward's float64 mean is k / B whoever sums it (the sum is exact)
        names += ["reward", "mean_return"] + (["shaped_reward"] if prior is None else [])
        means = [reward.mean().double(), returns.mean().double()] + ([shaped.double().mean()] if prior is None else [])
        stats.append(torch.stack(means))
        values = dict(zip(names, torch.cat(stats).tolist()))  # the batch's one device-to-host read
        if prior is not None:
            values["shaped_reward"] = float(host_shaped.mean())  # on the host already
        baseline.update(values.pop("mean_return"))  # used from the next batch on
        n = len(batch)
        n_total += n
        for key, val in values.items():
            sums[key] = sums.get(key, 0.0) + val * n
        if progress and i % 20 == 0:
            bar.set_postfix(reward=f"{sums['reward'] / n_total:.3f}")
    out = {key: val / max(n_total, 1) for key, val in sums.items()}
    out["entropy_beta"] = beta0
    out["baseline"] = baseline.value
    return out


HISTORY_FIELDS = ("epoch", "reward", "shaped_reward", "loss", "actor_loss", "entropy", "entropy_beta", "baseline",
                  "grad_norm", "val_mrr", "seconds", "val_seconds")


def _write_history(out: Path, history: list[dict[str, Any]]) -> None:
    write_history(out, history, HISTORY_FIELDS)


def train_titer(policy: TITerPolicy, env: TemporalEnv, train_queries: np.ndarray, cfg: TITerConfig = TITerConfig(),
                eval_cfg: EvalConfig = EvalConfig(), run: RunOptions = RunOptions(resume=False), *,
                time_prior: Optional[DirichletFit] = None) -> TrainResult:
    """TITer's REINFORCE training for ``run.epochs`` epochs (the variants' common budget, ``rl.epochs``) through
    :func:`raptor.runs.loop.run_epochs` (checkpoints, resume, history, hooks as :func:`raptor.agents.actor_critic.rl.train`).

    Args:
        train_queries: int ``[n, 4]`` queries in both directions (:func:`raptor.data.dataset.with_inverse_queries`).
        evaluate_fn: ``policy -> {"mrr": ...}`` on the validation split, after every
            ``eval_cfg.valid_every``-th epoch and the last; the best-MRR weights go to ``best.pt``;
            ``eval_cfg.patience > 0`` stops after that many rounds without a better MRR.
        run: as :func:`raptor.agents.actor_critic.rl.train`'s; ``run.env_backend`` picks the host or the
            device environment (:func:`raptor.mdp.device_env.on_device`), which train identically on the
            CPU (tests/test_titer.py).
        time_prior: the Dirichlet fit for reward shaping (``cfg.reward_shaping``); fitted from
            ``train_queries`` when not given (deterministic, seconds) and saved as
            ``out_dir/dirichlet.npz``.
        out_dir: ``checkpoint.pt``, ``best.pt``, ``final.pt``, ``history.json``/``.csv``; ``None``
            writes nothing.

    The ReactiveBaseline's value is kept in checkpoints; the entropy coefficient's batch counter is
    ``epoch * batches_per_epoch + batch``, so a resumed run repeats exactly the uninterrupted one.
    """
    if run.epochs is None:
        raise ValueError("train_titer needs run.epochs (the variants' common budget, rl.epochs)")
    n_epochs = run.epochs
    out = Path(run.out_dir) if run.out_dir is not None else None
    meta = dict(run.meta or {})
    meta.setdefault("architecture", ARCHITECTURE)
    meta = checkpoints.model_meta(policy, meta, run.seed)
    run = replace(run, out_dir=out, meta=meta)
    policy.to(run.device)
    optimizer = make_optimizer(policy, cfg)
    queries = np.ascontiguousarray(train_queries, dtype=np.int64)
    prior = None
    if cfg.reward_shaping:
        prior = time_prior if time_prior is not None else fit_time_prior(
            queries, env.num_entities, env.num_relations, cfg)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            prior.save(out / "dirichlet.npz")
    # candidates on the device or the host (run.env_backend: auto = the device's on CUDA), as actor-critic RL
    env = on_device(env, run.device, run.env_backend)
    selection = Selection(policy, run.evaluate_fn, eval_cfg.valid_every, eval_cfg.patience, out, meta,
                          early=(eval_cfg.valid_every_early, eval_cfg.valid_early_epochs))
    state = selection.state  # kept in checkpoints, with the baseline's value
    state["baseline"] = 0.0
    baseline = ReactiveBaseline(cfg.baseline_lambda)
    algo = Reinforce(cfg, prior, baseline)

    def run_epoch(epoch: int) -> dict[str, Any]:
        baseline.value = float(state["baseline"])  # restored on resume
        row = train_epoch(policy, optimizer, env, queries, epoch, algo, run)
        state["baseline"] = baseline.value
        return row

    phase = Phase("titer", TITER_CHECKPOINT_FORMAT, "TITer checkpoint", run_epoch, _write_history,
                  selection.after_epoch, postfix=rl_postfix, state=state, done=selection.done,
                  after_checkpoint=selection.commit)
    history = run_epochs(phase, policy, optimizer, run)
    return selection.finish(history, n_epochs)


# ------------------------------------------------------------------------------------------------
# Model files
# ------------------------------------------------------------------------------------------------


def load_titer_model(path: str | Path, device="cpu") -> tuple[TITerPolicy, dict]:
    """Rebuild a :class:`TITerPolicy` saved by ``checkpoints.save_model`` (``best.pt``/``final.pt``)
    or take it from a :func:`train_titer` checkpoint (tensors and plain data only, as every file)."""
    obj = checkpoints.load(path, (checkpoints.MODEL_FORMAT, TITER_CHECKPOINT_FORMAT), "TITer model",
                           map_location=device)
    meta = obj["meta"]
    if meta.get("architecture") != ARCHITECTURE:
        raise checkpoints.CheckpointError(f"{path}: not a TITer model (architecture "
                                          f"{meta.get('architecture', 'raptor')!r})")
    return titer_from_weights(obj["policy"], meta, device), meta


def titer_from_weights(weights: dict[str, Any], meta: dict[str, Any], device="cpu") -> TITerPolicy:
    """The :class:`TITerPolicy` with these weights, of the sizes and config its model ``meta`` records."""
    with seeded_init():  # its random init is overwritten, but must not draw from a run's seeded stream
        policy = TITerPolicy(meta["num_entities"], meta["num_relations"], TITerConfig(**meta["model"]),
                             meta["max_path_length"]).to(device)
    policy.load_state_dict(weights)
    return policy
