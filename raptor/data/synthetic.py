"""Tiny synthetic temporal knowledge graphs with planted, learnable patterns.

Used by the tests and by the end-to-end smoke run of the pipeline: the generated raw files have the
same layout as the published ICEWS splits (see ``write_raw``), so every stage runs on them unchanged.

Planted patterns (each a multi-hop reasoning rule an agent can learn):

* one-hop repetition: an event ``(s, r_a, o, t)`` is followed by ``(s, r_b, o, t + d)``; the query
  ``(s, r_b, ?, t + d)`` is answered by following the ``r_a`` edge out of ``s``;
* two-hop composition: ``(s, r_c, x, t1)`` and ``(x, r_d, o, t2)`` with ``t1 <= t2`` are followed by
  ``(s, r_e, o, t3)`` with ``t3 > t2``;
* background noise: uniformly random events.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from raptor.common.io import atomic_dir


@dataclass(frozen=True)
class SyntheticSpec:
    num_entities: int = 60
    #: Relations: 0..4 are the planted ones (r_a, r_b, r_c, r_d, r_e); the rest are noise.
    num_relations: int = 8
    num_timestamps: int = 40
    #: Planted one-hop and two-hop instances per timestamp, and noise events per timestamp.
    one_hop_per_step: int = 4
    two_hop_per_step: int = 3
    noise_per_step: int = 6
    #: Fraction of timestamps (from the start) in train, then valid; the rest is test.
    train_fraction: float = 0.7
    valid_fraction: float = 0.15
    #: Raw time unit: a raw timestamp is ``(day + first_day) * time_step`` (24 mimics ICEWS18's hours).
    time_step: int = 1
    first_day: int = 1
    seed: int = 0


def generate(spec: SyntheticSpec = SyntheticSpec()) -> dict[str, np.ndarray]:
    """Generate split quadruples (int64 ``[n, 4]``, times in days starting at 0), deduplicated."""
    if spec.num_relations < 6:
        raise ValueError(f"num_relations: at least 6 (5 planted relations and noise), got {spec.num_relations}")
    if spec.num_entities < 3 or spec.num_timestamps < 1:
        raise ValueError(f"num_entities >= 3 and num_timestamps >= 1, got {spec.num_entities} and {spec.num_timestamps}")
    if not (0 < spec.train_fraction and 0 <= spec.valid_fraction and spec.train_fraction + spec.valid_fraction < 1):
        raise ValueError(f"train_fraction > 0, valid_fraction >= 0 and their sum < 1, got {spec.train_fraction} and "
                         f"{spec.valid_fraction}")
    rng = np.random.default_rng(spec.seed)
    E, T = spec.num_entities, spec.num_timestamps
    R_A, R_B, R_C, R_D, R_E = 0, 1, 2, 3, 4
    quads: list[tuple[int, int, int, int]] = []
    for t in range(T):
        for _ in range(spec.noise_per_step):
            s, o = rng.choice(E, size=2, replace=False)
            quads.append((int(s), int(rng.integers(5, spec.num_relations)), int(o), t))
        for _ in range(spec.one_hop_per_step):
            s, o = rng.choice(E, size=2, replace=False)
            quads.append((int(s), R_A, int(o), t))
            d = int(rng.integers(1, 3))
            if t + d < T:
                quads.append((int(s), R_B, int(o), t + d))
        for _ in range(spec.two_hop_per_step):
            s, x, o = rng.choice(E, size=3, replace=False)
            t2 = t + int(rng.integers(0, 2))
            t3 = t2 + int(rng.integers(1, 3))
            if t3 < T:
                quads.append((int(s), R_C, int(x), t))
                quads.append((int(x), R_D, int(o), t2))
                quads.append((int(s), R_E, int(o), t3))
    arr = np.unique(np.array(quads, dtype=np.int64), axis=0)
    arr = arr[np.lexsort((arr[:, 2], arr[:, 1], arr[:, 0], arr[:, 3]))]
    n_train = int(round(T * spec.train_fraction))
    n_valid = int(round(T * spec.valid_fraction))
    t = arr[:, 3]
    return {
        "train": arr[t < n_train],
        "valid": arr[(t >= n_train) & (t < n_train + n_valid)],
        "test": arr[t >= n_train + n_valid],
    }


#: The first line of the entity dictionary each writer here writes: how a folder is known as theirs.
_SYNTHETIC_FIRST_ENTITIES = ("Entity 0 (Synthetic)\t0", "ENTITY_0\t0")


def _is_synthetic_raw(directory: Path) -> bool:
    """Whether ``directory`` holds a dataset written here (so writing again may replace it): its
    entity dictionary starts as :func:`write_raw`'s or :func:`write_scaled_raw`'s does."""
    try:
        with open(directory / "entity2id.txt", encoding="utf-8") as fh:
            first = fh.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError):
        return False
    return first in _SYNTHETIC_FIRST_ENTITIES


def write_raw(directory: str | Path, spec: SyntheticSpec = SyntheticSpec(), crlf: bool = False) -> Path:
    """Write a synthetic dataset in the published raw layout (tab-separated ids; ``name<TAB>id``).

    Entity names contain spaces, like ICEWS's. Returns ``directory``.
    """
    directory = Path(directory)
    splits = generate(spec)
    nl = "\r\n" if crlf else "\n"
    with atomic_dir(directory, _is_synthetic_raw, "a synthetic dataset") as tmp:
        for name, arr in splits.items():
            raw_t = (arr[:, 3] + spec.first_day) * spec.time_step
            lines = [f"{s}\t{r}\t{o}\t{tt}" for (s, r, o, _), tt in zip(arr.tolist(), raw_t.tolist())]
            (tmp / f"{name}.txt").write_text(nl.join(lines) + nl, newline="")
        ents = [f"Entity {i} (Synthetic)\t{i}" for i in range(spec.num_entities)]
        (tmp / "entity2id.txt").write_text(nl.join(ents) + nl, newline="")
        rel_names = ["Make statement", "Consult", "Host a visit", "Engage in negotiation", "Sign agreement"]
        rels = [
            f"{rel_names[i] if i < len(rel_names) else f'Noise relation {i}'}\t{i}"
            for i in range(spec.num_relations)
        ]
        (tmp / "relation2id.txt").write_text(nl.join(rels) + nl, newline="")
    return directory


# ------------------------------------------------------------------------------------ at scale


@dataclass(frozen=True)
class ScaleSpec:
    """A TKG of a published dataset's size and shape, for scale measurements (no planted rules).

    Entities and relations are drawn with Zipf-skewed popularity (rank ``k`` has weight ``k^-a``), a
    fraction ``recurrence`` of the facts repeats an earlier fact's ``(s, r, o)`` (events recur), and
    each split spreads its facts evenly over its own time steps, in temporal order. The default
    is GDELT as released by RE-NET: 7,691 entities, 240 relations, 2,976 15-minute steps (raw
    timestamps in minutes), 1,734,399 / 238,765 / 305,241 facts.
    """

    num_entities: int = 7691
    num_relations: int = 240
    num_timestamps: int = 2976
    train: int = 1_734_399
    valid: int = 238_765
    test: int = 305_241
    entity_zipf: float = 1.0
    relation_zipf: float = 1.0
    recurrence: float = 0.5
    #: Raw units per step (15: minutes, as GDELT's files).
    time_step: int = 15
    seed: int = 0


#: Named scale settings (``raptor synthetic --preset NAME``).
SCALE_PRESETS: dict[str, ScaleSpec] = {"gdelt": ScaleSpec()}


def _zipf_draw(rng: np.random.Generator, n: int, a: float, size: int) -> np.ndarray:
    w = np.arange(1, n + 1, dtype=np.float64) ** -a
    perm = rng.permutation(n)  # popular ids scattered over the id range
    return perm[np.searchsorted(np.cumsum(w / w.sum()), rng.random(size), side="right").clip(0, n - 1)]


def generate_scaled(spec: ScaleSpec) -> dict[str, np.ndarray]:
    """Split quadruples (int64 ``[n, 4]``, times in steps from 0), vectorised; duplicates within a
    step are kept once, so counts can be slightly below the spec's."""
    rng = np.random.default_rng(spec.seed)
    E, T = spec.num_entities, spec.num_timestamps
    sizes = np.array([spec.train, spec.valid, spec.test], np.int64)
    steps = np.maximum(np.round(T * sizes / sizes.sum()).astype(np.int64), 1)
    steps[0] = T - steps[1:].sum()
    bounds = np.concatenate([[0], np.cumsum(steps)])
    times = np.concatenate([bounds[i] + (np.arange(n) * steps[i]) // n for i, n in enumerate(sizes)])
    n = len(times)
    s = _zipf_draw(rng, E, spec.entity_zipf, n)
    o = _zipf_draw(rng, E, spec.entity_zipf, n)
    o = np.where(o == s, (o + 1 + rng.integers(0, E - 1, n)) % E, o)
    r = _zipf_draw(rng, spec.num_relations, spec.relation_zipf, n)
    again = np.flatnonzero(rng.random(n) < spec.recurrence)
    again = again[again > 0]
    src = (rng.random(len(again)) * again).astype(np.int64)  # an earlier (or same-step) fact
    s[again], r[again], o[again] = s[src], r[src], o[src]
    quads = np.unique(np.stack([times, s, r, o], 1), axis=0)[:, [1, 2, 3, 0]]
    t = quads[:, 3]
    return {name: quads[(t >= bounds[i]) & (t < bounds[i + 1])] for i, name in enumerate(("train", "valid", "test"))}


def write_scaled_raw(directory: str | Path, spec: ScaleSpec) -> Path:
    """Write :func:`generate_scaled` in the published id layout (raw time = step * time_step)."""
    directory = Path(directory)
    splits = generate_scaled(spec)
    with atomic_dir(directory, _is_synthetic_raw, "a synthetic dataset") as tmp:
        for name, arr in splits.items():
            out = arr.copy()
            out[:, 3] *= spec.time_step
            np.savetxt(tmp / f"{name}.txt", out, fmt="%d", delimiter="\t")
        (tmp / "entity2id.txt").write_text("".join(f"ENTITY_{i}\t{i}\n" for i in range(spec.num_entities)))
        (tmp / "relation2id.txt").write_text("".join(f"CAMEO_{i:03d}\t{i}\n" for i in range(spec.num_relations)))
    return directory
