"""The inverse-augmented temporal graph as CSR arrays, with a vectorised time-window query.

For every quadruple ``(s, r, o, t)`` the graph holds the edge ``s -r-> o`` at ``t`` and its inverse
``o -(r+R)-> s`` at ``t`` (paper, Preliminaries). Edges are grouped by source entity (CSR) and
sorted inside each group by ``(time, relation, neighbor)``, so:

* the out-edges of ``e`` in a half-open time window ``[lo, hi)`` are one contiguous slice, found by
  two ``searchsorted`` calls on a composite ``(entity, time)`` key for a whole batch at once;
* "the N most recent candidates" are the last N positions of that slice;
* because every edge has its inverse, the out-edges of ``e`` are also its in-edges (with the
  inverse relation), which is what backward reachability labeling needs.

The same graph serves training and evaluation; the history restriction of the paper
(``H = {t < t_q}``) is applied by the window's upper bound, never by building a per-split graph.
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from raptor.constants import ID_DTYPE, inverse_relation
from raptor.common.io import atomic_path

GRAPH_FORMAT_VERSION = 1


@dataclass(frozen=True, eq=False)
class TemporalGraph:
    """CSR temporal multigraph.

    Attributes:
        indptr: int32 ``[E + 1]``; the out-edges of entity ``e`` are positions
            ``indptr[e]:indptr[e+1]``.
        relation: int32 ``[M]`` relation id of each edge (inverse relations are ``r + R``).
        neighbor: int32 ``[M]`` target entity of each edge.
        time: int32 ``[M]`` timestamp (day index, earliest = 0) of each edge.
        num_entities: ``E``.
        num_relations: ``R``, the number of forward relations (ids ``< 2R`` occur in edges).
    """

    indptr: np.ndarray
    relation: np.ndarray
    neighbor: np.ndarray
    time: np.ndarray
    num_entities: int
    num_relations: int
    _key: np.ndarray = field(init=False, repr=False)
    _stride: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        m = len(self.relation)
        if not (len(self.neighbor) == len(self.time) == m):
            raise ValueError("relation, neighbor and time must have the same length")
        if len(self.indptr) != self.num_entities + 1 or self.indptr[-1] != m:
            raise ValueError("indptr must have num_entities + 1 entries ending at the number of edges")
        max_time = int(self.time.max()) if m else 0
        # stride > max_time + 1 so that hi = max_time + 1 still maps inside the entity's key range.
        stride = max_time + 2
        source = np.repeat(np.arange(self.num_entities, dtype=np.int64), np.diff(self.indptr))
        key = source * stride + self.time.astype(np.int64)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_stride", stride)

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_quadruples(cls, quads: np.ndarray, num_entities: int, num_relations: int) -> "TemporalGraph":
        """Build the augmented graph from int ``[n, 4]`` quadruples ``(s, r, o, t)``.

        Returns a graph with ``2n`` edges: every quadruple and its inverse.
        """
        quads = np.asarray(quads)
        if quads.ndim != 2 or quads.shape[1] != 4:
            raise ValueError(f"quadruples must have shape [n, 4], got {quads.shape}")
        s, r, o, t = (quads[:, i].astype(np.int64) for i in range(4))
        src = np.concatenate([s, o])
        rel = np.concatenate([r, inverse_relation(r, num_relations)])
        dst = np.concatenate([o, s])
        tim = np.concatenate([t, t])
        # Sort by (source, time, relation, neighbor): lexsort's last key is the primary one.
        order = np.lexsort((dst, rel, tim, src))
        counts = np.bincount(src, minlength=num_entities)
        indptr = np.zeros(num_entities + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return cls(
            indptr=indptr.astype(ID_DTYPE),
            relation=rel[order].astype(ID_DTYPE),
            neighbor=dst[order].astype(ID_DTYPE),
            time=tim[order].astype(ID_DTYPE),
            num_entities=int(num_entities),
            num_relations=int(num_relations),
        )

    # ---------------------------------------------------------------- queries

    @property
    def num_edges(self) -> int:
        return int(len(self.relation))

    @property
    def max_time(self) -> int:
        return self._stride - 2

    def degree(self) -> np.ndarray:
        """int64 ``[E]`` out-degree (= in-degree) of every entity over all times."""
        return np.diff(self.indptr.astype(np.int64))

    def window(self, entities, lo, hi) -> tuple[np.ndarray, np.ndarray]:
        """Edge slices of ``entities`` with ``lo <= time < hi`` (half-open), for a whole batch.

        Args:
            entities: int array ``[B]`` (any shape; broadcast with ``lo`` and ``hi``).
            lo, hi: int arrays or scalars, the window bounds in time steps.

        Returns:
            ``(start, stop)`` int64 arrays of the broadcast shape: the matching edges of
            ``entities[i]`` are positions ``start[i]:stop[i]``, ordered by time (latest last).
            An empty window (including ``lo >= hi``) gives ``start == stop``.
        """
        e, lo, hi = np.broadcast_arrays(
            np.asarray(entities, dtype=np.int64), np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
        )
        if e.size and (e.min() < 0 or e.max() >= self.num_entities):
            bad = e[(e < 0) | (e >= self.num_entities)].flat[0]
            raise IndexError(f"entity id {bad} outside [0, {self.num_entities})")
        top = self._stride - 1
        base = e * self._stride
        start = np.searchsorted(self._key, base + np.clip(lo, 0, top), side="left")
        stop = np.searchsorted(self._key, base + np.clip(hi, 0, top), side="left")
        return start, np.maximum(start, stop)

    def before(self, entities, t) -> tuple[np.ndarray, np.ndarray]:
        """Edge slices of ``entities`` with ``time < t``: the paper's history ``H`` for a query at ``t``."""
        return self.window(entities, 0, t)

    # ---------------------------------------------------------------- persistence

    def save(self, path: str | Path) -> None:
        """Write one ``.npz`` (uncompressed, so it can be memory-mapped cheaply), atomically."""
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(
                    fh,
                    format_version=np.int32(GRAPH_FORMAT_VERSION),
                    indptr=self.indptr,
                    relation=self.relation,
                    neighbor=self.neighbor,
                    time=self.time,
                    num_entities=np.int64(self.num_entities),
                    num_relations=np.int64(self.num_relations),
                )

    @classmethod
    def load(cls, path: str | Path) -> "TemporalGraph":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"graph file not found: {path} (run `raptor graph` first)")
        arrays = _read_graph_arrays(path)
        version = int(arrays["format_version"]) if "format_version" in arrays else -1
        if version != GRAPH_FORMAT_VERSION:
            raise ValueError(
                f"{path}: graph format version {version}, expected {GRAPH_FORMAT_VERSION}"
                " (rebuild it with `raptor graph`)"
            )
        missing = [k for k in _GRAPH_KEYS if k not in arrays]
        if missing:
            raise _unreadable(path, f"no {', '.join(missing)} array")
        try:
            return cls(
                indptr=arrays["indptr"],
                relation=arrays["relation"],
                neighbor=arrays["neighbor"],
                time=arrays["time"],
                num_entities=int(arrays["num_entities"]),
                num_relations=int(arrays["num_relations"]),
            )
        except (ValueError, TypeError, IndexError) as exc:
            raise _unreadable(path, _reason(exc)) from None


_GRAPH_KEYS = ("indptr", "relation", "neighbor", "time", "num_entities", "num_relations")


def _read_graph_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path``, read eagerly; pickled (object) data is never loaded.

    Raises ``ValueError`` naming ``path`` for anything that is not a readable ``.npz`` archive of
    plain arrays (truncated, not a zip, a lone ``.npy``, object arrays).
    """
    try:
        loaded = np.load(path, allow_pickle=False)
    except ValueError as exc:  # neither zip nor .npy: numpy would only try to unpickle it
        if "pickle" not in str(exc):
            raise _unreadable(path, _reason(exc)) from None
        raise _unreadable(path, "not an .npz archive") from None
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
        raise _unreadable(path, _reason(exc)) from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise _unreadable(path, "a single .npy array, not an .npz archive")
    with loaded as z:
        try:
            return {key: z[key] for key in z.files}
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, KeyError, ValueError) as exc:
            raise _unreadable(path, _reason(exc)) from None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "pickle" in text or "Object arrays" in text:
        return "it holds object arrays (pickled Python objects), which are never loaded"
    return text


def _unreadable(path: Path, what: str) -> ValueError:
    return ValueError(f"{path}: not a readable graph file ({what}); rebuild it with `raptor graph`")


def build_graph(data_dir: str | Path, out_path: str | Path) -> dict:
    """Build the augmented graph from all three ingested splits and save it to ``out_path``.

    Returns a summary dict (entities, relations, quadruples, edges, max_time, seconds).
    """
    import time as _time

    from raptor.data.dataset import load_dataset

    started = _time.perf_counter()
    ds = load_dataset(data_dir)
    quads = ds.all_quadruples()
    graph = TemporalGraph.from_quadruples(quads, ds.num_entities, ds.num_relations)
    graph.save(out_path)
    return {
        "dataset": ds.meta.get("dataset"),
        "num_entities": graph.num_entities,
        "num_relations": graph.num_relations,
        "num_quadruples": int(len(quads)),
        "num_edges": graph.num_edges,
        "max_time": graph.max_time,
        "seconds": round(_time.perf_counter() - started, 3),
    }
