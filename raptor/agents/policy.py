"""The policy network (paper, Methodology, "Policy Network"), with a fast decomposed action scorer.

Embeddings:

* entity ``Emb_E(e)`` in ``R^{d_e}`` (row ``E`` is padding);
* relation ``r(r, dt) = [Emb_R(r); tau(dt)]`` in ``R^{d_r}``, the static part has ``d_r - d_t`` dims
  and ``tau(dt) = cos(w dt + b)`` (``w, b`` learnable, ``d_t`` dims, ``dt = t_q - t``);
* action ``a(e', r', t') = [Emb_E(e'); r(r', t_q - t')]`` in ``R^{d_a}``, ``d_a = d_e + d_r``;
* step ``Emb_step(k)`` in ``R^{d_step}``.

Path encoder: a single-layer LSTM (hidden size ``d_h = lstm_hidden_dim``, default ``d_a``) over ``a_init, a_0, ..., a_{k-1}`` from the
learnable initial state ``(h_init, c_init)``; ``h_0 = LSTM(a_init, h_init)`` is the same for every
query, so it is computed once per batch with batch size 1.

State vector ``u = [Emb_E(e_q); r(r_q, 0); h_k; Emb_step(k)]`` (``d_u = d_e + d_r + d_h + d_step``); actor ``s = MLP(u)`` (two layers, ReLU,
``d_u -> mlp_hidden_dim -> d_a``); logits ``z(a) = <s, a(a)>``; ``pi = softmax`` over the valid
candidates; critic ``V = MLP_crt(u)`` (``d_u -> mlp_hidden_dim -> 1``).

Decomposition. With ``s = [s_e; s_r; s_t]`` split like an action embedding,

    <s, [Emb_E(e'); Emb_R(r'); cos(w dt + b)]> = s_e . Emb_E(e') + s_r . Emb_R(r') + s_t . tau(dt)

so no ``[B, A, d_a]`` tensor is ever built:

* relation part: ``(S_r @ Emb_R^T)`` is ``[B, 2R + 2]``, gathered at ``r'``;
* time part: ``dt`` is an integer day count, so ``tau`` is tabulated once per call for
  ``dt = 0..max(dt)`` (``[T, d_t]``); on the CPU ``s_t[b] . tau_table[dt[b, a]]`` is gathered like the
  entity part (``T`` runs to about 4,000 days on ICEWS05-15, where the GEMM ``S_t @ tau_table^T``,
  ``[B, T]``, and its backward were a quarter of a training batch), elsewhere that GEMM, gathered at ``dt``;
* entity part: a compiled gather-dot kernel (numba) computes ``s_e[b] . Emb_E[e'[b, a]]`` directly
  and its backward (``dS_e`` and the scatter-add into ``dEmb_E``) without materialising the gathered
  rows (torch's gather + bmm and, above all, the embedding backward were 50x slower on CPU).

:meth:`Policy.candidate_logits_naive` is the literal form (concatenate, then dot); the tests check
both agree.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from raptor.config import ModelConfig
from raptor.constants import entity_vocab_size, pad_entity, relation_vocab_size


# ------------------------------------------------------------------------------------------------
# Entity gather-dot kernel
# ------------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, fastmath=True)
def _gather_dot_fwd(s, table, idx, out):  # pragma: no cover - compiled
    B, A = idx.shape
    d = s.shape[1]
    for b in range(B):
        for a in range(A):
            e = idx[b, a]
            acc = s[b, 0] * 0
            for j in range(d):
                acc += s[b, j] * table[e, j]
            out[b, a] = acc


@numba.njit(cache=True, nogil=True, fastmath=True)
def _gather_dot_bwd(g, s, table, idx, ds, dtable):  # pragma: no cover - compiled
    B, A = idx.shape
    d = s.shape[1]
    acc = np.zeros(d, dtype=ds.dtype)
    for b in range(B):
        acc[:] = 0
        for a in range(A):
            w = g[b, a]
            if w == 0:
                continue
            e = idx[b, a]
            for j in range(d):
                acc[j] += w * table[e, j]
                dtable[e, j] += w * s[b, j]
        for j in range(d):
            ds[b, j] = acc[j]


def _accumulate_into_leaf(table: torch.Tensor) -> bool:
    """Whether a backward may add its gradient straight into ``table.grad`` (a CPU float leaf that
    requires grad): this skips the dense ``[N, d]`` zero-filled gradient that autograd would
    otherwise allocate and add for every use of an embedding table (6 per batch, the largest
    allocation of a training step)."""
    return table.is_leaf and table.requires_grad and table.device.type == "cpu"


def _leaf_grad(table: torch.Tensor) -> torch.Tensor:
    if table.grad is None:
        table.grad = torch.zeros_like(table)
    return table.grad


class _GatherDot(torch.autograd.Function):
    """``out[b, a] = s[b] . table[idx[b, a]]`` on CPU, with a sparse backward."""

    @staticmethod
    def forward(ctx, s, table, idx):
        s_ = s.detach().contiguous()
        t_ = table.detach().contiguous()
        i_ = idx.contiguous()
        out = torch.empty(i_.shape, dtype=s_.dtype)
        _gather_dot_fwd(s_.numpy(), t_.numpy(), i_.numpy(), out.numpy())
        ctx.save_for_backward(s_, t_, i_)
        ctx.table = table
        return out

    @staticmethod
    def backward(ctx, g):
        s_, t_, i_ = ctx.saved_tensors
        table = ctx.table
        g = g.contiguous().to(s_.dtype)
        ds = torch.empty_like(s_)
        direct = ctx.needs_input_grad[1] and _accumulate_into_leaf(table) and table.dtype == s_.dtype
        if direct:
            dt = _leaf_grad(table)
        else:
            dt = torch.zeros_like(t_)
        _gather_dot_bwd(g.numpy(), s_.numpy(), t_.numpy(), i_.numpy(), ds.numpy(), dt.numpy())
        if direct or not ctx.needs_input_grad[1]:
            return ds, None, None
        return ds, dt.to(table.dtype), None


class _Lookup(torch.autograd.Function):
    """``table[idx]`` (an embedding lookup) whose backward adds into ``table.grad`` directly."""

    @staticmethod
    def forward(ctx, table, idx):
        ctx.save_for_backward(idx)
        ctx.table = table
        return table.detach().index_select(0, idx.reshape(-1)).reshape(*idx.shape, table.shape[1])

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        table = ctx.table
        g = g.reshape(-1, table.shape[1]).to(table.dtype)
        if _accumulate_into_leaf(table):
            _leaf_grad(table).index_add_(0, idx.reshape(-1), g)
            return None, None
        return torch.zeros_like(table).index_add_(0, idx.reshape(-1), g), None


def lookup(table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``table[idx]``, shape ``idx.shape + (d,)``; same values and gradients as ``F.embedding``."""
    if table.device.type != "cpu" or not torch.is_grad_enabled() or not table.requires_grad:
        return F.embedding(idx, table)
    return _Lookup.apply(table, idx)


def gather_dot(s: torch.Tensor, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``[B, A]`` scores ``s[b] . table[idx[b, a]]`` (``s`` ``[B, d]``, ``table`` ``[N, d]``)."""
    if s.device.type != "cpu" or table.device.type != "cpu":
        return torch.bmm(F.embedding(idx, table), s.unsqueeze(-1)).squeeze(-1)
    dtype = table.dtype if table.dtype in (torch.float32, torch.float64) else torch.float32
    return _GatherDot.apply(s.to(dtype), table, idx)


@numba.njit(cache=True, nogil=True, fastmath=True, inline="always")
def _dot(x, y):  # pragma: no cover - compiled
    acc = x[0] * 0
    for j in range(x.shape[0]):
        acc += x[j] * y[j]
    return acc


@numba.njit(cache=True, nogil=True, fastmath=True, inline="always")
def _axpy(w, x, y):  # pragma: no cover - compiled
    for j in range(x.shape[0]):
        y[j] += w * x[j]


# The kernels work on 1-D row views (``s[b]``, ``table[e]``): with 2-D indexing inside the inner
# loops numba did not vectorise them (5x slower).
@numba.njit(cache=True, nogil=True, fastmath=True)
def _action_scores_fwd(s, ent_t, g_rel, s_t, tau, ent, rel, dt, mask, out):  # pragma: no cover
    """``out[b, a] = s[b] . E[ent] + G_rel[b, rel] + s_t[b] . tau[dt]`` (``-inf`` off the mask)."""
    B, A = ent.shape
    for b in range(B):
        sb = s[b]
        tb = s_t[b]
        for a in range(A):
            if not mask[b, a]:
                out[b, a] = -np.inf
                continue
            out[b, a] = _dot(sb, ent_t[ent[b, a]]) + g_rel[b, rel[b, a]] + _dot(tb, tau[dt[b, a]])


@numba.njit(cache=True, nogil=True, fastmath=True)
def _action_scores_bwd_s(g, ent_t, tau, ent, rel, dt, mask, ds, dg_rel, ds_t):  # pragma: no cover
    """``ds[b] = sum_a g[b, a] E[ent[b, a]]``, ``ds_t[b] = sum_a g[b, a] tau[dt[b, a]]``,
    ``dG_rel[b, rel] += g``."""
    B, A = ent.shape
    acc = np.zeros(ds.shape[1], dtype=ds.dtype)  # local accumulators: no aliasing with the tables
    acc_t = np.zeros(ds_t.shape[1], dtype=ds_t.dtype)
    for b in range(B):
        acc[:] = 0
        acc_t[:] = 0
        for a in range(A):
            w = g[b, a]
            if not mask[b, a] or w == 0:
                continue
            _axpy(w, ent_t[ent[b, a]], acc)
            _axpy(w, tau[dt[b, a]], acc_t)
            dg_rel[b, rel[b, a]] += w
        ds[b, :] = acc
        ds_t[b, :] = acc_t


@numba.njit(cache=True, nogil=True, fastmath=True)
def _action_scores_bwd_table(g, s, s_t, ent, dt, mask, d_ent, d_tau):  # pragma: no cover
    """Scatter-add ``g[b, a] s[b]`` into ``dE[ent[b, a]]`` and ``g[b, a] s_t[b]`` into ``dtau[dt[b, a]]``."""
    B, A = ent.shape
    for b in range(B):
        sb = s[b]
        tb = s_t[b]
        for a in range(A):
            w = g[b, a]
            if not mask[b, a] or w == 0:
                continue
            _axpy(w, sb, d_ent[ent[b, a]])
            _axpy(w, tb, d_tau[dt[b, a]])


_POOL = None
_POOL_PID = None


@numba.njit(cache=True, nogil=True)
def _sum_table_rows(t0, t1, t2, i0, i1, i2, bias, out):  # pragma: no cover - compiled
    """``out[r] = ((t0[i0[r]] + t1[i1[r]]) + t2[i2[r]]) + bias``: beam search's LSTM input gates in one
    pass over memory (three gathers and three adds in torch were five reads and five writes per row).
    No fastmath: the sums keep torch's order, so the gates are bit-identical to it."""
    n, d = out.shape
    for r in range(n):
        a, b, c = t0[i0[r]], t1[i1[r]], t2[i2[r]]
        o = out[r]
        for j in range(d):
            o[j] = a[j] + b[j] + c[j] + bias[j]


def _pool():
    """Two worker threads for the (GIL-free) scoring kernels when torch runs with >= 2 threads.

    Re-created in a forked child (the parent's worker threads do not exist there)."""
    global _POOL, _POOL_PID
    import os

    if _POOL is None or _POOL_PID != os.getpid():
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="raptor-score")
        _POOL_PID = os.getpid()
    return _POOL


def _parallel(work: int) -> bool:
    return torch.get_num_threads() >= 2 and work >= 16384


class _ActionScores(torch.autograd.Function):
    """``z[b, a] = s_e[b] . E[ent] + G_rel[b, rel] + s_t[b] . tau[dt]`` (``-inf`` off the mask), fused.

    ``G_rel = S_r Rel^T`` (``[B, 2R+2]``, about 500 columns) is a small GEMM done by torch (its
    backward too); the kernel gathers it and does the entity and time dot products, whose backward
    scatter-adds into ``E.grad`` (when ``E`` is a leaf) and into ``dtau``. The time part is a
    gather-dot, not the GEMM ``S_t tau^T`` (``[B, T]``), because ``T`` is the batch's largest ``dt``
    + 1: about 3,200 days in ICEWS05-15's training split, where that GEMM and its backward made a
    training batch a third slower (``benchmarks/results/agent_time_scores_ICEWS05-15.json``).
    """

    @staticmethod
    def forward(ctx, s_e, ent_t, g_rel, s_t, tau, index):
        """``index``: the tuple ``(ent, rel, dt, mask)`` of ``[B, A]`` candidate tensors (integer and
        bool: no gradient); ``tau`` ``[T, d_t]`` with ``T > max(dt)``."""
        ent, rel, dt, mask = index
        dtype = ent_t.dtype
        s_ = s_e.detach().to(dtype).contiguous()
        st = s_t.detach().to(dtype).contiguous()
        et = ent_t.detach().contiguous()
        gr = g_rel.detach().to(dtype).contiguous()
        ta = tau.detach().to(dtype).contiguous()
        idx = [x.contiguous() for x in (ent, rel, dt, mask)]
        out = torch.empty(ent.shape, dtype=dtype)
        arrs = (s_.numpy(), et.numpy(), gr.numpy(), st.numpy(), ta.numpy(), *(x.numpy() for x in idx), out.numpy())
        B = ent.shape[0]
        if _parallel(ent.numel()) and B >= 2:
            h = B // 2
            tables = (1, 4)  # E and tau: whole in both halves
            halves = [tuple(x if i in tables else x[lo:hi] for i, x in enumerate(arrs)) for lo, hi in ((0, h), (h, B))]
            for f in [_pool().submit(_action_scores_fwd, *args) for args in halves]:
                f.result()
        else:
            _action_scores_fwd(*arrs)
        ctx.save_for_backward(s_, st, et, ta, *idx)
        ctx.table = ent_t
        ctx.meta = (g_rel.shape, g_rel.dtype, s_e.dtype, s_t.dtype, tau.dtype)
        return out

    @staticmethod
    def backward(ctx, g):
        s_, st, et, ta, ent, rel, dt, mask = ctx.saved_tensors
        shape_r, dtype_r, dtype_s, dtype_st, dtype_tau = ctx.meta
        table = ctx.table
        g = g.contiguous().to(s_.dtype)
        ds = torch.empty_like(s_)
        dst = torch.empty_like(st)
        dgr = torch.zeros(shape_r, dtype=s_.dtype)
        dta = torch.zeros_like(ta)
        direct = ctx.needs_input_grad[1] and _accumulate_into_leaf(table) and table.dtype == s_.dtype
        de = _leaf_grad(table) if direct else torch.zeros_like(et)
        n = (ent.numpy(), rel.numpy(), dt.numpy(), mask.numpy())
        args_s = (g.numpy(), et.numpy(), ta.numpy(), *n, ds.numpy(), dgr.numpy(), dst.numpy())
        args_t = (g.numpy(), s_.numpy(), st.numpy(), n[0], n[2], n[3], de.numpy(), dta.numpy())
        if _parallel(ent.numel()):
            # ds / dG / ds_t and the two table gradients touch disjoint memory: one thread each
            jobs = [_pool().submit(_action_scores_bwd_s, *args_s), _pool().submit(_action_scores_bwd_table, *args_t)]
            for f in jobs:
                f.result()
        else:
            _action_scores_bwd_s(*args_s)
            _action_scores_bwd_table(*args_t)
        d_table = None if (direct or not ctx.needs_input_grad[1]) else de.to(table.dtype)
        d_tau = dta.to(dtype_tau) if ctx.needs_input_grad[4] else None
        return ds.to(dtype_s), d_table, dgr.to(dtype_r), dst.to(dtype_st), d_tau, None


# ------------------------------------------------------------------------------------------------
# Policy
# ------------------------------------------------------------------------------------------------


def _tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh``; without autograd as ``2 sigmoid(2x) - 1`` (same function, but torch's CPU sigmoid
    kernel was ~4x faster than its tanh kernel on the large beam-search tensors). With autograd the
    plain ``tanh`` is cheaper (one fused backward)."""
    if x.requires_grad:
        return torch.tanh(x)
    return 2.0 * torch.sigmoid(2.0 * x) - 1.0


class BlockLinear(nn.Module):
    """``nn.Linear`` over ``u = [q; h; k]`` whose weight is stored as three column blocks.

    ``forward(u)`` is the ordinary linear layer (``W = [W_q W_h W_k]``); keeping the blocks as
    separate parameters lets :meth:`Policy.precompute_query` use them without slicing a weight
    (whose backward allocated and zero-filled a full-size gradient per slice).
    """

    def __init__(self, in_blocks: tuple[int, int, int], out_features: int):
        super().__init__()
        self.in_blocks = in_blocks
        self.in_features = sum(in_blocks)
        self.out_features = out_features
        self.weight_q = nn.Parameter(torch.empty(out_features, in_blocks[0]))
        self.weight_h = nn.Parameter(torch.empty(out_features, in_blocks[1]))
        self.weight_k = nn.Parameter(torch.empty(out_features, in_blocks[2]))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)  # as nn.Linear's default init over the full fan-in
        for p in (self.weight_q, self.weight_h, self.weight_k, self.bias):
            nn.init.uniform_(p, -bound, bound)

    @property
    def weight(self) -> torch.Tensor:
        return torch.cat([self.weight_q, self.weight_h, self.weight_k], dim=1)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return F.linear(u, self.weight, self.bias)


def init_embedding(weight: torch.Tensor, how: str) -> torch.Tensor:
    """``ModelConfig.embedding_init`` of one embedding table: "xavier" (Xavier-uniform, bound
    ``sqrt(6 / (rows + cols))``) or "normal" (N(0, 1), ``nn.Embedding``'s default, TITer's)."""
    if how == "xavier":
        return nn.init.xavier_uniform_(weight)
    if how == "normal":
        return nn.init.normal_(weight, 0.0, 1.0)
    raise ValueError(f"unknown embedding_init {how!r} (xavier | normal)")


class Policy(nn.Module):
    """Actor and critic of the paper. All index inputs are int64 tensors."""

    def __init__(self, num_entities: int, num_relations: int, config: ModelConfig = ModelConfig(),
                 max_path_length: int = 3):
        super().__init__()
        self.num_entities = num_entities
        self.num_relations = num_relations
        self.config = config
        de, dr, dt = config.entity_dim, config.relation_dim, config.time_dim
        self.d_entity, self.d_time, self.d_static = de, dt, dr - dt
        self.d_action = de + dr
        self.max_path_length = max_path_length

        self.entity_emb = nn.Embedding(entity_vocab_size(num_entities), de)
        self.relation_emb = nn.Embedding(relation_vocab_size(num_relations), self.d_static)
        # Time encoding initialised as in TiTer: frequencies 1 / 10^linspace(0, 9), phase 0.
        self.time_w = nn.Parameter(torch.from_numpy(1.0 / 10 ** np.linspace(0, 9, dt)).float())
        self.time_b = nn.Parameter(torch.zeros(dt))
        self.step_emb = nn.Embedding(max_path_length, config.step_dim)
        da = self.d_action
        dh = self.d_path = config.lstm_hidden_dim or da
        self.d_state_input = de + dr + dh + config.step_dim
        self.a_init = nn.Parameter(torch.empty(da))
        self.h_init = nn.Parameter(torch.zeros(dh))
        self.c_init = nn.Parameter(torch.zeros(dh))
        # LSTM cell (gate order i, f, g, o like torch.nn.LSTMCell, one bias) written with F.linear so
        # that autocast applies to it.
        self.lstm_weight_ih = nn.Parameter(torch.empty(4 * dh, da))
        self.lstm_weight_hh = nn.Parameter(torch.empty(4 * dh, dh))
        self.lstm_bias = nn.Parameter(torch.empty(4 * dh))
        H = config.mlp_hidden_dim
        blocks = (de + dr, dh, config.step_dim)  # u = [q; h_k; Emb_step(k)]
        self.actor_mlp = nn.Sequential(BlockLinear(blocks, H), nn.ReLU(), nn.Linear(H, da))
        self.critic_mlp = nn.Sequential(BlockLinear(blocks, H), nn.ReLU(), nn.Linear(H, 1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_embedding(self.entity_emb.weight, self.config.embedding_init)
        init_embedding(self.relation_emb.weight, self.config.embedding_init)
        nn.init.xavier_uniform_(self.step_emb.weight)
        nn.init.normal_(self.a_init, std=1.0 / math.sqrt(self.d_action))
        bound = 1.0 / math.sqrt(self.d_path)  # torch.nn.LSTM's init: 1 / sqrt(hidden size)
        for p in (self.lstm_weight_ih, self.lstm_weight_hh, self.lstm_bias):
            nn.init.uniform_(p, -bound, bound)
        with torch.no_grad():
            self.entity_emb.weight[pad_entity(self.num_entities)].zero_()

    # -------------------------------------------------------------- embeddings

    def time_encoding(self, dt: torch.Tensor) -> torch.Tensor:
        """``tau(dt) = cos(w dt + b)``, shape ``dt.shape + (d_t,)``."""
        return torch.cos(dt.to(self.time_w.dtype).unsqueeze(-1) * self.time_w + self.time_b)

    def relation_embedding(self, relation: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """``r(r, dt) = [Emb_R(r); tau(dt)]``."""
        return torch.cat([lookup(self.relation_emb.weight, relation), self.time_encoding(dt)], dim=-1)

    def action_embedding(self, entity: torch.Tensor, relation: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """``a = [Emb_E(e'); r(r', dt)]`` (Eq. 14), shape ``entity.shape + (d_a,)``."""
        return torch.cat([lookup(self.entity_emb.weight, entity), self.relation_embedding(relation, dt)], dim=-1)

    # -------------------------------------------------------------- path encoder

    def lstm_cell(self, x: torch.Tensor, hc: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """One LSTM step, ``x [B, d_a]``, ``h, c [B, d_h]`` -> ``(h', c')`` float32 (``torch.nn.LSTMCell``'s
        gate order ``i, f, g, o``). Without autograd (beam search) :meth:`_lstm_step_inference`."""
        h, c = hc
        if not torch.is_grad_enabled():
            w_ih = self.lstm_weight_ih * self._gate_scale()
            return self._lstm_step_inference(
                x.shape[0], lambda rows, b: torch.mm(x[rows], w_ih.t()).float().add_(b), h, c)
        if h.dim() == 2 and h.shape[0] > 1 and h.stride(0) == 0:
            h = h[:1]  # every row has the same h (h_0 expanded): W_hh h + b is computed for one row
        gates = F.linear(x, self.lstm_weight_ih) + F.linear(h.to(x.dtype), self.lstm_weight_hh, self.lstm_bias)
        # gate nonlinearities in float32 (bfloat16 elementwise ops are slow on CPU)
        i, f, g, o = gates.float().chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * _tanh(g)
        h = torch.sigmoid(o) * _tanh(c)
        return h, c

    #: Rows per block of :meth:`_lstm_step_inference`: its float32 gates (``[block, 4 d_a]``, 4 MB at
    #: ``d_a = 256``) stay in cache between the elementwise passes instead of streaming through memory.
    INFERENCE_BLOCK_ROWS = 1024

    def _gate_scale(self) -> torch.Tensor:
        """``[4 d_h, 1]``: 2 for the ``g`` gate's rows, 1 elsewhere: with them doubled,
        ``tanh(g) = 2 sigmoid(2 g) - 1`` lets one sigmoid cover the four gates."""
        d = self.lstm_weight_ih.shape[0] // 4
        scale = torch.ones(4 * d, 1, dtype=self.lstm_weight_ih.dtype, device=self.lstm_weight_ih.device)
        scale[2 * d:3 * d] = 2.0
        return scale

    def _lstm_step_inference(self, n: int, input_gates: Callable[[slice], torch.Tensor], h: torch.Tensor,
                             c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`lstm_cell` without autograd, for beam search, whose 12,800-row steps it dominated.

        ``input_gates(rows, b)`` gives ``W_ih x + b`` of a slice of the ``n`` rows with the ``g`` rows
        doubled (:meth:`_gate_scale`) as a fresh float32 block: a GEMM (:meth:`lstm_cell`) or a sum of
        table rows (:meth:`advance_path` with :meth:`path_input_tables`). Per block of rows, in float32: the bias
        (with ``W_hh h`` once when ``h`` is one shared row) and ``W_hh h`` are added in place, one
        sigmoid covers the four gates, the cell update writes into the outputs. Same function as the
        autograd path up to rounding (tested)."""
        shared = h.dim() == 2 and h.shape[0] > 1 and h.stride(0) == 0
        if shared or h.shape[0] == 1:
            h, shared = h[:1], n > 1 or shared
        d = self.lstm_weight_hh.shape[1]
        scale = self._gate_scale()
        w_hh, b = self.lstm_weight_hh * scale, self.lstm_bias * scale[:, 0]
        if shared:
            b = F.linear(h, w_hh, b).float()  # [1, 4d]: W_hh h + b of the one shared row
        h_out = torch.empty(n, d, device=b.device)
        c_out = torch.empty(n, d, device=b.device)
        for lo in range(0, n, self.INFERENCE_BLOCK_ROWS):
            rows = slice(lo, min(n, lo + self.INFERENCE_BLOCK_ROWS))
            gates = input_gates(rows, b)  # a fresh float32 block
            if not shared:
                gates.add_(F.linear(h[rows], w_hh))
            i, f, g2, o = gates.sigmoid_().chunk(4, dim=-1)  # g2 = sigmoid(2 g)
            cb, hb = c_out[rows], h_out[rows]
            torch.mul(f, c[rows] if c.shape[0] == n else c, out=cb)
            cb.addcmul_(i, g2, value=2.0).sub_(i)  # c' = f c + i tanh(g)
            torch.mul(cb, 2.0, out=hb).sigmoid_().mul_(2.0).sub_(1.0).mul_(o)  # h' = o tanh(c')
        return h_out, c_out

    def initial_path_state(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h_0, c_0) = LSTM(a_init, (h_init, c_init))``, expanded to ``[B, d_h]``."""
        h, c = self.lstm_cell(self.a_init[None], (self.h_init[None], self.c_init[None]))
        return h.expand(batch_size, -1), c.expand(batch_size, -1)

    def path_input_tables(self, max_dt: int) -> dict[str, torch.Tensor]:
        """For inference: ``W_ih a`` of an action ``a = [Emb_E(e'); Emb_R(r'); tau(dt)]`` is the sum of
        one row of each of three tables, ``entity [E+1, 4 d_h]``, ``relation [2R+2, 4 d_h]`` and
        ``time [max_dt + 1, 4 d_h]`` (``dt`` is a whole number of time steps), ``g`` rows doubled
        (:meth:`_gate_scale`). Computed in float32 (no autocast) once per evaluation: beam search then
        gathers rows instead of running its largest GEMM at every step. Stale as soon as the weights
        change."""
        de, ds = self.d_entity, self.d_static
        with torch.no_grad(), torch.autocast(self.lstm_weight_ih.device.type, enabled=False):
            w = self.lstm_weight_ih * self._gate_scale()
            times = torch.arange(max_dt + 1, device=w.device)
            return {"entity": self.entity_emb.weight @ w[:, :de].t(),
                    "relation": self.relation_emb.weight @ w[:, de:de + ds].t(),
                    "time": self.time_encoding(times) @ w[:, de + ds:].t()}

    def advance_path(self, hc, entity, relation, dt, tables: Optional[dict[str, torch.Tensor]] = None):
        """Feed the taken actions (``[B]`` each) to the LSTM: ``h_{k+1} = LSTM(a_k, h_k)``. ``tables``
        (:meth:`path_input_tables`, inference only) replaces the input GEMM by row look-ups."""
        if tables is None or torch.is_grad_enabled():
            return self.lstm_cell(self.action_embedding(entity, relation, dt), hc)
        te, tr, tt = tables["entity"], tables["relation"], tables["time"]

        if te.device.type == "cpu" and te.dtype == torch.float32:
            idx = [x.contiguous().numpy() for x in (entity, relation, dt)]
            tables_np = [t.contiguous().numpy() for t in (te, tr, tt)]

            def input_gates(rows: slice, b: torch.Tensor) -> torch.Tensor:
                out = torch.empty(rows.stop - rows.start, te.shape[1])
                _sum_table_rows(*tables_np, *(x[rows] for x in idx),
                                b.detach().float().reshape(-1).contiguous().numpy(), out.numpy())
                return out
        else:
            def input_gates(rows: slice, b: torch.Tensor) -> torch.Tensor:
                return te[entity[rows]].add_(tr[relation[rows]]).add_(tt[dt[rows]]).add_(b)

        return self._lstm_step_inference(entity.shape[0], input_gates, *hc)

    # -------------------------------------------------------------- heads

    def query_embedding(self, query_entity: torch.Tensor, query_relation: torch.Tensor) -> torch.Tensor:
        """``[Emb_E(e_q); r(r_q, 0)]``, ``[B, d_e + d_r]`` (the same at every step: compute once)."""
        return torch.cat([
            lookup(self.entity_emb.weight, query_entity),
            self.relation_embedding(query_relation, torch.zeros_like(query_relation)),
        ], dim=-1)

    def state_input(self, query: torch.Tensor, h: torch.Tensor, step: int) -> torch.Tensor:
        """``u = [Emb_E(e_q); r(r_q, 0); h_k; Emb_step(k)]``, ``[B, d_u]``; ``query`` from
        :meth:`query_embedding`."""
        B = query.shape[0]
        dtype = query.dtype
        if torch.is_autocast_enabled(query.device.type):
            # build u once in the autocast dtype: the actor and critic layers then skip their casts
            dtype = torch.get_autocast_dtype(query.device.type)
        k = self.step_emb.weight[step].expand(B, -1)
        return torch.cat([query.to(dtype), h.to(dtype), k.to(dtype)], dim=-1)

    def actor(self, u: torch.Tensor) -> torch.Tensor:
        """State vector ``s = MLP(u)``, ``[B, d_a]``."""
        return self.actor_mlp(u)

    def _critic_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the critic reads of a block of ``u``: detached (``model.critic_detach``) or ``x`` itself."""
        return x.detach() if self.config.critic_detach else x

    def critic(self, u: torch.Tensor) -> torch.Tensor:
        """``V(u)``, ``[B]``."""
        return self.critic_mlp(u).squeeze(-1)

    # -------------------------------------------------------------- action scoring

    def candidate_logits(self, s: torch.Tensor, entity: torch.Tensor, relation: torch.Tensor,
                         dt: torch.Tensor, mask: torch.Tensor | None = None,
                         time_rows: Optional[int] = None) -> torch.Tensor:
        """Logits ``<s, a>`` of ``[B, A]`` candidates, decomposed (see the module docstring).

        Float32 (or float64) ``[B, A]``; entries where ``mask`` is false are ``-inf``. ``time_rows``:
        a bound on ``dt`` (``dt < time_rows``) known without reading ``dt`` (the device environment's),
        so that a GPU step need not wait for ``dt.max()`` (on the CPU ``dt`` is read regardless).
        """
        if time_rows is not None and s.device.type != "cpu":
            n_dt = time_rows
        else:  # on the CPU reading dt costs nothing, and the table's size then does not depend on the caller
            n_dt = int(dt.max()) + 1 if dt.numel() else 1
        with torch.autocast(device_type=s.device.type, enabled=False):
            table = self.time_encoding(torch.arange(n_dt, device=dt.device))
        E, Rl = self.entity_emb.weight, self.relation_emb.weight
        de, ds = self.d_entity, self.d_static
        s_e, s_r, s_t = s[:, :de], s[:, de:de + ds], s[:, de + ds:]
        if s.device.type == "cpu" and E.dtype in (torch.float32, torch.float64):
            if mask is None:
                mask = torch.ones(entity.shape, dtype=torch.bool)
            g_rel = s_r @ Rl.to(s_r.dtype).t()  # [B, 2R+2]
            return _ActionScores.apply(s_e, E, g_rel, s_t, table, (entity, relation, dt, mask))
        z = gather_dot(s_e, E, entity)
        z = z + (s_r @ Rl.to(s_r.dtype).t()).float().gather(1, relation)
        z = z + (s_t @ table.to(s_t.dtype).t()).float().gather(1, dt)
        if mask is not None:
            z = z.masked_fill(~mask, float("-inf"))
        return z

    def candidate_logits_naive(self, s, entity, relation, dt, mask=None) -> torch.Tensor:
        """The literal ``<s, [Emb_E(e'); r(r', dt)]>`` with plain torch ops (materialises
        ``[B, A, d_a]``; tests only)."""
        a = torch.cat([self.entity_emb(entity), self.relation_emb(relation), self.time_encoding(dt)], dim=-1)
        z = (a * s.unsqueeze(1)).sum(-1)
        if mask is not None:
            z = z.masked_fill(~mask, float("-inf"))
        return z

    # -------------------------------------------------------------- fast heads

    def precompute_query(self, query: torch.Tensor) -> dict[str, torch.Tensor]:
        """Everything of the actor and critic heads that is constant over an episode's steps.

        The first layers are split by the blocks of ``u = [q; h_k; Emb_step(k)]``:
        ``W1 u + b1 = (W1_q q + b1) + W1_h h_k + W1_s Emb_step(k)``; the query part (``[B, H]``)
        and the step part (``[K, H]``) are computed once per batch of episodes, and the ``h``
        blocks are sliced (and cast, under autocast) once instead of at every step. The critic's
        parts come from a detached ``q`` (its loss trains the critic MLP only) unless
        ``model.critic_detach`` is false.
        """
        a1, c1 = self.actor_mlp[0], self.critic_mlp[0]
        dtype = query.dtype
        if torch.is_autocast_enabled(query.device.type):
            dtype = torch.get_autocast_dtype(query.device.type)
        steps = self.step_emb.weight
        d = self._critic_input
        return {
            "actor_q": F.linear(query, a1.weight_q, a1.bias),
            "critic_q": F.linear(d(query), c1.weight_q, c1.bias),
            "actor_h": a1.weight_h.to(dtype),
            "critic_h": c1.weight_h.to(dtype),
            "actor_step": F.linear(steps, a1.weight_k),
            # detached like q and h: the critic's loss must not train the step embeddings
            "critic_step": F.linear(d(steps), c1.weight_k),
        }

    def heads(self, pre: dict[str, torch.Tensor], h: torch.Tensor, step: int,
              critic: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(s, V)`` = ``(MLP(u), MLP_crt(u.detach()))`` (``MLP_crt(u)`` without ``critic_detach``) from :meth:`precompute_query` (same values
        as :meth:`actor` / :meth:`critic` on :meth:`state_input`)."""
        hh = h.to(pre["actor_h"].dtype)
        # addmm adds the constant blocks inside the GEMM (one rounding under bfloat16, like the
        # single GEMM on u)
        x = torch.addmm(pre["actor_q"] + pre["actor_step"][step], hh, pre["actor_h"].t())
        s = self.actor_mlp[2](torch.relu(x))
        v = None
        if critic:
            y = torch.addmm(pre["critic_q"] + pre["critic_step"][step], self._critic_input(hh), pre["critic_h"].t())
            v = self.critic_mlp[2](torch.relu(y)).squeeze(-1)
        return s, v

    @staticmethod
    def select_rows(pre: dict[str, torch.Tensor], rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """:meth:`precompute_query` output for a subset / repetition of its rows (beam search)."""
        out = dict(pre)
        out["actor_q"] = pre["actor_q"][rows]
        out["critic_q"] = pre["critic_q"][rows]
        return out

    def forward(self, query_entity, query_relation, h, step, candidates):
        """Logits ``[B, A]`` and values ``[B]`` of one step (critic input detached, see docs/agent.md).
        ``candidates``: the step's candidate tensors ``entity``, ``relation``, ``dt``, ``mask``
        (:class:`raptor.agents.rollout.CandidateTensors`; ``mask`` may be None)."""
        u = self.state_input(self.query_embedding(query_entity, query_relation), h, step)
        c = candidates
        z = self.candidate_logits(self.actor(u), c.entity, c.relation, c.dt, c.mask)
        return z, self.critic(self._critic_input(u))
