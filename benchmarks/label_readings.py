"""Benchmark: the two readings of the paper's N (docs/labeling.md, "The N ambiguity") on the full
training sets of ICEWS14 and ICEWS18 (by default), against the exact label table.

For each dataset (raw splits ingested from ``--data/<dataset>`` into a temporary folder; graph =
the inverse-augmented graph of all ingested quadruples, as the ``raptor label`` stage and the
pipeline's ``graph`` stage build it -- for time-ordered splits this gives the labels of the
training-split graph, which is checked and recorded; pairs = the distinct ``(o_q, t_q)`` of the
training queries in both directions, ``label_pairs``; K = ``env.max_path_length`` = 3, so hops 1..2;
``labeling.visited = target``):

1. the **exact** table (``max_in_edges = None``, strict history ``t < t_q``): rows; distinct
   reachable entities per pair (median, p90 with numpy's linear interpolation, max); share of pairs
   with more than ``--top-entities`` (200) distinct entities;
2. **N in-edges per expansion** (Algorithm 1, ``max_in_edges = --n``, default 200 = the project's
   default): rows kept (count, share of exact rows), ``(pair, entity)`` entries kept as a share of
   the exact ``(pair, entity)`` entries, and the share of kept rows whose ``latest_time`` equals the
   exact table's for the same key ``(target, query_time, entity, hops)`` (a second figure with the
   key ``(target, query_time, entity)`` and the maximum over hops is given for reference); it also
   checks that every kept row is an exact row and never has a later ``latest_time``;
3. the **Appendix-B reading**, ``top-200 reachable entities per pair``: the share of exact
   ``(pair, entity)`` entries a cap of 200 entities per pair would keep,
   ``sum_p min(n_p, 200) / sum_p n_p`` (independent of the ranking used to choose them);
4. the exact table under the **paper-literal history** ``t <= t_q`` (``strict_history = False``):
   rows and distinct entities.

The three tables are computed by the library (``raptor.labeling.compute.iter_label_chunks``), one
labeling thread each, in lock-step over the same chunks of pairs (a fixed ``--pairs-per-chunk``,
chunks never split a target), so no whole table is ever in memory: the statistics are accumulated
per chunk with vectorised numpy (peak RSS 2.6 GB for ICEWS14 + ICEWS18 in one process, by
``/usr/bin/time -v``; ICEWS18's exact table alone would be 2.3 GB, before any join keys).

Writes ``benchmarks/results/label_readings.json`` atomically (a temporary file, then ``os.replace``);
entries of datasets not measured in this run are kept. Each dataset's entry records the code's
commit, the date, the load average and the parameters. Run it at low priority, one thread:

    NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python benchmarks/label_readings.py \\
        [--datasets ICEWS14 ICEWS18] [--data ../shared/data] [--out benchmarks/results/label_readings.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# One thread for numba / BLAS unless the caller says otherwise (set before numpy / numba load).
os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "label_readings.json"
DEFAULT_DATA = ROOT.parent / "shared" / "data"

#: The values docs/labeling.md gave when this script was written (ICEWS14, ICEWS18); compared in the
#: output, never used in a computation. ``None``: not given there.
DOC_VALUES = {
    "ICEWS14": {
        "exact_rows": 25_634_996,
        "entities_per_pair_median": 153, "entities_per_pair_p90": 1_019, "entities_per_pair_max": 3_490,
        "share_pairs_over_cap": 0.440,
        "pruned_rows": 19_239_935, "pruned_rows_share": 0.751,
        "pruned_pair_entity_share": 0.751,
        "pruned_latest_time_equal_share": 0.965,
        "top_entities_pair_entity_share": 0.345,
        "literal_exact_rows": 26_665_962,
    },
    "ICEWS18": {
        "exact_rows": 324_925_454,
        "entities_per_pair_median": 671, "entities_per_pair_p90": 3_584, "entities_per_pair_max": 13_310,
        "share_pairs_over_cap": 0.684,
        "pruned_rows": 173_165_822, "pruned_rows_share": 0.533,
        "pruned_pair_entity_share": 0.531,
        "pruned_latest_time_equal_share": None,
        "top_entities_pair_entity_share": 0.116,
        "literal_exact_rows": 336_704_151,
    },
}


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def code_state() -> dict:
    dirty = [ln[3:] for ln in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    return {
        "commit": git("rev-parse", "HEAD"),
        "modified_tracked_files_under_raptor": sorted(p for p in dirty if p.startswith("raptor/")),
        "modified_tracked_files_under_raptor_labeling": sorted(p for p in dirty if p.startswith("raptor/labeling/")),
    }


class Timed:
    """An iterator that adds up the time spent inside ``next``."""

    def __init__(self, it):
        self.it, self.seconds = iter(it), 0.0

    def __iter__(self):
        return self

    def __next__(self):
        t0 = time.perf_counter()
        try:
            return next(self.it)
        finally:
            self.seconds += time.perf_counter() - t0


def chunk_keys(chunk, num_entities: int, hop_stride: int):
    """Per row of ``chunk``: its pair's index in the chunk, and the sorted int64 keys
    ``(pair, entity, hops)`` and ``(pair, entity)``; per pair: the number of distinct entities."""
    p = len(chunk.counts)
    pid = np.repeat(np.arange(p, dtype=np.int64), chunk.counts)
    ent = chunk.entity.astype(np.int64)
    pe = pid * num_entities + ent
    key = pe * hop_stride + chunk.hops.astype(np.int64)
    if len(key) > 1 and not np.all(np.diff(key) > 0):
        raise AssertionError("rows are not sorted by (pair, entity, hops) and unique")
    first = np.ones(len(pe), dtype=bool)
    first[1:] = pe[1:] != pe[:-1]
    n_ent = np.bincount(pid[first], minlength=p)
    return key, pe, first, n_ent


def dist(x: np.ndarray) -> dict:
    return {
        "median": float(np.median(x)),
        "p90": float(np.percentile(x, 90)),
        "max": int(x.max()),
        "mean": round(float(x.mean()), 3),
        "percentile_method": "numpy linear interpolation (np.percentile default)",
    }


def measure(name: str, raw_root: Path, work: Path, args: argparse.Namespace) -> dict:
    from raptor.config import LabelingConfig, load_params
    from raptor.data.dataset import load_dataset
    from raptor.data.graph import TemporalGraph
    from raptor.data.ingest import IngestOptions, ingest
    from raptor.labeling.compute import ChunkOptions, InAdjacency, iter_label_chunks, label_pairs

    started = time.strftime("%Y-%m-%d %H:%M:%S %z")
    la_start = loadavg()
    wall0 = time.perf_counter()

    # Project defaults, read (not assumed): params.yaml and the dataclass defaults.
    params = load_params(ROOT / "params.yaml")
    defaults = {
        "params_yaml": {"env.max_path_length": params.env.max_path_length,
                        "labeling.max_in_edges": params.labeling.max_in_edges,
                        "labeling.strict_history": params.labeling.strict_history,
                        "labeling.visited": params.labeling.visited},
        "LabelingConfig()": {"max_in_edges": LabelingConfig().max_in_edges,
                             "strict_history": LabelingConfig().strict_history,
                             "visited": LabelingConfig().visited},
    }
    K = args.max_path_length
    N = args.n
    cap = args.top_entities

    t0 = time.perf_counter()
    data_dir = work / name
    ingest(raw_root / name, data_dir, IngestOptions(dataset=name))
    ds = load_dataset(data_dir)
    train = ds.splits["train"]
    graph = TemporalGraph.from_quadruples(ds.all_quadruples(), ds.num_entities, ds.num_relations)
    targets, times = label_pairs(train)
    adj = InAdjacency.from_graph(graph)
    prep_s = time.perf_counter() - t0
    later = [s for s in ("valid", "test") if len(ds.splits[s])]
    min_later = min(int(ds.splits[s][:, 3].min()) for s in later) if later else None
    train_max = int(train[:, 3].max())

    configs = {
        "exact": LabelingConfig(max_in_edges=None, strict_history=True, workers=1, visited="target"),
        "pruned": LabelingConfig(max_in_edges=N, strict_history=True, workers=1, visited="target"),
        "literal_exact": LabelingConfig(max_in_edges=None, strict_history=False, workers=1, visited="target"),
    }
    options = ChunkOptions(pairs_per_chunk=args.pairs_per_chunk, adjacency=adj)
    iters = {k: Timed(iter_label_chunks(graph, targets, times, max_path_length=K, config=c, options=options))
             for k, c in configs.items()}

    E = graph.num_entities
    hs = K  # hops run 1..K-1 < K
    acc = {k: 0 for k in ("exact_rows", "pruned_rows", "literal_rows", "exact_pe", "pruned_pe", "literal_pe",
                          "pruned_rows_in_exact", "pruned_rows_lt_equal", "pruned_rows_lt_later",
                          "pruned_pe_lt_equal", "top_cap_pe", "pairs")}
    hops_rows = {k: np.zeros(K, np.int64) for k in configs}
    n_ent_exact, n_ent_pruned, n_ent_literal = [], [], []
    n_chunks = 0
    for ex, pr, li in zip(iters["exact"], iters["pruned"], iters["literal_exact"]):
        n_chunks += 1
        for other in (pr, li):
            if not (np.array_equal(ex.pair_target, other.pair_target) and np.array_equal(ex.pair_time, other.pair_time)):
                raise AssertionError("the three runs' chunks do not hold the same pairs")
        ke, pe_e, first_e, ne = chunk_keys(ex, E, hs)
        kp, pe_p, first_p, npr = chunk_keys(pr, E, hs)
        _, _, _, nl = chunk_keys(li, E, hs)
        n_ent_exact.append(ne)
        n_ent_pruned.append(npr)
        n_ent_literal.append(nl)
        for k, ch in (("exact", ex), ("pruned", pr), ("literal_exact", li)):
            hops_rows[k] += np.bincount(ch.hops.astype(np.int64), minlength=K)[:K]
        acc["pairs"] += len(ex.counts)
        acc["exact_rows"] += len(ke)
        acc["pruned_rows"] += len(kp)
        acc["literal_rows"] += len(li.entity)
        acc["exact_pe"] += int(ne.sum())
        acc["pruned_pe"] += int(npr.sum())
        acc["literal_pe"] += int(nl.sum())
        acc["top_cap_pe"] += int(np.minimum(ne, cap).sum())
        # Row key (pair, entity, hops): the pruned row's exact counterpart.
        idx = np.minimum(np.searchsorted(ke, kp), max(len(ke) - 1, 0))
        found = (ke[idx] == kp) if len(ke) else np.zeros(len(kp), bool)
        lat_e = ex.latest_time.astype(np.int64)
        lat_p = pr.latest_time.astype(np.int64)
        acc["pruned_rows_in_exact"] += int(found.sum())
        acc["pruned_rows_lt_equal"] += int((found & (lat_e[idx] == lat_p)).sum())
        acc["pruned_rows_lt_later"] += int((found & (lat_p > lat_e[idx])).sum())
        # Key (pair, entity), latest_time = max over hops.
        if len(kp):
            ue, up = np.flatnonzero(first_e), np.flatnonzero(first_p)
            max_e = np.maximum.reduceat(lat_e, ue)
            max_p = np.maximum.reduceat(lat_p, up)
            j = np.minimum(np.searchsorted(pe_e[ue], pe_p[up]), len(ue) - 1)
            acc["pruned_pe_lt_equal"] += int(((pe_e[ue][j] == pe_p[up]) & (max_e[j] == max_p)).sum())
        if args.progress and n_chunks % 10 == 0:
            print(f"  {name}: {acc['pairs']:,}/{len(targets):,} pairs, exact rows {acc['exact_rows']:,}, "
                  f"{time.perf_counter() - wall0:.0f} s", file=sys.stderr, flush=True)

    ne_all = np.concatenate(n_ent_exact)
    np_all = np.concatenate(n_ent_pruned)
    nl_all = np.concatenate(n_ent_literal)
    if acc["pairs"] != len(targets):
        raise AssertionError(f"labeled {acc['pairs']} pairs of {len(targets)}")
    x, p = acc["exact_rows"], acc["pruned_rows"]
    result = {
        "dataset": name,
        "code": code_state(),
        "started": started,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "loadavg_start": la_start,
        "loadavg_end": loadavg(),
        "wall_s": round(time.perf_counter() - wall0, 1),
        "prepare_s": round(prep_s, 1),
        "compute_s": {k: round(it.seconds, 1) for k, it in iters.items()},
        "peak_rss_mb_so_far": peak_rss_mb(),
        "parameters": {
            "max_path_length_K": K,
            "hops": list(range(1, K)),
            "pruned_max_in_edges_N": N,
            "appendix_b_top_entities_per_pair": cap,
            "strict_history_default": True,
            "visited": "target",
            "implementation": "fast",
            "labeling_workers": 1,
            "pairs_per_chunk": args.pairs_per_chunk,
            "chunks": n_chunks,
            "NUMBA_NUM_THREADS": os.environ.get("NUMBA_NUM_THREADS"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "raw_dir": str((raw_root / name).resolve()),
            "project_defaults": defaults,
        },
        "graph": {
            "built_from": "all ingested splits (TemporalGraph.from_quadruples(ds.all_quadruples())), "
                          "as raptor label / the pipeline's graph stage; inverse-augmented",
            "entities": int(E),
            "relations": int(ds.num_relations),
            "edges_with_inverses": int(graph.num_edges),
            "train_quadruples": int(len(train)),
            "train_max_time": train_max,
            "valid_test_min_time": min_later,
            "equals_train_split_graph_for_these_labels": bool(min_later is None or min_later > train_max),
            "note": "every label uses edges with time <= t_q <= train_max_time only, so when valid/test "
                    "start after train_max_time the labels equal those of the training-split graph",
        },
        "pairs": int(acc["pairs"]),
        "exact": {
            "rows": x,
            "rows_by_hops": {str(h): int(hops_rows["exact"][h]) for h in range(1, K)},
            "pair_entity_entries": acc["exact_pe"],
            "distinct_entities_per_pair": dist(ne_all),
            "pairs_with_no_row": int((ne_all == 0).sum()),
            f"pairs_over_{cap}_entities": int((ne_all > cap).sum()),
            f"share_pairs_over_{cap}_entities": round(float((ne_all > cap).mean()), 6),
        },
        f"per_expansion_N{N}": {
            "reading": "Algorithm 1: each expansion keeps the N most recent in-edges (max_in_edges = N)",
            "rows": p,
            "rows_share_of_exact": round(p / x, 6),
            "rows_by_hops": {str(h): int(hops_rows["pruned"][h]) for h in range(1, K)},
            "pair_entity_entries": acc["pruned_pe"],
            "pair_entity_entries_share_of_exact": round(acc["pruned_pe"] / acc["exact_pe"], 6),
            "distinct_entities_per_pair": dist(np_all),
            "rows_found_in_exact": acc["pruned_rows_in_exact"],
            "rows_with_later_latest_time_than_exact": acc["pruned_rows_lt_later"],
            "latest_time_equal": {
                "key": "(target, query_time, entity, hops): the same pair, entity and hop count",
                "rows": acc["pruned_rows_lt_equal"],
                "share_of_kept_rows": round(acc["pruned_rows_lt_equal"] / p, 6),
            },
            "latest_time_equal_by_pair_entity": {
                "key": "(target, query_time, entity), latest_time = max over hops in each table; "
                       "share of kept (pair, entity) entries",
                "entries": acc["pruned_pe_lt_equal"],
                "share_of_kept_entries": round(acc["pruned_pe_lt_equal"] / acc["pruned_pe"], 6),
            },
        },
        f"top_{cap}_entities_per_pair": {
            "reading": "Appendix B: L capped at the top-N reachable entities per pair (any ranking)",
            "pair_entity_entries_kept": acc["top_cap_pe"],
            "pair_entity_entries_share_of_exact": round(acc["top_cap_pe"] / acc["exact_pe"], 6),
            "formula": f"sum over pairs of min(n_entities, {cap}) / sum over pairs of n_entities (exact table)",
        },
        "paper_literal_history_exact": {
            "strict_history": False,
            "history": "t <= t_q at the root (Algorithm 1's N_in as printed)",
            "rows": acc["literal_rows"],
            "rows_by_hops": {str(h): int(hops_rows["literal_exact"][h]) for h in range(1, K)},
            "rows_vs_strict": round(acc["literal_rows"] / x, 6),
            "pair_entity_entries": acc["literal_pe"],
            "distinct_entities_per_pair": dist(nl_all),
        },
    }
    result["compared_with_docs"] = compare(name, result, N, cap)
    return result


def compare(name: str, r: dict, N: int, cap: int) -> dict:
    """The doc's value, ours (rounded as the doc rounds it) and whether they agree."""
    doc = DOC_VALUES.get(name)
    if doc is None or N != 200 or cap != 200:
        return {}
    ex, pr, top = r["exact"], r[f"per_expansion_N{N}"], r[f"top_{cap}_entities_per_pair"]
    d = ex["distinct_entities_per_pair"]
    ours = {
        "exact_rows": ex["rows"],
        "entities_per_pair_median": round(d["median"]),
        "entities_per_pair_p90": round(d["p90"]),
        "entities_per_pair_max": d["max"],
        "share_pairs_over_cap": round(ex[f"share_pairs_over_{cap}_entities"], 3),
        "pruned_rows": pr["rows"],
        "pruned_rows_share": round(pr["rows_share_of_exact"], 3),
        "pruned_pair_entity_share": round(pr["pair_entity_entries_share_of_exact"], 3),
        "pruned_latest_time_equal_share": round(pr["latest_time_equal"]["share_of_kept_rows"], 3),
        "top_entities_pair_entity_share": round(top["pair_entity_entries_share_of_exact"], 3),
        "literal_exact_rows": r["paper_literal_history_exact"]["rows"],
    }
    note = "doc values from docs/labeling.md; shares compared at the doc's precision (0.1 %)"
    return {"note": note, **{k: {"doc": doc[k], "ours": v, "agree": None if doc[k] is None else bool(doc[k] == v)}
                             for k, v in ours.items()}}


def write_atomic(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(payload, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run: NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python benchmarks/label_readings.py",
    )
    ap.add_argument("--datasets", nargs="+", default=["ICEWS14", "ICEWS18"], help="raw dataset folders under --data")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA,
                    help="raw data root (default: ../shared/data relative to the repository, %(default)s)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="result JSON (default: %(default)s)")
    ap.add_argument("--n", type=int, default=200, help="max_in_edges of the per-expansion reading (default 200)")
    ap.add_argument("--top-entities", type=int, default=200,
                    help="entities per pair of the Appendix-B reading, and the 'more than' threshold (default 200)")
    ap.add_argument("--max-path-length", type=int, default=3, help="K (default 3): hops 1..K-1")
    ap.add_argument("--pairs-per-chunk", type=int, default=4096,
                    help="pairs per labeled chunk (the three runs use the same chunks; default 4096)")
    ap.add_argument("--progress", action="store_true", help="print progress to stderr")
    args = ap.parse_args()

    out: dict = {}
    if args.out.exists():
        try:
            out = json.loads(args.out.read_text())
        except json.JSONDecodeError:
            out = {}
    out.setdefault("datasets", {})
    out["description"] = ("N readings of the paper vs. the exact reachable-entity labels "
                          "(docs/labeling.md, 'The N ambiguity'); benchmarks/label_readings.py")
    out["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                      "numpy": np.__version__}
    with tempfile.TemporaryDirectory(prefix="label-readings-") as work:
        for name in args.datasets:
            print(f"{name} ...", file=sys.stderr, flush=True)
            res = measure(name, args.data, Path(work), args)
            out["datasets"][name] = res
            out["written"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
            out["peak_rss_mb"] = peak_rss_mb()
            write_atomic(args.out, out)
            summary = {k: v for k, v in res["compared_with_docs"].items() if k != "note"}
            print(json.dumps({"dataset": name, "wall_s": res["wall_s"], "peak_rss_mb": peak_rss_mb(),
                              "compared_with_docs": summary}, indent=1), flush=True)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
