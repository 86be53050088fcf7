"""The temporal-path MDP (paper, Preliminaries), batched over queries and beams.

State ``s_k = (xi, k, e_k, t_k, v_k)`` for a batch of ``B`` rows (a row is one query in training,
one beam of one query in beam search):

* ``xi = (e_q, r_q, t_q)`` the query (``query_entity``, ``query_relation``, ``query_time``);
* ``k`` the step (shared by the whole batch: every episode takes exactly ``K`` actions);
* ``e_k, t_k`` the current entity and timestamp (``entity``, ``time``), with ``e_0 = e_q`` and
  ``t_0 = 0`` (the earliest timestamp after ingest);
* ``v_k`` the visited entities, ``visited[:, :k+1]`` (``[B, K+1]``, padded with ``-1``).

Candidate actions of a state (``A_s``) are the out-edges ``(e_k, r', e', t')`` of the inverse-augmented
graph with ``t_k <= t' < t_q`` (``EnvConfig.strict_history``; ``t' <= t_q`` otherwise) whose target
``e'`` is not visited, plus ``STOP = (2R, e_k, t_k)``, which keeps the agent in place and is allowed
even though ``e_k`` is visited.

Cap vs. mask (the paper keeps "the top-150 candidate actions sorted by timestamp"): by default
(``EnvConfig.mask_before_cap = true``) the cap applies to ``A_s`` itself, i.e. *after* the
simple-path mask: the kept edges are the ``max_actions`` most recent edges of the window whose
target is not visited. With ``mask_before_cap = false`` the ``max_actions`` most recent edges of the
window are taken first and visited targets are then dropped (fewer actions may remain).

Cap vs. STOP: by default (``EnvConfig.cap_includes_stop = false``) STOP is always kept on top of the
``max_actions`` edges, so a state has at most ``max_actions + 1`` actions; with ``true`` STOP is one of
the ``max_actions`` (``max_actions - 1`` edges, TITer's layout). ``EnvConfig.edge_cap`` is the edge count.

Padded layout (:class:`Candidates`): slot 0 is STOP, slots ``1..count`` the kept edges from the most
recent to the oldest (ties in time in reverse ``(relation, neighbor)`` order), the rest padding
(entity ``E``, relation ``2R + 1``, time ``0``, ``mask`` false). The width is trimmed to the largest
count in the batch (at most ``edge_cap + 1``).

TITer's walk (``TemporalEnv(..., walk="backward")``, the TITer-150 variant with ``titer.environment:
titer``; JHL-HUST/TITer ``model/environment.py``, ``model/episode.py``): the agent starts at the query
time (``t_0 = t_q``, so NO_OP at step 0 has ``dt = 0``) and walks backwards: candidates are the edges
with ``t' < t_k`` (``t' <= t_k`` after the first hop with ``same_time``: TITer's CPU code path; its
CUDA path, which its README trains with, passes ``query_times = times`` and so is strict at every
step), with no lower bound and no visited mask (revisits allowed); at step 0 STOP is masked out
whenever an edge exists and the cap is ``max_actions`` edges (``get_padd_actions``'s ``first_step``).

Everything is vectorised: the window of every row comes from two ``searchsorted`` calls
(:meth:`TemporalGraph.window`), and one compiled loop (numba) copies the kept edges out of the CSR
slices; there is no per-row Python code.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields, replace
from typing import Literal, Optional

import numba
import numpy as np

from raptor.config import EnvConfig
from raptor.constants import pad_entity, pad_relation, stop_relation
from raptor.data.graph import TemporalGraph

#: Fill value of unused ``visited`` columns.
NO_ENTITY = -1

#: ``forward``: the paper's MDP (this module's docstring); ``backward``: TITer's walk.
Walk = Literal["forward", "backward"]
WALKS: tuple[str, ...] = ("forward", "backward")


@dataclass(frozen=True)
class State:
    """A batch of MDP states (numpy arrays, first axis = row).

    ``path_*`` hold the actions taken so far (``[B, k]``), for explanations and LSTM inputs;
    ``answer`` is the ground-truth object when known (training), else ``None``.
    """

    query_entity: np.ndarray  # int64 [B]
    query_relation: np.ndarray  # int64 [B]
    query_time: np.ndarray  # int64 [B]
    entity: np.ndarray  # int64 [B]
    time: np.ndarray  # int64 [B]
    visited: np.ndarray  # int64 [B, K+1]
    path_entity: np.ndarray  # int64 [B, k]
    path_relation: np.ndarray  # int64 [B, k]
    path_time: np.ndarray  # int64 [B, k]
    step: int
    answer: Optional[np.ndarray] = None  # int64 [B]

    @property
    def batch_size(self) -> int:
        return int(self.entity.shape[0])

    def take(self, rows: np.ndarray) -> "State":
        """The states of ``rows`` (an index array), e.g. to reorder beams."""
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            kw[f.name] = v[rows] if isinstance(v, np.ndarray) else v
        return State(**kw)


@dataclass(frozen=True)
class Candidates:
    """Padded candidate actions of a batch of states: ``[B, A]`` arrays, slot 0 = STOP."""

    entity: np.ndarray  # int64 [B, A]; pad = E
    relation: np.ndarray  # int64 [B, A]; STOP = 2R, pad = 2R + 1
    time: np.ndarray  # int64 [B, A]; pad = 0
    mask: np.ndarray  # bool [B, A]; true for real actions (STOP included)
    count: np.ndarray  # int64 [B]; number of kept edges (excluding STOP)

    @property
    def width(self) -> int:
        return int(self.entity.shape[1])


@numba.njit(cache=True, nogil=True)
def _fill_candidates(neighbor, relation, time, start, stop, visited, cap, mask_before_cap,
                     out_ent, out_rel, out_time, count):  # pragma: no cover - compiled
    B = start.shape[0]
    V = visited.shape[1]
    for b in range(B):
        n = 0
        p = stop[b] - 1
        lo = start[b]
        if not mask_before_cap:
            lo = max(lo, stop[b] - cap)
        while p >= lo and n < cap:
            e = neighbor[p]
            seen = False
            for j in range(V):
                if visited[b, j] == e:
                    seen = True
                    break
            if not seen:
                out_ent[b, n + 1] = e
                out_rel[b, n + 1] = relation[p]
                out_time[b, n + 1] = time[p]
                n += 1
            p -= 1
        count[b] = n


class TemporalEnv:
    """The MDP over a :class:`TemporalGraph`; stateless (states are values)."""

    def __init__(self, graph: TemporalGraph, config: EnvConfig = EnvConfig(), walk: Walk = "forward",
                 same_time: bool = False):
        if walk not in WALKS:
            raise ValueError(f"unknown walk {walk!r} (known: {', '.join(WALKS)})")
        self.graph = graph
        self.config = config
        #: The MDP's semantics (module docstring); ``same_time`` only applies to TITer's walk.
        self.walk = walk
        self.same_time = bool(same_time)
        self.num_entities = graph.num_entities
        self.num_relations = graph.num_relations
        self.K = config.max_path_length
        self.stop_relation = stop_relation(graph.num_relations)
        self.pad_relation = pad_relation(graph.num_relations)
        self.pad_entity = pad_entity(graph.num_entities)
        self._neighbor = np.ascontiguousarray(graph.neighbor, dtype=np.int32)
        self._relation = np.ascontiguousarray(graph.relation, dtype=np.int32)
        self._time = np.ascontiguousarray(graph.time, dtype=np.int32)
        #: Its device copies (:func:`raptor.mdp.device_env.on_device`), one per (walk, device): one dict
        #: shared with the environments :meth:`with_walk` makes of the same graph.
        self._device_envs: dict = {}

    def with_walk(self, walk: Walk, same_time: bool = False) -> "TemporalEnv":
        """The same graph and config under another walk (shares the edge arrays)."""
        if walk not in WALKS:
            raise ValueError(f"unknown walk {walk!r} (known: {', '.join(WALKS)})")
        other = copy.copy(self)
        other.walk, other.same_time = walk, bool(same_time)
        return other

    # ------------------------------------------------------------------ states

    def reset(self, queries: np.ndarray, with_answer: bool = True) -> State:
        """Initial states of int ``[B, 4]`` queries ``(e_q, r_q, o_q, t_q)`` (or ``[B, 3]`` without ``o_q``:
        ``(e_q, r_q, t_q)``)."""
        q = np.asarray(queries, dtype=np.int64)
        if q.ndim != 2 or q.shape[1] not in (3, 4):
            raise ValueError(f"queries must have shape [B, 4] or [B, 3], got {q.shape}")
        B = q.shape[0]
        e_q, r_q = q[:, 0].copy(), q[:, 1].copy()
        t_q = q[:, -1].copy()
        answer = q[:, 2].copy() if (q.shape[1] == 4 and with_answer) else None
        visited = np.full((B, self.K + 1), NO_ENTITY, dtype=np.int64)
        visited[:, 0] = e_q
        empty = np.zeros((B, 0), dtype=np.int64)
        t_0 = t_q.copy() if self.walk == "backward" else np.zeros(B, dtype=np.int64)
        return State(
            query_entity=e_q, query_relation=r_q, query_time=t_q,
            entity=e_q.copy(), time=t_0, visited=visited,
            path_entity=empty, path_relation=empty, path_time=empty, step=0, answer=answer,
        )

    def bounds(self, state):
        """``(lo, hi, masked, cap)`` of every row's candidate window (``lo <= t' < hi``): whether visited
        targets are masked and how many edges are kept. Plain arithmetic, so it serves host arrays and
        the device environment's tensors alike."""
        if self.walk == "backward":
            # TITer: no lower bound, t' < t_k (t' <= t_k after the first hop with same_time), no
            # visited mask, and max_actions edges at step 0 where NO_OP gives way to them
            after_first_hop = (state.time != state.query_time) & self.same_time
            cap = self.config.max_actions if state.step == 0 else self.config.edge_cap
            return state.time * 0, state.time + after_first_hop * 1, False, cap
        hi = state.query_time if self.config.strict_history else state.query_time + 1
        return state.time, hi, True, self.config.edge_cap

    def candidates(self, state: State) -> Candidates:
        """The padded candidate actions of every row of ``state``."""
        if state.step >= self.K:
            raise ValueError(f"state at step {state.step} is terminal (K = {self.K})")
        cfg = self.config
        B = state.batch_size
        lo, hi, masked, cap = self.bounds(state)
        visited = state.visited if masked else np.empty((B, 0), dtype=np.int64)
        start, stop = self.graph.window(state.entity, lo, hi)
        ent = np.full((B, cap + 1), self.pad_entity, dtype=np.int64)
        rel = np.full((B, cap + 1), self.pad_relation, dtype=np.int64)
        tim = np.zeros((B, cap + 1), dtype=np.int64)
        count = np.zeros(B, dtype=np.int64)
        _fill_candidates(self._neighbor, self._relation, self._time, start, stop, visited,
                         cap, cfg.mask_before_cap, ent, rel, tim, count)
        ent[:, 0] = state.entity
        rel[:, 0] = self.stop_relation
        tim[:, 0] = state.time
        width = 1 + (int(count.max()) if B else 0)
        ent, rel, tim = ent[:, :width], rel[:, :width], tim[:, :width]
        mask = np.arange(width)[None, :] <= count[:, None]
        if self.walk == "backward" and state.step == 0:
            mask[:, 0] = count == 0
        return Candidates(entity=ent, relation=rel, time=tim, mask=mask, count=count)

    def step(self, state: State, cands: Candidates, choice: np.ndarray) -> State:
        """Take action slot ``choice[b]`` of ``cands`` in every row; returns the next state.

        STOP keeps ``e_k`` and ``t_k`` (and leaves ``v`` unchanged: ``e_k`` is already visited).
        """
        choice = np.asarray(choice, dtype=np.int64)
        rows = np.arange(state.batch_size)
        if not np.all(cands.mask[rows, choice]):
            raise ValueError("a chosen action is padding")
        return self.move(state, cands.entity[rows, choice], cands.relation[rows, choice], cands.time[rows, choice])

    def move(self, state: State, e: np.ndarray, r: np.ndarray, t: np.ndarray) -> State:
        """Transition of every row by the action ``(e[b], r[b], t[b])`` (assumed valid)."""
        k = state.step
        visited = state.visited.copy()
        visited[:, k + 1] = np.where(r == self.stop_relation, NO_ENTITY, e)
        return replace(
            state,
            entity=e, time=t, visited=visited,
            path_entity=np.concatenate([state.path_entity, e[:, None]], axis=1),
            path_relation=np.concatenate([state.path_relation, r[:, None]], axis=1),
            path_time=np.concatenate([state.path_time, t[:, None]], axis=1),
            step=k + 1,
        )

    def reward(self, state: State) -> np.ndarray:
        """Binary terminal reward: 1 where the episode ends on the answer ``o_q``."""
        if state.answer is None:
            raise ValueError("state has no answers")
        return (state.entity == state.answer).astype(np.float32)
