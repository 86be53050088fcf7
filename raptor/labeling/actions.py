"""Action labels: whether each candidate action can still reach the query's answer, read from a
:class:`~raptor.labeling.table.LabelTable` (the targets of reachability pretraining)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from raptor.constants import pad_relation, stop_relation
from raptor.labeling.kernels import _action_label_kernel
from raptor.labeling.table import VISITED_SUBJECT, LabelTable


#: How STOP is labelled (``pretrain.stop_label``): ``on_answer``, reachable iff the agent stands on
#: ``o_q``; ``as_candidate``, STOP is the paper's candidate ``(r_stop, e_k, t_k)`` and gets the paper's rule
#: like any other (on ``o_q`` by ``o_q``'s implicit row, elsewhere by ``L``: ``e_k`` still reaches ``o_q``).
STOP_LABELS = ("on_answer", "as_candidate")
#: What the moves of an agent standing on ``o_q`` get (``pretrain.on_answer``): ``table``, the paper's rule
#: as printed (nearly all 1: ``o_q``'s neighbours reach it back by the inverse edge); ``stop_only``, 0 for
#: every move (``o_q`` is visited, so no simple path enters it again; STOP is then the one positive).
ON_ANSWER_LABELS = ("table", "stop_only")


@dataclass(frozen=True)
class LabelRule:
    """What makes a candidate reachable besides the table: the step budget ``K`` (``None``: the
    table's), how STOP is labelled (:data:`STOP_LABELS`) and what moving off the answer gets
    (:data:`ON_ANSWER_LABELS`). The defaults are this project's labels before these two were
    parameters (docs/pretraining.md)."""

    K: Optional[int] = None
    stop: str = "on_answer"
    on_answer: str = "table"

    def __post_init__(self):
        if self.stop not in STOP_LABELS:
            raise ValueError(f"label rule: stop = {self.stop!r}, expected one of {', '.join(STOP_LABELS)}")
        if self.on_answer not in ON_ANSWER_LABELS:
            raise ValueError(f"label rule: on_answer = {self.on_answer!r}, expected one of "
                             f"{', '.join(ON_ANSWER_LABELS)}")


@dataclass(frozen=True)
class ActionCandidates:
    """The candidate actions :func:`action_labels` labels, ``[B, A]`` each, and the agent's entity.

    ``entity``, ``time``: int ``[B, A]``. ``is_stop``: bool ``[B, A]``; or give ``relation``
    ``[B, A]`` and ``num_relations`` (STOP is relation ``2R``, padding ``2R + 1``). ``mask``: optional
    bool ``[B, A]``, False = padding (entities outside ``[0, E)`` are padding as well).
    ``current_entity``: int ``[B]``, the agent's entity (needed for STOP)."""

    entity: Any
    time: Any
    is_stop: Any = None
    relation: Any = None
    num_relations: Optional[int] = None
    mask: Any = None
    current_entity: Any = None


def action_labels(
    table: LabelTable,
    targets,
    query_times,
    step,
    candidates: ActionCandidates,
    rule: Optional[LabelRule] = None,
    *,
    query_subject=None,
) -> np.ndarray:
    """Reachability labels ``y[B, A]`` (uint8 0/1) of the candidate actions at step ``k``.

    ``y = 1`` iff ``L(o_q, t_q)`` holds ``(entity, t̄, h̄)`` with ``cand_time <= t̄`` and
    ``h̄ < K - k`` (paper, Self-Supervised Pretraining); plus what the list cannot express: a
    candidate whose entity is ``o_q`` itself is reachable (``h̄ = 0``, ``t̄`` = the last time allowed
    before ``t_q``); STOP is reachable on ``o_q``, and elsewhere as ``rule.stop`` says (its time is
    taken as ``t_k``); the moves off ``o_q`` as ``rule.on_answer`` says. Padding candidates get 0.

    With a table labeled ``visited = "target_and_subject"``, ``L`` is that of the query's own
    visited set ``{o_q, e_q}`` (:meth:`LabelTable.get_for_query`), so ``query_subject`` is required;
    with a ``"target"`` table it is ignored (the paper's ``L``, paths through ``e_q`` included).

    Args:
        table: the :class:`LabelTable`.
        targets, query_times: int ``[B]``, the query's answer ``o_q`` and time ``t_q``.
        step: ``k`` as an int or int ``[B]`` (0-based number of actions already taken).
        candidates: the :class:`ActionCandidates` (entity, time, STOP, mask, the agent's entity).
        rule: the :class:`LabelRule` (default ``LabelRule()``; its ``K``: the table's when ``None``).
        query_subject: int ``[B]``, the query's subject ``e_q`` (used by tables with via columns).
    """
    rule = LabelRule() if rule is None else rule
    K = table.max_path_length if rule.K is None else int(rule.K)
    cand_entity, cand_time, cand_is_stop = candidates.entity, candidates.time, candidates.is_stop
    cand_relation, num_relations, cand_mask = candidates.relation, candidates.num_relations, candidates.mask
    current_entity = candidates.current_entity
    ce = np.asarray(cand_entity, dtype=np.int64)
    if ce.ndim != 2:
        raise ValueError(f"cand_entity must be [B, A], got shape {ce.shape}")
    B, A = ce.shape
    ct = np.asarray(cand_time, dtype=np.int64)
    if ct.shape != ce.shape:
        raise ValueError(f"cand_time shape {ct.shape} differs from cand_entity shape {ce.shape}")
    tg = np.asarray(targets, dtype=np.int64).reshape(-1)
    qt = np.asarray(query_times, dtype=np.int64).reshape(-1)
    if len(tg) != B or len(qt) != B:
        raise ValueError(f"targets and query_times must have length B={B}")
    steps = np.broadcast_to(np.asarray(step, dtype=np.int64), (B,)).copy()
    if np.any(steps < 0):
        raise ValueError("step must be >= 0")
    valid = (ce >= 0) & (ce < table.num_entities)
    if cand_mask is not None:
        valid &= np.asarray(cand_mask, dtype=bool)
    if cand_relation is not None:
        if num_relations is None:
            raise ValueError("cand_relation needs num_relations")
        rel = np.asarray(cand_relation, dtype=np.int64)
        if rel.shape != ce.shape:
            raise ValueError(f"cand_relation shape {rel.shape} differs from cand_entity shape {ce.shape}")
        stop = rel == stop_relation(num_relations)
        valid &= rel != pad_relation(num_relations)
        if cand_is_stop is not None:
            stop |= np.asarray(cand_is_stop, dtype=bool)
    elif cand_is_stop is not None:
        stop = np.asarray(cand_is_stop, dtype=bool)
        if stop.shape != ce.shape:
            raise ValueError(f"cand_is_stop shape {stop.shape} differs from cand_entity shape {ce.shape}")
    else:
        stop = np.zeros_like(valid)
    if current_entity is None:
        if np.any(stop & valid):
            raise ValueError("STOP candidates need current_entity")
        cur = np.full(B, -1, np.int64)
    else:
        cur = np.asarray(current_entity, dtype=np.int64).reshape(-1)
        if len(cur) != B:
            raise ValueError(f"current_entity must have length B={B}")
    use_via = table.via is not None
    if use_via:
        if query_subject is None:
            raise ValueError(f"label table labeled with labeling.visited = {VISITED_SUBJECT!r}: "
                             "action_labels needs query_subject (e_q of every query)")
        subj = np.asarray(query_subject, dtype=np.int64).reshape(-1)
        if len(subj) != B:
            raise ValueError(f"query_subject must have length B={B}")
        via, alt = table.via, table.latest_time_without_via
    else:
        subj = np.zeros(0, np.int64)
        via, alt = np.zeros(0, np.int32), np.zeros(0, table.latest_time.dtype)
    pair = table.pair_index(tg, qt) if B else np.zeros(0, np.int64)
    bound_t = qt - 1 if table.strict_history else qt
    return _action_label_kernel(
        pair.astype(np.int64), steps, ce, ct, np.ascontiguousarray(stop), np.ascontiguousarray(valid), cur, tg,
        bound_t, table.pair_ptr, table.entity, table.hops, table.latest_time, np.int64(K),
        use_via, subj, via, alt, rule.stop == "as_candidate", rule.on_answer == "stop_only",
    )
