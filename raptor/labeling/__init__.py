"""Reachable-entity labeling (paper, "Reachable Entity Labeling", Algorithm 1) and action labels.

For every distinct training pair ``(o_q, t_q)`` (targets of the training queries in both
directions) this package computes the list ``L`` of ``(entity, hops, latest_time)``: the entities
``e`` that reach ``o_q`` by a *temporal simple path* ``e = x_h -> ... -> x_1 -> x_0 = o_q`` of
``h`` edges, with edge times non-decreasing in the forward direction and all before ``t_q``
(``< t_q`` with ``strict_history``, ``<= t_q`` otherwise), where ``latest_time`` is the latest time
at which such a path can *leave* ``e`` (the time of its first edge), maximised over paths.

Only hops ``1 .. K-1`` are produced (``K = env.max_path_length``): an action label needs
``h < K - k`` with ``k >= 0``, so an entry at hop ``K`` can never make a label positive.

Implementations (one interface, :func:`~raptor.labeling.compute.iter_label_chunks` /
:func:`~raptor.labeling.compute.compute_labels`):

* ``reference`` -- Algorithm 1 as printed: a FIFO queue of ``(entity, time, visited set, hops)``,
  ``SelectTopN`` on the *set* of in-edges ``(e', t')`` with ``t' <= t_cur`` (at the root
  ``t' < t_q`` under ``strict_history``), then the visited filter, then ``IsLatest`` /
  ``RemoveEarlier``. Pure Python; for tests and benchmarks only.
* ``fast`` -- numba kernels run on worker threads (``nogil``): for ``K <= 3`` (hops <= 2) a
  specialised kernel, exact mode incremental over a target's query times; otherwise a general
  depth-first enumeration with the same pruning. With ``max_in_edges = N`` it equals ``reference``
  exactly (same tie-break); with ``None`` it is exact (equals brute-force enumeration of temporal
  simple paths).

``labeling.visited``: Algorithm 1 as printed starts its visited set at ``{o_q}`` (``"target"``, the
default), so a path may run back through the query subject ``e_q``, which the agent can never
revisit. ``"target_and_subject"`` (K <= 3) adds two columns per row -- ``via``, the unique intermediate
of a hop-2 row's latest paths, and ``latest_time_without_via`` -- from which
:func:`~raptor.labeling.actions.action_labels` (given ``query_subject``) and
:meth:`~raptor.labeling.table.LabelTable.get_for_query` give, per query, the labels of
Algorithm 1 with the visited set ``{o_q, e_q}``; the other columns are those of ``"target"``.

``SelectTopN`` tie-break: in-edges are the distinct ``(neighbor, time)`` pairs of the entity
(relations collapse, as in the printed set ``N_in``), ordered by ``(time, neighbor)``; the N kept
are the last N in that order -- latest times first, and among equal times at the cut the larger
entity ids. Visited entities are filtered *after* the selection, so they use up slots (as printed).

Storage: see :func:`~raptor.labeling.store.write_labels` and ``docs/labeling.md``.

Modules, one idea each (lowest first; each imports only those above it):

* :mod:`~raptor.labeling.kernels` -- the numba kernels: exact and pruned hop-2, depth-first, action labels.
* :mod:`~raptor.labeling.table` -- the table in memory (:class:`~raptor.labeling.table.LabelTable`,
  :class:`~raptor.labeling.table.LabelChunk`) and the ``labeling.visited`` modes.
* :mod:`~raptor.labeling.reference` -- Algorithm 1 as printed, per pair and per chunk.
* :mod:`~raptor.labeling.actions` -- action labels of candidate actions, read from a table.
* :mod:`~raptor.labeling.device` -- the same action labels as torch ops on a device copy of a table.
* :mod:`~raptor.labeling.compute` -- the pairs to label and the chunk driver (kernels or reference).
* :mod:`~raptor.labeling.store` -- tables on disk: write, read, content hash, partitions.
* :mod:`~raptor.labeling.stage` -- the ``raptor label`` stage: dataset folder -> label directory.

This file imports nothing: :mod:`raptor.common.provenance` counts a package's ``__init__`` among
the code of every stage that imports one of its modules, so a re-export here would tie pretraining
to the stage's code and the stage to the action labels'.
"""
