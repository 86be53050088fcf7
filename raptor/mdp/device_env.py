"""The temporal-path MDP of :mod:`raptor.mdp.env` with its graph, states and candidates as torch tensors on
one device (the GPU path): the same candidates in the same slots, the same moves and rewards.

:class:`raptor.mdp.env.TemporalEnv` builds candidates on the host (two ``searchsorted`` calls and a numba
loop), so a GPU rollout copies every step's candidates to the device and every choice back. Here every
step is batched tensor work on the device. What the numba loop does sequentially (walk the window from
its most recent edge down, skip edges to visited entities, stop after ``cap`` kept edges) is done in two
batched passes:

1. *How far the scan goes.* For ``mask_before_cap`` the kept edges are the ``cap`` most recent edges of
   the window ``[start, stop)`` whose target is not visited. If ``n`` edges of the window lead to
   visited entities, its last ``cap + n`` edges hold all of them, so the scan covers
   ``[max(start, stop - cap - n), stop)``. ``n`` is a sum over the ``K + 1`` visited entities ``v``
   of the edges ``e_k -> v`` in the window: two ``searchsorted`` calls in a *pair index* (every edge's
   ``(source, target, position)``, sorted). Without the mask before the cap, and on TITer's backward
   walk, the scan covers the window's last ``cap`` edges.
2. *The scan itself.* ``[B, W]`` positions from ``stop - 1`` down (``W`` = the widest scan of the
   batch), the visited targets masked out, and a cumulative sum giving each kept edge its slot (the
   first ``min(cap, unvisited)`` of them).

The only host synchronisation of a step is reading ``W`` and the widest candidate count (one
two-element copy), which also trims the width exactly as the host environment does. With fixed shapes
(``scan_pad``) there is none: the widths are bounds, and a row whose scan would pass more edges to
visited entities than ``scan_pad`` is flagged instead (what a captured step then does with it is the
caller's).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Optional

import numpy as np
import torch

from raptor.mdp.env import NO_ENTITY, State, TemporalEnv


@dataclass(frozen=True)
class DeviceState:
    """:class:`raptor.mdp.env.State` with int64 tensors on the environment's device (first axis = row)."""

    query_entity: torch.Tensor  # [B]
    query_relation: torch.Tensor  # [B]
    query_time: torch.Tensor  # [B]
    entity: torch.Tensor  # [B]
    time: torch.Tensor  # [B]
    visited: torch.Tensor  # [B, K+1], -1 = none
    path_entity: torch.Tensor  # [B, k]
    path_relation: torch.Tensor  # [B, k]
    path_time: torch.Tensor  # [B, k]
    step: int
    answer: Optional[torch.Tensor] = None  # [B]

    @property
    def batch_size(self) -> int:
        return int(self.entity.shape[0])

    def take(self, rows: torch.Tensor) -> "DeviceState":
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, v in kw.items():
            if isinstance(v, torch.Tensor):
                kw[name] = v[rows]
        return DeviceState(**kw)

    def numpy(self):
        """The same states as a host :class:`raptor.mdp.env.State` (for tests and explanations)."""
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        return State(**{k: (v.cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()})


@dataclass(frozen=True)
class DeviceCandidates:
    """:class:`raptor.mdp.env.Candidates` as tensors: ``[B, A]``, slot 0 = STOP."""

    entity: torch.Tensor  # int64 [B, A]; pad = E
    relation: torch.Tensor  # int64 [B, A]; STOP = 2R, pad = 2R + 1
    time: torch.Tensor  # int64 [B, A]; pad = 0
    mask: torch.Tensor  # bool [B, A]
    count: torch.Tensor  # int64 [B]
    #: ``t_q - t' < time_rows`` for every row (the environment checks query times at reset)
    time_rows: Optional[int] = None
    #: with fixed shapes (``DeviceEnv(scan_pad=...)``): bool ``[B]``, rows whose scan needed more than
    #: the fixed width, so their candidates are incomplete and must not be used; else ``None``
    overflow: Optional[torch.Tensor] = None

    @property
    def width(self) -> int:
        return int(self.entity.shape[1])


class DeviceEnv:
    """A :class:`raptor.mdp.env.TemporalEnv` (graph, config, walk) resident on ``device``; stateless."""

    def __init__(self, env: TemporalEnv, device="cpu", scan_pad: Optional[int] = None):
        """``scan_pad``: ``None`` reads each step's widths from the device (exact, one sync per step);
        an int fixes them (candidates ``max(max_actions, edge_cap) + 1`` wide, scans ``scan_pad`` edges
        longer than the cap) so that a step has static shapes and no sync (CUDA graphs), and rows whose
        scan needs more are flagged in :attr:`DeviceCandidates.overflow`."""
        if scan_pad is not None and scan_pad < 0:
            raise ValueError(f"scan_pad must be >= 0 or None, got {scan_pad}")
        self.scan_pad = scan_pad
        g = env.graph
        self.host = env
        self.device = torch.device(device)
        self.config, self.walk, self.same_time = env.config, env.walk, env.same_time
        self.K = env.K
        self.num_entities, self.num_relations = env.num_entities, env.num_relations
        self.stop_relation, self.pad_relation, self.pad_entity = env.stop_relation, env.pad_relation, env.pad_entity
        dev = self.device
        m = g.num_edges
        self._stride = int(g.max_time) + 2
        #: query times (so ``dt = t_q - t'``) are below this: the time-encoding table's rows
        self.time_rows = self._stride
        source = np.repeat(np.arange(g.num_entities, dtype=np.int64), g.degree())
        self._key = torch.from_numpy(source * self._stride + g.time.astype(np.int64)).to(dev)
        # one sentinel edge at the end: a scan position clamped to 0 is readable even in an empty graph
        self._neighbor, self._relation, self._time = (
            torch.from_numpy(np.append(a.astype(np.int64), 0)).to(dev) for a in (g.neighbor, g.relation, g.time))
        # pair index: (source * E + target) * (M + 1) + position, sorted
        E = g.num_entities
        if E * E * (m + 1) >= 2 ** 62:
            raise ValueError(f"graph too large for the device environment's pair index ({E} entities, {m} edges)")
        pair = (source * E + g.neighbor.astype(np.int64)) * (m + 1) + np.arange(m, dtype=np.int64)
        self._pair = torch.from_numpy(np.sort(pair)).to(dev)
        self._m1 = m + 1

    # ------------------------------------------------------------------ states

    def reset(self, queries, with_answer: bool = True) -> DeviceState:
        """Initial states of int ``[B, 4]`` (or ``[B, 3]``) queries, a host array or a tensor."""
        if isinstance(queries, np.ndarray) and queries.size and queries[:, -1].max() >= self.time_rows:
            raise ValueError(f"a query time {int(queries[:, -1].max())} is past the graph's last day + 1 "
                             f"({self.time_rows - 1})")
        q = torch.as_tensor(queries, dtype=torch.int64).to(self.device)
        if q.ndim != 2 or q.shape[1] not in (3, 4):
            raise ValueError(f"queries must have shape [B, 4] or [B, 3], got {tuple(q.shape)}")
        B = q.shape[0]
        e_q, r_q, t_q = q[:, 0], q[:, 1], q[:, -1]
        answer = q[:, 2] if (q.shape[1] == 4 and with_answer) else None
        visited = torch.full((B, self.K + 1), NO_ENTITY, dtype=torch.int64, device=self.device)
        visited[:, 0] = e_q
        empty = torch.zeros((B, 0), dtype=torch.int64, device=self.device)
        t_0 = t_q.clone() if self.walk == "backward" else torch.zeros_like(t_q)
        return DeviceState(query_entity=e_q, query_relation=r_q, query_time=t_q, entity=e_q.clone(), time=t_0,
                           visited=visited, path_entity=empty, path_relation=empty, path_time=empty, step=0,
                           answer=answer)

    def _window(self, e: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor):
        top = self._stride - 1
        base = e * self._stride
        start = torch.searchsorted(self._key, base + lo.clamp(0, top))
        stop = torch.searchsorted(self._key, base + hi.clamp(0, top))
        return start, torch.maximum(start, stop)

    def _visited_edges(self, e: torch.Tensor, visited: torch.Tensor, start: torch.Tensor, stop: torch.Tensor):
        """int64 ``[B]``: edges of ``e`` at positions ``[start, stop)`` whose target is visited.

        The visited entities of a row are distinct (a move never goes to a visited entity, STOP writes
        ``-1``), so the count is a sum over them."""
        base = (e[:, None] * self.num_entities + visited.clamp(min=0)) * self._m1  # [B, V]
        n = torch.searchsorted(self._pair, base + stop[:, None]) - torch.searchsorted(self._pair, base + start[:, None])
        return (n * (visited >= 0)).sum(1)

    def candidates(self, state: DeviceState) -> DeviceCandidates:
        """The padded candidate actions of every row: those of :meth:`raptor.mdp.env.TemporalEnv.candidates`."""
        if state.step >= self.K:
            raise ValueError(f"state at step {state.step} is terminal (K = {self.K})")
        cfg = self.config
        B = state.batch_size
        dev = self.device
        e = state.entity
        lo, hi, masked, cap = self.host.bounds(state)
        visited = state.visited if masked else None
        start, stop = self._window(e, lo, hi)
        if visited is not None and cfg.mask_before_cap:
            # [stop - cap - n_visited, stop) holds cap unvisited edges (or the whole window does)
            n_visited = self._visited_edges(e, visited, start, stop)
            p0 = torch.maximum(start, stop - cap - n_visited)
            count = (stop - start - n_visited).clamp(max=cap)
        elif visited is not None:  # the cap first, then the visited targets dropped
            p0 = torch.maximum(start, stop - cap)
            count = (stop - p0) - self._visited_edges(e, visited, p0, stop)
        else:
            p0 = torch.maximum(start, stop - cap)
            count = stop - p0
        overflow = None
        if self.scan_pad is not None:  # fixed shapes, no sync (capturable); rows that need more are flagged
            width = 1 + max(cfg.max_actions, cfg.edge_cap)
            W = width - 1 + self.scan_pad
            overflow = (stop - p0) > W
        elif B == 0:
            W, width = 0, 1
        else:
            W, c_max = torch.stack([(stop - p0).max(), count.max()]).tolist()  # the step's one sync
            width = 1 + int(c_max)
        #: the last step's scan width and candidate width (``W``, ``A``): what the step's tensors cost
        self.last_widths = (int(W), int(width))
        offs = torch.arange(W, device=dev)
        pos = stop[:, None] - 1 - offs[None, :]  # [B, W], most recent first
        keep = pos >= p0[:, None]
        pos = pos.clamp(min=0)
        nb = self._neighbor[pos]
        if visited is not None:
            keep &= ~(nb[:, :, None] == visited[:, None, :]).any(2)
        rank = keep.cumsum(1)
        keep &= rank <= count[:, None]  # the scan may pass more unvisited edges than the cap keeps
        slot = torch.where(keep, rank, width)  # 1-based slots; dropped edges go to a spill column
        ent = torch.full((B, width + 1), self.pad_entity, dtype=torch.int64, device=dev)
        rel = torch.full((B, width + 1), self.pad_relation, dtype=torch.int64, device=dev)
        tim = torch.zeros((B, width + 1), dtype=torch.int64, device=dev)
        if W:
            ent.scatter_(1, slot, nb)
            rel.scatter_(1, slot, self._relation[pos])
            tim.scatter_(1, slot, self._time[pos])
        ent, rel, tim = ent[:, :width], rel[:, :width], tim[:, :width]
        ent[:, 0] = e
        rel[:, 0] = self.stop_relation
        tim[:, 0] = state.time
        mask = torch.arange(width, device=dev)[None, :] <= count[:, None]
        if self.walk == "backward" and state.step == 0:
            mask[:, 0] = count == 0
        return DeviceCandidates(entity=ent, relation=rel, time=tim, mask=mask, count=count,
                                time_rows=self.time_rows, overflow=overflow)

    def step(self, state: DeviceState, cands: DeviceCandidates, choice: torch.Tensor) -> DeviceState:
        """Take action slot ``choice[b]`` of ``cands`` in every row (not checked against the mask: that
        would synchronise; the policy's masked sampling never picks padding)."""
        c = choice.to(torch.int64)[:, None]
        return self.move(state, cands.entity.gather(1, c)[:, 0], cands.relation.gather(1, c)[:, 0],
                         cands.time.gather(1, c)[:, 0])

    def move(self, state: DeviceState, e: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> DeviceState:
        k = state.step
        visited = state.visited.clone()
        visited[:, k + 1] = torch.where(r == self.stop_relation, torch.full_like(e, NO_ENTITY), e)
        return replace(state, entity=e, time=t, visited=visited,
                       path_entity=torch.cat([state.path_entity, e[:, None]], 1),
                       path_relation=torch.cat([state.path_relation, r[:, None]], 1),
                       path_time=torch.cat([state.path_time, t[:, None]], 1), step=k + 1)

    def reward(self, state: DeviceState) -> torch.Tensor:
        """float32 ``[B]``: 1 where the episode ends on the answer."""
        if state.answer is None:
            raise ValueError("state has no answers")
        return (state.entity == state.answer).to(torch.float32)


def on_device(env: TemporalEnv, device, backend: str = "auto"):
    """The environment a rollout on ``device`` uses: ``env`` itself (host candidates), or its
    :class:`DeviceEnv` (``backend = "torch"``, or ``"auto"`` on a CUDA device), built once per
    (walk, device) and kept on ``env``."""
    device = torch.device(device)
    if backend not in ("auto", "numpy", "torch"):
        raise ValueError(f"unknown environment backend {backend!r} (known: auto, numpy, torch)")
    if backend == "numpy" or (backend == "auto" and device.type != "cuda"):
        return env
    cache = env.__dict__.setdefault("_device_envs", {})
    key = (env.walk, env.same_time, str(device))
    if key not in cache:
        cache[key] = DeviceEnv(env, device)
    return cache[key]
