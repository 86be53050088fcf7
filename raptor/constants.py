"""Shared ids and sentinels: the single place that fixes the id layout.

Relation ids (``R`` = number of relations in the dataset's dictionary)::

    0 .. R-1        forward relations, as in relation2id.txt
    R .. 2R-1       inverse relations: the inverse of r is r + R (INVERSE_OFFSET = R)
    2R              STOP, the self-loop action that keeps the agent in place
    2R + 1          padding (never a real action; masked everywhere)

Entity ids: ``0 .. E-1`` real entities, ``E`` the padding entity.
Times are int32 day indices after ingest (earliest timestamp = 0).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: Sentinel for "no edge / no value" in int index arrays (never a valid id or time).
NO_INDEX: int = -1

#: dtype of every id and time array on disk and in kernels.
ID_DTYPE = np.int32

#: Name of the split files the ingest stage reads and writes, in temporal order.
SPLITS: tuple[str, ...] = ("train", "valid", "test")

#: Quadruple columns, in order.
QUAD_COLUMNS: tuple[str, ...] = ("subject", "relation", "object", "time")

#: The cut-offs reported as Hits@k.
HITS_AT: tuple[int, ...] = (1, 3, 10)

#: Keys of the headline metrics (fractions in artifacts), in report order: the one metric list.
METRIC_KEYS: tuple[str, ...] = ("mrr",) + tuple(f"hits@{k}" for k in HITS_AT)


def inverse_relation(relation, num_relations: int):
    """Id of the inverse of ``relation`` (array or int): ``r + R``."""
    return relation + num_relations


def stop_relation(num_relations: int) -> int:
    """Id of the STOP self-loop relation: ``2R``."""
    return 2 * num_relations


def pad_relation(num_relations: int) -> int:
    """Id of the padding relation: ``2R + 1``."""
    return 2 * num_relations + 1


def relation_vocab_size(num_relations: int) -> int:
    """Rows of a relation embedding table: forward + inverse + STOP + padding."""
    return 2 * num_relations + 2


def pad_entity(num_entities: int) -> int:
    """Id of the padding entity: ``E``."""
    return num_entities


def entity_vocab_size(num_entities: int) -> int:
    """Rows of an entity embedding table: real entities + padding."""
    return num_entities + 1


def seed_dir(folder, seed: int) -> str:
    """A seed's folder inside a stage output that holds one run per seed (``.../seed0``)."""
    return str(Path(folder) / f"seed{seed}")


def arm_folder(pretrain_epochs: int) -> str:
    """The folder of the pretraining-epochs ablation's arm with ``pretrain_epochs`` pretraining epochs,
    inside its stage outputs (``.../p10``); it holds one ``seed<S>`` folder per seed."""
    return f"p{int(pretrain_epochs)}"

