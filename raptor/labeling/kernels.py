"""The numba kernels of labeling, run on a chunk of whole targets per call.

* :func:`_exact_h2_kernel` (hops <= 2, no pruning; incremental over a target's sorted query times),
  :func:`_pruned_h2_kernel` (hops <= 2, ``SelectTopN``) and :func:`_dfs_kernel` (any K): the ``L``
  lists of a chunk's pairs, with the via columns when ``track``; :func:`_grow`, :func:`_grow_via`,
  :func:`_via_of` and :func:`_emit` build their output arrays.
* :func:`_action_label_kernel`: the action labels of a batch of candidates.

``nogil``: :func:`raptor.labeling.compute.iter_label_chunks` runs them on a thread pool.
``cache=True``: compiled once into ``__pycache__`` (numba keys its cache by this file).
No ``raptor`` import.
"""

from __future__ import annotations

import numba
import numpy as np

#: "No entry" sentinel in the kernels' dense per-entity arrays.
_NONE = -1
#: "No pruning" as an N for the kernels.
_UNLIMITED = np.int64(1) << 62


@numba.njit(cache=True, nogil=True, inline="always")
def _lower_bound(arr, lo, hi, value):
    """First index in ``arr[lo:hi]`` (sorted) with ``arr[i] >= value``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if arr[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _grow(ent, hop, lat, n, need):
    cap = len(ent)
    if n + need <= cap:
        return ent, hop, lat
    new_cap = max(2 * cap, n + need, 1024)
    e2 = np.empty(new_cap, np.int32)
    h2 = np.empty(new_cap, np.int8)
    l2 = np.empty(new_cap, np.int32)
    e2[:n] = ent[:n]
    h2[:n] = hop[:n]
    l2[:n] = lat[:n]
    return e2, h2, l2


@numba.njit(cache=True, nogil=True)
def _grow_via(via, alt, n, need, track):
    """``_grow`` for the optional ``via`` / ``latest_time_without_via`` columns (empty unless ``track``)."""
    cap = len(via)
    if not track or n + need <= cap:
        return via, alt
    new_cap = max(2 * cap, n + need, 1024)
    v2 = np.empty(new_cap, np.int32)
    a2 = np.empty(new_cap, np.int32)
    v2[:n] = via[:n]
    a2[:n] = alt[:n]
    return v2, a2


@numba.njit(cache=True, nogil=True, inline="always")
def _via_of(best, arg, alt_best):
    """``(via, latest_time_without_via)`` of a hop-2 record: ``via`` is the intermediate of its best
    paths when it is unique (``alt_best < best``), else -1 and the time is ``best`` itself."""
    if alt_best < best:
        return arg, alt_best
    return -1, best


@numba.njit(cache=True, nogil=True)
def _emit(allt, n_all, f1, best2, ent, hop, lat, n, track, arg2, alt2, via, alt):
    """Append the rows of one pair (entities in ``allt[:n_all]``, already sorted); with ``track``
    also their ``via`` / ``latest_time_without_via`` (hop-1 rows: -1 / ``latest_time``)."""
    ent, hop, lat = _grow(ent, hop, lat, n, 2 * n_all)
    via, alt = _grow_via(via, alt, n, 2 * n_all, track)
    for i in range(n_all):
        e = allt[i]
        if f1[e] >= 0:
            ent[n] = e
            hop[n] = 1
            lat[n] = f1[e]
            if track:
                via[n] = -1
                alt[n] = f1[e]
            n += 1
        if best2[e] >= 0:
            ent[n] = e
            hop[n] = 2
            lat[n] = best2[e]
            if track:
                via[n], alt[n] = _via_of(best2[e], arg2[e], alt2[e])
            n += 1
    return ent, hop, lat, via, alt, n


@numba.njit(cache=True, nogil=True)
def _exact_h2_kernel(indptr, nbr, tim, num_entities, targets, tgt_ptr, pair_times, strict, max_hops, track):
    """Exact labels for hops <= 2, incremental over each target's sorted query times.

    hop 1: ``f1[x]`` = latest in-edge ``x -> o`` before the bound (``x != o``).
    hop 2: ``best2[e]`` = max over ``x`` with ``f1[x]`` of the latest ``e -> x`` at ``<= f1[x]``
    (``e`` not in ``{o, x}``). For paths of <= 2 edges this DP over the last hop is exactly the
    maximum over simple paths: ``f1[x]`` never depends on ``e``. Because ``f1`` only grows with
    ``t_q``, each ``x``'s in-list is scanned once per target (``scanned[x]``) and maxima carry over.
    With ``track`` (``visited = "target_and_subject"``) also ``arg2[e]``, the intermediate of the best
    path, and ``alt2[e]``, the best over paths through any other intermediate (top-2 over distinct
    intermediates; order-independent, so it carries over the query times like the maxima).
    """
    n_pairs = tgt_ptr[-1]
    counts = np.zeros(n_pairs, np.int64)
    f1 = np.full(num_entities, -1, np.int32)
    best2 = np.full(num_entities, -1, np.int32)
    arg2 = np.full(num_entities, -1, np.int32)
    alt2 = np.full(num_entities, -1, np.int32)
    scanned = np.full(num_entities, -1, np.int64)
    inall = np.zeros(num_entities, np.bool_)
    dirty = np.zeros(num_entities, np.bool_)
    allt = np.empty(num_entities, np.int32)
    dlist = np.empty(num_entities, np.int32)
    ent = np.empty(1024, np.int32)
    hop = np.empty(1024, np.int8)
    lat = np.empty(1024, np.int32)
    via = np.empty(1024 if track else 0, np.int32)
    alt = np.empty(1024 if track else 0, np.int32)
    n = 0
    for ti in range(len(targets)):
        o = targets[ti]
        p = indptr[o]
        pend = indptr[o + 1]
        n_all = 0
        for j in range(tgt_ptr[ti], tgt_ptr[ti + 1]):
            bound = pair_times[j] if strict else pair_times[j] + 1
            n_dirty = 0
            grew = False
            while p < pend and tim[p] < bound:
                x = nbr[p]
                tau = tim[p]
                p += 1
                if x == o or max_hops < 1:
                    continue
                if not inall[x]:
                    inall[x] = True
                    allt[n_all] = x
                    n_all += 1
                    grew = True
                if tau > f1[x]:
                    f1[x] = tau
                    if not dirty[x]:
                        dirty[x] = True
                        dlist[n_dirty] = x
                        n_dirty += 1
            for d in range(n_dirty):
                x = dlist[d]
                dirty[x] = False
                if max_hops < 2:
                    continue
                s = scanned[x]
                if s < 0:
                    s = indptr[x]
                lim = f1[x]
                end = indptr[x + 1]
                while s < end and tim[s] <= lim:
                    e = nbr[s]
                    t2 = tim[s]
                    s += 1
                    if e == o or e == x:
                        continue
                    if t2 > best2[e]:
                        if not inall[e]:
                            inall[e] = True
                            allt[n_all] = e
                            n_all += 1
                            grew = True
                        if track and arg2[e] != x:
                            alt2[e] = best2[e]
                            arg2[e] = x
                        best2[e] = t2
                    elif track and t2 > alt2[e] and arg2[e] != x:
                        alt2[e] = t2
                scanned[x] = s
            if grew:
                allt[:n_all] = np.sort(allt[:n_all])
            start = n
            ent, hop, lat, via, alt, n = _emit(allt, n_all, f1, best2, ent, hop, lat, n, track, arg2, alt2, via, alt)
            counts[j] = n - start
        for i in range(n_all):
            e = allt[i]
            f1[e] = -1
            best2[e] = -1
            arg2[e] = -1
            alt2[e] = -1
            scanned[e] = -1
            inall[e] = False
    m = n if track else 0
    return counts, ent[:n].copy(), hop[:n].copy(), lat[:n].copy(), via[:m].copy(), alt[:m].copy()


@numba.njit(cache=True, nogil=True)
def _pruned_h2_kernel(indptr, nbr, tim, num_entities, targets, tgt_ptr, pair_times, strict, max_hops, track, top_n):
    """Algorithm 1 with ``SelectTopN`` for hops <= 2, one pair at a time.

    Root window: the last ``N`` distinct in-edges of ``o`` before the bound. For each root entry
    ``(x, tau)`` (x != o) the level-2 window is the last ``N`` in-edges of ``x`` with time <= tau;
    windows of the same ``x`` are visited in increasing ``tau`` so their union is scanned once
    (``last_stop[x]``). Level-2 entries are records only (never expanded). ``track``: as in
    :func:`_exact_h2_kernel`, over the intermediates ``x`` of the root window.
    """
    n_pairs = tgt_ptr[-1]
    counts = np.zeros(n_pairs, np.int64)
    f1 = np.full(num_entities, -1, np.int32)
    best2 = np.full(num_entities, -1, np.int32)
    arg2 = np.full(num_entities, -1, np.int32)
    alt2 = np.full(num_entities, -1, np.int32)
    last_stop = np.full(num_entities, -1, np.int64)
    inall = np.zeros(num_entities, np.bool_)
    allt = np.empty(num_entities, np.int32)
    ent = np.empty(1024, np.int32)
    hop = np.empty(1024, np.int8)
    lat = np.empty(1024, np.int32)
    via = np.empty(1024 if track else 0, np.int32)
    alt = np.empty(1024 if track else 0, np.int32)
    n = 0
    for ti in range(len(targets)):
        o = targets[ti]
        ob = indptr[o]
        oe = indptr[o + 1]
        for j in range(tgt_ptr[ti], tgt_ptr[ti + 1]):
            bound = pair_times[j] if strict else pair_times[j] + 1
            stop = _lower_bound(tim, ob, oe, bound)
            begin = max(ob, stop - top_n)
            n_all = 0
            if max_hops >= 1:
                for i in range(begin, stop):
                    x = nbr[i]
                    tau = tim[i]
                    if x == o:
                        continue
                    if not inall[x]:
                        inall[x] = True
                        allt[n_all] = x
                        n_all += 1
                    if tau > f1[x]:
                        f1[x] = tau
                    if max_hops < 2:
                        continue
                    xb = indptr[x]
                    xs = _lower_bound(tim, xb, indptr[x + 1], tau + 1)
                    k = max(xb, xs - top_n, last_stop[x])
                    while k < xs:
                        e = nbr[k]
                        t2 = tim[k]
                        k += 1
                        if e == o or e == x:
                            continue
                        if t2 > best2[e]:
                            if not inall[e]:
                                inall[e] = True
                                allt[n_all] = e
                                n_all += 1
                            if track and arg2[e] != x:
                                alt2[e] = best2[e]
                                arg2[e] = x
                            best2[e] = t2
                        elif track and t2 > alt2[e] and arg2[e] != x:
                            alt2[e] = t2
                    if xs > last_stop[x]:
                        last_stop[x] = xs
            allt[:n_all] = np.sort(allt[:n_all])
            start = n
            ent, hop, lat, via, alt, n = _emit(allt, n_all, f1, best2, ent, hop, lat, n, track, arg2, alt2, via, alt)
            counts[j] = n - start
            for i in range(n_all):
                e = allt[i]
                f1[e] = -1
                best2[e] = -1
                arg2[e] = -1
                alt2[e] = -1
                last_stop[e] = -1
                inall[e] = False
    m = n if track else 0
    return counts, ent[:n].copy(), hop[:n].copy(), lat[:n].copy(), via[:m].copy(), alt[:m].copy()


@numba.njit(cache=True, nogil=True)
def _dfs_kernel(indptr, nbr, tim, num_entities, targets, tgt_ptr, pair_times, strict, max_hops, track, top_n):
    """Any number of hops: depth-first enumeration of Algorithm 1's search tree (records are
    order-independent maxima, so DFS order gives the same ``L`` as the printed FIFO queue).

    Exponential in ``max_hops`` without pruning; used for ``K > 3`` and as a cross-check.
    ``track`` (only for ``max_hops <= 2``, checked by the caller): the hop-2 rows' ``via`` as in
    :func:`_exact_h2_kernel`, the intermediate being ``node[1]``.
    """
    H = max_hops
    n_pairs = tgt_ptr[-1]
    counts = np.zeros(n_pairs, np.int64)
    best = np.full((H + 1, num_entities), -1, np.int32)
    arg2 = np.full(num_entities, -1, np.int32)
    alt2 = np.full(num_entities, -1, np.int32)
    inall = np.zeros(num_entities, np.bool_)
    visited = np.zeros(num_entities, np.bool_)
    allt = np.empty(num_entities, np.int32)
    node = np.empty(H + 1, np.int32)
    cur = np.empty(H + 1, np.int64)
    end = np.empty(H + 1, np.int64)
    ent = np.empty(1024, np.int32)
    hop = np.empty(1024, np.int8)
    lat = np.empty(1024, np.int32)
    via = np.empty(1024 if track else 0, np.int32)
    alt = np.empty(1024 if track else 0, np.int32)
    n = 0
    for ti in range(len(targets)):
        o = targets[ti]
        for j in range(tgt_ptr[ti], tgt_ptr[ti + 1]):
            bound = pair_times[j] if strict else pair_times[j] + 1
            n_all = 0
            if H >= 1:
                stop = _lower_bound(tim, indptr[o], indptr[o + 1], bound)
                node[0] = o
                cur[0] = max(indptr[o], stop - top_n)
                end[0] = stop
                visited[o] = True
                d = 0
                while d >= 0:
                    if cur[d] < end[d]:
                        i = cur[d]
                        cur[d] += 1
                        e = nbr[i]
                        if visited[e]:
                            continue
                        tau = tim[i]
                        h = d + 1
                        if tau > best[h, e]:
                            if track and h == 2 and arg2[e] != node[1]:
                                alt2[e] = best[h, e]
                                arg2[e] = node[1]
                            best[h, e] = tau
                            if not inall[e]:
                                inall[e] = True
                                allt[n_all] = e
                                n_all += 1
                        elif track and h == 2 and tau > alt2[e] and arg2[e] != node[1]:
                            alt2[e] = tau
                        if h < H:
                            d = h
                            node[d] = e
                            visited[e] = True
                            es = _lower_bound(tim, indptr[e], indptr[e + 1], tau + 1)
                            cur[d] = max(indptr[e], es - top_n)
                            end[d] = es
                    else:
                        visited[node[d]] = False
                        d -= 1
            allt[:n_all] = np.sort(allt[:n_all])
            start = n
            ent, hop, lat = _grow(ent, hop, lat, n, H * n_all)
            via, alt = _grow_via(via, alt, n, H * n_all, track)
            for a in range(n_all):
                e = allt[a]
                for h in range(1, H + 1):
                    if best[h, e] >= 0:
                        ent[n] = e
                        hop[n] = h
                        lat[n] = best[h, e]
                        if track:
                            if h == 2:
                                via[n], alt[n] = _via_of(best[h, e], arg2[e], alt2[e])
                            else:
                                via[n] = -1
                                alt[n] = best[h, e]
                        n += 1
                        best[h, e] = -1
                arg2[e] = -1
                alt2[e] = -1
                inall[e] = False
            counts[j] = n - start
    m = n if track else 0
    return counts, ent[:n].copy(), hop[:n].copy(), lat[:n].copy(), via[:m].copy(), alt[:m].copy()


@numba.njit(cache=True, nogil=True)
def _table_reachable(entity, hops, latest, lo, hi, e, t, budget, use_via, s, via, latest_without_via):
    """1 if the pair's rows ``[lo, hi)`` hold ``(e, t̄, h̄)`` with ``h̄ < budget`` and ``t <= t̄`` (a row whose
    best paths run through ``e_q = s`` with ``use_via``: its latest time without them), else 0."""
    i = _lower_bound(entity, lo, hi, e)
    while i < hi and entity[i] == e:
        if hops[i] < budget:
            lt = latest_without_via[i] if (use_via and via[i] == s) else latest[i]
            if t <= lt:
                return 1
        i += 1
    return 0


@numba.njit(cache=True, nogil=True)
def _action_label_kernel(pair, steps, cand_entity, cand_time, stop, valid, current, targets, bound_t,
                         pair_ptr, entity, hops, latest, K, use_via, subject, via, latest_without_via,
                         stop_as_candidate, stop_only_on_answer):
    """``use_via`` (visited = "target_and_subject"): ``subject[b]`` = ``e_q`` is visited -- never a
    reachable candidate, and a row whose best paths all run through it (``via == e_q``) counts with
    ``latest_without_via`` (-1: no other path). ``stop_as_candidate``: STOP off ``o_q`` is the candidate
    ``(e_k, t_k)`` (its time ``cand_time``), looked up like any other (staying on ``e_q`` is no revisit);
    else STOP is reachable only on ``o_q``. ``stop_only_on_answer``: on ``o_q`` every move gets 0 (``o_q``
    is visited: no later step can enter it again)."""
    B, A = cand_entity.shape
    y = np.zeros((B, A), np.uint8)
    for b in range(B):
        p = pair[b]
        lo0 = pair_ptr[p]
        hi0 = pair_ptr[p + 1]
        budget = K - steps[b]  # need hops < budget
        o = targets[b]
        s = subject[b] if use_via else -1
        on_answer = current[b] == o
        for a in range(A):
            if not valid[b, a]:
                continue
            if stop[b, a]:
                if on_answer:
                    y[b, a] = 1
                elif stop_as_candidate:
                    y[b, a] = _table_reachable(entity, hops, latest, lo0, hi0, current[b], cand_time[b, a],
                                               budget, use_via, s, via, latest_without_via)
                continue
            if on_answer and stop_only_on_answer:
                continue
            e = cand_entity[b, a]
            t = cand_time[b, a]
            if e == o:
                if t <= bound_t[b] and budget > 0:
                    y[b, a] = 1
                continue
            if use_via and e == s:
                continue
            y[b, a] = _table_reachable(entity, hops, latest, lo0, hi0, e, t, budget, use_via, s, via,
                                       latest_without_via)
    return y
