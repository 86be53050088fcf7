"""The ``raptor label`` stage: an ingested dataset -> its label directory (:func:`label_dataset`),
in one piece or in parts labeled independently and then merged (:func:`label_part`,
:func:`merge_parts`)."""

from __future__ import annotations

import time as _time
from pathlib import Path
from typing import Optional

from raptor.config import LabelingConfig
from raptor.data.graph import TemporalGraph
from raptor.labeling.compute import label_pairs
from raptor.labeling.store import WriteOptions, merge_label_parts, staging_dir_of, write_label_part, write_labels


def _label_inputs(data_dir: str | Path, graph_path: Optional[str | Path]):
    """``(dataset meta, graph, targets, times)`` of the training pairs of an ingested dataset."""
    from raptor.data.dataset import load_dataset

    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"dataset folder not found: {data_dir} (run `raptor ingest` first)")
    ds = load_dataset(data_dir)
    train = ds.splits["train"]
    if len(train) == 0:
        raise ValueError(f"{data_dir}: the train split is empty; nothing to label")
    if graph_path is not None:
        graph = TemporalGraph.load(graph_path)
        if graph.num_entities != ds.num_entities or graph.num_relations != ds.num_relations:
            raise ValueError(
                f"{graph_path}: graph has {graph.num_entities} entities / {graph.num_relations} relations, "
                f"dataset {data_dir} has {ds.num_entities} / {ds.num_relations}"
            )
    else:
        graph = TemporalGraph.from_quadruples(ds.all_quadruples(), ds.num_entities, ds.num_relations)
    targets, times = label_pairs(train)
    return ds.meta, graph, targets, times


def _progress(show: bool, total: int, desc: str):
    if not show:
        return None
    from raptor.common.progress import progress_bar

    return progress_bar(total=total, unit="pair", desc=desc, mininterval=0.5, dynamic_ncols=True)


def label_part(
    data_dir: str | Path,
    out_dir: str | Path,
    part: int,
    *,
    max_path_length: int,
    config: LabelingConfig = LabelingConfig(),
    graph_path: Optional[str | Path] = None,
    show_progress: bool = False,
) -> dict:
    """One part of ``config.partitions`` of the label directory ``out_dir``, into its staging folder
    (:func:`staging_dir_of`): independent of the other parts, so parts run in other processes or on
    other machines (the label flow maps them over the task runner: threads or a Dask cluster)."""
    from raptor.common.provenance import content_hash

    meta, graph, targets, times = _label_inputs(data_dir, graph_path)
    bar = _progress(show_progress, len(targets), f"labeling part {part}")
    try:
        return write_label_part(staging_dir_of(out_dir), part, graph, (targets, times),
                                max_path_length=max_path_length, config=config,
                                options=WriteOptions(progress=bar.update if bar is not None else None,
                                                     input_hash=content_hash(data_dir)))
    finally:
        if bar is not None:
            bar.close()


def _data_summary(data_dir: str | Path, meta: dict) -> dict:
    """What a label table's ``summary.json`` says of the data it was labeled from: the dataset's name,
    its folder and the hash of its content (checked when a run pretrains with the table)."""
    from raptor.common.provenance import content_hash

    return {"dataset": meta.get("dataset"), "data_dir": str(data_dir), "data_hash": content_hash(data_dir)}


def merge_parts(data_dir: str | Path, out_dir: str | Path, config: LabelingConfig = LabelingConfig()) -> dict:
    """Assemble the ``config.partitions`` parts labeled by :func:`label_part` into ``out_dir``."""
    from raptor.data.dataset import load_dataset

    return merge_label_parts(staging_dir_of(out_dir), out_dir, config.partitions,
                             extra_summary=_data_summary(data_dir, load_dataset(data_dir).meta))


def label_dataset(
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    max_path_length: int,
    config: LabelingConfig = LabelingConfig(),
    graph_path: Optional[str | Path] = None,
    show_progress: bool = True,
) -> dict:
    """The ``raptor label`` stage: ingested dataset -> label directory; returns the summary.

    The graph holds all three splits (the one graph the environment uses); the ``< t_q`` window
    keeps only the history of each pair, so for the time-ordered splits this equals labeling on
    the training split alone. ``graph_path`` reuses the ``raptor graph`` output instead. With
    ``config.partitions > 1`` the parts are labeled one after the other here (resuming those already
    done) and merged: the same table, in a partitioned directory.
    """
    started = _time.perf_counter()
    if config.partitions > 1:
        for part in range(config.partitions):
            label_part(data_dir, out_dir, part, max_path_length=max_path_length, config=config,
                       graph_path=graph_path, show_progress=show_progress)
        summary = merge_parts(data_dir, out_dir, config)
        summary["stage_wall_time_s"] = round(_time.perf_counter() - started, 3)
        return summary
    meta, graph, targets, times = _label_inputs(data_dir, graph_path)
    bar = _progress(show_progress, len(targets), "labeling")
    try:
        summary = write_labels(
            out_dir,
            graph,
            targets,
            times,
            max_path_length=max_path_length,
            config=config,
            options=WriteOptions(progress=bar.update if bar is not None else None,
                                 extra_summary=_data_summary(data_dir, meta)),
        )
    finally:
        if bar is not None:
            bar.close()
    summary["stage_wall_time_s"] = round(_time.perf_counter() - started, 3)
    return summary
