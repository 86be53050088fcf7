"""Reading an ingested dataset (the output of ``raptor ingest``) back into arrays."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raptor.common.io import read_json_object
from raptor.constants import ID_DTYPE, QUAD_COLUMNS, SPLITS, inverse_relation


@dataclass(frozen=True)
class Dataset:
    """An ingested TKG.

    Attributes:
        splits: split name -> int32 ``[n, 4]`` quadruples ``(subject, relation, object, time)``,
            times in day steps starting at 0.
        entity_names, relation_names: names indexed by id.
        meta: the contents of ``meta.json``.
    """

    splits: dict[str, np.ndarray]
    entity_names: list[str]
    relation_names: list[str]
    meta: dict

    @property
    def num_entities(self) -> int:
        return len(self.entity_names)

    @property
    def num_relations(self) -> int:
        return len(self.relation_names)

    def relation_label(self, rel: int) -> str:
        """A relation id's name for people: ``r < R`` its name, ``R <= r < 2R`` ``inverse of <name>``,
        ``2R`` (STOP) ``(stay)``."""
        R = self.num_relations
        if rel == 2 * R:
            return "(stay)"
        if not 0 <= rel < 2 * R:
            raise ValueError(f"relation id {rel} outside [0, {2 * R}]")
        return self.relation_names[rel] if rel < R else f"inverse of {self.relation_names[rel - R]}"

    def relation_labels(self) -> list[str]:
        """:meth:`relation_label` of every query relation id ``0 .. 2R - 1``."""
        return [self.relation_label(r) for r in range(2 * self.num_relations)]

    def all_quadruples(self) -> np.ndarray:
        return np.concatenate([self.splits[s] for s in SPLITS], axis=0)


def read_quadruples(path: str | Path) -> np.ndarray:
    """int32 ``[n, 4]`` from one split Parquet file."""
    table = pq.read_table(path, columns=list(QUAD_COLUMNS))
    return np.stack([table.column(c).to_numpy().astype(ID_DTYPE) for c in QUAD_COLUMNS], axis=1)


def load_dataset(directory: str | Path) -> Dataset:
    """Load ``train/valid/test.parquet``, the dictionaries and ``meta.json`` from ``directory``."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"{meta_path} not found: {directory} is not an ingested dataset (run `raptor ingest`)")
    for name in INGESTED_FILES:
        if not (directory / name).is_file():
            raise FileNotFoundError(
                f"{directory}: missing {name}: not a complete ingested dataset (run `raptor ingest`)"
            )
    meta = _read_meta(meta_path)
    splits = {s: _read_ingested(directory / f"{s}.parquet", read_quadruples) for s in SPLITS}
    ents = _read_ingested(directory / "entities.parquet", pq.read_table).sort_by("id")
    rels = _read_ingested(directory / "relations.parquet", pq.read_table).sort_by("id")
    return Dataset(
        splits=splits,
        entity_names=ents.column("name").to_pylist(),
        relation_names=rels.column("name").to_pylist(),
        meta=meta,
    )


INGESTED_FILES = ("meta.json", *(f"{s}.parquet" for s in SPLITS), "entities.parquet", "relations.parquet")
"""What ``raptor ingest`` writes: a dataset folder is complete only with all of them."""


def _read_meta(path: Path) -> dict:
    return read_json_object(path, "re-run `raptor ingest`")


def _read_ingested(path: Path, reader):
    """``reader(path)``, with an unreadable or wrong-shaped Parquet file named in the error."""
    try:
        return reader(path)
    except (pa.ArrowException, OSError, KeyError) as exc:
        what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: not a readable ingested Parquet file ({what}); re-run `raptor ingest`") from None


def with_inverse_queries(quads: np.ndarray, num_relations: int) -> np.ndarray:
    """Queries in both directions: ``(s, r, o, t)`` and ``(o, r + R, s, t)``, stacked (originals first).

    int32 ``[2n, 4]``; column 2 is the answer of each query.
    """
    quads = np.asarray(quads)
    inv = np.stack(
        [quads[:, 2], inverse_relation(quads[:, 1], num_relations), quads[:, 0], quads[:, 3]], axis=1
    )
    return np.concatenate([quads, inv], axis=0).astype(ID_DTYPE)
