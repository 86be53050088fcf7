"""Action labels on the training device: :func:`raptor.labeling.actions.action_labels` as batched torch
ops over a device copy of a :class:`~raptor.labeling.table.LabelTable` (:class:`DeviceLabels`).

Pretraining on the device environment (:class:`raptor.mdp.device_env.DeviceEnv`) has its candidates on
the device; looking their labels up on the host (the numba kernel) would copy every step's candidates
to the host and the labels back, and wait for both. Here a step's look-up is a few ``searchsorted``
calls and gathers with shapes known beforehand: no host synchronisation, no data-dependent shape.

The table's rows are sorted by pair, and inside a pair by ``(entity, hops)``, so the *row key*
``pair * (E + 1) + entity`` is non-decreasing over all rows (``E + 1``: an entity outside ``[0, E)``
is mapped to ``E``, a key no row has). One ``searchsorted`` gives the first row of a candidate's
``(pair, entity)``; its rows (one per ``hops`` value, as the labeling kernels write them) are the
next ``max_run`` positions, ``max_run`` being the longest run of equal keys in the table (computed
once, when the copy is made, so any table is handled exactly). A sentinel row at the end (a key above
every real one) keeps every gather in range, even for an empty table.

A pair that was never labeled is a ``ValueError`` on the host. Raising on the device would need a read
per look-up, so :meth:`DeviceLabels.labels` labels such a row's candidates as if its list were empty
(only the rules of the target and STOP apply), and the caller checks :meth:`DeviceLabels.missing` at a
read it makes anyway (pretraining: the batch's one read of its statistics) and raises with
:meth:`DeviceLabels.raise_missing`. Training queries are always labeled, so this never fires in a run
on a table built for its dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import torch

from raptor.constants import pad_relation, stop_relation
from raptor.labeling.actions import ActionCandidates, LabelRule
from raptor.labeling.table import VISITED_SUBJECT, LabelTable

#: Where :func:`device_labels` keeps a table's device copies (an attribute of the table, like the
#: device environments kept on a :class:`raptor.mdp.env.TemporalEnv`): one per device.
CACHE_ATTRIBUTE = "_device_labels"


def _tensor(a: np.ndarray, device: torch.device, sentinel) -> torch.Tensor:
    """``a`` with ``sentinel`` appended, on ``device`` (its dtype kept: the table's narrow columns)."""
    return torch.from_numpy(np.append(a, np.asarray(sentinel, dtype=a.dtype))).to(device)


def _max_run(key: torch.Tensor) -> int:
    """The longest run of equal values in the sorted ``key`` (0 if empty): how many rows one
    ``(pair, entity)`` can have. One comparison per length tried (at most ``K - 1`` for the
    labeling kernels' tables), at build time only."""
    n = int(key.shape[0])
    run = 1 if n else 0
    while run < n and bool((key[run:] == key[:-run]).any()):
        run += 1
    return run


@dataclass(frozen=True, eq=False)
class DeviceLabels:
    """A :class:`~raptor.labeling.table.LabelTable` on ``device``, for :meth:`labels`.

    Pairs: ``pair_key`` int64 ``[P + 1]`` (``target * stride + query_time``, sorted, then a sentinel).
    Rows: ``row_key`` int64 ``[M + 1]`` (``pair * (E + 1) + entity``, non-decreasing, then a sentinel
    above every real key), ``hops`` ``[M + 1]`` and ``latest_time`` ``[M + 1]`` in the table's dtypes,
    and with a ``"target_and_subject"`` table ``via`` / ``latest_time_without_via`` ``[M + 1]``
    (else ``None``). ``max_run``: the most rows one ``(pair, entity)`` has."""

    device: torch.device
    pair_key: torch.Tensor
    row_key: torch.Tensor
    hops: torch.Tensor
    latest_time: torch.Tensor
    via: Optional[torch.Tensor]
    latest_time_without_via: Optional[torch.Tensor]
    num_entities: int
    num_pairs: int
    stride: int
    max_run: int
    max_path_length: int
    strict_history: bool

    @classmethod
    def from_table(cls, table: LabelTable, device="cpu") -> "DeviceLabels":
        """The device copy of ``table`` (one host pass over its rows to build the row keys)."""
        device = torch.device(device)
        E, P = int(table.num_entities), table.num_pairs
        stride = int(table.pair_time.max()) + 2 if P else 1
        if (int(table.pair_target.max()) + 1 if P else 1) * stride >= 2 ** 62 or (P + 1) * (E + 1) >= 2 ** 62:
            raise ValueError(f"label table too large for the device keys ({P} pairs, {E} entities)")
        pair_key = table.pair_target.astype(np.int64) * stride + table.pair_time.astype(np.int64)
        M = table.num_rows
        row_key = np.empty(M + 1, np.int64)
        row_key[:M] = np.repeat(np.arange(P, dtype=np.int64) * (E + 1), np.diff(table.pair_ptr))
        row_key[:M] += table.entity
        row_key[M] = P * (E + 1)  # the sentinel: above every real key (pair < P, entity <= E)
        row_key_t = torch.from_numpy(row_key).to(device)
        use_via = table.via is not None
        return cls(
            device=device,
            pair_key=_tensor(pair_key, device, np.iinfo(np.int64).max),
            row_key=row_key_t,
            hops=_tensor(table.hops, device, np.iinfo(table.hops.dtype).max),
            latest_time=_tensor(table.latest_time, device, -1),
            via=_tensor(table.via, device, -1) if use_via else None,
            latest_time_without_via=_tensor(table.latest_time_without_via, device, -1) if use_via else None,
            num_entities=E, num_pairs=P, stride=stride, max_run=_max_run(row_key_t),
            max_path_length=int(table.max_path_length), strict_history=bool(table.strict_history),
        )

    @property
    def visited(self) -> str:
        return "target" if self.via is None else VISITED_SUBJECT

    # ------------------------------------------------------------------ pairs

    def pair_index(self, targets: torch.Tensor, query_times: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pair int64 [B], found bool [B])`` of int ``[B]`` targets and query times; ``pair`` of a
        row not found is an arbitrary valid index (its row keys are not used: :meth:`labels`)."""
        t = torch.as_tensor(targets, dtype=torch.int64, device=self.device).reshape(-1)
        q = torch.as_tensor(query_times, dtype=torch.int64, device=self.device).reshape(-1)
        key = t * self.stride + q.clamp(0, self.stride - 1)
        idx = torch.searchsorted(self.pair_key, key).clamp(max=max(self.num_pairs - 1, 0))
        found = (q >= 0) & (q < self.stride - 1) & (self.pair_key[idx] == key)
        return idx, found

    def missing(self, targets: torch.Tensor, query_times: torch.Tensor) -> torch.Tensor:
        """bool ``[B]``: the rows whose ``(target, query_time)`` was never labeled (no read)."""
        return ~self.pair_index(targets, query_times)[1]

    def raise_missing(self, targets: torch.Tensor, query_times: torch.Tensor) -> None:
        """The host look-up's ``ValueError`` for the first pair not in the table (reads the device;
        for the error path, after :meth:`missing` said there is one)."""
        bad = self.missing(targets, query_times).nonzero()
        if len(bad):
            b = int(bad[0, 0])
            t = int(torch.as_tensor(targets).reshape(-1)[b])
            q = int(torch.as_tensor(query_times).reshape(-1)[b])
            raise ValueError(f"pair (target={t}, query_time={q}) is not in the label table "
                             "(only training query pairs are labeled)")

    # ------------------------------------------------------------------ labels

    def labels(self, targets, query_times, step: Union[int, torch.Tensor], candidates: ActionCandidates,
               rule: Optional[LabelRule] = None, *, query_subject=None) -> torch.Tensor:
        """Reachability labels uint8 ``[B, A]`` on the device: those of
        :func:`raptor.labeling.actions.action_labels` with the same arguments (as tensors), read with
        no host synchronisation.

        Args:
            targets, query_times: int ``[B]``, the query's answer ``o_q`` and time ``t_q``.
            step: ``k`` as an int or int ``[B]`` (an int is checked ``>= 0``; a tensor is not: that
                would read it).
            candidates: :class:`~raptor.labeling.actions.ActionCandidates` of tensors: ``entity``,
                ``time`` int ``[B, A]``; ``is_stop`` bool ``[B, A]`` and/or ``relation`` ``[B, A]`` with
                ``num_relations``; optional ``mask`` bool ``[B, A]``; ``current_entity`` int ``[B]``
                (needed whenever STOP can be given: ``is_stop`` or ``relation``).
            rule: the :class:`~raptor.labeling.actions.LabelRule` (default ``LabelRule()``; its ``K``:
                the table's when ``None``).
            query_subject: int ``[B]``, ``e_q`` (needed by a ``"target_and_subject"`` table).

        A row whose pair is not in the table gets the labels of an empty list (:meth:`missing`).
        """
        rule = LabelRule() if rule is None else rule
        K = self.max_path_length if rule.K is None else int(rule.K)
        dev = self.device
        as_long = lambda x: torch.as_tensor(x, dtype=torch.int64, device=dev)  # noqa: E731
        ce, ct = as_long(candidates.entity), as_long(candidates.time)
        if ce.ndim != 2:
            raise ValueError(f"cand_entity must be [B, A], got shape {tuple(ce.shape)}")
        if ct.shape != ce.shape:
            raise ValueError(f"cand_time shape {tuple(ct.shape)} differs from cand_entity shape {tuple(ce.shape)}")
        B, A = ce.shape
        tg, qt = as_long(targets).reshape(-1), as_long(query_times).reshape(-1)
        if len(tg) != B or len(qt) != B:
            raise ValueError(f"targets and query_times must have length B={B}")
        if not isinstance(step, torch.Tensor) and np.any(np.asarray(step) < 0):
            raise ValueError("step must be >= 0")
        steps = as_long(step)
        budget = K - (steps.expand(B) if steps.ndim == 0 else steps.reshape(-1))  # need hops < budget
        valid = (ce >= 0) & (ce < self.num_entities)
        if candidates.mask is not None:
            valid &= torch.as_tensor(candidates.mask, device=dev).bool()
        stop = torch.zeros_like(valid)
        if candidates.relation is not None:
            if candidates.num_relations is None:
                raise ValueError("cand_relation needs num_relations")
            rel = as_long(candidates.relation)
            if rel.shape != ce.shape:
                raise ValueError(f"cand_relation shape {tuple(rel.shape)} differs from cand_entity shape "
                                 f"{tuple(ce.shape)}")
            stop = rel == stop_relation(candidates.num_relations)
            valid &= rel != pad_relation(candidates.num_relations)
        if candidates.is_stop is not None:
            is_stop = torch.as_tensor(candidates.is_stop, device=dev).bool()
            if is_stop.shape != ce.shape:
                raise ValueError(f"cand_is_stop shape {tuple(is_stop.shape)} differs from cand_entity shape "
                                 f"{tuple(ce.shape)}")
            stop = stop | is_stop
        if candidates.current_entity is None:
            if candidates.relation is not None or candidates.is_stop is not None:
                raise ValueError("STOP candidates need current_entity")
            cur = torch.full((B,), -1, dtype=torch.int64, device=dev)
        else:
            cur = as_long(candidates.current_entity).reshape(-1)
            if len(cur) != B:
                raise ValueError(f"current_entity must have length B={B}")
        use_via = self.via is not None
        if use_via:
            if query_subject is None:
                raise ValueError(f"label table labeled with labeling.visited = {VISITED_SUBJECT!r}: "
                                 "the labels need query_subject (e_q of every query)")
            subj = as_long(query_subject).reshape(-1)
            if len(subj) != B:
                raise ValueError(f"query_subject must have length B={B}")
        bound_t = qt - 1 if self.strict_history else qt

        # STOP: reachable on o_q, elsewhere (rule.stop = as_candidate) as the candidate (e_k, t_k); the
        # target itself: if its time is allowed and a step is left
        on_target = ce == tg[:, None]
        on_answer = cur[:, None] == tg[:, None]  # [B, 1]
        y_target = (ct <= bound_t[:, None]) & (budget[:, None] > 0)
        # the rows of (pair, entity): a row with hops < K - k whose latest time is not before t'
        pair, found = self.pair_index(tg, qt)
        E1 = self.num_entities + 1
        if rule.stop == "as_candidate":  # STOP's entity is e_k (the one its rows are looked up by)
            ce = torch.where(stop, cur[:, None], ce)
        key = pair[:, None] * E1 + torch.where(valid, ce, self.num_entities)  # [B, A]
        key = torch.where(found[:, None], key, -1)  # no row has a negative key
        first = torch.searchsorted(self.row_key, key)  # [B, A]
        last = self.row_key.shape[0] - 1  # the sentinel
        idx = (first[..., None] + torch.arange(self.max_run, device=dev)).clamp(max=last)  # [B, A, R]
        lt = self.latest_time[idx]
        if use_via:  # e_q visited: a row whose latest paths all run through it takes the other latest time
            lt = torch.where(self.via[idx] == subj[:, None, None], self.latest_time_without_via[idx], lt)
        hit = (self.row_key[idx] == key[..., None]) & (self.hops[idx] < budget[:, None, None]) & (ct[..., None] <= lt)
        y_rows = hit.any(2)
        y_stop = on_answer | y_rows if rule.stop == "as_candidate" else on_answer  # (staying on e_q: no revisit)
        if use_via:  # e_q itself is visited: never reachable
            y_rows &= ce != subj[:, None]
        y_move = torch.where(on_target, y_target, y_rows)
        if rule.on_answer == "stop_only":  # o_q is visited: no move off it comes back
            y_move &= ~on_answer
        y = valid & torch.where(stop, y_stop, y_move)
        return y.to(torch.uint8)


def device_labels(table: Union[LabelTable, DeviceLabels], device) -> DeviceLabels:
    """The :class:`DeviceLabels` of ``table`` on ``device``, made once per device and kept on the table
    (released with it: a part of a partitioned table takes its copy along); a :class:`DeviceLabels`
    already on ``device`` is returned as it is."""
    device = torch.device(device)
    if isinstance(table, DeviceLabels):
        if table.device.type != device.type:
            raise ValueError(f"device labels on {table.device}, wanted on {device}")
        return table
    cache = table.__dict__.setdefault(CACHE_ATTRIBUTE, {})
    key = str(device)
    if key not in cache:
        cache[key] = DeviceLabels.from_table(table, device)
    return cache[key]
