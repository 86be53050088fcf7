"""Label tables on disk: the format (:func:`write_labels`, :func:`load_label_table`), the hash of
what a table holds (:func:`label_table_hash`), and partitions -- the same table labeled in
independent parts, then merged (:func:`write_label_part`, :func:`merge_label_parts`,
:class:`PartitionedLabels`). Layout and measurements: ``docs/labeling.md``."""

from __future__ import annotations

import json
import os
import time as _time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raptor.common.io import atomic_dir, atomic_write_json, read_json_object
from raptor.config import LabelingConfig
from raptor.data.graph import TemporalGraph
from raptor.labeling.compute import ChunkOptions, iter_label_chunks, resolve_workers
from raptor.labeling.table import VISITED_SUBJECT, VISITED_TARGET, LabelTable, _time_dtype

LABEL_FORMAT_VERSION = 1
#: Format 2 = format 1 plus the ``VIA_COLUMNS`` (written only with ``visited = "target_and_subject"``,
#: so that a reader that knows only format 1 refuses such a table instead of misreading it).
LABEL_FORMAT_VERSION_VIA = 2
LABEL_FORMAT_VERSIONS = (LABEL_FORMAT_VERSION, LABEL_FORMAT_VERSION_VIA)
LABEL_COLUMNS: tuple[str, ...] = ("target", "query_time", "entity", "hops", "latest_time")
VIA_COLUMNS: tuple[str, ...] = ("via", "latest_time_without_via")
LABELS_FILE = "labels.parquet"
PAIRS_FILE = "pairs.parquet"
SUMMARY_FILE = "summary.json"
#: Summary fields that say how or where a table was computed, not what it holds: a table labeled
#: again from the same inputs differs in these only, so :func:`label_table_hash` leaves them out.
RUN_SUMMARY_KEYS = ("wall_time_s", "stage_wall_time_s", "part_wall_time_s", "workers", "data_dir")


def is_label_dir(directory: Path) -> bool:
    """Whether ``directory`` holds a label table (its ``summary.json`` says how many pairs, rows and
    hops): what writing a table there again may replace."""
    try:
        summary = json.loads((directory / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and {"pairs", "rows", "max_path_length"} <= summary.keys()


@dataclass(frozen=True)
class WriteOptions:
    """How :func:`write_labels` / :func:`write_label_part` write; none of it changes the table.

    ``progress(n)``: called with the pairs finished per chunk; ``compression_level``: zstd level of
    ``labels.parquet``; ``extra_summary``: more keys for ``summary.json`` (:func:`write_labels`);
    ``input_hash``: the hash of the inputs a part is labeled from (:func:`write_label_part`: a part
    already there is kept only when it matches)."""

    progress: Optional[Callable[[int], None]] = None
    compression_level: int = 1
    extra_summary: Optional[dict] = None
    input_hash: Optional[str] = None


def _parquet_writer(path: Path, schema: pa.Schema, compression_level: int) -> pq.ParquetWriter:
    return pq.ParquetWriter(
        path,
        schema,
        compression="zstd",
        compression_level=compression_level,
        # Plain encoding + zstd: measured on ICEWS14 exact, this is both the smallest (17 MB for
        # 25.6M rows, vs 33 MB with dictionary / delta encodings) and the fastest to write.
        use_dictionary=False,
        write_statistics=["target", "query_time"],
    )


LABEL_SCHEMA = pa.schema([(c, pa.int32()) for c in LABEL_COLUMNS])
LABEL_SCHEMA_VIA = pa.schema([(c, pa.int32()) for c in LABEL_COLUMNS + VIA_COLUMNS])
PAIR_SCHEMA = pa.schema(
    [("target", pa.int32()), ("query_time", pa.int32()), ("row_start", pa.int64()), ("num_rows", pa.int32())]
)


def _rows_per_pair(counts: np.ndarray) -> dict[str, float]:
    """Quantiles ``q0 q50 q90 q99 q100`` and the mean of the rows per pair (summary.json)."""
    out = {f"q{int(q * 100)}": float(np.quantile(counts, q)) if len(counts) else 0.0 for q in (0.0, 0.5, 0.9, 0.99, 1.0)}
    out["mean"] = float(counts.mean()) if len(counts) else 0.0
    return out


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def write_labels(
    out_dir: str | Path,
    graph: TemporalGraph,
    targets: np.ndarray,
    query_times: np.ndarray,
    *,
    max_path_length: int,
    config: LabelingConfig = LabelingConfig(),
    options: WriteOptions = WriteOptions(),
) -> dict:
    """Label the pairs and write ``out_dir`` atomically; returns the summary (``options``:
    :class:`WriteOptions`; its ``input_hash`` is not read here).

    Layout of ``out_dir``:

    * ``labels.parquet``: int32 ``target, query_time, entity, hops, latest_time``, sorted by
      ``(target, query_time, entity, hops)``; plain encoding + zstd (level 1), which on this
      sorted data beat dictionary and delta encodings in both size and speed; one row group per
      computed chunk (whole targets), with min/max statistics on target and query_time.
    * ``pairs.parquet``: every labeled pair with ``row_start`` and ``num_rows`` (pairs with an
      empty ``L`` appear here only) -- the loader builds the CSR from it without decoding the
      ``target`` / ``query_time`` columns.
    * ``summary.json``: counts, rows-per-pair quantiles, bytes, mode, wall time, parameters.

    With ``config.visited = "target_and_subject"``, ``labels.parquet`` has two more int32 columns,
    ``via`` and ``latest_time_without_via`` (:func:`reference_labels_via`), and the summary says
    ``format_version`` 2; otherwise the files are those of format 1.
    """
    t0 = _time.perf_counter()
    compression_level, extra_summary = options.compression_level, options.extra_summary
    out_dir = Path(out_dir)
    mode = "exact" if config.max_in_edges is None else f"top{config.max_in_edges}"
    track = config.visited == VISITED_SUBJECT
    schema = LABEL_SCHEMA_VIA if track else LABEL_SCHEMA
    pair_t: list[np.ndarray] = []
    pair_q: list[np.ndarray] = []
    pair_c: list[np.ndarray] = []
    max_time = 0
    with atomic_dir(out_dir, is_label_dir, "a label table") as tmp:
        writer = _parquet_writer(tmp / LABELS_FILE, schema, compression_level)
        try:
            for ch in iter_label_chunks(graph, targets, query_times, max_path_length=max_path_length, config=config,
                                        options=ChunkOptions(progress=options.progress)):
                pair_t.append(ch.pair_target)
                pair_q.append(ch.pair_time)
                pair_c.append(ch.counts)
                if len(ch.entity) == 0:
                    continue
                max_time = max(max_time, int(ch.latest_time.max()))
                cols = [
                    pa.array(np.repeat(ch.pair_target, ch.counts)),
                    pa.array(np.repeat(ch.pair_time, ch.counts)),
                    pa.array(ch.entity),
                    pa.array(ch.hops.astype(np.int32)),
                    pa.array(ch.latest_time),
                ]
                if track:
                    cols += [pa.array(ch.via), pa.array(ch.latest_time_without_via)]
                batch = pa.record_batch(cols, schema=schema)
                writer.write_batch(batch, row_group_size=max(len(ch.entity), 1))
        finally:
            writer.close()
        p_t = np.concatenate(pair_t) if pair_t else np.zeros(0, np.int32)
        p_q = np.concatenate(pair_q) if pair_q else np.zeros(0, np.int32)
        p_c = np.concatenate(pair_c) if pair_c else np.zeros(0, np.int64)
        starts = np.zeros(len(p_c), np.int64)
        if len(p_c):
            np.cumsum(p_c[:-1], out=starts[1:])
        pq.write_table(
            pa.table(
                [pa.array(p_t), pa.array(p_q), pa.array(starts), pa.array(p_c.astype(np.int32))], schema=PAIR_SCHEMA
            ),
            tmp / PAIRS_FILE,
            compression="zstd",
        )
        rows = int(p_c.sum())
        quant = _rows_per_pair(p_c)
        summary = {
            "format_version": LABEL_FORMAT_VERSION_VIA if track else LABEL_FORMAT_VERSION,
            "pairs": int(len(p_c)),
            "rows": rows,
            "rows_per_pair": quant,
            "mode": mode,
            "visited": config.visited,
            "max_in_edges": config.max_in_edges,
            "strict_history": config.strict_history,
            "implementation": config.implementation,
            "workers": resolve_workers(config.workers),
            "max_path_length": int(max_path_length),
            "max_hops": int(max_path_length) - 1,
            "num_entities": int(graph.num_entities),
            "num_relations": int(graph.num_relations),
            "max_latest_time": int(max_time),
            "tie_break": "SelectTopN keeps the last N distinct (neighbor, time) in-edges in (time, neighbor) order",
        }
        if extra_summary:
            summary.update(extra_summary)
        summary["bytes_on_disk"] = _dir_bytes(tmp)
        summary["wall_time_s"] = round(_time.perf_counter() - t0, 3)
        atomic_write_json(tmp / SUMMARY_FILE, summary)
    return summary


def label_table_hash(directory: str | Path) -> str:
    """SHA-256 of what the label table in ``directory`` holds: its files as
    :func:`raptor.common.provenance.content_hash` hashes them, except that each ``summary.json`` is hashed
    without its :data:`RUN_SUMMARY_KEYS`. The Parquet files are written deterministically, so
    labeling the same pairs again (another run, another number of workers) hashes alike and a
    pretraining run that read the table continues instead of starting afresh."""
    import hashlib

    from raptor.common.provenance import _file_digest, content_hash

    def digest(f: Path) -> str:
        if f.name != SUMMARY_FILE:
            return _file_digest(f)
        summary = {k: v for k, v in json.loads(f.read_text()).items() if k not in RUN_SUMMARY_KEYS}
        return hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest()

    _check_label_dir(Path(directory))
    return content_hash(directory, file_digest=digest)


def _check_label_dir(directory: Path) -> dict:
    if not directory.is_dir():
        raise FileNotFoundError(f"label directory not found: {directory} (run `raptor label` first)")
    summary_path = directory / SUMMARY_FILE
    if not summary_path.exists():
        raise FileNotFoundError(f"{summary_path} not found: {directory} is not a label directory")
    summary = read_json_object(summary_path, "re-run `raptor label`")
    if summary.get("format_version") not in LABEL_FORMAT_VERSIONS:
        raise ValueError(
            f"{summary_path}: label format version {summary.get('format_version')}, expected one of "
            f"{list(LABEL_FORMAT_VERSIONS)}"
        )
    visited = summary.setdefault("visited", VISITED_TARGET)  # tables written before the option: {o_q}
    if (visited == VISITED_SUBJECT) != (summary["format_version"] == LABEL_FORMAT_VERSION_VIA):
        raise ValueError(f"{summary_path}: visited = {visited!r} does not match label format version "
                         f"{summary['format_version']} (the via columns come with format {LABEL_FORMAT_VERSION_VIA})")
    names = (PAIRS_FILE, LABELS_FILE) if not summary.get("parts") else ()
    for name in names:
        if not (directory / name).exists():
            raise FileNotFoundError(f"{directory / name} not found: {directory} is not a label directory")
    return summary


@contextmanager
def _label_file(path: Path):
    """Turn a failure to read the Parquet file ``path`` (truncated, corrupted, not Parquet, missing
    columns) into a ``ValueError`` that names it."""
    try:
        yield
    except (pa.ArrowException, OSError, KeyError) as exc:
        what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: not a readable label file ({what}); re-run `raptor label`") from None


def load_label_table(directory: str | Path) -> LabelTable:
    """Read a directory written by :func:`write_labels` (or :func:`merge_label_parts`) into a
    :class:`LabelTable`.

    Reads row group by row group into preallocated arrays (int32 entity, int8 hops, int16 time),
    so the peak memory is the final table plus one row group. A partitioned directory's parts
    cover disjoint, increasing target ranges, so their tables concatenate in order.
    """
    directory = Path(directory)
    summary = _check_label_dir(directory)
    parts = [directory / name for name in summary["parts"]] if summary.get("parts") else [directory]
    pair_cols: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    files = []
    for part in parts:
        if part != directory:
            _check_label_dir(part)
        with _label_file(part / PAIRS_FILE):
            pairs = pq.read_table(part / PAIRS_FILE, columns=["target", "query_time", "num_rows"])
        p_c = pairs.column("num_rows").to_numpy().astype(np.int64)
        with _label_file(part / LABELS_FILE):
            pf = pq.ParquetFile(part / LABELS_FILE)
        if pf.metadata.num_rows != int(p_c.sum()):
            raise ValueError(f"{part}: {LABELS_FILE} has {pf.metadata.num_rows} rows, {PAIRS_FILE} says {int(p_c.sum())}")
        pair_cols.append((pairs.column("target").to_numpy().astype(np.int32),
                          pairs.column("query_time").to_numpy().astype(np.int32), p_c))
        files.append((part / LABELS_FILE, pf))
    p_t = np.concatenate([c[0] for c in pair_cols])
    p_q = np.concatenate([c[1] for c in pair_cols])
    p_c = np.concatenate([c[2] for c in pair_cols])
    ptr = np.zeros(len(p_c) + 1, np.int64)
    np.cumsum(p_c, out=ptr[1:])
    n_rows = int(ptr[-1])
    tdt = _time_dtype(int(summary.get("max_latest_time", np.iinfo(np.int32).max - 1)))
    ent = np.empty(n_rows, np.int32)
    hop = np.empty(n_rows, np.int8)
    lat = np.empty(n_rows, tdt)
    track = summary["visited"] == VISITED_SUBJECT
    via_cols = {"via": np.empty(n_rows, np.int32), "latest_time_without_via": np.empty(n_rows, tdt)} if track else {}
    columns = ["entity", "hops", "latest_time"] + (list(VIA_COLUMNS) if track else [])
    pos = 0
    for path, pf in files:
        for g in range(pf.num_row_groups):
            with _label_file(path):
                rg = pf.read_row_group(g, columns=columns)
            m = rg.num_rows
            ent[pos : pos + m] = rg.column("entity").to_numpy()
            hop[pos : pos + m] = rg.column("hops").to_numpy()
            lat[pos : pos + m] = rg.column("latest_time").to_numpy()
            for name, arr in via_cols.items():
                arr[pos : pos + m] = rg.column(name).to_numpy()
            pos += m
    return LabelTable(
        pair_target=p_t,
        pair_time=p_q,
        pair_ptr=ptr,
        entity=ent,
        hops=hop,
        latest_time=lat,
        num_entities=int(summary["num_entities"]),
        max_path_length=int(summary["max_path_length"]),
        strict_history=bool(summary["strict_history"]),
        max_in_edges=summary.get("max_in_edges"),
        meta=summary,
        **via_cols,
    )


# ============================================================================================
# Partitions: the same table computed in independent parts (other processes or machines)
# ============================================================================================


#: A part's folder name inside a partitioned label directory (and its staging folder).
PART_NAME = "part-{:05d}"


def part_target_ranges(targets: np.ndarray, num_entities: int, num_parts: int) -> list[tuple[int, int]]:
    """``num_parts`` half-open target-id ranges covering ``[0, num_entities)``, cut at target
    boundaries so that each holds about the same number of pairs (``targets``: the pairs' targets).
    A part may be empty when one target holds more than a part's share."""
    if num_parts < 1:
        raise ValueError(f"num_parts must be >= 1, got {num_parts}")
    per_target = np.bincount(np.asarray(targets, np.int64), minlength=num_entities)
    cum = np.cumsum(per_target)
    total = int(cum[-1]) if len(cum) else 0
    cuts = [0]
    for k in range(1, num_parts):
        cuts.append(max(int(np.searchsorted(cum, total * k / num_parts, side="left")) + 1, cuts[-1]))
    cuts.append(num_entities)
    cuts = [min(c, num_entities) for c in cuts]
    return list(zip(cuts[:-1], cuts[1:]))


def _part_settings(summary: dict) -> dict:
    keys = ("format_version", "mode", "max_in_edges", "strict_history", "max_path_length", "num_entities",
            "num_relations", "num_parts", "target_range", "input")
    return {**{k: summary.get(k) for k in keys}, "visited": summary.get("visited", VISITED_TARGET)}


def write_label_part(
    staging_dir: str | Path,
    part: int,
    graph: TemporalGraph,
    pairs: tuple[np.ndarray, np.ndarray],
    *,
    max_path_length: int,
    config: LabelingConfig = LabelingConfig(),
    options: WriteOptions = WriteOptions(),
) -> dict:
    """Label part ``part`` of ``num_parts = config.partitions`` (the pairs ``(targets, query_times)``,
    as :func:`label_pairs` gives them, whose target is in its :func:`part_target_ranges` range) into
    ``staging_dir/part-NNNNN``, atomically; returns its summary.

    A part already there with the same settings and ``options.input_hash`` is kept (an interrupted
    partitioned run resumes), any other is replaced. ``options.extra_summary`` is not read: a part's
    summary records its range and input instead.
    """
    num_parts, input_hash = config.partitions, options.input_hash
    targets, query_times = pairs
    if not 0 <= part < num_parts:
        raise ValueError(f"part must be in [0, {num_parts}), got {part}")
    lo, hi = part_target_ranges(targets, graph.num_entities, num_parts)[part]
    mode = "exact" if config.max_in_edges is None else f"top{config.max_in_edges}"
    extra = {"part": part, "num_parts": num_parts, "target_range": [lo, hi], "input": input_hash}
    out = Path(staging_dir) / PART_NAME.format(part)
    version = LABEL_FORMAT_VERSION_VIA if config.visited == VISITED_SUBJECT else LABEL_FORMAT_VERSION
    want = _part_settings({"format_version": version, "mode": mode, "max_in_edges": config.max_in_edges,
                           "strict_history": config.strict_history, "max_path_length": int(max_path_length),
                           "num_entities": int(graph.num_entities), "num_relations": int(graph.num_relations),
                           "visited": config.visited, **extra})
    if (out / SUMMARY_FILE).exists():
        have = json.loads((out / SUMMARY_FILE).read_text())
        if _part_settings(have) == want:
            return have
    mask = (np.asarray(targets) >= lo) & (np.asarray(targets) < hi)
    return write_labels(out, graph, np.asarray(targets)[mask], np.asarray(query_times)[mask],
                        max_path_length=max_path_length, config=config,
                        options=WriteOptions(progress=options.progress, compression_level=options.compression_level,
                                             extra_summary=extra))


def merge_label_parts(staging_dir: str | Path, out_dir: str | Path, num_parts: int,
                      extra_summary: Optional[dict] = None) -> dict:
    """Assemble the parts in ``staging_dir`` into the label directory ``out_dir`` (atomically:
    hard links, so the staging folder stays valid until the new directory is in place, then it is
    removed); returns the directory's summary. Refuses missing parts and parts of other settings."""
    import shutil

    staging_dir, out_dir = Path(staging_dir), Path(out_dir)
    names = [PART_NAME.format(i) for i in range(num_parts)]
    summaries = []
    for name in names:
        f = staging_dir / name / SUMMARY_FILE
        if not f.exists():
            raise FileNotFoundError(f"{staging_dir / name}: part {name} of {num_parts} is missing (label it first)")
        summaries.append(json.loads(f.read_text()))
    settings = [{k: v for k, v in _part_settings(s).items() if k not in ("target_range",)} for s in summaries]
    if any(st != settings[0] for st in settings) or any(s.get("part") != i for i, s in enumerate(summaries)):
        raise ValueError(f"{staging_dir}: the parts were labeled with different settings or inputs; label again")
    counts = np.concatenate([pq.read_table(staging_dir / n / PAIRS_FILE, columns=["num_rows"]).column(0).to_numpy()
                             for n in names]).astype(np.int64)
    quant = _rows_per_pair(counts)
    first = summaries[0]
    summary = {k: first[k] for k in ("format_version", "mode", "max_in_edges", "strict_history", "implementation",
                                      "workers", "max_path_length", "max_hops", "num_entities", "num_relations",
                                      "tie_break")}
    summary["visited"] = first.get("visited", VISITED_TARGET)
    summary.update({"pairs": int(len(counts)), "rows": int(counts.sum()), "rows_per_pair": quant,
                    "max_latest_time": max(int(s["max_latest_time"]) for s in summaries), "parts": names,
                    "part_wall_time_s": [s["wall_time_s"] for s in summaries]})
    if extra_summary:
        summary.update(extra_summary)
    with atomic_dir(out_dir, is_label_dir, "a label table") as tmp:
        for name in names:
            (tmp / name).mkdir()
            for f in (staging_dir / name).iterdir():
                os.link(f, tmp / name / f.name)
        summary["bytes_on_disk"] = _dir_bytes(tmp)
        atomic_write_json(tmp / SUMMARY_FILE, summary)
    shutil.rmtree(staging_dir, ignore_errors=True)
    return summary


class PartitionedLabels:
    """A partitioned label directory read one part at a time: what pretraining holds in memory with
    ``pretrain.labels_in_memory: part`` is one part's :class:`LabelTable`, not the whole table."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        summary = _check_label_dir(self.directory)
        if not summary.get("parts"):
            raise ValueError(f"{self.directory} is not partitioned: reading labels one part at a time "
                             f"(pretrain.labels_in_memory: part) needs labeling.partitions > 1")
        self.parts = [self.directory / name for name in summary["parts"]]
        self.target_ranges = [tuple(_check_label_dir(p)["target_range"]) for p in self.parts]
        self.max_path_length = int(summary["max_path_length"])
        self.meta = summary

    @property
    def num_parts(self) -> int:
        return len(self.parts)

    def load(self, part: int) -> LabelTable:
        return load_label_table(self.parts[part])


def staging_dir_of(out_dir: str | Path) -> Path:
    """Where the parts of ``out_dir`` are labeled before they are merged (a sibling folder)."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + ".parts")
