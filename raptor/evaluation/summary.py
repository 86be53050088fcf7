"""Seed aggregates of run metrics: mean and sample standard deviation over seeds (no tests of significance:
those are :mod:`raptor.evaluation.stats`). Its own module so that what the fine-tuning stages run (their MLflow
parent run's aggregates) does not include the tests: an edit in them re-runs no training under DVC."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np


def summarize(per_seed: Mapping[int, Mapping[str, Any]], metrics: Sequence[str]) -> dict:
    """Mean and sample standard deviation (ddof=1; 0 for one seed) over seeds of each of ``metrics``:
    ``{"seeds": sorted seeds, "n": count, metric: {"mean": m, "std": s}}`` in the metrics' own units."""
    out: dict[str, Any] = {"seeds": sorted(per_seed), "n": len(per_seed)}
    for m in metrics:
        v = np.array([float(per_seed[s][m]) for s in sorted(per_seed)])
        out[m] = {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0}
    return out
